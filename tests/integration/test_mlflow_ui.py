"""MLflow's UI, rendered by a real headless Chromium against a real `mlflow server`, shows a sweep's runs.

The store holds a two-trial sweep written as the driver writes it (tests/ui_pages.py, the same pages
`make screenshots` takes). The experiment page must list the parent run and both trials by name, and the
compare view of the two trials must show every parameter of both, as the store holds them (beta 0.4 vs 0.5).
Needs a headless Chromium (Debian's chromium-headless-shell, installed by clusters/ci_prereqs.sh): skipped
without one, failed without it when CI=true.
"""
import html
import re

import pytest
from mlflow.tracking import MlflowClient

from tests.slow.cluster_harness import in_ci
from tests.ui_pages import BROWSERS, browser, page_urls, render, write_sweep

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chromium():
    exe = browser()
    if exe is None:
        reason = f"no headless Chromium ({' or '.join(BROWSERS)}; install with: sudo bash clusters/ci_prereqs.sh)"
        if in_ci():
            pytest.fail(reason + " [CI: this test may not skip]", pytrace=False)
        pytest.skip(reason)
    return exe


@pytest.fixture(scope="module")
def sweep(mlflow_server, tmp_path_factory):
    """(experiment id, run name -> run id of each trial, parent run name) in the server's store."""
    exp_id, trials = write_sweep(mlflow_server.url, tmp_path_factory.mktemp("ui-sweep"))
    parent = MlflowClient(mlflow_server.url).get_experiment(exp_id).name  # the parent run is named after the sweep
    return exp_id, trials, parent


def texts(dom: str) -> list[str]:
    """The text nodes of a rendered page, in document order (scripts and styles left out)."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S)
    return [html.unescape(t).strip() for t in re.split(r"<[^>]*>", dom) if t.strip()]


def test_experiment_page_lists_the_sweeps_runs(chromium, mlflow_server, sweep):
    exp_id, trials, parent = sweep
    shown = texts(render(chromium, page_urls(mlflow_server.url, exp_id, list(trials.values()))["experiment"]))
    # MLflow 3's GenAI overview of the same experiment names no run; its runs table names all three
    assert sorted(trials) == ["beta=0.4-seed0", "beta=0.5-seed0"]
    for name in [parent, *trials]:
        assert name in shown, f"run {name!r} not on the experiment page; its texts: {shown[:80]}"
    assert "3 matching runs" in " ".join(shown)


def test_compare_view_shows_both_trials_parameters(chromium, mlflow_server, sweep):
    exp_id, trials, _ = sweep
    ids = list(trials.values())
    shown = texts(render(chromium, page_urls(mlflow_server.url, exp_id, ids)["compare"]))
    assert shown[shown.index("Run Name:") + 1: shown.index("Run Name:") + 3] == list(trials)
    # the Parameters section: a "Show diff only" switch, then one row per parameter (name, value of each run)
    start = shown.index("Parameters", shown.index("Run details"))
    rows = shown[shown.index("Show diff only", start) + 1: shown.index("Metrics", start)]
    table = {rows[i]: tuple(rows[i + 1: i + 3]) for i in range(0, len(rows), 3)}
    client = MlflowClient(mlflow_server.url)
    stored = [client.get_run(i).data.params for i in ids]
    assert len(rows) == 3 * len(stored[0])
    assert table == {k: (stored[0][k], stored[1][k]) for k in stored[0]}
    assert table["beta"] == ("0.4", "0.5") and table["method"] == ("ssat-mbi", "ssat-mbi")

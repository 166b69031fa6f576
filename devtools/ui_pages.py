"""MLflow's UI on a small sweep's store, rendered by a real headless Chromium.

`python -m devtools.ui_pages [OUT_DIR]` (`make screenshots`) writes PNGs of the experiment page that the demo's
link opens, of the compare view of two trials and of a search's link (docs/img by default);
tests/integration/test_mlflow_ui.py checks the same pages' rendered DOM. The store is written through the project's own
Tracker with the records a sweep writes (sweeps.tracking.run_records: the parent run, then one child run per trial with
its tags
and flat parameters, its last validation epoch and its final test metrics, as sweeps.trials.mlflow_callback logs them),
for a
grid as large as the demo's Table 2 (7 rows x 2 seeds = 14 trials) whose rows differ only in beta (0.1 ... 0.7). No
training: the numbers are made up (trial_metrics), in the units a trial reports (accuracy in percent).

MLflow 3.17's UI opens an experiment (`#/experiments/<id>`) on the GenAI overview or on the training runs by
its GenAI / Model training switch, not by the `mlflow.experimentKind` tag: the switch comes from the URL's
`workflowType`, else from the browser's last choice (local storage), GenAI in a fresh browser. So the URLs
here name `machine_learning`. The experiment page is the demo's link (sweeps.tracking.ui_link.ui_url, given the store):
the trials flat and sorted by name, the table's metrics as columns (a view it saves in the experiment).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

from sweeps.tracking.provenance import code_version
from sweeps.tracking.run_records import sweep_record
from sweeps.spec import load_spec
from sweeps.tracking.tracker import Tracker
from sweeps.tracking.ui_link import ui_url
from sweeps.trials.trial_settings import resolve_trial
from devtools.sweep_helpers import write_spec
from devtools.servers import MlflowServer

# Debian's old headless shell (package chromium-headless-shell) first, then a full Chromium in headless mode.
BROWSERS = ("chromium-headless-shell", "chromium")
SWEEP = "ui-demo"
ROWS = [{"row": f"beta=0.{i}", "set": {"method.beta": i / 10}} for i in range(1, 8)]
SEEDS = (0, 1)
EPOCHS = 2  # the spec's (write_spec): the step of the last validation epoch and of the final metrics
# The two trials of the compare view: they differ only in beta
COMPARED = ("beta=0.4 s0", "beta=0.5 s0")
# The UI is a single-page app that fetches the runs after it loads: virtual time runs on until the page is idle
# or this budget is spent, so the DOM and the screenshot are taken after the fetches, not of a spinner.
BUDGET_MS = 15000
# Window sizes (screenshots and rendered DOM): the experiment page is tall enough for the 15 runs (the table renders
# only the rows and columns in sight), the compare view for the parameter table.
WINDOWS = {"experiment": (1600, 1000), "compare": (1400, 1600), "search": (1600, 900)}


def trial_metrics(row: int, seed: int) -> tuple[dict[str, float], dict[str, float]]:
    """(last validation epoch, final test metrics) of the trial of ROWS[row] and `seed`: made-up accuracies in
    percent, a different value for every trial and metric, exact in two decimals."""
    n = 2 * row + seed
    epoch = {"val/pgd10": round(70.2 + 0.4 * n, 2)}
    return epoch, {"test/best/clean": round(98.1 - 0.1 * n, 2), "test/best/pgd20": round(71.25 + 0.5 * n, 2)}


def browser() -> str | None:
    """The first headless Chromium on PATH, or None."""
    return next(filter(None, map(shutil.which, BROWSERS)), None)


def write_sweep(uri: str, workdir: Path) -> tuple[str, dict[str, str]]:
    """A 14-trial grid sweep's runs in `uri`, as the driver and its callback write them (sweeps.driver.sweep.execute,
    sweeps.trials.mlflow_callback: the run, then each reported epoch, then the final metrics). Returns (experiment id,
    run name -> run id of each trial)."""
    spec_path = write_spec(workdir / f"{SWEEP}.yaml", SWEEP, rows=ROWS, seeds=SEEDS, epochs=EPOCHS)
    spec = load_spec(spec_path)
    tracker = Tracker(uri, spec.name, log=lambda s: None)
    parent = sweep_record(spec.name, spec.table, str(spec_path), spec.preset, code_version())
    tracker.ensure_run(parent.key, parent.tags, parent.params, name=parent.name)
    _send(tracker)  # a busy server may time a write out: the tracker then retries it, so wait for the parent's id
    parent_id = tracker.find_run(parent.key)
    meta = {"sweep": spec.name, "table": spec.table, "column_group": spec.column_group,
            "expected_seeds": spec.expected_seeds}
    keys = {}
    for t in spec.trials():
        _, m = resolve_trial({"meta": {**meta, "stage": t.stage, "row": t.row, "seed": t.seed},
                              "cfg": t.config.to_dict()})
        rec = m["record"]
        tracker.ensure_run(rec.key, {**rec.tags, "ssat.status": "FINISHED", "mlflow.parentRunId": parent_id},
                           rec.params, name=rec.name)
        epoch, final = trial_metrics([r["row"] for r in ROWS].index(t.row), t.seed)
        tracker.log_epoch(rec.key, epoch, EPOCHS)
        tracker.log_final(rec.key, final, {}, EPOCHS)
        tracker.end(rec.key)
        keys[rec.name] = rec.key
    tracker.set_tags(parent.key, {"ssat.status": "FINISHED"})
    tracker.end(parent.key)
    _send(tracker)
    return tracker.experiment_id, {name: tracker.find_run(key) for name, key in keys.items()}


SEARCH = "ui-search"
SAMPLED = [{"method.beta": b, "method.tau": t} for b, t in ((0.12, 1.5), (0.83, 2.5), (0.41, 0.7), (0.95, 3.1),
                                                            (0.27, 1.1), (0.66, 2.0))]
CONFIRM_SEEDS = (10, 11)


def search_metrics(i: int) -> float:
    """The made-up last val/pgd10 of search trial `i`: distinct, not in the order the trials ran."""
    return round(60.0 + (7 * i) % 6 + 0.25 * i, 2)


def search_spec(workdir: Path):
    search = {"num_samples": len(SAMPLED), "space": {"method.beta": {"float": [0.0, 1.0]},
                                                     "method.tau": {"float": [0.5, 4.0]}},
              "confirm": {"top_k": 2, "seeds": list(CONFIRM_SEEDS)}}
    return load_spec(write_spec(workdir / f"{SEARCH}.yaml", SEARCH, epochs=EPOCHS, search=search))


def write_search(uri: str, workdir: Path) -> tuple[str, dict[str, str]]:
    """A search sweep's runs in `uri` as the driver writes them: 6 search trials (their sampled beta and tau, a
    last val/pgd10 each), then the best two configurations' confirm trials over two seeds (with test metrics).
    Returns (experiment id, run name -> run id)."""
    spec = search_spec(workdir)
    tracker = Tracker(uri, spec.name, log=lambda s: None)
    parent = sweep_record(spec.name, spec.table, f"{SEARCH}.yaml", spec.preset, code_version())
    tracker.ensure_run(parent.key, parent.tags, parent.params, name=parent.name)
    _send(tracker)
    meta = {"sweep": spec.name, "table": "", "column_group": spec.column_group, "expected_seeds": 1,
            "parent": tracker.find_run(parent.key)}
    keys = {}
    for i, sampled in enumerate(SAMPLED):
        keys.update(_search_run(tracker, spec, meta, "search", sampled, spec.seeds[0], {"val/pgd10": search_metrics(i)},
                                {}))
    best = sorted(range(len(SAMPLED)), key=lambda i: -search_metrics(i))[:2]
    for rank, i in enumerate(best, 1):
        for seed in CONFIRM_SEEDS:
            keys.update(_search_run(tracker, spec, meta, "confirm", SAMPLED[i], seed,
                                    {"val/pgd10": search_metrics(i) - seed / 10},
                                    {"test/best/clean": 90.0 + rank, "test/best/pgd20": 55.0 + seed / 10}, rank))
    tracker.end(parent.key)
    _send(tracker)
    return tracker.experiment_id, {name: tracker.find_run(key) for name, key in keys.items()}


def _search_run(tracker, spec, meta, stage, sampled, seed, epoch, final, rank=None) -> dict[str, str]:
    if stage == "search":
        config = {"trial": {"meta": {**meta, "stage": stage, "row": "", "seed": seed}, "base": spec.base}, **sampled}
    else:
        config = {"trial": {"meta": {**meta, "stage": stage, "row": f"confirm-{rank}", "seed": seed,
                                     "confirms": {"rank": rank, "sampled": sampled}},
                            "base": spec.config_for(sampled, seed).to_dict()}}
    rec = resolve_trial(config)[1]["record"]
    tracker.ensure_run(rec.key, {**rec.tags, "ssat.status": "FINISHED", "mlflow.parentRunId": meta["parent"]},
                       rec.params, name=rec.name)
    tracker.log_epoch(rec.key, epoch, EPOCHS)
    if final:
        tracker.log_final(rec.key, final, {}, EPOCHS)
    tracker.end(rec.key)
    return {rec.name: rec.key}


def _send(tracker: Tracker) -> None:
    if not tracker.flush(timeout=120):
        raise RuntimeError(f"the sweep's runs could not be written to {tracker.uri}")


def page_urls(server: str, experiment_id: str, run_ids: list[str]) -> dict[str, str]:
    """The experiment's runs table as the demo links it (ui_url with the store: it saves its view in the
    experiment, once) and the compare view of `run_ids`, as MLflow 3.17's UI routes them (hash routes; the compare
    view takes JSON lists, as the UI's Compare button builds them). The runs table sorted by name lists the trials
    flat; sorted by creation (the default) it folds them under their parent run."""
    compare = urllib.parse.urlencode({"runs": json.dumps(run_ids), "experiments": json.dumps([experiment_id]),
                                      "workflowType": "machine_learning"})
    return {"experiment": ui_url(experiment_id, server, store=server),
            "compare": f"{server}/#/compare-runs?{compare}"}


def render(exe: str, url: str, screenshot: Path | None = None, window: tuple[int, int] = (1400, 900),
           timeout: float = 180.0) -> str:
    """Load `url` in a fresh headless Chromium (its own temporary profile, so no view the UI kept in local storage)
    in a `window` and return the rendered DOM, or with `screenshot` write a PNG there instead. The browser runs in
    its own process group, killed through its PID if it outlives `timeout`."""
    with tempfile.TemporaryDirectory(prefix="ssat-chromium-") as profile:
        what = [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        what.append(f"--window-size={window[0]},{window[1]}")
        # --no-sandbox: tests and CI run as root, where Chromium's sandbox refuses to start
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               f"--user-data-dir={profile}", f"--virtual-time-budget={BUDGET_MS}", *what, url]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise RuntimeError(f"{exe} did not finish {url} in {timeout:.0f} s") from None
    if proc.returncode != 0 or (screenshot and not screenshot.exists()):
        raise RuntimeError(f"{exe} failed on {url} (exit {proc.returncode}): {err[-2000:]}")
    return out


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "docs/img")
    exe = browser()
    if exe is None:
        print(f"no headless Chromium on PATH (looked for {', '.join(BROWSERS)}); "
              "on Debian: apt-get install chromium-headless-shell", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ssat-ui-") as tmp:
        server = MlflowServer(Path(tmp) / "mlflow").start()
        try:
            exp_id, trials = write_sweep(server.url, Path(tmp))
            urls = page_urls(server.url, exp_id, [trials[n] for n in COMPARED])
            search_id, _ = write_search(server.url, Path(tmp))
            urls["search"] = ui_url(search_id, server.url, store=server.url, spec=search_spec(Path(tmp)))
            for page, url in urls.items():
                png = out / f"mlflow-{page}.png"
                render(exe, url, screenshot=png.resolve(), window=WINDOWS[page])
                print(f"{png}: {url}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""MLflow's UI on a small sweep's store, rendered by a real headless Chromium.

`python -m tests.ui_pages [OUT_DIR]` (`make screenshots`) writes PNGs of the experiment page and of the
compare view of two trials (docs/img by default); tests/integration/test_mlflow_ui.py checks the same pages'
rendered DOM. The store is written through the project's own Tracker with the records a sweep writes
(sweeps.schema: the parent run, then one child run per trial with its tags and flat parameters), for a
two-row grid that differs only in beta (0.4, 0.5). No training: the pages show runs and parameters, no metrics.

MLflow 3.17's UI opens an experiment (`#/experiments/<id>`) on the GenAI overview or on the training runs by
its GenAI / Model training switch, not by the `mlflow.experimentKind` tag: the switch comes from the URL's
`workflowType`, else from the browser's last choice (local storage), GenAI in a fresh browser. So the URLs
here name `machine_learning`.
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

from sweeps.paths import code_version
from sweeps.schema import sweep_record
from sweeps.spec import load_spec
from sweeps.tracking import Tracker
from sweeps.trainable import resolve_trial
from tests.integration.sweep_helpers import write_spec
from tests.servers import MlflowServer

# Debian's old headless shell (package chromium-headless-shell) first, then a full Chromium in headless mode.
BROWSERS = ("chromium-headless-shell", "chromium")
SWEEP = "ui-demo"
ROWS = [{"row": "beta=0.4", "set": {"method.beta": 0.4}}, {"row": "beta=0.5", "set": {"method.beta": 0.5}}]
# The UI is a single-page app that fetches the runs after it loads: virtual time runs on until the page is idle
# or this budget is spent, so the DOM and the screenshot are taken after the fetches, not of a spinner.
BUDGET_MS = 15000
# Window sizes of the screenshots: the compare view is tall enough to show the parameter table.
WINDOWS = {"experiment": (1400, 700), "compare": (1400, 1600)}


def browser() -> str | None:
    """The first headless Chromium on PATH, or None."""
    return next(filter(None, map(shutil.which, BROWSERS)), None)


def write_sweep(uri: str, workdir: Path) -> tuple[str, dict[str, str]]:
    """A two-trial grid sweep's runs in `uri`, as the driver and its callback write them (sweeps.driver.execute,
    sweeps.callback._start). Returns (experiment id, run name -> run id of each trial)."""
    spec_path = write_spec(workdir / f"{SWEEP}.yaml", SWEEP, rows=ROWS)
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
        tracker.end(rec.key)
        keys[rec.name] = rec.key
    tracker.set_tags(parent.key, {"ssat.status": "FINISHED"})
    tracker.end(parent.key)
    _send(tracker)
    return tracker.experiment_id, {name: tracker.find_run(key) for name, key in keys.items()}


def _send(tracker: Tracker) -> None:
    if not tracker.flush(timeout=120):
        raise RuntimeError(f"the sweep's runs could not be written to {tracker.uri}")


def page_urls(server: str, experiment_id: str, run_ids: list[str]) -> dict[str, str]:
    """The experiment's runs table and the compare view of `run_ids`, as MLflow 3.17's UI routes them (hash
    routes; the compare view takes JSON lists, as the UI's Compare button builds them). The runs table sorted
    by name lists the trials flat; sorted by creation (the default) it folds them under their parent run."""
    runs = urllib.parse.urlencode({"workflowType": "machine_learning", "orderByKey": "tags.`mlflow.runName`",
                                   "orderByAsc": "true"})
    compare = urllib.parse.urlencode({"runs": json.dumps(run_ids), "experiments": json.dumps([experiment_id]),
                                      "workflowType": "machine_learning"})
    return {"experiment": f"{server}/#/experiments/{experiment_id}/runs?{runs}",
            "compare": f"{server}/#/compare-runs?{compare}"}


def render(exe: str, url: str, screenshot: Path | None = None, window: tuple[int, int] = (1400, 900),
           timeout: float = 180.0) -> str:
    """Load `url` in a fresh headless Chromium (its own temporary profile) and return the rendered DOM, or with
    `screenshot` write a PNG of the `window` there instead. The browser runs in its own process group, killed
    through its PID if it outlives `timeout`."""
    with tempfile.TemporaryDirectory(prefix="ssat-chromium-") as profile:
        what = ([f"--screenshot={screenshot}", f"--window-size={window[0]},{window[1]}"] if screenshot
                else ["--dump-dom"])
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
            urls = page_urls(server.url, exp_id, list(trials.values()))
            for page, url in urls.items():
                png = out / f"mlflow-{page}.png"
                render(exe, url, screenshot=png.resolve(), window=WINDOWS[page])
                print(f"{png}: {url}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

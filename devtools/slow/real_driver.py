"""Real sweep drivers for the slow tier: `python -m sweeps` processes running the smoke spec
(sweeps/specs/mnist5k-smoke.yaml, 2 trials) on a local Ray of their own, tracked in MLflow SQLite in their work
folder, and what a finished sweep must hold. The fixtures using these are in conftest.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

ROOT = Path(__file__).resolve().parents[2]
SMOKE = "sweeps/specs/mnist5k-smoke.yaml"
NAME = "mnist5k-smoke"


def sweep_env(work: Path, ray_tmp: str, teachers: Path, fault: str = "pause@2:1") -> dict:
    """A driver's environment: its Ray's files under `ray_tmp` (short: Ray's socket paths have a length limit),
    the module's teacher cache, and `fault` fired once per run (markers in <work>/once)."""
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT), "SSAT_RAY_TMPDIR": ray_tmp,
            "SSAT_TEACHER_DIR": str(teachers), "SSAT_FAULT": fault, "SSAT_FAULT_ONCE_DIR": str(work / "once"),
            "SSAT_TRACKING_FLUSH_S": "20"}


def kill_ray_leftovers(ray_tmp: str) -> None:
    """End every process the Ray sessions under `ray_tmp` left, by pid (never `ray stop`: other Rays run here)."""
    from sweeps.driver.lock import leftover_ray_processes

    for session in Path(ray_tmp).glob("session_2*"):
        for pid, _ in leftover_ray_processes(str(session)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def cli(env: dict, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeps", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def start_driver(work: Path, env: dict, epochs: int = 2, log: Path | None = None) -> subprocess.Popen:
    """`run` of the smoke spec in `work`, its console in `log` (default <work>/driver.log)."""
    log = open(log or work / "driver.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "sweeps", "run", SMOKE, "--epochs", str(epochs), "--workdir",
                             str(work)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def paused_trials(work: Path, driver: subprocess.Popen, timeout: float = 480) -> list[int]:
    """The pids of the trial processes once both trials are paused in epoch 2 (their fault markers name them)."""
    once, deadline = work / "once", time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert driver.poll() is None, (work / "driver.log").read_text()[-3000:]
        markers = sorted(once.glob("pause@2_1-*")) if once.exists() else []
        if len(markers) == 2:
            time.sleep(1)  # the pause starts right after its marker is written
            return [int(m.read_text().split(" pid ")[1]) for m in markers]
        time.sleep(1)
    raise AssertionError("the trials never paused:\n" + (work / "driver.log").read_text()[-3000:])


def assert_finished_unharmed(work: Path, epochs: int = 2) -> None:
    """Every run of the sweep FINISHED, each trial with every epoch once and its final evaluation; the sweep done,
    its driver.lock gone."""
    uri = f"sqlite:///{work / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(NAME)
    runs = client.search_runs([exp.experiment_id], max_results=100)
    kinds = sorted(r.data.tags.get("ssat.kind") for r in runs)
    assert kinds == ["sweep", "teacher", "trial", "trial"] or kinds == ["sweep", "trial", "trial"], kinds
    for r in runs:
        assert r.info.status == "FINISHED", (r.data.tags.get("ssat.key"), r.info.status, r.data.tags.get("ssat.status"))
        if r.data.tags.get("ssat.kind") == "trial":
            assert r.data.tags["ssat.status"] == "FINISHED"
            for key in ("val/pgd10", "train/loss"):
                assert [m.step for m in client.get_metric_history(r.info.run_id, key)] == \
                    list(range(1, epochs + 1)), (key, r.data.tags)
            assert "test/best/clean" in r.data.metrics
    state = json.loads((work / "runs" / "sweeps" / NAME / "sweep.json").read_text())
    assert state["status"] == "done" and state["phases"] == {"grid": "done"}, state
    assert not (work / "runs" / "sweeps" / NAME / "driver.lock").exists()


def assert_no_traceback(out: str) -> None:
    """What a person must not see on the console: a Python traceback, Ray's C++ stack dump, Ray's raylet notice."""
    for bad in ("Traceback", "*** SIG", "StackTrace", "Aborted", "A worker died or was killed", "Trial task failed"):
        assert bad not in out, out[max(0, out.find(bad) - 2000):out.find(bad) + 2000]

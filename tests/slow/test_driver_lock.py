"""One driver per sweep, with real drivers: `python -m sweeps` processes running a real tiny Ray sweep
(sweeps/specs/mnist5k-smoke.yaml, 2 trials, --epochs 2, a local Ray of the driver's own) tracked in MLflow SQLite.

Each sweep is held in its second epoch by a fault (SSAT_FAULT=pause@2:1, once per run: every trial stops one step
into epoch 2, after epoch 1's checkpoint), so its driver is certainly running when the test acts:
- while the driver runs, `resume` of the same sweep is refused (exit code 2, the message names the driver) and
  writes nothing, and `status` says the driver runs; then the paused trial processes are ended (the only way out
  of a pause), Tune restarts them from their checkpoints, and the running sweep finishes unharmed: exit 0, every
  run FINISHED, each epoch logged once;
- a driver SIGKILLed (itself only, as the OOM killer would): `status` says it is not running and how to resume,
  and names the Ray processes it left; `resume` takes its lock over, saying so in one line, and finishes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = "sweeps/specs/mnist5k-smoke.yaml"
NAME = "mnist5k-smoke"


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    return tmp_path_factory.mktemp("teachers")  # the smoke split's teacher, trained by the first driver only


@pytest.fixture
def sweep(tmp_path, teachers):
    """(work folder, environment) of one sweep; afterwards every process its Ray sessions left is ended by pid."""
    rtmp = tempfile.mkdtemp(prefix="rl", dir="/tmp")  # short: Ray's socket paths have a length limit
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT), "SSAT_RAY_TMPDIR": rtmp,
           "SSAT_TEACHER_DIR": str(teachers), "SSAT_FAULT": "pause@2:1", "SSAT_FAULT_ONCE_DIR": str(tmp_path / "once"),
           "SSAT_TRACKING_FLUSH_S": "20"}
    yield tmp_path, env
    from sweeps.driver_lock import leftover_ray_processes

    for session in Path(rtmp).glob("session_2*"):
        for pid, _ in leftover_ray_processes(str(session)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def cli(env: dict, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweeps", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def start_driver(work: Path, env: dict) -> subprocess.Popen:
    log = open(work / "driver.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "sweeps", "run", SMOKE, "--epochs", "2", "--workdir", str(work)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


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


def assert_finished_unharmed(work: Path) -> None:
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
                assert [m.step for m in client.get_metric_history(r.info.run_id, key)] == [1, 2], (key, r.data.tags)
            assert "test/best/clean" in r.data.metrics
    state = json.loads((work / "runs" / "sweeps" / NAME / "sweep.json").read_text())
    assert state["status"] == "done" and state["phases"] == {"grid": "done"}, state
    assert not (work / "runs" / "sweeps" / NAME / "driver.lock").exists()


def test_a_second_driver_is_refused_while_the_first_runs_and_the_first_finishes(sweep):
    work, env = sweep
    driver = start_driver(work, env)
    try:
        trials = paused_trials(work, driver)
        sweep_dir = work / "runs" / "sweeps" / NAME
        before = {p.name: p.read_bytes() for p in (sweep_dir / "sweep.json", sweep_dir / "driver.lock")}
        sessions = sorted(Path(env["SSAT_RAY_TMPDIR"]).glob("session_2*"))
        t0 = time.monotonic()
        second = cli(env, "resume", NAME, "--workdir", str(work), timeout=120)
        refused_s = time.monotonic() - t0
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        err = second.stderr
        assert err.startswith(f"error: sweep {NAME} already has a driver: pid {driver.pid} on host "), err
        assert f"(`python -m sweeps run {SMOKE} --epochs 2 --workdir {work}`, since " in err, err
        assert "s ago. One driver per sweep: wait for it to finish, follow it with " \
               f"`python -m sweeps status {NAME} --workdir {work}`, or interrupt it with " \
               f"`python -m sweeps stop {NAME} --workdir {work}`" in err, err
        assert "Traceback" not in err
        # the refused driver wrote nothing and started no Ray
        assert json.loads(before["driver.lock"])["pid"] == driver.pid
        assert {p.name: p.read_bytes() for p in (sweep_dir / "sweep.json", sweep_dir / "driver.lock")}["sweep.json"] \
            == before["sweep.json"]
        assert sorted(Path(env["SSAT_RAY_TMPDIR"]).glob("session_2*")) == sessions

        status = cli(env, "status", NAME, "--workdir", str(work), timeout=120)
        assert status.returncode == 0, status.stderr
        assert f"driver: pid {driver.pid} on host " in status.stdout and " s ago" in status.stdout, status.stdout

        for pid in trials:  # out of the pause: Tune restarts each trial from epoch 1's checkpoint (once: no pause)
            os.kill(pid, signal.SIGKILL)
        assert driver.wait(480) == 0, (work / "driver.log").read_text()[-3000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    out = (work / "driver.log").read_text()
    assert f"sweep {NAME} finished; runs in" in out and "[stage] grid: 2/2 trials finished" in out, out[-3000:]
    assert_finished_unharmed(work)
    print(f"resume refused in {refused_s:.1f} s")


def test_a_killed_drivers_sweep_says_so_and_resume_takes_its_lock_over(sweep):
    work, env = sweep
    driver = start_driver(work, env)
    try:
        paused_trials(work, driver)
        lock = json.loads((work / "runs" / "sweeps" / NAME / "driver.lock").read_text())
        assert lock["pid"] == driver.pid and lock["ray_session"], lock
        os.kill(driver.pid, signal.SIGKILL)  # the driver only: what it started is left to fend for itself
        driver.wait(30)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    from sweeps.driver_lock import leftover_ray_processes

    status = cli(env, "status", NAME, "--workdir", str(work), timeout=120)
    left = leftover_ray_processes(lock["ray_session"])
    assert status.returncode == 0, status.stderr
    assert f"driver pid {driver.pid} is not running (no process {driver.pid} on this host, host " in status.stdout
    assert f"resume with `python -m sweeps resume {NAME} --workdir {work}`" in status.stdout, status.stdout
    if left:  # Ray's agents outlive a SIGKILLed driver for a minute or two: status names those still there
        line = next(ln for ln in status.stdout.splitlines() if ln.startswith("its local Ray left these running:"))
        assert all(f"pid {pid}" in line for pid, _ in left), (line, left)
        assert any("Agent" in name for _, name in left), left
    print("after the SIGKILL:", left)

    res = cli(env, "resume", NAME, "--workdir", str(work))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    took = [ln for ln in res.stdout.splitlines() if ln.startswith("[driver] took over driver.lock")]
    assert took == [f"[driver] took over driver.lock from pid {driver.pid} on host {lock['host']} (`python -m sweeps "
                    f"run {SMOKE} --epochs 2 --workdir {work}`): no process {driver.pid} on this host"], took
    assert_finished_unharmed(work)

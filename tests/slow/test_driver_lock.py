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
import time
from pathlib import Path

import pytest

from devtools.slow.real_driver import (NAME, SMOKE, assert_finished_unharmed, assert_no_traceback, cli, paused_trials,
                         start_driver)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


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
    # each killed trial is one console line (which trial, which attempt, why); Ray's notice and traceback are in
    # the sweep's log
    retried = sorted(ln.split(": attempt")[0] for ln in out.splitlines()
                     if ": attempt 2 of 3, after epoch 1: its worker process died (ActorDiedError); it resumes from "
                        "its last checkpoint (details: " in ln)
    assert retried == ["[sweep] const|on s0", "[sweep] curious|on s0"], out[-3000:]
    assert_no_traceback(out)
    log = (work / "runs" / "sweeps" / NAME / "sweep.log").read_text()
    assert log.count("Trial task failed for trial") == 2 and "ActorDiedError" in log and "A worker died" in log
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
    from sweeps.driver.lock import leftover_ray_processes

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

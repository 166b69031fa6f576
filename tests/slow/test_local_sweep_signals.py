"""A local sweep on one machine, as a scheduler or a closed terminal meets it (issue 32, items 1, 2 and 6), with
real drivers: `python -m sweeps run` of the smoke spec at 3 epochs on a local Ray of its own, MLflow SQLite.

Every trial pauses once one step into epoch 2 (SSAT_FAULT pause@2:1), so the driver certainly runs when the test
acts, and dies once one step into epoch 3 (exit@3:1: a killed worker, in the resumed run). While the trials pause:
- every socket the driver's process tree listens on (the driver, Ray's GCS, raylet, dashboard process, agents and
  trial workers) is bound to loopback: none on the wildcard or the machine's network address;
- SIGTERM (what `kill`, SLURM and systemd send) or SIGHUP (a closed terminal) stops the sweep as Ctrl+C does:
  exit 1, INCOMPLETE naming the signal, the resume command printed, the cut runs KILLED with the reason, no
  traceback and no stack dump.
Then (after SIGTERM; the resume is the same whatever stopped the sweep) `resume` finishes it: the killed workers
are one line each, every run FINISHED with epochs 1-3 once each.
"""
from __future__ import annotations

import os
import re
import signal
import time

import pytest
from mlflow.tracking import MlflowClient

from devtools.slow.real_driver import (NAME, assert_finished_unharmed, assert_no_traceback, cli, paused_trials,
                                       start_driver, sweep_env)
from devtools.sockets import listening_sockets

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.parametrize("sig,group", [(signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGTERM, True),
                                       (signal.SIGHUP, True)],
                         ids=["SIGTERM", "SIGHUP", "SIGTERM-to-the-group", "SIGHUP-to-the-group"])
def test_a_local_sweep_listens_on_loopback_only_and_a_signal_stops_it_as_ctrl_c_does(sweep, teachers, sig, group):
    """`group`: the signal goes to the driver's whole process group, as a closed terminal, `timeout`, systemd or a
    container's stop send it (issue 44, item 1): Ray's processes are not in it, so the driver alone stops the
    sweep, as for its own signal (before, Ray's GCS and raylet died with it and its runs stayed RUNNING)."""
    work, env = sweep
    env = sweep_env(work, env["SSAT_RAY_TMPDIR"], teachers, fault="pause@2:1,exit@3:1")
    driver = start_driver(work, env, epochs=3)
    try:
        paused_trials(work, driver)
        sockets = listening_sockets(driver.pid)
        outside = [s for s in sockets if not s.loopback]
        programs = " ".join(s.name for s in sockets)
        print(f"{len(sockets)} listening sockets, {len(outside)} outside loopback:", *sockets, sep="\n  ")
        assert outside == [], outside
        # it measured Ray's tree, not an empty one: the GCS, the raylet, both paused trial workers and the driver
        assert "gcs_server" in programs and "raylet" in programs and len(sockets) >= 8, sockets
        t0 = time.monotonic()
        os.killpg(driver.pid, sig) if group else driver.send_signal(sig)
        rc = driver.wait(180)
        print(f"{sig.name} to exit {rc} in {time.monotonic() - t0:.1f} s")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    out = (work / "driver.log").read_text()
    assert rc == 1, out[-3000:]
    assert (f"sweep {NAME} is INCOMPLETE: stage grid interrupted ({sig.name}). Resume with:\n"
            f"  python -m sweeps resume {NAME} --workdir {work}\n") in out, out[-3000:]
    assert_no_traceback(out)
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(NAME).experiment_id], max_results=100)
    by_kind = {}
    for r in runs:
        by_kind.setdefault(r.data.tags["ssat.kind"], []).append(r)
    assert len(by_kind["trial"]) == 2 and not any(r.info.status == "RUNNING" for r in runs)
    for r in by_kind["trial"]:
        assert r.info.status == "KILLED", r.data.tags
        assert r.data.tags["ssat.status"] == (f"KILLED: interrupted ({sig.name}) in epoch 2; resume with: python -m "
                                              f"sweeps resume {NAME} --workdir {work}"), r.data.tags["ssat.status"]
    (parent,) = by_kind["sweep"]
    assert parent.info.status == "KILLED" and parent.data.tags["ssat.status"].startswith(
        f"KILLED: interrupted ({sig.name}) in stage grid; resume with: ")

    assert not (work / "runs" / "sweeps" / NAME / "driver.lock").exists()
    assert not (work / "runs" / "sweeps" / NAME / "disk_reserve").exists()
    if sig != signal.SIGTERM or group:
        return  # the resume after a stop is the same whatever stopped it: once is enough
    res = cli(env, "resume", NAME, "--workdir", str(work))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert_no_traceback(res.stdout + res.stderr)
    # one line per killed worker; its attempt counts the failures Tune recorded, the stop's own included when its
    # kill of the paused worker was processed first (then 3 of 3)
    retried = sorted(ln.split(": attempt")[0] for ln in res.stdout.splitlines()
                     if re.search(r": attempt [23] of 3, after epoch 2: its worker process died \(ActorDiedError\); "
                                  r"it resumes from its last checkpoint \(details: .*/error\.txt\)$", ln))
    assert retried == ["[sweep] const|on s0", "[sweep] curious|on s0"], res.stdout[-3000:]
    assert_finished_unharmed(work, epochs=3)


@pytest.mark.parametrize("stage", ["teacher", "ray"])
def test_a_group_sigterm_in_the_teacher_or_ray_stage_ends_the_sweep_cleanly(tmp_path, stage):
    """Issue 44, items 1 and 3: SIGTERM to the driver's group while its teacher trains, or while its local Ray
    starts (Ray's own handler used to exit 15 there, leaving the run RUNNING, with no message): exit 1, INCOMPLETE
    in that stage, no run RUNNING, no traceback, and `resume` goes on."""
    import tempfile

    from devtools.slow.real_driver import kill_ray_leftovers

    work = tmp_path / "w"
    work.mkdir()
    ray_tmp = tempfile.mkdtemp(prefix="rd", dir="/tmp")
    teachers = tmp_path / "teachers"  # its own: the teacher trains in this sweep
    env = sweep_env(work, ray_tmp, teachers, fault="")
    driver = start_driver(work, env, epochs=2)
    marker = "teacher step " if stage == "teacher" else "[stage] teacher: "
    try:
        deadline = time.monotonic() + 480
        while marker not in (work / "driver.log").read_text():
            assert driver.poll() is None and time.monotonic() < deadline, (work / "driver.log").read_text()[-3000:]
            time.sleep(0.05)
        os.killpg(driver.pid, signal.SIGTERM)
        rc = driver.wait(180)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        kill_ray_leftovers(ray_tmp)
    out = (work / "driver.log").read_text()
    assert rc == 1, out[-3000:]
    stopped_in = re.search(rf"sweep {NAME} is INCOMPLETE: stage (\w+) interrupted \(SIGTERM\)", out)
    assert stopped_in and stopped_in.group(1) in ({"teacher"} if stage == "teacher" else {"ray", "grid"}), out[-3000:]
    assert_no_traceback(out)
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(NAME).experiment_id], max_results=100)
    assert runs and not [r.data.tags.get("ssat.key") for r in runs if r.info.status == "RUNNING"]
    res = cli(env, "resume", NAME, "--workdir", str(work))
    kill_ray_leftovers(ray_tmp)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert_finished_unharmed(work, epochs=2)


def test_a_group_sigterm_in_a_resumed_searchs_confirm_stage_ends_it_cleanly(tmp_path):
    """Issue 44, item 1, as seen: a search stopped in its search stage, resumed, and the resumed driver's confirm
    stage ended by `timeout` (SIGTERM to the driver's process group): exit 1, INCOMPLETE in stage confirm, no run
    RUNNING, no traceback, and a second `resume` finishes the sweep (before, 3 runs stayed RUNNING)."""
    import subprocess
    import sys
    import tempfile

    from devtools.slow.real_driver import ROOT, kill_ray_leftovers
    from devtools.sweep_helpers import write_spec

    work = tmp_path / "w"
    work.mkdir()
    search = {"num_samples": 2, "sampler_seed": 0, "space": {"method.beta": {"float": [0.0, 1.0]}},
              "confirm": {"top_k": 1, "seeds": [10]}}
    spec = write_spec(work / "search.yaml", "cut-confirm", epochs=2, search=search,
                      overrides={"attack.schedule": "const"})
    ray_tmp = tempfile.mkdtemp(prefix="rc", dir="/tmp")

    def driver(fault: str, *argv: str) -> subprocess.Popen:
        env = sweep_env(work, ray_tmp, tmp_path / "teachers", fault=fault)
        log = open(work / "driver.log", "wb")
        return subprocess.Popen([sys.executable, "-m", "sweeps", *argv, "--workdir", str(work)], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop_when_paused(proc: subprocess.Popen, marker: str, group: bool) -> tuple[int, str]:
        try:
            deadline = time.monotonic() + 480
            while not ((work / "once").exists() and any((work / "once").glob(marker))):
                assert proc.poll() is None and time.monotonic() < deadline, (work / "driver.log").read_text()[-3000:]
                time.sleep(0.2)
            time.sleep(1)  # the pause starts right after its marker is written
            os.killpg(proc.pid, signal.SIGTERM) if group else proc.send_signal(signal.SIGTERM)
            return proc.wait(180), (work / "driver.log").read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    try:
        rc, out = stop_when_paused(driver("pause@2:1/seed=0", "run", str(spec)), "pause@2_1_seed=0-*", group=False)
        assert rc == 1 and "sweep cut-confirm is INCOMPLETE: stage search interrupted (SIGTERM)" in out, out[-3000:]
        rc, out = stop_when_paused(driver("pause@2:1/seed=10", "resume", "cut-confirm"), "pause@2_1_seed=10-*",
                                   group=True)
        assert rc == 1, out[-3000:]
        assert "sweep cut-confirm is INCOMPLETE: stage confirm interrupted (SIGTERM). Resume with:" in out, out[-3000:]
        assert "Tuner.restore(" not in out  # Tune's own resume advice stays in the sweep's log (item 8)
        assert_no_traceback(out)
        client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
        exp = client.get_experiment_by_name("cut-confirm").experiment_id
        runs = client.search_runs([exp], max_results=100)
        assert not [(r.data.tags.get("ssat.key"), r.data.tags.get("ssat.status")) for r in runs
                    if r.info.status == "RUNNING"]
        (confirm,) = [r for r in runs if r.data.tags.get("ssat.stage") == "confirm"]
        assert confirm.info.status == "KILLED" and confirm.data.tags["ssat.status"].startswith(
            "KILLED: interrupted (SIGTERM) in epoch 2; resume with: ")
        res = subprocess.run([sys.executable, "-m", "sweeps", "resume", "cut-confirm", "--workdir", str(work)],
                             cwd=ROOT, env=sweep_env(work, ray_tmp, tmp_path / "teachers", fault=""),
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        runs = client.search_runs([exp], max_results=100)
        assert all(r.info.status == "FINISHED" for r in runs), [(r.data.tags.get("ssat.key"), r.info.status)
                                                                 for r in runs]
        assert sorted(r.data.tags.get("ssat.stage", "") for r in runs if r.data.tags["ssat.kind"] == "trial") == [
            "confirm", "search", "search"]
    finally:
        kill_ray_leftovers(ray_tmp)

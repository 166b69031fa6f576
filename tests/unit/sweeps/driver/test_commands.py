"""`python -m sweeps run|resume` as the driver sees them, without Ray (the stages are stand-ins) and with a real
MLflow SQLite store: what is refused before anything is written (a finished sweep, a sweep another driver
holds), and how a sweep that stops short is left (its run FAILED or KILLED with the reason, no run RUNNING, the
state not saying that a driver runs, the lock released)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient

import sweeps.driver.sweep as D
from sweeps.driver.commands import _driver_lines
from sweeps.cli import main
from sweeps.driver.lock import LOCK_FILE, Host, LockInfo, proc_start_ticks
from sweeps.errors import SweepError

SPEC = """\
name: s
preset: mnist5k-ssat-mbi
seeds: [0]
resources: {cpu: 1, gpu: 0}
grid:
  - {row: a, set: {method.beta: 0.5}}
"""


@pytest.fixture
def work(tmp_path, monkeypatch, capsys):
    """A work folder with the spec, an empty real MLflow store (a cached copy: making its tables takes seconds), and
    the driver's heavy parts replaced: no teacher, no Ray."""
    empty = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ssat-sweeps" / \
        f"mlflow{mlflow.__version__}-empty-store.db"
    if not empty.exists():
        MlflowClient(f"sqlite:///{tmp_path / 'empty.db'}").search_experiments(max_results=1)
        empty.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "empty.db", f"{empty}.{os.getpid()}")
        os.replace(f"{empty}.{os.getpid()}", empty)
        (tmp_path / "empty.db").unlink()
    shutil.copy(empty, tmp_path / "mlflow.db")
    (tmp_path / "s.yaml").write_text(SPEC)
    monkeypatch.setattr(D, "teacher_stage", lambda *a, **k: {})
    monkeypatch.setattr(D, "init_ray", lambda address: None)
    monkeypatch.setattr(D, "check_gpu", lambda spec: None)
    monkeypatch.setenv("SSAT_TRACKING_FLUSH_S", "5")
    for var in ("RAY_AUTH_MODE", "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S"):
        monkeypatch.setenv(var, os.environ.get(var, "x"))  # main() setdefaults them: restored after the test
    capsys.readouterr()
    return tmp_path


def run(work: Path, *extra: str) -> int:
    return main(["run", str(work / "s.yaml"), "--workdir", str(work), *extra])


def snapshot(folder: Path) -> dict:
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file()}


def runs(work: Path) -> dict:
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    exp = client.get_experiment_by_name("s")
    return {r.data.tags["ssat.key"]: r for r in client.search_runs([exp.experiment_id])}


def state(work: Path) -> dict:
    return json.loads((work / "runs" / "sweeps" / "s" / "sweep.json").read_text())


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def live_lock(work: Path, pid: int) -> Path:
    here, path = Host.here(), work / "runs" / "sweeps" / "s" / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    import time

    path.write_bytes(LockInfo(pid, here.name, here.boot_id, proc_start_ticks(pid), time.time() - 60, time.time() - 2,
                              "python -m sweeps run s.yaml", "t").to_json())
    return path


def stage_that(outcome):
    """A stand-in for one Tune stage: it makes the stage's trial run (RUNNING, as a trial cut by a crash leaves it),
    then returns or raises `outcome`."""
    def _run_stage(stage, spec, paths, st, tracker, meta, interrupt, resume, rerun_failed, log):
        st.phases[stage] = "running"
        st.save(paths)
        tracker.ensure_run("s-trial", {"ssat.kind": "trial"}, {}, name="a-seed0")
        tracker.drain()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    return _run_stage


def test_a_finished_sweep_is_not_run_again_and_nothing_is_written(work, monkeypatch, capsys):
    monkeypatch.setattr(D, "_run_stage", lambda *a, **k: None)
    assert run(work) == 0
    before = snapshot(work)
    assert state(work)["status"] == "done"
    assert run(work, "--epochs", "10") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: sweep s is already finished (started "), err
    assert f"nothing was run. Its runs are in sqlite:///{work / 'mlflow.db'}, experiment s" in err
    assert f"its state is in {work / 'runs' / 'sweeps' / 's'}" in err
    assert f"`python -m sweeps run {work / 's.yaml'} --name s-2 --workdir {work}`" in err
    assert snapshot(work) == before  # no file changed, none added, none removed


def test_no_run_or_resume_while_a_driver_lives_and_nothing_is_written(work, sleeper, capsys):
    lock = live_lock(work, sleeper.pid)
    before = snapshot(work)
    assert run(work) == 2  # the first run of the sweep: its lock is held already
    assert f"error: sweep s already has a driver: pid {sleeper.pid} on host " in capsys.readouterr().err
    assert snapshot(work) == before and not (work / "runs" / "sweeps" / "s" / "sweep.json").exists()

    lock.unlink()
    D.SweepState(name="s", spec_path="s.yaml", source={}, tracking_uri="sqlite:///x.db", args=D.RunArgs()).save(
        D.sweep_paths(work, "s"))
    live_lock(work, sleeper.pid)
    before = snapshot(work)
    for argv in (["resume", "s"], ["sync", "s"], ["run", str(work / "s.yaml")]):
        assert main([*argv, "--workdir", str(work)]) == 2
        err = capsys.readouterr().err
        assert "already has a driver" in err and "last heartbeat 2 s ago" in err, (argv, err)
    assert snapshot(work) == before

    (work / "runs" / "sweeps" / "s" / LOCK_FILE).unlink()
    assert run(work) == 2  # not finished, no driver: resume it
    assert f"is not finished; use `python -m sweeps resume s --workdir {work}`" in capsys.readouterr().err
    assert not (work / "runs" / "sweeps" / "s" / LOCK_FILE).exists()


def test_a_stage_with_unfinished_trials_ends_the_sweeps_run_failed(work, monkeypatch, capsys):
    monkeypatch.setattr(D, "_run_stage", stage_that("finished 0/1 trials"))
    assert run(work) == 1
    out = capsys.readouterr().out
    assert "sweep s is INCOMPLETE: stage grid finished 0/1 trials. Resume with:" in out
    resume = f"python -m sweeps resume s --workdir {work}"
    got = runs(work)
    parent, trial = got["s-sweep"], got["s-trial"]
    assert parent.info.status == "FAILED"
    assert parent.data.tags["ssat.status"] == f"FAILED: stage grid finished 0/1 trials; resume with: {resume}"
    assert trial.info.status == "KILLED"  # nothing had ended it: the driver does
    assert trial.data.tags["ssat.status"] == ("KILLED: the sweep stopped in stage grid (finished 0/1 trials) while "
                                              f"this run was RUNNING; resume with: {resume}")
    assert state(work)["status"] == "incomplete"
    assert not (work / "runs" / "sweeps" / "s" / LOCK_FILE).exists()
    assert _driver_lines(D.sweep_paths(work, "s"), D.SweepState.load(D.sweep_paths(work, "s"))) == [
        f"no driver; resume with `{resume}`"]


@pytest.mark.parametrize("written_by", ["settle", "a settle that outlived its stop"])
def test_a_stoppers_cause_names_the_stop_and_a_stale_one_is_ignored(work, monkeypatch, capsys, written_by):
    """SLURM's settle writes its cause (stop_cause), then sends Ctrl+C: the runs' reasons name SLURM, not Ctrl+C.
    A file left from an earlier stop is removed when a driver starts, so this driver's own Ctrl+C says Ctrl+C."""
    import signal

    stale = written_by != "settle"
    cause_file = D.sweep_paths(work, "s").stop_cause
    if stale:
        cause_file.parent.mkdir(parents=True, exist_ok=True)
        cause_file.write_text("SLURM ended job 3 (an old stop)\n")

    def _run_stage(stage, spec, paths, st, tracker, meta, interrupt, resume, rerun_failed, log):
        stage_that(None)(stage, spec, paths, st, tracker, meta, interrupt, resume, rerun_failed, log)
        if not stale:
            paths.stop_cause.write_text("SLURM ended job 7 (scancel, a requeue or its time limit)\nsecond line\n")
        os.kill(os.getpid(), signal.SIGINT)  # outside a Tune stage: KeyboardInterrupt from the driver's handler
        pytest.fail("the stop signal must interrupt the stage")

    monkeypatch.setattr(D, "_run_stage", _run_stage)
    assert run(work) == 1
    cause = "Ctrl+C" if stale else "SLURM ended job 7 (scancel, a requeue or its time limit)"
    resume = f"python -m sweeps resume s --workdir {work}"
    got = runs(work)
    assert got["s-sweep"].data.tags["ssat.status"] == (
        f"KILLED: interrupted ({cause}) in stage grid; resume with: {resume}")
    assert got["s-trial"].data.tags["ssat.status"] == (
        f"KILLED: the sweep stopped in stage grid (interrupted ({cause})) while this run was RUNNING; "
        f"resume with: {resume}")
    assert f"sweep s is INCOMPLETE: stage grid interrupted ({cause}). Resume with:" in capsys.readouterr().out


@pytest.mark.parametrize("error,code", [(SweepError("no GPU anywhere"), 2), (RuntimeError("TuneError: boom"), None),
                                        (KeyboardInterrupt(), 1)])
def test_an_error_in_a_stage_ends_the_sweeps_run_and_releases_the_lock(work, monkeypatch, capsys, error, code):
    monkeypatch.setattr(D, "_run_stage", stage_that(error))
    if code is None:
        with pytest.raises(RuntimeError, match="TuneError: boom"):
            run(work)
    else:
        assert run(work) == code
    got = runs(work)
    parent, trial = got["s-sweep"], got["s-trial"]
    if isinstance(error, KeyboardInterrupt):
        assert parent.info.status == "KILLED"
        assert parent.data.tags["ssat.status"].startswith("KILLED: interrupted (Ctrl+C) in stage grid; resume with")
    else:
        assert parent.info.status == "FAILED"
        assert parent.data.tags["ssat.status"].startswith(
            f"FAILED: stage grid stopped by {type(error).__name__}: {error}; resume with: python -m sweeps resume s")
    assert trial.info.status == "KILLED"
    assert state(work)["status"] == "incomplete"
    assert not (work / "runs" / "sweeps" / "s" / LOCK_FILE).exists()
    assert "Resume with:\n  python -m sweeps resume s" in capsys.readouterr().out


# ---- status, stop and sync: every line in full ------------------------------------------------------------------
def a_sweep(tmp_path: Path, uri: str = "sqlite:///nowhere.db", status: str = "running", source: dict | None = None,
            driver_pid: int | None = 4242):
    from sweeps.driver.sweep import RunArgs, SweepState
    from sweeps.paths import sweep_paths

    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True, exist_ok=True)
    source = source or {"name": "s", "preset": "mnist5k-ssat-mbi", "grid": [{"row": "a"}]}
    state = SweepState(name="s", spec_path="s.yaml", source=source, tracking_uri=uri, args=RunArgs(), status=status,
                       driver_pid=driver_pid)
    state.save(paths)
    return paths, state


def a_lock(paths, pid: int, **fields) -> LockInfo:
    import dataclasses
    import time

    here = Host.here()
    info = dataclasses.replace(LockInfo(pid, here.name, here.boot_id, proc_start_ticks(pid), time.time() - 60,
                                        time.time(), "python -m sweeps run s.yaml", "t"), **fields)
    (paths.sweep_dir / LOCK_FILE).write_bytes(info.to_json())
    return info


def stamp(t: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(t).isoformat(sep=" ", timespec="seconds")


def test_the_driver_lines_of_a_live_a_dead_and_an_older_driver(tmp_path, sleeper):
    import time

    paths, state = a_sweep(tmp_path)
    info = a_lock(paths, sleeper.pid, started=1_700_000_000.0, heartbeat=time.time() + 5)  # a clock a bit ahead
    assert _driver_lines(paths, state) == [
        f"driver: pid {sleeper.pid} on host {info.host} runs (`python -m sweeps run s.yaml`, since "
        f"{stamp(1_700_000_000.0)}); last heartbeat 0 s ago"]
    resume = f"resume with `python -m sweeps resume s --workdir {tmp_path}`"
    # another host's stale lock: its Ray's leftovers are not looked for here, even in a folder of this host
    session = tmp_path / "session"
    session.mkdir()
    with open(session / "log", "w") as log:
        agents = [subprocess.Popen(["sleep", "300"], stdout=log) for _ in range(2)]
    try:
        a_lock(paths, 4242, host="node-2", boot_id="b", heartbeat=time.time() - 600, ray_session=str(session))
        (line,) = _driver_lines(paths, state)
        assert line == f"driver pid 4242 is not running (no heartbeat for 600 s (over 60 s), host node-2); {resume}"
        a_lock(paths, 4242, start_ticks=1, ray_session=str(session))  # this host's: listed, all of them
        lines = _driver_lines(paths, state)
        pids = sorted(a.pid for a in agents)
        assert lines[1] == (f"its local Ray left these running: pid {pids[0]} (sleep), pid {pids[1]} (sleep); they "
                            f"train nothing and exit on their own (or now: `kill {pids[0]} {pids[1]}`)")
    finally:
        for a in agents:
            a.kill()
            a.wait()
    (paths.sweep_dir / LOCK_FILE).unlink()
    older, _ = a_sweep(tmp_path, driver_pid=sleeper.pid)
    assert _driver_lines(older, D.SweepState.load(older)) == [
        f"driver pid {sleeper.pid} may still run (it left no driver.lock: an older version)"]
    gone = subprocess.Popen(["true"])
    gone.wait()
    for pid in (gone.pid, None):
        paths, state = a_sweep(tmp_path, driver_pid=pid)
        assert _driver_lines(paths, state) == [f"driver pid {pid} is not running; {resume}"]
    paths, state = a_sweep(tmp_path, status="done")
    assert _driver_lines(paths, state) == []


def test_status_counts_a_searchs_trials_and_tabulates_every_stage(tmp_path, store, monkeypatch):
    from sweeps.driver.commands import sweep_status

    search = {"name": "s", "preset": "mnist5k-ssat-mbi", "metric": "val/pgd10", "mode": "max",
              "search": {"num_samples": 5, "space": {"method.beta": {"float": [0.0, 1.0]}},
                         "confirm": {"top_k": 2, "seeds": [10, 11, 12]}}}
    a_sweep(tmp_path, store, status="incomplete", source=search)
    c = MlflowClient(store)
    exp = c.create_experiment("s")
    long = "FAILED: " + "x" * 32  # 40 characters: shown whole
    longer = long + "y"  # 41: cut
    for name, stage, status, pgd in [("s1", "search", "FINISHED", 0.0), ("s2", "search", "FINISHED", 0.5),
                                     ("s3", "search", "STOPPED_EARLY: asha at epoch 1 of 4", 0.9),
                                     ("s4", "search", long, float("nan")), ("c1", "confirm", longer, None),
                                     ("old", None, "FINISHED", 0.1)]:
        tags = {"ssat.kind": "trial", "ssat.status": status, **({"ssat.stage": stage} if stage else {})}
        run = c.create_run(exp, run_name=name, tags=tags)
        if pgd is not None:
            c.log_metric(run.info.run_id, "val/pgd10", pgd)
    for kind in ("sweep", "teacher"):  # the sweep's own run and its teacher's: no trials, not counted
        c.log_metric(c.create_run(exp, run_name=kind, tags={"ssat.kind": kind, "ssat.status": "FINISHED"}).info.run_id,
                     "val/pgd10", 1.0)
    monkeypatch.chdir(tmp_path)
    lines = sweep_status("s").splitlines()  # the work folder by default: here
    head, by = lines[2].split(": ", 1)
    assert head == "trials expected 11; runs by status" and json.loads(by) == {  # 5 + 2 x 3
        "FINISHED": 3, "STOPPED_EARLY": 1, "FAILED": 2}
    assert lines[3:] == [
        "  stage      trial  status                                    val/pgd10",
        "  search   * s2     FINISHED                                       0.50",
        "  search     s1     FINISHED                                       0.00",
        f"  search     s4     {long}          -",  # NaN: no value, last of the finished
        "  search     s3     STOPPED_EARLY: asha at epoch 1 of 4            0.90",  # fewer epochs: after the rest
        f"  confirm    c1     {long[:39]}…          -",
        "           * old    FINISHED                                       0.10",  # a run of no stage: last
        "  (* the best of its stage by val/pgd10, max)"]


def test_status_ranks_a_minimised_metric_with_a_zero_first(tmp_path, store):
    from sweeps.driver.commands import trial_lines

    spec = parse({"name": "s", "preset": "mnist5k-ssat-mbi", "metric": "train/loss", "mode": "min",
                  "grid": [{"row": "a"}]})
    c = MlflowClient(store)
    exp = c.create_experiment("s")
    for name, loss in [("b", 0.5), ("a", 0.0), ("c", 0.5)]:
        run = c.create_run(exp, run_name=name, tags={"ssat.kind": "trial", "ssat.stage": "grid"})
        c.log_metric(run.info.run_id, "train/loss", loss)
    rows = [" ".join(ln.split()) for ln in trial_lines(c.search_runs([exp]), spec)[1:-1]]
    assert rows == ["grid * a RUNNING 0.00", "grid b RUNNING 0.50", "grid c RUNNING 0.50"]  # ties by name


def parse(raw: dict):
    from sweeps.spec import parse_spec

    return parse_spec(raw)


def test_stop_says_why_nothing_was_signalled(tmp_path, sleeper, capsys, monkeypatch):
    import time

    import sweeps.driver.commands as C
    from sweeps.driver.commands import stop_sweep

    paths, _ = a_sweep(tmp_path, status="done")
    assert stop_sweep("s", workdir=tmp_path) == 1
    assert capsys.readouterr().out == (f"sweep s: no driver holds it (no driver.lock in {paths.sweep_dir}); nothing "
                                       "signalled; it is finished\n")
    paths, _ = a_sweep(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert stop_sweep("s") == 1  # the work folder by default: here
    assert capsys.readouterr().out.endswith(f"nothing signalled; resume it with `python -m sweeps resume s --workdir "
                                            f"{tmp_path}`\n")
    here = Host.here()
    elsewhere = f"sweep s: its driver, pid {sleeper.pid}, is on host node-2, not this one ({here.name}): nothing " \
                "signalled; run `python -m sweeps stop s` there"
    a_lock(paths, sleeper.pid, host="node-2", boot_id="b", heartbeat=time.time())
    assert stop_sweep("s", workdir=tmp_path) == 1 and capsys.readouterr().out == elsewhere + "\n"
    a_lock(paths, sleeper.pid, host="node-2", boot_id="b", heartbeat=time.time() - 100)
    assert stop_sweep("s", workdir=tmp_path) == 1
    assert capsys.readouterr().out == elsewhere + " (it may be gone: no heartbeat for 100 s (over 60 s))\n"
    for fields in ({"boot_id": "another boot"}, {"boot_id": ""}):  # this host, but not (known to be) this boot
        a_lock(paths, sleeper.pid, heartbeat=time.time(), **fields)
        assert stop_sweep("s", workdir=tmp_path) == 1 and "nothing signalled" in capsys.readouterr().out
    a_lock(paths, sleeper.pid, start_ticks=None)
    assert stop_sweep("s", workdir=tmp_path) == 1
    assert capsys.readouterr().out == (f"sweep s: driver.lock gives no start time for pid {sleeper.pid}, so it "
                                       "cannot be told from a reused pid: nothing signalled; interrupt the driver "
                                       "where it runs (Ctrl+C)\n")
    a_lock(paths, sleeper.pid)
    monkeypatch.setattr(C, "signal_holder", lambda lock, sig: False)  # it ended between the look and the signal
    assert stop_sweep("s", workdir=tmp_path) == 1
    assert capsys.readouterr().out == (f"sweep s: driver pid {sleeper.pid} ended just now; nothing signalled; "
                                       f"resume it with `python -m sweeps resume s --workdir {tmp_path}`\n")
    assert sleeper.poll() is None


def test_sync_sends_what_dead_drivers_left_and_says_how_many(tmp_path, store, capsys):
    from sweeps.driver.commands import sync_sweep
    from sweeps.tracking.tracker import Tracker

    paths, _ = a_sweep(tmp_path, store)
    spool = paths.sweep_dir / "tracking_spool.otherhost.1.0.jsonl"  # a dead driver's journal
    left = json.dumps({"op": "ensure", "key": "k", "tags": {"ssat.kind": "trial"}, "params": {}, "name": "a s0"})
    spool.write_text(left + "\n")
    assert sync_sweep("s", workdir=tmp_path) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "sync s: 1 spooled operation(s); all sent"
    assert Tracker(store, "s", log=lambda s: None).find_run("k") is not None
    assert not (paths.sweep_dir / LOCK_FILE).exists()  # held only while it synced
    away, _ = a_sweep(tmp_path / "away", "http://127.0.0.1:9")  # nothing listens on the discard port
    (away.sweep_dir / "tracking_spool.otherhost.1.0.jsonl").write_text(left + "\n")
    assert sync_sweep("s", workdir=tmp_path / "away", timeout=0.5) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "sync s: 1 spooled operation(s); store still unreachable, kept"


def test_run_and_resume_hand_each_stage_what_it_needs(work, monkeypatch, capsys):
    """What the driver passes on, seen from stand-in stages: a first run, a stopped one resumed with
    --rerun-failed (the sweep's state, its lock naming this driver, its local Ray's session, the teachers' run),
    and a resume on a cluster given by --address (whose session is not this driver's)."""
    seen, inits = [], []
    lock_path = work / "runs" / "sweeps" / "s" / LOCK_FILE

    def _run_stage(stage, spec, paths, st, tracker, meta, interrupt, resume, rerun_failed, log):
        seen.append({"stage": stage, "spec": spec.name, "resume": resume, "rerun_failed": rerun_failed,
                     "status": st.status, "pid": st.driver_pid, "lock": json.loads(lock_path.read_text()),
                     "meta": {k: meta[k] for k in ("teacher_dir", "compile_cache", "teacher_run_id")},
                     "code": sorted(set(meta) - {"teacher_dir", "compile_cache", "teacher_run_id"}),
                     "tracker": tracker is not None and tracker.experiment_id is not None,
                     "address": st.args.address})
        return "stopped for the test" if len(seen) == 1 else None

    monkeypatch.setattr(D, "_run_stage", _run_stage)
    monkeypatch.setattr(D, "teacher_stage", lambda *a, **k: {"split-1": "teacher-run-1"})
    monkeypatch.setattr(D, "init_ray", inits.append)
    monkeypatch.setattr(D, "session_dir", lambda: "/tmp/ray/session_test")
    checked = []
    monkeypatch.setattr(D, "check_gpu", checked.append)
    assert run(work) == 1
    assert D.resume_sweep("s", workdir=work, rerun_failed=True) == 0  # as code calls it: its own command line
    folder = work / "runs" / "sweeps" / "s"
    first, second = seen
    assert (first["resume"], first["rerun_failed"], second["resume"], second["rerun_failed"]) == (
        False, False, True, True)
    assert [s["stage"] for s in seen] == ["grid", "grid"] and all(s["spec"] == "s" and s["tracker"] for s in seen)
    assert all(s["status"] == "running" and s["pid"] == os.getpid() for s in seen)
    assert first["lock"]["command"] == f"python -m sweeps run {work / 's.yaml'} --workdir {work}"  # the CLI's
    assert second["lock"]["command"] == "python -m sweeps resume s"
    assert all(s["lock"]["pid"] == os.getpid() and s["lock"]["ray_session"] == "/tmp/ray/session_test" for s in seen)
    assert first["meta"] == {"teacher_dir": str(folder.parents[1] / "teachers"),
                             "compile_cache": str(folder.parents[1] / "compile_cache"),
                             "teacher_run_id": "teacher-run-1"} == second["meta"]
    assert first["code"] == ["git_commit", "git_dirty", "lock_sha256"]
    assert inits == [None, None] and [spec.name for spec in checked] == ["s", "s"]
    assert state(work)["status"] == "done"
    assert "sweep s finished" in capsys.readouterr().out

    D.sweep_paths(work, "s").state.write_text(json.dumps({**state(work), "status": "incomplete",
                                                          "phases": {}}))
    seen.clear()
    assert main(["resume", "s", "--workdir", str(work), "--address", "10.0.0.1:6379"]) == 1  # stopped again
    assert inits[-1] == "10.0.0.1:6379" and seen[0]["address"] == "10.0.0.1:6379"
    assert seen[0]["lock"]["ray_session"] is None  # another cluster's session: not this driver's to name
    assert seen[0]["rerun_failed"] is False


def test_a_resume_names_the_store_it_cannot_reach_and_writes_nothing(work, monkeypatch, capsys):
    from sweeps.tracking.tracker import TrackingUnavailable

    monkeypatch.setattr(D, "_run_stage", stage_that("stopped for the test"))
    assert run(work) == 1
    paths = D.sweep_paths(work, "s")
    before = paths.state.read_bytes()
    gone = "sqlite:////proc/nowhere/mlflow.db"
    with pytest.raises(TrackingUnavailable, match=r"^--tracking-uri: MLflow store sqlite:////proc/nowhere"):
        D.resume_sweep("s", workdir=work, tracking_uri=gone)
    assert paths.state.read_bytes() == before  # the state still names its own store
    paths.state.write_text(json.dumps({**state(work), "tracking_uri": gone}))
    with pytest.raises(TrackingUnavailable, match=r"^the sweep's store \(resume --tracking-uri gives another\): "):
        D.resume_sweep("s", workdir=work)
    paths.state.write_bytes(before)
    assert not (paths.sweep_dir / LOCK_FILE).exists() and state(work)["status"] == "incomplete"

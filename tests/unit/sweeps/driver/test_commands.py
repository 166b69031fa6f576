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

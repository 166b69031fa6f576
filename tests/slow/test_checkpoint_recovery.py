"""Checkpoints that are gone or damaged when a sweep resumes (issue 28, items 2 and 3), on a real local Ray and a
real MLflow SQLite store, with the smoke spec at 3 epochs.

Each test cuts a sweep the same way: every trial pauses at the start of epoch 3 (SSAT_FAULT pause@3, once per
run), so Tune has registered two checkpoints per trial (checkpoint_000000: epoch 1, checkpoint_000001: epoch 2)
and saved that in its experiment state; then Ctrl+C. The test then breaks what that state names, the way it
happens to users, and resumes:
- (a) the checkpoint Tune's state names is gone (a second driver on the same Tune folder deleted it; kept: an
  older one), or every checkpoint is gone: the trial resumes from its newest intact one, or starts over;
- (b) the registered checkpoint's state.pt is torn (half of it, after a Ctrl+C): one console line names the file
  in storage, the trial resumes from the checkpoint before, and its run records what it lost (ssat.recovery);
- (c) every checkpoint of the trial is torn: it fails with the reason (no traceback on the console), and the
  command the sweep prints (`resume --rerun-failed`) finishes it.
In every case each run ends FINISHED with epochs 1..3 once each, and no run is left RUNNING or FAILED.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sweeps.cli import main as sweeps_main
from devtools.sweep_helpers import history, trial_runs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "sweeps" / "specs" / "mnist5k-smoke.yaml")
ROWS = ("const|on", "curious|on")


@pytest.fixture(scope="module")
def ray_local():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from sweeps.trials.ray_private import loopback_node

    with loopback_node():  # every Ray process on 127.0.0.1, as a sweep's own local Ray
        ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, _node_ip_address="127.0.0.1",
                 log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    """One teacher cache for the module: the smoke split's teacher is trained once."""
    d = tmp_path_factory.mktemp("teachers")
    old = os.environ.get("SSAT_TEACHER_DIR")
    os.environ["SSAT_TEACHER_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("SSAT_TEACHER_DIR", None)
    else:
        os.environ["SSAT_TEACHER_DIR"] = old


def _driver_listens() -> bool:
    """Only the sweep driver's own handler may receive the watcher's SIGINT (never pytest's)."""
    return type(getattr(signal.getsignal(signal.SIGINT), "__self__", None)).__name__ == "Interrupt"


def _registered(stage_dir: Path) -> dict[str, tuple[str, Path]]:
    """Per trial's row: (Tune's status, the checkpoint its newest saved experiment state names)."""
    from ray.tune.experiment.trial import Trial

    newest = max(glob.glob(str(stage_dir / "experiment_state-*.json")))
    out = {}
    for state, meta in json.loads(Path(newest).read_text())["trial_data"]:
        t = Trial.from_json_state(state, stub=True)
        t.restore_run_metadata(meta)
        out[t.config["trial"]["meta"]["row"]] = (t.status, Path(t.checkpoint.path) if t.checkpoint else None)
    return out


def cut_sweep(tmp_path: Path, name: str, rows: tuple[str, ...], monkeypatch, capfd) -> dict[str, Path]:
    """Run the smoke spec at 3 epochs until every trial paused at the start of epoch 3, then Ctrl+C. Returns, per
    row, the checkpoint Tune's saved state names (checkpoint_000001; checkpoint_000000 is kept beside it)."""
    faults = tmp_path / "faults"
    monkeypatch.setenv("SSAT_FAULT", "pause@3")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(faults))
    stage = tmp_path / "runs" / "sweeps" / name / "tune" / "grid"

    def watch():
        t0 = time.monotonic()
        while time.monotonic() - t0 < 400:
            if _driver_listens() and len(list(faults.glob("pause@3-*"))) == len(rows):
                time.sleep(2)  # Tune has processed the epoch-2 checkpoints (the trials reported before pausing)
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.3)

    threading.Thread(target=watch, daemon=True).start()
    args = ["run", SMOKE, "--epochs", "3", "--rows", *rows, "--name", name, "--workdir", str(tmp_path),
            "--tracking-uri", uri(tmp_path)]
    assert sweeps_main(args) == 1
    out = capfd.readouterr().out
    assert "INCOMPLETE: stage grid interrupted (Ctrl+C)" in out, out[-3000:]
    registered = _registered(stage)
    assert sorted(registered) == sorted(rows), registered
    for row, (status, ckpt) in registered.items():
        assert ckpt is not None and ckpt.name == "checkpoint_000001", (row, status, ckpt)
        assert sorted(p.name for p in ckpt.parent.glob("checkpoint_*")) == ["checkpoint_000000", "checkpoint_000001"]
    return {row: ckpt for row, (_, ckpt) in registered.items()}


def uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def tear(path: Path) -> None:
    """What a Ctrl+C in the middle of a copy leaves: the first half of the file (its sidecar unchanged)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def resume(tmp_path: Path, name: str, capfd, *extra: str) -> tuple[int, str]:
    rc = sweeps_main(["resume", name, "--workdir", str(tmp_path), *extra])
    captured = capfd.readouterr()
    return rc, captured.out + captured.err


def assert_finished_once_each(tmp_path: Path, name: str, n: int) -> dict:
    """Every trial's run FINISHED (none FAILED or RUNNING), epochs 1..3 once each, its final evaluation there."""
    runs = trial_runs(uri(tmp_path), name)
    assert len(runs) == n, [r.data.tags.get("ssat.row") for r in runs]
    for r in runs:
        assert r.info.status == "FINISHED" and r.data.tags["ssat.status"] == "FINISHED", r.data.tags["ssat.status"]
        for metric in ("val/pgd10", "train/loss"):
            assert [s for s, _ in history(uri(tmp_path), r, metric)] == [1, 2, 3], (r.data.tags["ssat.row"], metric)
        assert "test/best/clean" in r.data.metrics
    return {r.data.tags["ssat.row"]: r for r in runs}


def no_traceback(out: str) -> None:
    for bad in ("Traceback", "does not exist on storage anymore", "Error handling checkpoint", "Trial task failed"):
        assert bad not in out, out[max(0, out.find(bad) - 2000):out.find(bad) + 2000]


def test_a_checkpoint_that_is_gone_resumes_from_the_one_before_or_starts_over(ray_local, teachers, tmp_path,
                                                                               monkeypatch, capfd):
    name = "gone"
    registered = cut_sweep(tmp_path, name, ROWS, monkeypatch, capfd)
    import shutil

    # const|on: only what Tune's state names is gone (as a live driver deleted it); curious|on: all of it
    shutil.rmtree(registered["const|on"])
    for ckpt in registered["curious|on"].parent.glob("checkpoint_*"):
        shutil.rmtree(ckpt)

    rc, out = resume(tmp_path, name, capfd)
    assert rc == 0, out[-4000:]
    no_traceback(out)
    one = registered["const|on"].parent
    two = registered["curious|on"].parent
    assert (f"[sweep] const|on s0: {one}/checkpoint_000001 is gone from storage; resumed from checkpoint_000000 "
            "(epoch 1), epoch 2 retrained") in out, out[-4000:]
    assert (f"[sweep] curious|on s0: {two}/checkpoint_000001 is gone from storage; no older checkpoint is left: "
            "started over, epochs 1-2 retrained") in out, out[-4000:]
    assert "[stage] grid: 2/2 trials finished" in out
    runs = assert_finished_once_each(tmp_path, name, 2)
    assert runs["const|on"].data.tags["ssat.recovery"] == (
        "checkpoint_000001 is gone from storage; resumed from checkpoint_000000 (epoch 1), epoch 2 retrained")
    assert runs["curious|on"].data.tags["ssat.recovery"] == (
        "checkpoint_000001 is gone from storage; no older checkpoint is left: started over, epochs 1-2 retrained")


def test_a_torn_checkpoint_is_named_in_storage_and_the_one_before_is_used(ray_local, teachers, tmp_path, monkeypatch,
                                                                          capfd):
    name = "torn"
    registered = cut_sweep(tmp_path, name, ROWS[:1], monkeypatch, capfd)["const|on"]
    tear(registered / "state.pt")

    rc, out = resume(tmp_path, name, capfd)
    assert rc == 0, out[-4000:]
    no_traceback(out)
    lines = [ln for ln in out.splitlines() if "failed its checksum" in ln]
    assert lines == [f"[sweep] const|on s0: {registered}/state.pt failed its checksum; resumed from "
                     "checkpoint_000000 (epoch 1), epoch 2 retrained"], out[-4000:]
    run = assert_finished_once_each(tmp_path, name, 1)["const|on"]
    assert run.data.tags["ssat.recovery"] == ("checkpoint_000001/state.pt failed its checksum; resumed from "
                                              "checkpoint_000000 (epoch 1), epoch 2 retrained")
    # the traceback is in the trial's log (its MLflow artifact), naming the file in storage
    log = Path(MlflowClient(uri(tmp_path)).download_artifacts(run.info.run_id, "trial.log", str(tmp_path))).read_text()
    assert "Traceback" in log and f"CorruptFileError: {registered}/state.pt: checksum mismatch" in log, log[-3000:]
    assert "recovery: checkpoint_000001/state.pt failed its checksum" in log


def test_every_checkpoint_torn_fails_with_the_reason_and_the_printed_hint_finishes_it(ray_local, teachers, tmp_path,
                                                                                      monkeypatch, capfd):
    name = "all-torn"
    registered = cut_sweep(tmp_path, name, ROWS[:1], monkeypatch, capfd)["const|on"]
    for ckpt in registered.parent.glob("checkpoint_*"):
        tear(ckpt / "state.pt")

    rc, out = resume(tmp_path, name, capfd)
    assert rc == 1, out[-4000:]
    no_traceback(out)
    folder = registered.parent
    reason = ("checkpoint_000001/state.pt failed its checksum, checkpoint_000000/state.pt failed its checksum; no "
              "intact checkpoint is left, so the trial fails (resume the sweep with --rerun-failed to start it over)")
    failed = [ln for ln in out.splitlines() if ": FAILED: " in ln]
    assert failed == [f"[sweep] const|on s0: FAILED: {folder}/checkpoint_000001/state.pt failed its checksum, "
                      f"{folder}/checkpoint_000000/state.pt failed its checksum; no intact checkpoint is left, so the "
                      "trial fails (resume the sweep with --rerun-failed to start it over)"], out[-4000:]
    hint = f"python -m sweeps resume {name} --workdir {tmp_path}"
    assert hint in out and "--rerun-failed" in out
    (run,) = trial_runs(uri(tmp_path), name)
    assert run.info.status == "FAILED" and run.data.tags["ssat.status"] == f"FAILED: {reason}", run.data.tags
    assert [s for s, _ in history(uri(tmp_path), run, "val/pgd10")] == [1, 2]

    # the hint: resume with --rerun-failed starts the trial over, in the same run
    rc, out = resume(tmp_path, name, capfd, "--rerun-failed")
    assert rc == 0, out[-4000:]
    assert "[stage] grid: 1/1 trials finished" in out
    done = assert_finished_once_each(tmp_path, name, 1)["const|on"]
    assert done.info.run_id == run.info.run_id

"""Which checkpoint a trial resumes from when the one Tune registered is gone or damaged (sweeps/trials/trainable.py),
what
its run records of it, and the pieces of Ray 2.60 the recovery relies on (tests/slow/test_checkpoint_recovery.py
runs it all on a real Ray and MLflow)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from ray import cloudpickle, tune
from ray.train import Checkpoint, CheckpointConfig
from ray.train._internal.checkpoint_manager import _CheckpointManager, _TrainingResult
from ray.tune.experiment import Experiment

import sweeps.trials.tuners as tuners
from sweeps.trials.mlflow_callback import TrackingCallback, error_reason, forget_gone_checkpoints
from sweeps.spec import parse_spec
from sweeps.trials.trainable import (NoIntactCheckpoint, RestorePlan, SweepTrainable, Unusable, checkpoint_index,
                              _continue, choose_checkpoint, plan_restore, recovery_record)
from sweeps.trials.trial_settings import continuation_space, grid_space
from ssat.storage import CorruptFileError, save_verified, verify_file

GRID = {"name": "unit", "preset": "mnist5k-ssat-mbi", "epochs": 4, "grid": [{"row": "const|on", "set": {}}]}


def names(*indices: int) -> list[str]:
    return [f"checkpoint_{i:06d}" for i in indices]


def checker(bad: dict[str, Unusable], epochs: dict[str, int], calls: list):
    def check(name):
        calls.append(name)
        return (bad[name], None) if name in bad else (None, epochs[name])
    return check


# ---- choosing ----------------------------------------------------------------------------------------------
def test_the_registered_checkpoint_when_it_is_intact():
    calls = []
    plan = choose_checkpoint("checkpoint_000003", 4, names(2, 3), checker({}, {"checkpoint_000003": 4}, calls))
    assert (plan.use, plan.use_epoch, plan.unusable, plan.fails) == ("checkpoint_000003", 4, [], False)
    assert calls == ["checkpoint_000003"]  # nothing older is looked at


def test_a_gone_registered_checkpoint_gives_way_to_the_newest_older_one():
    calls = []
    plan = choose_checkpoint("checkpoint_000003", 4, names(1, 2), checker({}, {"checkpoint_000002": 3}, calls))
    assert (plan.use, plan.use_epoch, plan.fails) == ("checkpoint_000002", 3, False)
    assert plan.unusable == [Unusable("checkpoint_000003", None, "is gone from storage")]
    assert calls == ["checkpoint_000002"]  # the gone one is not checked, the older ones newest first, once
    assert recovery_record(plan) == ("checkpoint_000003 is gone from storage; resumed from checkpoint_000002 "
                                     "(epoch 3), epoch 4 retrained")


def test_damaged_ones_are_skipped_newest_first_and_what_is_retrained_is_said():
    calls = []
    bad = {"checkpoint_000003": Unusable("checkpoint_000003", "state.pt", "failed its checksum"),
           "checkpoint_000002": Unusable("checkpoint_000002", "best.pt", "has no checksum file")}
    plan = choose_checkpoint("checkpoint_000003", 4, names(0, 1, 2, 3, 10) + ["work", "checkpoint_x"],
                             checker(bad, {"checkpoint_000001": 2, "checkpoint_000000": 1}, calls))
    assert calls == names(3, 2, 1)
    assert recovery_record(plan) == ("checkpoint_000003/state.pt failed its checksum, checkpoint_000002/best.pt has "
                                     "no checksum file; resumed from checkpoint_000001 (epoch 2), epochs 3-4 retrained")
    assert recovery_record(plan, "/s/tune/grid/train_trial_1/") == (
        "/s/tune/grid/train_trial_1/checkpoint_000003/state.pt failed its checksum, /s/tune/grid/train_trial_1/"
        "checkpoint_000002/best.pt has no checksum file; resumed from checkpoint_000001 (epoch 2), epochs 3-4 "
        "retrained")


def test_a_checkpoint_newer_than_the_registered_one_is_never_used():
    """Tune may not have processed its report: its epoch could be missing from the tracking store."""
    calls = []
    epochs = {"checkpoint_000002": 3, "checkpoint_000004": 5, "checkpoint_000005": 6}
    plan = choose_checkpoint("checkpoint_000003", 4, names(2, 4, 5), checker({}, epochs, calls))
    assert plan.use == "checkpoint_000002" and calls == ["checkpoint_000002"]


def test_nothing_left_starts_over_when_only_gone_and_fails_when_damaged():
    plan = choose_checkpoint("checkpoint_000003", 4, ["work"], checker({}, {}, []))
    assert (plan.use, plan.fails) == (None, False)
    assert recovery_record(plan) == ("checkpoint_000003 is gone from storage; no older checkpoint is left: started "
                                     "over, epochs 1-4 retrained")
    torn = Unusable("checkpoint_000002", "state.pt", "failed its checksum")
    plan = choose_checkpoint("checkpoint_000003", 4, names(2), checker({"checkpoint_000002": torn}, {}, []))
    assert (plan.use, plan.fails) == (None, True)  # gone, and what is left is damaged: a person decides
    assert recovery_record(plan) == (
        "checkpoint_000003 is gone from storage, checkpoint_000002/state.pt failed its checksum; no intact checkpoint "
        "is left, so the trial fails (resume the sweep with --rerun-failed to start it over)")


def test_retrained_epochs_only_when_known_and_lost():
    one = RestorePlan("checkpoint_000001", None, [Unusable("checkpoint_000001", None, "is gone from storage")],
                      "checkpoint_000000", 1)
    assert recovery_record(one) == "checkpoint_000001 is gone from storage; resumed from checkpoint_000000 (epoch 1)"
    one.registered_epoch = 1  # a restart after a start-over: the older folder holds a later epoch
    assert recovery_record(one).endswith("(epoch 1)")
    assert [checkpoint_index(n) for n in ("checkpoint_000012", "checkpoint_12x", "work")] == [12, None, None]


# ---- checking in storage ------------------------------------------------------------------------------------
def write_checkpoint(folder: Path, epoch: int) -> Path:
    for kind in ("state", "best", "last"):
        save_verified({"epoch": epoch, "kind": kind, "w": torch.ones(3) * epoch}, folder / f"{kind}.pt")
    (folder / "trial.log").write_text("log\n")
    return folder


def test_files_are_verified_where_they_lie_and_the_epoch_read_from_last_pt(tmp_path):
    trial = tmp_path / "train_trial_1"
    for i in range(3):
        write_checkpoint(trial / f"checkpoint_{i:06d}", i + 1)
    assert verify_file(trial / "checkpoint_000002" / "state.pt")
    state = trial / "checkpoint_000002" / "state.pt"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # torn
    (trial / "checkpoint_000001" / "best.pt.sha256").unlink()
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        verify_file(state)
    plan, notes = plan_restore(trial / "checkpoint_000002", 3)
    assert plan.use == "checkpoint_000000" and plan.use_epoch == 1  # read from its last.pt
    assert recovery_record(plan) == ("checkpoint_000002/state.pt failed its checksum, checkpoint_000001/best.pt has "
                                     "no checksum file; resumed from checkpoint_000000 (epoch 1), epochs 2-3 retrained")
    # the tracebacks, for the trial's log, name the files in storage (not a copy of them)
    assert len(notes) == 2 and notes[0].startswith("Traceback") and f"{state}: checksum mismatch" in notes[0]
    assert f"{trial / 'checkpoint_000001' / 'best.pt'}: its checksum file" in notes[1]


def test_a_missing_file_or_folder(tmp_path):
    trial = tmp_path / "t"
    write_checkpoint(trial / "checkpoint_000000", 1)
    (write_checkpoint(trial / "checkpoint_000001", 2) / "last.pt").unlink()
    plan, notes = plan_restore(trial / "checkpoint_000002", 3)  # Tune's state names a folder that is gone
    assert plan.unusable == [Unusable("checkpoint_000002", None, "is gone from storage"),
                             Unusable("checkpoint_000001", "last.pt", "is missing")]
    assert (plan.use, plan.use_epoch, notes) == ("checkpoint_000000", 1, [])
    plan, _ = plan_restore(tmp_path / "gone" / "checkpoint_000004", 5)  # the whole trial folder is gone
    assert (plan.use, plan.fails, recovery_record(plan)) == (
        None, False, "checkpoint_000004 is gone from storage; no older checkpoint is left: started over, epochs 1-5 "
                     "retrained")


def test_a_continued_trial_starts_from_the_newest_intact_checkpoint_of_the_one_tune_ended(tmp_path):
    """A trial Tune completed before its last epoch is continued by a new trial (`continue_from`): its work folder
    gets the newest intact checkpoint's files, a damaged newer one is skipped and said, and damage with nothing
    intact fails it rather than silently starting over."""
    trial, work = tmp_path / "t", tmp_path / "work"
    write_checkpoint(trial / "checkpoint_000000", 1)
    write_checkpoint(trial / "checkpoint_000001", 2)
    work.mkdir()
    assert _continue(work, trial / "checkpoint_000001", b"before\n") == (
        "Tune ended this trial before its last epoch; continued from checkpoint_000001 (epoch 2)")
    assert torch.load(work / "last.pt", weights_only=True)["epoch"] == 2
    assert (work / "trial.log").read_text() == "log\n"  # the checkpoint's log, as a restore from it gives
    (trial / "checkpoint_000001" / "state.pt").write_bytes(b"torn")
    fresh = tmp_path / "work2"
    fresh.mkdir()
    assert _continue(fresh, trial / "checkpoint_000001", b"before\n") == (
        "Tune ended this trial before its last epoch; checkpoint_000001/state.pt failed its checksum; resumed from "
        "checkpoint_000000 (epoch 1)")
    assert torch.load(fresh / "last.pt", weights_only=True)["epoch"] == 1
    (trial / "checkpoint_000000" / "last.pt").write_bytes(b"torn")
    (tmp_path / "work3").mkdir()
    with pytest.raises(NoIntactCheckpoint) as err:
        _continue(tmp_path / "work3", trial / "checkpoint_000001", b"before\n")
    assert str(err.value) == (f"{trial}/checkpoint_000001/state.pt failed its checksum, {trial}/checkpoint_000000/"
                              "last.pt failed its checksum; no intact checkpoint is left, so the trial fails (resume "
                              "the sweep with --rerun-failed to start it over)")  # named where they lie
    log = (tmp_path / "work3" / "trial.log").read_text()  # the tracebacks, one after the other, for the trial's log
    assert log.startswith("before\nTraceback") and log.count("Traceback") == 2 and log.endswith("\n")
    assert "(file torn or modified)\nTraceback" in log
    empty = tmp_path / "work4"
    empty.mkdir()
    assert _continue(empty, tmp_path / "gone" / "checkpoint_000000", b"before\n") == (
        "Tune ended this trial before its last epoch; checkpoint_000000 is gone from storage; no older checkpoint "
        "is left: started over")
    assert sorted(p.name for p in empty.iterdir()) == ["trial.log"]
    assert (empty / "trial.log").read_text() == "before\n"


def test_notes_become_lines_of_the_log():
    from sweeps.trials.trainable import lines
    assert lines(["a", "b\n", "c"]) == "a\nb\nc\n" and lines([]) == ""


def test_a_continuation_keeps_each_trials_settings_and_names_its_checkpoint():
    old = {"trial": {"meta": {"sweep": "s", "seed": 0}, "base": {"optim": {"epochs": 2}}}}
    legacy = {"meta": {"sweep": "s", "seed": 1}, "cfg": {"optim": {"epochs": 2}}}  # a shape saved before issue 27
    space = continuation_space([(old, "/t/a/checkpoint_000001"), (legacy, "")])
    assert space == {"trial": {"grid_search": [
        {"meta": {"sweep": "s", "seed": 0, "continue_from": "/t/a/checkpoint_000001"},
         "base": {"optim": {"epochs": 2}}},
        {"meta": {"sweep": "s", "seed": 1, "continue_from": ""}, "cfg": {"optim": {"epochs": 2}}}]}}
    assert old["trial"]["meta"] == {"sweep": "s", "seed": 0}  # the saved config is not changed in place


# ---- Ray 2.60's parts ---------------------------------------------------------------------------------------
def test_the_trainable_keeps_its_name_so_a_saved_stage_restores_and_it_pickles():
    wrapped = tune.with_resources(SweepTrainable, {"cpu": 1, "gpu": 0})
    assert Experiment.get_trainable_name(wrapped) == "train_trial"  # Tuner.restore compares it with the saved one
    assert issubclass(cloudpickle.loads(cloudpickle.dumps(wrapped)), SweepTrainable)


def fake_trial(manager):
    calls = []
    meta = SimpleNamespace(checkpoint_manager=manager, invalidate_cache=lambda: calls.append("cache"))
    return SimpleNamespace(run_metadata=meta, invalidate_json_state=lambda: calls.append("json"), trial_id="t"), calls


def test_tune_fails_deleting_a_gone_checkpoint_unless_it_is_forgotten_first(tmp_path):
    """Ray 2.60's checkpoint manager raises FileNotFoundError half-way through registering a new checkpoint when
    an old one it deletes is gone; the callback takes gone ones out of its list before the trial restores."""
    def manager_with(folders):
        m = _CheckpointManager(CheckpointConfig(num_to_keep=2))
        for i in folders:
            (tmp_path / f"c{i}").mkdir(exist_ok=True)
            m.register_checkpoint(_TrainingResult(Checkpoint(str(tmp_path / f"c{i}")), {"epoch": i + 1}))
        return m

    def register(m, i):
        (tmp_path / f"c{i}").mkdir()
        m.register_checkpoint(_TrainingResult(Checkpoint(str(tmp_path / f"c{i}")), {"epoch": i + 1}))

    plain = manager_with([0, 1])
    (tmp_path / "c1").rmdir()  # the latest is gone
    register(plain, 2)
    with pytest.raises(FileNotFoundError):
        register(plain, 3)  # Tune's own behaviour: it deletes c1

    for p in tmp_path.iterdir():
        p.rmdir()
    m = manager_with([0, 1])
    (tmp_path / "c1").rmdir()
    trial, calls = fake_trial(m)
    assert forget_gone_checkpoints(trial) == 1 and calls == ["json", "cache"]
    assert m.latest_checkpoint_result.checkpoint.path == str(tmp_path / "c1")  # the restore deals with it
    register(m, 2)
    register(m, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c2", "c3"]
    assert forget_gone_checkpoints(trial) == 0 and forget_gone_checkpoints(SimpleNamespace()) == 0


def test_rerun_failed_restarts_errored_trials_instead_of_resuming_them(monkeypatch, tmp_path):
    """Tune's resume_errored wins over restart_errored: --rerun-failed passes only the latter."""
    seen = []
    monkeypatch.setattr(tune.Tuner, "can_restore", classmethod(lambda cls, path: True))
    monkeypatch.setattr(tune.Tuner, "restore", classmethod(
        lambda cls, path, trainable, resume_errored, restart_errored: seen.append((resume_errored, restart_errored))))
    spec = parse_spec(GRID)
    tuners.restore_tuner(tmp_path, spec, rerun_failed=False)
    tuners.restore_tuner(tmp_path, spec, rerun_failed=True)
    assert seen == [(True, False), (False, True)]


# ---- what the run and the console get -------------------------------------------------------------------------
class Recorder:
    """A Tracker stand-in that records every operation the callback sends."""

    def __init__(self):
        self.ops: list[tuple] = []
        self.queue: list = []

    def __getattr__(self, op):
        return lambda *args, **kwargs: self.ops.append((op, *args))


def grid_trial(tmp_path, **kw):
    spec = parse_spec(GRID)
    settings = grid_space(spec, spec.trials(), {})["trial"]["grid_search"][0]
    return SimpleNamespace(config={"trial": settings}, trial_id="t0", last_result={}, checkpoint=None, **kw)


def test_the_first_report_after_a_recovery_is_said_once_on_the_console_and_kept_in_the_run(tmp_path, capsys):
    trial = grid_trial(tmp_path)
    cb = TrackingCallback("sqlite:///unused.db", "unit", str(tmp_path), None)
    cb._tracker = Recorder()
    record = ("checkpoint_000001/state.pt failed its checksum; resumed from checkpoint_000000 (epoch 1), epoch 2 "
              "retrained")
    cb.on_trial_result(0, [trial], trial, {"epoch": 2, "recovery": record, "recovery_console": f"/s/t/{record}"})
    cb.on_trial_result(0, [trial], trial, {"epoch": 3})
    assert capsys.readouterr().out == f"[sweep] const|on s0: /s/t/{record}\n"
    tags = [op[2] for op in cb._tracker.ops if op[0] == "set_tags" and "ssat.recovery" in op[2]]
    assert tags == [{"ssat.recovery": record, "ssat.status": f"RUNNING: {record}"}]


def test_a_refused_restore_fails_the_run_with_its_reason_in_one_line(tmp_path, capsys):
    folder = "/s/tune/grid/train_trial_1"
    why = (f"{folder}/checkpoint_000001/state.pt failed its checksum; no intact checkpoint is left, so the trial fails "
           "(resume the sweep with --rerun-failed to start it over)")
    err = tmp_path / "error.txt"
    err.write_text(f"Failure # 1 (occurred at x)\nray::ImplicitFunc.restore()\n  File y\n"
                   f"sweeps.trials.trainable.NoIntactCheckpoint: {why}\n\n")
    assert error_reason(str(err)) == (why, True)
    trial = grid_trial(tmp_path, error_file=str(err), path=folder)
    cb = TrackingCallback("sqlite:///unused.db", "unit", str(tmp_path), None)
    cb._tracker = Recorder()
    cb._tracker.find_run = lambda key: None  # a run without its epochs
    key = cb._start(trial)[0]
    cb.on_trial_error(0, [trial], trial)
    assert capsys.readouterr().out == f"[sweep] const|on s0: FAILED: {why}\n"
    short = why.replace(f"{folder}/", "")
    assert cb._tracker.ops[-2:] == [("set_tags", key, {"ssat.status": f"FAILED: {short}"}), ("end", key, "FAILED")]
    err.write_text("Failure # 1\nssat.faults.InjectedFault: injected fault: raise@3:0\n")
    assert error_reason(str(err)) == ("ssat.faults.InjectedFault: injected fault: raise@3:0", False)


def test_an_error_after_the_run_holds_everything_leaves_it_finished(tmp_path, capsys):
    trial = grid_trial(tmp_path, error_file=None, path=None)
    cb = TrackingCallback("sqlite:///unused.db", "unit", str(tmp_path), None)
    cb._tracker = Recorder()
    metrics = {"time/epochs": 4.0, "test/best/clean": 50.0}
    cb._tracker.find_run = lambda key: "r1"
    cb._tracker.client = SimpleNamespace(get_run=lambda rid: SimpleNamespace(data=SimpleNamespace(metrics=metrics)))
    key = cb._start(trial)[0]
    cb.on_trial_error(0, [trial], trial)
    assert cb._tracker.ops[-2:] == [("set_tags", key, {"ssat.status": "FINISHED", "ssat.last_error": "error"}),
                                    ("end", key, "FINISHED")]
    metrics.pop("test/best/clean")  # no final evaluation yet: FAILED
    cb.on_trial_error(0, [trial], trial)
    assert cb._tracker.ops[-1] == ("end", key, "FAILED")


def test_the_trial_id_and_repro_tags_are_sent_only_when_they_change(tmp_path):
    """A set_tags request per result for tags that rarely change capped what a driver sends (benchmarks/
    tracking_load.py): the callback sends a tag again only with another value."""
    trial = grid_trial(tmp_path)
    cb = TrackingCallback("sqlite:///unused.db", "unit", str(tmp_path), None)
    cb._tracker = Recorder()
    repro = {"gpu": None, "graph_mode": "off", "cuda_peak_mib": 10.0}
    for epoch, peak in ((1, 10.0), (2, 10.0), (3, 12.5)):
        cb.on_trial_result(0, [trial], trial, {"epoch": epoch,
                                               "repro_json": json.dumps({**repro, "cuda_peak_mib": peak})})
    sent = [op[2] for op in cb._tracker.ops if op[0] == "set_tags"]
    assert sent == [{"ssat.ray_trial_id": "t0"},
                    {"repro.gpu": None, "repro.graph_mode": "off", "repro.cuda_peak_mib": 10.0},
                    {"repro.cuda_peak_mib": 12.5}]
    assert [op[3] for op in cb._tracker.ops if op[0] == "log_epoch"] == [1, 2, 3]  # every epoch still logged


def test_a_verified_last_pt_that_is_no_checkpoint_of_ours_and_tunes_epoch_for_the_registered_one(tmp_path):
    trial = tmp_path / "t"
    write_checkpoint(trial / "checkpoint_000000", 1)
    odd = write_checkpoint(trial / "checkpoint_000001", 2)
    save_verified({"weights": torch.ones(2)}, odd / "last.pt")  # intact, but without an epoch
    plan, notes = plan_restore(trial / "checkpoint_000002", None)
    assert (plan.registered, plan.registered_epoch) == ("checkpoint_000002", None)
    assert plan.unusable[1] == Unusable("checkpoint_000001", "last.pt", "cannot be read")
    assert (plan.use, plan.use_epoch) == ("checkpoint_000000", 1)
    assert len(notes) == 1 and "KeyError: 'epoch'" in notes[0]
    # the checkpoint Tune registered comes with its epoch (Tune's): its last.pt is not read for it
    plan, notes = plan_restore(odd, 2)
    assert (plan.use, plan.use_epoch, notes) == ("checkpoint_000001", 2, [])


def test_an_unusable_checkpoint_is_said_with_or_without_where_it_lies():
    gone, damaged = Unusable("checkpoint_000003", None, "is gone from storage"), \
        Unusable("checkpoint_000002", "state.pt", "failed its checksum")
    assert gone.text() == "checkpoint_000003 is gone from storage" and not gone.damaged
    assert damaged.text("/s/t/") == damaged.text("/s/t") == "/s/t/checkpoint_000002/state.pt failed its checksum"
    assert damaged.damaged


# ---- a trial's process state and what its records read ----------------------------------------------------------
def test_each_trial_sets_its_own_faults_threads_and_cudnn_autotuning(monkeypatch):
    import os

    from ssat.config import from_dict
    from ssat.presets import preset
    from sweeps.trials.trainable import reset_process_state
    from sweeps.trials.trial_settings import FAULT_VARS

    cfg = from_dict(preset("mnist5k-ssat-mbi"))
    before = torch.get_num_threads()
    var = FAULT_VARS[0]
    monkeypatch.setenv(var, "left by the trial before")
    try:
        assert reset_process_state(cfg.replace(**{"system.threads": None}), {"cpus": 3, var: "raise@2:0"}) == 3
        assert torch.get_num_threads() == 3 and os.environ[var] == "raise@2:0"
        assert reset_process_state(cfg.replace(**{"system.threads": 2}), {"cpus": 3}) == 2  # the config's own
        assert torch.get_num_threads() == 2 and var not in os.environ  # a fault never leaks into the next trial
        assert reset_process_state(cfg.replace(**{"system.threads": None}), {}) == 1  # no CPU share: one thread
        torch.backends.cudnn.benchmark = True
        reset_process_state(cfg.replace(**{"system.cudnn_benchmark": True}), {})
        assert torch.backends.cudnn.benchmark is torch.cuda.is_available()  # a trial before left it on
    finally:
        torch.set_num_threads(before)
        torch.backends.cudnn.benchmark = False


def test_a_trials_gpu_memory_cap_and_the_drivers_version(tmp_path, monkeypatch):
    from ssat.config import from_dict
    from ssat.presets import preset
    from sweeps.trials.trainable import _driver_version, _int, _recovery_keys, Recovery, memory_cap, work_dir

    cfg = from_dict(preset("mnist5k-ssat-mbi"))
    assert memory_cap(cfg, {"gpu": 0.25}) == 0.25 and memory_cap(cfg, {"gpu": 2}) == 1.0
    assert memory_cap(cfg, {}) is None and memory_cap(cfg, {"gpu": None}) is None
    assert memory_cap(cfg.replace(**{"system.cuda_memory_fraction": 0.4}), {"gpu": 0.25}) == 0.4
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _driver_version() is None  # no nvidia-smi
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 570.86.15\necho 570.86.15\n")
    smi.chmod(0o755)
    assert _driver_version() == "570.86.15"  # the first GPU's
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert _driver_version() is None
    assert (_int("7"), _int(None), _int("x"), _int(3.0)) == (7, None, None, 3)
    assert _recovery_keys(None) == {}
    assert _recovery_keys(Recovery("r", "c", ["n"])) == {"recovery": "r", "recovery_console": "c"}
    assert work_dir(SimpleNamespace(trial_working_directory=str(tmp_path))) == tmp_path / "work"

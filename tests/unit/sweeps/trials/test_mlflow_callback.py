"""The Tune callback that writes MLflow (sweeps/trials/mlflow_callback.py), hook by hook against a real MLflow
SQLite store: a trial's run from Tune's start to its end (tags, name, parent, config and checkpoint artifacts,
metrics, the precision it trained in), its search trial linked in a real Optuna study, what a pickled callback
keeps, and when a run already holds everything. Trials are Tune's settings in a plain object: the hooks read only
their id, config, last result, checkpoint and error file (Ray's own Trial needs a running Tune)."""
from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
from mlflow.tracking import MlflowClient
from ray.train import Checkpoint

from sweeps.paths import CONFIGS
from sweeps.spec import parse_spec
from sweeps.tracking.tracker import Tracker
from sweeps.trials.mlflow_callback import TrackingCallback, error_reason, holds_everything
from sweeps.trials.trial_settings import grid_space, resolve_trial

GRID = {"name": "unit", "preset": "mnist5k-ssat-mbi", "seeds": [3], "epochs": 4,
        "grid": [{"row": "const", "set": {"attack.schedule": "const"}}]}


def a_trial(trial_id: str = "t0", **kw) -> SimpleNamespace:
    spec = parse_spec(GRID)
    settings = grid_space(spec, spec.trials(), {})["trial"]["grid_search"][0]
    return SimpleNamespace(config={"trial": settings}, trial_id=trial_id, last_result={}, checkpoint=None,
                           error_file=None, path=None, **kw)


def test_a_trials_run_from_start_to_end(store, tmp_path, capsys):
    client = MlflowClient(store)
    exp = Tracker(store, "unit", log=lambda s: None).experiment_id
    parent = client.create_run(exp).info.run_id
    sweep = tmp_path / "sweep"
    cb = TrackingCallback(store, "unit", str(sweep), parent)
    trial = a_trial()
    cfg, meta = resolve_trial(trial.config)
    key, rec = meta["trial_key"], meta["record"]
    before = time.time()
    cb.on_trial_start(0, [trial], trial)
    assert capsys.readouterr().out == ""  # nothing to say: no checkpoints to forget, nothing failed
    rid = cb.tracker.runs[key]
    run = client.get_run(rid)
    assert run.info.run_name == rec.name and run.info.status == "RUNNING"
    tags = run.data.tags
    assert (tags["ssat.status"], tags["mlflow.parentRunId"], tags["ssat.ray_trial_id"]) == ("RUNNING", parent, "t0")
    assert before <= float(tags["ssat.ray_started_at"]) <= time.time()
    assert {k: tags[k] for k in rec.tags} == {k: str(v) for k, v in rec.tags.items()}
    config = sweep / CONFIGS / key / "config.json"
    assert config.read_text() == json.dumps(cfg.to_dict(), indent=1)
    assert [a.path for a in client.list_artifacts(rid)] == ["config.json"]

    repro = {"precision": "fp32", "graph_mode": "off", "steps": [1, 2]}
    cb.on_trial_result(0, [trial], trial, {"epoch": 1, "val/pgd10": 40.0, "train/loss": 1.5,
                                           "repro_json": json.dumps(repro)})
    cb.on_trial_result(0, [trial], trial, {"epoch": 2, "val/pgd10": 45.0, "train/loss": 1.2, "time/epochs": 2,
                                           "test/best/clean": 90.0, "protocol/eval": "pgd20",
                                           "repro_json": json.dumps({**repro, "precision": "fp16"})})
    assert "[tracking]" not in capsys.readouterr().out  # nothing failed (a param is never logged twice)
    run = client.get_run(rid)
    assert run.data.params["resolved.precision"] == "fp32"
    # the tags follow the latest report; the parameter stays the first (MLflow keeps a parameter as first logged)
    assert (run.data.tags["repro.precision"], run.data.tags["repro.steps"]) == ("fp16", "[1, 2]")
    assert [(m.step, m.value) for m in client.get_metric_history(rid, "val/pgd10")] == [(1, 40.0), (2, 45.0)]
    assert run.data.metrics["test/best/clean"] == 90.0 and run.data.tags["protocol/eval"] == "pgd20"

    done = tmp_path / "checkpoint"
    done.mkdir()
    for name in ("best.pt", "best.pt.sha256", "trial.log", "other.bin"):
        (done / name).write_text(name)
    trial.checkpoint = Checkpoint.from_directory(str(done))
    trial.last_result = {"epoch": 2, "time/epochs": 2}
    cb.on_trial_complete(0, [trial], trial)
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and run.data.tags["ssat.status"] == "FINISHED"
    assert sorted(a.path for a in client.list_artifacts(rid)) == ["checkpoints", "config.json", "trial.log"]
    assert sorted(a.path for a in client.list_artifacts(rid, "checkpoints")) == ["checkpoints/best.pt",
                                                                                 "checkpoints/best.pt.sha256"]
    assert capsys.readouterr().out == ""
    trial.checkpoint = Checkpoint.from_directory(str(done))
    cb.on_trial_complete(0, [trial], trial)  # completed again (a retried trial): its kept copies are replaced
    assert "[tracking]" not in capsys.readouterr().out
    again = TrackingCallback(store, "unit", str(sweep), parent)  # a resumed driver's: the trial's folders exist
    again.on_trial_start(0, [trial], trial)
    assert "[tracking]" not in capsys.readouterr().out and again._seen == {key} and cb._seen == {key}
    assert client.get_run(rid).info.status == "RUNNING"  # reopened as this trial goes on


def test_two_trials_with_the_same_repro_tags_each_get_them(store, tmp_path):
    cb = TrackingCallback(store, "unit", str(tmp_path), None)
    spec = parse_spec({**GRID, "seeds": [3, 4]})
    settings = grid_space(spec, spec.trials(), {})["trial"]["grid_search"]
    trials = [SimpleNamespace(config={"trial": s}, trial_id=f"t{i}", last_result={}, checkpoint=None, error_file=None,
                              path=None) for i, s in enumerate(settings)]
    for t in trials:
        cb.on_trial_result(0, trials, t, {"epoch": 1, "repro_json": json.dumps({"graph_mode": "off"})})
    client = MlflowClient(store)
    for t in trials:
        rid = cb.tracker.runs[resolve_trial(t.config)[1]["trial_key"]]
        assert client.get_run(rid).data.tags["repro.graph_mode"] == "off"


def test_without_a_parent_the_run_has_none_and_a_failed_check_of_checkpoints_is_said_in_three_frames(store,
                                                                                                     tmp_path, capsys):
    class Deep:
        @property
        def checkpoint(self):
            return self.deeper()

        def deeper(self):
            raise OSError("storage gone")

    trial = a_trial(run_metadata=SimpleNamespace(checkpoint_manager=SimpleNamespace(_checkpoint_results=[Deep()])))
    cb = TrackingCallback(store, "unit", str(tmp_path), None)
    flushed = []
    real_flush = sys.stdout.flush
    sys.stdout.flush = lambda: flushed.append(True) or real_flush()
    try:
        cb.on_trial_start(0, [trial], trial)
    finally:
        sys.stdout.flush = real_flush
    out = capsys.readouterr().out
    assert flushed  # at once, before Tune's own lines
    assert out.startswith("[sweep] checking the checkpoints of trial t0 failed:\nTraceback (most recent call last):")
    assert out.rstrip().endswith("OSError: storage gone") and out.count('  File "') == 3  # the last three frames
    rid = cb.tracker.runs[resolve_trial(trial.config)[1]["trial_key"]]
    assert "mlflow.parentRunId" not in MlflowClient(store).get_run(rid).data.tags  # started all the same


def test_a_search_trials_run_id_is_set_on_its_running_optuna_trial_once(store, tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=url, study_name="s")
    asked = study.ask()
    asked.set_user_attr("tune_trial_id", "t0")
    cb = TrackingCallback(store, "unit", str(tmp_path / "sweep"), None, study=(url, "s"))
    trial = a_trial()
    cb.on_trial_result(0, [trial], trial, {"epoch": 1, "val/pgd10": 40.0})
    rid = cb.tracker.runs[resolve_trial(trial.config)[1]["trial_key"]]
    assert optuna.load_study(study_name="s", storage=url).trials[0].user_attrs["mlflow_run_id"] == rid
    assert cb._linked == {"t0"}
    import sweeps.trials.study as study_module

    monkeypatch.setattr(study_module, "link_mlflow_run", lambda *a: (_ for _ in ()).throw(AssertionError(a)))
    cb.on_trial_result(0, [trial], trial, {"epoch": 2, "val/pgd10": 41.0})  # linked: the study is not asked again
    other = a_trial("t9")
    cb.on_trial_result(0, [other], other, {"epoch": 1})  # no running trial of its id: not linked (no failure)


def test_a_pickled_callback_keeps_its_settings_only_and_an_old_one_gets_the_new_fields(store, tmp_path):
    study = (f"sqlite:///{tmp_path / 'optuna.db'}", "s")
    optuna.create_study(storage=study[0], study_name="s")
    cb = TrackingCallback(store, "unit", str(tmp_path), "p1", "/art", study=study)
    trial = a_trial()
    cb.on_trial_result(0, [trial], trial, {"epoch": 1, "repro_json": json.dumps({"precision": "fp32"})})
    assert cb._tracker and cb._seen and cb._resolved and cb._trials and cb._sent
    cb._linked.add("t0")
    back = pickle.loads(pickle.dumps(cb))
    assert vars(back) == {"uri": store, "experiment": "unit", "sweep_dir": str(tmp_path), "parent_run_id": "p1",
                          "artifact_root": "/art", "study": study, "_tracker": None, "_seen": set(),
                          "_resolved": set(), "_trials": {}, "_sent": {}, "_linked": set()}
    old = TrackingCallback.__new__(TrackingCallback)  # as Tune stored it before these fields existed
    old.__setstate__({"uri": store, "experiment": "unit", "sweep_dir": str(tmp_path), "parent_run_id": None,
                      "artifact_root": None, "_tracker": None, "_seen": set()})
    assert (old.study, old._resolved, old._trials, old._sent, old._linked) == (None, set(), {}, {}, set())
    fresh = TrackingCallback(store, "unit", str(tmp_path), None)
    assert (fresh.study, fresh._linked) == (None, set())


def test_a_run_holds_everything_with_all_its_epochs_and_its_evaluation(store):
    t = Tracker(store, "unit", log=lambda s: None)
    t.ensure_run("k", {"ssat.kind": "trial"}, {}, name="k")
    assert not holds_everything(t, "k", {"epochs": 2, "stage": "grid"})  # nothing logged yet
    assert not holds_everything(t, "none", {"epochs": 2, "stage": "grid"})  # no such run
    t.log_epoch("k", {"time/epochs": 2.0}, 2)
    assert not holds_everything(t, "k", {"epochs": 2, "stage": "grid"})  # no test/ metric: not evaluated
    assert holds_everything(t, "k", {"epochs": 2, "stage": "search"})  # a search trial has no final evaluation
    assert not holds_everything(t, "k", {"epochs": 3, "stage": "search"})
    assert not holds_everything(t, "k", {"stage": "search"})  # its epochs unknown: unsure
    t.log_final("k", {"test/best/clean": 90.0}, {}, 2)
    assert holds_everything(t, "k", {"epochs": 2, "stage": "grid"})
    t.ensure_run("k1", {"ssat.kind": "trial"}, {}, name="k1")
    t.log_final("k1", {"test/best/clean": 90.0}, {}, 1)
    assert not holds_everything(t, "k1", {"epochs": 1, "stage": "grid"})  # no time/epochs: not all its epochs
    t.queue.append({"op": "tags", "key": "k", "tags": {}})  # an operation not yet in the store: unsure
    assert not holds_everything(t, "k", {"epochs": 2, "stage": "grid"})
    t.queue.clear()
    Path(store.removeprefix("sqlite:///")).write_bytes(b"not a database" * 100)  # the store broke: unsure
    assert not holds_everything(t, "k", {"epochs": 2, "stage": "grid"})


def test_an_error_files_last_line_and_a_refused_restore(tmp_path):
    err = tmp_path / "error.txt"
    err.write_text("\n  \n")
    assert error_reason(str(err)) == ("error", False)
    assert error_reason(None) == error_reason(str(tmp_path / "none")) == ("error", False)
    err.write_text("x\nsweeps.trials.trainable.NoIntactCheckpoint: a: b\n")
    assert error_reason(str(err)) == ("a: b", True)  # the reason may hold ': ' itself
    err.write_text("x\nValueError: NoIntactCheckpoint: b\n")
    assert error_reason(str(err)) == ("ValueError: NoIntactCheckpoint: b", False)

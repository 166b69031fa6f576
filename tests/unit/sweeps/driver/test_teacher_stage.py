"""The sweep's teacher stage with a pseudo-label file of the user's (data.pseudo_labels): the file is checked on the
driver before any trial starts, and no FixMatch teacher is trained for it."""
import pytest
import torch

from ssat.datasets import split_for
from ssat.pseudo_labels import PseudoLabelError, TeacherOutputs
from sweeps.driver.teacher_stage import teacher_stage
from tests.unit.ssat.test_train import tiny


def test_a_users_pseudo_labels_need_no_teacher_and_are_checked_first(tmp_path):
    cfg = tiny()
    _, split = split_for(cfg)
    good = tmp_path / "pl.pt"
    TeacherOutputs(torch.randn(len(split.unlabeled), 10), split.hash).save(good)
    lines = []
    runs = teacher_stage([cfg.replace(**{"data.pseudo_labels": str(good)})], None, "s", tmp_path / "teachers",
                         log=lines.append)
    assert runs == {} and not (tmp_path / "teachers").exists()  # nothing trained, nothing cached, no teacher run
    assert any("user-provided pseudo-labels" in ln for ln in lines)
    other = tmp_path / "other.pt"  # another split's file: refused on the driver, before any trial
    TeacherOutputs(torch.randn(len(split.unlabeled), 10), "another-split").save(other)
    for path, why in ((other, "belongs to split"), (tmp_path / "missing.pt", "no such file")):
        with pytest.raises(PseudoLabelError, match=why):
            teacher_stage([cfg.replace(**{"data.pseudo_labels": str(path)})], None, "s", tmp_path / "teachers")


def test_one_teacher_per_split_made_once_and_its_run_in_a_real_store(tmp_path, store):
    """A three-step teacher on MNIST-5k: configs sharing a split share one teacher, made once (also for a config
    that named another teacher folder: the sweep's is used), a fully labeled config needs none; the teacher's run
    holds its metrics, its test protocol and its provenance, and a second stage finds the same teacher and run."""
    import json

    from mlflow.tracking import MlflowClient

    from sweeps.tracking.tracker import Tracker

    quick = {"teacher.steps": 3, "teacher.eval_every": 2, "teacher.labeled_batch": 16, "teacher.unlabeled_batch": 24}
    a = tiny(**quick)
    other = a.replace(**{"data.split_seed": 1})  # another split: a teacher of its own
    configs = [a, a.replace(**{"method.beta": 0.5}), a.replace(**{"data.teacher_dir": str(tmp_path / "mine")}),
               tiny("mnist5k-trades"), other]
    tracker = Tracker(store, "s", log=lambda s: None)
    lines: list[str] = []
    runs = teacher_stage(configs, tracker, "s", tmp_path / "teachers", log=lines.append)
    split, split2 = split_for(a)[1].hash, split_for(other)[1].hash
    assert list(runs) == [split, split2] and not (tmp_path / "mine").exists()
    said = [ln for ln in lines if ln.startswith("[teacher] ")]
    assert len(said) == 2 and said[0].startswith(f"[teacher] mnist5k split {split}: {tmp_path / 'teachers'}/")
    assert said[0].endswith(" s)") and float(said[0].rsplit("(", 1)[1].removesuffix(" s)")) < 3600
    assert any(ln.startswith("teacher: stored ") for ln in lines)  # ensure_teacher's own lines, to the same log
    client = MlflowClient(store)
    run = client.get_run(runs[split])
    assert run.info.status == "FINISHED" and run.data.tags["ssat.kind"] == "teacher"
    assert (run.info.run_name, run.data.tags["ssat.sweep"], run.data.tags["ssat.split_hash"]) == (
        f"teacher-mnist5k-{split}", "s", split)
    assert run.data.params["teacher.steps"] == "3"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "teacher/val_acc")] == [0]
    (side,) = [p for p in (tmp_path / "teachers").rglob("provenance.json") if split in p.parent.name]
    prov = json.loads(side.read_text())
    assert side.read_text().startswith('{\n "')  # indented for a person
    assert run.data.metrics["teacher/val_acc"] == prov["val_acc"] and run.data.metrics["teacher/steps"] == 3
    assert any(k.startswith("test/teacher/") for k in run.data.metrics), sorted(run.data.metrics)
    assert any(k.startswith("protocol/") for k in run.data.tags), sorted(run.data.tags)
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["provenance.json"]
    assert teacher_stage(configs, tracker, "s", tmp_path / "teachers", log=lines.append) == runs  # found again

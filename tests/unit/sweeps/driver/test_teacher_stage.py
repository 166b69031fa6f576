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

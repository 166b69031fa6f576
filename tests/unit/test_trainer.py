"""The trainer on a tiny MNIST-5k split: exact resume, checkpoints, per-epoch metrics, faults."""
import json

import pytest
import torch

from ssat.config import from_dict
from ssat.datasets import split_for
from ssat.models import create_model
from ssat.presets import preset
from ssat.pseudo_labels import TeacherOutputs
from ssat.storage import CorruptFileError
from ssat.train import Trainer, TrainingDiverged

TINY = {"data.n_unlabeled": 120, "data.n_val": 60, "optim.epochs": 3, "attack.t": 2, "optim.lr_milestones": [3],
        "optim.lr_factors": [0.1], "eval.autoattack": False, "eval.test_n": 60, "eval.pgd_steps": [10, 20],
        "system.threads": 1}


def tiny(method="mnist5k-ssat-mbi", **over):
    extra = {"optim.swa_start": 1, "optim.lr_milestones": [2], "optim.lr_factors": [0.1]} if "awr" in method else {}
    return from_dict(preset(method), {**TINY, **extra, **over})


def fake_teacher(cfg):
    """Random-but-fixed pseudo-labels: the trainer's mechanics do not depend on their quality."""
    _, split = split_for(cfg)
    g = torch.Generator().manual_seed(0)
    model = create_model("cnn-small", 10, 1)
    return TeacherOutputs(torch.randn(len(split.unlabeled), 10, generator=g) * 3, split.hash, "cnn-small",
                          model.state_dict())


def strip(history):
    return [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in history]


@pytest.mark.parametrize("method", ["mnist5k-ssat-mbi", "mnist5k-ssat-mbi-awr"])
def test_resume_is_bit_identical(tmp_path, method):
    cfg = tiny(method)
    teacher = fake_teacher(cfg)
    straight = Trainer(cfg, tmp_path / "a", teacher=teacher, log=lambda s: None)
    straight.fit()
    stopped = Trainer(cfg, tmp_path / "b", teacher=teacher, log=lambda s: None)
    for m in stopped.epochs():
        if m["epoch"] == 2:
            break
    del stopped
    resumed = Trainer(cfg, tmp_path / "b", teacher=teacher, log=lambda s: None)
    assert resumed.epoch == 2
    resumed.fit()
    assert strip(resumed.history) == strip(straight.history)
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


def test_metrics_follow_the_schedule_and_checkpoints_exist(tmp_path):
    cfg = tiny(**{"attack.schedule": "linear", "attack.t": 3})
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    hist = tr.fit()
    eps = [m["sched/eps_max"] for m in hist]
    assert eps == pytest.approx([0.1, 0.2, 0.3])
    assert [m["adv/pgd_linf_max"] for m in hist] == pytest.approx(eps, abs=1e-5)
    for m in hist:
        assert 2 ** -3 <= m["adv/alpha_mean"] <= 1
        assert m["adv/adv_linf_mean"] <= m["sched/eps_max"] + 1e-6
        assert {"train/loss", "train/ce", "train/kl_adv", "val/clean", "val/pgd10", "sched/lr"} <= set(m)
    for name in ("best.pt", "last.pt", "state.pt", "best.pt.sha256"):
        assert (tmp_path / name).exists()
    said = []
    tr.log = said.append
    res = tr.final_evaluation()
    assert set(res) == {"best", "last"} and set(res["best"]) == {"clean", "pgd10", "pgd20"}
    n = res["best"]["clean"]["protocol"]["n"]
    # the driver follows this stage from these lines (sweeps.progress): no AutoAttack in this config
    assert said[0] == f"final evaluation: best/last checkpoint on {n:,} test images, PGD-10, PGD-20"
    assert said[1:] == [f"  [{k}] pgd{s}: {res[k][f'pgd{s}']['acc']:.2f}%" for k in ("best", "last") for s in (10, 20)]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert json.loads(saved["protocols"]["protocol/best/pgd20"])["step"] == pytest.approx(0.03)


def test_nan_loss_stops_with_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("SSAT_FAULT", "nan@2")
    cfg = tiny()
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    with pytest.raises(TrainingDiverged, match="epoch 2"):
        tr.fit()
    assert tr.epoch == 1


def test_corrupt_state_is_reported_not_loaded(tmp_path):
    cfg = tiny(**{"optim.epochs": 1, "attack.t": 1, "optim.lr_milestones": [], "optim.lr_factors": []})
    teacher = fake_teacher(cfg)
    Trainer(cfg, tmp_path, teacher=teacher, log=lambda s: None).fit()
    data = bytearray((tmp_path / "state.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "state.pt").write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        Trainer(cfg, tmp_path, teacher=teacher, log=lambda s: None)


def test_resume_refuses_another_config(tmp_path):
    cfg = tiny(**{"optim.epochs": 1, "attack.t": 1, "optim.lr_milestones": [], "optim.lr_factors": []})
    teacher = fake_teacher(cfg)
    Trainer(cfg, tmp_path, teacher=teacher, log=lambda s: None).fit()
    with pytest.raises(ValueError, match="another configuration"):
        Trainer(cfg.replace(**{"method.beta": 0.9}), tmp_path, teacher=teacher, log=lambda s: None)

"""End to end on MNIST-5k with the real FixMatch teacher: the schedule is followed, interpolation is active,
and adversarial training is robust where standard training is not."""
import pytest

from ssat.config import from_dict
from ssat.presets import preset
from ssat.train import Trainer

pytestmark = pytest.mark.integration
COMMON = {"optim.epochs": 8, "attack.t": 6, "optim.lr_milestones": [7], "optim.lr_factors": [0.1],
          "eval.autoattack": False, "eval.pgd_steps": [10, 20], "system.threads": 2}


def _train(name, tmp_path, teacher_dir, **over):
    cfg = from_dict(preset(name), {**COMMON, "data.teacher_dir": str(teacher_dir), **over})
    tr = Trainer(cfg, tmp_path / name, log=print)
    hist = tr.fit()
    return cfg, hist, tr.final_evaluation(("best",))["best"]


def test_adversarial_training_beats_standard_training_by_30_points(tmp_path, teacher_dir):
    cfg, hist, adv = _train("mnist5k-ssat-mbi", tmp_path, teacher_dir, **{"attack.schedule": "curious"})
    for m in hist:  # the measured perturbation follows the epsilon schedule
        assert m["adv/pgd_linf_max"] == pytest.approx(m["sched/eps_max"], abs=1e-5)
        assert 2 ** -cfg.method.K < m["adv/alpha_mean"] < 1  # interpolation really moves the examples
        assert m["adv/adv_linf_mean"] < m["sched/eps_max"]
    assert [round(m["sched/eps_max"], 4) for m in hist] == [0.0625, 0.125, 0.1875, 0.25, 0.3125, 0.375, 0.3, 0.3]
    _, _, std = _train("mnist5k-standard", tmp_path, teacher_dir)
    print(f"\nPGD-20 at eps 0.3 on the 1,000 test images: SSAT-MBI {adv['pgd20']['acc']:.1f}% "
          f"(clean {adv['clean']['acc']:.1f}%), standard training {std['pgd20']['acc']:.1f}% "
          f"(clean {std['clean']['acc']:.1f}%)")
    assert std["pgd20"]["acc"] < 10.0
    assert adv["pgd20"]["acc"] >= std["pgd20"]["acc"] + 30.0

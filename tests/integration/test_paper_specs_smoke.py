"""Every paper spec passes a 1-epoch smoke run on a few synthetic images written in torchvision's on-disk
formats: data loading, split, teacher, every method's loss, SWA, selection and the test protocol, end to end.
To fit a CPU the smoke run swaps each WideResNet/ResNet for wrn-16-1 (the architectures themselves are
checked by forward tests); no accuracy claim is made."""
from pathlib import Path

import pytest

from ssat.train import Trainer
from sweeps.spec import load_spec
from ssat.synthetic import write_cifar10, write_cifar100, write_svhn

pytestmark = pytest.mark.integration
SPECS = Path(__file__).resolve().parents[2] / "sweeps" / "specs"
SMOKE = {"model.name": "wrn-16-1", "data.n_val": 20, "data.n_unlabeled": 30, "eval.test_n": 20,
         "eval.pgd_steps": [10], "eval.autoattack": False, "eval.batch_size": 50, "optim.batch_size": 32,
         "optim.labeled_batch": 8, "optim.unlabeled_batch": 16, "optim.lr_milestones": [], "optim.lr_factors": [],
         "teacher.steps": 2, "teacher.eval_every": 1, "teacher.labeled_batch": 8, "teacher.unlabeled_batch": 16,
         "system.threads": 2}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("tv")
    write_cifar10(root, n_train=300, n_test=40)
    write_cifar100(root, n_train=400, n_test=40)
    write_svhn(root, n_train=300, n_test=40)
    return root


@pytest.mark.parametrize("spec_name", sorted(p.stem for p in SPECS.glob("paper-*.yaml")))
def test_paper_spec_one_epoch_smoke(spec_name, data_root, tmp_path):
    spec = load_spec(SPECS / f"{spec_name}.yaml", epochs=1, data_root=str(data_root), sets=dict(SMOKE))
    seen = {}
    for t in spec.trials():  # one trial per distinct (dataset, method, supervised) of the spec
        c = t.config
        seen.setdefault((c.data.dataset, c.method.name, c.data.fully_labeled), t)
    for key, t in seen.items():
        cfg = t.config
        if cfg.data.dataset == "cifar100":
            cfg = cfg.replace(**{"data.n_labeled": 100})
        elif not cfg.data.fully_labeled:
            cfg = cfg.replace(**{"data.n_labeled": 10})
        cfg = cfg.replace(**{"data.teacher_dir": str(tmp_path / "teachers")})
        tr = Trainer(cfg, tmp_path / "-".join(map(str, key)), log=lambda s: None)
        hist = tr.fit()
        assert len(hist) == 1 and hist[0]["train/loss"] == hist[0]["train/loss"]  # finite, not NaN
        res = tr.final_evaluation(("best",))["best"]
        assert set(res) == {"clean", "pgd10"}
        assert all(0 <= r["acc"] <= 100 and r["protocol"]["checkpoint"] == "best" for r in res.values())

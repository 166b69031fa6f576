"""The paper's experiments as specs: every paper spec matches the hyperparameter table (Table 7 and the
appendix's training setup), typed here from the paper independently of ssat/data/paper_hparams.csv."""
from pathlib import Path

import pytest

from ssat.presets import paper_table
from sweeps.costs.dryrun import dry_run
from sweeps.spec import load_spec

SPECS = Path(__file__).resolve().parents[3] / "sweeps" / "specs"
E = 8 / 255
# Table 7: dataset, method -> (lambda, K, tau, beta, inner max., schedule (gamma, t), rho0, rho doubled at)
TABLE7 = {
    ("cifar10", "uat++"): (8, None, None, None, "ce", None, None, None),
    ("cifar10", "rst"): (8, None, None, None, "ce", None, None, None),
    ("cifar10", "ssat-mbi"): (8, 3, 2, 0.4, "ce", (1.25, 70), 0.05, 75),
    ("cifar10", "srst-awr"): (20, None, None, None, "kl", None, None, None),
    ("cifar10", "ssat-mbi-awr"): (20, 3, 2, 0.5, "kl", (1.25, 60), 0.05, 75),
    ("svhn", "uat++"): (4, None, None, None, "ce", None, None, None),
    ("svhn", "rst"): (4, None, None, None, "ce", None, None, None),
    ("svhn", "ssat-mbi"): (4, 3, 2, 0.5, "ce", (1.25, 60), 0.05, None),
    ("svhn", "srst-awr"): (15, None, None, None, "ce", None, None, None),
    ("svhn", "ssat-mbi-awr"): (15, 3, 2, 0.5, "ce", (1.25, 60), 0.05, None),
    ("cifar100", "uat++"): (6, None, None, None, "ce", None, None, None),
    ("cifar100", "rst"): (6, None, None, None, "ce", None, None, None),
    ("cifar100", "ssat-mbi"): (6, 4, 2, 1.0, "ce", (1.25, 60), 0.05, None),
    ("cifar100", "srst-awr"): (20, None, None, None, "ce", None, None, None),
    ("cifar100", "ssat-mbi-awr"): (20, 3, 2, 1.0, "ce", (1.25, 60), 0.05, None),
}
MODELS = {"cifar10": "wrn-28-5", "svhn": "wrn-28-2", "cifar100": "wrn-28-8"}


def check_table7(cfg):
    lam, K, tau, beta, inner, sched, rho0, rho_double = TABLE7[(cfg.data.dataset, cfg.method.name)]
    m, a, o = cfg.method, cfg.attack, cfg.optim
    assert m.lam == lam and a.inner_loss == inner and cfg.model.name == MODELS[cfg.data.dataset]
    assert cfg.eps == pytest.approx(E) and a.steps == 10 and a.step_ratio == 0.25 and a.init == "uniform"
    if K is None:
        assert not m.interpolate and a.schedule == "const"
    else:
        assert m.interpolate and (m.K, m.tau, m.beta, m.rho0, m.rho_double_epoch) == (K, tau, beta, rho0, rho_double)
        assert (a.schedule, a.gamma, a.t) == ("curious", *sched)
    if cfg.batching.name == "awr":  # appendix: SGD 0.1, momentum 0.9, wd 5e-4, 64 + 128, SWA after 50 epochs
        short = m.name == "ssat-mbi-awr" and cfg.data.dataset in ("cifar10", "svhn")
        assert (o.epochs, o.lr_milestones) == ((120, [50]) if short else (200, [50, 150]))
        assert (o.lr, o.momentum, o.weight_decay, o.labeled_batch, o.unlabeled_batch, o.swa_start) == \
            (0.1, 0.9, 5e-4, 64, 128, 50)
    else:  # appendix: 100 epochs, lr x0.1/x0.01/x0.005 at 60/70/90, wd 2e-4, batch 128
        assert (o.epochs, o.lr, o.momentum, o.weight_decay, o.batch_size) == (100, 0.1, 0.9, 2e-4, 128)
        assert (o.lr_milestones, o.lr_factors) == ([60, 70, 90], [0.1, 0.01, 0.005])


def test_shipped_table7_data_matches_the_paper():
    rows = paper_table()
    assert len(rows) == len(TABLE7)
    for r in rows:
        lam, K, tau, beta, inner, sched, rho0, rho_double = TABLE7[(r["dataset"], r["method"])]
        assert (r["lambda"], r["K"], r["tau"], r["beta"], r["inner_loss"]) == (lam, K, tau, beta, inner)
        assert ((r["gamma"], r["t"]) == (sched or (None, None))
                and (r["rho0"], r["rho_double_epoch"]) == (rho0, rho_double))


def test_table1_spec_is_table7():
    spec = load_spec(SPECS / "paper-table1-main.yaml")
    trials = spec.trials()
    assert len(trials) == 15 * 3 and {t.seed for t in trials} == {0, 1, 2}
    assert {(t.config.data.dataset, t.config.method.name) for t in trials} == set(TABLE7)
    for t in trials:
        check_table7(t.config)


@pytest.mark.parametrize("name,rows", [("paper-table2-ablation", 6), ("paper-table3-schedules", 10),
                                       ("paper-table4-awr-ablation", 6), ("paper-fig4-beta", 6),
                                       ("paper-fig5-rho", 16), ("paper-tables5-6-supervised", 4)])
def test_paper_specs_rows_and_fixed_settings(name, rows, capsys):
    spec = load_spec(SPECS / f"{name}.yaml")
    trials = spec.trials()
    assert len(trials) == rows * 3 and spec.table
    for t in trials:
        c = t.config
        if c.data.dataset == "cifar10" and not c.data.fully_labeled:
            base = c.replace(**{"attack.schedule": "curious", "attack.t": 70 if c.method.name == "ssat-mbi" else 60,
                                "attack.gamma": 1.25, "method.interpolate": True, "method.beta":
                                TABLE7[("cifar10", c.method.name)][3], "method.rho0": 0.05})
            check_table7(base)  # everything but the varied settings is Table 7's
    dry_run(spec)
    assert "nothing was started" in capsys.readouterr().out


def test_ablation_rows_are_the_papers():
    got = {t.row: (t.config.attack.schedule, t.config.attack.t, t.config.attack.gamma, t.config.method.interpolate)
           for t in load_spec(SPECS / "paper-table2-ablation.yaml").trials()}
    assert got["linear|off"][:2] == ("linear", 60) and got["curious|on"] == ("curious", 70, 1.25, True)
    assert got["const|off"][0] == "const" and got["const|off"][3] is False


def test_supervised_spec_is_trades_plus_ours():
    trials = {t.row: t.config for t in load_spec(SPECS / "paper-tables5-6-supervised.yaml").trials()}
    ours = trials["TRADES+Ours/resnet18"]
    assert ours.data.fully_labeled and ours.model.name == "resnet18" and ours.method.name == "trades"
    assert (ours.method.rho0, ours.method.K, ours.attack.schedule, ours.attack.gamma, ours.attack.t) == \
        (0.05, 3, "curious", 1.25, 70)
    plain = trials["TRADES/wrn-28-5"]
    assert not plain.method.interpolate and plain.attack.inner_loss == "kl" and plain.attack.step_size == 0.007

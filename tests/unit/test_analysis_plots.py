"""analysis.plots on hand-built runs: PNG files of the expected size with the expected number of series."""
import json

import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.image import imread

from analysis.collect import history_frame, runs_frame
from analysis.plots import DPI, SIZES, build_figure, pareto_mask, plot_figure

EPS = 8 / 255


def proto(attack):
    rec = {"attack": attack, "eps": EPS, "norm": "Linf", "step": EPS / 10, "restarts": 1, "n": 10000,
           "subset": "full", "precision": "fp32", "checkpoint": "best",
           "steps": int(attack[3:]) if attack.startswith("pgd") else None,
           "autoattack": {"version": "standard"} if attack == "autoattack" else None}
    return json.dumps(rec)


def trial(i, table, seed, **params):
    p = {"method": "ssat-mbi", "schedule": "const", "interpolate": "True", "beta": "0.4", "rho0": "0.05",
         "dataset": "cifar10", "model": "wrn-28-5", **{k: str(v) for k, v in params.items()}}
    rec = {"run_id": f"r{i}", "experiment": "e", "source": "mlflow", "meta.kind": "trial", "meta.table": table,
           "meta.stage": "grid", "meta.seed": str(seed), "meta.expected_seeds": "2", "meta.status": "FINISHED",
           "meta.config_hash": "|".join(f"{k}={v}" for k, v in sorted(p.items())),
           **{f"param.{k}": v for k, v in p.items()}}
    for j, attack in enumerate(("clean", "pgd20", "autoattack")):
        rec[f"metric.test/best/{attack}"] = 80.0 - 20 * j + i % 5
        rec[f"protocol.best/{attack}"] = proto(attack)
    rec["metric.val/clean"] = 70.0 + (i * 7) % 11
    rec["metric.val/pgd10"] = 50.0 - (i * 3) % 7
    return rec


def series(fig):
    """Error-bar series per axes (Figs. 4-5) or lines per axes (curves, alpha, pareto)."""
    return [sum(isinstance(c, ErrorbarContainer) for c in ax.containers) or len(ax.get_lines())
            for ax in fig.axes]


def png_size(path):
    h, w = imread(path).shape[:2]
    return w, h


def expected_size(figure):
    w, h = SIZES[figure]
    return int(w * DPI), int(h * DPI)


@pytest.fixture(scope="module")
def beta_runs():
    return runs_frame([trial(i * 2 + s, "beta-sensitivity", s, beta=b) for i, b in enumerate([0.2, 0.4, 1.0])
                       for s in range(2)])


@pytest.fixture(scope="module")
def rho_runs():
    recs, i = [], 0
    for beta in (0.4, 1.0):
        for sched in ("const", "curious"):
            for rho in (0.025, 0.05, 0.1):
                for s in range(2):
                    recs.append(trial(i, "rho-sensitivity", s, beta=beta, schedule=sched, rho0=rho, t=70))
                    i += 1
    return runs_frame(recs)


def test_beta_figure(beta_runs, tmp_path):
    fig = build_figure(beta_runs, None, "beta")
    assert series(fig) == [1, 1, 1]  # three panels (Clean, PGD-20, AutoAttack), one dataset group each
    bars = fig.axes[0].containers[0]
    xs = bars.lines[0].get_xdata()
    assert list(xs) == [0.2, 0.4, 1.0]
    out = plot_figure(beta_runs, None, "beta", tmp_path / "beta.png")
    assert png_size(out) == expected_size("beta")


def test_rho_figure_has_the_four_settings(rho_runs, tmp_path):
    fig = build_figure(rho_runs, None, "rho")
    assert series(fig) == [4, 4, 4]
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(labels) == 4 and all("beta=" in x for x in labels)
    assert png_size(plot_figure(rho_runs, None, "rho", tmp_path / "rho.png")) == expected_size("rho")


def test_pareto_front(tmp_path):
    runs = runs_frame([trial(i, "", 0, beta=i / 10) for i in range(10)])
    fig = build_figure(runs, None, "pareto")
    ax = fig.axes[0]
    assert len(ax.collections) == 1 and len(ax.get_lines()) == 1  # the trials, and the front
    x, y = runs["metric.val/clean"].to_numpy(), runs["metric.val/pgd10"].to_numpy()
    front = ax.get_lines()[0]
    on_front = {(a, b) for a, b in zip(x, y) if not any((x >= a) & (y >= b) & ((x > a) | (y > b)))}
    assert set(zip(front.get_xdata(), front.get_ydata())) == on_front
    assert png_size(plot_figure(runs, None, "pareto", tmp_path / "p.png")) == expected_size("pareto")


def test_pareto_mask_by_hand():
    x = np.array([1.0, 2.0, 3.0, 2.0, 0.5])
    y = np.array([3.0, 2.0, 1.0, 1.0, 0.5])
    assert pareto_mask(x, y).tolist() == [True, True, True, False, False]


@pytest.fixture(scope="module")
def curves_data():
    runs = runs_frame([{**trial(i, "ablation", i % 3, schedule=s), "meta.row": row}
                       for i, (s, row) in enumerate([("const", "none|int")] * 3 + [("curious", "Cur.|int")] * 3)])
    rows = []
    for i, run_id in enumerate(runs["run_id"]):
        for step in range(1, 6):
            vals = {"val/clean": 50 + step + i, "val/pgd10": 30 + step, "sched/eps_max": step / 255,
                    "sched/rho": 0.05, "sched/lr": 0.1, "adv/alpha_mean": 0.5 + step / 20,
                    "adv/alpha_min_share": 0.1, "adv/alpha_one_share": 0.2 + step / 50}
            rows += [{"run_id": run_id, "key": k, "step": step, "value": v} for k, v in vals.items()]
    return runs, history_frame(rows)


def test_curves_figure(curves_data, tmp_path):
    runs, hist = curves_data
    fig = build_figure(runs, hist, "curves")
    assert series(fig) == [4, 2, 2, 2]  # 2 configs x (clean, pgd10) above; eps_max, rho, lr per config below
    top = fig.axes[0].get_lines()
    mean_clean = [l for l in top if l.get_label() == "none|int val/clean"][0].get_ydata()
    expected = [np.mean([50 + s + i for i in range(3)]) for s in range(1, 6)]
    assert np.allclose(mean_clean, expected)
    assert png_size(plot_figure(runs, hist, "curves", tmp_path / "c.png")) == expected_size("curves")


def test_alpha_figure(curves_data, tmp_path):
    runs, hist = curves_data
    fig = build_figure(runs, hist, "alpha")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.collections) == 3 and len(ax.get_lines()) == 1  # three shares stacked, the mean
    assert png_size(plot_figure(runs, hist, "alpha", tmp_path / "a.png")) == expected_size("alpha")


def test_unknown_figure_lists_the_valid_ones(beta_runs):
    with pytest.raises(ValueError, match="valid figures: beta, rho, pareto, curves, alpha"):
        build_figure(beta_runs, None, "loss")
    with pytest.raises(ValueError, match="needs the per-epoch history"):
        build_figure(beta_runs, None, "curves")

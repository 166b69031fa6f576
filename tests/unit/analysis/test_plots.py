"""analysis.plots on hand-built runs: PNG files of the expected size, and the plotted values (error-bar centres
and ends, bar heights, bands, stacked shares) read back from the Figure and compared with means and sample
stds (ddof=1) computed here from the metric values typed into the runs; bars from 0, no error bar for one seed,
"n/a" for a row without runs, and the data statement (experiments, seeds, protocol) under every figure."""
import json
import statistics

import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.image import imread

from analysis.collect import history_frame, runs_frame
from analysis.plots import FIGURES, build_figure, pareto_mask, plot_figure

EPS = 8 / 255


def proto(attack):
    rec = {"attack": attack, "eps": EPS, "norm": "Linf", "step": EPS / 10, "restarts": 1, "n": 10000,
           "subset": "full", "precision": "fp32", "checkpoint": "best",
           "steps": int(attack[3:]) if attack.startswith("pgd") else None,
           "autoattack": {"version": "standard"} if attack == "autoattack" else None}
    return json.dumps(rec)


# the registry entries' labels, as a run of today records them (ssat.schedule_label, _title, _row)
SCHEDULE_LABELS = {"const": ("none", "Const", "Const"), "linear": ("Lin.", "Linear", "Linear-{t}"),
                   "curious": ("Cur.", "Curious", "Curious-({gamma},{t})")}
# short keyword -> the run record's parameter name
NAMES = {"schedule": "attack.schedule", "t": "attack.t", "gamma": "attack.gamma", "interpolate": "method.interpolate",
         "beta": "method.beta", "rho0": "method.rho0", "lambda": "method.lam", "dataset": "data.dataset",
         "model": "model.name"}


def trial(i, table, seed, **params):
    p = {"method.name": "ssat-mbi", "attack.schedule": "const", "method.interpolate": "True", "method.beta": "0.4",
         "method.rho0": "0.05", "data.dataset": "cifar10", "model.name": "wrn-28-5",
         **{NAMES.get(k, k): str(v) for k, v in params.items()}}
    rec = {"run_id": f"r{i}", "experiment": "e", "source": "mlflow", "meta.kind": "trial", "meta.table": table,
           "meta.stage": "grid", "meta.seed": str(seed), "meta.expected_seeds": "2", "meta.status": "FINISHED",
           "meta.config_hash": "|".join(f"{k}={v}" for k, v in sorted(p.items())),
           **{f"param.{k}": v for k, v in p.items()}, "meta.method_label": "SSAT-MBI",
           **dict(zip(("meta.schedule_label", "meta.schedule_title", "meta.schedule_row"),
                      SCHEDULE_LABELS[p["attack.schedule"]]))}
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


# (width, height) in pixels: 12 x 4, 6 x 5 and 9 x 9 inches at 100 dpi
PIXELS = {"beta": (1200, 400), "rho": (1200, 400), "pareto": (600, 500), "curves": (900, 900), "alpha": (1200, 400),
          "ablation": (1200, 400)}


def expected_size(figure):
    return PIXELS[figure]


def clean(i):
    """metric.test/best/clean of trial(i) (PGD-20 is 20 lower, AutoAttack 40 lower)."""
    return 80.0 + i % 5


def mean_std(values):
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def errorbars(container: ErrorbarContainer):
    """(x, centre, lower end, upper end) per point of an error-bar series (centre None: bars draw no line)."""
    line, _, (bars,) = container.lines
    segs = bars.get_segments()
    ys = line.get_ydata() if line is not None else [None] * len(segs)
    return [(seg[0][0], y, seg[0][1], seg[1][1]) for seg, y in zip(segs, ys)]


def check_series(container, xs, runs_at_x, offset=0.0):
    """The series has, at each x, centre = mean and ends = mean -+ std of those runs' metric values."""
    got = errorbars(container)
    assert [g[0] for g in got] == pytest.approx(xs)
    for (x, y, lo, hi), ids in zip(got, runs_at_x):
        m, sd = mean_std([clean(i) - offset for i in ids])
        assert (y, lo, hi) == pytest.approx((m, m - sd, m + sd)), x


def na_positions(ax):
    """x of every "n/a" label of an axes (a cell without runs)."""
    return sorted(t.get_position()[0] for t in ax.texts if t.get_text() == "n/a")


def band(collection):
    """x -> (lowest, highest) y of a fill_between / stackplot polygon."""
    out = {}
    for x, y in collection.get_paths()[0].vertices:
        lo, hi = out.get(x, (y, y))
        out[x] = (min(lo, y), max(hi, y))
    return out


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
    runs_at = [[0, 1], [2, 3], [4, 5]]  # trial ids of beta 0.2, 0.4, 1.0 (two seeds each)
    for ax, offset in zip(fig.axes, (0, 20, 40)):  # Clean, PGD-20, AutoAttack
        check_series(ax.containers[0], [0.2, 0.4, 1.0], runs_at, offset)
    # beta 1.0: seeds scored 84 and 80 -> mean 82, std 4 / sqrt(2)
    assert errorbars(fig.axes[0].containers[0])[2][1:] == pytest.approx((82, 82 - 8 ** 0.5, 82 + 8 ** 0.5))
    out = plot_figure(beta_runs, None, "beta", tmp_path / "beta.png")
    assert png_size(out) == expected_size("beta")


def test_rho_figure_has_the_four_settings(rho_runs, tmp_path):
    fig = build_figure(rho_runs, None, "rho")
    assert series(fig) == [4, 4, 4]
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(labels) == 4 and all("beta=" in x for x in labels)
    # trial ids per setting, in the fixture's order (beta, schedule, rho 0.025/0.05/0.1, two seeds)
    first = {"beta=0.4, Const": 0, "beta=0.4, Curious": 6, "beta=1, Const": 12, "beta=1, Curious": 18}
    for ax, offset in zip(fig.axes, (0, 20, 40)):
        for container, label in zip(ax.containers, labels):
            i0 = next(v for k, v in first.items() if label.endswith(k))
            check_series(container, [0.025, 0.05, 0.1], [[i0, i0 + 1], [i0 + 2, i0 + 3], [i0 + 4, i0 + 5]], offset)
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
            vals = {"val/clean": 50 + step + i, "val/pgd10": 30 + step, "train/loss": 2.3 - step / 10 - i / 100,
                    "sched/eps_max": step / 255,
                    "sched/rho": 0.05, "sched/lr": 0.1 if step < 4 else 0.01, "adv/alpha_mean": 0.5 + step / 20,
                    "adv/alpha_min_share": 0.1, "adv/alpha_one_share": 0.2 + step / 50}
            rows += [{"run_id": run_id, "key": k, "step": step, "value": v} for k, v in vals.items()]
    return runs, history_frame(rows)


def test_curves_figure(curves_data, tmp_path):
    runs, hist = curves_data
    fig = build_figure(runs, hist, "curves")
    # 2 configs x (clean, pgd10) above; the training loss, eps_max and lr per config below; rho is 0.05 in every
    # epoch of every configuration: no panel (said under the figure)
    assert series(fig) == [4, 2, 2, 2]
    assert [ax.get_ylabel() for ax in fig.axes] == ["validation accuracy (%)", "loss", "eps_max", "lr"]
    assert statement(fig).endswith("per epoch; panels left out: sched/rho = 0.05 at every epoch")
    top = fig.axes[0].get_lines()
    mean_clean = [ln for ln in top if ln.get_label() == "none|int val/clean"][0].get_ydata()
    expected = [np.mean([50 + s + i for i in range(3)]) for s in range(1, 6)]
    assert np.allclose(mean_clean, expected)
    # The band is mean -+ std over the three seeds: values i, i+1, i+2 apart -> std 1.
    clean_band = band(fig.axes[0].collections[[ln.get_label() for ln in top].index("none|int val/clean")])
    assert clean_band == {s: pytest.approx((51 + s - 1, 51 + s + 1)) for s in range(1, 6)}
    pgd_band = band(fig.axes[0].collections[[ln.get_label() for ln in top].index("none|int val/pgd10")])
    assert pgd_band == {s: pytest.approx((30 + s, 30 + s)) for s in range(1, 6)}  # equal seeds: no spread
    cur, none = fig.axes[1].get_lines()  # Cur.|int (runs 3-5) first; the mean of 2.3 - s/10 - i/100 over i
    assert fig.axes[1].get_ylabel() == "loss"
    assert list(cur.get_ydata()) == pytest.approx([2.3 - s / 10 - 0.04 for s in range(1, 6)])
    assert list(none.get_ydata()) == pytest.approx([2.3 - s / 10 - 0.01 for s in range(1, 6)])
    eps_lines = fig.axes[2].get_lines()
    assert all(list(ln.get_ydata()) == pytest.approx([s / 255 for s in range(1, 6)]) for ln in eps_lines)
    assert [list(ln.get_ydata()) for ln in fig.axes[3].get_lines()] == [pytest.approx([0.1] * 3 + [0.01] * 2)] * 2
    assert png_size(plot_figure(runs, hist, "curves", tmp_path / "c.png")) == expected_size("curves")


def test_curves_mark_where_validation_switches_to_averaged_weights(curves_data):
    runs, hist = curves_data
    marked = runs.assign(**{"param.optim.swa_start": "3"})  # epochs 4 and 5 validate the averaged model
    top = build_figure(marked, hist, "curves").axes[0]
    (line,) = [ln for ln in top.get_lines() if ln.get_label().startswith("SWA")]
    assert line.get_label() == "SWA from epoch 4" and list(line.get_xdata()) == [3.5, 3.5]
    assert "SWA from epoch 4" in [t.get_text() for t in legend_of(top.figure).get_texts()]
    # no line where runs average nothing, were logged before the param, or disagree within a configuration
    for swa in ("None", None, ["3", "4", "3", "3", "3", "4"]):
        fig = build_figure(runs.assign(**{"param.optim.swa_start": swa}), hist, "curves")
        assert [ln.get_label() for ln in fig.axes[0].get_lines() if ln.get_label().startswith("SWA")] == []
    # one line per distinct start; configurations that average nothing add none
    two = runs.assign(**{"param.optim.swa_start": ["3"] * 3 + ["None"] * 3})
    assert [ln.get_label() for ln in build_figure(two, hist, "curves").axes[0].get_lines()
            if ln.get_label().startswith("SWA")] == ["SWA from epoch 4"]
    both = runs.assign(**{"param.optim.swa_start": ["3"] * 3 + ["1"] * 3})
    assert [ln.get_label() for ln in build_figure(both, hist, "curves").axes[0].get_lines()
            if ln.get_label().startswith("SWA")] == ["SWA from epoch 2", "SWA from epoch 4"]


def test_alpha_figure(curves_data, tmp_path):
    runs, hist = curves_data
    fig = build_figure(runs, hist, "alpha")
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.collections) == 3 and len(ax.get_lines()) == 1  # three shares stacked, the mean
        low, between, one = (band(c) for c in ax.collections)
        for s in range(1, 6):  # shares: 0.1 at 2^-K, 0.2 + s/50 at 1, the rest between
            assert low[s] == pytest.approx((0.0, 0.1))
            assert between[s] == pytest.approx((0.1, 1 - 0.2 - s / 50))
            assert one[s] == pytest.approx((1 - 0.2 - s / 50, 1.0))
        assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([0.5 + s / 20 for s in range(1, 6)])
    assert png_size(plot_figure(runs, hist, "alpha", tmp_path / "a.png")) == expected_size("alpha")


def test_ablation_bars_are_the_tables_means_and_stds(tmp_path):
    recs = [trial(2 * k + seed, "ablation", seed, schedule=sched, interpolate=interp, t=60, gamma=1.25)
            for k, (sched, interp) in enumerate([("const", "False"), ("linear", "True"), ("curious", "True")])
            for seed in range(2)]
    fig = build_figure(runs_frame(recs), None, "ablation")
    assert len(fig.axes) == 3
    rows = ["none|no-int", "Lin.|no-int", "Cur.|no-int", "none|int", "Lin.|int", "Cur.|int"]
    runs_of = {"none|no-int": [0, 1], "Lin.|int": [2, 3], "Cur.|int": [4, 5]}  # the other rows have no runs
    for ax, offset in zip(fig.axes, (0, 20, 40)):
        assert [t.get_text() for t in ax.get_xticklabels()] == rows
        (bars,) = [c for c in ax.containers if not isinstance(c, ErrorbarContainer)]
        # a bar (and its error bar) only where a row has runs, at that row's tick; the others read "n/a"
        assert [p.get_x() + p.get_width() / 2 for p in bars.patches] == [rows.index(r) for r in runs_of]
        for r, patch, (x, _, lo, hi) in zip(runs_of, bars.patches, errorbars(bars.errorbar)):
            m, sd = mean_std([clean(i) - offset for i in runs_of[r]])
            assert (x, patch.get_height(), lo, hi) == pytest.approx((rows.index(r), m, m - sd, m + sd)), r
        assert na_positions(ax) == [rows.index(r) for r in rows if r not in runs_of]
    assert png_size(plot_figure(runs_frame(recs), None, "ablation", tmp_path / "ab.png")) == expected_size("ablation")


def test_ablation_bars_are_coloured_by_interpolation_and_the_standard_row_is_grey():
    from matplotlib.colors import to_hex

    recs = [trial(k, "ablation", 0, schedule=sched, interpolate=interp, t=60, gamma=1.25, **{"lambda": lam})
            for k, (sched, interp, lam) in enumerate([("const", "False", 8.0), ("linear", "True", 8.0),
                                                       ("const", "False", 0.0)])]
    ax = build_figure(runs_frame(recs), None, "ablation").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()][-1] == "standard training"
    (bars,) = [c for c in ax.containers if not isinstance(c, ErrorbarContainer)]
    assert [to_hex(p.get_facecolor()) for p in bars.patches] == ["#9ecae1", "#3182bd", "#999999"]


def test_unknown_figure_lists_the_valid_ones(beta_runs):
    with pytest.raises(ValueError, match="valid figures: beta, rho, pareto, curves, alpha"):
        build_figure(beta_runs, None, "loss")
    with pytest.raises(ValueError, match="needs the per-epoch history"):
        build_figure(beta_runs, None, "curves")


def test_bars_start_at_zero_one_seed_has_no_error_bar_and_an_empty_row_reads_na():
    recs = [trial(i, "ablation", i, schedule="const", interpolate="False") for i in range(2)]  # 2 seeds
    recs.append(trial(7, "ablation", 0, schedule="curious", interpolate="True", t=70, gamma=1.25))  # 1 seed
    fig = build_figure(runs_frame(recs), None, "ablation")
    rows = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    one, two = rows.index("Cur.|int"), rows.index("none|no-int")
    for ax, offset in zip(fig.axes, (0, 20, 40)):
        assert ax.get_ylim() == (0, 100)
        (bars,) = [c for c in ax.containers if not isinstance(c, ErrorbarContainer)]
        assert [p.get_y() for p in bars.patches] == [0, 0]  # drawn from 0, not from the lowest mean
        assert [p.get_x() + p.get_width() / 2 for p in bars.patches] == [two, one]
        assert [p.get_height() for p in bars.patches] == [80.5 - offset, clean(7) - offset]
        (x, _, lo, hi), = errorbars(bars.errorbar)  # the one-seed bar has none
        sd = statistics.stdev([80.0, 81.0])
        assert (x, lo, hi) == pytest.approx((two, 80.5 - offset - sd, 80.5 - offset + sd))
        assert na_positions(ax) == [i for i in range(6) if i not in (one, two)]
        labels = [t.get_text() for t in ax.texts if t.get_text() != "n/a"]
        assert labels == [f"{80.5 - offset:.2f}", f"{clean(7) - offset:.2f}"]  # the table's means, on the bars


def test_a_one_seed_point_of_a_sweep_has_no_error_bar():
    recs = [trial(i, "beta-sensitivity", i, beta=0.4) for i in range(2)] + [trial(5, "beta-sensitivity", 0, beta=1.0)]
    fig = build_figure(runs_frame(recs), None, "beta")
    for ax in fig.axes:
        (container,) = ax.containers
        assert list(container.lines[0].get_xdata()) == [0.4, 1.0]  # both points drawn
        assert [x for x, *_ in errorbars(container)] == [0.4]      # one error bar: beta 0.4 has two seeds


def test_a_one_seed_configuration_has_no_band(curves_data):
    runs, hist = curves_data
    fig = build_figure(runs.iloc[:4], hist, "curves")  # none|int: 3 seeds, Cur.|int: 1 seed
    top = fig.axes[0]
    assert len(top.get_lines()) == 4 and len(top.collections) == 2  # bands of none|int's clean and pgd10 only
    assert "(1-3 per configuration)" in fig.get_supxlabel()


def statement(fig):
    return " ".join(fig.get_supxlabel().split())  # unwrapped


def test_every_figure_states_its_data(beta_runs, rho_runs, curves_data):
    runs, hist = curves_data
    table = ("; protocol: test set, checkpoint best, fp32, Clean, PGD-20, AutoAttack, Linf eps 8/255, PGD step "
             "eps*0.1, 1 restart, AutoAttack standard; full test set")
    expected = {
        "beta": (beta_runs, None, "experiment e; seeds 0, 1 (2 per point)" + table),
        "rho": (rho_runs, None, "experiment e; seeds 0, 1 (2 per point)" + table),
        "ablation": (runs, None, "experiment e; seeds 0, 1, 2 (3 per bar)" + table),
        "pareto": (runs, None, "experiment e; seeds 0, 1, 2 (1 per point); protocol: validation split, val/clean, "
                   "val/pgd10 (PGD-10 at eps of the run), trial runs (last reported epoch)"),
        "curves": (runs, hist, "experiment e; seeds 0, 1, 2 (3 per configuration); protocol: validation split, "
                   "val/clean, val/pgd10 (PGD-10 at eps of the run), trial runs, per epoch; panels left out: "
                   "sched/rho = 0.05 at every epoch"),
        "alpha": (runs, hist, "experiment e; seeds 0, 1, 2 (3 per configuration); alpha_hat of the training "
                  "batches' adversarial examples (adv/alpha_*), per epoch, trial runs"),
    }
    assert set(expected) == set(FIGURES)
    for name, (df, h, text) in expected.items():
        assert statement(build_figure(df, h, name)) == text, name


def test_the_statement_names_test_subsets_and_every_experiment():
    recs = [{**trial(i, "ablation", i, schedule="const", interpolate="False"), "experiment": f"demo{i}"}
            for i in range(2)]
    for r in recs:
        r["protocol.best/autoattack"] = r["protocol.best/autoattack"].replace('"full"', '"first200"')
    text = statement(build_figure(runs_frame(recs), None, "ablation", allow_subset=True))
    assert text.startswith("experiments demo0, demo1; seeds 0, 1 (2 per bar);")
    assert text.endswith("; test subsets: AutoAttack on first200")
    strict = build_figure(runs_frame(recs), None, "ablation")  # without --allow-subset AutoAttack is left out
    assert [ax.get_title() for ax in strict.axes] == ["Clean", "PGD-20"]
    assert statement(strict).endswith("Clean, PGD-20, Linf eps 8/255, PGD step eps*0.1, 1 restart; full test set")


def test_the_pareto_statement_gives_the_validation_eps():
    runs = runs_frame([{**trial(i, "", i, beta=i / 10), "param.attack.eps": str(8 / 255)} for i in range(3)])
    assert statement(build_figure(runs, None, "pareto")) == (
        "experiment e; seeds 0, 1, 2 (1 per point); protocol: validation split, val/clean, val/pgd10 (PGD-10 at eps "
        "8/255), trial runs (last reported epoch)")


def test_the_ablation_figure_says_which_column_group_it_draws():
    recs = [trial(i, "ablation", i, schedule="const", interpolate="False", dataset=ds, model=m)
            for i, (ds, m) in enumerate([("cifar10", "wrn-28-5"), ("cifar100", "wrn-28-2")])]
    fig = build_figure(runs_frame(recs), None, "ablation")
    assert fig.get_suptitle().endswith("(CIFAR-10 (WideResNet-28-5); not drawn: CIFAR-100 (WideResNet-28-2))")
    assert statement(fig).startswith("experiment e; seeds 0 (1 per bar);")  # the CIFAR-100 run (seed 1) is not drawn


# ---- what the figures show besides the data: legends beside it, flat panels left out, the front's labels ---------
def _overlap(a, b) -> float:
    """Area (display pixels^2) two bounding boxes share."""
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def legend_of(fig):
    """The one legend of a figure whose data fills its panels: the figure's, no axes has one."""
    assert [ax for ax in fig.axes if ax.get_legend() is not None] == []
    (legend,) = fig.legends
    return legend


@pytest.mark.parametrize("figure", ["curves", "alpha"])
def test_the_legend_is_beside_the_data_never_over_it(curves_data, figure):
    runs, hist = curves_data
    fig = build_figure(runs, hist, figure)
    fig.draw_without_rendering()  # lays the figure out as saving it would
    legend = legend_of(fig)
    box = legend.get_window_extent()
    for ax in fig.axes:
        assert _overlap(box, ax.get_window_extent()) == 0.0, ax.get_title() or ax.get_ylabel()
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1
    texts = [t.get_text() for t in legend.get_texts()]
    if figure == "curves":  # a colour per configuration, a line style per metric: not one entry per curve
        assert texts == ["Cur.|int", "none|int", "val/clean", "val/pgd10"]
    else:
        assert texts == ["alpha = 2^-K", "between", "alpha = 1", "mean alpha"]


def test_flat_panels_are_left_out_and_said_and_varying_ones_stay(curves_data):
    runs, hist = curves_data
    ids = list(runs["run_id"])
    varying = hist.copy()
    rho = varying["key"] == "sched/rho"
    varying.loc[rho, "value"] = 0.05 * varying.loc[rho, "step"]  # rho grows: every panel is drawn
    fig = build_figure(runs, varying, "curves")
    assert [ax.get_ylabel() for ax in fig.axes[1:]] == ["loss", "eps_max", "rho", "lr"]
    assert "panels left out" not in statement(fig)
    # another constant per configuration, and lr constant too: both left out, their values said
    per_config = hist.copy()
    cur = per_config["run_id"].isin(ids[3:]) & (per_config["key"] == "sched/rho")
    per_config.loc[cur, "value"] = 0.1
    per_config.loc[per_config["key"] == "sched/lr", "value"] = 0.02
    fig = build_figure(runs, per_config, "curves")
    assert [ax.get_ylabel() for ax in fig.axes[1:]] == ["loss", "eps_max"]
    assert statement(fig).endswith("panels left out: sched/rho = 0.05 or 0.1 at every epoch (per configuration), "
                                   "sched/lr = 0.02 at every epoch")
    # a key no configuration logged
    fig = build_figure(runs, hist[hist["key"] != "train/loss"], "curves")
    assert [ax.get_ylabel() for ax in fig.axes[1:]] == ["eps_max", "lr"]
    assert statement(fig).endswith("panels left out: train/loss (not logged), sched/rho = 0.05 at every epoch")


def test_each_point_of_the_pareto_front_is_labelled_with_its_row():
    # trial(i) has val/clean 70 + (i * 7) % 11 and val/pgd10 50 - (i * 3) % 7: trials 7 (75, 50) and 3 (80, 48)
    # are the front; 0 (70, 50) is beaten by 7, 5 (72, 49) by 7 too
    recs = [{**trial(i, "", 0, beta=i / 10), "meta.row": f"row {i}|x"} for i in range(8)]
    ax = build_figure(runs_frame(recs), None, "pareto").axes[0]
    front = ax.get_lines()[0]
    assert list(zip(front.get_xdata(), front.get_ydata())) == [(75.0, 50.0), (80.0, 48.0)]
    assert {t.xy: t.get_text() for t in ax.texts} == {(75.0, 50.0): "row 7|x", (80.0, 48.0): "row 3|x"}


def test_a_search_trial_on_the_front_is_labelled_with_what_it_sampled():
    recs = [{**trial(i, "", 0, beta=i / 10), "meta.stage": "search", "param.sampled.method.beta": str(i / 10 + 1 / 3),
             "param.sampled.attack.schedule": "curious"} for i in range(2)]  # (70, 50) and (77, 47): both on it
    ax = build_figure(runs_frame(recs), None, "pareto").axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["schedule=curious beta=0.333", "schedule=curious beta=0.433"]


# ---- issue 42: short labels, the legend inside the figure, whole epochs --------------------------------------------
SEARCH_LABELS = [f"{s} t={t} rho0=0.{k + 1}2 rho_double_epoch={d} beta=0.9{k} tau=1.5 #{k:04x}"
                 for k, (s, t, d) in enumerate([("linear", 3, 4), ("curious", 2, "none"), ("linear", 5, 5),
                                                ("curious", 4, 4), ("const", 2, "none"), ("linear", 2, 4),
                                                ("curious", 5, 5), ("linear", 4, "none")])]


@pytest.fixture(scope="module")
def search_curves():
    """Eight search configurations of one seed each, named by their ssat.label (the sampled values, ~60
    characters); every tracked param is there too, attack.gamma included where it does not apply."""
    recs = [{**trial(k, "", 0, schedule=label.split()[0], gamma=1.25, t=3), "meta.stage": "search",
             "meta.label": label, "run_name": f"{label} s0"} for k, label in enumerate(SEARCH_LABELS)]
    runs = runs_frame(recs)
    rows = [{"run_id": r, "key": key, "step": step, "value": v}
            for k, r in enumerate(runs["run_id"]) for step in range(1, 8)
            for key, v in (("val/clean", 60 + step + k), ("val/pgd10", 30 + step + k), ("train/loss", 2 - step / 10),
                           ("sched/lr", 0.1 / step), ("adv/alpha_mean", 0.5), ("adv/alpha_min_share", 0.1 * k / 8),
                           ("adv/alpha_one_share", 0.2))]
    return runs, history_frame(rows)


def _inside(box, outer) -> bool:
    return outer.x0 <= box.x0 and box.x1 <= outer.x1 and outer.y0 <= box.y0 and box.y1 <= outer.y1


def test_long_search_labels_stay_whole_inside_the_figure_without_a_layout_warning(search_curves, tmp_path):
    import warnings

    runs, hist = search_curves
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied" among them
        fig = build_figure(runs, hist, "curves")
        fig.savefig(tmp_path / "c.png", dpi=100)
    legend = legend_of(fig)
    texts = [" ".join(t.get_text().split("\n")) for t in legend.get_texts()]
    assert texts == sorted(SEARCH_LABELS) + ["val/clean", "val/pgd10"]  # whole labels, not `attack.gam...`
    box = legend.get_window_extent()
    assert _inside(box, fig.bbox) and all(_overlap(box, ax.get_window_extent()) == 0.0 for ax in fig.axes)
    assert all(_inside(t.get_window_extent(), fig.bbox) for t in legend.get_texts())
    ticks = [t for t in fig.axes[-1].get_xticks() if 1 <= t <= 7]
    assert len(ticks) >= 3 and all(float(t).is_integer() for t in ticks)  # whole epochs, never 2.5


def test_alpha_panels_are_titled_with_the_short_labels(search_curves):
    runs, hist = search_curves
    fig = build_figure(runs.assign(**{"param.method.interpolate": True}), hist, "alpha")
    fig.draw_without_rendering()
    titles = [ax.get_title() for ax in fig.axes]
    assert [" ".join(t.split("\n")) for t in titles] == sorted(SEARCH_LABELS)[:4]
    assert all(len(t.split("\n")) <= 3 for t in titles)  # wrapped to the panel, not one key per line
    for a, b in zip(fig.axes, fig.axes[1:]):  # neighbouring titles do not overlap
        assert a.title.get_window_extent().x1 <= b.title.get_window_extent().x0
    assert all(float(t).is_integer() for ax in fig.axes for t in ax.get_xticks())
    assert _inside(legend_of(fig).get_window_extent(), fig.bbox)


def test_a_label_longer_than_the_figure_is_wrapped_inside_it(search_curves):
    import warnings

    runs, hist = search_curves
    long = " ".join(f"key{k}=value{k}" for k in range(20))  # 258 characters
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = build_figure(runs.assign(**{"meta.label": [long] + SEARCH_LABELS[1:]}), hist, "curves")
        fig.draw_without_rendering()
    legend = legend_of(fig)
    (text,) = [t.get_text() for t in legend.get_texts() if t.get_text().startswith("key0")]
    assert " ".join(text.split("\n")) == long and all(len(line) <= 9 * 15 - 6 for line in text.split("\n"))
    assert len(text.split("\n")) >= 2 and _inside(legend.get_window_extent(), fig.bbox)


def test_a_search_point_is_labelled_by_its_configuration():
    """Today's search runs carry their label (`ssat.label`), no `sampled.*` params: the front names them by it."""
    from analysis.plots import point_label

    assert point_label({"run_id": "r", "meta.row": "", "meta.label": "beta=0.4 tau=2 #4e14",
                        "run_name": "beta=0.4 tau=2 #4e14 s0"}) == "beta=0.4 tau=2 #4e14"
    assert point_label({"run_id": "r", "meta.row": "linear|on", "meta.label": "linear|on"}) == "linear|on"
    assert point_label({"run_id": "r", "param.sampled.method.beta": 0.123456}) == "beta=0.123"  # an older store

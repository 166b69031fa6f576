"""analysis.search_figures on the Optuna study a search keeps (tests/unit/search_study.py): each figure drawn by
Optuna's matplotlib visualisation from the study's trials (read back from the figure: bars, lines, points, labels),
written as a valid PNG without a warning or a leftover figure; one that cannot be drawn skipped with one line."""
from __future__ import annotations

import json
import shutil
import warnings

import matplotlib
import numpy as np
import optuna
import pytest
from matplotlib.image import imread

from analysis import importance as imp
from analysis import search_figures as sf
from tests.unit.search_study import N_FULL, NAME, SPACE, search_study, sweep_run

STATES = optuna.trial.TrialState
UNCONDITIONAL = [k for k, d in SPACE.items() if not d.get("when")]


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    url = f"sqlite:///{root / 'optuna.db'}"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return url, search_study(url)


@pytest.fixture(scope="module")
def search(kept):
    return sf.load_search(NAME, storage=kept[0])


def drawn(figure, search):
    """The figure as it is before saving (inside `drawing`, which closes it after)."""
    fig = sf.FIGURES[figure](search)
    fig.draw_without_rendering()
    return fig


def test_every_figure_is_a_valid_png_and_nothing_leaks(kept, store, tmp_path):
    """Found through the sweep run's tags; no warning, no style change, no open figure, Optuna's verbosity kept."""
    import matplotlib.pyplot as plt

    url, _ = kept
    sweep_run(store, optuna_storage=url, optuna_study=NAME)
    rc, lines = dict(matplotlib.rcParams), []
    optuna.logging.set_verbosity(optuna.logging.INFO)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written = sf.write_figures(sf.load_search(NAME, store), tmp_path / "figs" / "deep", log=lines.append)
    assert optuna.logging.get_verbosity() == optuna.logging.INFO
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert list(written) == ["importances", "parallel", "intermediate", "slice", "pareto"]
    assert lines == [f"wrote {tmp_path / 'figs' / 'deep' / name}.png" for name in written]
    for name, path in written.items():
        assert path == tmp_path / "figs" / "deep" / f"{name}.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        h, w = imread(path).shape[:2]
        assert w >= 500 and h >= 350, name
    # saved to the extent of what is drawn: the importances' title is wider than Optuna's 6.4-inch figure
    assert imread(written["importances"]).shape[1] > 6.4 * sf.DPI
    assert dict(matplotlib.rcParams) == rc and plt.get_fignums() == []


def test_the_search_is_valued_at_the_common_epoch(search, kept):
    _, truth = kept
    assert (search.metric, search.mode, search.epoch, search.unscored) == ("val/pgd10", "max", 2, "")
    assert search.space == SPACE and len(search.study.trials) == 42
    assert {t.user_attrs["ssat_key"]: t.value for t in search.scored.trials} == {
        f"{NAME}-{n:012x}-s0-search": curve[2] for n, (_, curve) in truth.items()}
    at4 = sf.load_search(NAME, storage=kept[0], epoch=4)
    assert at4.epoch == 4 and len(at4.scored.trials) == N_FULL
    late = sf.load_search(NAME, storage=kept[0], epoch=9)
    assert late.scored is None and late.epoch is None and (late.experiment, late.metric) == (NAME, "val/pgd10")
    assert sf.load_search("other", storage=kept[0], study=NAME).experiment == "other"  # the study named, not the
    # experiment's name
    assert late.unscored == "--epoch 9: no trial has a value there; the trials reached epochs 2 to 4"


def test_the_importances_are_fanovas_of_the_unconditional_parameters_at_the_epoch(search):
    with sf.drawing():
        ax = drawn("importances", search).axes[0]
        bars = {t.get_text(): p.get_width() for t, p in zip(ax.get_yticklabels(), ax.patches)}
        title = ax.get_title(loc="left")
    assert bars == pytest.approx(imp.fanova(search.scored, UNCONDITIONAL))
    assert max(bars, key=bars.get) == "method.beta"
    assert title.startswith(f"{NAME}: importance of val/pgd10 at epoch 2 (40 trials)\nfANOVA, seed 0")


def test_parallel_coordinates_and_slices_draw_every_trial_at_the_epoch(search):
    values = sorted(t.value for t in search.scored.trials)
    with sf.drawing():
        fig = drawn("parallel", search)
        ax = fig.axes[0]
        (lines,) = [c for c in ax.collections if isinstance(c, matplotlib.collections.LineCollection)]
        assert len(lines.get_segments()) == 40
        assert sorted(seg[0][1] for seg in lines.get_segments()) == pytest.approx(values)  # the objective's axis
        assert ax.get_title() == f"{NAME}: 40 trials, val/pgd10 at epoch 2"
        assert fig.get_figwidth() == pytest.approx(1.4 * (len(SPACE) + 1))
        fig = drawn("slice", search)
        panels = {ax.get_xlabel(): ax for ax in fig.axes if ax.get_xlabel()}
        assert sorted(panels) == sorted(SPACE)
        for key, ax in panels.items():
            having = [t.value for t in search.scored.trials if key in t.params]
            points = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections if len(c.get_offsets())])
            assert sorted(points) == pytest.approx(sorted(having)), key  # gamma: the curious trials only
        assert fig.get_suptitle() == f"{NAME}: val/pgd10 at epoch 2 against each parameter (40 trials)"


def test_the_learning_curves_are_every_trials_and_the_best_are_named(search):
    curves = {t.number: t for t in search.study.trials if t.intermediate_values}
    last = {n: t.intermediate_values[max(t.intermediate_values)] for n, t in curves.items()}
    best = sorted(last, key=last.get, reverse=True)[:sf.MAX_NAMED]
    with sf.drawing():
        fig = drawn("intermediate", search)
        ax = fig.axes[0]
        assert sorted(tuple(line.get_ydata()) for line in ax.get_lines()) == sorted(
            tuple(t.intermediate_values[e] for e in sorted(t.intermediate_values)) for t in curves.values())
        assert ax.get_legend() is None
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == [curves[n].user_attrs["name"] for n in best]
        assert legend.get_title().get_text() == "the 20 best of 40 trials by their last value"
        box = legend.get_window_extent()
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0
        assert ax.get_xlabel() == "epoch" and all(float(x).is_integer() for x in ax.get_xticks())
        assert ax.get_title() == f"{NAME}: val/pgd10 per epoch, every trial (40)" and ax.get_ylabel() == "val/pgd10"
        assert overlap(box, ax.get_window_extent()) == 0.0  # under the axes, not over the curves
        assert legend._ncols == 2 and tuple(fig.get_size_inches()) == pytest.approx((10, 5 + 0.09 * 20))
        small = matplotlib.font_manager.FontProperties(size="x-small").get_size_in_points()
        assert legend.get_title().get_fontsize() == small == legend.get_texts()[0].get_fontsize()


def overlap(a, b) -> float:
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def test_a_few_curves_are_all_named_and_a_small_space_keeps_its_width(tmp_path):
    url = f"sqlite:///{tmp_path / 'few.db'}"
    study = optuna.create_study(storage=url, study_name="few", direction="minimize")
    study.set_user_attr("space", json.dumps({"method.beta": {"float": [0.0, 1.0]}}))
    dist = {"method.beta": optuna.distributions.FloatDistribution(0.0, 1.0)}
    for i in range(3):
        study.add_trial(optuna.trial.create_trial(params={"method.beta": i / 3}, distributions=dist, value=5.0 - i,
                                                  intermediate_values={1: 9.0, 2: 5.0 - i},
                                                  user_attrs={"name": f"b{i}"}))
    few = sf.load_search("few", storage=url, study="few")
    with sf.drawing():
        legend = drawn("intermediate", few).legends[0]
        assert legend.get_title().get_text() == ""  # every curve named: no "best of" title
        assert [t.get_text() for t in legend.get_texts()] == ["b2", "b1", "b0"]  # minimised: the lowest first
        fig = drawn("parallel", few)
        assert tuple(fig.get_size_inches()) == pytest.approx((8, 6))
        assert fig.axes[0].title.get_position()[1] == pytest.approx(1.03)


def test_the_importances_leave_out_a_conditional_parameter_even_where_every_trial_has_it(search):
    curious = [t for t in search.scored.trials if t.params["attack.schedule"] == "curious"]
    only = imp.epoch_study(curious, {t.number: t.value for t in curious}, "max")
    with sf.drawing():
        ax = drawn("importances", sf.Search(NAME, search.study, SPACE, "val/pgd10", "max", 2, only)).axes[0]
        assert sorted(t.get_text() for t in ax.get_yticklabels()) == sorted(UNCONDITIONAL)


def front(points: dict) -> list:
    """Keys of the points no other point beats in both coordinates (both maximised), by the first coordinate."""
    return sorted((k for k, (x, y) in points.items()
                   if not any(a >= x and b >= y and (a, b) != (x, y) for a, b in points.values())),
                  key=lambda k: points[k][0])


def test_a_single_objective_front_is_val_clean_against_the_metric_at_the_last_report(search):
    ran = [t for t in search.study.trials if t.state in imp.FINISHED and "val/clean" in t.user_attrs]
    points = {t.user_attrs["label"]: (t.user_attrs["val/clean"], t.user_attrs["val/pgd10"]) for t in ran}
    expected = front(points)
    with sf.drawing():
        fig = drawn("pareto", search)
        ax = fig.axes[0]
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == expected and legend.get_title().get_text() == ""
        assert [(h.get_marker(), h.get_linestyle(), h.get_color()) for h in legend.legend_handles] == [
            (f"${i}$", "None", "0.2") for i in range(1, len(expected) + 1)]  # the point's number, no line
        assert {a.get_text(): a.xy for a in ax.texts} == {str(i): points[k] for i, k in enumerate(expected, 1)}
        assert (ax.get_xlabel(), ax.get_ylabel()) == ("val/clean", "val/pgd10")
        assert ax.get_title() == f"{NAME}: {len(expected)} non-dominated of 40 trials, each trial at its last report"
    assert len(points) == 40 and 2 <= len(expected) < 40  # PRUNED trials too, by their last report


def two_objectives(url: str, n: int = 6) -> optuna.Study:
    study = optuna.create_study(storage=url, study_name="two", directions=["maximize", "maximize"])
    study.set_user_attr("space", json.dumps({"method.beta": {"float": [0.0, 1.0]}}))
    study.set_user_attr("metric", ["val/clean", "val/pgd10"])
    dist = {"method.beta": optuna.distributions.FloatDistribution(0.0, 1.0)}
    for i in range(n):
        study.add_trial(optuna.trial.create_trial(
            params={"method.beta": i / n}, distributions=dist, values=[90.0 - i, 40.0 + 3 * i - (i % 2) * 5],
            user_attrs={"epoch": 4, "label": f"beta={i / n:.2g} #{i:04x}", "name": f"beta={i / n:.2g} #{i:04x} s0"}))
    return study


def test_a_two_objective_front_is_the_studys_own(tmp_path):
    url = f"sqlite:///{tmp_path / 'two.db'}"
    study = two_objectives(url)
    points = {t.user_attrs["label"]: tuple(t.values) for t in study.trials}
    two = sf.load_search("two", storage=url, study="two")
    assert sf.pareto_study(two) == (two.study, ["val/clean", "val/pgd10"])
    with sf.drawing():
        fig = drawn("pareto", two)
        assert [t.get_text() for t in fig.legends[0].get_texts()] == front(points)
        assert fig.axes[0].get_title() == f"two: {len(front(points))} non-dominated of 6 trials"
    lines = []
    sf.write_figures(two, tmp_path, ["intermediate"], log=lines.append)
    assert lines == ["skipped intermediate: a multi-objective study keeps no intermediate values"]


def test_a_long_front_names_its_first_points_along_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'long.db'}"
    study = optuna.create_study(storage=url, study_name="long", directions=["maximize", "maximize"])
    study.set_user_attr("space", json.dumps({"method.beta": {"float": [0.0, 1.0]}}))
    dist = {"method.beta": optuna.distributions.FloatDistribution(0.0, 1.0)}
    for i in range(25):  # every trial on the front
        study.add_trial(optuna.trial.create_trial(params={"method.beta": i / 25}, distributions=dist,
                                                  values=[float(i), float(-i)], user_attrs={"label": f"c{i}"}))
    with sf.drawing():
        fig = drawn("pareto", sf.load_search("long", storage=url, study="long"))
        legend = fig.legends[0]
        assert [t.get_text() for t in legend.get_texts()] == [f"c{i}" for i in range(20)]
        assert legend.get_title().get_text() == "the first 20 of 25 along the front"
        assert sorted(int(a.get_text()) for a in fig.axes[0].texts) == list(range(1, 21))
        small = matplotlib.font_manager.FontProperties(size="x-small").get_size_in_points()
        assert {a.get_fontsize() for a in fig.axes[0].texts} == {legend.get_title().get_fontsize()} == {small}
        assert tuple(fig.get_size_inches()) == pytest.approx((8, 6 + 0.12 * 20))  # a line per name


def test_what_cannot_be_drawn_is_skipped_with_one_line(tmp_path):
    url = f"sqlite:///{tmp_path / 'few.db'}"
    study = optuna.create_study(storage=url, study_name="few", direction="maximize")
    study.set_user_attr("space", json.dumps({"method.beta": {"float": [0.0, 1.0]}}))
    study.set_user_attr("metric", "val/pgd10")
    dist = {"method.beta": optuna.distributions.FloatDistribution(0.0, 1.0)}
    study.add_trial(optuna.trial.create_trial(params={"method.beta": 0.5}, distributions=dist, value=50.0,
                                              intermediate_values={1: 45.0, 2: 50.0},
                                              user_attrs={"val/clean": 80.0, "epoch": 2}))
    study.add_trial(optuna.trial.create_trial(params={"method.beta": 0.7}, distributions=dist, state=STATES.FAIL,
                                              intermediate_values={1: 30.0}))
    lines = []
    written = sf.write_figures(sf.load_search("few", storage=url, study="few", epoch=2), tmp_path / "out",
                               log=lines.append)
    assert list(written) == ["intermediate"]
    need = "the figure needs 2"
    assert lines == [f"skipped importances: 1 trial has a value at epoch 2; {need}",
                     f"skipped parallel: 1 trial has a value at epoch 2; {need}",
                     f"wrote {tmp_path / 'out' / 'intermediate.png'}",
                     f"skipped slice: 1 trial has a value at epoch 2; {need}",
                     f"skipped pareto: 1 trial has both val/clean and val/pgd10; {need}"]
    flat = optuna.create_study(storage=url, study_name="flat", direction="maximize")
    flat.set_user_attr("space", json.dumps({"method.beta": {"float": [0.0, 1.0]}}))
    for beta in (0.2, 0.4):  # equal values: fANOVA refuses (Optuna's RuntimeError); no val/clean for a front
        flat.add_trial(optuna.trial.create_trial(params={"method.beta": beta}, distributions=dist, value=1.0,
                                                 intermediate_values={3: 1.0}))
    lines = []
    sf.write_figures(sf.load_search("flat", storage=url, study="flat"), tmp_path / "b", ["importances", "pareto"],
                     log=lines.append)
    assert lines == ["skipped importances: Encountered zero total variance in all trees.",
                     "skipped pareto: 0 trials have both val/clean and objective 0; the figure needs 2"]
    none = optuna.create_study(storage=url, study_name="none", direction="maximize")
    none.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    with pytest.raises(sf.Skip, match=r"^no trial has an intermediate value \(the metric at an epoch\)$"):
        sf.intermediate(sf.Search("none", none, {}, "objective 0", "max", None, None))
    failed = optuna.create_study(storage=url, study_name="failed", direction="maximize")
    failed.add_trial(optuna.trial.create_trial(state=STATES.FAIL, intermediate_values={1: 0.5}))
    with pytest.raises(sf.Skip, match="^no trial has an intermediate value"):  # Optuna draws no failed trial
        sf.intermediate(sf.Search("failed", failed, {}, "objective 0", "max", None, None))


def test_three_objectives_have_no_front_drawn_here(tmp_path):
    study = optuna.create_study(directions=["maximize"] * 3)
    search = sf.Search("three", study, {}, "a", "max", None, None, "why")
    with pytest.raises(sf.Skip, match="^the study has 3 objectives; this figure draws two$"):
        sf.pareto_study(search)
    with pytest.raises(sf.Skip, match="^why$"):
        sf.importances(search)


def test_the_command_writes_the_figures_asked_for(kept, store, tmp_path, capsys):
    url, _ = kept
    sweep_run(store, optuna_storage=url, optuna_study=NAME)
    out = tmp_path / "figs"
    matplotlib.use("svg")  # another backend before: the command draws with Agg whatever the caller's
    assert sf.main(["--experiment", NAME, "--tracking-uri", store, "--out", str(out), "--figure", "slice",
                    "--figure", "pareto", "--epoch", "4"]) == 0
    assert capsys.readouterr().out == f"wrote {out / 'slice.png'}\nwrote {out / 'pareto.png'}\n"
    assert sorted(p.name for p in out.iterdir()) == ["pareto.png", "slice.png"]
    assert matplotlib.get_backend().lower() == "agg"


def test_the_command_says_why_a_search_has_no_study(store, tmp_path, capsys):
    sweep_run(store)
    assert sf.main(["--experiment", NAME, "--tracking-uri", store, "--out", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: experiment '{NAME}': its sweep run names no Optuna study (no tag "
                          "ssat.optuna_storage): the search ran before the sweep kept its study")
    assert not (tmp_path / "f").exists()
    shutil.rmtree(tmp_path / "nowhere", ignore_errors=True)
    assert sf.main(["--experiment", NAME, "--tracking-uri", f"sqlite:///{tmp_path / 'nowhere' / 'm.db'}",
                    "--out", str(tmp_path / "f")]) == 2
    assert capsys.readouterr().err.startswith(f"error: no MLflow store at '{tmp_path / 'nowhere' / 'm.db'}'")
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "f").exists()


def test_the_help_names_every_figure_and_option(capsys):
    with pytest.raises(SystemExit) as done:
        sf.main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in [
            "usage: python -m analysis.search_figures [-h] --experiment NAME [--tracking-uri URI] [--storage URL] "
            "[--study NAME] --out DIR [--figure {importances,parallel,intermediate,slice,pareto}] [--epoch E] "
            "Figures of a search, drawn by Optuna's matplotlib visualisations from the study the sweep kept. options:",
            "--out DIR folder for the PNGs",
            "--figure {importances,parallel,intermediate,slice,pareto} only this figure (repeatable; default: all)",
            "--epoch E value every trial at this epoch (default: the largest epoch all trials reached) The study is "
            "found as `analysis.importance` finds it"]:
        assert phrase in text, phrase
    with pytest.raises(SystemExit) as done:
        sf.main(["--experiment", "e"])
    assert done.value.code == 2 and "the following arguments are required: --out" in capsys.readouterr().err


def test_the_options_reach_the_figures(monkeypatch):
    seen = []
    monkeypatch.setattr(sf, "load_search", lambda *args: seen.append(args) or "search")
    monkeypatch.setattr(sf, "write_figures", lambda *args: seen.append(args))
    assert sf.main(["--experiment", "e", "--tracking-uri", "u", "--storage", "s", "--study", "n", "--out", "d",
                    "--epoch", "3", "--figure", "slice"]) == 0
    assert seen == [("e", "u", "s", "n", 3), ("search", "d", ["slice"])]
    seen.clear()
    assert sf.main(["--experiment", "e", "--out", "d"]) == 0
    assert seen == [("e", None, None, None, None), ("search", "d", tuple(sf.FIGURES))]


def test_an_error_without_a_message_is_named_by_its_type(search, tmp_path, monkeypatch):
    def fails(_):
        raise RuntimeError()
    monkeypatch.setitem(sf.FIGURES, "slice", fails)
    lines = []
    assert sf.write_figures(search, tmp_path, ["slice"], log=lines.append) == {}
    assert lines == ["skipped slice: RuntimeError"]


def test_a_front_of_two_trials_from_their_values_and_never_a_running_one(tmp_path):
    """Two points are enough; a trial's value is its metric at its last report even without intermediate values; a
    running trial is no point (its last report is still to come)."""
    url = f"sqlite:///{tmp_path / 'p.db'}"
    study = optuna.create_study(storage=url, study_name="p", direction="maximize")
    study.set_user_attr("space", json.dumps({"method.beta": {"float": [0.0, 1.0]}}))
    dist = {"method.beta": optuna.distributions.FloatDistribution(0.0, 1.0)}
    for i, (state, clean, value) in enumerate([(STATES.COMPLETE, 80.0, 50.0), (STATES.COMPLETE, 85.0, 40.0),
                                               (STATES.RUNNING, 99.0, None)]):
        study.add_trial(optuna.trial.create_trial(params={"method.beta": i / 3}, distributions=dist, state=state,
                                                  value=value, intermediate_values={1: 99.0} if value is None else {},
                                                  user_attrs={"val/clean": clean, "label": f"c{i}"}))
    search = sf.Search("p", study, {}, "val/pgd10", "max", None, None, "")
    two, names = sf.pareto_study(search)
    assert names == ["val/clean", "val/pgd10"] and [t.values for t in two.trials] == [[80.0, 50.0], [85.0, 40.0]]
    assert [d.name for d in two.directions] == ["MAXIMIZE", "MAXIMIZE"]


def test_the_pngs_are_at_the_projects_dpi_whatever_the_callers_settings(search, tmp_path):
    with matplotlib.rc_context({"figure.dpi": 50, "savefig.dpi": 50}):
        written = sf.write_figures(search, tmp_path, ["importances"], log=lambda _: None)
    assert imread(written["importances"]).shape[1] > 6.4 * sf.DPI  # not 6.4 x 50

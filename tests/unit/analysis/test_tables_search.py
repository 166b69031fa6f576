"""The search table (`--table search`) on hand-built runs frames: one row per configuration the confirm stage re-ran,
best first by its confirm mean of the sweep's metric, with the search trial's own value beside it.

Three configurations confirmed with seeds 10 and 11 (one of C's confirm runs failed) plus their search trials (seed
0) and a search trial that was not confirmed. Expected values are computed here (statistics, scipy.stats) from the
numbers typed below, never read back from the code under test.
"""
import json
import math
import statistics

import pandas as pd
import pytest
from scipy import stats

from analysis import collect
from analysis import table_specs as specs
from analysis.cells import MARKS, Options, TableError, _reads, build
from analysis.tables import build_table, render_table, write_table
from analysis.tables import main as tables_main
from tests.unit.analysis.test_cells import cell, frame, proto

METRIC = "val/pgd10"
# label, search rank, config hash, {seed: (val/pgd10, test clean, test pgd20)}, the search trial's val/pgd10
CONFIGS = {
    "A": ("linear t=3 rho0=0.12 beta=0.94 tau=1.5 #4e14", 2, "4e14aaaaaaaa", {10: (60.0, 90.0, 55.0),
                                                                              11: (62.0, 91.0, 57.0)}, 58.0),
    "B": ("curious t=4 gamma=1.2 rho0=0.05 beta=0.4 tau=2 #b1b2", 1, "b1b2bbbbbbbb", {10: (50.0, 92.0, 50.0),
                                                                                     11: (51.0, 93.0, 50.5)}, 63.0),
    "C": ("const rho0=0.02 beta=0.1 tau=0.8 #c3d4", 3, "c3d4cccccccc", {10: (40.0, 80.0, 30.0)}, 45.0),
}
LABEL = {k: c[0] for k, c in CONFIGS.items()}
SAMPLED = {"A": {"attack.schedule": "linear", "attack.t": "3", "method.beta": "0.94", "method.rho0": "0.12"},
           "B": {"attack.schedule": "curious", "attack.t": "4", "method.beta": "0.4", "method.rho0": "0.05"},
           "C": {"attack.schedule": "const", "method.beta": "0.1", "method.rho0": "0.02"}}
_ids = [0]


def trial(stage, seed, config_hash, val, *, clean=None, pgd20=None, label=None, row="", status="FINISHED",
          sweep="mnist5k-search", extra=None):
    """One trial run as MLflow hands it back (tags and params as strings), as sweeps writes a search sweep's:
    ssat.table '' and ssat.expected_seeds the search's seed count (1) for both stages."""
    _ids[0] += 1
    rec = {"run_id": f"s{_ids[0]:04d}", "experiment": "mnist5k-search", "source": "mlflow", "start_time": _ids[0],
           "meta.kind": "trial", "meta.stage": stage, "meta.sweep": sweep, "meta.table": "", "meta.row": row,
           "meta.seed": str(seed), "meta.expected_seeds": "1", "meta.config_hash": config_hash,
           "meta.status": status, "meta.column_group": "mnist5k/cnn-small", "param.data.dataset": "mnist5k",
           "param.model.name": "cnn-small", "param.method.name": "ssat-mbi", "param.seed": str(seed),
           "param.method.lam": "8.0", f"metric.{METRIC}": val, "metric.val/clean": None if val is None else val + 30}
    if label is not None:
        rec["meta.label"] = label
    for attack, v in (("clean", clean), ("pgd20", pgd20)):
        if v is not None:
            rec[f"metric.test/best/{attack}"] = v
            rec[f"protocol.best/{attack}"] = proto(attack, eps=0.3, n=1000)
    rec.update(extra or {})
    return rec


def search_records(labels=True):
    """The runs of the sweep: confirm trials of A, B, C (C's seed 11 failed), their search trials, an unconfirmed
    search trial D (the best search value: it must not become a row) and the sweep's parent run. Without `labels`
    the runs are an old store's: no ssat.label, the sampled values as `sampled.<key>` params of the search trials."""
    recs = []
    for key, (label, rank, h, by_seed, searched) in CONFIGS.items():
        tag = label if labels else None
        for seed, (val, clean, pgd20) in by_seed.items():
            recs.append(trial("confirm", seed, h, val, clean=clean, pgd20=pgd20, label=tag, row=f"confirm-{rank}"))
        sampled = {} if labels else {f"param.sampled.{k}": v for k, v in SAMPLED[key].items()}
        recs.append(trial("search", 0, h, searched, label=tag, extra=sampled))
    recs.append(trial("confirm", 11, CONFIGS["C"][2], None, label=CONFIGS["C"][0] if labels else None,
                      row="confirm-3", status="FAILED: nan loss"))
    recs.append(trial("search", 0, "d5d6dddddddd", 70.0, label="const rho0=0.2 beta=1 tau=4 #d5d6" if labels else None))
    recs.append({"run_id": "parent", "experiment": "mnist5k-search", "source": "mlflow", "meta.kind": "sweep",
                 "meta.sweep": "mnist5k-search", "meta.table": ""})
    return recs


@pytest.fixture(scope="module")
def runs():
    return frame(*search_records())


@pytest.fixture(scope="module")
def result(runs):
    return build_table(runs, "search")


def values(key, column):
    """The confirm values of one configuration's column, by seed."""
    i = {METRIC: 0, "clean": 1, "pgd20": 2}[column]
    return [v[i] for _, v in sorted(CONFIGS[key][3].items())]


# ---- rows, cells, emphasis, marks ------------------------------------------------------------------------------
def test_one_row_per_confirmed_configuration_best_first_by_the_confirm_mean(result):
    assert result.blocks == [(LABEL["A"], LABEL["B"], LABEL["C"])]
    assert result.groups == ["mnist5k/cnn-small"]
    assert [c.key for c in result.columns] == [METRIC, "clean", "pgd20", "seeds", f"search/{METRIC}"]
    assert set(result.cells["row"]) == {LABEL["A"], LABEL["B"], LABEL["C"]}  # D, unconfirmed, is no row


@pytest.mark.parametrize("key", ["A", "B"])
@pytest.mark.parametrize("column", [METRIC, "clean", "pgd20"])
def test_confirm_cells_are_the_mean_and_sample_std_over_the_confirm_seeds(result, key, column):
    c = cell(result, LABEL[key], column)
    assert c["mean"] == pytest.approx(statistics.mean(values(key, column)))
    assert c["std"] == pytest.approx(statistics.stdev(values(key, column)))
    assert (c["n"], c["expected_seeds"], c["seeds"]) == (2, 2, [10, 11])
    assert not c["missing_seeds"]


def test_the_failed_confirm_run_leaves_a_single_seed_marked_missing(result):
    for column in (METRIC, "clean", "pgd20"):
        c = cell(result, LABEL["C"], column)
        assert (c["n"], c["expected_seeds"], c["values"]) == (1, 2, values("C", column))
        assert math.isnan(c["std"]) and c["missing_seeds"] and c["not_significant"] and math.isnan(c["p_value"])
    assert "status FAILED: nan loss" in set(result.excluded["reason"])


def test_the_seeds_column_counts_the_confirm_runs_behind_each_row(result):
    got = {k: cell(result, LABEL[k], "seeds") for k in CONFIGS}
    assert {k: (c["mean"], c["n"], c["values"]) for k, c in got.items()} == {
        "A": (2.0, 2, [10.0, 11.0]), "B": (2.0, 2, [10.0, 11.0]), "C": (1.0, 1, [10.0])}
    assert got["C"]["missing_seeds"] and not got["A"]["missing_seeds"]
    assert not any(c["bold"] or c["not_significant"] or not math.isnan(c["std"]) for c in got.values())


def test_the_search_column_is_the_search_trial_of_the_same_configuration(result):
    for key, conf in CONFIGS.items():
        c = cell(result, LABEL[key], f"search/{METRIC}")
        assert (c["mean"], c["n"], c["seeds"], c["expected_seeds"]) == (conf[4], 1, [0], 1)
        assert not c["missing_seeds"] and not c["not_significant"] and math.isnan(c["p_value"])
    assert cell(result, LABEL["B"], f"search/{METRIC}")["bold"]  # the best search value of the confirmed ones
    assert not cell(result, LABEL["A"], f"search/{METRIC}")["bold"]


def test_bold_for_the_best_of_each_column(result):
    bold = result.cells[result.cells["bold"]]
    assert sorted(zip(bold["column"], bold["row"])) == sorted([
        (METRIC, LABEL["A"]), ("clean", LABEL["B"]), ("pgd20", LABEL["A"]), (f"search/{METRIC}", LABEL["B"])])
    assert not result.cells["underline"].any()


@pytest.mark.parametrize("column", [METRIC, "clean", "pgd20"])
def test_welch_against_the_best_row(result, column):
    best = cell(result, LABEL["A"], column)
    assert math.isnan(best["p_value"]) and not best["not_significant"]  # the baseline itself
    other = cell(result, LABEL["B"], column)
    p = stats.ttest_ind(values("B", column), values("A", column), equal_var=False).pvalue
    assert other["p_value"] == pytest.approx(p)
    assert other["not_significant"] == (p >= 0.05)
    assert (column == METRIC) == (p < 0.05)  # the typed numbers give one significant difference


def test_mode_min_and_another_metric_rank_the_other_way(runs):
    low = build_table(runs, "search", mode="min")
    assert low.blocks == [(LABEL["C"], LABEL["B"], LABEL["A"])]
    assert cell(low, LABEL["C"], METRIC)["bold"] and cell(low, LABEL["C"], f"search/{METRIC}")["bold"]
    assert not cell(low, LABEL["B"], f"search/{METRIC}")["bold"]
    assert cell(low, LABEL["B"], "clean")["bold"]  # test accuracies: the highest is still the best
    assert "best first by the confirm stage's mean val/pgd10 (lowest first;" in low.spec.caption
    clean = build_table(runs, "search", metric="val/clean")
    assert [c.key for c in clean.columns][0] == "val/clean" and clean.options.metric == "val/clean"
    assert cell(clean, LABEL["A"], "val/clean")["mean"] == pytest.approx(91.0)
    assert "best first by the confirm stage's mean val/clean (highest first" in clean.spec.caption


def test_rows_without_the_ranking_metric_go_last_and_name_no_baseline():
    recs = search_records()
    for r in recs:
        if r.get("meta.label") == LABEL["A"]:
            r[f"metric.{METRIC}"] = None
    res = build_table(frame(*recs), "search")
    assert res.blocks == [(LABEL["B"], LABEL["C"], LABEL["A"])]
    assert cell(res, LABEL["B"], METRIC)["bold"] and not cell(res, LABEL["C"], METRIC)["bold"]
    assert cell(res, LABEL["C"], "clean")["not_significant"]  # tested against B, the best row
    assert cell(res, LABEL["A"], "clean")["p_value"] == pytest.approx(
        stats.ttest_ind(values("A", "clean"), values("B", "clean"), equal_var=False).pvalue)


def test_tied_means_keep_the_natural_order():
    from analysis.cells import rank_rows
    spec = specs.get_spec("search")
    vals = pd.DataFrame({"row": ["b", "a", "c"], "column": [METRIC] * 3, "value": [1.0, 1.0, 2.0]})
    assert rank_rows(spec, vals, [("a", "b", "c", "z")], [None]) == ([("c", "a", "b", "z")], ["c"])
    assert rank_rows(spec, vals, [("b", "z", "c"), ("a",)], [None, None]) == ([("c", "b", "a", "z")], ["c"])
    low = specs.get_spec("search", mode="min")
    assert rank_rows(low, vals, [("a", "b", "c", "z")], [None]) == ([("a", "b", "c", "z")], ["a"])
    assert rank_rows(spec, vals.iloc[0:0], [("a", "b")], [None]) == ([("a", "b")], [None])
    assert rank_rows(spec, vals.iloc[0:0], [()], [None]) == ([()], [None])
    other = specs.get_spec("ablation")
    assert rank_rows(other, vals, [("x",)], ["x"]) == ([("x",)], ["x"])


# ---- which runs, labels, errors --------------------------------------------------------------------------------
def test_it_reads_search_and_confirm_trials_whatever_their_table_tag():
    spec = specs.get_spec("search")
    base = {"meta.kind": "trial", "meta.table": "main"}
    assert _reads({**base, "meta.stage": "confirm"}, spec, Options())
    assert _reads({**base, "meta.stage": "search"}, spec, Options())
    assert _reads({"meta.stage": "search"}, spec, Options())  # a run without a kind is a trial
    assert not _reads({**base, "meta.stage": "grid"}, spec, Options())
    assert not _reads({**base, "meta.kind": "teacher", "meta.stage": "confirm"}, spec, Options())
    assert not _reads({**base, "meta.stage": "search"}, spec, Options(stages=("confirm",)))
    assert _reads({**base, "meta.stage": "confirm"}, spec, Options(stages=("confirm",)))


def test_only_confirm_stage_leaves_the_search_column_out(runs):
    res = build_table(runs, "search", stages=["confirm"])
    assert [c.key for c in res.columns] == [METRIC, "clean", "pgd20", "seeds"]
    assert any(n.startswith(f"Search {METRIC} left out") for n in res.notes)


def test_an_old_store_without_labels_names_rows_by_search_rank_and_sampled_values():
    res = build_table(frame(*search_records(labels=False)), "search")
    a, b, c = "confirm-2 linear t=3 beta=0.94 rho0=0.12", "confirm-1 curious t=4 beta=0.4 rho0=0.05", \
        "confirm-3 const beta=0.1 rho0=0.02"
    assert res.blocks == [(a, b, c)]
    assert cell(res, a, METRIC)["mean"] == pytest.approx(61.0) and cell(res, c, "seeds")["missing_seeds"]
    assert cell(res, b, f"search/{METRIC}")["mean"] == 63.0


def test_an_old_label_from_what_its_runs_hold():
    confirm = {"meta.stage": "confirm", "meta.row": "confirm-2", "meta.config_hash": "abcdef"}
    search = {"meta.stage": "search", "meta.row": None, "meta.config_hash": "abcdef", "param.sampled.method.beta":
              0.4567, "param.sampled.method.interpolate": True, "param.sampled.attack.t": 3,
              "param.sampled.method.rho_double_epoch": None, "param.sampled.attack.schedule": "linear",
              "param.sampled.method.swa": False, "param.sampled.optim.epochs": 120}
    label = "confirm-2 linear t=3 beta=0.46 interpolate=on swa=off epochs=120"
    assert specs._old_label([confirm, search], "k") == label
    assert specs._old_label([search, confirm, {**confirm, "meta.row": "confirm-1"}], "k").startswith("confirm-1 linear")
    assert specs._old_label([confirm], "k") == "confirm-2"
    assert specs._old_label([{**search, "meta.stage": "confirm"}], "k").startswith("linear t=3")
    other = {"meta.stage": "search", "param.sampled.attack.schedule": "const"}
    assert specs._old_label([confirm, other, search], "k") == "confirm-2 const"  # the first search trial's values
    assert specs._old_label([{"meta.stage": "search", "meta.config_hash": "abcdef"}], "k") == "#k"
    assert specs._count("3") == 3 and specs._count(None) == 0 and specs._count("x") == 0


def records(*recs):
    return frame(*recs).to_dict("records")


def test_expected_seeds_are_the_confirm_seeds_the_sweep_ran():
    recs = [trial("confirm", s, "h1", 1.0, label="x") for s in (10, 11, 12)] + [trial("confirm", 10, "h2", 1.0)]
    recs[0]["meta.expected_seeds"] = "5"  # a tag above the seeds seen wins
    recs.append(trial("search", 0, "h1", 1.0, label="x"))
    out = specs.search_runs(records(*recs))
    assert [r["meta.expected_seeds"] for r in out] == [5, 3, 3, 1, 3]  # (by configuration, in the order seen)
    assert [r["meta.label"] for r in out] == ["x"] * 4 + ["#h2"]
    assert specs.search_runs([]) == []


def test_a_confirm_run_without_a_hash_or_a_seed_is_still_its_own_row():
    """(Never written so, but a store may lack a tag:) no config hash: its own configuration, named by its run id
    when nothing else names it, and its search trials none; no seed: left out of the seeds column, said why."""
    recs = [trial("confirm", 10, None, 50.0, label="x"), trial("search", 0, None, 40.0, label="x"),
            trial("confirm", 10, None, 30.0, row="confirm-2"), trial("confirm", 10, None, 20.0)]
    recs[0]["meta.seed"] = recs[0]["param.seed"] = None
    for r in recs:
        del r["meta.sweep"]  # a store without the tag
    res = build_table(frame(*recs), "search")
    assert res.blocks == [("x", "confirm-2", f"#{recs[3]['run_id']}")]
    assert cell(res, "x", METRIC)["values"] == [50.0] and "search/" + METRIC not in {c.key for c in res.columns}
    assert {"run_id": recs[0]["run_id"], "group": "mnist5k/cnn-small", "row": "x", "column": "seeds",
            "reason": "no seed"} in res.excluded.to_dict("records")
    one = cell(res, "#" + recs[3]["run_id"], "seeds")
    assert (one["n"], one["mean"]) == (1, 1.0)


def test_a_configuration_whose_confirm_runs_all_failed_keeps_its_row_with_empty_cells():
    recs = [trial("confirm", 10, "ha", 50.0, label="a"), trial("confirm", 10, "hb", None, label="b", status="FAILED"),
            trial("search", 0, "hb", 55.0, label="b")]
    res = build_table(frame(*recs), "search")
    assert res.blocks == [("a", "b")]
    for column in (METRIC, "seeds"):
        empty = cell(res, "b", column)
        assert empty["n"] == 0 and math.isnan(empty["mean"]) and not empty["missing_seeds"]
    assert cell(res, "b", f"search/{METRIC}")["mean"] == 55.0
    assert "| b | — | — | **55.00** |" in render_table(frame(*recs), "search", "md")


def test_a_frame_of_two_sweeps_is_refused():
    recs = search_records() + [trial("confirm", 10, "e7e8", 1.0, label="y", sweep="other-search")]
    with pytest.raises(TableError, match=r"of 2 \(mnist5k-search, other-search\): read one sweep's experiment"):
        build_table(frame(*recs), "search")


def test_no_search_runs_says_which_stages_it_reads():
    from tests.unit.analysis.test_cells import run
    with pytest.raises(TableError, match=r"none of the 1 runs is a finished run of this table, stages: confirm, "
                                         r"search$"):
        build_table(frame(run({"clean": 1.0}, stage="grid")), "search")
    failed = frame(trial("confirm", 10, "h", 1.0, label="x", status="FAILED: x"))
    with pytest.raises(TableError, match=r"of this table, stages: confirm; left out: 4 x status FAILED: x$"):
        build_table(failed, "search", stages=["confirm"])
    with pytest.raises(TableError, match=r"of this table, stages: search, confirm; left out: 4 x status FAILED"):
        build_table(failed, "search", stages=["search", "confirm"])
    with pytest.raises(TableError, match=r"^table 'main': none of the 3 runs is a finished run of this table tagged "
                                         r"ssat.table=main \(tags seen: ablation, schedules; --any-tag keys rows on "
                                         r"the params of every run\), stages: every stage but 'search'$"):
        build_table(frame(run({"clean": 1.0}), run({"clean": 1.0}, table="schedules"), {"run_id": "untagged"}), "main")
    with pytest.raises(TableError, match=r"this table tagged ssat.table=main \(tags seen: none; "):
        build_table(frame({"run_id": "untagged", "meta.stage": "grid"}), "main")


def test_the_registered_table_is_the_one_search_spec_builds(runs):
    """SPECS is built once at import; search_spec() builds the same table (and a --metric one) when called."""
    assert specs.search_spec() == specs.SPECS["search"]
    assert specs.search_spec(METRIC, "max") == specs.get_spec("search", METRIC, "max") == specs.SPECS["search"]
    assert render_table(runs, "search", "md", metric=METRIC) == render_table(runs, "search", "md")


def test_metric_and_mode_are_the_search_tables_only():
    assert specs.get_spec("search") is specs.SPECS["search"]
    assert specs.get_spec("search", "val/clean").order_by == "val/clean"
    assert specs.get_spec("search", mode="min").columns[0].best == "min"
    with pytest.raises(ValueError, match="table 'main' ranks by no metric"):
        specs.get_spec("main", METRIC)
    with pytest.raises(ValueError, match="mode 'best'; allowed: 'max' or 'min'"):
        specs.search_spec(METRIC, "best")
    assert specs.search_row({"meta.label": 1.5}) == "1.5" and specs.search_row({}) is None


# ---- what it prints ------------------------------------------------------------------------------------------
def test_markdown(runs):
    md = render_table(runs, "search", "md")
    assert md.startswith("**The search's confirmed configurations, best first by the confirm stage's mean val/pgd10 "
                         "(highest first; the last value each confirm run reported, over its seeds 10, 11), with the "
                         "confirm runs' test accuracies; Search val/pgd10: the search trial of the same configuration, "
                         "one seed at the search's budget (ours; table 'search')**\n")
    assert "| Configuration | val/pgd10 | Test clean | Test PGD-20 | Seeds | Search val/pgd10 |" in md
    assert (f"| {LABEL['A']} | **61.00** (1.41) | 90.50 (0.71) | **56.00** (1.41) | 2 | 58.00 |") in md
    assert (f"| {LABEL['B']} | 50.50 (0.71) | **92.50** (0.71)‡ | 50.25 (0.35)‡ | 2 | **63.00** |") in md
    assert f"| {LABEL['C']} | 40.00†‡ | 80.00†‡ | 30.00†‡ | 1† | 45.00 |" in md
    lines = md.splitlines()
    assert lines.index(next(ln for ln in lines if LABEL["A"] in ln)) < lines.index(
        next(ln for ln in lines if LABEL["B"] in ln)) < lines.index(next(ln for ln in lines if LABEL["C"] in ln))
    assert f"- {MARKS['not_significant']} difference to the best row not significant (Welch's t-test" in md
    assert f"- {MARKS['missing']} fewer seeds than the sweep asked for." in md
    assert "Test protocol: checkpoint best, fp32, eps 8/255 (MNIST: 0.3)" in md and "FixMatch" not in md


def test_latex(runs):
    latex = render_table(runs, "search", "latex")
    assert r"\begin{tabular}{cccccc}" in latex and r"\label{table:ours-search}" in latex
    assert (r"linear t=3 rho0=0.12 beta=0.94 tau=1.5 \#4e14 & \textbf{61.00} (1.41) & 90.50 (0.71) & "
            r"\textbf{56.00} (1.41) & 2 & 58.00 \\") in latex
    assert r"40.00$^{\dagger}$$^{\ddagger}$" in latex and r"& 1$^{\dagger}$ &" in latex
    assert r"\textbf{Search val/pgd10}" in latex


def test_csv(runs):
    csv = pd.read_csv(pd.io.common.StringIO(render_table(runs, "search", "csv")))
    assert len(csv) == 15 and set(csv["table"]) == {"search"}
    assert list(csv["row"].drop_duplicates()) == [LABEL["A"], LABEL["B"], LABEL["C"]]
    b = csv[(csv["row"] == LABEL["B"]) & (csv["column"] == "clean")].iloc[0]
    assert (b["mean"], b["n"], b["emphasis"], b["not_significant"]) == (92.5, 2, "bold", True)
    assert b["p_value"] == pytest.approx(stats.ttest_ind(values("B", "clean"), values("A", "clean"),
                                                         equal_var=False).pvalue)
    seeds = csv[(csv["row"] == LABEL["C"]) & (csv["column"] == "seeds")].iloc[0]
    assert (seeds["mean"], seeds["expected_seeds"], seeds["missing_seeds"]) == (1.0, 2, True)


def test_write_table_and_the_provenance_name_the_runs_of_every_cell(runs, tmp_path):
    paths = write_table(runs, "search", tmp_path)
    assert {p.name for p in paths.values()} == {"search.md", "search.tex", "search.csv", "search.provenance.json"}
    prov = json.loads(paths["provenance"].read_text())
    ids = {(r["meta.label"], r["meta.stage"], int(r["meta.seed"])): r["run_id"] for r in runs.to_dict("records")
           if r["meta.kind"] == "trial" and r["meta.status"] == "FINISHED"}
    by_cell = {(c["row"], c["column"]): c for c in prov["cells"]}
    for key in CONFIGS:
        confirm = [ids[(LABEL[key], "confirm", s)] for s in sorted(CONFIGS[key][3])]
        for column in (METRIC, "clean", "pgd20", "seeds"):
            assert by_cell[(LABEL[key], column)]["run_ids"] == confirm
        assert by_cell[(LABEL[key], f"search/{METRIC}")]["run_ids"] == [ids[(LABEL[key], "search", 0)]]
    assert prov["table"] == "search" and prov["paper"] == ""
    assert (prov["options"]["metric"], prov["options"]["mode"]) == (None, None)
    assert len(prov["run_ids"]) == 8 and "parent" not in prov["run_ids"]
    failed = [e for e in prov["excluded"] if e["reason"] == "status FAILED: nan loss"]
    assert {e["column"] for e in failed} == {METRIC, "clean", "pgd20", "seeds"}  # not the search column


def test_compare_paper_has_nothing_to_compare(runs):
    res = build_table(runs, "search", compare_paper=True)
    assert res.options.compare_paper is False and "paper_mean" not in res.cells
    assert res.notes[-1] == "The paper has no table 'search': nothing to compare."
    assert "(paper)" not in render_table(runs, "search", "md", compare_paper=True)


def test_cli(runs, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(collect, "load_runs", lambda *a: runs)
    assert tables_main(["--experiment", "mnist5k-search", "--table", "search", "--metric", "val/clean", "--mode",
                        "min", "--format", "csv", "--out", str(tmp_path / "s.csv")]) == 0
    csv = pd.read_csv(tmp_path / "s.csv")
    assert list(csv["row"].drop_duplicates()) == [LABEL["C"], LABEL["B"], LABEL["A"]]
    prov = json.loads((tmp_path / "s.provenance.json").read_text())
    assert (prov["options"]["metric"], prov["options"]["mode"]) == ("val/clean", "min")
    assert tables_main(["--experiment", "x", "--table", "main", "--metric", "val/clean"]) == 2
    assert "table 'main' ranks by no metric" in capsys.readouterr().err


def test_build_with_the_spec_fills_its_caption_once():
    res = build(frame(*search_records()), specs.SPECS["search"], Options())
    assert "{seeds}" in specs.SPECS["search"].caption and "{seeds}" not in res.spec.caption
    only = build(frame(*[r for r in search_records() if r.get("meta.stage") != "confirm"] +
                       [trial("confirm", 10, "h", None, label="x")]), specs.SPECS["search"], Options())
    assert "over its seeds)" in only.spec.caption

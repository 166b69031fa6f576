"""Cell math of analysis.tables on hand-built runs: means, ddof-1 stds, emphasis, marks, protocol filter.

Expected values are computed here independently (statistics, scipy.stats) from the numbers typed in the
tests, never read back from the code under test.
"""
import json
import math
import statistics

import pandas as pd
import pytest
from scipy import stats

from analysis import cells as cells_mod
from analysis.collect import runs_frame
from analysis.paper import paper_results
from analysis.table_specs import get_spec
from analysis.tables import build_table, provenance, render_table
from analysis.tables import main as tables_main

EPS = 8 / 255


def proto(attack, eps=EPS, n=10000, subset="full", ckpt="best", precision="fp32", step=None,
          version="standard", restarts=1):
    rec = {"attack": attack, "eps": eps, "norm": "Linf", "step": eps / 10 if step is None else step,
           "steps": None, "restarts": restarts, "random_start": "uniform", "loss": "ce", "n": n,
           "subset": subset, "precision": precision, "checkpoint": ckpt, "autoattack": None}
    if attack.startswith("pgd"):
        rec["steps"] = int(attack[3:])
    if attack == "autoattack":
        rec["autoattack"] = {"version": version, "attacks": ["apgd-ce", "apgd-t", "fab-t", "square"],
                             "package": "pyautoattack 0.2.0"}
    return json.dumps(rec)


_counter = [0]
# the registry entries' labels, as a run of today records them (ssat.method_label, ssat.schedule_*)
METHOD_LABELS = {"ssat-mbi": "SSAT-MBI", "rst": "RST", "uat++": "UAT++", "trades": "TRADES", "srst-awr": "SRST-AWR",
                 "ssat-mbi-awr": "SSAT-MBI-AWR"}
SCHEDULE_LABELS = {"const": ("none", "Const", "Const"), "linear": ("Lin.", "Linear", "Linear-{t}"),
                   "curious": ("Cur.", "Curious", "Curious-({gamma},{t})")}


def labels(method, schedule):
    label, title, row = SCHEDULE_LABELS[schedule]
    return {"meta.method_label": METHOD_LABELS[method], "meta.schedule_label": label, "meta.schedule_title": title,
            "meta.schedule_row": row}


def run(metrics, *, table="ablation", seed=0, method="ssat-mbi", schedule="curious", interpolate=True, t=70,
        gamma=1.25, beta=0.4, rho0=0.05, dataset="cifar10", model="wrn-28-5", epochs=100, expected=3,
        stage="confirm", kind="trial", status="FINISHED", ckpt="best", protocols=None, start_time=None,
        precision="fp32", extra=None):
    """One run record as MLflow hands it back (params and tags as strings)."""
    _counter[0] += 1
    cfg = f"{method}-{schedule}-{t}-{gamma}-{interpolate}-{beta}-{rho0}-{dataset}-{epochs}"
    rec = {"run_id": f"run{_counter[0]:04d}", "experiment": "exp", "source": "mlflow",
           "start_time": start_time if start_time is not None else _counter[0],
           "meta.kind": kind, "meta.table": table, "meta.stage": stage, "meta.seed": str(seed),
           "meta.expected_seeds": str(expected), "meta.config_hash": cfg[:40], "meta.status": status,
           "param.method.name": method, "param.attack.schedule": schedule, "param.attack.t": str(t),
           "param.attack.gamma": str(gamma), "param.method.interpolate": str(interpolate),
           "param.method.beta": str(beta), "param.method.rho0": str(rho0), "param.data.dataset": dataset,
           "param.model.name": model, "param.optim.epochs": str(epochs), "param.seed": str(seed),
           "param.system.precision": precision, **labels(method, schedule)}
    if kind == "teacher":
        rec = {k: v for k, v in rec.items() if not k.startswith("meta.schedule_") and k != "meta.method_label"}
    eps = 0.3 if dataset.startswith("mnist") else EPS
    for attack, v in metrics.items():
        rec[f"metric.test/{ckpt}/{attack}"] = v
        rec[f"protocol.{ckpt}/{attack}"] = (protocols or {}).get(attack,
                                                                 proto(attack, eps=eps, ckpt=ckpt,
                                                                       n=10000 if dataset == "cifar10" else 1000))
    rec.update(extra or {})
    return rec


def frame(*recs):
    return runs_frame(list(recs))


def cell(result, row, column, group=None):
    c = result.cells
    sel = c[(c["row"] == row) & (c["column"] == column)]
    if group is not None:
        sel = sel[sel["group"] == group]
    assert len(sel) == 1, (row, column, group, len(sel))
    return sel.iloc[0]


def abl(glo, interp):
    """Params of an ablation row: ('Lin.', True) -> schedule linear with interpolation."""
    return {"schedule": {"none": "const", "Lin.": "linear", "Cur.": "curious"}[glo], "interpolate": interp,
            "t": 60 if glo == "Lin." else 70}


# ---- means, standard deviations, formats --------------------------------------------------------
def test_mean_and_sample_std_per_cell():
    base = [80.1, 81.4, 79.9]
    cur = [83.2, 83.9, 82.7]
    df = frame(*[run({"clean": v, "pgd20": v - 30}, seed=i, **abl("none", False)) for i, v in enumerate(base)],
               *[run({"clean": v, "pgd20": v - 25}, seed=i, **abl("Cur.", True)) for i, v in enumerate(cur)])
    res = build_table(df, "ablation")
    for row, vals in (("none|no-int", base), ("Cur.|int", cur)):
        c = cell(res, row, "clean")
        assert c["n"] == 3
        assert c["mean"] == pytest.approx(statistics.mean(vals), rel=1e-12)
        assert c["std"] == pytest.approx(statistics.stdev(vals), rel=1e-12)  # ddof = 1
    md = render_table(df, "ablation", "md")
    m, s = statistics.mean(cur), statistics.stdev(cur)
    assert f"| Cur. | ✓ | **{m:.2f}** ({s:.2f}) |" in md
    m0, s0 = statistics.mean(base), statistics.stdev(base)
    assert f"| ✗ | ✗ | {m0:.2f} ({s0:.2f}) |" in md
    assert "| Lin. | ✓ | — | — |" in md  # a paper row without runs stays, empty


def test_single_seed_has_no_std_and_paper_layout_rows():
    df = frame(run({"clean": 90.0}, seed=0, expected=1, **abl("Lin.", True)))
    res = build_table(df, "ablation")
    c = cell(res, "Lin.|int", "clean")
    assert c["n"] == 1 and math.isnan(c["std"]) and not c["missing_seeds"]
    assert list(res.blocks[0]) == ["none|no-int", "Lin.|no-int", "Cur.|no-int", "none|int", "Lin.|int", "Cur.|int"]
    assert "| Lin. | ✓ | **90.00** |" in render_table(df, "ablation", "md")


# ---- emphasis -------------------------------------------------------------------------------
SCHEDULES = {("const", None, 70): [82.0, 82.2], ("linear", None, 50): [84.0, 84.4],   # mean 84.2 best
             ("linear", None, 60): [83.0, 83.2], ("curious", 1.25, 70): [84.2, 84.2],  # tie for best
             ("curious", 1.5, 70): [83.9, 84.1]}                                       # second: 84.0


def test_schedules_bold_and_underlined_second_with_ties():
    recs = [run({"clean": v}, table="schedules", seed=i, schedule=s, gamma=g or 1.25, t=t, expected=2)
            for (s, g, t), vals in SCHEDULES.items() for i, v in enumerate(vals)]
    res = build_table(frame(*recs), "schedules")
    bold = set(res.cells.loc[res.cells["bold"], "row"])
    under = set(res.cells.loc[res.cells["underline"], "row"])
    assert bold == {"Linear-50", "Curious-(1.25,70)"}
    assert under == {"Curious-(1.5,70)"}
    latex = render_table(frame(*recs), "schedules", "latex")
    assert r"\underline{84.00} (0.14)" in latex
    assert r"\textbf{84.20} (0.28)" in latex and r"\textbf{84.20} (0.00)" in latex
    md = render_table(frame(*recs), "schedules", "md")
    assert "| Curious-(1.5,70) | <u>84.00</u> (0.14) |" in md and "| Curious-(1.25,70) | **84.20** (0.00) |" in md


def test_main_bold_per_method_group_and_dataset_fixmatch_never_ranked():
    recs = [run({"clean": 99.0}, table="main", kind="teacher", seed=0, expected=1,
                extra={"meta.column_group": "cifar10/wrn-28-5"}, ckpt="teacher")]
    vals = {"uat++": 84.0, "rst": 82.0, "ssat-mbi": 83.0, "srst-awr": 85.0, "ssat-mbi-awr": 86.0}
    for method, v in vals.items():
        for ds in ("cifar10", "svhn"):
            recs += [run({"clean": v + (1 if ds == "svhn" and method == "rst" else 0) + i * 0.1}, table="main",
                         method=method, seed=i, dataset=ds, model="wrn-28-5" if ds == "cifar10" else "wrn-28-2",
                         interpolate=method.startswith("ssat"),
                         protocols={"clean": proto("clean", n={"cifar10": 10000, "svhn": 26032}[ds])})
                     for i in range(3)]
    res = build_table(frame(*recs), "main")
    bold = res.cells[res.cells["bold"]][["group", "row"]].apply(tuple, axis=1).tolist()
    assert sorted(bold) == sorted([("cifar10/wrn-28-5", "UAT++"), ("cifar10/wrn-28-5", "SSAT-MBI-AWR"),
                                   ("svhn/wrn-28-2", "UAT++"), ("svhn/wrn-28-2", "SSAT-MBI-AWR")])
    fix = cell(res, "FixMatch", "clean", "cifar10/wrn-28-5")
    assert fix["mean"] == 99.0 and not fix["bold"] and not fix["missing_seeds"]
    assert cell(res, "FixMatch", "clean", "svhn/wrn-28-2")["n"] == 0  # the teacher is CIFAR-10's
    assert res.groups == ["cifar10/wrn-28-5", "svhn/wrn-28-2"]  # the paper's order
    assert "| FixMatch | 99.00 |" in render_table(frame(*recs), "main", "md")


def _paper_cells(table):
    """The paper's means as summarized cells (3 seeds each), in the spec's layout."""
    spec = get_spec(table)
    p = paper_results()
    p = p[p["table"] == table]
    blocks = [tuple(b) for b in spec.blocks]
    where = {r: i for i, b in enumerate(blocks) for r in b}
    lines = [{"group": r.group, "block": where[r.row], "row": r.row, "column": r.column, "n": 3,
              "mean": r.mean, "std": 0.1, "expected_seeds": 3, "values": [r.mean - 0.1, r.mean, r.mean + 0.1]}
             for r in p.itertuples()]
    return spec, blocks, pd.DataFrame(lines), p


# The paper's one slip: Table 4 underlines PGD-20 55.92 (Cur.|int) though Lin.|no-int has 55.93.
PAPER_SLIPS = {("awr-ablation", "Lin.|no-int", "pgd20"): "underline", ("awr-ablation", "Cur.|int", "pgd20"): ""}


@pytest.mark.parametrize("table", ["main", "ablation", "schedules", "awr-ablation", "supervised"])
def test_emphasis_rules_reproduce_the_papers_bold_and_underline(table):
    spec, blocks, lines, p = _paper_cells(table)
    marked = cells_mod.mark(lines, spec, blocks, list(spec.baselines), cells_mod.Options())
    ours = ["bold" if b else "underline" if u else "" for b, u in zip(marked["bold"], marked["underline"])]
    assert ours == [PAPER_SLIPS.get((table, r.row, r.column), r.emphasis) for r in p.itertuples()]


# ---- marks ----------------------------------------------------------------------------------
def test_missing_seed_mark():
    df = frame(*[run({"clean": 80 + i}, seed=i, expected=3, **abl("none", False)) for i in range(3)],
               *[run({"clean": 81 + i}, seed=i, expected=3, **abl("Lin.", False)) for i in range(2)])
    res = build_table(df, "ablation")
    assert not cell(res, "none|no-int", "clean")["missing_seeds"]
    assert cell(res, "Lin.|no-int", "clean")["missing_seeds"]
    md = render_table(df, "ablation", "md")
    assert "**81.50** (0.71)†" in md and "fewer seeds than the sweep asked for" in md


def test_welch_mark_matches_scipy():
    base, close, far = [80.0, 80.5, 81.0], [80.2, 80.9, 80.4], [84.0, 84.2, 84.1]
    df = frame(*[run({"clean": v}, seed=i, **abl("none", False)) for i, v in enumerate(base)],
               *[run({"clean": v}, seed=i, **abl("Lin.", False)) for i, v in enumerate(close)],
               *[run({"clean": v}, seed=i, **abl("Cur.", False)) for i, v in enumerate(far)])
    res = build_table(df, "ablation")
    p_close = stats.ttest_ind(close, base, equal_var=False).pvalue
    p_far = stats.ttest_ind(far, base, equal_var=False).pvalue
    assert p_close >= 0.05 > p_far
    assert cell(res, "Lin.|no-int", "clean")["p_value"] == pytest.approx(p_close)
    assert cell(res, "Lin.|no-int", "clean")["not_significant"]
    assert cell(res, "Cur.|no-int", "clean")["p_value"] == pytest.approx(p_far)
    assert not cell(res, "Cur.|no-int", "clean")["not_significant"]
    assert not cell(res, "none|no-int", "clean")["not_significant"]  # the baseline itself
    md = render_table(df, "ablation", "md")
    assert f"{statistics.mean(close):.2f} ({statistics.stdev(close):.2f})‡" in md
    assert f"**{statistics.mean(far):.2f}** ({statistics.stdev(far):.2f}) |" in md


def test_welch_with_one_seed_is_not_significant():
    df = frame(*[run({"clean": 80.0 + i}, seed=i, **abl("none", False)) for i in range(3)],
               run({"clean": 95.0}, seed=0, **abl("Cur.", True)))
    c = cell(build_table(df, "ablation"), "Cur.|int", "clean")
    assert math.isnan(c["p_value"]) and c["not_significant"] and c["missing_seeds"]


# ---- protocol -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, reason", [
    (proto("pgd20", eps=0.031), "eps"),                      # the paper's code: eps 0.031
    (proto("pgd20", step=2 / 255), "step"),                   # another PGD step
    (proto("pgd20", precision="bf16"), "precision"),
    (proto("pgd20", ckpt="last"), "checkpoint"),
    (proto("pgd20", n=5000), "n=5000"),                       # not the whole CIFAR-10 test set
    (proto("pgd20", subset="first200", n=200), "subset"),
    (proto("pgd20", restarts=5), "restarts"),
    (proto("pgd40"), "attack"),
    (None, "no protocol record"),
])
def test_a_run_with_another_protocol_is_left_out_of_the_cell(bad, reason):
    good = [run({"clean": 80.0 + i, "pgd20": 50.0 + i}, seed=i, **abl("none", False)) for i in range(3)]
    odd = run({"clean": 90.0, "pgd20": 99.0}, seed=3, **abl("none", False),
              protocols={"pgd20": bad} if bad else None)
    if bad is None:
        del odd["protocol.best/pgd20"]
    res = build_table(frame(*good, odd), "ablation")
    assert cell(res, "none|no-int", "pgd20")["values"] == [50.0, 51.0, 52.0]
    assert cell(res, "none|no-int", "clean")["n"] == 4  # its clean result still counts
    out = res.excluded[(res.excluded["run_id"] == odd["run_id"]) & (res.excluded["column"] == "pgd20")]
    assert len(out) == 1 and reason in out["reason"].iloc[0]


def test_non_standard_autoattack_is_left_out():
    recs = [run({"autoattack": 50.0 + i}, seed=i, **abl("none", False)) for i in range(2)]
    recs.append(run({"autoattack": 70.0}, seed=2, **abl("none", False),
                    protocols={"autoattack": proto("autoattack", version="rand")}))
    assert cell(build_table(frame(*recs), "ablation"), "none|no-int", "autoattack")["values"] == [50.0, 51.0]


def test_mnist_eps_follows_the_dataset_param():
    ok = [run({"pgd20": 60.0 + i}, seed=i, dataset="mnist5k", model="cnn-small", **abl("none", False))
          for i in range(2)]
    wrong = run({"pgd20": 10.0}, seed=2, dataset="mnist5k", model="cnn-small", **abl("none", False),
                protocols={"pgd20": proto("pgd20", eps=EPS, n=1000)})
    res = build_table(frame(*ok, wrong), "ablation")
    assert res.groups == ["mnist5k/cnn-small"]
    assert cell(res, "none|no-int", "pgd20")["values"] == [60.0, 61.0]


def test_a_setup_sentence_ends_the_caption_in_every_format():
    recs = [run({"clean": 90.0 + i}, seed=i, dataset="mnist5k", model="cnn-small", **abl("Cur.", True))
            for i in range(2)]
    caption = ("Ablation study of SSAT-MBI (Glo.: global epsilon scheduling, Int.: interpolated adversarial "
               "examples) (ours; Table 2 of the paper, table 'ablation')")
    title = f"**{caption}**"
    assert render_table(frame(*recs), "ablation", "md").splitlines()[0] == title
    md = render_table(frame(*recs), "ablation", "md", setup="CPU-sized setup: model m")
    assert md.splitlines()[0] == title[:-2] + ". CPU-sized setup: model m**"
    tex = render_table(frame(*recs), "ablation", "latex", setup="CPU-sized setup: model m")
    assert r"\caption{" + caption + ". CPU-sized setup: model m}" in tex


def test_subset_results_are_left_out_or_labelled():
    recs = [run({"clean": 90.0 + i, "autoattack": 40.0 + i}, seed=i, dataset="mnist5k", model="cnn-small",
                **abl("Cur.", True), protocols={"autoattack": proto("autoattack", eps=0.3, n=200, subset="first200")})
            for i in range(3)]
    strict = build_table(frame(*recs), "ablation")
    assert [c.key for c in strict.columns] == ["clean"]  # AutoAttack has no full-test-set result: left out
    assert any(n.startswith("AutoAttack left out") and "first200" in n for n in strict.notes)
    loose = build_table(frame(*recs), "ablation", allow_subset=True)
    assert [c.key for c in loose.columns] == ["clean", "autoattack"]
    assert cell(loose, "Cur.|int", "autoattack")["subset"]
    assert not cell(loose, "Cur.|int", "clean")["subset"]
    md = render_table(frame(*recs), "ablation", "md", allow_subset=True)
    assert "**41.00** (1.00)§" in md and "test subset (first200)" in md


# ---- which runs a table reads -----------------------------------------------------------------
def test_tag_stage_status_and_duplicate_rules():
    recs = [run({"clean": 80.0 + i}, seed=i, **abl("none", False)) for i in range(2)]
    other_table = run({"clean": 10.0}, seed=5, table="schedules", **abl("none", False))
    search = run({"clean": 11.0}, seed=6, stage="search", **abl("none", False))
    failed = run({"clean": 12.0}, seed=7, status="FAILED: nan loss", **abl("none", False))
    rerun = run({"clean": 85.0}, seed=1, start_time=10**9, **abl("none", False))  # same config and seed
    res = build_table(frame(*recs, other_table, search, failed, rerun), "ablation")
    assert cell(res, "none|no-int", "clean")["values"] == [80.0, 85.0]
    reasons = " ".join(res.excluded["reason"])
    assert "status FAILED: nan loss" in reasons and f"as run {rerun['run_id']}" in reasons
    (dup,) = res.excluded[res.excluded["reason"].str.startswith("same configuration")].to_dict("records")
    assert dup == {"run_id": recs[1]["run_id"], "group": "cifar10/wrn-28-5", "row": "none|no-int", "column": "clean",
                   "reason": f"same configuration and seed as run {rerun['run_id']}"}  # the earlier run is dropped
    wide = build_table(frame(*recs, other_table, search), "ablation", any_tag=True, stages=["search", "confirm"])
    assert sorted(cell(wide, "none|no-int", "clean")["values"]) == [10.0, 11.0, 80.0, 81.0]


def test_a_cell_mixing_configurations_says_so():
    recs = [run({"clean": 80.0 + i}, seed=i, schedule="linear", t=t, interpolate=True) for i, t in enumerate((50, 60))]
    res = build_table(frame(*recs), "ablation")
    assert cell(res, "Lin.|int", "clean")["n"] == 2
    assert any(n.startswith("Cell cifar10/wrn-28-5 / Lin.|int mixes 2 configurations") for n in res.notes)
    assert "Lin. = Linear-50 / Linear-60" in " ".join(res.notes)


def test_unknown_table_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid tables: main, ablation, schedules, awr-ablation"):
        build_table(frame(run({"clean": 1.0})), "tabel-2")


@pytest.mark.parametrize("flag, bad, allowed", [("--table", "tabel-2", "'main', 'ablation', 'schedules'"),
                                                ("--format", "html", "'md', 'latex', 'csv'"),
                                                ("--checkpoint", "swa", "'best', 'last'")])
def test_cli_rejects_an_unknown_choice_before_reading_runs(flag, bad, allowed, capsys):
    args = {"--table": "ablation", "--format": "md", "--checkpoint": "best", flag: bad}
    with pytest.raises(SystemExit) as exit_:  # argparse: no store is opened for a wrong name
        tables_main(["--experiment", "x", *[a for kv in args.items() for a in kv]])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: invalid choice: '{bad}'" in err and allowed in err


def test_no_runs_says_what_was_seen():
    with pytest.raises(cells_mod.TableError, match="tagged ssat.table=main.*tags seen: ablation"):
        build_table(frame(run({"clean": 1.0})), "main")


# ---- the other tables -----------------------------------------------------------------------
def test_training_time_cells_and_precision_filter():
    def timed(method, hours, epochs, seed, precision="fp32"):
        return run({}, table="main", method=method, seed=seed, epochs=epochs, precision=precision,
                   interpolate=False, extra={"metric.time/total_hours": hours, "metric.time/epochs": float(epochs)})
    recs = [timed("rst", h, 100, i) for i, h in enumerate([4.8, 4.9, 5.0])]
    recs += [timed("ssat-mbi", h, 100, i) for i, h in enumerate([5.1, 5.0])]
    recs.append(timed("ssat-mbi", 2.0, 100, 7, precision="bf16"))
    res = build_table(frame(*recs), "training-time")
    per_epoch = [60 * h / 100 for h in (4.8, 4.9, 5.0)]
    c = cell(res, "RST", "min_per_epoch")
    assert (c["mean"] == pytest.approx(statistics.mean(per_epoch))
            and c["std"] == pytest.approx(statistics.stdev(per_epoch)))
    assert cell(res, "SSAT-MBI", "hours")["values"] == [5.1, 5.0]
    assert "bf16" in " ".join(res.excluded["reason"])
    md = render_table(frame(*recs), "training-time", "md")
    assert "| RST | 100 | 4.90 (0.10) | 2.94 (0.06) |" in md
    assert "| SSAT-MBI | 100† | 5.05 (0.07)†" in md  # a fixed setting (epochs) is never Welch-tested


def test_standard_training_takes_no_time_cell():
    """Table 5 times the main-table runs: a lambda-0 run of ssat-mbi must not pass for SSAT-MBI's time."""
    recs = [run({}, table="main", seed=s, interpolate=False, extra={
        "metric.time/total_hours": h, "metric.time/epochs": 100.0, "param.method.lam": lam})
        for s, (h, lam) in enumerate([(5.0, "8.0"), (5.2, None), (1.0, "0.0")])]
    res = build_table(frame(*recs), "training-time")
    assert cell(res, "SSAT-MBI", "hours")["values"] == [5.0, 5.2]


def test_rho_sensitivity_has_the_four_settings_as_groups():
    recs = [run({"clean": 80 + rho * 10 + beta + i * 0.1}, table="rho-sensitivity", seed=i, rho0=rho, beta=beta,
                schedule=s, t=70 if s == "curious" else None)
            for rho in (0.025, 0.05, 0.1) for beta in (0.4, 1.0) for s in ("const", "curious") for i in range(2)]
    res = build_table(frame(*recs), "rho-sensitivity")
    assert len(res.groups) == 4 and all(g.startswith("cifar10/wrn-28-5 beta=") for g in res.groups)
    assert list(res.blocks[0]) == ["rho0=0.025", "rho0=0.05", "rho0=0.1"]
    c = cell(res, "rho0=0.1", "clean", "cifar10/wrn-28-5 beta=1, Curious")
    assert c["mean"] == pytest.approx(statistics.mean([82.0, 82.1]))
    assert math.isnan(cell(res, "rho0=0.05", "clean", "cifar10/wrn-28-5 beta=1, Curious")["p_value"])  # baseline
    assert not math.isnan(cell(res, "rho0=0.1", "clean", "cifar10/wrn-28-5 beta=1, Curious")["p_value"])


def test_schedules_map_shortened_runs_back_to_the_papers_t():
    recs = [run({"clean": 80.0 + i}, table="schedules", seed=i, schedule="linear", t=6, epochs=10) for i in range(2)]
    recs += [run({"clean": 70.0}, table="schedules", seed=0, schedule="linear", t=3, epochs=10)]
    res = build_table(frame(*recs), "schedules")
    assert cell(res, "Linear-60", "clean")["n"] == 2
    assert "Linear-3/10ep" in res.blocks[-1]


# ---- formats and provenance -----------------------------------------------------------------
def _small():
    return frame(*[run({"clean": v}, seed=i, **abl("none", False)) for i, v in enumerate([80.0, 81.0])],
                 *[run({"clean": v}, seed=i, **abl("Cur.", True)) for i, v in enumerate([85.0, 87.0])])


def test_latex_and_csv_hold_the_same_cells():
    latex = render_table(_small(), "ablation", "latex")
    assert r"\xmark & \xmark & 80.50 (0.71)$^{\dagger}$ \\" in latex
    assert r"Cur. & \cmark & \textbf{86.00} (1.41)$^{\dagger}$$^{\ddagger}$ \\" in latex
    assert r"\multicolumn{3}{c}{CIFAR-10 (WideResNet-28-5)} \\" in latex
    assert latex.count(r"\begin{tabular}{ccc}") == 1
    csv = pd.read_csv(pd.io.common.StringIO(render_table(_small(), "ablation", "csv")))
    line = csv[(csv["row"] == "Cur.|int") & (csv["column"] == "clean")].iloc[0]
    assert line["mean"] == 86.0 and line["std"] == pytest.approx(statistics.stdev([85.0, 87.0]))
    assert line["emphasis"] == "bold" and line["missing_seeds"] and line["not_significant"]
    assert line["p_value"] == pytest.approx(stats.ttest_ind([85.0, 87.0], [80.0, 81.0], equal_var=False).pvalue)
    assert len(csv) == 6 and set(csv["table"]) == {"ablation"}


def test_latex_closes_each_group_with_a_bottomrule_before_the_tabular_ends():
    lines = render_table(_small(), "ablation", "latex").splitlines()
    end = lines.index(r"\end{tabular}")
    assert lines[end - 1] == r"\bottomrule" and lines.count(r"\toprule") == lines.count(r"\bottomrule") == 1


def test_write_table_writes_every_format_and_the_provenance_with_its_command(tmp_path):
    from analysis.tables import write_table
    paths = write_table(_small(), "ablation", tmp_path / "t", command=["python", "-m", "analysis.tables"])
    assert set(paths) == {"md", "latex", "csv", "provenance"}
    assert paths["provenance"] == tmp_path / "t" / "ablation.provenance.json"
    prov = json.loads(paths["provenance"].read_text())
    assert (prov["table"], prov["command"]) == ("ablation", ["python", "-m", "analysis.tables"])
    assert paths["md"].read_text() == render_table(_small(), "ablation", "md")


def test_compare_paper_puts_the_papers_value_beside_ours():
    md = render_table(_small(), "ablation", "md", compare_paper=True)
    assert "| Clean | Clean (paper) |" in md
    assert "| Cur. | ✓ | **86.00** (1.41)†‡ | 83.31 (0.25) |" in md
    assert "selected the reported checkpoint on the test set" in md and "FAB-T" in md
    csv = pd.read_csv(pd.io.common.StringIO(render_table(_small(), "ablation", "csv", compare_paper=True)))
    assert csv.loc[(csv["row"] == "Lin.|int"), "paper_mean"].iloc[0] == 83.85


def test_provenance_regenerates_the_same_table():
    df = _small()
    res = build_table(df, "ablation")
    prov = json.loads(json.dumps(provenance(res)))
    by_cell = {(c["row"], c["column"]): c for c in prov["cells"]}
    assert by_cell[("Cur.|int", "clean")]["values"] == [85.0, 87.0]
    assert by_cell[("Cur.|int", "clean")]["seeds"] == [0, 1]
    assert by_cell[("Lin.|int", "clean")]["run_ids"] == []
    noise = run({"clean": 1.0}, seed=9, table="main", **abl("none", False))
    again = frame(*[r for r in df.to_dict("records") if r["run_id"] in prov["run_ids"]], noise)
    assert render_table(again, "ablation", "md") == render_table(df, "ablation", "md")


@pytest.mark.parametrize("table, kw", [
    ("schedules", {"schedule": "const", "interpolate": True}),
    ("main", {}),
    ("supervised", {"method": "trades", "schedule": "const", "interpolate": False}),
    ("beta-sensitivity", {}),
    ("awr-ablation", {"method": "ssat-mbi-awr", "schedule": "const", "interpolate": False}),
    ("rho-sensitivity", {"schedule": "const"}),
])
def test_a_standard_training_run_joins_no_methods_row(table, kw):
    """lambda 0 is standard training (mnist5k-standard: ssat-mbi with lambda 0): it is nobody's cell, while the same
    run with lambda 8 is counted. Runs without the param (logged before it) still count. (Table 2: its own row.)"""
    recs = [run({"clean": 90.0}, table=table, seed=s, extra={"param.method.lam": lam}, **kw)
            for s, lam in ((0, "8.0"), (1, "0.0"), (2, None))]
    cells = build_table(frame(*recs), table).cells
    cells = cells[(cells["column"] == "clean") & cells["n"].gt(0)]
    assert len(cells) == 1 and cells["n"].iloc[0] == 2, cells


def test_standard_training_is_its_own_unranked_row_of_the_ablation_table():
    """In Table 2 a lambda-0 run would pass for 'none|no-int' (const, no interpolation): it gets the 'standard
    training' row after the paper's rows, spanning Glo./Int., never bold, tested against the baseline row."""
    kw = {"schedule": "const", "interpolate": False, "dataset": "mnist5k", "model": "cnn-small"}
    recs = [run({"clean": 95.0 + s, "pgd20": 0.5}, seed=s, expected=2, extra={"param.method.lam": "0.0"}, **kw)
            for s in (0, 1)]
    recs += [run({"clean": 30.0 + s, "pgd20": 20.0 + s}, seed=s, expected=2, extra={"param.method.lam": "8.0"}, **kw)
             for s in (0, 1)]
    res = build_table(frame(*recs), "ablation")
    assert res.blocks[-1][-1] == "standard training" and cell(res, "none|no-int", "clean")["n"] == 2
    assert cell(res, "standard training", "clean")["mean"] == 95.5
    md = render_table(frame(*recs), "ablation", "md")
    assert "| standard training |  | 95.50 (0.71)" in md  # highest clean, not bold: unranked
    assert "| ✗ | ✗ | **30.50** (0.71) |" in md  # the best ranked row
    assert "standard training = " not in md  # no schedule to state for it


def test_every_file_a_table_writes_ends_with_one_newline(tmp_path):
    from analysis.tables import write_table
    paths = write_table(_small(), "ablation", tmp_path / "t")
    for kind, path in paths.items():
        text = path.read_bytes()
        assert text.endswith(b"\n") and not text.endswith(b"\n\n"), (kind, text[-40:])
    assert paths["latex"].read_text().endswith("\\end{table}\n")


def test_training_time_compares_the_precision_a_run_trained_in():
    """resolved.precision (what the run trained in, e.g. bf16 for system.precision auto on a GPU) decides; a run
    logged without it is judged by system.precision."""
    def timed(seed, hours, precision, resolved=None):
        extra = {"metric.time/total_hours": hours, "metric.time/epochs": 100.0}
        if resolved is not None:
            extra["param.resolved.precision"] = resolved
        return run({}, table="main", seed=seed, interpolate=False, precision=precision, extra=extra)
    recs = [timed(0, 5.0, "auto", "fp32"), timed(1, 5.2, "fp32"), timed(2, 2.0, "auto", "bf16"), timed(3, 9.0, "auto"),
            timed(4, 1.0, "fp32", "bf16")]
    res = build_table(frame(*recs), "training-time")
    assert cell(res, "SSAT-MBI", "hours")["values"] == [5.0, 5.2]
    reasons = res.excluded.groupby("run_id")["reason"].first()
    assert reasons[recs[2]["run_id"]] == reasons[recs[4]["run_id"]] == "training precision 'bf16', table needs 'fp32'"
    assert reasons[recs[3]["run_id"]] == "training precision 'auto', table needs 'fp32'"


# ---- row functions and run names, on hand-made run records ---------------------------------------------------
def test_sweep_row_names_an_ssat_mbi_run_by_the_swept_value_and_drops_the_rest():
    from analysis.table_specs import sweep_row

    row = sweep_row("method.beta")
    run = {"param.method.name": "ssat-mbi", "param.method.beta": "0.40", "meta.kind": "trial"}
    assert row(run) == "beta=0.4"  # the dotted name's last part, the value as %g
    assert row({**run, "param.method.beta": "1"}) == "beta=1"
    assert row({**run, "param.method.name": "rst"}) is None  # Figs. 4-5 are SSAT-MBI's
    assert row({**run, "meta.kind": "teacher"}) is None
    assert row({k: v for k, v in run.items() if k != "param.method.beta"}) is None  # not swept in this run
    assert row({**run, "param.method.beta": float("nan")}) is None
    assert sweep_row("rho0")({**run, "param.rho0": 0.25}) == "rho0=0.25"  # a name without a section


def test_run_name_says_which_run_with_what_it_knows():
    from analysis.run_labels import run_name

    full = {"run_name": "r1", "run_id": "abc", "experiment": "sweep-x"}
    assert run_name(full) == "'r1' (experiment 'sweep-x', id abc)"
    assert run_name({"run_id": "abc"}) == "'abc' (id abc)"
    assert run_name({"run_name": "r1", "experiment": "sweep-x"}) == "'r1' (experiment 'sweep-x')"
    assert run_name({"run_name": "r1"}) == "'r1'"
    assert run_name({}) == "'(unnamed)'"


def test_dataset_and_group_from_params_tags_or_the_group():
    from analysis.run_labels import dataset_group, dataset_of

    assert dataset_of({"meta.dataset": "svhn"}) == "svhn"  # a teacher's tag
    assert dataset_of({"param.data.dataset": "cifar10", "meta.dataset": "svhn"}) == "cifar10"
    assert dataset_group({"param.data.dataset": "cifar10", "param.model.name": "wrn-28-5"}) == "cifar10/wrn-28-5"
    assert dataset_group({"param.data.dataset": "cifar10"}) == "cifar10"  # no model: the dataset alone
    assert dataset_group({"param.model.name": "wrn-28-5", "meta.dataset": "svhn"}) == "svhn"

"""analysis.claims on hand-built runs: each check (compare, trend, best, overhead, across) gives holds, does not hold
and not measurable on cases built for each, with Welch's p computed here by scipy from the values typed into the runs
(never read back from the code under test); the claims as data name rows and columns the tables have; and on the
paper's own numbers the claims agree in direction with the paper, except where its numbers contradict its words."""
import dataclasses
import itertools
import json
import math
import re
import statistics

import pytest
from scipy import stats

from analysis import claims
from analysis.collect import runs_frame
from analysis.paper import paper_results
from analysis.protocol import TEST_SET_SIZE, dataset_eps
from analysis.table_specs import SPECS
from analysis.tables import build_table

GROUP = "mnist5k/cnn-small"
METHOD_LABELS = {"ssat-mbi": "SSAT-MBI", "rst": "RST", "uat++": "UAT++", "trades": "TRADES",
                 "srst-awr": "SRST-AWR", "ssat-mbi-awr": "SSAT-MBI-AWR"}
SCHEDULE_LABELS = {"const": ("none", "Const", "Const"), "linear": ("Lin.", "Linear", "Linear-{t}"),
                   "curious": ("Cur.", "Curious", "Curious-({gamma},{t})")}
_ids = itertools.count()


def proto(attack, dataset, subset="full"):
    """A protocol record of the tables' protocol on `dataset`: the full test set, or the first 100 images."""
    eps = dataset_eps(dataset)
    n = TEST_SET_SIZE.get(dataset, 1000) if subset == "full" else 100
    return json.dumps({"attack": attack, "eps": eps, "norm": "Linf", "step": eps / 10,
                       "steps": int(attack[3:]) if attack.startswith("pgd") else None, "restarts": 1, "n": n,
                       "subset": subset, "precision": "fp32", "checkpoint": "best",
                       "autoattack": {"version": "standard"} if attack == "autoattack" else None})


def run(table, seed, metrics, *, method="ssat-mbi", schedule="const", t=None, gamma=None, interpolate=True,
        beta=0.4, rho0=0.05, group=GROUP, expected=2, spec_epochs=100, aa_subset="first100", label=None):
    """One trial's run record as analysis.collect reads it; `metrics`: attack -> test accuracy, or 'hours' and
    'epochs' (time/total_hours, time/epochs)."""
    i = next(_ids)
    dataset, model = group.split("/")
    sched = dict(zip(("meta.schedule_label", "meta.schedule_title", "meta.schedule_row"), SCHEDULE_LABELS[schedule]))
    rec = {"run_id": f"run{i:05d}", "experiment": "exp", "source": "mlflow", "start_time": i, "meta.kind": "trial",
           "meta.table": table, "meta.stage": "grid", "meta.seed": seed, "meta.expected_seeds": expected,
           "meta.status": "FINISHED", "meta.label": label,
           "meta.config_hash": f"{method}-{schedule}-{t}-{gamma}-{interpolate}-{beta}-{rho0}-{group}",
           "meta.method_label": METHOD_LABELS[method], **sched, "param.method.name": method,
           "param.attack.schedule": schedule, "param.attack.t": t, "param.attack.gamma": gamma,
           "param.method.interpolate": interpolate, "param.method.beta": beta, "param.method.rho0": rho0,
           "param.method.lam": 6.0, "param.data.dataset": dataset, "param.model.name": model, "param.seed": seed,
           "param.optim.epochs": 70, "param.system.precision": "fp32", "param.spec.epochs": spec_epochs,
           "param.spec.t": t}
    for key, v in metrics.items():
        if key in ("hours", "epochs"):
            rec[f"metric.time/{'total_hours' if key == 'hours' else 'epochs'}"] = v
            continue
        rec[f"metric.test/best/{key}"] = v
        rec[f"protocol.best/{key}"] = proto(key, dataset, aa_subset if key == "autoattack" else "full")
    return rec


# ---- the params of a row, per table ---------------------------------------------------------
GLO = {"none": ("const", None, None), "Lin.": ("linear", 42, None), "Cur.": ("curious", 49, 1.25)}


def ablation_params(row, method="ssat-mbi"):
    glo, interp = row.split("|")
    schedule, t, gamma = GLO[glo]
    return {"method": method, "schedule": schedule, "t": t, "gamma": gamma, "interpolate": interp == "int",
            "spec_epochs": 70}


def schedule_params(row):
    """'Const', 'Linear-60', 'Curious-(1.25,70)', or a scaled 'Linear-42/70ep'."""
    if row == "Const":
        return {"schedule": "const"}
    m = re.match(r"^(Linear|Curious)-\(?(?:([\d.]+),)?(\d+)(?:/(\d+)ep)?\)?$", row)
    name, gamma, t, epochs = m.groups()
    return {"schedule": name.lower(), "gamma": float(gamma) if gamma else None, "t": int(t),
            "spec_epochs": int(epochs) if epochs else 100}


OURS = {"interpolate": True, "schedule": "curious", "t": 49, "gamma": 1.25}  # TRADES+Ours
PARAMS = {
    "main": lambda row: {"method": {v: k for k, v in METHOD_LABELS.items()}[row]},
    "training-time": lambda row: {"method": {v: k for k, v in METHOD_LABELS.items()}[row]},
    "ablation": ablation_params,
    "awr-ablation": lambda row: ablation_params(row, "ssat-mbi-awr"),
    "schedules": schedule_params,
    "supervised": lambda row: {"method": "trades", **(OURS if row == "TRADES+Ours" else {"interpolate": False})},
    "beta-sensitivity": lambda row: {"beta": float(row.split("=")[1])},
}


def records(table, values, group=GROUP, **kw):
    """values: row -> column -> one value per seed; the runs of those cells (seed i: the i-th value)."""
    recs = []
    for row, cols in values.items():
        for seed in range(max(len(v) for v in cols.values())):
            metrics = {c: v[seed] for c, v in cols.items() if seed < len(v)}
            recs.append(run("main" if table == "training-time" else table, seed, metrics, group=group,
                            **{**PARAMS[table](row), **kw}))
    return recs


def built(table, values, **kw):
    return build_table(runs_frame(records(table, values, **kw)), table, allow_subset=True)


def verdict(result, key, group=GROUP):
    found = [v for v in claims.evaluate(result) if v.claim.key == key and v.group == group]
    assert len(found) == 1, [(v.claim.key, v.group) for v in claims.evaluate(result)]
    return found[0]


def welch(a, b):
    return stats.ttest_ind(a, b, equal_var=False).pvalue


def fields(c):
    """What a comparison says besides its numbers."""
    return c.column, c.row, c.other, c.claimed, c.status, c.why


def without(result, column):
    """The table as it is when no run reports `column` (a column no run fills is left out of it)."""
    return dataclasses.replace(result, columns=[c for c in result.columns if c.key != column])


# ---- compare ---------------------------------------------------------------------------------
MBI = {"pgd10": [71.0, 71.4], "pgd20": [70.0, 70.2], "pgd40": [69.0, 69.3]}
RST = {"pgd10": [68.0, 68.3], "pgd20": [67.1, 67.2], "pgd40": [66.0, 66.5]}


def test_compare_holds_when_every_difference_is_in_the_claimed_direction_and_significant():
    res = built("main", {"SSAT-MBI": MBI, "RST": RST})
    v = verdict(res, "table1-pgd-rst")
    assert v.verdict == claims.HOLDS
    for c, col in zip(v.comparisons, ("pgd10", "pgd20", "pgd40")):
        p = welch(MBI[col], RST[col])
        assert p < 0.05 and c.p == pytest.approx(p, rel=1e-9) and c.status == claims.AS_CLAIMED
        assert (c.row, c.other, c.claimed) == ("SSAT-MBI", "RST", "above")
        assert c.a.mean == pytest.approx(statistics.mean(MBI[col]))
        assert c.b.std == pytest.approx(statistics.stdev(RST[col])) and c.a.values == tuple(MBI[col]) and c.a.n == 2
        assert claims.comparison_text(c).endswith(f"p = {p:.3g}: as claimed")
    assert v.text.startswith("Check: each difference in the claimed direction with Welch's t-test p < 0.05. PGD-10, "
                             "SSAT-MBI above RST: 71.20 (0.28, 2 seeds) vs 68.15 (0.21, 2 seeds), p = ")
    assert claims.verdict_label(v) == "holds"


def test_compare_fails_on_one_difference_against_the_claim_or_not_significant():
    against = built("main", {"SSAT-MBI": {**MBI, "pgd40": [65.0, 65.2]}, "RST": RST})
    v = verdict(against, "table1-pgd-rst")
    assert v.verdict == claims.FAILS
    assert [c.status for c in v.comparisons] == [claims.AS_CLAIMED, claims.AS_CLAIMED, claims.AGAINST]
    assert fields(v.comparisons[2]) == ("PGD-40", "SSAT-MBI", "RST", "above", claims.AGAINST, "")
    assert v.comparisons[2].p == pytest.approx(welch([65.0, 65.2], RST["pgd40"]))
    noisy = {"pgd10": [75.0, 62.0], "pgd20": [70.0, 70.2], "pgd40": [69.0, 69.3]}
    v = verdict(built("main", {"SSAT-MBI": noisy, "RST": RST}), "table1-pgd-rst")
    p = welch(noisy["pgd10"], RST["pgd10"])
    assert p >= 0.05 and v.verdict == claims.FAILS
    assert (v.comparisons[0].status, v.comparisons[0].p) == (claims.NOT_SIGNIFICANT, pytest.approx(p))
    assert f"p = {p:.3g}: not significant" in v.text


def test_compare_is_not_measurable_with_one_seed_a_missing_row_or_a_missing_column():
    one_seed = {c: v[:1] for c, v in RST.items()}
    v = verdict(built("main", {"SSAT-MBI": MBI, "RST": one_seed}), "table1-pgd-rst")
    assert v.verdict == claims.UNMEASURABLE and claims.verdict_label(v) == "not measurable on MNIST-5k"
    assert fields(v.comparisons[0]) == ("PGD-10", "SSAT-MBI", "RST", "above", claims.MISSING,
                                        "PGD-10 of RST on 1 seed: Welch's test needs 2 a side")
    assert math.isnan(v.comparisons[0].p)
    assert claims.comparison_text(v.comparisons[0]) == (
        "PGD-10, SSAT-MBI above RST: 71.20 (0.28, 2 seeds) vs 68.00 (1 seed): not measurable (PGD-10 of RST on 1 "
        "seed: Welch's test needs 2 a side)")
    res = built("main", {"SSAT-MBI": MBI, "RST": RST})
    uat = verdict(res, "table1-pgd-uat")
    assert uat.verdict == claims.UNMEASURABLE
    assert fields(uat.comparisons[0]) == ("PGD-10", "SSAT-MBI", "UAT++", "above", claims.MISSING,
                                          "no PGD-10 result for UAT++")
    awr = verdict(res, "table1-awr-pgd")
    assert awr.comparisons[0].why == "no PGD-10 result for SSAT-MBI-AWR and SRST-AWR"
    aa = verdict(res, "table1-autoattack-rst")  # no run reports AutoAttack: the table has no such column
    assert aa.verdict == claims.UNMEASURABLE and aa.comparisons[0].why == "no AutoAttack column: no run reports it"


def test_a_failing_difference_outweighs_one_that_cannot_be_measured():
    res = built("main", {"SSAT-MBI": {**MBI, "pgd10": [60.0, 60.1]}, "RST": {**RST, "pgd40": [66.0]}})
    v = verdict(res, "table1-pgd-rst")
    assert [c.status for c in v.comparisons] == [claims.AGAINST, claims.AS_CLAIMED, claims.MISSING]
    assert v.verdict == claims.FAILS


def test_autoattack_on_a_test_subset_is_marked_in_the_evidence():
    aa = {"SSAT-MBI": {"autoattack": [61.0, 61.0, 62.0]}, "RST": {"autoattack": [55.0, 56.0, 55.0]}}
    v = verdict(built("main", aa), "table1-autoattack-rst")
    assert v.verdict == claims.HOLDS and v.comparisons[0].a.subset
    assert v.comparisons[0].p == pytest.approx(welch([61.0, 61.0, 62.0], [55.0, 56.0, 55.0]))
    assert "(§: on a test subset)" in v.text and "61.33 (0.58, 3 seeds)§" in v.text


def test_a_claim_of_lower_accuracy_holds_below_and_fails_above():
    base = {"none|int": {"autoattack": [60.0, 60.4]}}
    v = verdict(built("ablation", {**base, "Lin.|int": {"autoattack": [57.0, 57.2]}}), "table2-linear-autoattack")
    assert v.verdict == claims.HOLDS and v.comparisons[0].claimed == "below"
    assert v.comparisons[0].p == pytest.approx(welch([57.0, 57.2], [60.0, 60.4]))
    v = verdict(built("ablation", {**base, "Lin.|int": {"autoattack": [62.0, 62.2]}}), "table2-linear-autoattack")
    assert v.verdict == claims.FAILS and v.comparisons[0].status == claims.AGAINST


def test_interpolation_is_checked_under_every_schedule():
    rows = {f"{g}|{i}": {"pgd20": [60.0 + 5 * (i == "int") + k, 60.3 + 5 * (i == "int") + k]}
            for k, g in enumerate(("none", "Lin.", "Cur.")) for i in ("int", "no-int")}
    v = verdict(built("ablation", rows), "table2-interpolation")
    assert v.verdict == claims.HOLDS
    assert [(c.row, c.other) for c in v.comparisons] == [("none|int", "none|no-int"), ("Lin.|int", "Lin.|no-int"),
                                                         ("Cur.|int", "Cur.|no-int")]
    del rows["Cur.|no-int"]
    v = verdict(built("ablation", rows), "table2-interpolation")
    assert v.verdict == claims.UNMEASURABLE and v.comparisons[2].why == "no PGD-20 result for Cur.|no-int"


def test_a_shortened_specs_schedule_rows_are_the_paper_rows_the_claims_name():
    # a 70-epoch spec's t = 35, 42, 49 are the paper's 50, 60, 70 scaled (analysis.run_labels labels the rows so)
    rows = {"Const": {"clean": [80.0, 80.2], "pgd20": [60.0, 60.1]},
            "Linear-35/70ep": {"clean": [82.0, 82.2], "pgd20": [62.0, 62.1]},
            "Linear-42/70ep": {"clean": [83.0, 83.2], "pgd20": [63.0, 63.1]},
            "Linear-49/70ep": {"clean": [84.0, 84.2], "pgd20": [64.0, 64.1]}}
    v = verdict(built("schedules", rows), "table3-linear")
    assert v.verdict == claims.HOLDS
    assert [c.row for c in v.comparisons] == ["Linear-50", "Linear-50", "Linear-60", "Linear-60", "Linear-70",
                                              "Linear-70"]


# ---- best --------------------------------------------------------------------------------------
def beta_rows(column, values):
    return {f"beta={b:g}": {column: v} for b, v in values.items()}


def test_best_holds_when_the_row_leads_the_runner_up_significantly():
    aa = {0.0: [50.0, 50.2], 0.2: [52.0, 52.4], 0.4: [56.0, 56.2], 0.6: [53.0, 53.3]}
    v = verdict(built("beta-sensitivity", beta_rows("autoattack", aa)), "fig4-autoattack")
    assert v.verdict == claims.HOLDS
    c = v.comparisons[0]
    assert (c.row, c.other) == ("beta=0.4", "beta=0.6") and c.p == pytest.approx(welch(aa[0.4], aa[0.6]))


def test_best_fails_when_another_row_is_higher_or_the_lead_is_not_significant():
    higher = {0.2: [52.0, 52.4], 0.4: [56.0, 56.2], 0.6: [57.0, 57.3]}
    v = verdict(built("beta-sensitivity", beta_rows("autoattack", higher)), "fig4-autoattack")
    assert v.verdict == claims.FAILS and v.comparisons[0].other == "beta=0.6"
    assert v.comparisons[0].status == claims.AGAINST
    close = {0.2: [52.0, 52.4], 0.4: [56.0, 58.0], 0.6: [55.9, 56.3]}
    v = verdict(built("beta-sensitivity", beta_rows("autoattack", close)), "fig4-autoattack")
    p = welch(close[0.4], close[0.6])
    assert p >= 0.05 and v.verdict == claims.FAILS and v.comparisons[0].status == claims.NOT_SIGNIFICANT
    assert v.comparisons[0].p == pytest.approx(p)


def test_best_is_not_measurable_without_the_row_or_with_one_seed():
    v = verdict(built("beta-sensitivity", beta_rows("autoattack", {0.2: [52.0, 52.4], 0.6: [57.0, 57.3]})),
                "fig4-autoattack")
    assert v.verdict == claims.UNMEASURABLE and v.comparisons[0].why == "no AutoAttack result for beta=0.4"
    v = verdict(built("beta-sensitivity", beta_rows("autoattack", {0.4: [58.0], 0.6: [57.0, 57.3]})),
                "fig4-autoattack")
    assert v.verdict == claims.UNMEASURABLE and v.comparisons[0].why.endswith("on 1 seed: Welch's test needs 2 a side")
    v = verdict(built("beta-sensitivity", beta_rows("autoattack", {0.4: [58.0, 58.1]})), "fig4-autoattack")
    assert v.verdict == claims.UNMEASURABLE and v.comparisons[0].why == "no AutoAttack result for the runner-up"


def test_best_among_listed_rows_ranks_only_those():
    rows = {"Const": {"pgd20": [70.0, 70.1], "autoattack": [60.0, 60.2]},
            "Curious-(1.25,50)": {"pgd20": [61.0, 61.1], "autoattack": [51.0, 51.2]},
            "Curious-(1.25,60)": {"pgd20": [62.0, 62.1], "autoattack": [52.0, 52.2]},
            "Curious-(1.25,70)": {"pgd20": [63.0, 63.1], "autoattack": [53.0, 53.2]}}
    v = verdict(built("schedules", rows), "table3-curious-70")
    assert v.verdict == claims.HOLDS  # Const is higher, but is not one of the rows it is ranked among
    assert [(c.column, c.other) for c in v.comparisons] == [("PGD-20", "Curious-(1.25,60)"),
                                                             ("AutoAttack", "Curious-(1.25,60)")]


# ---- trend -------------------------------------------------------------------------------------
BETAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def trend_case(means, spread=0.2):
    return {b: [m - spread / 2, m + spread / 2] for b, m in zip(BETAS, means)}


def test_a_trend_holds_when_the_means_rise_and_the_ends_differ_significantly():
    means = [80.0, 81.0, 83.0, 82.5, 84.0, 85.0]  # one adjacent pair swapped
    cells = trend_case(means)
    v = verdict(built("beta-sensitivity", beta_rows("clean", cells)), "fig4-clean")
    rho = stats.spearmanr(BETAS, means).statistic
    assert 0.8 <= rho < 1 and v.verdict == claims.HOLDS
    c = v.comparisons[0]
    assert (c.row, c.other, c.claimed) == ("beta=1", "beta=0", "above")
    assert c.p == pytest.approx(welch(cells[1.0], cells[0.0]))
    assert f"Spearman's rank correlation {rho:+.2f} (needs +0.8 or beyond)" in c.why
    assert "means beta 0: 80.00, beta 0.2: 81.00, beta 0.4: 83.00" in c.why
    assert "Spearman's rank correlation of the means with the parameter at least 0.8" in v.text


def test_a_trend_fails_when_the_order_or_the_ends_do_not_show_it():
    falling = trend_case([85.0, 84.0, 83.0, 82.0, 81.0, 80.0])
    v = verdict(built("beta-sensitivity", beta_rows("clean", falling)), "fig4-clean")
    assert v.verdict == claims.FAILS and v.comparisons[0].status == claims.AGAINST
    scattered = [80.0, 86.0, 79.0, 85.0, 78.0, 84.0]  # the ends rise, the rest does not
    rho = stats.spearmanr(BETAS, scattered).statistic
    v = verdict(built("beta-sensitivity", beta_rows("clean", trend_case(scattered))), "fig4-clean")
    assert rho < 0.8 and welch(*[trend_case(scattered)[b] for b in (1.0, 0.0)]) < 0.05
    assert v.verdict == claims.FAILS and v.comparisons[0].status == claims.AGAINST
    assert f"Spearman's rank correlation {rho:+.2f}" in v.comparisons[0].why
    noisy = trend_case([80.0, 81.0, 82.0, 83.0, 84.0, 85.0], spread=12.0)
    v = verdict(built("beta-sensitivity", beta_rows("clean", noisy)), "fig4-clean")
    assert v.verdict == claims.FAILS and v.comparisons[0].status == claims.NOT_SIGNIFICANT
    assert v.comparisons[0].p == pytest.approx(welch(noisy[1.0], noisy[0.0]))


def test_a_trend_needs_three_values_and_two_seeds_at_its_ends():
    v = verdict(built("beta-sensitivity", beta_rows("pgd20", {0.2: [60.0, 60.1], 0.4: [61.0, 61.2]})), "fig4-pgd20")
    assert v.verdict == claims.UNMEASURABLE
    assert fields(v.comparisons[0]) == ("PGD-20", "largest value", "smallest value", "above", claims.MISSING,
                                        "PGD-20 at 2 values (beta 0.2: 60.05, beta 0.4: 61.10): a trend needs 3")
    ends = {0.2: [60.0], 0.4: [61.0, 61.2], 0.6: [62.0, 62.2]}
    v = verdict(built("beta-sensitivity", beta_rows("pgd20", ends)), "fig4-pgd20")
    assert v.verdict == claims.UNMEASURABLE and v.comparisons[0].why == (
        "means beta 0.2: 60.00, beta 0.4: 61.10, beta 0.6: 62.10; Spearman's rank correlation +1.00 (needs +0.8 or "
        "beyond); PGD-20 of beta=0.2 on 1 seed: Welch's test needs 2 a side")
    assert fields(v.comparisons[0])[:5] == ("PGD-20", "beta=0.6", "beta=0.2", "above", claims.MISSING)


def rho_records(values, **kw):
    """values: (beta, schedule) -> rho0 -> column -> per-seed values."""
    return [run("rho-sensitivity", seed, {col: v[seed] for col, v in cols.items()}, beta=beta, schedule=schedule,
                t=49 if schedule == "curious" else None, gamma=1.25 if schedule == "curious" else None, rho0=rho0, **kw)
            for (beta, schedule), rows in values.items() for rho0, cols in rows.items() for seed in range(2)]


def test_falling_trends_are_checked_in_the_groups_the_claim_names():
    rows = {rho: {"clean": [90 - 20 * rho, 90.1 - 20 * rho], "pgd20": [70 - 30 * rho, 70.2 - 30 * rho],
                  "autoattack": [50 + 40 * rho, 50.1 + 40 * rho]} for rho in (0.025, 0.05, 0.075, 0.1)}
    res = build_table(runs_frame(rho_records({(1.0, "const"): rows, (0.4, "const"): rows})), "rho-sensitivity",
                      allow_subset=True)
    one, point4 = f"{GROUP} beta=1, Const", f"{GROUP} beta=0.4, Const"
    assert sorted(res.groups) == sorted([one, point4])
    v = verdict(res, "fig5-clean-pgd20", one)
    assert v.verdict == claims.HOLDS and [c.claimed for c in v.comparisons] == ["below", "below"]
    assert [(c.row, c.other) for c in v.comparisons] == [("rho0=0.1", "rho0=0.025")] * 2
    assert verdict(res, "fig5-autoattack", one).verdict == claims.HOLDS
    assert not [x for x in claims.evaluate(res) if x.claim.key.startswith("fig5-clean") and x.group == point4]
    best = verdict(res, "fig5-beta04", point4)  # rho0 0.05 is not the best at beta 0.4 here
    assert best.verdict == claims.FAILS and best.comparisons[0].other == "rho0=0.025"


def test_a_claim_about_groups_the_table_lacks_is_not_measurable():
    rows = {rho: {"autoattack": [50 + rho, 50.1 + rho]} for rho in (0.05, 0.1)}
    res = build_table(runs_frame(rho_records({(0.4, "const"): rows})), "rho-sensitivity", allow_subset=True)
    v = [x for x in claims.evaluate(res) if x.claim.key == "fig5-autoattack"]
    assert len(v) == 1 and v[0].group is None and v[0].verdict == claims.UNMEASURABLE
    assert v[0].text == f"No column group of the table matches ' beta=1,' (groups: {GROUP} beta=0.4, Const)."
    assert claims.verdict_label(v[0]) == "not measurable"


# ---- across ------------------------------------------------------------------------------------
def test_curious_over_const_is_checked_cell_by_cell_against_the_counterpart_group():
    lo = {0.05: {"clean": [80.0, 80.2], "pgd20": [60.0, 60.2], "autoattack": [50.0, 50.3]},
          0.1: {"clean": [79.0, 79.2], "pgd20": [61.0, 61.2], "autoattack": [51.0, 51.3]}}
    hi = {r: {c: [x + 2 for x in v] for c, v in cols.items()} for r, cols in lo.items()}
    res = build_table(runs_frame(rho_records({(1.0, "curious"): hi, (1.0, "const"): lo, (0.4, "curious"): hi})),
                      "rho-sensitivity", allow_subset=True)
    v = verdict(res, "fig5-curious", f"{GROUP} beta=1, Curious")
    assert v.verdict == claims.HOLDS and len(v.comparisons) == 6
    c = v.comparisons[0]
    assert (c.column, c.row, c.other) == ("Clean", "Curious rho0=0.05", "Const rho0=0.05")
    assert c.p == pytest.approx(welch(hi[0.05]["clean"], lo[0.05]["clean"]))
    lone = verdict(res, "fig5-curious", f"{GROUP} beta=0.4, Curious")
    assert lone.verdict == claims.UNMEASURABLE
    assert lone.comparisons[0].why == f"no column group '{GROUP} beta=0.4, Const'"
    one_sided = build_table(runs_frame(rho_records({(1.0, "curious"): hi, (1.0, "const"): {0.05: lo[0.05]}})),
                            "rho-sensitivity", allow_subset=True)
    v = verdict(one_sided, "fig5-curious", f"{GROUP} beta=1, Curious")  # Const never ran rho0 0.1
    assert v.verdict == claims.UNMEASURABLE and len(v.comparisons) == 6
    assert fields(v.comparisons[1]) == ("Clean", "Curious rho0=0.1", "Const rho0=0.1", "above", claims.MISSING,
                                        "no Clean result for Const rho0=0.1")
    worse = build_table(runs_frame(rho_records({(1.0, "curious"): lo, (1.0, "const"): hi})), "rho-sensitivity",
                        allow_subset=True)
    assert verdict(worse, "fig5-curious", f"{GROUP} beta=1, Curious").verdict == claims.FAILS


# ---- overhead ----------------------------------------------------------------------------------
def test_the_training_time_overhead_holds_up_to_its_limit():
    rst = {"hours": [1.0, 1.1], "epochs": [70, 70]}
    ok = built("training-time", {"SSAT-MBI": {"hours": [1.07, 1.12], "epochs": [70, 70]}, "RST": rst})
    v = verdict(ok, "table5-overhead")
    ratio = statistics.mean([1.07, 1.12]) / statistics.mean(rst["hours"])
    p = welch([60 * h / 70 for h in (1.07, 1.12)], [1.1 * 60 * h / 70 for h in rst["hours"]])
    assert v.verdict == claims.HOLDS and ratio <= 1.1
    assert v.comparisons[0].why == f"ratio {ratio:.3f}; Welch's p of SSAT-MBI against 1.1 x RST: {p:.3g}"
    assert v.comparisons[0].claimed == "at most 1.1 x"
    slow = built("training-time", {"SSAT-MBI": {"hours": [1.3, 1.4], "epochs": [70, 70]}, "RST": rst})
    v = verdict(slow, "table5-overhead")
    assert v.verdict == claims.FAILS and v.comparisons[0].why.startswith(f"ratio {1.35 / 1.05:.3f}")
    single = {"hours": [1.0], "epochs": [70]}
    one = built("training-time", {"SSAT-MBI": single, "RST": single})
    assert verdict(one, "table5-overhead").comparisons[0].why == "ratio 1.000"  # one seed a side: no p, still a ratio
    awr = verdict(ok, "table5-awr-overhead")
    assert awr.verdict == claims.UNMEASURABLE
    assert fields(awr.comparisons[0]) == ("Time/epoch (min)", "SSAT-MBI-AWR", "SRST-AWR", "at most 1.1 x",
                                          claims.MISSING, "no Time/epoch (min) result for SSAT-MBI-AWR and SRST-AWR")
    half = verdict(built("training-time", {"SSAT-MBI": {"hours": [1.0, 1.1], "epochs": [70, 70]}}), "table5-overhead")
    assert fields(half.comparisons[0])[1:] == ("SSAT-MBI", "RST", "at most 1.1 x", claims.MISSING,
                                               "no Time/epoch (min) result for RST")
    assert half.comparisons[0].a.mean == pytest.approx(60 * 1.05 / 70) and half.comparisons[0].b is None
    other = verdict(built("training-time", {"RST": {"hours": [1.0, 1.1], "epochs": [70, 70]}}), "table5-overhead")
    assert other.comparisons[0].a is None and other.comparisons[0].b.mean == pytest.approx(60 * 1.05 / 70)
    assert other.comparisons[0].why == "no Time/epoch (min) result for SSAT-MBI"
    assert claims.comparison_text(half.comparisons[0]) == (
        "Time/epoch (min), SSAT-MBI at most 1.1 x RST: 0.900 (0.061, 2 seeds) vs none: not measurable (no "
        "Time/epoch (min) result for RST)")


# ---- verdicts as a whole -------------------------------------------------------------------------
def test_combine_fails_first_then_is_not_measurable_then_holds():
    def c(status):
        return claims.Comparison("x", "a", "b", "above", None, None, status=status)
    assert claims.combine([c(claims.AS_CLAIMED), c(claims.MISSING), c(claims.NOT_SIGNIFICANT)]) == claims.FAILS
    assert claims.combine([c(claims.AS_CLAIMED), c(claims.AGAINST)]) == claims.FAILS
    assert claims.combine([c(claims.AS_CLAIMED), c(claims.MISSING)]) == claims.UNMEASURABLE
    assert claims.combine([]) == claims.UNMEASURABLE
    assert claims.combine([c(claims.AS_CLAIMED)] * 2) == claims.HOLDS


def test_a_table_not_built_leaves_each_of_its_claims_not_measurable():
    found = claims.unmeasured("main", "Not run: no experiment 'x'")
    assert [v.claim.key for v in found] == [c.key for c in claims.CLAIMS if c.table == "main"] and len(found) == 6
    assert {(v.verdict, v.text, v.group) for v in found} == {(claims.UNMEASURABLE, "Not run: no experiment 'x'", None)}


def test_verdicts_as_markdown_and_json_records():
    v = verdict(built("main", {"SSAT-MBI": MBI, "RST": RST}), "table1-pgd-rst")
    md = claims.to_markdown([v]).splitlines()
    assert md[0] == "| paper | claim | group | verdict | evidence |" and len(md) == 3
    assert md[1] == "|:-|:-|:-|:-|:-|"
    assert md[2].startswith("| Table 1 | SSAT-MBI is more robust than RST under PGD-10, PGD-20 and PGD-40 | "
                            "MNIST-5k (cnn-small) | **holds** | Check: ")
    rec = json.loads(json.dumps(claims.to_records([v])))[0]
    assert {k: rec[k] for k in ("claim", "about", "table", "check", "group", "verdict")} == {
        "claim": "table1-pgd-rst", "about": "Table 1", "table": "main", "check": "compare", "group": GROUP,
        "verdict": "holds"}
    first = rec["comparisons"][0]
    assert first["a"] == {"row": "SSAT-MBI", "mean": pytest.approx(71.2), "n": 2, "values": [71.0, 71.4],
                          "std": pytest.approx(statistics.stdev([71.0, 71.4])), "subset": False}
    assert first["p"] == pytest.approx(welch(MBI["pgd10"], RST["pgd10"])) and first["status"] == "as claimed"
    lone = claims.to_records(claims.unmeasured("main", "x"))[0]
    assert lone["comparisons"] == [] and lone["group"] is None
    one = verdict(built("main", {"SSAT-MBI": {"pgd10": [71.0]}, "RST": RST}), "table1-pgd-rst")
    assert claims.to_records([one])[0]["comparisons"][0]["a"]["std"] is None


# ---- the claims as data --------------------------------------------------------------------------
def test_every_claim_names_a_table_its_check_and_rows_and_columns_the_table_has():
    assert len({c.key for c in claims.CLAIMS}) == len(claims.CLAIMS)
    for c in claims.CLAIMS:
        spec = SPECS[c.table]
        assert c.check in claims.CHECKS and c.about == spec.paper, c.key
        keys = {col.key for col in spec.columns}
        rows = {r for block in spec.blocks for r in block}
        if c.check == "compare":
            for row, other, col, claimed in c.args:
                assert {row, other} <= rows and col in keys and claimed in ("above", "below"), c.key
        elif c.check == "trend":
            assert all(col in keys and d in ("up", "down") for col, d in c.args), c.key
        elif c.check == "best":
            assert set(c.args[1]) <= keys and set(c.args[2]) <= rows, c.key
        elif c.check == "overhead":
            assert {c.args[0], c.args[1]} <= rows and c.args[2] in keys, c.key
    covered = {c.table for c in claims.CLAIMS}
    assert covered == set(SPECS) - {"search"}


def paper_table(table):
    """The paper's cells of `table` as runs: three seeds at mean - std, mean, mean + std (mean and sample std
    exactly the paper's; no std: three equal values)."""
    df = paper_results()
    recs = []
    for (group, row), cells in df[df["table"] == table].groupby(["group", "row"], sort=False):
        if row in SPECS[table].unranked or row in ("TRADES+FAT", "TRADES+DAAT"):  # methods we do not train
            continue
        values = {}
        for line in cells.itertuples():
            s = 0.0 if math.isnan(line.std) else line.std
            key = {"hours": "hours", "epochs": "epochs"}.get(line.column, line.column)
            values[key] = [line.mean - s, line.mean, line.mean + s]
        values.pop("min_per_epoch", None)
        recs += records(table, {row: values}, group=group, expected=3, aa_subset="full")
    return build_table(runs_frame(recs), table)


def test_on_the_papers_own_numbers_the_claims_agree_in_direction_but_where_its_numbers_contradict_its_words():
    against = set()
    for table in ("main", "ablation", "schedules", "awr-ablation", "supervised", "training-time"):
        for v in claims.evaluate(paper_table(table)):
            assert v.verdict != claims.UNMEASURABLE, (v.claim.key, v.group, v.text)
            against |= {(v.claim.key, v.group, c.column, c.row) for c in v.comparisons if c.status == claims.AGAINST}
    # Table 1: on CIFAR-100 UAT++'s PGD-10 (35.83) is above SSAT-MBI's (35.68), which the text calls more robust
    # under PGD; Table 3: Curious-(1.25,50)'s AutoAttack (50.49) is below Const's (50.90), which the text says the
    # Curious-(1.25,t) schedules improve on
    assert against == {("table1-pgd-uat", "cifar100/wrn-28-8", "PGD-10", "SSAT-MBI"),
                       ("table3-curious", "cifar10/wrn-28-5", "AutoAttack", "Curious-(1.25,50)")}


def test_a_column_the_table_lacks_is_named_by_every_check_and_the_other_columns_are_still_compared():
    def missing(label, row, other, claimed):
        return (label, row, other, claimed, claims.MISSING, f"no {label} column: no run reports it")
    v = verdict(without(built("main", {"SSAT-MBI": MBI, "RST": RST}), "pgd10"), "table1-pgd-rst")
    assert fields(v.comparisons[0]) == missing("PGD-10", "SSAT-MBI", "RST", "above")
    assert [c.status for c in v.comparisons[1:]] == [claims.AS_CLAIMED] * 2 and v.verdict == claims.UNMEASURABLE
    assert claims.comparison_text(v.comparisons[0]) == (
        "PGD-10, SSAT-MBI above RST: not measurable (no PGD-10 column: no run reports it)")
    times = {"SSAT-MBI": {"hours": [1.0, 1.1], "epochs": [70, 70]}, "RST": {"hours": [1.0, 1.1], "epochs": [70, 70]}}
    v = verdict(without(built("training-time", times), "min_per_epoch"), "table5-overhead")
    assert fields(v.comparisons[0]) == missing("Time/epoch (min)", "SSAT-MBI", "RST", "at most 1.1 x")
    rows = {rho: {"clean": [90 - 20 * rho, 90.1 - 20 * rho], "pgd20": [70 - 30 * rho, 70.2 - 30 * rho],
                  "autoattack": [50 + 40 * rho, 50.1 + 40 * rho]} for rho in (0.025, 0.05, 0.075)}
    res = build_table(runs_frame(rho_records({(1.0, "const"): rows, (1.0, "curious"): rows, (0.4, "const"): rows})),
                      "rho-sensitivity", allow_subset=True)
    trend = verdict(without(res, "clean"), "fig5-clean-pgd20", f"{GROUP} beta=1, Const")
    assert fields(trend.comparisons[0]) == missing("Clean", "largest value", "smallest value", "below")
    assert trend.comparisons[1].status == claims.AS_CLAIMED
    best = verdict(without(res, "pgd20"), "fig5-beta04", f"{GROUP} beta=0.4, Const")
    assert fields(best.comparisons[0]) == missing("PGD-20", "rho0=0.05", "the runner-up", "above")
    assert best.comparisons[1].status == claims.AGAINST  # rho0 0.075 has the highest AutoAttack here
    across = verdict(without(res, "clean"), "fig5-curious", f"{GROUP} beta=1, Curious")
    assert fields(across.comparisons[0]) == missing("Clean", f"{GROUP} beta=1, Curious", f"{GROUP} beta=1, Const",
                                                    "above")
    assert len(across.comparisons) == 7 and across.comparisons[1].status == claims.AGAINST  # the same numbers


def test_no_counterpart_group_leaves_every_column_not_measurable_by_its_label():
    rows = {rho: {"clean": [80.0, 80.2], "pgd20": [60.0, 60.1]} for rho in (0.05, 0.1)}
    res = build_table(runs_frame(rho_records({(1.0, "curious"): rows})), "rho-sensitivity", allow_subset=True)
    v = verdict(res, "fig5-curious", f"{GROUP} beta=1, Curious")
    why = f"no column group '{GROUP} beta=1, Const'"
    assert [fields(c) for c in v.comparisons] == [
        (label, f"{GROUP} beta=1, Curious", f"{GROUP} beta=1, Const", "above", claims.MISSING, why)
        for label in ("Clean", "PGD-20", "AutoAttack")]


def test_a_tie_is_against_the_claim_and_a_small_lead_can_hold():
    tie = built("main", {"SSAT-MBI": {"pgd10": [70.0, 70.4]}, "RST": {"pgd10": [70.4, 70.0]}})
    c = verdict(tie, "table1-pgd-rst").comparisons[0]
    assert (c.status, c.a.mean, c.b.mean) == (claims.AGAINST, 70.2, 70.2)
    small = built("main", {"SSAT-MBI": {"pgd10": [70.0, 70.1]}, "RST": {"pgd10": [69.5, 69.6]}})
    c = verdict(small, "table1-pgd-rst").comparisons[0]
    assert c.status == claims.AS_CLAIMED and c.p == pytest.approx(welch([70.0, 70.1], [69.5, 69.6]))
    below = built("ablation", {"none|int": {"autoattack": [60.0, 60.1]}, "Lin.|int": {"autoattack": [59.5, 59.6]}})
    assert verdict(below, "table2-linear-autoattack").comparisons[0].status == claims.AS_CLAIMED


def test_p_at_alpha_is_not_significant():
    res = built("main", {"SSAT-MBI": MBI, "RST": RST})
    p = welch(MBI["pgd10"], RST["pgd10"])
    found = [v for v in claims.evaluate(res, alpha=p) if v.claim.key == "table1-pgd-rst"][0]
    assert found.comparisons[0].status == claims.NOT_SIGNIFICANT and found.verdict == claims.FAILS
    assert "Welch's t-test p < " + f"{p:g}" in found.text


def test_spearman_of_constant_means_is_zero():
    assert claims.spearman([1, 2, 3], [5, 5, 5]) == 0.0
    assert claims.spearman([1, 2, 3], [3, 1, 2]) == pytest.approx(stats.spearmanr([1, 2, 3], [3, 1, 2]).statistic)


def test_a_weak_rise_with_distinct_ends_is_not_a_trend():
    means = [80.0, 84.0, 83.0, 79.0, 78.0, 85.0]
    rho = stats.spearmanr(BETAS, means).statistic
    v = verdict(built("beta-sensitivity", beta_rows("clean", trend_case(means))), "fig4-clean")
    assert 0 < rho < 0.8 and v.comparisons[0].p < 0.05
    assert v.verdict == claims.FAILS and v.comparisons[0].status == claims.AGAINST


def test_small_numbers_keep_three_significant_digits():
    s = claims.Stats("x", 0.0905, 0.00123, 2, (0.0896, 0.0914))
    assert claims._stats_text(s) == "0.0905 (0.0012, 2 seeds)"
    assert claims._stats_text(claims.Stats("x", 0.0, 0.0, 1, (0.0,))) == "0.00 (1 seed)"
    assert claims._stats_text(claims.Stats("x", 5.0, 0.5, 2, (4.5, 5.5), True)) == "5.00 (0.50, 2 seeds)§"

"""analysis.convergence on hand-built histories: the two criteria at and just past their thresholds (loss ratio
0.6, a 2-point move), the verdict per row (every seed must converge; 'not training' when the loss did not fall), the
Markdown report (a run without numbers shows '-')."""
import pandas as pd
import pytest

from analysis import convergence as cv
from analysis.collect import history_frame


def hist(run_id, loss, clean, pgd):
    rows = []
    for key, values in (("train/loss", loss), ("val/clean", clean), ("val/pgd10", pgd)):
        rows += [{"run_id": run_id, "key": key, "step": i + 1, "value": v} for i, v in enumerate(values)]
    return history_frame(rows)


def test_a_run_that_meets_both_criteria_converges():
    # 1.2 / 2.0 = 0.6 exactly (<= 60%); the last moves are 2.0 and 1.5 points (<= 2)
    r = cv.run_convergence(hist("a", [2.0, 1.5, 1.2], [80.0, 88.0, 90.0], [40.0, 50.0, 51.5]))
    assert r["converged"] is True and r["why"] == ""
    assert r["epochs"] == 3
    assert r["loss_first"] == 2.0 and r["loss_final"] == 1.2 and r["loss_ratio"] == pytest.approx(0.6)
    assert r["clean_final"] == 90.0 and r["clean_move"] == 2.0
    assert r["pgd10_final"] == 51.5 and r["pgd10_move"] == 1.5


def test_each_criterion_fails_on_its_own_and_says_why():
    loss = cv.run_convergence(hist("a", [2.0, 1.21], [90.0, 90.0], [50.0, 50.0]))
    assert loss["converged"] is False
    assert loss["why"] == "final training loss 60.5% of epoch 1's (> 60%)"
    assert loss["loss_ratio"] == pytest.approx(0.605)
    clean = cv.run_convergence(hist("a", [2.0, 1.0], [90.0, 87.9], [50.0, 50.0]))
    assert clean["why"] == "validation clean moved 2.1 points in the last epoch (> 2)"
    # a drop counts as a move as much as a rise
    pgd = cv.run_convergence(hist("a", [2.0, 1.0], [90.0, 90.0], [50.0, 52.5]))
    assert pgd["why"] == "validation PGD-10 moved 2.5 points in the last epoch (> 2)"
    every = cv.run_convergence(hist("a", [2.0, 2.0], [10.0, 20.0], [0.0, 9.0]))
    assert every["why"].count(";") == 2


def test_moves_are_taken_over_the_last_two_epochs_only():
    # a big move earlier does not count; epoch 1 is the first step even when the steps are out of order
    h = hist("a", [3.0, 1.0, 1.0, 0.9], [10.0, 90.0, 91.0, 91.5], [0.0, 40.0, 50.0, 50.0])
    r = cv.run_convergence(h.sample(frac=1.0, random_state=0))
    assert r["converged"] is True and r["loss_first"] == 3.0 and r["loss_final"] == 0.9
    assert r["clean_move"] == pytest.approx(0.5) and r["pgd10_move"] == 0.0


def test_a_run_with_one_epoch_cannot_be_judged():
    r = cv.run_convergence(hist("a", [2.0], [50.0], [10.0]))
    assert r["converged"] is False
    assert r["why"] == "fewer than 2 epochs of train/loss, val/clean, val/pgd10"


def runs_frame(rows):
    return pd.DataFrame([{"run_id": rid, "meta.kind": "trial", "meta.stage": "demo", "meta.row": row,
                          "param.seed": seed} for rid, row, seed in rows])


def test_a_row_converges_only_when_every_seed_does():
    runs = runs_frame([("a0", "good", 0), ("a1", "good", 1), ("b0", "half", 0), ("b1", "half", 1),
                       ("c0", "flat", 0), ("c1", "flat", 1)])
    h = pd.concat([hist("a0", [2, 1], [90, 90], [50, 50]), hist("a1", [2, 1], [91, 91], [52, 51]),
                   hist("b0", [2, 1], [90, 90], [50, 50]), hist("b1", [2, 1.9], [85, 86], [40, 41]),
                   hist("c0", [2.30, 2.30], [11, 9.6], [9, 9.6]), hist("c1", [2.31, 2.30], [10, 11], [10, 11])])
    frame = cv.convergence_frame(runs, h)
    assert list(frame["row"]) == ["good", "good", "half", "half", "flat", "flat"]
    assert list(frame["seed"]) == [0, 1, 0, 1, 0, 1]
    assert list(frame.columns) == list(cv.COLUMNS) and list(frame.index) == list(range(6))  # no old index kept
    v = cv.verdicts(frame).set_index("row")
    assert v.loc["good", "verdict"] == "converged" and v.loc["good", "why"] == ""
    # seed 1's ratio 0.95 alone would be 'not training'; the row's mean (0.5 + 0.95) / 2 is not
    assert v.loc["half", "verdict"] == "not converged"
    assert v.loc["half", "why"] == "seed 1: final training loss 95.0% of epoch 1's (> 60%)"
    assert v.loc["flat", "verdict"] == "not training" and v.loc["flat", "seeds"] == 2


def test_not_training_is_a_loss_that_did_not_fall():
    runs = runs_frame([("a0", "r", 0)])
    at = cv.convergence_frame(runs, hist("a0", [2.0, 1.9], [50.0, 50.0], [10.0, 10.0]))   # exactly 95%
    assert cv.verdicts(at).loc[0, "verdict"] == "not training"
    below = cv.convergence_frame(runs, hist("a0", [2.0, 1.89], [50.0, 50.0], [10.0, 10.0]))
    assert cv.verdicts(below).loc[0, "verdict"] == "not converged"


def test_the_markdown_report_has_a_verdict_and_numbers_per_run():
    runs = runs_frame([("a0", "none|off", 0), ("a1", "none|off", 1)])
    h = pd.concat([hist("a0", [2.0, 1.0], [90, 90.5], [50, 50]), hist("a1", [2.0, 1.1], [90, 89], [48, 49])])
    text = cv.to_markdown(cv.convergence_frame(runs, h))
    assert "| none\\|off | converged | 2 | - |" in text
    assert "| none\\|off | 1 | 2 | 2.000 | 1.100 | 0.550 | 89.0 | 1.0 | 49.0 | 1.0 |" in text
    assert "'not training': the final loss is >= 95% of epoch 1's" in text
    short = cv.to_markdown(cv.convergence_frame(runs_frame([("n0", "nan-row", 0)]), hist("n0", [2.0], [50], [9])))
    assert "| nan-row | 0 | 1 | - | - | - | - | - | - | - |" in short


# ---- issue 42: a row is named by the configuration's short label ---------------------------------------------------
def test_rows_are_the_short_labels_of_today_and_of_older_runs():
    """Today's runs carry ssat.label (the grid row, or the sampled values without the seed): a search trial's row is
    it, even beside tracked params that do not apply to it (attack.gamma of a Linear trial). A run from before the
    label tag: its row; a search run from before it: its sampled.<key> values and the config hash's first 4."""
    from analysis.collect import runs_frame as typed_frame

    base = {"meta.kind": "trial", "param.attack.gamma": "1.25", "param.method.K": "10"}
    runs = typed_frame([
        {**base, "run_id": "new0", "meta.stage": "search", "meta.label": "linear t=3 beta=0.94 #4e14",
         "param.attack.schedule": "linear", "param.attack.t": "3", "param.method.beta": "0.94", "param.seed": "0"},
        {**base, "run_id": "grid0", "meta.stage": "grid", "meta.label": "linear|on", "meta.row": "linear|on",
         "param.attack.schedule": "linear", "param.seed": "0"},
        {**base, "run_id": "old0", "meta.stage": "grid", "meta.row": "curious|on", "param.attack.schedule": "curious",
         "param.seed": "1"},
        {**base, "run_id": "olds0", "meta.stage": "search", "meta.config_hash": "9a8b7c6d5e4f",
         "param.sampled.attack.schedule": "linear", "param.sampled.attack.t": "4",
         "param.sampled.method.beta": "0.4567", "param.sampled.method.rho_double_epoch": "None",
         "param.attack.schedule": "linear", "param.seed": "0"},
    ])
    h = pd.concat([hist(r, [2, 1], [90, 90], [50, 50]) for r in runs["run_id"]])
    assert list(cv.convergence_frame(runs, h)["row"]) == [
        "linear t=3 beta=0.94 #4e14", "linear|on", "curious|on", "linear t=4 beta=0.46 #9a8b"]


def test_without_a_label_row_or_sampled_values_the_varying_params_name_a_run():
    from analysis.collect import runs_frame as typed_frame

    runs = typed_frame([{"run_id": f"r{i}", "meta.kind": "trial", "meta.config_hash": f"{i}abcdef", "param.seed": "0",
                         "param.method.beta": beta, "param.method.K": "10"} for i, beta in enumerate(["0.4", "1.0"])]
                       + [{"run_id": "lone", "meta.kind": "trial", "meta.config_hash": "fedcba98", "meta.stage": "x"}])
    assert list(cv.config_labels(runs.iloc[:2])) == ["method.beta=0.4", "method.beta=1.0"]
    assert cv.short_label(runs.iloc[2].to_dict()) == "fedcba98"  # nothing varies: the config hash
    assert cv.short_label({"run_id": "r9"}) == "r9"

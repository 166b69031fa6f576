"""sweeps/trials/ranking.py: which settings won, as the console says it at the end of a search and of its confirm stage:
the ranking by the spec's metric (the Pareto front for two), each confirmed configuration's mean and sample std
over its seeds, the winner and the test that says how sure."""
from __future__ import annotations

import math

import pytest

from sweeps.trials.outcomes import StageOutcome, TrialOutcome
from sweeps.trials.ranking import confirm_summary, mean_std, ranked, search_ranking, welch_p
from sweeps.spec import parse_spec

BASE = {"name": "unit", "preset": "mnist5k-ssat-mbi", "search": {"num_samples": 4, "space": {
    "method.beta": {"float": [0.0, 1.0]}}, "confirm": {"top_k": 2, "seeds": [10, 11]}}}


def trial(name, state="finished", rank=None, label=None, **metrics) -> TrialOutcome:
    return TrialOutcome(f"k-{name}", state, 4, 4, {"method.beta": metrics.pop("beta", 0.5)},
                        {k.replace("__", "/"): v for k, v in metrics.items()}, name=name, label=label or name,
                        rank=rank)


def spec(metric="val/pgd10", mode="max"):
    return parse_spec({**BASE, "metric": metric, "mode": mode})


def test_mean_and_sample_std():
    assert mean_std([1.0, 3.0]) == (2.0, math.sqrt(2.0))
    m, s = mean_std([4.0])
    assert m == 4.0 and math.isnan(s)


def test_the_search_ranking_lists_the_best_first_marks_the_confirmed_and_leaves_early_stops_out():
    out = StageOutcome("search", 4, [trial("a", beta=0.1, val__pgd10=50.0), trial("b", beta=0.2, val__pgd10=70.0),
                                     trial("c", "stopped_early", beta=0.3, val__pgd10=90.0),
                                     trial("d", beta=0.4, val__pgd10=60.0)])
    lines = search_ranking(out, spec(), confirmed=[{"method.beta": 0.2}, {"method.beta": 0.4}], top=2)
    assert lines[0] == ("[search] the top 2 of 4 trials by val/pgd10 (max, at their last epoch); 1 stopped early by "
                        "the scheduler are not ranked:")
    assert [ln.split() for ln in lines[1:]] == [["rank", "val/pgd10", "trial"], ["1", "70.00", "b", "->", "confirmed"],
                                               ["2", "60.00", "d", "->", "confirmed"]]


def test_a_minimised_metric_ranks_the_lowest_first():
    trials = [trial("a", train__loss=0.3), trial("b", train__loss=0.1), trial("c")]
    assert [t.name for t in ranked(trials, "train/loss", "min")] == ["b", "a"]  # c has no value: not ranked


def test_two_metrics_rank_the_pareto_front():
    s = parse_spec({**BASE, "metric": ["val/clean", "val/pgd10"], "mode": ["max", "max"]})
    out = StageOutcome("search", 3, [trial("a", val__clean=90.0, val__pgd10=40.0),
                                     trial("b", val__clean=80.0, val__pgd10=50.0),
                                     trial("c", val__clean=70.0, val__pgd10=45.0)])  # c is dominated by b
    lines = search_ranking(out, s)
    assert lines[0].startswith("[search] the Pareto front of val/clean (max) and val/pgd10 (max): 2 of 3 trials")
    assert [ln.split()[-1] for ln in lines[2:]] == ["a", "b"]


def test_the_confirm_summary_gives_each_configurations_mean_and_std_and_names_the_winner():
    out = StageOutcome("confirm", 4, [
        trial("top1 x s10", rank=1, label="x", val__pgd10=60.0, test__best__clean=80.0, test__best__pgd20=50.0),
        trial("top1 x s11", rank=1, label="x", val__pgd10=62.0, test__best__clean=82.0, test__best__pgd20=52.0),
        trial("top2 y s10", rank=2, label="y", val__pgd10=70.0, test__best__clean=85.0, test__best__pgd20=55.0),
        trial("top2 y s11", rank=2, label="y", val__pgd10=72.0, test__best__clean=87.0, test__best__pgd20=57.0)])
    lines = confirm_summary(out, spec())
    assert lines[0] == ("[confirm] 2 configuration(s), each over seeds 10, 11 (mean ± sample std); test: the best "
                        "checkpoint")
    assert [" ".join(ln.split()) for ln in lines[1:4]] == [
        "val/pgd10 test clean test pgd20 configuration",
        "71.00 ± 1.41 86.00 ± 1.41 56.00 ± 1.41 top2 y",  # the confirm stage reverses the search's order here
        "61.00 ± 1.41 81.00 ± 1.41 51.00 ± 1.41 top1 x"]
    p = welch_p([70.0, 72.0], [60.0, 62.0])
    assert lines[4] == (f"[winner] top2 y: val/pgd10 71.00 ± 1.41 over 2 seed(s), ahead of top1 by 10.00 points "
                        f"(Welch's t-test p = {p:.2g}: {'' if p < 0.05 else 'not '}significant at 0.05)")


def test_a_configuration_short_of_seeds_says_so_and_one_seed_has_no_test():
    out = StageOutcome("confirm", 4, [trial("top1 x s10", rank=1, label="x", val__pgd10=60.0),
                                      trial("top1 x s11", "interrupted", rank=1, label="x"),
                                      trial("top2 y s10", rank=2, label="y", val__pgd10=50.0),
                                      trial("top2 y s11", rank=2, label="y", val__pgd10=52.0)])
    lines = confirm_summary(out, spec())
    assert lines[2].rstrip().endswith("top1 x  (1 of 2 seeds finished)") and lines[2].split()[0] == "60.00"
    assert lines[3].rstrip().endswith("top2 y") and "51.00 ± 1.41" in lines[3]
    assert lines[-1].endswith("(Welch's t-test undefined: fewer than 2 seeds on a side)")


def test_no_finished_confirm_trial_has_no_winner():
    out = StageOutcome("confirm", 2, [trial("top1 x s10", "interrupted", rank=1, label="x")])
    assert confirm_summary(out, spec())[-1] == "[winner] none: no confirm trial finished"


@pytest.mark.parametrize("a,b,want", [([1.0], [2.0, 3.0], None), ([1.0, 1.0], [1.0, 1.0], None)])
def test_welch_is_undefined_without_two_seeds_or_spread(a, b, want):
    assert welch_p(a, b) is want


def test_values_print_with_two_decimals_and_a_missing_one_as_a_dash():
    from sweeps.trials.ranking import _ms, fmt
    assert (fmt(None), fmt(math.nan), fmt(71.234)) == ("-", "-", "71.23")
    assert (_ms([]), _ms([70.0]), _ms([70.0, 72.0])) == ("-", "70.00", "71.00 ± 1.41")


def test_the_sample_std_divides_by_n_minus_one():
    m, s = mean_std([1.0, 2.0, 6.0])  # squares 4 + 1 + 9 = 14 over n - 1 = 2
    assert m == 3.0 and s == pytest.approx(math.sqrt(7.0))


def test_the_ranking_is_aligned_numbers_right_and_names_left():
    out = StageOutcome("search", 2, [trial("long name a", beta=0.1, val__pgd10=5.0),
                                     trial("b", beta=0.2, val__pgd10=70.25)])
    lines = search_ranking(out, spec(), confirmed=[{"method.beta": 0.2}])
    assert lines == ["[search] the top 2 of 2 trials by val/pgd10 (max, at their last epoch):",
                     "  rank  val/pgd10  trial",
                     "     1      70.25  b  -> confirmed",
                     "     2       5.00  long name a"]


def test_no_finished_search_trial_has_nothing_to_rank():
    out = StageOutcome("search", 2, [trial("a", "stopped_early", val__pgd10=1.0), trial("b", "failed")])
    assert search_ranking(out, spec()) == [
        "[search] no trial ran its full epochs: nothing to rank; 1 stopped early by the scheduler are not ranked"]
    assert search_ranking(StageOutcome("search", 1, [trial("b", "failed")]), spec()) == [
        "[search] no trial ran its full epochs: nothing to rank"]


def test_a_minimised_metric_in_the_search_ranking_and_in_a_pareto_front():
    out = StageOutcome("search", 2, [trial("a", beta=0.1, train__loss=0.5), trial("b", beta=0.2, train__loss=0.25)])
    lines = search_ranking(out, spec("train/loss", "min"))
    assert lines[0] == "[search] the top 2 of 2 trials by train/loss (min, at their last epoch):"
    assert lines[2:] == ["     1        0.25  b", "     2        0.50  a"]
    s = parse_spec({**BASE, "metric": ["val/clean", "train/loss"], "mode": ["max", "min"]})
    out = StageOutcome("search", 3, [trial("a", val__clean=90.0, train__loss=0.4),
                                     trial("b", val__clean=80.0, train__loss=0.2),
                                     trial("c", val__clean=85.0, train__loss=0.5)])  # c: a is better on both
    lines = search_ranking(out, s, confirmed=[{"method.beta": 0.5}])
    assert lines == ["[search] the Pareto front of val/clean (max) and train/loss (min): 2 of 3 trials:",
                     "  val/clean  train/loss  trial",
                     "      90.00        0.40  a  -> confirmed",
                     "      80.00        0.20  b  -> confirmed"]


def test_the_confirm_table_is_aligned_and_the_winner_can_be_significant():
    out = StageOutcome("confirm", 4, [
        trial("top1 x s10", rank=1, label="x", val__pgd10=60.0, test__best__clean=80.0, test__best__pgd20=50.0),
        trial("top1 x s11", rank=1, label="x", val__pgd10=60.5, test__best__clean=80.0, test__best__pgd20=50.0),
        trial("top2 y s10", rank=2, label="y", val__pgd10=50.0),
        trial("top2 y s11", rank=2, label="y", val__pgd10=50.5)])
    lines = confirm_summary(out, spec())
    assert lines[1:4] == ["     val/pgd10    test clean    test pgd20  configuration",
                          "  60.25 ± 0.35  80.00 ± 0.00  50.00 ± 0.00  top1 x",
                          "  50.25 ± 0.35             -             -  top2 y"]
    p = welch_p([60.0, 60.5], [50.0, 50.5])
    assert p < 0.05 and lines[4] == (f"[winner] top1 x: val/pgd10 60.25 ± 0.35 over 2 seed(s), ahead of top2 by 10.00 "
                                     f"points (Welch's t-test p = {p:.2g}: significant at 0.05)")


def test_a_p_value_equal_to_alpha_is_not_significant(monkeypatch):
    import sweeps.trials.ranking as ranking
    monkeypatch.setattr(ranking, "welch_p", lambda a, b: 0.05)
    out = StageOutcome("confirm", 4, [trial("top1 x s10", rank=1, label="x", val__pgd10=60.0),
                                      trial("top2 y s10", rank=2, label="y", val__pgd10=50.0)])
    assert confirm_summary(out, spec())[-1].endswith("(Welch's t-test p = 0.05: not significant at 0.05)")


def test_seeds_that_agree_exactly_have_no_spread_to_test():
    out = StageOutcome("confirm", 4, [trial(f"top{r} {c} s{s}", rank=r, label=c, val__pgd10=60.0)
                                      for r, c in ((1, "x"), (2, "y")) for s in (10, 11)])
    assert confirm_summary(out, spec())[-1] == ("[winner] top1 x: val/pgd10 60.00 ± 0.00 over 2 seed(s), ahead of top2 "
                                               "by 0.00 points (Welch's t-test undefined: no spread over seeds)")


def test_three_configurations_test_the_winner_against_the_runner_up_only():
    out = StageOutcome("confirm", 6, [
        trial("top1 x s10", rank=1, label="x", val__pgd10=60.0),
        trial("top1 x s11", rank=1, label="x", val__pgd10=61.0),
        trial("top2 y s10", rank=2, label="y", val__pgd10=59.0),
        trial("top2 y s11", rank=2, label="y", val__pgd10=58.0),
        trial("top3 z s10", rank=3, label="z", val__pgd10=10.0)])
    p = welch_p([60.0, 61.0], [59.0, 58.0])
    assert confirm_summary(out, spec())[-1] == (f"[winner] top1 x: val/pgd10 60.50 ± 0.71 over 2 seed(s), "
                                               f"ahead of top2 by 2.00 points (Welch's t-test p = {p:.2g}: "
                                               f"not significant at 0.05)")


def test_a_lone_configuration_or_a_runner_up_without_values_is_not_compared():
    one = StageOutcome("confirm", 2, [trial("top1 x s10", rank=1, label="x", val__pgd10=60.0)])
    assert confirm_summary(one, spec())[-1] == "[winner] top1 x: val/pgd10 60.00 over 1 seed(s)"
    two = StageOutcome("confirm", 2, [trial("top1 x s10", rank=1, label="x", val__pgd10=60.0),
                                      trial("top2 y s10", "interrupted", rank=2, label="y")])
    assert confirm_summary(two, spec())[-1] == "[winner] top1 x: val/pgd10 60.00 over 1 seed(s)"


def test_a_minimised_confirm_metric_and_two_metrics_name_the_winner_by_the_first():
    out = StageOutcome("confirm", 2, [trial("top1 x s10", rank=1, label="x", train__loss=0.5),
                                      trial("top2 y s10", rank=2, label="y", train__loss=0.25)])
    assert confirm_summary(out, spec("train/loss", "min"))[-1].startswith("[winner] top2 y: train/loss 0.25")
    s = parse_spec({**BASE, "metric": ["val/clean", "val/pgd10"], "mode": ["max", "max"]})
    out = StageOutcome("confirm", 1, [trial("top1 x s10", rank=1, label="x", val__clean=90.0, val__pgd10=40.0)])
    assert confirm_summary(out, s)[-1] == ("[winner] top1 x: val/clean 90.00 over 1 seed(s) (ranked by the first of "
                                          "val/clean, val/pgd10; the others are in the table above)")


def test_a_trial_without_a_rank_is_its_own_configuration_listed_under_rank_0():
    from sweeps.trials.ranking import confirmed_configs
    out = StageOutcome("confirm", 3, [trial("x s10", label="x", val__pgd10=60.0),
                                      trial("top1 y s10", rank=1, label="y", val__pgd10=50.0),
                                      trial("top1 y s11", "interrupted", rank=1, label="y")])
    got = confirmed_configs(out, spec())
    assert [(r, label, [t.name for t in ts]) for r, label, ts in got] == [(0, "x", ["x s10"]), (1, "y", ["top1 y s10"])]


def test_welch_p_is_welchs_not_students():
    from scipy import stats
    a, b = [1.0, 2.0, 3.0, 4.0], [10.0, 20.0]
    va, vb = 5 / 3, 50.0  # sample variances
    se2 = va / 4 + vb / 2
    t = (2.5 - 15.0) / math.sqrt(se2)
    df = se2 ** 2 / ((va / 4) ** 2 / 3 + (vb / 2) ** 2 / 1)  # Welch-Satterthwaite
    assert welch_p(a, b) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9)
    assert welch_p(a, b) != pytest.approx(float(stats.ttest_ind(a, b).pvalue), rel=1e-3)  # Student's pooled test


def test_only_the_winner_and_runner_up_decide_why_the_test_is_undefined():
    """The first two agree exactly over two seeds each (no spread); a third with one seed does not change why."""
    out = StageOutcome("confirm", 5, [trial(f"top{r} {c} s{s}", rank=r, label=c, val__pgd10=60.0)
                                      for r, c in ((1, "x"), (2, "y")) for s in (10, 11)]
                       + [trial("top3 z s10", rank=3, label="z", val__pgd10=1.0)])
    assert confirm_summary(out, spec())[-1].endswith("(Welch's t-test undefined: no spread over seeds)")

"""What a stage's trials reached (sweeps/trials/outcomes.py): each trial judged by its config and last report, and
what a search passes on to its confirm stage: top-k by its metric, or with two metrics the Pareto front thinned by
NSGA-II's crowding distance (hand-computed below)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from ray.tune.utils.util import merge_dicts, unflatten_dict

from sweeps.spec import parse_spec
from sweeps.trials.outcomes import (TrialOutcome, crowding_distance, crowding_thin, pareto_front, stage_outcome,
                                    top_configs, trial_outcome)
from sweeps.trials.trial_settings import grid_space, search_space

INF = math.inf
SEARCH = {"name": "s", "preset": "mnist5k-ssat-mbi", "epochs": 4, "seeds": [3],
          "search": {"num_samples": 4, "space": {"method.beta": {"float": [0.0, 1.0]}},
                     "confirm": {"top_k": 2, "seeds": [10, 11]}}}


# ---- the Pareto front and crowding distance (every objective maximised) ---------------------------------------
def test_crowding_distance_by_hand():
    # objective 0 (range 8): the inner three get (2-0)/8, (5-1)/8, (8-2)/8;
    # objective 1 (range 8, ascending order 4, 3, 2, 1, 0): point 3 gets (4-0)/8, point 2 (5-1)/8, point 1 (8-4)/8
    points = [[0, 8], [1, 5], [2, 4], [5, 1], [8, 0]]
    assert crowding_distance(points) == [INF, 0.25 + 0.5, 0.5 + 0.5, 0.75 + 0.5, INF]
    shuffled = [2, 0, 4, 1, 3]  # the same points in another order: the same distance each
    assert crowding_distance([points[i] for i in shuffled]) == [[INF, 0.75, 1.0, 1.25, INF][i] for i in shuffled]
    # a constant objective adds nothing (no division by its zero range), first or second
    assert crowding_distance([[0, 1], [1, 1], [2, 1]]) == [INF, 1.0, INF]
    assert crowding_distance([[1, 0], [1, 1], [1, 2]]) == [INF, 1.0, INF]
    assert crowding_distance([[1, 2], [3, 4]]) == [INF, INF] and crowding_distance([]) == []


def test_the_pareto_front_keeps_equal_points_and_drops_dominated_ones():
    # (1, 1) twice: neither dominates the other; (0, 0) is dominated by both and by (2, 0)
    assert pareto_front([[1, 1], [1, 1], [2, 0], [0, 0]]) == [0, 1, 2]
    assert pareto_front([[0, 0], [0, 1]]) == [1]  # better in one, equal in the other: dominates


def test_thinning_drops_the_most_crowded_point_each_time():
    points = [[0, 8], [1, 5], [2, 4], [5, 1], [8, 0]]
    # first [inf, .75, 1, 1.25, inf]: point 1 goes; then (2,4): 5/8 + 7/8 = 1.5 and (5,1): 6/8 + 4/8 = 1.25
    assert crowding_thin(points, 3) == [0, 2, 4]
    assert crowding_thin(points, 5) == [0, 1, 2, 3, 4]


def outcome(name: str, sampled: dict, **metrics) -> TrialOutcome:
    return TrialOutcome(name, "finished", 4, 4, sampled, metrics, name=name)


def test_top_k_by_the_metric_from_complete_reports_once_per_configuration():
    spec = parse_spec({**SEARCH, "metric": "val/pgd10", "mode": "max"})
    # skipped wherever they come: no value (NaN, missing) and a configuration seen before
    trials = [outcome("d", {"x": 4}, **{"val/pgd10": math.nan}), outcome("b", {"x": 1}, **{"val/pgd10": 50.0}),
              outcome("c", {"x": 3}, **{"val/pgd10": 60.0}), outcome("f", {"x": 3}, **{"val/pgd10": 10.0}),
              outcome("e", {"x": 5}), outcome("a", {"x": 2}, **{"val/pgd10": 50.0})]
    assert top_configs(trials, spec) == [{"x": 3}, {"x": 2}]  # 60, then the tie at 50 by name
    low = parse_spec({**SEARCH, "metric": "train/loss", "mode": "min"})
    trials = [outcome("a", {"x": 1}, **{"train/loss": 0.5}), outcome("b", {"x": 2}, **{"train/loss": 0.2}),
              outcome("c", {"x": 3}, **{"train/loss": 0.9})]
    assert top_configs(trials, low) == [{"x": 2}, {"x": 1}]
    # the same configuration, its keys in another order, counts once (the first seen)
    same = [outcome("a", {"p": 1, "q": 2}, **{"train/loss": 0.1}),
            outcome("b", {"q": 2, "p": 1}, **{"train/loss": 0.0})]
    assert top_configs(same, low) == [{"p": 1, "q": 2}]


def test_two_metrics_confirm_the_thinned_pareto_front():
    spec = parse_spec({**SEARCH, "metric": ["val/pgd10", "train/loss"], "mode": ["max", "min"],
                       "search": {**SEARCH["search"], "confirm": {"top_k": 3, "seeds": [10]}}})
    # maximised, (pgd10, -loss) is t0 (0, -9), then t1..t5 the hand-computed points above shifted by -8 in the
    # second objective (crowding distance does not see a shift); t0 is dominated by t1, so the front's indices
    # (1..5) are not the thinned indices (0, 2, 4)
    losses = [9.0, 0.0, 3.0, 4.0, 7.0, 8.0]
    trials = [outcome(f"t{i}", {"i": i}, **{"val/pgd10": pgd, "train/loss": loss})
              for i, (pgd, loss) in enumerate(zip([0.0, 0.0, 1.0, 2.0, 5.0, 8.0], losses))]
    assert top_configs(trials, spec) == [{"i": 1}, {"i": 3}, {"i": 5}]


# ---- one trial judged -------------------------------------------------------------------------------------------
def grid_config() -> dict:
    spec = parse_spec({"name": "g", "preset": "mnist5k-ssat-mbi", "epochs": 4, "seeds": [3],
                       "grid": [{"row": "const", "set": {"attack.schedule": "const"}}]})
    return {"trial": grid_space(spec, spec.trials(), {})["trial"]["grid_search"][0]}


def test_a_trials_state_reason_and_names():
    config = grid_config()
    done = trial_outcome(config, {"epoch": 4, "time/epochs": 4}, None, False, "grid")
    assert (done.state, done.reason, done.last_epoch, done.epochs, done.name, done.label, done.rank) == (
        "finished", "", 4, 4, "const s3", "const", None)
    cut = trial_outcome(config, {}, None, False, "grid")
    assert (cut.state, cut.reason, cut.last_epoch) == ("interrupted", "ended before its last epoch", 0)
    err = trial_outcome(config, {"epoch": 2}, RuntimeError("Traceback\n  x\nValueError: bad beta\n"), False, "grid")
    assert (err.state, err.reason) == ("error", "ValueError: bad beta")
    assert trial_outcome(config, {}, KeyError(), False, "grid").reason == "KeyError"  # no message: its type
    assert trial_outcome(config, {"epoch": 1, "failed_reason": "no data"}, None, True, "grid").reason == "no data"
    assert trial_outcome(config, {"epoch": 2}, None, True, "grid").reason == "Ctrl+C"


def test_a_search_trial_stopped_by_its_scheduler_and_a_confirm_trials_rank():
    spec = parse_spec(SEARCH)
    config = merge_dicts(search_space(spec, {}, scheduler="asha"), unflatten_dict({"method.beta": 0.5}))
    early = trial_outcome(config, {"epoch": 2}, None, False, "search")
    assert (early.state, early.reason, early.sampled) == ("stopped_early", "asha at epoch 2", {"method.beta": 0.5})
    assert trial_outcome(config, {"epoch": 2}, None, False, "grid").state == "interrupted"
    confirm = spec.confirm_trials([{"method.beta": 0.5}, {"method.beta": 0.7}])
    config = {"trial": grid_space(spec, confirm, {})["trial"]["grid_search"][2]}
    assert trial_outcome(config, {"epoch": 4, "time/epochs": 4}, None, False, "confirm").rank == 2


def test_a_stage_judges_each_result_with_its_error_and_the_stop():
    config = grid_config()
    results = [SimpleNamespace(config=config, metrics={"epoch": 4, "time/epochs": 4}, error=None),
               SimpleNamespace(config=config, metrics=None, error=ValueError("boom"))]
    out = stage_outcome(results, "grid", 3, interrupted=True)
    assert [(t.state, t.reason) for t in out.trials] == [("finished", ""), ("error", "boom")]
    assert not out.complete and out.problems[-1] == "1 trial(s) never started"
    cut = stage_outcome([SimpleNamespace(config=config, metrics={"epoch": 1}, error=None)], "grid", 1, True)
    assert cut.trials[0].reason == "Ctrl+C"


@pytest.mark.parametrize("n", [1, 2])
def test_a_front_of_two_or_fewer_is_all_boundary(n):
    assert crowding_distance([[i, -i] for i in range(n)]) == [INF] * n

"""sweeps/search_spec.py: a search shrunk or changed from the command line is applied or refused with the fix,
never silently ignored (issue 42): --samples, --top-k, --epochs on the space, --seeds and --set on a search."""
from __future__ import annotations

import pytest

from sweeps.search_spec import line_of, rescale_space
from sweeps.spec import SpecError, load_spec, parse_spec

PRESET = "mnist5k-ssat-mbi"  # 10 epochs, lr milestones [6, 7, 9], Curious t=7
SPACE = {"attack.schedule": {"choice": ["const", "linear", "curious"]},
         "attack.t": {"int": [2, 5], "when": {"attack.schedule": ["linear", "curious"]}},
         "method.rho_double_epoch": {"choice": [None, 4, 5]},
         "method.beta": {"float": [0.0, 1.0]}}
SIX = {"optim.lr_milestones": [5], "optim.lr_factors": [0.1]}


def search(space=None, overrides=None, **kw) -> dict:
    return {"name": "unit", "preset": PRESET, "epochs": 6, "overrides": overrides or dict(SIX),
            "search": {"space": space or SPACE, **kw}}


def refused(raw: dict, message: str, **kw) -> str:
    with pytest.raises(SpecError) as err:
        parse_spec(raw, **kw)
    assert message in str(err.value), str(err.value)
    return str(err.value)


def test_samples_and_top_k_replace_the_specs_and_are_checked_under_their_flag_names():
    spec = parse_spec(search(num_samples=8, confirm={"top_k": 2, "seeds": [10, 11]}), samples=3, top_k=1)
    assert (spec.search["num_samples"], spec.search["confirm"]) == (3, {"top_k": 1, "seeds": [10, 11]})
    refused(search(), "--samples: 0; allowed: a positive integer up to 10,000", samples=0)
    refused(search(), "--top-k: 0; allowed: a positive integer up to 10,000", top_k=0)
    grid = {"name": "g", "preset": PRESET, "grid": [{"row": "a", "set": {}}]}
    refused(grid, "--samples: this spec has grid rows, not a search; --samples sets a search's num_samples", samples=3)
    refused(grid, "--top-k: this spec has grid rows, not a search; --top-k sets a search's confirm.top_k", top_k=2)


def test_epochs_rescales_the_spaces_epoch_numbers_as_the_base_configs():
    """t [2, 5] and rho_double_epoch {4, 5} of a 6-epoch search in 3 epochs: [1, 3] (2*3/6 = 1, 5*3/6 = 2.5 -> 3)
    and {2, 3} (4*3/6 = 2, 5*3/6 = 2.5 -> 3), as ssat.config.scale_epochs rounds; None stays None; beta untouched."""
    spec = parse_spec(search(), epochs=3)
    space = spec.search["space"]
    assert space["attack.t"] == {"int": [1, 3], "when": {"attack.schedule": ["linear", "curious"]}}
    assert space["method.rho_double_epoch"] == {"choice": [None, 2, 3]}
    assert space["method.beta"] == SPACE["method.beta"] and spec.base["optim"]["epochs"] == 3
    assert spec.base_config().optim.lr_milestones == [3]  # the base config's milestone 5 of 6, halved


def test_epochs_refuses_a_space_it_would_collapse_naming_the_smallest_that_keeps_it(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: unit\npreset: mnist5k-ssat-mbi\nepochs: 6\n"
                 "overrides: {optim.lr_milestones: [5], optim.lr_factors: [0.1]}\nsearch:\n  space:\n"
                 "    attack.schedule: {choice: [linear]}\n    method.rho_double_epoch: {choice: [4, 5]}\n")
    # 4 and 5 of 6 epochs are 1 and 2 in 2 epochs (1.33 -> 1, 1.67 -> 2): distinct; in 1 epoch both 1
    assert load_spec(f, epochs=2).search["space"]["method.rho_double_epoch"] == {"choice": [1, 2]}
    with pytest.raises(SpecError) as err:
        load_spec(f, epochs=1)
    assert str(err.value) == (f"{f}: --epochs 1: search.space.method.rho_double_epoch (line 8) {{choice: [4, 5]}} of "
                              "the 6-epoch search becomes [1, 1], which no longer holds distinct values; the smallest "
                              "--epochs that keeps it is 2")


def test_an_int_range_that_collapses_is_refused_and_one_that_does_not_is_kept():
    with pytest.raises(SpecError) as err:
        rescale_space({"attack.t": {"int": [4, 5]}}, 2, 10, "<spec>")
    # 4 and 5 of 10 are 1 and 1 in 2 epochs (0.8 -> 1, 1.0 -> 1), 1 and 2 in 3 (1.2 -> 1, 1.5 -> 2)
    assert str(err.value).endswith("becomes [1, 1], which no longer holds a range; the smallest --epochs that keeps "
                                   "it is 3")
    assert rescale_space({"attack.t": {"int": [4, 5]}}, 3, 10, "<spec>") == {"attack.t": {"int": [1, 2]}}


def test_swa_start_in_a_space_stays_before_the_last_epoch():
    with pytest.raises(SpecError, match="optim.swa_start"):
        rescale_space({"optim.swa_start": {"choice": [8, 9]}}, 5, 10, "x")
    assert rescale_space({"optim.swa_start": {"choice": [0, 6]}}, 5, 10, "x") == {"optim.swa_start": {"choice": [0, 3]}}


def test_a_space_over_lr_milestones_cannot_be_rescaled_and_says_so():
    with pytest.raises(SpecError, match="search.space.optim.lr_milestones holds epoch numbers this rescaling does not "
                                        "know"):
        rescale_space({"optim.lr_milestones": {"choice": [[3], [5]]}}, 3, 6, "x")


def test_the_grace_period_is_rescaled_with_the_space():
    spec = parse_spec(search(early_stopping={"grace_period": 6}, overrides={**SIX, "eval.val_every": 1}), epochs=3)
    assert spec.search["early_stopping"]["grace_period"] == 3


def test_early_stopping_needs_validation_at_every_epoch():
    refused(search(early_stopping={"grace_period": 6}, overrides={**SIX, "eval.val_every": 5}),
            "search.early_stopping: ASHA compares trials by their metric at its rungs (epoch grace_period, then x "
            "reduction_factor), but eval.val_every 5 validates only every few epochs")


def test_a_search_refuses_more_than_one_seed_from_the_option_and_from_the_spec():
    refused(search(), "--seeds 3 4: a search trains each sampled configuration once, at one seed; give one seed "
                      "(--seeds N)", seeds=[3, 4])
    refused({**search(), "seeds": [0, 1]}, "seeds: [0, 1]: a search trains each sampled configuration once")
    assert parse_spec(search(), seeds=[3]).base_config().seed == 3


def test_set_on_a_sampled_key_is_refused_and_on_another_key_applied():
    refused(search(), "--set method.beta=0.5: method.beta is sampled by the search (search.space.method.beta), so "
                      "every trial would replace this value; remove it from the space to fix it, or drop --set",
            sets={"method.beta": 0.5})
    refused(search(overrides={**SIX, "method.beta": 0.5}), "overrides.method.beta: 0.5: method.beta is also sampled by "
                                                           "the search (search.space.method.beta)")
    assert parse_spec(search(), sets={"method.tau": 3.0}).base_config().method.tau == 3.0


def test_search_keys_in_set_point_at_the_options():
    """--set search.num_samples=3 gave 'unknown key' and ~100 config keys."""
    refused(search(), "--set search.num_samples=3: the search's settings are keys of the spec, not of the config: "
                      "use --samples N or --top-k K, or edit the spec's search block", sets={"search.num_samples": 3})


def test_an_unknown_section_lists_the_sections_not_every_key():
    with pytest.raises(SpecError) as err:
        parse_spec(search(), sets={"serch.x": 3})
    text = str(err.value)
    assert "unknown key 'serch.x'" in text and "a section among data, model, method" in text
    assert "method.beta, method.tau" not in text


def test_line_of_finds_a_key_in_the_spec_file(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nsearch:\n  space:\n    attack.t: {int: [2, 5]}\n")
    assert (line_of(str(f), "attack.t"), line_of(str(f), "method.beta"), line_of("<spec>", "x")) == (" (line 4)", "",
                                                                                                      "")


def test_none_in_an_epoch_choice_stays_none_in_any_spelling():
    """None, "None" and "null" are one value (no epoch): the choice keeps its two distinct values, so it is kept."""
    got = rescale_space({"method.rho_double_epoch": {"choice": [None, "None", "null", 8]}}, 5, 10, "x")
    assert got == {"method.rho_double_epoch": {"choice": [None, None, None, 4]}}


def test_swa_start_is_clamped_to_the_epoch_before_the_last():
    """swa_start 9 of 10 in 5 epochs is 4.5 -> 5 by rounding, the last epoch: kept at 4 (averaging needs an epoch)."""
    assert rescale_space({"optim.swa_start": {"choice": [2, 9]}}, 5, 10, "x") == {"optim.swa_start": {"choice": [1, 4]}}


def test_an_epoch_count_in_the_space_cannot_be_rescaled(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("search:\n  space:\n    optim.epochs: {int: [4, 6]}\n")
    with pytest.raises(SpecError) as err:
        rescale_space({"optim.epochs": {"int": [4, 6]}, "attack.t": {"int": [2, 5]}}, 3, 6, str(f))
    assert str(err.value) == (f"{f}: --epochs 3: search.space.optim.epochs (line 3) holds epoch numbers this "
                              "rescaling does not know; give the space for the run's length instead")


def test_a_sampled_key_fixed_by_set_or_overrides_is_refused_pointing_at_the_spec(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: unit\npreset: mnist5k-ssat-mbi\nepochs: 6\n"
                 "overrides: {optim.lr_milestones: [5], optim.lr_factors: [0.1]}\nsearch:\n  space:\n"
                 "    method.beta: {float: [0.0, 1.0]}\n")
    with pytest.raises(SpecError) as err:
        load_spec(f, sets={"method.beta": 0.5})
    assert str(err.value) == (f"{f}: --set method.beta=0.5: method.beta is sampled by the search "
                              "(search.space.method.beta (line 7)), so every trial would replace this value; remove "
                              "it from the space to fix it, or drop --set")
    err = refused(search(overrides={**SIX, "method.beta": 0.5}), "overrides.method.beta")
    assert err == ("<spec>: overrides.method.beta: 0.5: method.beta is also sampled by the search "
                   "(search.space.method.beta), which replaces this value in every trial; keep one")


def test_seeds_in_the_spec_are_refused_without_pointing_at_the_option():
    err = refused({**search(), "seeds": [0, 1]}, "seeds: [0, 1]")
    assert err == ("<spec>: seeds: [0, 1]: a search trains each sampled configuration once, at one seed; give one "
                   "seed. The confirm stage re-runs the best configurations with the seeds of search.confirm.seeds")


def test_early_stopping_wants_validation_every_epoch_and_a_finite_reduction_factor():
    err = refused(search(early_stopping={"grace_period": 6}, overrides={**SIX, "eval.val_every": 2}), "val_every 2")
    assert err == ("<spec>: search.early_stopping: ASHA compares trials by their metric at its rungs (epoch "
                   "grace_period, then x reduction_factor), but eval.val_every 2 validates only every few epochs, so a "
                   "rung may have no metric; set eval.val_every: 1 or remove early_stopping")
    every = {**SIX, "eval.val_every": 1}
    for rf in (1, float("inf"), "3"):
        refused(search(early_stopping={"grace_period": 6, "reduction_factor": rf}, overrides=every),
                "search.early_stopping.reduction_factor")
    spec = parse_spec(search(early_stopping={"grace_period": 6, "reduction_factor": 1.5}, overrides=every))
    assert spec.search["early_stopping"] == {"grace_period": 6, "reduction_factor": 1.5}


@pytest.mark.parametrize("t,milestones,space,need", [
    (None, [], {"method.beta": {"float": [0.0, 1.0]}}, 1),   # nothing: at least epoch 1
    (3, [5], {"method.beta": {"float": [0.0, 1.0]}}, 5),     # the first milestone
    (5, [2], {"method.beta": {"float": [0.0, 1.0]}}, 5),     # the base's t
    (2, [3], {"attack.t": {"choice": [None, 4]}}, 4),        # the largest t the space samples, None left out
    (None, [], {"attack.t": {"choice": ["null"]}}, 1)])
def test_asha_grace_is_at_least_the_largest_t_and_the_first_milestone(t, milestones, space, need):
    from types import SimpleNamespace

    from sweeps.search_spec import _min_grace
    spec = SimpleNamespace(base={"attack": {"t": t}, "optim": {"lr_milestones": milestones}})
    assert _min_grace(spec, space) == need


def test_the_smallest_epochs_named_may_be_one_short_of_the_searchs_own():
    """t [1, 2] of a 5-epoch search: 1 and 1 in 2 or 3 epochs (lowest 1), 1 and 2 in 4 (0.8 -> 1, 1.6 -> 2)."""
    with pytest.raises(SpecError) as err:
        rescale_space({"attack.t": {"int": [1, 2]}}, 2, 5, "<spec>")
    assert str(err.value).endswith("becomes [1, 1], which no longer holds a range; the smallest --epochs that keeps "
                                   "it is 4")

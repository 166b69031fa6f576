"""sweeps/spec.py and sweeps/space.py, field by field: defaults, limits on both sides, the exact error messages
(field, value, what is allowed), grid rows and product labels, the corner configurations, and the
define-by-run function on real Optuna trials. Nothing here starts Ray or trains.
"""
from __future__ import annotations

import copy
import datetime
import pickle
import re

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from ssat.messages import brief
from sweeps.space import check_space, corner_configs, define_by_run, space_function
from sweeps.search_spec import _int_field, _min_grace
from sweeps.spec import Spec, SpecError, Trial, load_spec, parse_spec, read_yaml

optuna.logging.set_verbosity(optuna.logging.WARNING)

PRESET = "mnist5k-ssat-mbi"  # 10 epochs, lr milestones [6, 7, 9], Curious t=7
GRID = {"name": "unit", "preset": PRESET, "grid": [{"row": "a", "set": {}}]}
BETA = {"method.beta": {"float": [0.0, 1.0]}}
SCHED = {"attack.schedule": {"choice": ["const", "linear", "curious"]},
         "attack.t": {"int": [2, 8], "when": {"attack.schedule": ["linear", "curious"]}},
         "attack.gamma": {"float": [1.0, 1.5], "when": {"attack.schedule": ["curious"]}},
         "method.beta": {"float": [0.0, 1.0]}}


def grid(**kw) -> dict:
    return {**GRID, **kw}


def search(space=None, **kw) -> dict:
    return {"name": "unit", "preset": PRESET, "search": {"space": space or BETA, **kw}}


def refused(raw: dict, message: str, **kw) -> None:
    """parse_spec refuses `raw` with exactly this message (after the '<spec>: ' prefix)."""
    with pytest.raises(SpecError) as err:
        parse_spec(raw, **kw)
    assert str(err.value) == f"<spec>: {message}"


def space_refused(space: dict, message: str) -> None:
    with pytest.raises(SpecError) as err:
        check_space(space, "s.yaml")
    assert str(err.value) == f"s.yaml: {message}"


# ---- trials and their tags ----------------------------------------------------------------------------------
def test_grid_trials_rows_times_seeds_with_their_epochs_and_t_before_rescaling():
    rows = [{"row": "lo", "set": {"method.beta": 0.25}}, {"row": "hi", "set": {"method.beta": 1, "attack.t": 6}}]
    spec = parse_spec(grid(seeds=[3, 4], table="ablation", column_group="mnist/cnn", expected_seeds=5, grid=rows))
    trials = spec.trials()
    assert [(t.row, t.seed, t.config.method.beta, t.config.seed) for t in trials] == [
        ("lo", 3, 0.25, 3), ("lo", 4, 0.25, 4), ("hi", 3, 1.0, 3), ("hi", 4, 1.0, 4)]
    assert trials[1].stage == "grid"
    assert [t.spec_meta for t in trials[::2]] == [{"spec_epochs": 10, "spec_t": 7}, {"spec_epochs": 10, "spec_t": 6}]
    # --epochs 5 halves every t (7 -> 4, 6 -> 3); the trials still say what their spec ran
    short = parse_spec(grid(seeds=[3], grid=rows), epochs=5).trials()
    assert [(t.config.optim.epochs, t.config.attack.t) for t in short] == [(5, 4), (5, 3)]
    assert [t.spec_meta for t in short] == [{"spec_epochs": 10, "spec_t": 7}, {"spec_epochs": 10, "spec_t": 6}]
    assert Trial(short[0].config, "r", "confirm", 11).spec_meta == {}  # a confirm trial samples at its length


def test_defaults_of_an_almost_empty_grid_spec():
    spec = parse_spec(GRID)
    assert (spec.seeds, spec.max_concurrent, spec.metric, spec.mode) == ([0], 1, ["val/pgd10"], ["max"])
    assert spec.resources == {"cpu": 1, "gpu": 0}
    assert (spec.table, spec.column_group, spec.stage, spec.expected_seeds) == ("", "", "grid", 1)
    assert spec.search is None and spec.rescale is None and not spec.multi_objective
    assert spec.grid == [{"row": "a", "set": {}, "preset": None}] and spec.bases == {}
    assert spec.name == "unit" and spec.preset == PRESET and spec.source == GRID


def test_expected_seeds_defaults_to_the_number_of_seeds():
    assert parse_spec(grid(seeds=[1, 2, 3])).expected_seeds == 3
    assert parse_spec(grid(seeds=[1, 2, 3], expected_seeds=7)).expected_seeds == 7


def test_a_row_may_name_its_own_preset():
    spec = parse_spec(grid(overrides={"method.K": 2}, epochs=8,
                           grid=[{"row": "ours", "set": {}}, {"row": "rst", "set": {}, "preset": "mnist5k-rst"}]))
    assert set(spec.bases) == {"mnist5k-rst"}
    by_row = {t.row: t.config for t in spec.trials()}
    assert by_row["ours"].method.name == "ssat-mbi" and by_row["rst"].method.name == "rst"
    # The row's preset gets the spec's epochs and overrides too.
    assert (by_row["rst"].optim.epochs, by_row["rst"].optim.lr_milestones, by_row["rst"].method.K) == (8, [5, 6, 7], 2)


def test_an_unknown_row_preset_names_file_and_row():
    with pytest.raises(SpecError) as err:
        parse_spec(grid(grid=[{"row": "a"}, {"row": "b", "preset": "mnist5k-rts"}]), "specs/t1.yaml")
    assert str(err.value).startswith("specs/t1.yaml: grid[1].preset: preset 'mnist5k-rts' is unknown")
    # The spec's overrides fit its 100-epoch preset but not the row's 10-epoch one.
    with pytest.raises(SpecError) as err:
        parse_spec({**grid(grid=[{"row": "b", "preset": "mnist5k-rst"}]), "preset": "cifar10-ssat-mbi",
                    "overrides": {"optim.lr_milestones": [20, 40, 80]}}, "specs/t1.yaml")
    assert str(err.value) == ("specs/t1.yaml: grid[0].preset 'mnist5k-rst': optim.lr_milestones: [20, 40, 80]; "
                              "allowed: epochs within 1..10")


def test_a_bad_row_names_spec_row_and_field():
    with pytest.raises(SpecError) as err:
        parse_spec(grid(grid=[{"row": "ok", "set": {}}, {"row": "bad", "set": {"method.beta": 2}}]))
    assert str(err.value).startswith("spec 'unit', grid row 'bad': method.beta: 2")


def test_config_for_applies_sampled_values_and_seed():
    spec = parse_spec(search())
    cfg = spec.config_for({"method.beta": 0.125, "attack.schedule": "linear"}, 9)
    assert (cfg.method.beta, cfg.attack.schedule, cfg.seed) == (0.125, "linear", 9)
    with pytest.raises(SpecError) as err:
        spec.config_for({"method.beta": -1}, 0)
    assert str(err.value).startswith("spec 'unit', sampled configuration: method.beta: -1")


def test_configs_are_the_grid_trials_or_the_search_base():
    g = parse_spec(grid(seeds=[5, 6], grid=[{"row": "a", "set": {"method.K": 2}}, {"row": "b", "set": {}}]))
    assert [(c.seed, c.method.K) for c in g.configs()] == [(5, 2), (6, 2), (5, 3), (6, 3)]
    s = parse_spec(search(), seeds=[8], sets={"method.K": 4})
    (base,) = s.configs()
    assert (base.seed, base.method.K) == (8, 4) and base == s.base_config()


def test_digest_is_of_the_source_whatever_its_key_order():
    a = parse_spec({"name": "d", "preset": PRESET, "seeds": [1], "grid": [{"row": "a"}]})
    b = parse_spec({"grid": [{"row": "a"}], "seeds": [1], "preset": PRESET, "name": "d"})
    c = parse_spec({"name": "d", "preset": PRESET, "seeds": [2], "grid": [{"row": "a"}]})
    assert re.fullmatch(r"[0-9a-f]{12}", a.digest()) and a.digest() == b.digest() != c.digest()
    dated = parse_spec(grid(description=datetime.date(2025, 6, 1)))  # YAML may give dates: still digestible
    assert dated.digest() != parse_spec(grid(description="2025-06-01 ")).digest()


def test_parse_spec_does_not_change_its_input_nor_share_it():
    raw = copy.deepcopy(search(SCHED, confirm={"seeds": [5]}))  # edited below: not the shared SCHED
    before = repr(raw)
    spec = parse_spec(raw, sets={"method.K": 2})
    assert repr(raw) == before
    digest = spec.digest()
    raw["search"]["space"]["method.beta"]["float"][1] = 0.5  # the caller edits its dict afterwards
    assert spec.digest() == digest and spec.search["space"]["method.beta"] == {"float": [0.0, 1.0]}


# ---- command-line style arguments ------------------------------------------------------------------------------
def test_sets_override_the_specs_overrides_and_data_root_and_cpu_only_apply():
    spec = parse_spec(grid(overrides={"method.beta": 0.1, "method.K": 2}, resources={"cpu": 2, "gpu": 0.5}),
                      sets={"method.beta": 0.9}, data_root="/data/x", cpu_only=True)
    cfg = spec.trials()[0].config
    assert (cfg.method.beta, cfg.method.K, cfg.data.root, cfg.system.device) == (0.9, 2, "/data/x", "cpu")
    assert spec.resources == {"cpu": 2, "gpu": 0}
    plain = parse_spec(grid(resources={"cpu": 2, "gpu": 0.5}))
    assert plain.resources == {"cpu": 2, "gpu": 0.5} and plain.trials()[0].config.system.device == "auto"


def test_seeds_and_max_concurrent_arguments_replace_the_specs():
    spec = parse_spec(grid(seeds=[1, 2], max_concurrent=3), seeds=[7], max_concurrent=5)
    assert spec.seeds == [7] and spec.max_concurrent == 5 and [t.seed for t in spec.trials()] == [7]


def test_epochs_argument_rescales_grid_trials_and_the_search_base():
    g = parse_spec(grid(), epochs=20)
    cfg = g.trials()[0].config
    assert g.rescale == 20 and (cfg.optim.epochs, cfg.optim.lr_milestones, cfg.attack.t) == (20, [12, 14, 18], 14)
    s = parse_spec(search(), epochs=20)
    assert s.base["optim"]["epochs"] == 20 and s.base["attack"]["t"] == 14
    assert s.config_for({"method.beta": 0.5}, 0).optim.lr_milestones == [12, 14, 18]


def test_epochs_argument_of_one():
    spec = parse_spec(grid(overrides={"optim.lr_milestones": [], "optim.lr_factors": []}), epochs=1)
    cfg = spec.trials()[0].config
    assert spec.rescale == 1 and (cfg.optim.epochs, cfg.attack.t) == (1, 1)


@pytest.mark.parametrize("epochs", [0, -1, True, 2.5, "3"])
def test_epochs_argument_must_be_a_positive_integer(epochs):
    refused(GRID, f"--epochs: {epochs!r}; allowed: a positive integer up to 10,000", epochs=epochs)


def test_epochs_argument_collisions_are_named_for_searches():
    with pytest.raises(SpecError) as err:
        parse_spec(search(), epochs=2)
    assert str(err.value).startswith("<spec>: --epochs 2: --epochs 2: lr milestones [6, 7, 9]")


def test_spec_epochs_rescale_the_preset_and_explicit_milestones_are_kept():
    cfg = parse_spec(grid(epochs=20)).trials()[0].config
    assert (cfg.optim.epochs, cfg.optim.lr_milestones, cfg.attack.t) == (20, [12, 14, 18], 14)
    # Three epochs would make the preset's milestones collide; set explicitly, nothing is scaled.
    cfg = parse_spec(grid(epochs=3, overrides={"optim.lr_milestones": [1, 2], "optim.lr_factors": [0.1, 0.01],
                                               "attack.t": 2})).trials()[0].config
    assert (cfg.optim.epochs, cfg.optim.lr_milestones, cfg.optim.lr_factors) == (3, [1, 2], [0.1, 0.01])
    with pytest.raises(SpecError, match=r"^<spec>: preset 'mnist5k-ssat-mbi': --epochs 3: lr milestones"):
        parse_spec(grid(epochs=3))


def test_spec_epochs_of_one():
    cfg = parse_spec(grid(epochs=1, overrides={"optim.lr_milestones": [], "optim.lr_factors": []})).trials()[0].config
    assert (cfg.optim.epochs, cfg.attack.t, cfg.optim.lr_milestones) == (1, 1, [])


@pytest.mark.parametrize("epochs", [0, True, "ten"])
def test_spec_epochs_must_be_a_positive_integer(epochs):
    refused(grid(epochs=epochs),
            f"preset 'mnist5k-ssat-mbi': epochs: {epochs!r}; allowed: a positive integer up to 10,000")


# ---- top-level fields -----------------------------------------------------------------------------------------
def test_top_level_must_be_a_mapping():
    refused(["name"], "expected a mapping of spec keys at the top, got list")


def test_unknown_top_level_key_suggests_and_lists():
    refused(grid(sedes=[1]), "unknown key 'sedes'; did you mean 'seeds'? Valid keys: column_group, description, "
                             "epochs, expected_seeds, grid, max_concurrent, metric, mode, name, overrides, preset, "
                             "resources, search, seeds, stage, table")
    with pytest.raises(SpecError, match=r"unknown key 'zzzz' Valid keys: column_group"):
        parse_spec(grid(zzzz=1))


@pytest.mark.parametrize("name", ["", "a/b", "-x", ".hidden", "a" * 101, None, 5, "a b", "x\n"])
def test_bad_names(name):
    refused(grid(name=name), f"name: {name!r}; allowed: 1-100 letters, digits, '.', '_' or '-' (it names folders "
                             "and the MLflow experiment, so no '/' or '..')")


def test_name_with_two_dots_and_longest_name():
    refused(grid(name="a..b"), "name: 'a..b' contains '..'")
    assert parse_spec(grid(name="A" + "b.-_9" * 19 + "zzzz")).name.endswith("zzzz")  # 100 characters


@pytest.mark.parametrize("pname,message", [
    (None, "preset: None; expected the name of an ssat preset"),
    (3, "preset: 3; expected the name of an ssat preset"),
])
def test_bad_preset(pname, message):
    refused(grid(preset=pname), message)


def test_unknown_preset_names_the_choices():
    with pytest.raises(SpecError,
                       match=r"^<spec>: preset: preset 'mnist5k-ssat' is unknown .*; valid: .*mnist5k-ssat-mbi"):
        parse_spec(grid(preset="mnist5k-ssat"))


def test_overrides_must_be_a_mapping_and_validate():
    refused(grid(overrides=["method.beta=1"]), "overrides: expected a mapping of dotted keys, got ['method.beta=1']")
    with pytest.raises(SpecError, match=r"^<spec>: preset 'mnist5k-ssat-mbi': method.beta: 3"):
        parse_spec(grid(overrides={"method.beta": 3}))
    assert (parse_spec(grid(overrides=None)).trials()[0].config.method.beta
            == parse_spec(GRID).trials()[0].config.method.beta)


@pytest.mark.parametrize("seeds", [[], "0", 0, [0, True], [1.0], [None], {"a": 1}])
def test_bad_seeds(seeds):
    refused(grid(seeds=seeds), f"seeds: {seeds!r}; allowed: a non-empty list of integers")


def test_repeated_seeds_and_negative_seeds():
    refused(grid(seeds=[1, 2, 1]), "seeds: [1, 2, 1] repeat")
    assert parse_spec(grid(seeds=[-1, 0])).seeds == [-1, 0]


@pytest.mark.parametrize("mc", [0, -2, True, 1.5, "2", None])
def test_bad_max_concurrent(mc):
    refused(grid(max_concurrent=mc), f"max_concurrent: {mc!r}; allowed: a positive integer up to 10,000")


def test_max_concurrent_one_is_allowed():
    assert parse_spec(grid(max_concurrent=1)).max_concurrent == 1


def test_stage_default_and_choices():
    assert parse_spec(search()).stage == "search" and parse_spec(GRID).stage == "grid"
    for stage in ("grid", "search", "confirm", "demo"):
        spec = parse_spec(grid(stage=stage))
        assert spec.stage == stage and spec.trials()[0].stage == stage
    refused(grid(stage="final"), "stage: 'final'; allowed: grid, search, confirm, demo")


@pytest.mark.parametrize("key", ["table", "column_group"])
def test_table_and_column_group_are_strings(key):
    refused(grid(**{key: 3}), f"{key}: expected a string, got 3")
    assert getattr(parse_spec(grid(**{key: "x"})), key) == "x"


@pytest.mark.parametrize("es", [0, -1, True, 2.0, "3"])
def test_bad_expected_seeds(es):
    refused(grid(expected_seeds=es), f"expected_seeds: {es!r}; allowed: a positive integer up to 1,000")


def test_exactly_one_of_grid_or_search():
    msg = "expected exactly one of 'grid' (rows to run) or 'search' (an Optuna space)"
    refused({"name": "unit", "preset": PRESET}, msg)
    refused({**search(), "grid": GRID["grid"]}, msg)


# ---- resources --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("res,want", [
    ({"cpu": 0.5}, {"cpu": 0.5, "gpu": 0}),
    ({"gpu": 1}, {"cpu": 1, "gpu": 1}),
    ({"cpu": 3, "gpu": 0.25}, {"cpu": 3, "gpu": 0.25}),
    ({"gpu": 0}, {"cpu": 1, "gpu": 0}),
    ({"custom": {"worker_node": 1}}, {"cpu": 1, "gpu": 0, "custom_resources": {"worker_node": 1}}),
    ({"custom": {"a": 0.5, "b": 2}}, {"cpu": 1, "gpu": 0, "custom_resources": {"a": 0.5, "b": 2}}),
    ({"custom": {}}, {"cpu": 1, "gpu": 0}),
    (None, {"cpu": 1, "gpu": 0}),
])
def test_resources(res, want):
    assert parse_spec(grid(resources=res)).resources == want


@pytest.mark.parametrize("cpu", [0, -1, True, float("inf"), "1", None])
def test_bad_cpu(cpu):
    refused(grid(resources={"cpu": cpu}), f"resources.cpu: {cpu!r}; allowed: a number > 0")


@pytest.mark.parametrize("gpu", [-0.01, 1.01, 2, True, "0.5", None])
def test_bad_gpu(gpu):
    refused(grid(resources={"gpu": gpu}), f"resources.gpu: {gpu!r}; allowed: a share of one GPU, 0 <= gpu <= 1 "
                                          "(0.25 = four trials per GPU); a trial never spans several GPUs")


@pytest.mark.parametrize("custom", [{"a": 0}, {"a": -1}, {"a": True}, {"a": float("inf")}, {"": 1}, {3: 1},
                                    {"a": "1"}, ["a"], "a"])
def test_bad_custom_resources(custom):
    refused(grid(resources={"custom": custom}),
            f"resources.custom: {custom!r}; allowed: a mapping of Ray custom resource names to amounts > 0 (e.g. "
            "{worker_node: 1} pins trials to nodes started with that resource)")


def test_resources_must_be_a_mapping_of_known_keys():
    refused(grid(resources=[1]), "resources: expected a mapping like {cpu: 1, gpu: 0.25}, got [1]")
    refused(grid(resources={"gpus": 1}),
            "unknown key 'resources.gpus'; did you mean 'gpu'? Valid keys: cpu, custom, gpu")


# ---- metric and mode ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("metric,mode,want", [
    ("val/clean", "min", (["val/clean"], ["min"])),
    (["val/clean", "val/pgd10"], ["max", "min"], (["val/clean", "val/pgd10"], ["max", "min"])),
    (["train/loss"], ["min"], (["train/loss"], ["min"])),
])
def test_metric_and_mode(metric, mode, want):
    spec = parse_spec(grid(metric=metric, mode=mode))
    assert (spec.metric, spec.mode) == want and spec.multi_objective == (len(want[0]) == 2)


@pytest.mark.parametrize("name", ["val/pgd10", "val/clean", "val/best_pgd10", "train/loss", "train/kl_pgd",
                                  "adv/alpha_mean", "sched/rho", "perf/epoch_seconds", "test/best/pgd20",
                                  "test/last/autoattack", "time/total_hours"])
def test_every_metric_the_trainer_reports_is_accepted(name):
    assert parse_spec(grid(metric=name)).metric == [name]


@pytest.mark.parametrize("typo,near", [("val/pgd_10", "val/pgd10"), ("val/Clean", "val/clean"),
                                       ("test/best/pgd_20", "test/best/pgd20"), ("train/los", "train/loss")])
def test_a_metric_typo_is_refused_before_anything_starts_with_the_nearest_name(typo, near):
    """Today's metric typo failed the search after its first epoch with a Ray traceback."""
    with pytest.raises(SpecError) as err:
        parse_spec({**search(), "metric": typo})
    assert f"metric: {typo!r} is not a metric the trainer reports; did you mean {near!r}?" in str(err.value)


@pytest.mark.parametrize("name", ["val/x", "train/x", "test/x", "test/best/fgsm", "accuracy"])
def test_a_name_of_a_known_family_the_trainer_does_not_report_is_refused(name):
    with pytest.raises(SpecError, match="is not a metric the trainer reports"):
        parse_spec(grid(metric=name))


@pytest.mark.parametrize("metric", [["a/b", "c/d", "e/f"], [], [1], 3, None, ["val/a", 2]])
def test_bad_metric(metric):
    refused(grid(metric=metric), f"metric: {metric!r}; allowed: a metric name or a list of two")


@pytest.mark.parametrize("metric,mode", [
    ("val/clean", "maximize"), ("val/clean", ["max", "max"]), (["val/a", "val/b"], "max"),
    (["val/a", "val/b"], ["max"]), ("val/clean", 1), ("val/clean", [])])
def test_bad_mode(metric, mode):
    refused(grid(metric=metric, mode=mode), f"mode: {mode!r}; allowed: 'max' or 'min', one per metric")


def test_unknown_metric_names_the_allowed_ones():
    with pytest.raises(SpecError) as err:
        parse_spec(grid(metric=["val/clean", "loss"], mode=["max", "min"]))
    assert str(err.value) == (
        "<spec>: metric: 'loss' is not a metric the trainer reports. Allowed: the per-epoch val/clean, val/pgd10, "
        "val/best_pgd10, train/loss (and the other train/, sched/, adv/, perf/ names of docs/tracking.md), or "
        "test/<best|last>/<clean|pgd10|pgd20|pgd40|autoattack> of the last epoch")  # no name near 'loss'
    with pytest.raises(SpecError) as err:
        parse_spec(grid(metric="val/pgd2"))  # near several: the nearest is named, once
    assert "is not a metric the trainer reports; did you mean 'val/pgd10'? Allowed:" in str(err.value)


def test_a_metric_over_the_text_limit_is_refused_by_its_length_before_any_name_is_compared():
    refused(grid(metric="val/" + "r" * 197), f"metric: 201 characters ({brief('val/' + 'r' * 197)}); allowed: at "
                                             f"most 200 {LIMIT_NOTE}")


# ---- grid rows ---------------------------------------------------------------------------------------------------
def test_rows_get_index_labels_and_empty_sets():
    spec = parse_spec(grid(grid=[{}, {"set": None}, {"row": 7, "set": {"method.K": 2}}]))
    assert spec.grid == [{"row": "0", "set": {}, "preset": None}, {"row": "1", "set": {}, "preset": None},
                         {"row": "7", "set": {"method.K": 2}, "preset": None}]


@pytest.mark.parametrize("g", [[], {}, "a", None, {"product": {}, "x": 1}])
def test_grid_must_be_rows_or_a_product(g):
    refused(grid(grid=g), "grid: expected a non-empty list of rows ({row: LABEL, set: {dotted.key: value}}) "
                          "or {product: {dotted.key: [values]}}")


def test_bad_rows():
    refused(grid(grid=[{"row": "a"}, "b"]), "grid[1]: expected a mapping with 'row' and 'set', got 'b'")
    refused(grid(grid=[{"row": "a", "sett": {}}]),
            "unknown key 'grid[0].sett'; did you mean 'set'? Valid keys: preset, row, set")
    refused(grid(grid=[{"row": "a", "preset": 3}]), "grid[0].preset: 3; expected the name of an ssat preset")
    refused(grid(grid=[{"row": "a"}, {"row": "a"}]), "grid[1].row: 'a' repeats")
    refused(grid(grid=[{"row": 1}, {"row": "1"}]), "grid[1].row: '1' repeats")
    refused(grid(grid=[{"row": "a", "set": [1]}]), "grid[0].set: expected a mapping of dotted keys, got [1]")


@pytest.mark.parametrize("pname", [3, 0, False, []])
def test_a_rows_preset_must_be_a_name_even_when_falsy(pname):
    refused(grid(grid=[{"row": "a", "preset": pname}]),
            f"grid[0].preset: {pname!r}; expected the name of an ssat preset")


def test_product_rows_and_labels():
    spec = parse_spec(grid(seeds=[0], grid={"product": {"method.beta": [0.2, 1], "attack.t": [3, 5]}}))
    assert [(r["row"], r["set"]) for r in spec.grid] == [
        ("beta=0.2,t=3", {"method.beta": 0.2, "attack.t": 3}), ("beta=0.2,t=5", {"method.beta": 0.2, "attack.t": 5}),
        ("beta=1,t=3", {"method.beta": 1, "attack.t": 3}), ("beta=1,t=5", {"method.beta": 1, "attack.t": 5})]
    assert [(t.config.method.beta, t.config.attack.t) for t in spec.trials()] == [(0.2, 3), (0.2, 5), (1.0, 3),
                                                                                   (1.0, 5)]
    one = parse_spec(grid(grid={"product": {"seed": [1]}}))
    assert one.grid[0]["row"] == "seed=1"


@pytest.mark.parametrize("prod", [{}, {"method.beta": []}, {"method.beta": 0.5}, {1: [1]}, [1], None])
def test_bad_product(prod):
    refused(grid(grid={"product": prod}), f"grid.product: {prod!r}; expected {{dotted.key: [values, ...]}}")


# ---- search ------------------------------------------------------------------------------------------------------
def test_search_defaults():
    spec = parse_spec(search(), seeds=[1])
    assert spec.search == {"num_samples": 10, "space": BETA, "early_stopping": None,
                           "confirm": {"top_k": 3, "seeds": [100, 101, 102]}, "sampler_seed": 0}
    assert spec.grid == []


def test_search_values_are_kept():
    spec = parse_spec(search(SCHED, num_samples=1, early_stopping={"grace_period": 9, "reduction_factor": 1.5},
                             confirm={"top_k": 1, "seeds": [50]}, sampler_seed=2**32 - 1))
    assert spec.search == {"num_samples": 1, "space": SCHED, "early_stopping": {"grace_period": 9,
                                                                                "reduction_factor": 1.5},
                           "confirm": {"top_k": 1, "seeds": [50]}, "sampler_seed": 2**32 - 1}


def test_search_must_be_a_mapping_of_known_keys():
    refused({"name": "unit", "preset": PRESET, "search": [1]}, "search: expected a mapping with num_samples, "
                                                                "space, confirm")
    refused(search(spcae={}), "unknown key 'search.spcae'; did you mean 'space'? Valid keys: confirm, early_stopping, "
                              "num_samples, sampler_seed, space")


@pytest.mark.parametrize("n", [0, -1, True, 1.0, "5", None])
def test_bad_num_samples(n):
    refused(search(num_samples=n), f"search.num_samples: {n!r}; allowed: a positive integer up to 10,000 (a limit no "
                                       "real search comes near: split a larger one into several sweeps)")


@pytest.mark.parametrize("space", [None, {}, [BETA]])
def test_search_needs_a_space(space):
    refused({"name": "unit", "preset": PRESET, "search": {"space": space}},
            "search.space: expected a mapping {dotted.key: {choice|float|int: ...}}")


@pytest.mark.parametrize("key", ["attack.t", "method.K", "seed", "data.n_unlabeled", "optim.epochs"])
def test_a_float_range_for_an_integer_field(key):
    refused(search({key: {"float": [1, 4]}}),
            f"search.space.{key}.float: [1, 4]; {key} takes integers, so use {{int: [low, high]}} (a float range "
            "would sample values like 2.5)")


def test_every_corner_of_the_space_is_validated():
    with pytest.raises(SpecError, match=r"^spec 'unit', sampled configuration: method.beta: 1.5"):
        parse_spec(search({"method.beta": {"float": [0.5, 1.5]}}))
    with pytest.raises(SpecError, match=r"^spec 'unit', sampled configuration: attack.schedule: 'cosine'"):
        parse_spec(search({"attack.schedule": {"choice": ["const", "cosine"]}}))


def test_early_stopping_checks():
    refused(search(early_stopping=[8]), "search.early_stopping: expected {grace_period: N} or null")
    refused(search(early_stopping={"grace": 8}), "unknown key 'search.early_stopping.grace'; did you mean "
                                                 "'grace_period'? Valid keys: grace_period, reduction_factor")
    multi = {**search(early_stopping={"grace_period": 9}), "metric": ["val/clean", "val/pgd10"], "mode": ["max", "max"]}
    refused(multi, "search.early_stopping: ASHA needs a single metric; remove it for multi-objective")
    assert parse_spec({**multi, "search": {"space": BETA}}).search["early_stopping"] is None


@pytest.mark.parametrize("space,need", [
    (BETA, 7),                                                   # the preset's t = 7 > first milestone 6
    ({"attack.t": {"int": [2, 9]}}, 9),
    ({"attack.t": {"choice": [3, "9"]}}, 9),                     # integral strings in a choice
])
def test_grace_period_default_and_lower_limit(space, need):
    spec = parse_spec(search(space, early_stopping={}))
    assert spec.search["early_stopping"] == {"grace_period": need, "reduction_factor": 3}
    assert parse_spec(search(space, early_stopping={"grace_period": need}))
    refused(search(space, early_stopping={"grace_period": need - 1}),
            f"search.early_stopping.grace_period: {need - 1}; allowed: >= {need} (the largest t in the space and "
            "the first learning-rate milestone: earlier scores are not comparable)")


@pytest.mark.parametrize("gp", [True, 8.0, "8", None])
def test_bad_grace_period_types(gp):
    refused(search(early_stopping={"grace_period": gp}),
            f"search.early_stopping.grace_period: {gp!r}; allowed: >= 7 (the largest t in the space and the first "
            "learning-rate milestone: earlier scores are not comparable)")


@pytest.mark.parametrize("rf", [1, 0.5, True, float("inf"), "3", None])
def test_bad_reduction_factor(rf):
    refused(search(early_stopping={"reduction_factor": rf}),
            f"search.early_stopping.reduction_factor: {rf!r}; allowed: a number > 1 (ASHA keeps 1/reduction_factor "
            "of the trials at each rung)")


def test_reduction_factor_just_above_one():
    assert parse_spec(search(early_stopping={"reduction_factor": 1.01})).search["early_stopping"]["reduction_factor"] \
        == 1.01


def test_confirm_checks():
    refused(search(confirm=[3]), "search.confirm: expected {top_k: K, seeds: [...]}")
    refused(search(confirm={"topk": 3}), "unknown key 'search.confirm.topk'; did you mean 'top_k'? Valid keys: "
                                         "seeds, top_k")
    assert parse_spec(search(confirm=None)).search["confirm"] == {"top_k": 3, "seeds": [100, 101, 102]}


@pytest.mark.parametrize("k", [0, -1, True, 1.0, "2"])
def test_bad_top_k(k):
    refused(search(confirm={"top_k": k}), f"search.confirm.top_k: {k!r}; allowed: a positive integer up to 10,000")


@pytest.mark.parametrize("cseeds", [[], [1, 1], [0], [5, 0], [True], [1.5], "100", None])
def test_bad_confirm_seeds(cseeds):
    refused(search(confirm={"seeds": cseeds}), f"search.confirm.seeds: {cseeds!r}; allowed: a non-empty list of "
                                               "fresh seeds (not among the search seeds [0])")


@pytest.mark.parametrize("ss", [-1, 2**32, True, 1.0, "0", None])
def test_bad_sampler_seed(ss):
    refused(search(sampler_seed=ss), f"search.sampler_seed: {ss!r}; allowed: an integer in 0..2**32-1")


# ---- _int_field and _min_grace ------------------------------------------------------------------------------------
@pytest.mark.parametrize("key,want", [
    ("seed", True), ("method.K", True), ("attack.t", True), ("data.n_unlabeled", True), ("optim.epochs", True),
    ("method.beta", False), ("attack.gamma", False), ("attack.schedule", False), ("optim.lr_milestones", False),
    ("method.interpolate", False), ("nosection.K", False), ("method.nokey", False), ("attack.eps", False),
])
def test_int_field(key, want):
    assert _int_field(key) is want


def _spec_with(t, milestones) -> Spec:
    return Spec(name="m", preset=PRESET, base={"attack": {"t": t}, "optim": {"lr_milestones": milestones}},
                seeds=[0], resources={}, max_concurrent=1, metric=["val/pgd10"], mode=["max"])


@pytest.mark.parametrize("t,milestones,space,want", [
    (None, [], {}, 1),                                      # nothing to wait for: at least one epoch
    (0, [], {}, 1),
    (5, [], {}, 5),
    (5, [7], {}, 7),
    (5, [3, 9], {}, 5),                                     # the first milestone, not the last
    (None, [4, 8], {}, 4),
    (5, [], {"attack.t": {"int": [2, 8]}}, 8),
    (6, [], {"attack.t": {"int": [2, 4]}}, 6),              # the base's t when the space's is lower
    (None, [2], {"attack.t": {"choice": [None, "null", "None", 3]}}, 3),
    (None, [], {"attack.t": {"choice": [None, "none"]}}, 1),
    (2, [], {"attack.t": {"choice": ["11", 4]}}, 11),
    (9, [], {"method.beta": {"float": [0, 1]}}, 9),
])
def test_min_grace(t, milestones, space, want):
    assert _min_grace(_spec_with(t, milestones), space) == want


# ---- read_yaml / load_spec -----------------------------------------------------------------------------------------
def test_load_spec_reads_a_file_and_passes_the_arguments(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: filed\npreset: mnist5k-ssat-mbi\nseeds: [0, 1]\nresources: {cpu: 1, gpu: 0.5}\n"
                 "grid:\n  - {row: a, set: {method.beta: 0.5}}\n")
    spec = load_spec(f, epochs=5, seeds=[3], sets={"method.K": 2}, cpu_only=True, max_concurrent=4,
                     data_root="/d")
    cfg = spec.trials()[0].config
    assert (spec.name, spec.seeds, spec.max_concurrent, spec.resources["gpu"], spec.rescale) == ("filed", [3], 4, 0, 5)
    assert (cfg.method.beta, cfg.method.K, cfg.system.device, cfg.data.root, cfg.optim.epochs) == \
        (0.5, 2, "cpu", "/d", 5)
    with pytest.raises(SpecError, match=re.escape(f"{f}: seeds: [1, 1] repeat")):
        load_spec(f, seeds=[1, 1])
    plain = load_spec(f)  # no arguments: the file's own seeds, resources and device
    assert (plain.seeds, plain.resources, plain.rescale, plain.max_concurrent) == ([0, 1], {"cpu": 1, "gpu": 0.5},
                                                                                   None, 1)
    assert plain.trials()[0].config.system.device == "auto" and plain.trials()[0].config.data.root is None


def test_read_yaml_errors(tmp_path):
    with pytest.raises(SpecError) as err:
        read_yaml(tmp_path / "none.yaml")
    assert str(err.value) == f"{tmp_path / 'none.yaml'}: no such spec file"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: a\ngrid: [\n")
    with pytest.raises(yaml.YAMLError) as parsed:
        yaml.safe_load(bad.read_text())
    with pytest.raises(SpecError) as err:
        read_yaml(bad)
    assert str(err.value) == f"{bad}: malformed YAML at line 3, column 1: {parsed.value.problem}"
    control = tmp_path / "control.yaml"  # a reader error: no line mark and no 'problem', only its own text
    control.write_text("name: a\x07\n")
    with pytest.raises(yaml.YAMLError) as parsed:
        yaml.safe_load(control.read_text())
    with pytest.raises(SpecError) as err:
        read_yaml(control)
    assert str(err.value) == f"{control}: malformed YAML: {parsed.value}" and "#x0007" in str(err.value)
    tag = tmp_path / "tag.yaml"
    tag.write_text("name: !!python/object:os.system a\n")
    with pytest.raises(SpecError, match=re.escape(f"{tag}: YAML tag not allowed (specs are read with a safe "
                                                  "loader) at line 1, column 7: ")):
        read_yaml(tag)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(SpecError, match=re.escape(f"{binary}: cannot be read as a YAML spec file (")):
        read_yaml(binary)
    top = tmp_path / "list.yaml"
    top.write_text("- a\n- b\n")
    with pytest.raises(SpecError) as err:
        read_yaml(top)
    assert str(err.value) == f"{top}: expected a mapping of spec keys at the top, got list"
    ok = tmp_path / "ok.yaml"
    ok.write_text("a: 1\n")
    assert read_yaml(str(ok)) == {"a": 1}


# ---- the search space: check_space ---------------------------------------------------------------------------------
def test_a_well_formed_space_passes():
    check_space(SCHED)
    check_space({"method.rho0": {"float": [0.01, 0.1], "log": True}, "method.K": {"int": [1, 4], "log": True}})
    check_space({"method.K": {"int": [1, 2]}, "method.beta": {"float": [0, 1], "when": {"method.K": [1]}}})


@pytest.mark.parametrize("space,message", [
    ({3: {"choice": [1]}}, "search.space.3: expected a dotted config key such as 'method.beta', got 3"),
    ({"method.K": [1, 2]}, "search.space.method.K: expected {choice: [...]}, {float: [lo, hi]} or {int: [lo, hi]}"),
    ({"method.K": {"choise": [1]}}, "unknown key 'search.space.method.K.choise'; did you mean 'choice'? Valid keys: "
                                    "choice, float, int, log, when"),
    ({"method.K": {}}, "search.space.method.K: expected exactly one of choice, float, int; got []"),
    ({"method.K": {"log": True}}, "search.space.method.K: expected exactly one of choice, float, int; got ['log']"),
    ({"method.K": {"int": [1, 2], "choice": [1]}},
     "search.space.method.K: expected exactly one of choice, float, int; got ['choice', 'int']"),
    ({"method.K": {"choice": []}}, "search.space.method.K.choice: expected a non-empty list, got []"),
    ({"method.K": {"choice": 1}}, "search.space.method.K.choice: expected a non-empty list, got 1"),
    ({"method.K": {"int": [1, 1]}}, "search.space.method.K.int: [1, 1]; allowed: [low, high] with low < high"),
    ({"method.K": {"int": [3, 1]}}, "search.space.method.K.int: [3, 1]; allowed: [low, high] with low < high"),
    ({"method.K": {"int": [1, 2.5]}}, "search.space.method.K.int: [1, 2.5]; allowed: [low, high] with low < high"),
    ({"method.K": {"int": [1, 2, 3]}}, "search.space.method.K.int: [1, 2, 3]; allowed: [low, high] with low < high"),
    ({"method.K": {"int": [1]}}, "search.space.method.K.int: [1]; allowed: [low, high] with low < high"),
    ({"method.K": {"int": (1, 2)}}, "search.space.method.K.int: (1, 2); allowed: [low, high] with low < high"),
    ({"method.K": {"int": [False, 2]}}, "search.space.method.K.int: [False, 2]; allowed: [low, high] with low < high"),
    ({"method.beta": {"float": [0, True]}},
     "search.space.method.beta.float: [0, True]; allowed: [low, high] with low < high"),
    ({"method.beta": {"float": ["0", 1]}},
     "search.space.method.beta.float: ['0', 1]; allowed: [low, high] with low < high"),
    ({"method.beta": {"float": [0.5, 0.5]}},
     "search.space.method.beta.float: [0.5, 0.5]; allowed: [low, high] with low < high"),
    ({"method.beta": {"float": [0, 1], "log": True}}, "search.space.method.beta: a log range needs low > 0, got 0"),
    ({"method.K": {"int": [-1, 2], "log": True}}, "search.space.method.K: a log range needs low > 0, got -1"),
    ({"method.K": {"int": [1, 2], "when": [1]}}, "search.space.method.K.when: [1]; expected {earlier.key: [values]}"),
    ({"method.K": {"int": [1, 2], "when": {"attack.schedule": ["const"]}}},
     "search.space.method.K.when: 'attack.schedule' must be a parameter listed before 'method.K'"),
    ({"method.K": {"int": [1, 2], "when": {"method.K": [1]}}},
     "search.space.method.K.when: 'method.K' must be a parameter listed before 'method.K'"),
    ({"method.K": {"int": [1, 2]}, "method.beta": {"float": [0, 1], "when": {"method.K": []}}},
     "search.space.method.beta.when.method.K: expected a non-empty list of values"),
    ({"method.K": {"int": [1, 2]}, "method.beta": {"float": [0, 1], "when": {"method.K": 1}}},
     "search.space.method.beta.when.method.K: expected a non-empty list of values"),
])
def test_check_space_refusals(space, message):
    space_refused(space, message)


def test_a_space_error_names_the_spec_file():
    with pytest.raises(SpecError) as err:
        parse_spec(search({"method.K": {"int": [3, 1]}}), "specs/x.yaml")
    assert str(err.value) == "specs/x.yaml: search.space.method.K.int: [3, 1]; allowed: [low, high] with low < high"


def test_a_parent_listed_after_its_child_is_refused():
    space = {"attack.t": {"int": [2, 8], "when": {"attack.schedule": ["linear"]}},
             "attack.schedule": {"choice": ["const", "linear"]}}
    space_refused(space, "search.space.attack.t.when: 'attack.schedule' must be a parameter listed before 'attack.t'")


def test_check_space_default_path():
    with pytest.raises(SpecError) as err:
        check_space({"method.K": {}})
    assert str(err.value).startswith("<spec>: search.space.method.K:")


def test_a_log_range_with_positive_low_passes():
    check_space({"method.rho0": {"float": [0.001, 0.1], "log": True}})
    check_space({"method.rho0": {"float": [-1, 0.1], "log": False}})


# ---- corner configurations ------------------------------------------------------------------------------------------
def test_corner_configs_touch_every_value_with_parents_set_and_children_active():
    assert corner_configs(SCHED) == [
        {"attack.schedule": "const"},
        {"attack.schedule": "linear", "attack.t": 2},
        {"attack.schedule": "curious", "attack.t": 2, "attack.gamma": 1.0},
        {"attack.schedule": "linear", "attack.t": 2},
        {"attack.schedule": "linear", "attack.t": 8},
        {"attack.schedule": "curious", "attack.gamma": 1.0, "attack.t": 2},
        {"attack.schedule": "curious", "attack.gamma": 1.5, "attack.t": 2},
        {"method.beta": 0.0},
        {"method.beta": 1.0},
    ]


def test_a_choice_child_made_active_takes_its_first_choice():
    space = {"method.interpolate": {"choice": [False, True]},
             "attack.schedule": {"choice": ["linear", "curious"], "when": {"method.interpolate": [True]}}}
    assert corner_configs(space)[:2] == [{"method.interpolate": False},
                                         {"method.interpolate": True, "attack.schedule": "linear"}]


def test_corner_configs_of_choices_with_false_and_zero_values():
    space = {"method.interpolate": {"choice": [False, True]},
             "method.K": {"int": [0, 3], "when": {"method.interpolate": [True]}}}
    assert corner_configs(space) == [{"method.interpolate": False}, {"method.interpolate": True, "method.K": 0},
                                     {"method.interpolate": True, "method.K": 0},
                                     {"method.interpolate": True, "method.K": 3}]


# ---- define_by_run on real Optuna trials -----------------------------------------------------------------------------
def _ask(space, fixed=None):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    if fixed:
        study.enqueue_trial(fixed)
    trial = study.ask()
    assert define_by_run(trial, space) is None
    return trial


def test_define_by_run_declares_each_distribution():
    space = {"method.rho0": {"float": [0.01, 0.1], "log": True}, "method.beta": {"float": [0.0, 1.0]},
             "method.K": {"int": [1, 4]}, "attack.t": {"int": [2, 64], "log": True},
             "attack.schedule": {"choice": ["const", "curious"]}}
    d = _ask(space).distributions
    assert d == {"method.rho0": FloatDistribution(0.01, 0.1, log=True), "method.beta": FloatDistribution(0.0, 1.0),
                 "method.K": IntDistribution(1, 4), "attack.t": IntDistribution(2, 64, log=True),
                 "attack.schedule": CategoricalDistribution(["const", "curious"])}


@pytest.mark.parametrize("schedule,present", [
    ("const", {"attack.schedule", "method.beta"}),
    ("linear", {"attack.schedule", "attack.t", "method.beta"}),
    ("curious", {"attack.schedule", "attack.t", "attack.gamma", "method.beta"}),
])
def test_define_by_run_samples_children_only_when_their_parent_allows(schedule, present):
    trial = _ask(SCHED, {"attack.schedule": schedule})
    p = trial.params
    assert p["attack.schedule"] == schedule and set(p) == present
    assert 0.0 <= p["method.beta"] <= 1.0
    assert 2 <= p.get("attack.t", 2) <= 8 and 1.0 <= p.get("attack.gamma", 1.0) <= 1.5


def test_define_by_run_chains_conditions():
    space = {"method.interpolate": {"choice": [False, True]},
             "method.K": {"int": [1, 4], "when": {"method.interpolate": [True]}},
             "method.tau": {"float": [1.0, 3.0], "when": {"method.K": [2, 3]}}}
    assert set(_ask(space, {"method.interpolate": False}).params) == {"method.interpolate"}
    assert set(_ask(space, {"method.interpolate": True, "method.K": 1}).params) == {"method.interpolate", "method.K"}
    assert set(_ask(space, {"method.interpolate": True, "method.K": 3}).params) == {"method.interpolate", "method.K",
                                                                                    "method.tau"}


def test_a_child_of_an_inactive_parent_stays_inactive_even_if_it_allows_null():
    """An unsampled parent is absent, not None: a `when` list holding None must not match it."""
    space = {"attack.schedule": {"choice": ["const", "linear"]},
             "attack.t": {"int": [2, 8], "when": {"attack.schedule": ["linear"]}},
             "method.beta": {"float": [0.0, 1.0], "when": {"attack.t": [None, 3]}}}
    assert set(_ask(space, {"attack.schedule": "const"}).params) == {"attack.schedule"}
    assert set(_ask(space, {"attack.schedule": "linear", "attack.t": 3}).params) == set(space)


def test_space_function_is_a_picklable_define_by_run():
    fn = pickle.loads(pickle.dumps(space_function(SCHED)))
    assert fn.keywords == {"space": SCHED}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    study.enqueue_trial({"attack.schedule": "curious"})
    trial = study.ask()
    fn(trial)
    assert set(trial.params) == set(SCHED)


# ---- the size limits at their edges (MAX_TRIALS lowered, so the last allowed case is cheap to build) --------------
def test_trial_counts_are_allowed_up_to_the_limit_and_refused_one_past_it(monkeypatch):
    import sweeps.search_spec as search_module
    import sweeps.spec as spec_module

    monkeypatch.setattr(spec_module, "MAX_TRIALS", 6)
    monkeypatch.setattr(search_module, "MAX_TRIALS", 6)
    product = {"method.beta": [0.1, 0.2, 0.3], "method.tau": [1.0, 2.0]}
    assert len(parse_spec(grid(grid={"product": product})).grid) == 6
    refused(grid(grid={"product": {**product, "method.tau": [1.0, 2.0, 3.0]}}),
            "grid.product: 9 combinations; allowed: at most 6 rows (a limit no real sweep comes near)")
    at_limit = parse_spec(search(num_samples=2, confirm={"top_k": 2, "seeds": [100, 101, 102]}))
    assert at_limit.search["confirm"]["top_k"] == 2
    refused(search(num_samples=2, confirm={"top_k": 7, "seeds": [100]}),
            "search.confirm.top_k: 7; allowed: a positive integer up to 6")
    refused(search(num_samples=2, confirm={"top_k": 2, "seeds": [100, 101, 102, 103]}),
            "search.confirm: top_k 2 x 4 seeds = 8 trials; allowed: at most 6")
    rows = [{"row": r, "set": {}} for r in "abc"]
    assert len(parse_spec(grid(grid=rows, seeds=[0, 1])).trials()) == 6
    refused(grid(grid=rows, seeds=[0, 1, 2]), "grid: 3 rows x 3 seeds = 9 trials; allowed: at most 6 (a limit no real "
                                              "sweep comes near: split it into several sweeps)")


def test_epochs_past_the_limit_are_refused():
    from ssat.config_checks import MAX_EPOCHS

    assert parse_spec(GRID, epochs=MAX_EPOCHS).rescale == MAX_EPOCHS
    refused(GRID, f"--epochs: {MAX_EPOCHS + 1}; allowed: a positive integer up to {MAX_EPOCHS:,}",
            epochs=MAX_EPOCHS + 1)


def test_a_space_key_and_a_choice_are_allowed_up_to_their_limits():
    from sweeps.space import MAX_CHOICES, MAX_KEY

    check_space({"k" * MAX_KEY: {"float": [0.0, 1.0]}, "c": {"choice": list(range(MAX_CHOICES))}})
    with pytest.raises(SpecError) as err:
        check_space({"k" * (MAX_KEY + 1): {"float": [0.0, 1.0]}})
    assert str(err.value).startswith(f"<spec>: search.space: a key of {MAX_KEY + 1} characters (")
    assert str(err.value).endswith(f"allowed: a dotted config key of at most {MAX_KEY} characters")
    space_refused({"c": {"choice": list(range(MAX_CHOICES + 1))}},
                  f"search.space.c.choice: {MAX_CHOICES + 1:,} values; allowed: at most {MAX_CHOICES:,} (a limit no "
                  "real search comes near)")


def test_load_spec_passes_the_rows_and_the_gpu_share_on(tmp_path):
    from sweeps.spec import load_spec

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**GRID, "grid": [{"row": "a", "set": {}}, {"row": "b", "set": {}}],
                                    "resources": {"cpu": 1, "gpu": 0.5}}))
    assert [t.row for t in load_spec(path).trials()] == ["a", "b"]
    spec = load_spec(path, rows=["b"], gpu_share=0.25)  # --rows b --gpu-share 0.25
    assert [t.row for t in spec.trials()] == ["b"] and spec.resources["gpu"] == 0.25


def test_a_spec_file_of_the_largest_size_is_read_and_an_integer_error_is_cut_at_120_characters(tmp_path):
    from sweeps.spec_checks import MAX_SPEC_BYTES
    from sweeps.spec_file import read_yaml

    body = yaml.safe_dump(GRID)
    at_limit = tmp_path / "at-limit.yaml"
    at_limit.write_text(body + "#" * (MAX_SPEC_BYTES - len(body)))  # a comment pads it to the limit exactly
    assert at_limit.stat().st_size == MAX_SPEC_BYTES and read_yaml(at_limit) == GRID
    huge_int = tmp_path / "int.yaml"
    huge_int.write_text("max_concurrent: " + "9" * 5000)
    with pytest.raises(SpecError) as err:
        read_yaml(huge_int)
    with pytest.raises(ValueError) as cause:
        yaml.safe_load(huge_int.read_text())
    assert len(str(cause.value)) > 120 and str(err.value) == f"{huge_int}: malformed YAML: {str(cause.value)[:120]}"


LIMIT_NOTE = "(a limit no real sweep comes near)"


@pytest.mark.parametrize("where, make, limit", [
    ("grid[0].row", lambda text: grid(grid=[{"row": text, "set": {}}]), 200),
    ("resources.custom", lambda text: grid(resources={"custom": {text: 1}}), 200),
    ("description", lambda text: grid(description=text), 5_000),
    ("table", lambda text: grid(table=text), 200),
])
def test_a_text_field_at_its_limit_is_read_and_one_over_is_refused_with_the_spec_named(where, make, limit):
    """Each free-text field: `limit` characters accepted; one more refused, the spec named first, the value cut."""
    parse_spec(make("r" * limit))
    with pytest.raises(SpecError) as err:
        parse_spec(make("r" * (limit + 1)))
    value = "r" * (limit + 1)
    assert str(err.value) == (f"<spec>: {where}: {limit + 1:,} characters ({brief(value)}); allowed: at most "
                              f"{limit:,} {LIMIT_NOTE}")


def test_rows_of_a_search_spec_are_refused_by_name():
    refused(search(), "--rows: this spec has a search, not grid rows; --rows picks rows of a grid spec", rows=["a"])


def test_seeds_are_allowed_up_to_their_limit_and_expected_seeds_too(monkeypatch):
    import sweeps.spec as spec_module

    monkeypatch.setattr(spec_module, "MAX_SEEDS", 3)
    assert parse_spec(grid(seeds=[0, 1, 2])).seeds == [0, 1, 2]
    refused(grid(seeds=[0, 1, 2, 3]), "seeds: 4 of them; allowed: at most 3")
    refused(grid(expected_seeds=4), "expected_seeds: 4; allowed: a positive integer up to 3")


def test_custom_resources_that_are_not_a_mapping_are_refused_as_such_whatever_they_hold():
    long_name = "n" * 201  # as a mapping's key it would be refused for its length; in a list, for not being a mapping
    with pytest.raises(SpecError) as err:
        parse_spec(grid(resources={"custom": [long_name]}))
    assert str(err.value).startswith("<spec>: resources.custom: ['nnn") and "allowed: a mapping of Ray custom " \
        "resource names to amounts > 0" in str(err.value)

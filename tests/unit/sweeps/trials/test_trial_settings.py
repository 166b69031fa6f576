"""A trial's settings for Tune (sweeps/trials/trial_settings.py): what every stage writes, read back into the same
Config
and meta as the shapes the code before issue 27 wrote (a resumed sweep's trials arrive in those), and read once
per trial by the driver's callbacks."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
from ray.tune.search.variant_generator import generate_variants
from ray.tune.utils.util import merge_dicts, unflatten_dict

import sweeps.trials.progress_callback as progress_callback
import sweeps.trials.trial_settings as trial_settings
from sweeps.trials.mlflow_callback import TrackingCallback
from sweeps.trials.progress_callback import ProgressCallback
from sweeps.spec import parse_spec
from sweeps.trials.trial_settings import grid_space, resolve_trial, search_space, view

# Two rows of a 10-epoch spec run with --epochs 5 (so spec_* differ from what is trained), two seeds
GRID = {"name": "unit", "preset": "mnist5k-ssat-mbi", "table": "schedules", "column_group": "mnist5k/cnn-small",
        "seeds": [3, 4], "grid": [{"row": "lin", "set": {"attack.schedule": "linear", "attack.t": 6}},
                                  {"row": "const", "set": {"attack.schedule": "const"}}]}
SEARCH = {"name": "unit", "preset": "mnist5k-ssat-mbi", "seeds": [3],
          "search": {"num_samples": 2, "space": {"method.beta": {"float": [0.0, 1.0]}},
                     "early_stopping": {"grace_period": 7}}}
EXTRA = {"git_commit": "abc", "git_dirty": False, "lock_sha256": "f00", "teacher_dir": "/teachers",
         "compile_cache": "/cache", "teacher_run_id": "run1"}


def old_meta(spec) -> dict:
    """The meta every trial of a sweep shared, as the code before issue 27 wrote it (sweeps/trials/tuners.py _meta)."""
    return {"sweep": spec.name, "table": spec.table, "column_group": spec.column_group,
            "expected_seeds": spec.expected_seeds, "cpus": spec.resources["cpu"], "gpu": spec.resources["gpu"],
            "metrics": spec.metric, **EXTRA}


def grid_trials_now(spec) -> list[dict]:
    """The trial configs Tune makes of today's grid param_space (its own variant generator, no Ray started)."""
    return [variant["config"] for _, variant in generate_variants({"config": grid_space(spec, spec.trials(), EXTRA)})]


def search_trial_now(spec, sampled: dict) -> dict:
    """A search trial's config as Tune makes it: the param_space merged with what Optuna suggested
    (sweeps.space's define-by-run sampler; ray.tune.search.SearchGenerator)."""
    return merge_dicts(search_space(spec, EXTRA, scheduler="asha"), unflatten_dict(sampled))


def same(a: tuple, b: tuple) -> None:
    assert a[0].to_dict() == b[0].to_dict()
    assert a[1] == b[1]


def test_every_stage_writes_one_shape():
    spec = parse_spec(GRID, epochs=5)
    grid = grid_trials_now(spec)
    assert len(grid) == 4 and all(set(c) == {"trial"} and set(c["trial"]) == {"meta", "base"} for c in grid)
    search = search_trial_now(parse_spec(SEARCH), {"method.beta": 0.7})
    assert set(search) == {"trial", "method.beta"} and set(search["trial"]) == {"meta", "base"}
    assert search["trial"]["meta"]["scheduler"] == "asha"


def test_a_grid_trial_reads_back_as_the_shapes_before_issue_27_did():
    spec = parse_spec(GRID, epochs=5)
    for t, now in zip(spec.trials(), grid_trials_now(spec)):
        meta = {**old_meta(spec), "stage": t.stage, "row": t.row, "seed": t.seed, **t.spec_meta}
        wrapped = {"trial": {"meta": meta, "cfg": t.config.to_dict()}}   # grid stages wrote this
        unwrapped = {"meta": copy.deepcopy(meta), "cfg": t.config.to_dict()}  # the same, without the grid's key
        cfg, m = resolve_trial(now)
        same((cfg, m), resolve_trial(wrapped))
        same((cfg, m), resolve_trial(unwrapped))
        assert cfg.to_dict() == t.config.replace(**{"data.teacher_dir": "/teachers",
                                                    "system.compile_cache": "/cache"}).to_dict()
        assert (m["row"], m["seed"], m["sampled"], m["epochs"]) == (t.row, t.seed, {}, 5)
        assert m["record"].params["spec.epochs"] == 10 and m["trial_key"] == m["record"].key


def test_a_confirm_trial_expects_as_many_seeds_as_the_confirm_stage_has():
    """The search table marks a configuration short of seeds against this (the search itself samples at one)."""
    spec = parse_spec({**SEARCH, "search": {**SEARCH["search"], "confirm": {"top_k": 1, "seeds": [10, 11, 12]}}})
    (cfg, *_) = [v["config"] for _, v in generate_variants(
        {"config": grid_space(spec, spec.confirm_trials([{"method.beta": 0.7}]), EXTRA)})]
    assert resolve_trial(cfg)[1]["record"].tags["ssat.expected_seeds"] == 3
    assert resolve_trial(search_trial_now(spec, {"method.beta": 0.7}))[1]["record"].tags["ssat.expected_seeds"] == 1


def test_a_search_trial_reads_back_as_the_shape_before_issue_27_did():
    spec = parse_spec(SEARCH, epochs=5)
    old = {"meta": {**old_meta(spec), "scheduler": "asha", "stage": "search", "row": "", "seed": 3},
           "base": spec.base, "method.beta": 0.7}  # Optuna's sampled value beside the param_space's keys
    cfg, m = resolve_trial(search_trial_now(spec, {"method.beta": 0.7}))
    same((cfg, m), resolve_trial(old))
    assert (cfg.method.beta, cfg.seed, cfg.optim.epochs) == (0.7, 3, 5)
    assert (m["sampled"], m["scheduler"], m["record"].params["method.beta"]) == ({"method.beta": 0.7}, "asha", 0.7)
    # a confirm trial is a grid trial of the sampled configuration
    (confirm, *_) = spec.confirm_trials([{"method.beta": 0.7}])
    (now, *_) = [v["config"] for _, v in generate_variants({"config": grid_space(spec, [confirm], EXTRA)})]
    old = {"trial": {"meta": {**old_meta(spec), "stage": "confirm", "row": "confirm-1", "seed": confirm.seed},
                     "cfg": confirm.config.to_dict()}}
    now, old = resolve_trial(now), resolve_trial(old)
    # the same config and key; a confirm trial saved before its meta said which configuration it confirms is named
    # by its row (today's by its rank and the search's label: test_schema.py)
    assert now[0].to_dict() == old[0].to_dict() and now[1]["trial_key"] == old[1]["trial_key"]
    assert (old[1]["record"].name, now[1]["record"].name.split()[0]) == (f"confirm-1 s{confirm.seed}", "top1")


def test_a_view_reads_every_shape_without_building_a_config():
    spec = parse_spec(SEARCH, epochs=5)
    meta = {"row": "r", "seed": 0}
    for config, sampled in (({"trial": {"meta": meta, "base": spec.base}, "method.beta": 0.5}, {"method.beta": 0.5}),
                            ({"meta": meta, "base": spec.base, "method.beta": 0.5}, {"method.beta": 0.5}),
                            ({"trial": {"meta": meta, "cfg": spec.base}}, {}),
                            ({"meta": meta, "cfg": spec.base}, {})):
        assert view(config)[:3] == (meta, sampled, 5)
    broken = view({"trial": {"meta": meta, "base": {"optim": {}}}})
    assert (broken.epochs, broken.name) == (0, "")  # unknown, never an error
    h = spec.config_for({"method.beta": 0.5}, 0).config_hash()
    assert view({"trial": {"meta": {**meta, "sweep": "s", "stage": "search"}, "base": spec.base},
                 "method.beta": 0.5}).name == f"beta=0.5 #{h[:4]} s0"
    with pytest.raises(ValueError, match="not a trial's settings"):
        resolve_trial({"trial": {"meta": meta}})


class Recorder:
    """A Tracker stand-in that records every operation the callback sends."""

    def __init__(self):
        self.ops: list[tuple] = []

    def __getattr__(self, op):
        return lambda *args, **kwargs: self.ops.append((op, *args))


def counted(monkeypatch, module, name: str) -> list:
    calls = []
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_the_mlflow_callback_builds_a_trials_config_once_not_at_every_result(monkeypatch, tmp_path):
    spec = parse_spec(GRID, epochs=5)
    first, second = [SimpleNamespace(config=c, trial_id=f"t{i}", last_result={}, checkpoint=None)
                     for i, c in enumerate(grid_trials_now(spec)[:2])]
    builds = counted(monkeypatch, trial_settings, "from_dict")
    cb = TrackingCallback("sqlite:///unused.db", "unit", str(tmp_path), None)
    cb._tracker = Recorder()
    cb.on_trial_start(0, [first], first)
    for epoch in (1, 2, 3):
        cb.on_trial_result(0, [first], first, {"epoch": epoch, "val/clean": 50.0})
    first.last_result = {"epoch": 3}
    cb.on_trial_complete(0, [first], first)
    ran = [op[0] for op in cb._tracker.ops]
    assert ran.count("log_epoch") == 3 and ran[-1] == "end"  # the hooks ran through (a failure only prints)
    assert len(builds) == 1
    cb.on_trial_result(0, [first, second], second, {"epoch": 1})
    assert len(builds) == 2  # another trial: its own config
    # the cache never travels with the pickled callback (Tune stores it with the experiment)
    assert cb.__getstate__()["_trials"] == {} and len(cb._trials) == 2


def test_the_progress_callback_reads_a_trials_settings_once(monkeypatch, capsys):
    spec = parse_spec(SEARCH, epochs=5)
    trial = SimpleNamespace(config=search_trial_now(spec, {"method.beta": 0.25}), trial_id="t0", last_result={},
                            status="RUNNING", error_file=None)
    reads = counted(monkeypatch, progress_callback, "view")
    cb = ProgressCallback(total=1, total_epochs=5)
    for epoch in (1, 2):
        cb.on_trial_result(0, [trial], trial, {"epoch": epoch})
    h = spec.config_for({"method.beta": 0.25}, 3).config_hash()
    assert f"beta=0.25 #{h[:4]} s3: epoch 2" in capsys.readouterr().out
    assert len(reads) == 1
    cb.setup()  # a restored driver starts over
    cb.on_trial_result(0, [trial], trial, {"epoch": 3})
    assert len(reads) == 2

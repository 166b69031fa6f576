"""A trial's settings as Ray Tune holds them: the one place that writes them (a stage's param_space) and reads
them back (a trial's config -> its validated Config and its meta).

Every stage writes one shape; a trial's config is

    {"trial": {"meta": {...}, "base": nested config}, "<dotted.key>": sampled value, ...}

A grid or confirm stage is a grid search over its trials' {"meta", "base"} (the base is the trial's whole
config); a search stage gives every trial the spec's base, and Optuna's define-by-run sampler adds the sampled
values as top-level dotted keys. The trial's Config is its base with the sampled values and its meta's seed.
The meta holds what the run record needs besides the config (sweep, table, column group, stage, row, seed,
expected seeds, `spec_*`), its resources (cpus, gpu), the metrics, the sweep's code version, its shared folders,
the teacher run, the search's scheduler, fault injection, and in a trial that continues one Tune ended before its
last epoch, the checkpoint it continues from (`continue_from`).

Shapes Tune saved before issue 27 are read too: `Tuner.restore` goes on with the trial configs and the
param_space Tune saved, so a resumed sweep's trials (and a restored search's new samples) arrive in them:

    {"trial": {"meta": ..., "cfg": nested config}}                grid and confirm trials: the whole config
    {"meta": ..., "cfg": nested config}                             the same, unwrapped
    {"meta": ..., "base": nested config, "<dotted.key>": value}     search trials
"""
from __future__ import annotations

import os
from typing import Callable, NamedTuple

from ssat.config import Config, from_dict

from ..legacy import old_trial_settings
from ..tracking.run_records import trial_record

KEY = "trial"  # a grid search needs its values under a key; every stage uses the same one
FAULT_VARS = ("SSAT_FAULT", "SSAT_FAULT_ONCE_DIR")  # fault injection travels with the trial (sweeps.trials.trainable)


# ---- writing: a stage's param_space ---------------------------------------------------------------------
def _meta(spec, extra: dict) -> dict:
    """The meta entries every trial of the sweep shares; `extra`: code version, shared folders, teacher run."""
    faults = {v: os.environ[v] for v in FAULT_VARS if os.environ.get(v)}
    return {"sweep": spec.name, "table": spec.table, "column_group": spec.column_group,
            "expected_seeds": spec.expected_seeds, "cpus": spec.resources["cpu"], "gpu": spec.resources["gpu"],
            "metrics": spec.metric, **faults, **extra}


def _settings(meta: dict, base: dict) -> dict:
    return {"meta": meta, "base": base}


def grid_space(spec, trials: list, extra: dict) -> dict:
    """A grid or confirm stage's param_space: a grid search over its trials (`sweeps.spec.Trial`)."""
    from ray import tune

    meta = _meta(spec, extra)
    if spec.search:  # a confirm stage: each configuration runs once per confirm seed
        meta["expected_seeds"] = len(spec.search["confirm"]["seeds"])
    return {KEY: tune.grid_search([_settings({**meta, "stage": t.stage, "row": t.row, "seed": t.seed, **t.spec_meta},
                                             t.config.to_dict()) for t in trials])}


def continuation_space(short: list[tuple[dict, str]]) -> dict:
    """The param_space that continues trials Tune completed before their last epoch: a grid over their configs as
    Tune saved them (so their Config, run key and name stay theirs), each meta naming `continue_from`, the last
    checkpoint the short trial registered (`sweeps.trials.trainable` resumes from it)."""
    from ray import tune

    def one(config: dict, checkpoint: str) -> dict:
        inner = config.get(KEY, config)
        return {**inner, "meta": {**inner["meta"], "continue_from": checkpoint}}

    return {KEY: tune.grid_search([one(c, ckpt) for c, ckpt in short])}


def search_space(spec, extra: dict, scheduler: str | None = None) -> dict:
    """A search stage's param_space: the spec's base config at its first seed; Optuna adds the sampled values.
    `scheduler`: the name of the early-stopping scheduler, if any (a short trial was stopped by it)."""
    meta = _meta(spec, extra)
    if scheduler:
        meta["scheduler"] = scheduler
    return {KEY: _settings({**meta, "stage": "search", "row": "", "seed": spec.seeds[0]}, spec.base)}


# ---- reading: a trial's config, in any shape Tune saved -----------------------------------------------
def _unpack(config: dict) -> tuple[dict, dict | None, dict, bool]:
    """(meta, nested config or None, sampled values, whether the nested config is the trial's whole config)."""
    inner = config.get(KEY, config)
    meta = inner.get("meta", {})
    old = old_trial_settings(inner)
    if old is not None:
        return meta, old, {}, True
    return meta, inner.get("base"), {k: v for k, v in config.items() if "." in k}, False


def resolve_trial(config: dict) -> tuple[Config, dict]:
    """Tune config -> (validated Config, meta with this trial's run record, key, sampled values and epochs)."""
    meta, base, sampled, whole = _unpack(config)
    if base is None:
        raise ValueError(f"not a trial's settings (no nested config): keys {sorted(config)}")
    meta = dict(meta)
    cfg = from_dict(base) if whole else from_dict(base, {**sampled, "seed": meta["seed"]})
    meta["record"] = trial_record(cfg, meta, sampled)
    meta["trial_key"] = meta["record"].key
    meta["sampled"] = sampled
    meta["epochs"] = cfg.optim.epochs
    where = {k: meta[m] for k, m in (("data.teacher_dir", "teacher_dir"), ("system.compile_cache", "compile_cache"))
             if meta.get(m) and cfg.to_flat()[k] is None}  # the sweep's shared folders, unless the config names its own
    return (cfg.replace(**where) if where else cfg), meta


class TrialView(NamedTuple):
    """What a progress line needs of a trial; a line never fails on one whose Config cannot be built."""
    meta: dict
    sampled: dict
    epochs: int  # the epochs its nested config asks for (a search's: the base the sampler varies); 0 unknown
    name: str    # its one name (sweeps.tracking.run_records.trial_name), "" when its Config cannot be built


def view(config: dict) -> TrialView:
    meta, base, sampled, _ = _unpack(config)
    try:
        name = resolve_trial(config)[1]["record"].name
    except Exception:  # noqa: BLE001 - the line says the trial id instead
        name = ""
    return TrialView(meta, sampled, int(((base or {}).get("optim") or {}).get("epochs") or 0), name)


def once_per_trial(cache: dict, trial, read: Callable[[dict], object]):
    """`read(trial.config)`, made once per trial and kept in `cache` (the caller's, by Tune's trial id): Tune hands
    a driver-side callback the trial's config with every result, and it never changes while the trial lives.
    A callback serves one stage, and Tune's trial ids are unique within it."""
    if trial.trial_id not in cache:
        cache[trial.trial_id] = read(trial.config)
    return cache[trial.trial_id]

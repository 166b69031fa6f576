"""A spec's `search` block: the Optuna space, how many samples, early stopping and the confirm stage, validated
with the run's options applied or refused, never ignored:

- `--samples N` and `--top-k K` replace search.num_samples and search.confirm.top_k;
- `--epochs N` rescales the space's epoch numbers (attack.t, method.rho_double_epoch, optim.swa_start) and the
  grace period as it rescales the base config's; a range or a choice that would collapse is refused with the
  smallest --epochs that keeps it;
- a search samples each configuration once, at one seed: more seeds (in the spec or with --seeds) are refused,
  and so is an override (or --set) of a key the space samples, which the sampled value would replace.
"""
from __future__ import annotations

import math
import re
import typing
from pathlib import Path
from typing import Any

from ssat.config import SECTIONS
from ssat.messages import brief
from ssat.epoch_scaling import scale_epoch

from .errors import check_keys
from .space import check_space, corner_configs
from .spec_checks import MAX_TRIALS, int_in, is_integer, is_number, spec_error, up_to

SEARCH_KEYS = {"num_samples", "space", "early_stopping", "confirm", "sampler_seed"}
# The epoch numbers a space may sample, rescaled by --epochs as ssat.config.scale_epochs rescales a config:
# key -> its lowest value after scaling.
EPOCH_KEYS = {"attack.t": 1, "method.rho_double_epoch": 1, "optim.swa_start": 0}


def line_of(path: str, key: str) -> str:
    """' (line N)': where `key:` first appears in the spec file, for an error that points at it; '' without a file."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*:")
    return next((f" (line {i})" for i, line in enumerate(lines, 1) if pattern.match(line)), "")


def _scaled(values: list, key: str, epochs: int, old: int) -> list:
    """Each value as ssat.config.scale_epochs scales it (None, no epoch, stays; optim.swa_start before the last)."""
    lo = EPOCH_KEYS[key]
    out = [None if v is None or str(v).lower() in ("none", "null") else scale_epoch(int(v), epochs, old, lo)
           for v in values]
    return [v if v is None or lo else min(v, epochs - 1) for v in out]


def _collapses(dist: dict, key: str, epochs: int, old: int) -> bool:
    """Two distinct values of the range (its ends: scaling keeps their order) or of the choice become one (None in
    any spelling is one value)."""
    vals = dist["int" if "int" in dist else "choice"]
    distinct = lambda n: len(set(map(str, _scaled(vals, key, n, old))))  # noqa: E731
    return distinct(epochs) < distinct(old)


def rescale_space(space: dict, epochs: int, old: int, path: str) -> dict:
    """The space of an `old`-epoch search in a run of `epochs` (see the module's doc)."""
    out = {}
    for key, dist in space.items():
        if key == "optim.lr_milestones" or (key not in EPOCH_KEYS and key.startswith("optim.") and "epoch" in key):
            raise spec_error(path, f"--epochs {epochs}: search.space.{key}{line_of(path, key)} holds epoch numbers "
                                   "this rescaling does not know; give the space for the run's length instead")
        if key not in EPOCH_KEYS:  # (check_space made every entry a distribution, and an epoch key's not float)
            out[key] = dist
            continue
        kind = "int" if "int" in dist else "choice"
        if _collapses(dist, key, epochs, old):  # (only when shrinking: at `old` epochs nothing collapses)
            need = next(n for n in range(epochs + 1, old + 1) if not _collapses(dist, key, n, old))
            raise spec_error(path, f"--epochs {epochs}: search.space.{key}{line_of(path, key)} {{{kind}: "
                                   f"{dist[kind]}}} of the {old}-epoch search becomes "
                                   f"{_scaled(dist[kind], key, epochs, old)}, which no longer holds "
                                   f"{'a range' if kind == 'int' else 'distinct values'}; the smallest --epochs that "
                                   f"keeps it is {need}")
        out[key] = {**dist, kind: _scaled(dist[kind], key, epochs, old)}
    return out


def parse_search(search: Any, path: str, spec, *, samples: int | None, top_k: int | None, seeds_option: bool,
                 sets: dict | None, overrides: dict | None, rescaled_from: int | None) -> dict:
    """The validated search block (`spec` is the sweeps.spec.Spec being built: its base config, seeds, metrics)."""
    if not isinstance(search, dict):
        raise spec_error(path, "search: expected a mapping with num_samples, space, confirm")
    check_keys(search, SEARCH_KEYS, path, "search.")
    if len(spec.seeds) > 1:
        given = f"--seeds {' '.join(map(str, spec.seeds))}" if seeds_option else f"seeds: {brief(spec.seeds)}"
        raise spec_error(path, f"{given}: a search trains each sampled configuration once, at one seed; give one seed"
                               f"{' (--seeds N)' if seeds_option else ''}. The confirm stage re-runs the best "
                               "configurations with the seeds of search.confirm.seeds")
    n = int_in(search.get("num_samples", 10) if samples is None else samples, path,
               "--samples" if samples is not None else "search.num_samples", hi=MAX_TRIALS,
               allowed=up_to(MAX_TRIALS) + " (a limit no real search comes near: split a larger one into several "
                                           "sweeps)")
    space = search.get("space")
    if not isinstance(space, dict) or not space:
        raise spec_error(path, "search.space: expected a mapping {dotted.key: {choice|float|int: ...}}")
    check_space(space, path)
    _not_fixed(space, sets or {}, overrides or {}, path)
    for key, dist in space.items():
        if "float" in dist and _int_field(key):
            raise spec_error(path, f"search.space.{key}.float: {brief(dist['float'])}; {key} takes integers, so use "
                                   f"{{int: [low, high]}} (a float range would sample values like 2.5)")
    es = search.get("early_stopping")
    if rescaled_from is not None:
        epochs = spec.base["optim"]["epochs"]
        space = rescale_space(space, epochs, rescaled_from, path)
        if isinstance(es, dict) and is_integer(es.get("grace_period")):
            es = {**es, "grace_period": scale_epoch(es["grace_period"], epochs, rescaled_from)}
    for sampled in corner_configs(space):
        spec.config_for(sampled, spec.seeds[0])  # every choice value validates on the base config
    return {"num_samples": n, "space": space, "early_stopping": _early_stopping(es, path, spec, space),
            "confirm": _confirm(search.get("confirm") or {}, path, spec, top_k),
            "sampler_seed": int_in(search.get("sampler_seed", 0), path, "search.sampler_seed", lo=0, hi=2**32 - 1,
                                   allowed="an integer in 0..2**32-1")}


def _not_fixed(space: dict, sets: dict, overrides: dict, path: str) -> None:
    """A key the space samples cannot also be fixed: every trial's sampled value would replace it."""
    for key in space:
        if key in sets:
            raise spec_error(path, f"--set {key}={brief(sets[key])}: {key} is sampled by the search "
                                   f"(search.space.{key}{line_of(path, key)}), so every trial would replace this "
                                   "value; remove it from the space to fix it, or drop --set")
        if key in overrides:
            raise spec_error(path, f"overrides.{key}: {brief(overrides[key])}: {key} is also sampled by the search "
                                   f"(search.space.{key}), which replaces this value in every trial; keep one")


def _early_stopping(es: Any, path: str, spec, space: dict) -> dict | None:
    """ASHA's settings: a grace period no shorter than the largest t in the space and the first learning-rate
    milestone, and the share of trials kept at each rung."""
    if es is None:
        return None
    if not isinstance(es, dict):
        raise spec_error(path, "search.early_stopping: expected {grace_period: N} or null")
    check_keys(es, {"grace_period", "reduction_factor"}, path, "search.early_stopping.")
    if spec.multi_objective:
        raise spec_error(path, "search.early_stopping: ASHA needs a single metric; remove it for multi-objective")
    val_every = spec.base["eval"]["val_every"]
    if val_every > 1:
        raise spec_error(path, f"search.early_stopping: ASHA compares trials by their metric at its rungs (epoch "
                               f"grace_period, then x reduction_factor), but eval.val_every {val_every} validates only "
                               "every few epochs, so a rung may have no metric; set eval.val_every: 1 or remove "
                               "early_stopping")
    need = _min_grace(spec, space)
    gp = int_in(es.get("grace_period", need), path, "search.early_stopping.grace_period", lo=need,
                allowed=f">= {need} (the largest t in the space and the first learning-rate milestone: earlier "
                        "scores are not comparable)")
    rf = es.get("reduction_factor", 3)
    if not is_number(rf) or not (rf > 1 and math.isfinite(rf)):
        raise spec_error(path, f"search.early_stopping.reduction_factor: {brief(rf)}; allowed: a number > 1 (ASHA "
                               "keeps 1/reduction_factor of the trials at each rung)")
    return {"grace_period": gp, "reduction_factor": rf}


def _confirm(confirm: Any, path: str, spec, top_k: int | None = None) -> dict:
    """The confirm stage: how many of the search's best configurations it re-runs (--top-k or search.confirm.top_k),
    and with which fresh seeds."""
    if not isinstance(confirm, dict):
        raise spec_error(path, "search.confirm: expected {top_k: K, seeds: [...]}")
    check_keys(confirm, {"top_k", "seeds"}, path, "search.confirm.")
    cseeds = confirm.get("seeds", [100, 101, 102])
    top_k = int_in(confirm.get("top_k", 3) if top_k is None else top_k, path,
                   "--top-k" if top_k is not None else "search.confirm.top_k", hi=MAX_TRIALS, allowed=up_to(MAX_TRIALS))
    if isinstance(cseeds, list) and top_k * len(cseeds) > MAX_TRIALS:
        raise spec_error(path, f"search.confirm: top_k {top_k:,} x {len(cseeds):,} seeds = {top_k * len(cseeds):,} "
                               f"trials; allowed: at most {MAX_TRIALS:,}")
    if (not isinstance(cseeds, list) or not cseeds or not all(is_integer(s) for s in cseeds)
            or len(set(cseeds)) != len(cseeds) or set(cseeds) & set(spec.seeds)):
        raise spec_error(path, f"search.confirm.seeds: {brief(cseeds)}; allowed: a non-empty list of fresh seeds (not "
                               f"among the search seeds {spec.seeds})")
    return {"top_k": top_k, "seeds": cseeds}


def _int_field(key: str) -> bool:
    """Whether a dotted config key holds an integer (int or int | None)."""
    from ssat.config import _section_class

    section, _, name = key.partition(".")
    if key == "seed":
        return True
    tp = typing.get_type_hints(_section_class(section)).get(name) if section in SECTIONS else None
    return tp is int or set(typing.get_args(tp)) == {int, type(None)}


def _min_grace(spec, space: dict) -> int:
    ts = [spec.base["attack"].get("t") or 1, *spec.base["optim"]["lr_milestones"][:1]]
    if "attack.t" in space:
        d = space["attack.t"]
        vals = d.get("int") or d.get("choice")  # validated: integers, integral strings or None
        ts += [int(v) for v in vals if v is not None and str(v).lower() not in ("none", "null")]
    return max(ts)

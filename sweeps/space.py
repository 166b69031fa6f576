"""Search spaces written in YAML, compiled to an Optuna define-by-run function.

    method.beta:      {float: [0.0, 1.0]}
    method.rho0:      {float: [0.02, 0.1], log: true}
    attack.schedule:  {choice: [const, linear, curious]}
    attack.t:         {int: [2, 8], when: {attack.schedule: [linear, curious]}}
    attack.gamma:     {float: [1.0, 1.5], when: {attack.schedule: [curious]}}

`when` makes a parameter conditional on earlier ones, so gamma is never sampled for Linear nor t for Const.
The function is module-level and bound with functools.partial: a closure cannot be pickled, and a function
defined in __main__ makes Tuner.restore from another script fail to restore and then hang.
"""
from __future__ import annotations

import functools
from typing import Any

from ssat.messages import brief

from .errors import SpecError, check_keys

DIST_KEYS = {"choice", "float", "int", "log", "when"}
MAX_KEY = 200        # a dotted config key is a few dozen characters
MAX_CHOICES = 1_000  # values of one choice


def check_space(space: dict, path: str = "<spec>") -> None:
    seen: list[str] = []
    for key, dist in space.items():
        if isinstance(key, str) and len(key) > MAX_KEY:
            raise SpecError(f"{path}: search.space: a key of {len(key):,} characters ({brief(key)}); allowed: a dotted "
                            f"config key of at most {MAX_KEY} characters")
        where = f"search.space.{key}"
        if not isinstance(key, str):
            raise SpecError(f"{path}: {where}: expected a dotted config key such as 'method.beta', got {brief(key)}")
        if not isinstance(dist, dict):
            raise SpecError(f"{path}: {where}: expected {{choice: [...]}}, {{float: [lo, hi]}} or {{int: [lo, hi]}}")
        check_keys(dist, DIST_KEYS, path, f"{where}.")
        kinds = [k for k in ("choice", "float", "int") if k in dist]
        if len(kinds) != 1:
            raise SpecError(f"{path}: {where}: expected exactly one of choice, float, int; got {sorted(dist)}")
        kind, val = kinds[0], dist[kinds[0]]
        if kind == "choice":
            if not isinstance(val, list) or not val:
                raise SpecError(f"{path}: {where}.choice: expected a non-empty list, got {brief(val)}")
            if len(val) > MAX_CHOICES:
                raise SpecError(f"{path}: {where}.choice: {len(val):,} values; allowed: at most {MAX_CHOICES:,} (a "
                                "limit no real search comes near)")
        else:
            num = int if kind == "int" else (int, float)
            if (not isinstance(val, list) or len(val) != 2 or not all(isinstance(v, num) and not isinstance(v, bool)
                                                                       for v in val) or val[0] >= val[1]):
                raise SpecError(f"{path}: {where}.{kind}: {brief(val)}; allowed: [low, high] with low < high")
            if dist.get("log") and val[0] <= 0:
                raise SpecError(f"{path}: {where}: a log range needs low > 0, got {val[0]}")
        if not isinstance(dist.get("when") or {}, dict):
            raise SpecError(f"{path}: {where}.when: {brief(dist['when'])}; expected {{earlier.key: [values]}}")
        for parent, allowed in (dist.get("when") or {}).items():
            if parent not in seen:
                raise SpecError(f"{path}: {where}.when: {brief(parent)} must be a parameter listed before {brief(key)}")
            if not isinstance(allowed, list) or not allowed:
                raise SpecError(f"{path}: {where}.when.{parent}: expected a non-empty list of values")
        seen.append(key)


def _active(dist: dict, chosen: dict) -> bool:
    return all(chosen.get(p, object()) in vals for p, vals in (dist.get("when") or {}).items())


def define_by_run(trial, space: dict) -> None:
    """Optuna define-by-run: sample every active parameter, parents before children."""
    chosen: dict[str, Any] = {}
    for key, dist in space.items():
        if not _active(dist, chosen):
            continue
        if "choice" in dist:
            chosen[key] = trial.suggest_categorical(key, dist["choice"])
        elif "float" in dist:
            chosen[key] = trial.suggest_float(key, *dist["float"], log=bool(dist.get("log")))
        else:
            chosen[key] = trial.suggest_int(key, *dist["int"], log=bool(dist.get("log")))
    return None


def space_function(space: dict):
    """A picklable define-by-run function for OptunaSearch(space=...)."""
    return functools.partial(define_by_run, space=space)


def corner_configs(space: dict) -> list[dict]:
    """Assignments that touch every choice value and both ends of every range (validated up front)."""
    out = []
    for key, dist in space.items():
        values = dist.get("choice") or dist.get("float") or dist.get("int")
        for v in values:
            sampled: dict[str, Any] = {}
            for parent, allowed in (dist.get("when") or {}).items():
                sampled[parent] = allowed[0]
            sampled[key] = v
            for other, od in space.items():  # children made active by this assignment take their first value
                if other not in sampled and (od.get("when") and _active(od, sampled)):
                    sampled[other] = (od.get("choice") or od.get("float") or od.get("int"))[0]
            out.append(sampled)
    return out

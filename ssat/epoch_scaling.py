"""`--epochs N`: every epoch number of a config (schedule lengths, rho's doubling, learning-rate milestones, the
start of weight averaging) rescaled from its run's length to N, collisions refused."""
from __future__ import annotations

import json
import math

from .config import AttackConfig, OptimConfig
from .config_checks import MAX_EPOCHS, ConfigError
from .messages import brief

def scale_epoch(x: int, epochs: int, old: int, lo: int = 1) -> int:
    """Epoch number `x` of an `old`-epoch run in a run of `epochs`: max(lo, round_half_up(x * epochs / old))."""
    try:
        return max(lo, int(math.floor(x * epochs / old + 0.5)))
    except OverflowError:
        raise ConfigError(f"--epochs: {epochs}; allowed: a positive integer small enough to rescale "
                          f"the {old}-epoch run") from None


def scale_epochs(d: dict, epochs: int) -> dict:
    """Rescale every epoch number of a nested config dict to a run of `epochs` epochs.

    Rule: x -> max(1, round_half_up(x * epochs / E)) for t, rho_double_epoch and lr milestones;
    swa_start -> round_half_up(swa_start * epochs / E), 0 allowed, at most epochs - 1 (the last epoch is still
    averaged: 60 of 70 epochs is 1 of 2, not 2). Milestones that collide after
    rounding are refused with a message rather than silently merged.
    """
    d = json.loads(json.dumps(d))
    old = int(d.get("optim", {}).get("epochs", OptimConfig.epochs))
    if not 1 <= epochs <= MAX_EPOCHS:
        raise ConfigError(f"--epochs: {brief(epochs)}; allowed: a positive integer up to {MAX_EPOCHS:,} (a limit no "
                          "real run comes near)")

    def sc(x, lo=1):
        return None if x is None else scale_epoch(x, epochs, old, lo)

    d.setdefault("optim", {})["epochs"] = epochs
    att = d.setdefault("attack", {})
    att["t"] = sc(att.get("t", AttackConfig.t))  # None (no schedule length) stays None
    meth = d.setdefault("method", {})
    if meth.get("rho_double_epoch") is not None:
        meth["rho_double_epoch"] = sc(meth["rho_double_epoch"])
    opt = d["optim"]
    ms = opt.get("lr_milestones", OptimConfig().lr_milestones)
    scaled = [sc(x) for x in ms]
    if len(set(scaled)) != len(scaled):
        fits = next((n for n in range(epochs + 1, max(old, epochs) + 1)
                     if len({scale_epoch(x, n, old, 1) for x in ms}) == len(ms)), None)
        least = (f"the smallest --epochs that keeps them apart is {fits}" if fits
                 else "no smaller --epochs keeps them apart")
        raise ConfigError(f"--epochs {epochs}: lr milestones {ms} of a {old}-epoch run collide after "
                          f"scaling ({scaled}); {least}, or set optim.lr_milestones explicitly")
    opt["lr_milestones"] = scaled
    if opt.get("swa_start") is not None:
        opt["swa_start"] = min(sc(opt["swa_start"], lo=0), epochs - 1)
    return d

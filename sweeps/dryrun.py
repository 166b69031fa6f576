"""`python -m sweeps run SPEC --dry-run`: every trial, its schedules and its cost, before anything starts."""
from __future__ import annotations

import json

from ssat.config import Config
from ssat.schedules import schedule_table

from .spec import Spec

# Minutes per epoch measured by the paper (Table 8, one GPU) for the union methods / AWR, per (dataset, model).
PAPER_MIN_PER_EPOCH = {("cifar10", "wrn-28-5"): (3.06, 3.87), ("svhn", "wrn-28-2"): (2.00, 4.45),
                       ("cifar100", "wrn-28-8"): (5.64, 4.45)}


def gpu_hours(cfg: Config) -> float | None:
    """Estimated GPU-hours of one trial with a whole GPU, from the paper's per-epoch times (None: no figure)."""
    fig = PAPER_MIN_PER_EPOCH.get((cfg.data.dataset, cfg.model.name))
    if fig is None:
        return None
    return cfg.optim.epochs * fig[1 if cfg.is_awr else 0] / 60


def dry_run(spec: Spec, out=print) -> None:
    trials = spec.trials() if spec.grid else []
    out(f"sweep {spec.name}: preset {spec.preset}, stage {spec.stage}, {len(trials) or spec.search['num_samples']} "
        f"trial(s), resources per trial {spec.resources}, max concurrent {spec.max_concurrent}")
    total = 0.0
    configs = [(t.row, t.seed, t.config) for t in trials] or [("search base", spec.seeds[0], spec.base_config())]
    for row, seed, cfg in configs:
        h = gpu_hours(cfg)
        total += h or 0.0
        out(f"- row {row!r} seed {seed} key {cfg.config_hash()}: "
            f"GPU-hours {'n/a (no benchmark figure for this model)' if h is None else f'{h:.2f}'}")
        out("  config " + json.dumps(cfg.to_flat(), sort_keys=True))
        table = schedule_table(cfg)  # the trainer's per-epoch values
        table["eps_max"] = [round(x, 6) for x in table["eps_max"]]
        for k, v in table.items():
            out(f"  {k:8s} " + " ".join(f"{x:g}" for x in v))
    if spec.search:
        out(f"search space {json.dumps(spec.search['space'])}; confirm {spec.search['confirm']}")
        per = gpu_hours(spec.base_config()) or 0.0
        total = per * (spec.search["num_samples"] + spec.search["confirm"]["top_k"] * len(spec.search["confirm"]["seeds"]))
    out(f"estimated GPU-hours (whole-GPU trials, the paper's per-epoch times): {total:.1f}; nothing was started")

"""`python -m sweeps run SPEC --dry-run`: every trial, its schedules and its cost, before anything starts.

One line per trial (row, seed, the settings that differ from the spec's base, GPU-hours), each distinct schedule
once as its breakpoints (`eps 0.14/255 -> 10/255 by epoch 70, then 8/255 from 71; rho 0.05, 0.1 from 75; lr 0.1,
x0.1 from 60, ...`), and the totals. `--verbose` adds every trial's full config and per-epoch values.
GPU-hours rest on the paper's per-epoch times (Table 8) and, for a GPU named with `--gpu`, on the project's own
measured epoch times in benchmarks/results/; every estimate says which figure it rests on.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from ssat.config import Config
from ssat.schedules import schedule_table

from .spec import Spec

# Minutes per epoch measured by the paper (Table 8, one GPU) for the union methods / AWR, per (dataset, model).
PAPER_MIN_PER_EPOCH = {("cifar10", "wrn-28-5"): (3.06, 3.87), ("svhn", "wrn-28-2"): (2.00, 4.45),
                       ("cifar100", "wrn-28-8"): (5.64, 4.45)}
RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
# Training images per epoch of a union-batching run (the measured figures are per CIFAR-10 epoch of 49,000).
EPOCH_IMAGES = {"cifar10": 49_000, "cifar100": 49_000, "svhn": 72_257}


def gpu_hours(cfg: Config) -> float | None:
    """Estimated GPU-hours of one trial with a whole GPU, from the paper's per-epoch times (None: no figure)."""
    fig = PAPER_MIN_PER_EPOCH.get((cfg.data.dataset, cfg.model.name))
    if fig is None:
        return None
    return cfg.optim.epochs * fig[1 if cfg.is_awr else 0] / 60


def measured_epoch_seconds(gpu: str, results: Path = RESULTS) -> dict[str, tuple[float, str]]:
    """model -> (seconds per CIFAR-10 epoch of the real Trainer in its default mode, where it comes from) for GPUs
    whose name contains `gpu` (case-insensitive), from the JSON lines of benchmarks/results/*.json|*.log. Several
    measurements give their median: eager steps are bound by the host, and the same GPU type ran them 1.5x apart
    on two machines."""
    found: dict[str, list[tuple[float, str, str]]] = {}
    for f in sorted(results.glob("*.json")) + sorted(results.glob("*.log")):
        device = None
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict):
                continue
            device = rec.get("device", device)
            model, secs = rec.get("trainer_model"), rec.get("cifar10_epoch_s")
            default = not rec.get("baseline") and rec.get("graph_mode") in (None, "off")  # what a run does by default
            if device and gpu.lower() in str(device).lower() and model and secs and default:
                found.setdefault(model, []).append((float(secs), str(device), f.name))
    out = {}
    for model, runs in found.items():
        secs = statistics.median(s for s, _, _ in runs)
        files = ", ".join(sorted({name for _, _, name in runs}))
        what = f"the median of {len(runs)} runs" if len(runs) > 1 else "1 run"
        out[model] = (secs, f"{runs[-1][1]}: real Trainer, SSAT-MBI {model}, {secs:.1f} s per CIFAR-10 epoch "
                            f"({what}; {files})")
    return out


def _measured_hours(cfg: Config, measured: dict) -> tuple[float, str] | None:
    if cfg.is_awr or cfg.model.name not in measured or cfg.data.dataset not in EPOCH_IMAGES:
        return None  # measured for union batching only
    secs, source = measured[cfg.model.name]
    return cfg.optim.epochs * secs * EPOCH_IMAGES[cfg.data.dataset] / 49_000 / 3600, source


# ---- schedules as breakpoints ---------------------------------------------------------------------
def _segments(v: list[float]) -> list[tuple[int, int]]:
    """Maximal runs of epochs (0-based, inclusive) over which the series changes by a constant step. Two points
    followed by a constant run (or the end) are a jump, not a ramp."""
    out, start = [], 0
    while start < len(v):
        end = start
        if start + 1 < len(v):
            d, end = v[start + 1] - v[start], start + 1
            while end + 1 < len(v) and math.isclose(v[end + 1] - v[end], d, rel_tol=1e-6, abs_tol=1e-12):
                end += 1
            jump = end == start + 1 and not math.isclose(d, 0.0, abs_tol=1e-12) and (
                end + 1 == len(v) or math.isclose(v[end + 1], v[end], abs_tol=1e-12))
            end = start if jump else end
        out.append((start, end))
        start = end + 1
    return out


def describe(v: list[float], fmt) -> str:
    """A per-epoch series (epoch 1 first) as breakpoints: `a -> b by epoch 70, then c from 71`."""
    parts = []
    for s, e in _segments(v):
        if e == s or math.isclose(v[s], v[e], abs_tol=1e-12):
            parts.append(fmt(v[s]) if not parts else f"{fmt(v[s])} from {s + 1}")
        elif not parts:
            parts.append(f"{fmt(v[s])} -> {fmt(v[e])} by epoch {e + 1}")
        else:
            parts.append(f"{fmt(v[s])} -> {fmt(v[e])} over epochs {s + 1}-{e + 1}")
    return ", then ".join(parts)


def _eps_fmt(cfg: Config):
    unit = round(cfg.eps * 255)
    if math.isclose(cfg.eps * 255, unit, abs_tol=1e-9):  # k/255: say it so
        return lambda x: f"{x * 255:.2f}".rstrip("0").rstrip(".") + "/255"
    return lambda x: f"{x:.4g}"


def schedule_lines(cfg: Config) -> str:
    """`eps ...; rho ...; lr ...` for one config (the trainer's per-epoch values, `ssat.schedules.schedule_table`)."""
    table = schedule_table(cfg)
    lr0 = table["lr"][0]
    lr = describe(table["lr"], lambda x: f"{x:g}" if x == lr0 else f"x{x / lr0:g}")
    return (f"eps {describe(table['eps_max'], _eps_fmt(cfg))}; rho {describe(table['rho'], lambda x: f'{x:g}')}; "
            f"lr {lr}")


# ---- the dry run ------------------------------------------------------------------------------------
def _differs(cfg: Config, base: dict) -> str:
    flat = {k: v for k, v in cfg.to_flat().items() if k != "seed"}
    diff = [f"{k}={json.dumps(v)}" for k, v in sorted(flat.items()) if base.get(k) != v]
    return ", ".join(diff) or "the base"


def dry_run(spec: Spec, out=print, *, verbose: bool = False, gpu: str | None = None) -> None:
    trials = spec.trials() if spec.grid else []
    n = len(trials) or spec.search["num_samples"]
    out(f"sweep {spec.name}: preset {spec.preset}, stage {spec.stage}, {n} trial(s), resources per trial "
        f"{spec.resources}, max concurrent {spec.max_concurrent}")
    base = {k: v for k, v in spec.base_config().to_flat().items() if k != "seed"}
    measured = measured_epoch_seconds(gpu) if gpu else {}
    if gpu and not measured:
        out(f"  (no measured epoch time for a GPU named {gpu!r} in {RESULTS}: the paper's figures only)")
    configs = [(t.row, t.seed, t.config) for t in trials] or [("search base", spec.seeds[0], spec.base_config())]
    schedules: dict[str, list[str]] = {}
    total, total_measured, sources, n_measured = 0.0, 0.0, set(), 0
    for row, seed, cfg in configs:
        h, m = gpu_hours(cfg), _measured_hours(cfg, measured)
        total += h or 0.0
        cost = "GPU-hours n/a (no per-epoch figure for this dataset and model)" if h is None else \
            f"GPU-hours {h:.2f} (paper)"
        if m is not None:
            sources.add(m[1])
            cost += f", {m[0]:.2f} ({gpu}, measured)"
        total_measured += m[0] if m is not None else (h or 0.0)
        n_measured += m is not None
        out(f"- {row} seed {seed}: {_differs(cfg, base)} | {cost}")
        schedules.setdefault(schedule_lines(cfg), []).append(f"{row}/s{seed}")
        if verbose:
            out("  config " + json.dumps(cfg.to_flat(), sort_keys=True))
            for k, v in schedule_table(cfg).items():
                out(f"  {k:8s} " + " ".join(f"{round(x, 6):g}" for x in v))
    out("schedules:")
    for text, users in schedules.items():
        who = ", ".join(sorted(set(u.rsplit("/", 1)[0] for u in users)))
        out(f"  {text}  [{who}]")
    runs = n
    if spec.search:
        c = spec.search["confirm"]
        runs = spec.search["num_samples"] + c["top_k"] * len(c["seeds"])
        out(f"search space {json.dumps(spec.search['space'])}; confirm {c}")
        total *= runs
        total_measured *= runs
    out(f"total: {runs} trial(s), estimated GPU-hours {total:.1f} (whole-GPU trials at the paper's Table 8 "
        "per-epoch times)" + (f"; {total_measured:.1f} with the measured time where there is one ({n_measured} of "
                              f"{len(configs)} trials: {'; '.join(sorted(sources))}), the paper's elsewhere"
                              if sources else "") + "; nothing was started")

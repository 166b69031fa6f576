"""How long a sweep of CPU trials takes on this machine, measured now: the dry run of a spec whose trials ask no GPU
(resources.gpu 0, or --cpu-only), where GPU-hours say nothing.

Each distinct training configuration (`step_key`: what changes a step's work, not the values it works with) is timed
here with sweeps.costs.measure's jobs, the ones `calibrate` runs on a GPU, in this process and with the trial's
threads: a
few steps of the real Trainer on data of the trial's shape, the evaluation passes of its validations and final
evaluation (clean, PGD-k, AutoAttack's attacks at a reduced budget; seconds per 1,000 images), and the FixMatch
teacher's steps. A trial is its epochs x its steps per epoch x the measured step, plus its validations, SWA BN passes
and final evaluation (sweeps.costs.model' image counts); the sweep is its teachers, one after another on the driver,
then
its trials, `concurrency` at a time in the spec's order, each to the first free slot. NOT_MEASURED is what is left
out, and the dry run says it.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import time

from ssat.config import Config
from ssat.datasets import DATASET_INFO

from .model import (EPOCH_IMAGES, Unit, attack_work, final_images, swa_epochs, teacher_identity, units,
                    validation_images)
from ..spec import Spec

TRAIN_STEPS = 4  # steady steps timed per configuration, after sweeps.costs.measure's warm-up and schedule-change steps
TEACHER_STEPS = 4  # FixMatch steps timed, after one
EVAL_N, AA_N = 100, 10  # images per evaluation figure (at most eval.batch_size), per AutoAttack attack figure
# Config keys (prefixes) whose values change what a step computes with, not how much: left out of `step_key`
VALUES_ONLY = ("seed", "data.", "eval.", "teacher.", "optim.epochs", "optim.lr", "optim.momentum",
               "optim.weight_decay", "optim.nesterov", "optim.swa_", "attack.eps", "attack.schedule", "attack.t",
               "attack.gamma", "attack.step_", "method.rho", "method.tau", "method.label_smoothing",
               "method.gamma_prime")
NOT_MEASURED = ("Ray's start and each trial's start-up (data, model), the checkpoint and report of every epoch, "
                "trials slowing each other on shared cores, the teachers' evaluations; a teacher already in "
                "runs/teachers is not trained again")


def cpu_trials(spec: Spec) -> bool:
    """Whether the sweep's trials run on CPUs (resources.gpu 0: also what --cpu-only makes of any spec)."""
    return not spec.resources["gpu"]


def step_key(cfg: Config) -> str:
    """What a training step's time depends on: the dataset and every setting but those in VALUES_ONLY."""
    flat = {k: v for k, v in cfg.to_flat().items() if not k.startswith(VALUES_ONLY)}
    return json.dumps({**flat, "data.dataset": cfg.data.dataset})  # one order: Config.to_flat's


def epoch_steps(cfg: Config) -> int:
    """Training steps an epoch takes: the images it goes through (union: labeled and pseudo-labeled; AWR: the
    unlabeled ones), from the split's sizes on the dataset's training set, in batches of step_images (a last
    batch of one image is left out, as ssat.datasets does)."""
    d, info = cfg.data, DATASET_INFO[cfg.data.dataset]
    n_val = info.n_val if d.n_val is None else d.n_val
    pool = EPOCH_IMAGES[d.dataset] + info.n_val - n_val  # the training set less this split's validation images
    labeled = pool if d.fully_labeled else info.n_labeled if d.n_labeled is None else d.n_labeled
    unlabeled = 0 if d.fully_labeled else pool - (0 if d.unlabeled_includes_labeled else labeled)
    unlabeled = unlabeled if d.n_unlabeled is None else min(unlabeled, d.n_unlabeled)
    n = unlabeled if cfg.batching.name == "awr" else labeled + unlabeled
    b = cfg.batching.step_images(cfg)
    return n // b + (1 if n % b >= 2 else 0)


def concurrency(spec: Spec, cores: int) -> int:
    """Trials at once on this machine: the spec's max_concurrent, at most as many as its cores hold at
    resources.cpu each."""
    return max(1, min(spec.max_concurrent, int(cores / spec.resources["cpu"] + 1e-9)))  # cpu > 0 (sweeps.spec)


def makespan(durations: list[float], slots: int) -> float:
    """Seconds until the last trial ends when each starts, in order, as soon as one of `slots` is free."""
    free = [0.0] * slots
    for d in durations:
        free[free.index(min(free))] += d
    return max(free)  # slots >= 1


# ---- the measurements ------------------------------------------------------------------------------------------
def _threads(spec: Spec, cfg: Config) -> int:
    """A trial's torch threads (sweeps.trials.trainable.reset_process_state)."""
    return cfg.system.threads or max(1, int(spec.resources["cpu"]))


def _swa_images(cfg: Config) -> dict[str, int]:
    """The SWA BN passes over the epoch's images (optim.swa_bn recompute)."""
    n = swa_epochs(cfg) * epoch_steps(cfg) * cfg.batching.step_images(cfg)
    return {"swa-bn": n} if n else {}


def _passes(cfg: Config, stage: str) -> list[dict[str, int]]:
    """attack -> images of a trial's validations, SWA passes and final evaluation."""
    return [validation_images(cfg), _swa_images(cfg), final_images(cfg, stage)]


def _eval_attacks(us: list[Unit]) -> dict[str, tuple[Config, set]]:
    """[model, tf32] (JSON) -> a config and every attack its trials run (AutoAttack as its attacks)."""
    out: dict[str, tuple[Config, set]] = {}
    for u in us:
        got = out.setdefault(json.dumps([u.cfg.model.name, bool(u.cfg.eval.tf32)]), (u.cfg, set()))[1]
        got.update(a for i in _passes(u.cfg, u.stage) for a in attack_work(i, u.cfg.data.dataset))
    return out


def _teachers(us: list[Unit]) -> dict[str, Config]:
    """One config per distinct teacher (trained once per split, sweeps.driver.teacher_stage)."""
    return {k: u.cfg for u in us if (k := teacher_identity(u.cfg)) is not None}


def _timed(kind: str, cfg: Config, threads: int | None, **job) -> tuple[list[dict] | None, str]:
    """sweeps.costs.measure's job of `kind` run here: its records, or None and the error; its log kept off the
    console."""
    from ssat.runtime import threads as torch_threads

    from .measure import run_here

    try:
        with torch_threads(threads), contextlib.redirect_stderr(io.StringIO()):
            return run_here({"kind": kind, "config": cfg.to_dict(), "device": "cpu", **job}), ""
    except Exception as exc:  # noqa: BLE001 - a figure that fails is "not measured", with the reason
        return None, f"{type(exc).__name__}: {str(exc)[:200]}"


def measure(spec: Spec) -> dict:
    """Time here each distinct training configuration (seconds a step), each model's evaluation passes (seconds
    per 1,000 images) and each teacher (steps per second); a figure that fails is None, its error kept."""
    from ssat.engine import GRAPH_WARMUP

    t0, us = time.perf_counter(), units(spec)
    out: dict = {"training": {}, "eval": {}, "teacher": {}, "errors": [], "load": os.getloadavg()[0]}
    for u in us:
        if (key := step_key(u.cfg)) in out["training"]:
            continue
        recs, err = _timed("training", u.cfg, _threads(spec, u.cfg), steps=TRAIN_STEPS)
        r = recs[0] if recs else None  # every step it timed (a schedule change's GRAPH_WARMUP + 1, then the steady
        out["training"][key] = r and (r["schedule_change_s"] + r["steps_timed"] * r["step_ms"] / 1e3) / (
            GRAPH_WARMUP + 1 + r["steps_timed"])  # ones): on a CPU every step runs alike
        out["errors"] += [f"training ({u.row}): {err}"] if err else []
    for key, (cfg, attacks) in _eval_attacks(us).items():
        recs, err = _timed("eval", cfg, _threads(spec, cfg), attacks=sorted(attacks),
                           n=min(EVAL_N, cfg.eval.batch_size), aa_n=AA_N)
        out["eval"][key] = {r["attack"]: r["s_per_1000"] for r in recs or []}
        out["errors"] += [f"evaluation ({cfg.model.name}): {err}"] if err else []
    for key, cfg in _teachers(us).items():
        recs, err = _timed("teacher", cfg, cfg.system.threads, steps=TEACHER_STEPS, warmup=1)
        out["teacher"][key] = recs[0]["steps_per_s"] if recs else None
        out["errors"] += [f"teacher: {err}"] if err else []
    return {**out, "seconds": time.perf_counter() - t0}


# ---- the estimate ----------------------------------------------------------------------------------------------
def trial_seconds(cfg: Config, stage: str, figs: dict) -> dict[str, float | None]:
    """One trial's seconds per stage on this machine (None: a figure it needs was not measured)."""
    step = figs["training"].get(step_key(cfg))
    per_1000 = figs["eval"].get(json.dumps([cfg.model.name, bool(cfg.eval.tf32)]), {})

    def passes(images: dict[str, int]) -> float | None:
        work = attack_work(images, cfg.data.dataset)
        return None if any(a not in per_1000 for a in work) else sum(n / 1000 * per_1000[a] for a, n in work.items())

    val, swa, final = map(passes, _passes(cfg, stage))
    return {"training": None if step is None else cfg.optim.epochs * epoch_steps(cfg) * step, "validation": val,
            "SWA": swa, "evaluation": final}


def machine(cpuinfo: str = "/proc/cpuinfo") -> str:
    """This machine's processor, as /proc/cpuinfo names it (else platform's word for it)."""
    try:
        with open(cpuinfo) as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine() or "unknown processor"


def wall_time(spec: Spec, figs: dict, cores: int | None = None) -> dict:
    """The sweep's wall time here from `measure`'s figures: each unit's trial seconds per stage, the teachers'
    seconds, trials at once and the total (complete: every figure measured; else what was is a lower bound)."""
    cores = cores or len(os.sched_getaffinity(0))
    us, slots = units(spec), concurrency(spec, cores)
    per_unit = [trial_seconds(u.cfg, u.stage, figs) for u in us]
    rates = {k: (c.teacher.steps, figs["teacher"].get(k)) for k, c in _teachers(us).items()}
    teachers = [steps / rate if rate else None for steps, rate in rates.values()]
    durations = [sum(v or 0.0 for v in s.values()) for s, u in zip(per_unit, us) for _ in range(u.count)]
    trials_s, teachers_s = makespan(durations, slots), sum(t or 0.0 for t in teachers)
    complete = None not in teachers and all(v is not None for s in per_unit for v in s.values())
    return {"units": per_unit, "teachers_s": teachers_s, "teachers": len(teachers), "trials_s": trials_s,
            "trials": len(durations), "trial_s": [min(durations), max(durations)],  # a spec has trials
            "concurrency": slots, "cores": cores, "total_s": teachers_s + trials_s, "complete": complete,
            "machine": machine(), "measured_s": figs["seconds"], "figures": figs}


# ---- how it reads -----------------------------------------------------------------------------------------------
SHORT = {"training": "train", "validation": "val", "SWA": "SWA", "evaluation": "eval"}


def dur(s: float) -> str:
    """Seconds to read: 0.45 s, 41 s, 4.7 min, 2.3 h."""
    return f"{s:.2g} s" if s < 10 else f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else \
        f"{s / 3600:.1f} h"


def unit_text(secs: dict[str, float | None]) -> str:
    """A trial's seconds per stage here, for its line of the dry run."""
    return "this machine: " + ", ".join(f"{SHORT[s]} {'not measured' if v is None else dur(v) if v else '-'}"
                                        for s, v in secs.items())


def total_text(wt: dict) -> str:
    return ("" if wt["complete"] else "at least ") + f"{dur(wt['total_s'])} wall time"


def _training_lines(spec: Spec, us: list[Unit], steps: dict) -> list[str]:
    """One line per distinct training configuration: what differs from the first, its measured step, its rows."""
    rows: dict[str, list[Unit]] = {}
    for u in us:
        rows.setdefault(step_key(u.cfg), []).append(u)
    base, out = json.loads(step_key(us[0].cfg)), []
    for key, group in rows.items():
        cfg, step, n = group[0].cfg, steps.get(key), epoch_steps(group[0].cfg)
        diff = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(json.loads(key).items()) if base.get(k) != v)
        fig = "not measured" if step is None else (f"{1e3 * step:.1f} ms a step x {n} steps = {dur(n * step)} an "
                                                   f"epoch on {_threads(spec, cfg)} thread(s)")
        out.append(f"  training   {cfg.model.name} {cfg.method.name}{f' ({diff})' if diff else ''}: {fig} "
                   f"[{', '.join(dict.fromkeys(u.row for u in group))}]")
    return out


def lines(spec: Spec, wt: dict) -> list[str]:
    """The dry run's block on this machine's wall time: each figure measured, each stage, what is not measured."""
    figs, us = wt["figures"], units(spec)
    load = f", load average {figs['load']:.1f} then: a busy machine measures slower" if "load" in figs else ""
    out = [f"wall time on this machine ({wt['machine']}, {wt['cores']} core(s)), from figures measured here now "
           f"(in {dur(wt['measured_s'])}{load}; --no-measure skips it):", *_training_lines(spec, us, figs["training"])]
    for key, per in figs["eval"].items():
        model, tf32 = json.loads(key)
        what = ", ".join(f"{a} {v:.3g}" for a, v in sorted(per.items())) + " s/1000 images" if per else "not measured"
        out.append(f"  evaluation {model}{' TF32' if tf32 else ''}: {what}")
    for key, cfg in _teachers(us).items():
        rate = figs["teacher"].get(key)
        out.append(f"  teacher    {cfg.teacher.model or cfg.model.name}: " + ("not measured" if not rate else
                   f"{rate:.1f} FixMatch steps/s x {cfg.teacher.steps} steps = {dur(cfg.teacher.steps / rate)}"))
    lo, hi = wt["trial_s"]
    out += [f"  teachers   {dur(wt['teachers_s'])}: {wt['teachers']} teacher(s), one after another on the driver, "
            "before the trials",
            f"  trials     {dur(wt['trials_s'])}: {wt['trials']} trial(s) of {dur(lo)}"
            + (f" to {dur(hi)}" if dur(hi) != dur(lo) else "") + f" each, {wt['concurrency']} at a time "
            f"(max_concurrent {spec.max_concurrent}, {spec.resources['cpu']} CPU(s) a trial on {wt['cores']} core(s))"
            + ("; search trials at full length: at most, as ASHA may stop them early" if spec.search else ""),
            f"  total      {total_text(wt)}",
            f"  not measured: {NOT_MEASURED}"]
    return out + [f"  failed to measure: {e}" for e in figs["errors"]]

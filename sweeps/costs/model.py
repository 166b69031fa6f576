"""What a sweep costs on a GPU type: the cost model under `--dry-run --gpu NAME`, `calibrate` and docs/costs.md.

A sweep is units of trials (`units`) and the teachers of its splits; each costs GPU-hours per stage (teachers,
training, validation, SWA, evaluation) from figures measured on that GPU alone (`Measurements`: the JSON lines of
benchmarks/results/ and of the user's own calibrations, the user's first), never scaled from another GPU. A figure
is keyed by what its cost depends on (`training_key`, `teacher_figure_key`, `eval_key`); `needed_figures` lists a
sweep's keys, which is what `python -m sweeps calibrate` measures. `estimate` returns a sweep's costs as a dict.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ssat.config import Config
from ssat.datasets import DATASET_INFO
from ssat.fixmatch import resolved_teacher_config
from ssat.runtime import training_precision

from .measurements import (AA_ATTACKS, KINDS, Measurements, calibration_dir, measured_devices,
                           read_records, resolve_gpu)
from ..spec import Spec

# Minutes per epoch measured by the paper (Table 8, one GPU) per (dataset, model) and batching.
PAPER_MIN_PER_EPOCH = {("cifar10", "wrn-28-5"): {"union": 3.06, "awr": 3.87},
                       ("svhn", "wrn-28-2"): {"union": 2.00, "awr": 4.45},
                       ("cifar100", "wrn-28-8"): {"union": 5.64, "awr": 4.45}}
# Training images per epoch of a union-batching run (the training set less validation); the measured epoch times
# are per CIFAR-10 epoch of 49,000 images (MEASURED_EPOCH) and scale with these.
EPOCH_IMAGES = {"cifar10": 49_000, "cifar100": 49_000, "svhn": 72_257, "mnist5k": 3_500}
MEASURED_EPOCH = 49_000
TEST_IMAGES = {"cifar10": 10_000, "cifar100": 10_000, "svhn": 26_032, "mnist5k": 1_000}  # whole test sets
# AutoAttack attacks only the images still robust: the share of a checkpoint's images each attack runs on, from
# the paper's Table 1 SSAT-MBI row of the dataset (APGD-CE: clean accuracy; APGD-T: PGD-40, standing in for
# after APGD-CE; FAB-T and Square: AutoAttack). Another dataset: every image (an upper bound).
AA_SHARES = {"cifar10": (0.8331, 0.5539, 0.5121, 0.5121), "svhn": (0.9140, 0.5919, 0.4983, 0.4983),
             "cifar100": (0.5065, 0.3084, 0.2639, 0.2639)}
STAGES = ("teachers", "training", "validation", "SWA", "evaluation")
TRIAL_STAGES = STAGES[1:]

def gpu_hours(cfg: Config) -> float | None:
    """Estimated GPU-hours of one trial with a whole GPU, from the paper's per-epoch times (None: no figure)."""
    fig = PAPER_MIN_PER_EPOCH.get((cfg.data.dataset, cfg.model.name), {}).get(cfg.batching.name)
    return None if fig is None else cfg.optim.epochs * fig / 60


# ---- what will run on a GPU ---------------------------------------------------------------------------
def engine_mode(cfg) -> str:
    """The step engine a trial runs on a GPU: "graph+compile", "graph", "compile" or "eager" (+ "+fused" with fused
    forwards: system.fused_forward auto or on, and a model without dropout), from cfg.system alone (graph_mode
    "auto"/"on"/"off", the config having read a bool as on/off; compile "auto", "off" or a torch.compile mode) by the
    step engine's own rules (ssat/engine.py compile_mode and graph_plan): on CUDA auto compiles ("default") and auto
    graph mode captures, for union and AWR methods alike, unless the compile mode captures CUDA graphs itself. A
    capture that fails at run time (the trainer then steps eagerly, with the reason) is not foreseen here."""
    from ssat.engine import compile_mode, graph_plan

    s = cfg.system
    compiled = compile_mode(s.compile, "cuda")
    capture, _ = graph_plan(s.graph_mode, "cuda", compiled)
    fused = s.fused_forward != "off" and cfg.model.dropout == 0  # ssat.engine.fused_plan on CUDA: dropout refuses
    return {(True, True): "graph+compile", (True, False): "graph", (False, True): "compile"}.get(
        (capture, compiled != "off"), "eager") + ("+fused" if fused else "")


def teacher_precision(cfg: Config) -> str:
    """The teacher's training precision on a GPU (ssat.fixmatch.teacher_precision: auto and fp16 train in bf16)."""
    from ssat.fixmatch import teacher_precision as on_device

    return on_device(cfg.system.precision, "cuda")


def teacher_identity(cfg: Config) -> str | None:
    """What makes a teacher (the split's fields and the resolved teacher config, as ssat.fixmatch.teacher_key
    hashes them); None when the trial needs none (fully labeled data, or data.pseudo_labels names a file)."""
    from ssat.train import needs_teacher  # the rule sweeps.driver.teacher_stage follows

    if not needs_teacher(cfg) or cfg.data.pseudo_labels:
        return None
    d = cfg.to_dict()["data"]
    split = {k: d[k] for k in ("dataset", "split_seed", "n_labeled", "n_val", "n_unlabeled",
                               "unlabeled_includes_labeled", "labeled_idx_file", "fully_labeled")}
    return json.dumps([split, resolved_teacher_config(cfg)], sort_keys=True)


def validation_epochs(cfg: Config) -> int:
    """Epochs that validate: every eval.val_every-th and always the last two (ssat.train.Trainer.epochs)."""
    last = cfg.optim.epochs
    return sum(1 for e in range(1, last + 1) if e % cfg.eval.val_every == 0 or e >= last - 1)


def swa_epochs(cfg: Config) -> int:
    """Epochs whose SWA model gets its BN statistics recomputed (one pass over the training images each)."""
    o = cfg.optim
    return o.epochs - o.swa_start if o.swa_start is not None and o.swa_bn == "recompute" else 0


def validation_images(cfg: Config) -> dict[str, int]:
    """attack -> images of a trial's validations: clean and PGD-10 on the validation set."""
    n_val = DATASET_INFO[cfg.data.dataset].n_val if cfg.data.n_val is None else cfg.data.n_val
    n = validation_epochs(cfg) * n_val
    return {"clean": n, "pgd10": n} if n else {}


def swa_images(cfg: Config) -> dict[str, int]:
    """The SWA statistics passes (train-mode forwards, no gradient) over the training images (EPOCH_IMAGES)."""
    n = swa_epochs(cfg) * EPOCH_IMAGES[cfg.data.dataset]
    return {"swa-bn": n} if n else {}


def final_images(cfg: Config, stage: str) -> dict[str, int]:
    """attack -> images of a trial's final evaluation (ssat.train.Trainer.final_evaluation): clean and every PGD-k
    on each checkpoint, AutoAttack on the AutoAttack checkpoints for its seeds; none for a search trial
    (sweeps/trials/trainable.py _final)."""
    e = cfg.eval
    if stage == "search":
        return {}
    whole = TEST_IMAGES[cfg.data.dataset]
    n = whole if e.test_n is None else min(e.test_n, whole)
    out = {"clean": n * len(e.checkpoints)}
    for k in e.pgd_steps:
        out[f"pgd{k}"] = out.get(f"pgd{k}", 0) + n * len(e.checkpoints)
    aa_ckpts = [c for c in e.checkpoints if c in e.autoattack_checkpoints]
    if e.autoattack and (e.autoattack_seeds is None or cfg.seed in e.autoattack_seeds) and aa_ckpts:
        out["autoattack"] = min(e.autoattack_n or n, n) * len(aa_ckpts)
    return out


# ---- costs ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cost:
    """GPU-hours of one stage of one trial (or teacher): None when a figure it needs is not measured; the figures
    it rests on and the ones missing. Zero hours with neither: nothing to do."""
    hours: float | None
    sources: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()

    def scaled(self, factor: float) -> "Cost":
        return Cost(None if self.hours is None else self.hours * factor, self.sources, self.missing)

    @property
    def work(self) -> bool:
        return bool(self.sources or self.missing)


def training_key(cfg: Config) -> tuple:
    """(model, method, step engine, precision): what a trial's epoch time on a GPU depends on."""
    return cfg.model.name, cfg.method.name, engine_mode(cfg), training_precision(cfg.system.precision, "cuda")


def teacher_figure_key(cfg: Config) -> tuple:
    """(model, precision) of the trial's FixMatch teacher on a GPU."""
    return cfg.teacher.model or cfg.model.name, teacher_precision(cfg)


def eval_key(cfg: Config, attack: str) -> tuple:
    """(model, attack, TF32): an evaluation figure of the trial's model as it evaluates (eval.tf32)."""
    return cfg.model.name, attack, bool(cfg.eval.tf32)


def training_cost(cfg: Config, m: Measurements) -> Cost:
    """Epochs x the measured epoch time of this model, method, step engine and precision on the GPU."""
    key = training_key(cfg)
    model, method, mode, prec = key
    what = f"{mode}, {method} {model} {prec}"
    f = m.figure("training", *key)
    if f is None:
        return Cost(None, missing=(f"training epoch ({what})",))
    hours = cfg.optim.epochs * f.value * EPOCH_IMAGES[cfg.data.dataset] / MEASURED_EPOCH / 3600
    return Cost(hours, (f"{m.device}, {what}: {f.value:.1f} s/epoch, {f.cite()}",))


def attack_work(images: dict[str, int], dataset: str) -> dict[str, float]:
    """attack -> images it runs on. AutoAttack on n images is a clean pass over them and each of its attacks on
    the share still robust when it starts (AA_SHARES); the other attacks run on every image."""
    out: dict[str, float] = {}
    for attack, n in images.items():
        parts = zip(("clean", *AA_ATTACKS), (1.0, *AA_SHARES.get(dataset, (1.0,) * 4))) \
            if attack == "autoattack" else ((attack, 1.0),)
        for a, share in parts:
            out[a] = out.get(a, 0.0) + n * share
    return out


def attack_cost(images: dict[str, int], cfg: Config, m: Measurements) -> Cost:
    """Images per attack (attack_work) x the measured seconds per 1,000 images of the trial's model on the GPU,
    with TF32 as the trial evaluates (eval.tf32)."""
    work = attack_work(images, cfg.data.dataset)
    figs = {a: m.figure("eval", *eval_key(cfg, a)) for a in work}
    label = f"{cfg.model.name}{', TF32' if cfg.eval.tf32 else ''}"
    missing = tuple(f"{label} evaluation: {a}" for a, f in figs.items() if f is None)
    if missing:
        return Cost(None, missing=missing)
    sources = []
    for attack, f in figs.items():
        robust = attack in AA_ATTACKS
        share = (f"; run on the images still robust: {100 * AA_SHARES[cfg.data.dataset][AA_ATTACKS.index(attack)]:.1f}%"
                 f" of AutoAttack's (the paper's Table 1, SSAT-MBI, {cfg.data.dataset})"
                 if robust and cfg.data.dataset in AA_SHARES else "; run on every image (an upper bound)"
                 if robust else "")
        sources.append(f"{m.device}, {label} {attack}: {f.value:.2f} s/1000 {'robust ' if robust else ''}images, "
                       f"{f.cite()}{share}")
    return Cost(sum(n / 1000 * figs[a].value / 3600 for a, n in work.items()), tuple(sources))


def trial_costs(cfg: Config, stage: str, m: Measurements) -> dict[str, Cost]:
    """One trial alone on a whole GPU, per stage."""
    return {"training": training_cost(cfg, m),
            "validation": attack_cost(validation_images(cfg), cfg, m),
            "SWA": attack_cost(swa_images(cfg), cfg, m),
            "evaluation": attack_cost(final_images(cfg, stage), cfg, m)}


def teacher_cost(cfg: Config, m: Measurements) -> Cost:
    """teacher.steps / the measured FixMatch steps per second of the teacher's model and precision."""
    model, prec = key = teacher_figure_key(cfg)
    f = m.figure("teacher", *key)
    if f is None:
        return Cost(None, missing=(f"FixMatch teacher steps/s ({model} {prec})",))
    return Cost(cfg.teacher.steps / f.value / 3600,
                (f"{m.device}, FixMatch teacher {model} {prec}: {f.value:.1f} steps/s, {f.cite()}",))


def needed_figures(spec: Spec) -> dict[tuple, Config]:
    """(kind, *key) -> a config that needs it: every figure the sweep's GPU cost rests on (what `calibrate`
    measures). A sweep of CPU trials (resources.gpu 0) needs none."""
    if not trials_per_gpu(spec.resources["gpu"]):
        return {}
    us, out = units(spec), {}
    for u in us:
        out.setdefault(("training", *training_key(u.cfg)), u.cfg)
        images = [validation_images(u.cfg), swa_images(u.cfg), final_images(u.cfg, u.stage)]
        for attack in {a for i in images for a in attack_work(i, u.cfg.data.dataset)}:
            out.setdefault(("eval", *eval_key(u.cfg, attack)), u.cfg)
    for cfg in _teachers(us):
        out.setdefault(("teacher", *teacher_figure_key(cfg)), cfg)
    return out


def trials_per_gpu(share: float) -> int:
    """Trials sharing one GPU at resources.gpu = share (0: CPU trials)."""
    return 0 if not share else max(1, int(1 / share + 1e-9))


def packing_factor(n: int, model: str, mode: str, m: Measurements) -> tuple[float, str]:
    """GPU-hours of a packed trial per GPU-hour alone, and why. n trials share a GPU; each runs n / gain times as
    long as alone and holds 1/n of it, so 1/gain, where gain = total images/s of n packed trials over one's
    (medians; MPS records first, as the cluster runs MPS; then records in the trial's graph mode). With no
    packing record of n and 1 trials of this model on this GPU: no gain (time slicing), said so."""
    if n <= 1:
        return 1.0, ""
    graphed = mode.startswith("graph")  # engine_mode: graph, graph+compile, either with +fused
    for mps, graph in ((True, graphed), (True, not graphed), (False, graphed), (False, not graphed)):
        at_n, at_1 = (m.figure("packing", model, mps, graph, k) for k in (n, 1))
        if at_n and at_1:
            gain = at_n.value / at_1.value
            return 1 / gain, (f"{m.device}, {n} packed {model} trials, {'MPS' if mps else 'no MPS'}, "
                              f"{'graph mode' if graph else 'eager steps'}: gain {gain:.2f} "
                              f"({at_n.value:.0f} / {at_1.value:.0f} images/s; {at_n.cite()}; {at_1.cite()})")
    return 1.0, (f"no packing record of {n} and 1 {model} trials on {m.device}: assumed no gain (time slicing: "
                 "GPU-hours as if each ran alone)")


# ---- a sweep's cost ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """Trials that cost the same: one grid trial, or a search's (or a confirm stage's) trials of one seed."""
    row: str
    seed: int
    cfg: Config
    stage: str
    count: int = 1


def units(spec: Spec) -> list[Unit]:
    """A grid's trials; a search's num_samples search trials (no final evaluation) and its top_k confirm trials
    per confirm seed (full budget, final evaluation), at the base config."""
    if spec.grid:
        return [Unit(t.row, t.seed, t.config, t.stage) for t in spec.trials()]
    c = spec.search["confirm"]
    return [Unit("search", spec.seeds[0], spec.base_config(), "search", spec.search["num_samples"])] + [
        Unit(f"confirm top-{c['top_k']}", s, spec.config_for({}, s), "confirm", c["top_k"]) for s in c["seeds"]]


def _summary(costs: list[tuple[Cost, int]]) -> dict:
    """A stage's total over (cost, how many) pairs: measured GPU-hours, how many trials (or teachers) with work
    there are and how many of them are not measured, the figures used and the ones missing."""
    todo = [(c, k) for c, k in costs if c.work]
    return {"gpu_hours": sum(c.hours * k for c, k in todo if c.hours is not None), "of": sum(k for _, k in todo),
            "not_measured": sum(k for c, k in todo if c.hours is None),
            "sources": sorted({s for c, _ in todo for s in c.sources}),
            "missing": sorted({s for c, _ in todo for s in c.missing})}


def _teachers(us: list[Unit]) -> list[Config]:
    """One config per distinct teacher of the sweep (teachers are trained once per split:
    sweeps.driver.teacher_stage)."""
    found: dict[str, Config] = {}
    for u in us:
        key = teacher_identity(u.cfg)
        if key is not None:
            found.setdefault(key, u.cfg)
    return list(found.values())


def _gpu_costs(spec: Spec, us: list[Unit], m: Measurements) -> tuple[list[dict[str, Cost]], list[Cost], list[str]]:
    """Per unit its stages' GPU-hours per trial (packing applied), the teachers' costs, and the packing notes."""
    n = trials_per_gpu(spec.resources["gpu"])
    if n == 0:
        return [{s: Cost(0.0) for s in TRIAL_STAGES} for _ in us], [], [
            "resources.gpu 0: the trials run on CPUs; no GPU-hours"]
    per_unit, notes = [], []
    for u in us:
        factor, why = packing_factor(n, u.cfg.model.name, engine_mode(u.cfg), m)
        notes += [why] if why and why not in notes else []
        per_unit.append({k: c.scaled(factor) for k, c in trial_costs(u.cfg, u.stage, m).items()})
    return per_unit, [teacher_cost(cfg, m) for cfg in _teachers(us)], notes


def measurement_kinds(records: list[dict]) -> dict[str, list[str]]:
    """GPU -> the kinds of measurement it has (training, eval, teacher, packing)."""
    return {d: [k for k, parse in KINDS.items() if any(r["_device"] == d and parse(r) for r in records)]
            for d in measured_devices(records)}


def estimate(spec: Spec, gpu: str | None = None, records: list[dict] | None = None) -> dict:
    """The sweep's cost as plain numbers: trials, the paper's training GPU-hours, and with `gpu` the GPU-hours per
    stage (teachers, training, validation, SWA, evaluation) and in total on that GPU type, from its own
    measurements only, with the figures used and the ones missing."""
    records = read_records(own=calibration_dir()) if records is None else records
    us = units(spec)
    paper = [(gpu_hours(u.cfg), u.count) for u in us]
    out = {"spec": spec.name, "trials": sum(u.count for u in us), "search": bool(spec.search),
           "paper_training": {"gpu_hours": sum(h * k for h, k in paper if h is not None),
                              "trials_without_figure": sum(k for h, k in paper if h is None)},
           "measured": measurement_kinds(records), "gpu": None,
           "units": [{"row": u.row, "seed": u.seed, "stage": u.stage, "count": u.count,
                      "paper_gpu_hours": h} for u, (h, _) in zip(us, paper)]}
    if gpu is None:
        return out
    device, hits = resolve_gpu(gpu, records)
    if device is None and hits:
        return {**out, "gpu_ambiguous": hits}
    m = Measurements(device or gpu, records)
    per_unit, teachers, notes = _gpu_costs(spec, us, m)
    stages = {"teachers": _summary([(c, 1) for c in teachers])}
    stages.update({s: _summary([(c[s], u.count) for c, u in zip(per_unit, us)]) for s in TRIAL_STAGES})
    for row, u, c in zip(out["units"], us, per_unit):
        row.update(mode=engine_mode(u.cfg), gpu_hours={s: c[s].hours for s in TRIAL_STAGES})
    total = {"gpu_hours": sum(st["gpu_hours"] for st in stages.values()),
             "complete": not any(st["not_measured"] for st in stages.values())}
    return {**out, "gpu": m.device, "packing": notes, "stages": stages, "total": total}

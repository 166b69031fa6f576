"""`python -m sweeps run SPEC --dry-run [--gpu NAME]`: every trial, its schedules and its cost, before anything starts.

One line per trial (row, seed, the settings that differ from the spec's base, GPU-hours), each distinct schedule
once as its breakpoints (`eps 0.14/255 -> 10/255 by epoch 70, then 8/255 from 71; rho 0.05, 0.1 from 75; lr 0.1,
x0.1 from 60, ...`), and the totals. `--verbose` adds every trial's full config and per-epoch values.

Without `--gpu` the cost is the paper's training figure (Table 8 per-epoch minutes, one GPU). With `--gpu NAME`
it is the whole sweep on that GPU type, per stage, from the project's own measurements in benchmarks/results/:
teachers (once per split), training (in the step engine the trial will run there, `engine_mode`), validation,
the SWA statistics pass, final evaluation, and trials packed on a GPU. A figure not measured on that GPU is
printed as "not measured on <GPU>", never scaled from another GPU; every figure says where it comes from.
`estimate` returns the numbers as a dict (JSON), and `python -m sweeps.dryrun --table` writes docs/costs.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ssat.config import Config
from ssat.datasets import DATASET_INFO
from ssat.fixmatch import resolved_teacher_config
from ssat.schedules import schedule_table
from ssat.runtime import training_precision

from .spec import Spec, load_spec

ROOT = Path(__file__).resolve().parents[1]
# Minutes per epoch measured by the paper (Table 8, one GPU) for the union methods / AWR, per (dataset, model).
PAPER_MIN_PER_EPOCH = {("cifar10", "wrn-28-5"): (3.06, 3.87), ("svhn", "wrn-28-2"): (2.00, 4.45),
                       ("cifar100", "wrn-28-8"): (5.64, 4.45)}
RESULTS = ROOT / "benchmarks" / "results"
SPECS = ROOT / "sweeps" / "specs"
COSTS_PAGE = ROOT / "docs" / "costs.md"
# Training images per epoch of a union-batching run (the training set less validation); the measured epoch times
# are per CIFAR-10 epoch of 49,000 images (MEASURED_EPOCH) and scale with these.
EPOCH_IMAGES = {"cifar10": 49_000, "cifar100": 49_000, "svhn": 72_257, "mnist5k": 3_500}
MEASURED_EPOCH = 49_000
TEST_IMAGES = {"cifar10": 10_000, "cifar100": 10_000, "svhn": 26_032, "mnist5k": 1_000}  # whole test sets
# engine_mode's answers, a training record's "mode": the step engine, "+fused" with fused forwards
MODES = tuple(m + f for f in ("+fused", "") for m in ("graph+compile", "graph", "compile", "eager"))
AA_ATTACKS = ("apgd-ce", "apgd-t", "fab-t", "square")  # standard AutoAttack, in order (ssat.evaluate.AA_ATTACKS)
# AutoAttack attacks only the images still robust: the share of a checkpoint's images each attack runs on, from
# the paper's Table 1 SSAT-MBI row of the dataset (APGD-CE: clean accuracy; APGD-T: PGD-40, standing in for
# after APGD-CE; FAB-T and Square: AutoAttack). Another dataset: every image (an upper bound).
AA_SHARES = {"cifar10": (0.8331, 0.5539, 0.5121, 0.5121), "svhn": (0.9140, 0.5919, 0.4983, 0.4983),
             "cifar100": (0.5065, 0.3084, 0.2639, 0.2639)}
STAGES = ("teachers", "training", "validation", "SWA", "evaluation")
TRIAL_STAGES = STAGES[1:]
NOTHING = {"teachers": "no teacher to train: fully labeled data or data.pseudo_labels files",
           "training": "no training", "validation": "no validation images",
           "SWA": "no trial recomputes SWA BN statistics", "evaluation": "no final evaluation"}


def gpu_hours(cfg: Config) -> float | None:
    """Estimated GPU-hours of one trial with a whole GPU, from the paper's per-epoch times (None: no figure)."""
    fig = PAPER_MIN_PER_EPOCH.get((cfg.data.dataset, cfg.model.name))
    if fig is None:
        return None
    return cfg.optim.epochs * fig[1 if cfg.is_awr else 0] / 60


# ---- the measurements: JSON lines of benchmarks/results/*.json|*.log and the user's calibrations -------------
def calibration_dir() -> Path:
    """Where `python -m sweeps calibrate` keeps this user's figures: $SSAT_CALIBRATION_DIR, else
    $XDG_CACHE_HOME/ssat-sweeps/calibration (~/.cache/... without it)."""
    if os.environ.get("SSAT_CALIBRATION_DIR"):
        return Path(os.environ["SSAT_CALIBRATION_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ssat-sweeps" / "calibration"


def read_records(results: Path = RESULTS, own: Path | None = None) -> list[dict]:
    """Every JSON object line of the user's calibrations (`own`, e.g. calibration_dir(); "_own": True) and of
    results/*.json|*.log, with "_device" (its own "device" key, else the nearest device line before it in the same
    file) and "_file" added (a user's file by its whole path). Other lines are skipped."""
    out = []
    for folder, mine in ((own, True), (results, False)):
        if folder is None or mine and folder.resolve() == results.resolve():
            continue  # --out benchmarks/results: the repository's figures, read once
        for f in sorted(folder.glob("*.json")) + sorted(folder.glob("*.log")):
            device = None
            for line in f.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict):
                    device = rec.get("device", device)
                    out.append({**rec, "_device": device, "_file": str(f) if mine else f.name, "_own": mine})
    return out


def record_mode(rec: dict) -> str:
    """The step engine of a training record: its "mode", else from the old keys compile and graph_mode."""
    if rec.get("mode") in MODES:
        return rec["mode"]
    compiled = rec.get("compile", "off") not in ("off", None, False)
    captured = rec.get("graph_mode") == "captured"
    return {(True, True): "graph+compile", (False, True): "graph", (True, False): "compile"}.get(
        (compiled, captured), "eager")


def _training(rec: dict):
    """((model, method, mode, precision), seconds per 49,000-image epoch) of a Trainer epoch record."""
    model, secs = rec.get("trainer_model"), rec.get("cifar10_epoch_s")
    if not model or not secs or rec.get("baseline") or rec.get("bench", "trainer") != "trainer":
        return None
    return (model, rec.get("method") or "ssat-mbi", record_mode(rec), rec.get("precision")), float(secs)


def _eval(rec: dict):
    """((model, attack, tf32), seconds per 1,000 images) of an evaluation record; an AutoAttack attack's only where
    every image stayed robust ("points": "robust", per 1,000 robust images at the standard budget)."""
    if rec.get("bench") != "eval" or (rec.get("attack") in AA_ATTACKS and rec.get("points") != "robust"):
        return None
    s = rec.get("s_per_1000") or (rec["seconds"] * 1000 / rec["n"] if rec.get("seconds") and rec.get("n") else None)
    return ((rec.get("eval_model"), rec.get("attack"), bool(rec.get("tf32"))), float(s)) if s else None


def _teacher(rec: dict):
    """((model, precision), FixMatch steps per second) of a teacher record; one that does not say how its step ran
    ("compile") timed the eager teacher of before, not the one a GPU runs now (ssat.fixmatch.TeacherSteps)."""
    if rec.get("bench") != "teacher" or not rec.get("steps_per_s") or "compile" not in rec:
        return None
    return (rec.get("teacher_model"), rec.get("precision")), float(rec["steps_per_s"])


def _packing(rec: dict):
    """((model, mps, graphed, n), total images/s of n packed trials); a run where not all finished is no figure."""
    n, total = rec.get("packed_trials"), rec.get("total_images_per_s")
    if not n or not total or rec.get("finished", n) < n:
        return None
    modes = rec.get("graph_mode") or ["off"]
    graphed = all(g == "captured" for g in ([modes] if isinstance(modes, str) else modes))
    return (rec.get("model"), bool(rec.get("mps")), graphed, int(n)), float(total)


KINDS = {"training": _training, "eval": _eval, "teacher": _teacher, "packing": _packing}


def measured_devices(records: list[dict]) -> list[str]:
    """The GPUs with at least one usable measurement (training, evaluation, teacher or packing); a CPU run of a
    benchmark (device "cpu", "CPU (not a GPU figure)") is none."""
    return sorted({r["_device"] for r in records if r["_device"] and not str(r["_device"]).lower().startswith("cpu")
                   and any(k(r) for k in KINDS.values())})


def resolve_gpu(name: str, records: list[dict]) -> tuple[str | None, list[str]]:
    """The measured GPU that `name` names (the same name, else the one whose name contains it, any case), and
    the candidates when it names none or several."""
    found = measured_devices(records)
    exact = [d for d in found if d.lower() == name.lower()]
    hits = exact or [d for d in found if name.lower() in d.lower()]
    return (hits[0] if len(hits) == 1 else None), hits


@dataclass(frozen=True)
class Figure:
    """A measured figure: the median of its runs, how many, and the files they are in."""
    value: float
    runs: int
    files: tuple[str, ...]
    extra: dict = field(default_factory=dict, compare=False)

    def cite(self) -> str:
        return f"{'median of %d' % self.runs if self.runs > 1 else '1 run'}: {', '.join(self.files)}"


class Measurements:
    """The measured figures of one GPU type (records whose device is exactly `device`); the median where several
    records share a key, the user's own calibrations alone where they have the key. Nothing of another GPU is
    ever looked at."""

    def __init__(self, device: str, records: list[dict]):
        self.device = device
        self.table: dict[tuple, list[tuple[float, str, dict]]] = {}
        for rec in records:
            if rec["_device"] != device:
                continue
            for kind, parse in KINDS.items():
                got = parse(rec)
                if got:
                    self.table.setdefault((kind, *got[0]), []).append((got[1], rec["_file"], rec))
        for key, runs in self.table.items():
            mine = [r for r in runs if r[2].get("_own")]
            self.table[key] = mine or runs

    def figure(self, kind: str, *key) -> Figure | None:
        runs = self.table.get((kind, *key))
        if not runs:
            return None
        acc = [r["robust_acc"] for _, _, r in runs if isinstance(r.get("robust_acc"), (int, float))]
        return Figure(statistics.median(v for v, _, _ in runs), len(runs), tuple(sorted({f for _, f, _ in runs})),
                      {"robust_acc": statistics.median(acc)} if acc else {})


# ---- what will run on a GPU ---------------------------------------------------------------------------
def engine_mode(cfg) -> str:
    """The step engine a trial runs on a GPU: "graph+compile", "graph", "compile" or "eager" (+ "+fused" with fused
    forwards: system.fused_forward auto or on, and a model without dropout), from cfg.system
    alone (graph_mode "auto"/"on"/"off" or a bool; compile "auto", "off" or a torch.compile mode) by the step
    engine's own rules (ssat/engine.py compile_mode and graph_plan): on CUDA auto compiles ("default") and auto
    graph mode captures, for union and AWR methods alike, unless the compile mode captures CUDA graphs itself. A
    capture that fails at run time (the trainer then steps eagerly, with the reason) is not foreseen here."""
    from ssat.engine import compile_mode, graph_plan

    s = cfg.system
    graph = ("on" if s.graph_mode else "off") if isinstance(s.graph_mode, bool) else s.graph_mode
    compiled = compile_mode(s.compile, "cuda")
    capture, _ = graph_plan(graph, "cuda", compiled)
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
    from ssat.train import needs_teacher  # the rule sweeps.teacher_stage follows

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
    (sweeps/trainable.py _final)."""
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
    if not trials_per_gpu(spec.resources.get("gpu", 0)):
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
    graphed = mode in ("graph", "graph+compile")
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
    """One config per distinct teacher of the sweep (teachers are trained once per split, sweeps.teacher_stage)."""
    found: dict[str, Config] = {}
    for u in us:
        key = teacher_identity(u.cfg)
        if key is not None:
            found.setdefault(key, u.cfg)
    return list(found.values())


def _gpu_costs(spec: Spec, us: list[Unit], m: Measurements) -> tuple[list[dict[str, Cost]], list[Cost], list[str]]:
    """Per unit its stages' GPU-hours per trial (packing applied), the teachers' costs, and the packing notes."""
    n = trials_per_gpu(spec.resources.get("gpu", 0))
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


# ---- how the numbers read ---------------------------------------------------------------------------------
def grouped(missing: list[str]) -> list[str]:
    """`wrn-28-5 evaluation: clean` and `wrn-28-5 evaluation: pgd10` as `wrn-28-5 evaluation: clean, pgd10`."""
    out: dict[str, list[str]] = {}
    for item in missing:
        head, _, tail = item.partition(": ")
        out.setdefault(head, []).extend([tail] if tail else [])
    return [f"{h}: {', '.join(dict.fromkeys(t))}" if t else h for h, t in out.items()]


def gh(x: float) -> str:
    """GPU-hours to read: one decimal from 10 on, two from 0.1, two significant digits below."""
    return "0.0" if not x else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"


def stage_text(st: dict, stage: str, gpu: str) -> str:
    """One stage's total with where its figures come from, or what is not measured on the GPU."""
    unit = "teacher(s)" if stage == "teachers" else "trial(s)"
    if not st["of"]:
        return f"0.0 GPU-h ({NOTHING[stage]})"
    src, miss = "; ".join(st["sources"]), f"not measured on {gpu}: " + "; ".join(grouped(st["missing"]))
    if not st["not_measured"]:
        return f"{gh(st['gpu_hours'])} GPU-h, {st['of']} {unit} ({src})"
    if st["not_measured"] == st["of"]:
        return f"{miss} ({st['of']} {unit})"
    return (f"{gh(st['gpu_hours'])} GPU-h for {st['of'] - st['not_measured']} of {st['of']} {unit} ({src}); "
            f"{miss} (the other {st['not_measured']})")


def total_text(est: dict) -> str:
    t, missing = est["total"], [s for s in STAGES if est["stages"][s]["not_measured"]]
    if t["complete"]:
        return f"{gh(t['gpu_hours'])} GPU-h"
    if not t["gpu_hours"]:
        return f"not measured on {est['gpu']} ({', '.join(missing)})"
    return f"at least {gh(t['gpu_hours'])} GPU-h (not measured on {est['gpu']}: {', '.join(missing)})"


def _measured_line(est: dict) -> str:
    found = "; ".join(f"{d} ({', '.join(k)})" for d, k in est["measured"].items()) or "none"
    return (f"measurements in benchmarks/results/: {found}; `--gpu NAME` estimates every stage of the sweep on "
            "one of them")
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
SHORT = {"training": "train", "validation": "val", "SWA": "SWA", "evaluation": "eval"}


def _differs(cfg: Config, base: dict) -> str:
    flat = {k: v for k, v in cfg.to_flat().items() if k != "seed"}
    diff = [f"{k}={json.dumps(v)}" for k, v in sorted(flat.items()) if base.get(k) != v]
    return ", ".join(diff) or "the base"


def _unit_label(u: Unit) -> str:
    if u.stage == "search":
        return f"{u.row} seed {u.seed} (x{u.count}, at most: ASHA may stop them early; no final evaluation)"
    if u.count > 1:
        return f"{u.row} seed {u.seed} (x{u.count}, full budget, final evaluation)"
    return f"{u.row} seed {u.seed}"


def _unit_cost(row: dict, gpu: str | None) -> str:
    h = row["paper_gpu_hours"]
    cost = "GPU-hours n/a (no per-epoch figure for this dataset and model)" if h is None else \
        f"GPU-hours {h:.2f} (paper)"
    if "gpu_hours" in row:
        parts = (f"{SHORT[s]} {'not measured' if v is None else f'{v:.2f}' if v else '-'}"
                 for s, v in row["gpu_hours"].items())
        cost += f" | {gpu}, {row['mode']}: " + ", ".join(parts)
    return cost + (" per trial" if row["count"] > 1 else "")


def _gpu_header(est: dict, gpu: str) -> list[str]:
    if est.get("gpu_ambiguous"):
        return [f"  (--gpu {gpu!r} names several measured GPUs: {', '.join(est['gpu_ambiguous'])}; name one. "
                "The paper's figures only)"]
    modes: dict[str, int] = {}
    for row in est["units"]:
        modes[row["mode"]] = modes.get(row["mode"], 0) + row["count"]
    lines = [f"  GPU-hours on {est['gpu']}: figures measured on it only (benchmarks/results/), never scaled from "
             "another GPU; step engine there: " + ", ".join(f"{k} for {v} trial(s)" for k, v in modes.items())]
    return lines + [f"  packing: {note}" + ("; the gain of training steps applied to the whole trial"
                                           if "gain " in note else "") for note in est["packing"]]


def _totals(est: dict, spec_path: str) -> list[str]:
    lines = [f"GPU-hours on {est['gpu']} per stage:"]
    lines += [f"  {s:<11}{stage_text(est['stages'][s], s, est['gpu'])}" for s in STAGES]
    lines.append(f"  {'total':<11}{total_text(est)}")
    if not est["total"]["complete"]:
        lines.append(f"  what is not measured, measured on a {est['gpu']}: python -m sweeps calibrate {spec_path} "
                     "--missing-only (minutes; the dry run then reads your figures first)")
    if est["search"]:
        lines.append("  (search trials counted at full length: at most, as ASHA may stop them early; confirm "
                     "trials at full budget with final evaluation)")
    return lines


def dry_run(spec: Spec, out=print, *, verbose: bool = False, gpu: str | None = None, json_path: str | None = None,
            records: list[dict] | None = None, spec_path: str = "SPEC") -> dict:
    """Print the dry run; return `estimate`'s numbers (also written to json_path as JSON when given)."""
    est = estimate(spec, gpu, records)
    us = units(spec)
    n = est["trials"] if spec.grid else f"{us[0].count} search + {est['trials'] - us[0].count} confirm"
    out(f"sweep {spec.name}: preset {spec.preset}, stage {spec.stage}, {n} trial(s), resources per trial "
        f"{spec.resources}, max concurrent {spec.max_concurrent}")
    if gpu:
        for line in _gpu_header(est, gpu):
            out(line)
    base = {k: v for k, v in spec.base_config().to_flat().items() if k != "seed"}
    schedules: dict[str, list[str]] = {}
    for u, row in zip(us, est["units"]):
        out(f"- {_unit_label(u)}: {_differs(u.cfg, base)} | {_unit_cost(row, est['gpu'])}")
        schedules.setdefault(schedule_lines(u.cfg), []).append(u.row)
        if verbose:
            out("  config " + json.dumps(u.cfg.to_flat(), sort_keys=True))
            for k, v in schedule_table(u.cfg).items():
                out(f"  {k:8s} " + " ".join(f"{round(x, 6):g}" for x in v))
    out("schedules:")
    for text, users in schedules.items():
        out(f"  {text}  [{', '.join(sorted(set(users)))}]")
    if spec.search:
        out(f"search space {json.dumps(spec.search['space'])}; confirm {spec.search['confirm']}")
    for line in _totals(est, spec_path) if est.get("stages") else [_measured_line(est)]:
        out(line)
    p = est["paper_training"]
    out(f"total: {est['trials']} trial(s), estimated GPU-hours {p['gpu_hours']:.1f} (whole-GPU trials at the "
        "paper's Table 8 per-epoch times, training only"
        + (f"; {p['trials_without_figure']} trial(s) without a figure" if p["trials_without_figure"] else "") + ")"
        + (f"; on {est['gpu']}: {total_text(est)}" if est.get("stages") else "") + "; nothing was started")
    if json_path:
        Path(json_path).write_text(json.dumps(est, indent=1, sort_keys=True) + "\n")
    return est


# ---- docs/costs.md -----------------------------------------------------------------------------------------
def _cell(st: dict) -> str:
    if not st["not_measured"]:
        return gh(st["gpu_hours"])
    if st["not_measured"] == st["of"]:
        return "not measured"
    return f"{gh(st['gpu_hours'])} + not measured ({st['not_measured']} of {st['of']})"


def _total_cell(est: dict) -> str:
    t = est["total"]
    return gh(t["gpu_hours"]) if t["complete"] else f"at least {gh(t['gpu_hours'])}" if t["gpu_hours"] \
        else "not measured"


def _paper_cell(est: dict) -> str:
    p = est["paper_training"]
    return f"{p['gpu_hours']:.1f}" + (f" ({p['trials_without_figure']} trials without a figure)"
                                      if p["trials_without_figure"] else "")


def _gpu_section(device: str, ests: list[dict]) -> list[str]:
    head = ["spec", "trials", *STAGES, "total", "paper Table 8, training"]
    lines = [f"## {device}", "", "GPU-hours per stage.", "", "| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for e in ests:
        cells = [e["spec"], str(e["trials"]), *(_cell(e["stages"][s]) for s in STAGES), _total_cell(e),
                 _paper_cell(e)]
        lines.append("| " + " | ".join(cells) + " |")
    used = sorted({s for e in ests for st in e["stages"].values() for s in st["sources"]} |
                  {n for e in ests for n in e["packing"]})
    missing = grouped(sorted({s for e in ests for st in e["stages"].values() for s in st["missing"]}))
    lines += ["", "Figures used:", ""] + [f"- {s}" for s in used or ["none"]]
    lines += ["", f"Not measured on {device}:", ""] + [f"- {s}" for s in missing or ["nothing"]]
    return lines + [""]


ABOUT = """\
## What the figures rest on

Every cell is GPU-hours of one GPU type, from the JSON lines that `python -m sweeps calibrate` and benchmarks/
wrote into benchmarks/results/ for that GPU alone (the median where several runs measured the same figure); a
figure missing there reads "not measured", never scaled from another GPU. Training is epochs x the measured
seconds per CIFAR-10 epoch of the real Trainer with the trial's model, method, precision and step engine as it
will run on a GPU (`engine_mode`), scaled to the dataset's training images; an epoch is one schedule change (a
new CUDA-graph capture) and the rest of its steps at the steady rate. Validation is clean + PGD-10 on the
validation images every `eval.val_every` epochs and the last two; the SWA statistics pass (SWA with
`optim.swa_bn: recompute`) is one train-mode forward over the training images per epoch after `optim.swa_start`;
the final evaluation is clean and PGD-k on each checkpoint in `eval.checkpoints` and AutoAttack on
`eval.autoattack_checkpoints` for `eval.autoattack_seeds`, in fp32 (TF32 as `eval.tf32` says). AutoAttack's
attacks run on the images still robust when each starts: their figures are seconds per 1,000 images that stay
robust through the attack's whole standard budget (timed on a stand-in that no attack moves), and the share of
images each runs on is the paper's Table 1 SSAT-MBI accuracy of the dataset (clean for APGD-CE, PGD-40 for
APGD-T, AutoAttack for FAB-T and Square; every image for a dataset the paper does not report).
Teachers are trained once per split: `teacher.steps` / the measured FixMatch steps per second. Trials packed on
a GPU (`resources.gpu` < 1) cost 1/gain of their time alone, from the packing records of the GPU and model (MPS
first); without such a record, no gain. Searches count their trials at full length (at most). The paper's
Table 8 column is training alone at the paper's per-epoch minutes. "at least" totals leave out what is not
measured.

Regenerate after new measurements, spec or default changes: `.venv/bin/python -m sweeps.dryrun --table`
(tests/unit/test_dryrun.py fails while this page differs from what that writes). One sweep, trial by trial:
`.venv/bin/python -m sweeps run SPEC --dry-run --gpu NAME`. Your own GPU: `python -m sweeps calibrate SPEC`
measures what that needs, and the dry run reads your figures first.
"""


def _paper_specs(specs: Path) -> list[Path]:
    return sorted(specs.glob("paper-*.yaml"), key=lambda p: (p.name.startswith("paper-fig"), p.name))


def costs_page(records: list[dict] | None = None, specs: Path = SPECS) -> str:
    """docs/costs.md: every paper spec's trials and GPU-hours per stage on each GPU type with measurements."""
    records = read_records() if records is None else records
    loaded = [load_spec(p) for p in _paper_specs(specs)]
    lines = ["# GPU cost of the paper's sweeps", "",
             "Generated by `python -m sweeps.dryrun --table` from sweeps/specs/paper-*.yaml (Tables 1-6, Figs. 4-5) "
             "and benchmarks/results/; do not edit by hand.", ""]
    for device in measured_devices(records):
        lines += _gpu_section(device, [estimate(s, device, records) for s in loaded])
    return "\n".join(lines) + "\n" + ABOUT


def main(argv: list[str] | None = None) -> int:
    """python -m sweeps.dryrun --table [--check] | SPEC [--gpu NAME] [--json PATH]"""
    from ssat.config import ConfigError

    from .errors import SpecError

    ap = argparse.ArgumentParser(prog="python -m sweeps.dryrun", description="A sweep's cost, or docs/costs.md.")
    ap.add_argument("spec", nargs="?", help="a sweep spec: its dry run (as `python -m sweeps run SPEC --dry-run`)")
    ap.add_argument("--gpu", default=None, metavar="NAME", help="estimate every stage on this measured GPU type")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the numbers as JSON")
    ap.add_argument("--table", action="store_true", help=f"write {COSTS_PAGE.relative_to(ROOT)}")
    ap.add_argument("--check", action="store_true", help="with --table: exit 1 if the page is out of date")
    args = ap.parse_args(argv)
    try:
        if args.table:
            page = costs_page()
            if args.check:
                same = COSTS_PAGE.exists() and COSTS_PAGE.read_text() == page
                print(f"{COSTS_PAGE}: {'up to date' if same else 'out of date; run python -m sweeps.dryrun --table'}")
                return 0 if same else 1
            COSTS_PAGE.write_text(page)
            print(f"wrote {COSTS_PAGE}")
            return 0
        if not args.spec:
            ap.error("name a SPEC, or --table")
        dry_run(load_spec(args.spec), gpu=args.gpu, json_path=args.json, spec_path=args.spec)
        return 0
    except (SpecError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

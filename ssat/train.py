"""The trainer: one configuration, epoch by epoch, with exact resume.

    trainer = Trainer(cfg, out_dir)          # resumes from out_dir/state.pt if it is there
    for metrics in trainer.epochs():         # one dict per epoch (docs/tracking.md names)
        ...
    results = trainer.final_evaluation()     # test protocol on the best and the last checkpoint

Files in out_dir, all written atomically with a checksum: state.pt (everything needed to resume:
model, optimiser, SWA model, RNG states, history), best.pt and last.pt (weights + config), results.json.

CLI: python -m ssat.train --preset mnist5k-ssat-mbi [--set key=value ...] [--epochs N] [--out DIR]
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn as nn
from torch.profiler import record_function

from . import faults
from .config import Config
from .datasets import DATASET_INFO, split_for, to_float
from .engine import Engine, StepStats
from .evaluate import evaluate_checkpoints, evaluate_model
from .models import create_model
from .pseudo_labels import TeacherOutputs
from .runtime import resolve_device, seed_everything
from .schedules import at_epoch
from .swa import WeightAverage
from .teacher import load_teacher_model, resolve_teacher
from .train_state import load_state, save
from .entry import entry_point


CHECK_EVERY = 25  # steps between finiteness checks on a GPU (each check synchronises)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


def needs_teacher(cfg: Config) -> bool:
    return not cfg.data.fully_labeled


class Trainer:
    """Set-up (the build steps below, in the order their random draws need), the epoch loop and checkpoints. The
    step is ssat/step.py's (Algorithm 1); how fast it runs is ssat/engine.py's."""

    def __init__(self, cfg: Config, out_dir: str | Path, teacher: TeacherOutputs | None = None,
                 log: Callable[[str], None] = print):
        self.cfg, self.out, self.log = cfg, Path(out_dir), log
        self.out.mkdir(parents=True, exist_ok=True)
        self.device = self._build_process()
        self.arrays, self.split = split_for(cfg)
        info = DATASET_INFO[cfg.data.dataset]
        self.num_classes, self.channels = info.classes, info.channels
        self.teacher = self._build_teacher(teacher)
        self.model, self.opt = self._build_model()  # the model's initial weights: the run seed's first draws
        b = cfg.batching
        self.teacher_model = load_teacher_model(self.teacher, self.num_classes, self.channels, self.device) \
            if b.teacher_net else None
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.batches = b.build(cfg, self.arrays, self.split, self.teacher, self.num_classes, self.device)
        step = functools.partial(_bound_step, b.step, cfg, self.teacher_model)
        self.engine = Engine(self.model, self.opt, cfg, self.device, step, b.sizes(cfg, self.batches), b.counts, log)
        self.acc = StepStats(self.device, cfg.method.K)
        val = torch.from_numpy(self.split.val)
        self.x_val = self.engine.prep([to_float(self.arrays.x_train[val]).to(self.device)])[0]
        self.y_val = self.arrays.y_train[val].to(self.device)
        o = cfg.optim
        self.swa = None if o.swa_start is None else WeightAverage(self.model, o.swa_start, o.swa_bn, self._bn_images)
        self.epoch, self.best_score, self.best_clean, self.best_epoch, self.history = 0, -math.inf, -math.inf, 0, []
        self.train_seconds = 0.0
        if (self.out / "state.pt").exists():
            load_state(self)

    # ---- build steps --------------------------------------------------------------------------
    def _build_process(self) -> torch.device:
        """Threads, device, memory cap, seeds and the fault injector's context."""
        s = self.cfg.system
        if s.threads:
            torch.set_num_threads(s.threads)
        device = resolve_device(s.device)
        if device.type == "cuda" and s.cuda_memory_fraction:
            torch.cuda.set_per_process_memory_fraction(  # needs an index: "cuda" alone is refused
                s.cuda_memory_fraction, device.index if device.index is not None else torch.cuda.current_device())
        seed_everything(self.cfg.seed)
        faults.set_context(self.cfg.seed, faults.run_key(self.cfg.config_hash(), self.cfg.seed))
        return device

    def _build_teacher(self, teacher: TeacherOutputs | None) -> TeacherOutputs | None:
        if teacher is None and needs_teacher(self.cfg):
            teacher = resolve_teacher(self.cfg, self.arrays, self.split, log=self.log)
        return teacher

    def _build_model(self) -> tuple[nn.Module, torch.optim.Optimizer]:
        m, o = self.cfg.model, self.cfg.optim
        model = create_model(m.name, self.num_classes, self.channels, m.dropout).to(self.device)
        return model, torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay,
                                      nesterov=o.nesterov)

    # ---- one epoch ----------------------------------------------------------------------------
    def train_epoch(self, epoch: int) -> dict[str, float]:
        sched = at_epoch(self.cfg, epoch)  # eps_max, rho and lr (the dry run prints the same numbers)
        for g in self.opt.param_groups:
            g["lr"] = sched["lr"]
        # Statistics stay on the device and are read once per epoch (and the finiteness flag every
        # CHECK_EVERY steps): a .item() per step would stall a GPU that is launch-bound on small models.
        acc = self.acc
        acc.reset()
        t0 = time.perf_counter()
        self.engine.begin_epoch()
        for i, batch in enumerate(ranged(self.batches.epoch(self.gen), "data")):
            faults.maybe("epoch", epoch, step=i)
            self.engine.step(batch, sched, acc, poison=faults.active("nan", epoch))
            if (i + 1) % CHECK_EVERY == 0 or self.device.type == "cpu":
                _check_finite(acc.bad, epoch, i + 1)
        _check_finite(acc.bad, epoch, "the end")
        if self.swa is not None:
            self.swa.update(self.model, epoch)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        secs = time.perf_counter() - t0
        self.train_seconds += secs
        self.engine.end_epoch()
        out = acc.summary()
        out.update({"sched/eps_max": sched["eps_max"], "sched/rho": sched["rho"], "sched/lr": sched["lr"],
                    "perf/epoch_seconds": secs, "perf/images_per_s": acc.n_img / secs if secs > 0 else 0.0})
        if self.engine.graph_status != "off" and not self.engine.graph_status.startswith("eager (auto)"):
            out["perf/graph_steps"] = acc.graph_steps
        return out

    # ---- validation and selection -------------------------------------------------------------
    def _bn_images(self):
        """Clean (unaugmented) training images in chunks of 500: the SWA model's BN statistics pass."""
        xs = self.cfg.batching.bn_images(self.batches)
        return (self.engine.prep([to_float(xs[i: i + 500])])[0] for i in range(0, len(xs), 500))

    def selection_model(self, epoch: int) -> nn.Module:
        """The model whose validation decides 'best': the SWA model once SWA has started (ssat/swa.py)."""
        return self.model if self.swa is None else self.swa.model_for(epoch, self.model)

    def validate(self, model: nn.Module) -> dict[str, float]:
        if not len(self.x_val):
            return {}
        res = evaluate_model(model, self.x_val, self.y_val, eps=self.cfg.eps, checkpoint="val", pgd_steps=(10,),
                             autoattack=False, batch_size=self.cfg.eval.batch_size, tf32=self.cfg.eval.tf32,
                             fold_bn=self.cfg.system.fold_bn, log=lambda s: None)
        return {"val/clean": res["clean"]["acc"], "val/pgd10": res["pgd10"]["acc"]}

    # ---- the loop -----------------------------------------------------------------------------
    def epochs(self) -> Iterator[dict]:
        """Train the remaining epochs; yield each epoch's metrics after its checkpoint is on disk."""
        for epoch in range(self.epoch + 1, self.cfg.optim.epochs + 1):
            metrics = {"epoch": epoch, **self.train_epoch(epoch)}
            selection = self.selection_model(epoch)
            # every val_every epochs, and always the last two: the convergence check compares them
            if epoch % self.cfg.eval.val_every == 0 or epoch >= self.cfg.optim.epochs - 1:
                metrics.update(self.validate(selection))
            # best = highest validation accuracy of eval.select_by, ties broken by the other one
            score = (metrics.get("val/pgd10", -math.inf), metrics.get("val/clean", -math.inf))
            improved = self.best_epoch == 0 or self._ranked(score) > self._ranked((self.best_score, self.best_clean))
            if improved:
                (self.best_score, self.best_clean), self.best_epoch = score, epoch
            if math.isfinite(self.best_score):  # not before the first validation: -inf would reach every logger
                metrics["val/best_pgd10"] = self.best_score
            self.epoch = epoch
            self.history.append(metrics)
            save(self, metrics, selection, improved)
            faults.maybe("after_checkpoint", epoch)
            self.log(_progress(epoch, self.cfg.optim.epochs, metrics))
            yield metrics

    def _ranked(self, score: tuple[float, float]) -> tuple[float, float]:
        """(val PGD-10, val clean) in the order that decides 'best': eval.select_by's accuracy first."""
        return score if self.cfg.eval.select_by == "pgd10" else score[::-1]

    def fit(self) -> list[dict]:
        return list(self.epochs())

    def final_evaluation(self, checkpoints=None) -> dict[str, dict]:
        """The test protocol on the checkpoints (default eval.checkpoints: best and last), results.json written:
        {ckpt: {attack: {"acc", "protocol"}}} (ssat.evaluate.evaluate_checkpoints)."""
        return evaluate_checkpoints(self.cfg, self.out, self.arrays, self.device, self.engine.channels_last,
                                    self.best_epoch, checkpoints, log=self.log)


def _bound_step(step, cfg: Config, teacher_net, net: nn.Module, batch, eps_max: float, rho: float, forward):
    """A batching's step with the run's config and teacher network bound: what the engine runs."""
    return step(net, cfg, teacher_net, batch, eps_max, rho, forward)


def _check_finite(bad: torch.Tensor, epoch: int, step) -> None:
    if bad.item():
        raise TrainingDiverged(f"loss became nan or infinite at epoch {epoch} (detected at step {step})")


def ranged(items: Iterator, name: str) -> Iterator:
    """The items of `items`, each one fetched inside the torch.profiler range `name` (the batches: "data")."""
    it = iter(items)
    while True:
        with record_function(name):
            item = next(it, None)
        if item is None:
            return
        yield item


def _progress(epoch: int, total: int, m: dict) -> str:
    parts = [f"epoch {epoch}/{total}", f"loss {m.get('train/loss', float('nan')):.4f}",
             f"eps_max {m['sched/eps_max']:.4f}", f"alpha {m['adv/alpha_mean']:.3f}"]
    if "val/clean" in m:
        parts += [f"val clean {m['val/clean']:.2f}", f"val pgd10 {m['val/pgd10']:.2f}"]
    parts.append(f"{m['perf/epoch_seconds']:.1f}s ({m['perf/images_per_s']:.0f} img/s)")
    return " | ".join(parts)


def parser() -> argparse.ArgumentParser:
    from .cli import add_config_args

    ap = argparse.ArgumentParser(prog="python -m ssat.train",  # pragma: no mutate
                                 description="Train one SSAT-MBI configuration.")  # pragma: no mutate
    add_config_args(ap, "method.beta=0.5")
    ap.add_argument("--epochs", type=int, default=None,
                    help="rescale every epoch number to N epochs")  # pragma: no mutate
    ap.add_argument("--download", action="store_true",
                    help="fetch the dataset into --data-root first (explicit)")  # pragma: no mutate
    ap.add_argument("--out", default=None, help="output folder (default runs/<preset>-seed<seed>)")  # pragma: no mutate
    ap.add_argument("--no-final-eval", action="store_true",
                    help="skip the test-set evaluation after training")  # pragma: no mutate
    return ap


@entry_point
def main(argv=None) -> int:
    from .cli import config_from_args

    args = parser().parse_args(argv)
    cfg = config_from_args(args, epochs=args.epochs)
    if args.download:
        from .datasets import download

        download(cfg.data.dataset, cfg.data.root)
    out = Path(args.out or f"runs/{args.preset}-seed{cfg.seed}")
    t0 = time.perf_counter()
    trainer = Trainer(cfg, out)  # the data, and the FixMatch teacher (trained first when not cached)
    t1 = time.perf_counter()
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
    trainer.fit()
    print(f"setup (data, teacher): {t1 - t0:.1f}s; training: {time.perf_counter() - t1:.1f}s, best epoch "
          f"{trainer.best_epoch} (val pgd10 {trainer.best_score:.2f}%)")
    if not args.no_final_eval:
        res = trainer.final_evaluation()
        for kind, per in res.items():
            print(f"test [{kind}] " + "  ".join(f"{a} {r['acc']:.2f}%" for a, r in per.items()))
    print(f"outputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

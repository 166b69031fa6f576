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
from .attacks import pgd
from .config import Config
from .datasets import AWRBatches, DATASET_INFO, UnionBatches, split_for, to_float
from .evaluate import evaluate_model, flatten_results
from .interpolation import interpolate
from .methods import METHOD_REGISTRY
from .models import create_model
from .pseudo_labels import TeacherOutputs
from .runtime import resolve_device, seed_everything
from .schedules import at_epoch
from .storage import load_verified, save_verified


CHECK_EVERY = 25  # steps between finiteness checks on a GPU (each check synchronises)
GRAPH_WARMUP = 3  # eager steps before each CUDA-graph capture (cuDNN autotuning, lazy allocations, SGD momentum)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


def training_precision(precision: str, device_type: str) -> str:
    """system.precision on a device: auto is bf16 on CUDA; auto and fp16 are fp32 on a CPU (float16 autocast
    and its gradient scaler are for CUDA); fp32 and bf16 are themselves."""
    if device_type != "cuda":
        return "fp32" if precision in ("auto", "fp16") else precision
    return "bf16" if precision == "auto" else precision


def needs_teacher(cfg: Config) -> bool:
    return not cfg.data.fully_labeled


class Trainer:
    def __init__(self, cfg: Config, out_dir: str | Path, teacher: TeacherOutputs | None = None,
                 log: Callable[[str], None] = print):
        self.cfg, self.out, self.log = cfg, Path(out_dir), log
        self.method = METHOD_REGISTRY[cfg.method.name]
        self.out.mkdir(parents=True, exist_ok=True)
        s = cfg.system
        if s.threads:
            torch.set_num_threads(s.threads)
        self.device = resolve_device(s.device)
        if self.device.type == "cuda" and s.cuda_memory_fraction:
            torch.cuda.set_per_process_memory_fraction(  # needs an index: "cuda" alone is refused
                s.cuda_memory_fraction, self.device.index if self.device.index is not None else torch.cuda.current_device())
        seed_everything(cfg.seed)
        faults.set_context(cfg.seed, faults.run_key(cfg.config_hash(), cfg.seed))
        self.arrays, self.split = split_for(cfg)
        self.num_classes, self.channels = DATASET_INFO[cfg.data.dataset][:2]
        flip = DATASET_INFO[cfg.data.dataset][5]
        if teacher is None and needs_teacher(cfg):
            from .teacher import resolve_teacher

            teacher = resolve_teacher(cfg, self.arrays, self.split, log=log)
        self.teacher = teacher
        self.model = create_model(cfg.model.name, self.num_classes, self.channels, cfg.model.dropout).to(self.device)
        # channels_last by default: 1.45x for the MNIST CNN's PGD on a CPU core, 1.07x for WRN-28-5 (bf16) on an H200
        self.channels_last = s.channels_last if s.channels_last is not None else True
        self.precision = training_precision(s.precision, self.device.type)
        if s.precision == "fp16" and self.precision == "fp32":
            log(f"system.precision fp16 on {self.device.type}: training in fp32")
        self.scaler = None  # fp16: a fresh GradScaler every epoch (train_epoch), as SRST-AWR's train()
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.net = self.model if s.compile == "off" else torch.compile(self.model, mode=s.compile)
        o = cfg.optim
        self.opt = torch.optim.SGD(self.model.parameters(), lr=o.lr, momentum=o.momentum,
                                   weight_decay=o.weight_decay, nesterov=o.nesterov)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        x_train, y_train = self.arrays.x_train, self.arrays.y_train
        if cfg.is_awr:
            self._init_awr_teacher()
            self.batches = AWRBatches(x_train, y_train, self.split, o.labeled_batch, o.unlabeled_batch,
                                      self.device, flip, cfg.data.labeled_sampling)
        else:
            soft = teacher.probabilities() if teacher is not None and len(self.split.unlabeled) else None
            self.batches = UnionBatches(x_train, y_train, self.split, soft, self.num_classes, o.batch_size,
                                        self.device, flip)
        self.acc = StepStats(self.device, cfg.method.K)
        refusal = self._graph_refusal() if s.graph_mode else None
        self.graph = GraphStep(self, o.batch_size) if s.graph_mode and refusal is None else None
        self.graph_status = "off" if not s.graph_mode else (f"eager: {refusal}" if refusal else "pending")
        if refusal:
            log(f"system.graph_mode: eager steps, {refusal}")
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = s.cudnn_benchmark
        val = torch.from_numpy(self.split.val)
        self.x_val, self.y_val = self._prep(to_float(x_train[val]).to(self.device)), y_train[val].to(self.device)
        self.swa = None if o.swa_start is None else \
            torch.optim.swa_utils.AveragedModel(self.model, use_buffers=o.swa_bn == "average")
        self.epoch, self.best_score, self.best_clean, self.best_epoch, self.history = 0, -math.inf, -math.inf, 0, []
        self.train_seconds = 0.0
        if (self.out / "state.pt").exists():
            self.load_state()

    # ---- setup helpers ------------------------------------------------------------------------
    def _init_awr_teacher(self) -> None:
        t = self.teacher
        if t is None or t.model_state is None:
            raise ValueError("method.name: AWR methods need the teacher's weights (its KL term is computed on "
                             "every augmented image); a pseudo-label file without weights is not enough")
        self.teacher_model = create_model(t.model_name, self.num_classes, self.channels).to(self.device)
        self.teacher_model.load_state_dict(t.model_state)
        self.teacher_model.eval().requires_grad_(False)

    def _prep(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x

    def _autocast(self):
        dtype = torch.float16 if self.precision == "fp16" else torch.bfloat16
        return torch.autocast(self.device.type, dtype=dtype, enabled=self.precision in ("bf16", "fp16"),
                              cache_enabled=self.graph is None)  # a CUDA graph cannot capture the weight cache

    # ---- schedules ----------------------------------------------------------------------------
    def schedule(self, epoch: int) -> dict[str, float]:
        """eps_max, rho and lr of `epoch` (ssat.schedules.at_epoch: the dry run prints the same numbers)."""
        return at_epoch(self.cfg, epoch)

    # ---- one step -----------------------------------------------------------------------------
    def _attack(self, x, targets, eps_max, rho, pgd_targets=None):
        """x_pgd by PGD-T in the eps_max-ball, then x_adv by margin-based interpolation (eval mode).
        targets: the margin's y~, and PGD's unless pgd_targets is given (AWR's hard inner target)."""
        a, m = self.cfg.attack, self.cfg.method
        step = a.step_size if a.step_size is not None else a.step_ratio * eps_max
        with record_function("pgd"):
            x_pgd = pgd(self.net, x, targets if pgd_targets is None else pgd_targets, eps_max, a.steps, step,
                        loss=a.inner_loss, init=a.init)
        if not m.interpolate:
            return x_pgd, x_pgd, torch.ones(len(x), device=x.device)
        with record_function("search"):
            x_adv, alpha = interpolate(self.net, x, x_pgd, targets, rho, m.tau, m.K)
        return x_pgd, x_adv, alpha

    def _union_step(self, x, y, eps_max, rho):
        """One union batch, x (B, ...) with y (B,) labels or (B, C) soft targets -> the method's loss terms."""
        m = self.cfg.method
        x = self._prep(x)
        standard = m.lam == 0 and not self.method.ce_on_adv  # no term uses x_adv: no attack
        with self._autocast():
            if standard:
                x_pgd = x_adv = x
                alpha = torch.zeros(len(x), device=x.device)
            else:
                x_pgd, x_adv, alpha = self._attack(x, y, eps_max, rho)
            self.net.train()
            lx = self.net(x)
            la = self.net(x_adv)
            lp = la if x_adv is x_pgd else self.net(x_pgd)
            terms = self.method.loss(lx, la, lp, y, m, self.method.beta(m))
        return terms, x, x_pgd, x_adv, alpha

    def _awr_step(self, xl, yl, xu, eps_max, rho):
        """A labeled batch xl (n, ...), yl (n,) and an unlabeled one xu (u, ...) -> the method's loss terms.

        The student's train-mode forwards (method.awr_forwards): "single": x_l, x_u, x_adv [, x_pgd] after the
        attack. "authors" (SRST-AWR's code): x_l and x_u before the attack, so that it runs with BN statistics
        updated by them, then x_adv, x_u again [, x_pgd]; the distillation term takes the first x_u logits, the
        robust KL and its weights the second. PGD's CE target (attack.inner_target): the teacher's
        probabilities (soft) or their argmax (hard); the margin always takes the probabilities.
        """
        m = self.cfg.method
        xl, xu = self._prep(xl), self._prep(xu)
        authors = m.awr_forwards == "authors"
        with self._autocast():
            if authors:
                self.net.train()
                ll, lu_kd = self.net(xl), self.net(xu)
            with torch.no_grad():
                t_logits = self.teacher_model(xu).float()
            y_t = torch.softmax(t_logits, 1)
            hard = y_t.argmax(1) if self.cfg.attack.inner_target == "hard" else None
            x_pgd, x_adv, alpha = self._attack(xu, y_t, eps_max, rho, pgd_targets=hard)
            self.net.train()
            if authors:
                la, lu = self.net(x_adv), self.net(xu)
            else:
                ll, lu, la = self.net(xl), self.net(xu), self.net(x_adv)
            lp = la if x_adv is x_pgd else self.net(x_pgd)
            kd = {"lu_kd": lu_kd} if authors else {}
            terms = self.method.loss(ll, yl, lu, la, lp, t_logits, m, self.method.beta(m), **kd)
        return terms, xu, x_pgd, x_adv, alpha

    # ---- the step: the one the trainer and the benchmarks run -----------------------------------
    def step(self, batch, sched: dict[str, float], acc: "StepStats", poison: bool = False) -> None:
        """One optimiser step on `batch` (union: x (B, C, H, W), y (B,) or (B, C); AWR: xl, yl, xu) at the
        schedule's eps_max and rho (floats), its statistics and image counts added to `acc`. The trainer's
        epoch, benchmarks/step_time.py, gpu_throughput.py and profile_step.py all run this. It replays the CUDA
        graph when graph mode runs and the batch has the captured shape; else (and for a fault step) it runs
        eagerly. poison: the loss times NaN (the fault injector's nan fault)."""
        if self.graph is not None and not poison and self.graph.fits(batch):
            self._graph_step(batch, sched, acc)
        else:
            self._eager_step(batch, sched, acc, poison)
            acc.eager_steps += 1
        acc.count(*self.images(batch))

    def _eager_step(self, batch, sched: dict[str, float], acc: "StepStats", poison: bool = False) -> None:
        """The step itself: the method's attack and outer forward, backward, SGD, statistics added in place.
        Each phase is a torch.profiler range (pgd and search nest in the outer forward); nothing here reads a
        device value (but fp16's gradient scaler, which checks for overflow), so a GPU is never waited for."""
        with record_function("outer forward"):
            if self.method.batching == "awr":  # the batching decides the step, the method's loss the terms
                terms, x, x_pgd, x_adv, alpha = self._awr_step(*batch, sched["eps_max"], sched["rho"])
            else:
                terms, x, x_pgd, x_adv, alpha = self._union_step(*batch, sched["eps_max"], sched["rho"])
            loss = terms["loss"]
            if poison:
                loss = loss * float("nan")
        with record_function("backward"):
            self.opt.zero_grad(set_to_none=True)
            (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        with record_function("optimizer"):
            if self.scaler is None:
                self.opt.step()
            else:  # fp16: the loss scaled up against underflow; a step whose gradients overflow is skipped
                self.scaler.step(self.opt)
                self.scaler.update()
        with record_function("statistics"):
            acc.bad |= ~torch.isfinite(loss.detach())
            acc.add(terms, x, x_pgd, x_adv, alpha)

    def images(self, batch) -> tuple[int, int]:
        """(attacked images, all images) of a batch: union (x, y) -> (B, B); AWR (xl, yl, xu) -> (u, n + u)."""
        if self.method.batching == "awr":
            return len(batch[2]), len(batch[0]) + len(batch[2])
        return len(batch[0]), len(batch[0])

    # ---- one epoch ----------------------------------------------------------------------------
    def train_epoch(self, epoch: int) -> dict[str, float]:
        sched = self.schedule(epoch)
        for g in self.opt.param_groups:
            g["lr"] = sched["lr"]
        # Statistics stay on the device and are read once per epoch (and the finiteness flag every
        # CHECK_EVERY steps): a .item() per step would stall a GPU that is launch-bound on small models.
        acc = self.acc
        acc.reset()
        t0 = time.perf_counter()
        self.scaler = torch.amp.GradScaler("cuda") if self.precision == "fp16" else None
        for i, batch in enumerate(ranged(self.batches.epoch(self.gen), "data")):
            faults.maybe("epoch", epoch, step=i)
            self.step(batch, sched, acc, poison=faults.active("nan", epoch))
            if (i + 1) % CHECK_EVERY == 0 or self.device.type == "cpu":
                self._check_finite(acc.bad, epoch, i + 1)
        self._check_finite(acc.bad, epoch, "the end")
        if self.swa is not None and epoch > self.cfg.optim.swa_start:
            self.swa.update_parameters(self.model)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        secs = time.perf_counter() - t0
        self.train_seconds += secs
        out = acc.summary()
        out.update({"sched/eps_max": sched["eps_max"], "sched/rho": sched["rho"], "sched/lr": sched["lr"],
                    "perf/epoch_seconds": secs, "perf/images_per_s": acc.n_img / secs if secs > 0 else 0.0})
        if self.cfg.system.graph_mode:
            out["perf/graph_steps"] = acc.graph_steps
        return out

    # ---- graph mode (system.graph_mode; CUDA only; measured: README, "The step engine")
    def _graph_refusal(self) -> str | None:
        s = self.cfg.system
        return graph_refusal(self.device.type, s.compile, self.method.batching, self.precision)

    def _graph_step(self, batch, sched: dict[str, float], acc: "StepStats") -> None:
        """A full batch through the CUDA graph; the first ones after a schedule change are eager warm-up steps
        and the one after them is captured (a capture records and runs nothing, so the replay runs it). A
        failed capture sends the run back to eager steps with the reason in graph_status."""
        try:
            replayed = self.graph.step(batch, sched, acc)
        except Exception as exc:  # noqa: BLE001 - any capture error: eager from here on, with the reason
            self.graph, self.graph_status = None, f"eager: capture failed ({type(exc).__name__}: {str(exc)[:200]})"
            self.log(f"system.graph_mode: {self.graph_status}")
            self._eager_step(batch, sched, acc)
            acc.eager_steps += 1
            return
        if replayed:
            acc.graph_steps += 1
            self.graph_status = "captured"
        else:
            acc.eager_steps += 1

    @staticmethod
    def _check_finite(bad: torch.Tensor, epoch: int, step) -> None:
        if bad.item():
            raise TrainingDiverged(f"loss became nan or infinite at epoch {epoch} (detected at step {step})")

    # ---- validation and selection -------------------------------------------------------------
    def _swa_active(self, epoch: int) -> bool:
        return self.swa is not None and epoch > self.cfg.optim.swa_start

    def _recompute_bn(self, model: nn.Module) -> None:
        """BN statistics of the SWA model recomputed on clean (unaugmented) training images: one cumulative
        pass in chunks of 500 (torch's update_bn; the model's mode is restored)."""
        xs = self.batches.xu if self.cfg.is_awr else self.batches.x
        with torch.no_grad():
            torch.optim.swa_utils.update_bn((self._prep(to_float(xs[i: i + 500])) for i in range(0, len(xs), 500)),
                                            model)

    def selection_model(self, epoch: int) -> nn.Module:
        """The model whose validation PGD-10 decides 'best': the SWA model once SWA has started, its BN statistics
        recomputed on clean images or averaged with the weights (optim.swa_bn)."""
        if self._swa_active(epoch):
            if self.cfg.optim.swa_bn == "recompute":
                self._recompute_bn(self.swa.module)
            return self.swa.module
        return self.model

    def validate(self, model: nn.Module) -> dict[str, float]:
        if not len(self.x_val):
            return {}
        res = evaluate_model(model, self.x_val, self.y_val, eps=self.cfg.eps, checkpoint="val", pgd_steps=(10,),
                             autoattack=False, batch_size=self.cfg.eval.batch_size, log=lambda s: None)
        return {"val/clean": res["clean"]["acc"], "val/pgd10": res["pgd10"]["acc"]}

    # ---- state --------------------------------------------------------------------------------
    def _weights(self, model: nn.Module, kind: str, epoch: int, metrics: dict) -> dict:
        return {"model": {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                "config": self.cfg.to_dict(), "kind": kind, "epoch": epoch, "metrics": metrics,
                "split_hash": self.split.hash, "model_name": self.cfg.model.name}

    def state_dict(self) -> dict:
        st = {"epoch": self.epoch, "model": self.model.state_dict(), "opt": self.opt.state_dict(),
              "gen": self.gen.get_state(), "torch_rng": torch.get_rng_state(),
              "best_score": self.best_score, "best_clean": self.best_clean, "best_epoch": self.best_epoch,
              "history": self.history,
              "train_seconds": self.train_seconds, "config_hash": self.cfg.config_hash(exclude_seed=False)}
        if self.device.type == "cuda":
            st["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        if self.swa is not None:
            st["swa"] = self.swa.state_dict()
        return st

    def load_state(self) -> None:
        st = load_verified(self.out / "state.pt", map_location=self.device)
        if st.get("config_hash") != self.cfg.config_hash(exclude_seed=False):
            raise ValueError(f"{self.out / 'state.pt'}: saved by another configuration; refusing to resume "
                             "into it (use a fresh output folder)")
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.gen.set_state(st["gen"].cpu())  # the data-order generator lives on the CPU (state loaded to the device)
        torch.set_rng_state(st["torch_rng"].cpu())
        if "cuda_rng" in st and self.device.type == "cuda":
            torch.cuda.set_rng_state(st["cuda_rng"].cpu(), self.device)
        if self.swa is not None and "swa" in st:
            self.swa.load_state_dict(st["swa"])
        self.epoch, self.best_score, self.best_epoch = st["epoch"], st["best_score"], st["best_epoch"]
        self.best_clean = st["best_clean"]
        self.history, self.train_seconds = st["history"], st["train_seconds"]
        self.log(f"resumed from {self.out / 'state.pt'} after epoch {self.epoch}")

    def save(self, metrics: dict, selection: nn.Module, improved: bool) -> None:
        if improved:
            save_verified(self._weights(selection, "best", self.epoch, metrics), self.out / "best.pt")
        last = self.swa.module if self._swa_active(self.epoch) else self.model
        save_verified(self._weights(last, "last", self.epoch, metrics), self.out / "last.pt")
        save_verified(self.state_dict(), self.out / "state.pt")  # last: it marks the epoch as done

    # ---- the loop -----------------------------------------------------------------------------
    def epochs(self) -> Iterator[dict]:
        """Train the remaining epochs; yield each epoch's metrics after its checkpoint is on disk."""
        for epoch in range(self.epoch + 1, self.cfg.optim.epochs + 1):
            metrics = {"epoch": epoch, **self.train_epoch(epoch)}
            selection = self.selection_model(epoch)
            # every val_every epochs, and always the last two: the convergence check compares them
            if epoch % self.cfg.eval.val_every == 0 or epoch >= self.cfg.optim.epochs - 1:
                metrics.update(self.validate(selection))
            # best = highest validation PGD-10, ties broken by clean accuracy (standard training scores 0 always)
            score = (metrics.get("val/pgd10", -math.inf), metrics.get("val/clean", -math.inf))
            improved = self.best_epoch == 0 or score > (self.best_score, self.best_clean)
            if improved:
                (self.best_score, self.best_clean), self.best_epoch = score, epoch
            if math.isfinite(self.best_score):  # not before the first validation: -inf would reach every logger
                metrics["val/best_pgd10"] = self.best_score
            self.epoch = epoch
            self.history.append(metrics)
            self.save(metrics, selection, improved)
            faults.maybe("after_checkpoint", epoch)
            self.log(_progress(epoch, self.cfg.optim.epochs, metrics))
            yield metrics

    def fit(self) -> list[dict]:
        return list(self.epochs())

    def final_evaluation(self, checkpoints=None) -> dict[str, dict]:
        """The test protocol on the checkpoints (default eval.checkpoints: best and last):
        {ckpt: {attack: {"acc", "protocol"}}}."""
        from .evaluate import first_n_test, load_checkpoint_model

        e = self.cfg.eval
        x, y, subset = first_n_test(self.arrays, e.test_n, self.device)
        x, n = self._prep(x), len(x)
        kinds = checkpoints or e.checkpoints
        aa_here = e.autoattack and (e.autoattack_seeds is None or self.cfg.seed in e.autoattack_seeds)
        self.log(f"final evaluation: {'/'.join(kinds)} checkpoint on {n:,} test images, "
                 + ", ".join(f"PGD-{s}" for s in e.pgd_steps)
                 + (f", AutoAttack on {min(e.autoattack_n or n, n):,}" if aa_here and set(kinds)
                    & set(e.autoattack_checkpoints) else ""))
        results = {}
        for kind in kinds:
            model, _, _ = load_checkpoint_model(self.out / f"{kind}.pt", self.device)
            if self.channels_last:
                model = model.to(memory_format=torch.channels_last)
            aa = aa_here and kind in e.autoattack_checkpoints
            results[kind] = evaluate_model(model, x, y, eps=self.cfg.eps, checkpoint=kind, pgd_steps=e.pgd_steps,
                                           autoattack=aa, autoattack_n=e.autoattack_n,
                                           batch_size=e.batch_size, subset=subset, log=self.log)
        metrics, tags = flatten_results(results)
        (self.out / "results.json").write_text(json.dumps({"metrics": metrics, "protocols": tags,
                                                           "best_epoch": self.best_epoch}, indent=1))
        return results


class StepStats:
    """An epoch's training statistics and finiteness flag (bad), kept on the device and added to in place by
    every step (a CUDA graph's replays add into the same buffers); read once per epoch by summary(). The image
    counts live on the host: the caller adds them (count), since a replay runs no Python."""

    KEYS = ("linf_max", "adv_linf", "alpha", "a_min", "a_one")

    def __init__(self, device: torch.device, K: int):
        self.device, self.k_floor = device, 2.0 ** -K
        self.sums: dict[str, torch.Tensor] = {}  # loss term -> sum over the attacked images
        self.stats = {k: torch.zeros((), device=device) for k in self.KEYS}
        self.bad = torch.zeros((), dtype=torch.bool, device=device)
        self.reset()

    def reset(self) -> None:
        for v in (*self.sums.values(), *self.stats.values(), self.bad):
            v.zero_()
        self.n_att = self.n_img = self.eager_steps = self.graph_steps = 0

    @torch.no_grad()
    def add(self, terms: dict[str, torch.Tensor], x, x_pgd, x_adv, alpha) -> None:
        """One step's loss terms (0-dim) and its x, x_pgd, x_adv (B, C, H, W) and alpha (B,)."""
        b = len(x)
        for k, v in terms.items():
            if k not in self.sums:
                self.sums[k] = torch.zeros((), device=self.device)
            self.sums[k] += v.detach().float() * b
        s = self.stats
        torch.maximum(s["linf_max"], (x_pgd - x).abs().max().float(), out=s["linf_max"])
        s["adv_linf"] += (x_adv - x).abs().flatten(1).max(1).values.float().sum()
        s["alpha"] += alpha.sum()
        s["a_min"] += (alpha <= self.k_floor + 1e-9).sum()
        s["a_one"] += (alpha >= 1.0).sum()

    def count(self, attacked: int, images: int) -> None:
        self.n_att += attacked
        self.n_img += images

    def summary(self) -> dict[str, float]:
        """train/<term> means over the attacked images and the adv/ statistics (docs/tracking.md names)."""
        n, s = max(self.n_att, 1), self.stats
        out = {f"train/{k}": v.item() / n for k, v in self.sums.items()}
        out.update({"adv/pgd_linf_max": s["linf_max"].item(), "adv/adv_linf_mean": s["adv_linf"].item() / n,
                    "adv/alpha_mean": s["alpha"].item() / n, "adv/alpha_min_share": s["a_min"].item() / n,
                    "adv/alpha_one_share": s["a_one"].item() / n})
        return out


# torch.compile modes that capture CUDA graphs themselves (cudagraph trees): a whole-step capture cannot hold them
GRAPHING_COMPILE_MODES = ("reduce-overhead", "max-autotune")


def graph_refusal(device_type: str, compile_mode: str, batching: str, precision: str) -> str | None:
    """Why graph mode (system.graph_mode) cannot run with these settings, or None when it can (the capture may
    still fail). compile "default" is allowed: its kernels are captured with the rest of the step."""
    if device_type != "cuda":
        return f"it needs a CUDA device and this run is on {device_type}"
    if compile_mode in GRAPHING_COMPILE_MODES:
        return (f"system.compile={compile_mode!r} captures CUDA graphs itself; with graph_mode, compile is 'off' "
                f"or 'default'")
    if batching != "union":
        return "it captures the union step; the AWR step runs eagerly"
    if precision == "fp16":
        return "fp16's gradient scaler reads the overflow flag on the host every step"
    return None


class GraphStep:
    """Trainer._eager_step captured as one CUDA graph, replayed on static copies of each batch (system.graph_mode).

    Requirements met here: GRAPH_WARMUP eager steps on real batches (on a side stream) before each capture, so
    cuDNN has picked its algorithms and SGD's momentum buffers exist; one capture per schedule (eps_max, rho
    and lr are baked into the kernels; an lr tensor would cost SGD's foreach path an .item() per step in
    torch 2.x); randomness inside the graph only from the default CUDA generator (PGD's start; augmentation is
    drawn up front on the CPU, outside the graph); autocast without its weight cache (Trainer._autocast);
    statistics accumulated in place into the trainer's StepStats. The caller keeps other batch shapes (the
    tail), fault steps and the finiteness check eager. Measured on a GPU: README.
    """

    def __init__(self, trainer: "Trainer", batch_size: int):
        self.tr, self.batch_size = trainer, batch_size
        self.graph, self.key, self.static, self.warm = None, None, None, 0

    def fits(self, batch) -> bool:
        return len(batch[0]) == self.batch_size

    def step(self, batch, sched: dict[str, float], acc: StepStats) -> bool:
        """Run one step; True when it was a replay, False for an eager warm-up step."""
        key = (sched["eps_max"], sched["rho"], self.tr.opt.param_groups[0]["lr"])
        if key != self.key:
            self.graph, self.key, self.warm = None, key, 0
        if self.graph is None and self.warm < GRAPH_WARMUP:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.tr._eager_step(batch, sched, acc)
            torch.cuda.current_stream().wait_stream(side)
            self.warm += 1
            return False
        if self.graph is None:
            self.static = [b.clone() for b in batch]
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.tr._eager_step(self.static, sched, acc)
            self.graph = graph
        else:
            for s, b in zip(self.static, batch):
                s.copy_(b, non_blocking=True)
        self.graph.replay()
        return True


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


def main(argv=None) -> int:
    from .cli import config_from_args
    from .config import ConfigError

    args = parser().parse_args(argv)
    try:
        cfg = config_from_args(args, epochs=args.epochs)
    except (ConfigError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.download:
        from .datasets import download

        download(cfg.data.dataset, cfg.data.root)
    out = Path(args.out or f"runs/{args.preset}-seed{cfg.seed}")
    t0 = time.perf_counter()
    trainer = Trainer(cfg, out)
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
    trainer.fit()
    print(f"training: {time.perf_counter() - t0:.1f}s, best epoch {trainer.best_epoch} "
          f"(val pgd10 {trainer.best_score:.2f}%)")
    if not args.no_final_eval:
        res = trainer.final_evaluation()
        for kind, per in res.items():
            print(f"test [{kind}] " + "  ".join(f"{a} {r['acc']:.2f}%" for a, r in per.items()))
    print(f"outputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

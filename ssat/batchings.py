"""How a method's training steps draw their images, one registry entry per batching: `register_batching(Batching(...))`
is the one call that adds one. A method names its batching (ssat/methods.py); the trainer builds its batches and the
SWA pass's images from the entry, hands the step engine the entry's step and image counts, the config checks the
settings only this batching takes, and the cost model reads what its steps draw. Nothing else names a batching.

- union (SSAT-MBI, RST, UAT++, TRADES): one batch mixing labeled images (one-hot targets) and pseudo-labeled ones
  (the teacher's softmax), batches (x (B, C, H, W), y~ (B, classes)); an epoch is one pass over both.
- awr (SRST-AWR, SSAT-MBI-AWR): a labeled and an unlabeled batch, (x_l (n, C, H, W), y_l (n,), x_u (u, C, H, W)),
  the teacher's network giving x_u's targets in the step; an epoch is one pass over the unlabeled images.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .augment import augment, augment_draws, crop_flip
from .datasets import DATASET_INFO, Split, to_float
from .registry import add_entry
from .step import awr_step, union_step


# ---- the batch iterators: images on their device, uint8 until a batch is drawn ----------------------------
class UnionBatches:
    """SSAT-MBI / RST / UAT++ / TRADES batching: uniform batches from labeled + pseudo-labeled unlabeled.

    An epoch is one pass over the union. Targets are one-hot for labeled and the teacher's softmax for
    unlabeled images: (N, C) on the device.
    """

    def __init__(self, x_train, y_train, split: Split, soft_targets: torch.Tensor | None, num_classes: int,
                 batch_size: int, device, flip: bool):
        lab = torch.from_numpy(split.labeled)
        idx = [lab]
        tgt = [torch.nn.functional.one_hot(y_train[lab], num_classes).float()]
        if soft_targets is not None:
            idx.append(torch.from_numpy(split.unlabeled))
            tgt.append(soft_targets.float().cpu())
        self.index = torch.cat(idx)
        self.x = x_train[self.index].to(device)
        self.targets = torch.cat(tgt).to(device)
        self.is_labeled = torch.zeros(len(self.index), dtype=torch.bool, device=device)
        self.is_labeled[: len(lab)] = True
        self.batch_size, self.flip = batch_size, flip

    def __len__(self):
        return len(self.index)

    def spans(self) -> list[tuple[int, int]]:
        """(start, end) of each batch in the epoch's order; a last batch of one image is left out (BatchNorm
        cannot train on a single image)."""
        n = len(self.index)
        ends = ((s, min(s + self.batch_size, n)) for s in range(0, n, self.batch_size))
        return [(s, e) for s, e in ends if e - s >= 2]

    def draws(self, gen: torch.Generator) -> torch.Tensor:
        """An epoch's random numbers, drawn from gen up front in the order a batch-by-batch draw makes them
        (the order, then oy, ox and mirror of each batch in turn): (4, N) int64 on the CPU, rows order, oy,
        ox, mirror (0/1); the positions of a left-out last image hold 0 in rows 1-3."""
        n = len(self.index)
        out = torch.zeros(4, n, dtype=torch.int64)
        out[0] = torch.randperm(n, generator=gen)
        for s, e in self.spans():
            oy, ox, mirror = augment_draws(e - s, gen, flip=self.flip)
            out[1, s:e], out[2, s:e] = oy, ox
            if mirror is not None:
                out[3, s:e] = mirror
        return out

    def epoch(self, gen: torch.Generator):
        """(x (B, C, H, W) float, targets (B, C)) per batch. One host-to-device copy per epoch (pinned and
        non-blocking on a GPU); no random draw and no synchronisation between batches."""
        host = self.draws(gen)
        if self.x.device.type == "cuda":
            host = host.pin_memory()
        d = host.to(self.x.device, non_blocking=True)  # `host` stays referenced until the epoch ends
        for s, e in self.spans():
            b = d[0, s:e]
            mirror = d[3, s:e].bool() if self.flip else None
            yield crop_flip(to_float(self.x[b]), d[1, s:e], d[2, s:e], mirror), self.targets[b]


class AWRBatches:
    """SRST-AWR / SSAT-MBI-AWR batching: each step 64 labeled + 128 unlabeled; an epoch is one pass over
    the unlabeled images. The labeled batch (data.labeled_sampling): "random", a fresh random draw every step;
    "cycle", SRST-AWR's cycling DataLoader: shuffled passes over the labeled set in batches of 64 (a pass's last
    batch holds the rest), reshuffled when a pass ends and restarted at every epoch. Both draw from the epoch's
    generator, whose state the trainer checkpoints between epochs."""

    def __init__(self, x_train, y_train, split: Split, labeled_batch: int, unlabeled_batch: int, device, flip: bool,
                 labeled_sampling: str = "random"):
        if labeled_sampling not in ("random", "cycle"):
            raise ValueError(f"data.labeled_sampling: {labeled_sampling!r}; allowed: random, cycle")
        self.xl = x_train[torch.from_numpy(split.labeled)].to(device)
        self.yl = y_train[torch.from_numpy(split.labeled)].to(device)
        self.xu = x_train[torch.from_numpy(split.unlabeled)].to(device)
        self.lb, self.ub, self.flip = min(labeled_batch, len(self.xl)), unlabeled_batch, flip
        self.labeled_sampling = labeled_sampling

    def __len__(self):
        return len(self.xu)

    def _labeled_batches(self, gen: torch.Generator):
        """Endless labeled index batches (lb,) or fewer, drawn from gen when needed."""
        n = len(self.xl)
        while True:
            perm = torch.randperm(n, generator=gen)
            if self.labeled_sampling == "random":
                yield perm[: self.lb]
            else:
                yield from perm.split(self.lb)

    def epoch(self, gen: torch.Generator):
        perm = torch.randperm(len(self.xu), generator=gen).to(self.xu.device)
        labeled = self._labeled_batches(gen)
        for s in range(0, len(perm), self.ub):
            bu = perm[s: s + self.ub]
            if len(bu) < 2:
                continue
            bl = next(labeled).to(self.xl.device)
            xl = augment(to_float(self.xl[bl]), gen, flip=self.flip)
            xu = augment(to_float(self.xu[bu]), gen, flip=self.flip)
            yield xl, self.yl[bl], xu


# ---- the registry ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Batching:
    """One batching.

    build(cfg, arrays, split, teacher, num_classes, device) -> its batches: `.epoch(gen)` yields the steps'
        batches, `len()` counts the images an epoch goes through once.
    step(net, cfg, teacher_net, batch, eps_max, rho, forward) -> (terms, x, x_pgd, x_adv, alpha): ssat/step.py's
        step on one batch (teacher_net: the teacher's network where `teacher_net` says the step runs it, else None).
    sizes(cfg, batches) -> the lengths of a full batch's tensors: what graph mode captures and compiles for.
    counts(batch) -> (attacked images, all images) of a batch, for the step's statistics.
    bn_images(batches) -> the uint8 training images of the SWA model's BN statistics pass.
    own_settings: (dotted config path, the value every other batching keeps) of the settings only this one takes.
    step_images(cfg) -> images an epoch counts per step (union: the batch; AWR: the unlabeled batch).
    """
    name: str
    label: str
    build: Callable[..., Any]
    step: Callable[..., tuple]
    sizes: Callable[..., tuple[int, ...]]
    counts: Callable[..., tuple[int, int]]
    bn_images: Callable[..., torch.Tensor]
    step_images: Callable[..., int]
    teacher_net: bool = False
    own_settings: tuple[tuple[str, Any], ...] = ()


BATCHING_REGISTRY: dict[str, Batching] = {}


def register_batching(batching: Batching) -> Batching:
    """Add a batching under its name; a taken name is refused."""
    return add_entry(BATCHING_REGISTRY, "batching", batching)


def _union_batches(cfg, arrays, split, teacher, num_classes, device) -> UnionBatches:
    soft = teacher.probabilities() if teacher is not None and len(split.unlabeled) else None
    return UnionBatches(arrays.x_train, arrays.y_train, split, soft, num_classes, cfg.optim.batch_size, device,
                        DATASET_INFO[cfg.data.dataset].flip)


def _awr_batches(cfg, arrays, split, teacher, num_classes, device) -> AWRBatches:
    o = cfg.optim
    return AWRBatches(arrays.x_train, arrays.y_train, split, o.labeled_batch, o.unlabeled_batch, device,
                      DATASET_INFO[cfg.data.dataset].flip, cfg.data.labeled_sampling)


register_batching(Batching(
    "union", "union", _union_batches,
    step=lambda net, cfg, teacher_net, batch, eps_max, rho, forward: union_step(net, cfg, *batch, eps_max, rho,
                                                                                 forward=forward),
    sizes=lambda cfg, b: (cfg.optim.batch_size, cfg.optim.batch_size),
    counts=lambda batch: (len(batch[0]), len(batch[0])),
    bn_images=lambda b: b.x,
    step_images=lambda cfg: cfg.optim.batch_size))
register_batching(Batching(
    "awr", "AWR", _awr_batches,
    step=lambda net, cfg, teacher_net, batch, eps_max, rho, forward: awr_step(net, teacher_net, cfg, *batch, eps_max,
                                                                               rho, forward=forward),
    sizes=lambda cfg, b: (b.lb, b.lb, b.ub),
    counts=lambda batch: (len(batch[2]), len(batch[0]) + len(batch[2])),
    bn_images=lambda b: b.xu,
    step_images=lambda cfg: cfg.optim.unlabeled_batch,
    teacher_net=True,
    own_settings=(("data.labeled_sampling", "random"), ("method.awr_forwards", "single"),
                  ("attack.inner_target", "soft"))))

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

from .datasets import DATASET_INFO, AWRBatches, UnionBatches
from .registry import add_entry
from .step import awr_step, union_step


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

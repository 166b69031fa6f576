"""The process around a run: device, seeds, threads, model mode. A leaf: it imports nothing of ssat, so every
other module may use it and `ssat/` imports form a chain."""
from __future__ import annotations

import contextlib
import random

import numpy as np
import torch
import torch.nn as nn


def resolve_device(name: str) -> torch.device:
    """system.device: 'auto' (CUDA when visible, else CPU), 'cpu' or 'cuda' (refused when no GPU is visible)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("system.device: 'cuda' but no CUDA device is visible; use 'cpu' or 'auto'")
    return torch.device(name)


def training_precision(precision: str, device_type: str) -> str:
    """system.precision on a device: auto is bf16 on CUDA; auto and fp16 are fp32 on a CPU (float16 autocast
    and its gradient scaler are for CUDA); fp32 and bf16 are themselves."""
    if device_type != "cuda":
        return "fp32" if precision in ("auto", "fp16") else precision
    return "bf16" if precision == "auto" else precision


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA). The trainer draws from torch only after this."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextlib.contextmanager
def threads(n: int | None):
    """torch intra-op threads set to n inside the block (None: unchanged), restored after it."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextlib.contextmanager
def patched_forwards(replacements: list[tuple[nn.Module, object]]):
    """Within the block each module's forward is the function paired with it; on exit, also when the block raises,
    each gets back what it had: its own instance-level forward, or its class's."""
    saved = []
    try:
        for m, forward in replacements:
            saved.append((m, m.__dict__.get("forward")))
            m.forward = forward
        yield
    finally:
        for m, own in reversed(saved):
            if own is None:
                del m.forward
            else:
                m.forward = own


@contextlib.contextmanager
def eval_mode(model: nn.Module):
    """Run the block with the model in eval mode and restore its previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)

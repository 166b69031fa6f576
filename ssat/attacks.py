"""L-inf PGD-T (the inner maximisation), with gradients taken with respect to the input only."""
from __future__ import annotations

import contextlib

import torch
import torch.nn as nn

from .divergences import kl_rows, soft_cross_entropy
from .runtime import eval_mode


def start_point(x: torch.Tensor, eps: float, init: str = "uniform",
                generator: torch.Generator | None = None) -> torch.Tensor:
    """delta^(0): uniform in the eps-ball (PGD, the paper) or 0.001*N(0, 1) (TRADES), clamped to [0, 1].
    Drawn from `generator` (on x's device) when given, else from the default one."""
    if init == "uniform":
        noise = torch.empty_like(x).uniform_(-eps, eps, generator=generator)
    elif init == "normal":
        noise = 0.001 * torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    else:
        raise ValueError(f"init {init!r}; allowed: uniform, normal")
    return (x + noise).clamp(0.0, 1.0)


@contextlib.contextmanager
def frozen(model: nn.Module):
    """Run the block with requires_grad off on the model's parameters that had it (restored afterwards): an
    attack needs the input gradient only, so autograd neither records nor computes weight gradients."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p in params:
            p.requires_grad_(True)


def pgd(model: nn.Module, x: torch.Tensor, targets: torch.Tensor, eps: float, steps: int, step_size: float,
        loss: str = "ce", random_start: bool = True, init: str = "uniform",
        generator: torch.Generator | None = None) -> torch.Tensor:
    """PGD-T under the L-inf norm (eq. 2), run with the model in eval mode and its parameters frozen (both
    restored). eps and step_size are host numbers (the schedule's), so the branch on eps reads no device value.
    The random start comes from `generator` when given (evaluation), else from the default generator (training).

    x: (B, C, H, W) in [0, 1]; targets: (B,) labels or (B, C) soft targets (loss "ce");
    loss "kl" maximises KL(p(x) || p(x')) (TRADES form, eq. 4) and ignores targets.
    Returns x_pgd: (B, C, H, W), detached, ||x_pgd - x||_inf <= eps, values in [0, 1].
    """
    x = x.detach()
    if eps <= 0 or steps <= 0:
        return x.clone()
    with eval_mode(model), frozen(model):
        if loss == "kl":
            with torch.no_grad():
                clean_logits = model(x).detach()
        elif loss != "ce":
            raise ValueError(f"loss {loss!r}; allowed: ce, kl")
        x_adv = start_point(x, eps, init, generator) if random_start else x.clone()
        for _ in range(steps):
            x_adv.requires_grad_(True)
            logits = model(x_adv)
            obj = kl_rows(clean_logits, logits) if loss == "kl" else soft_cross_entropy(logits.float(), targets)
            (grad,) = torch.autograd.grad(obj.sum(), x_adv)
            x_adv = x_adv.detach() + step_size * grad.sign()
            x_adv = torch.min(torch.max(x_adv, x - eps), x + eps).clamp(0.0, 1.0)
    return x_adv.detach()


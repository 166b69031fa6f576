"""The margin function (eqs. 6-8) and margin-based interpolation (Algorithm 1, lines 9-18)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .runtime import eval_mode


def as_probabilities(targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(B,) labels -> (B, C) one-hot; (B, C) probabilities pass through (as float)."""
    if targets.dtype in (torch.int64, torch.int32):
        return F.one_hot(targets, num_classes).float()
    return targets.float()


def margin(logits: torch.Tensor, targets: torch.Tensor, tau: float) -> torch.Tensor:
    """d = max_k s_k - sum_j y~_j s_j with s = softmax(logits / tau) (eqs. 6-8).

    logits: (B, C); targets: (B,) labels (one-hot, eq. 7) or (B, C) soft pseudo-labels (eq. 8). -> (B,)
    """
    s = F.softmax(logits.float() / tau, dim=1)
    y = as_probabilities(targets, logits.shape[1])
    return s.max(dim=1).values - (y * s).sum(dim=1)


def interpolate(model: nn.Module, x: torch.Tensor, x_pgd: torch.Tensor, targets: torch.Tensor, rho: float,
                tau: float, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary search for alpha_hat, batched: K forward passes for the whole batch (Algorithm 1, l. 9-18).

    x, x_pgd: (B, C, H, W); targets: (B,) or (B, C). Returns (x_adv, alpha_hat) with
    x_adv = alpha_hat * x_pgd + (1 - alpha_hat) * x: (B, C, H, W) and alpha_hat = alpha_r: (B,).
    A sample whose margin is >= rho at every tested alpha gets 2^-K; one that never reaches rho gets 1.
    Runs in eval mode without autograd; the model's mode is restored.
    """
    b = x.shape[0]
    lo = torch.zeros(b, device=x.device, dtype=torch.float32)
    hi = torch.ones(b, device=x.device, dtype=torch.float32)
    shape = (b,) + (1,) * (x.dim() - 1)
    with torch.no_grad(), eval_mode(model):
        for _ in range(steps):
            alpha = (lo + hi) / 2
            a = alpha.view(shape).to(x.dtype)
            d = margin(model(a * x_pgd + (1 - a) * x), targets, tau)
            below = d < rho
            lo = torch.where(below, alpha, lo)
            hi = torch.where(below, hi, alpha)
        a = hi.view(shape).to(x.dtype)
        return (a * x_pgd + (1 - a) * x).detach(), hi

"""The per-sample divergences the losses (ssat/losses.py) and the attack's inner loss (ssat/attacks.py) are made of."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-sample CE. logits: (B, C); targets: (B,) class indices or (B, C) probabilities -> (B,)."""
    if targets.dtype in (torch.int64, torch.int32):
        return F.cross_entropy(logits, targets.long(), reduction="none")  # cross_entropy takes int64 only
    return -(targets * F.log_softmax(logits, dim=1)).sum(dim=1)


def kl_rows(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """Per-sample KL(p || q) with p = softmax(logits_p), q = softmax(logits_q). (B, C), (B, C) -> (B,)."""
    log_p = F.log_softmax(logits_p.float(), dim=1)
    log_q = F.log_softmax(logits_q.float(), dim=1)
    return F.kl_div(log_q, log_p, reduction="none", log_target=True).sum(dim=1)

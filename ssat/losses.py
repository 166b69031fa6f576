"""Outer-minimisation losses: pure functions of logits; KL terms are batch means. Which method uses which
(and with which beta) is its entry in ssat/methods.py.

Which branch is detached, per loss:
- ssat-mbi / rst / trades: nothing (the clean distribution p(x) carries gradients, as in the RST and
  TRADES code).
- uat++: the clean side p(x) is detached (the paper's fixed copy theta-hat, eq. 5).
- srst-awr / ssat-mbi-awr: nothing; the weights w and w_adv carry gradients too (as SRST-AWR's code).
Each returns a dict of scalar tensors: "loss" (to minimise) and its named terms (for logging).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .divergences import kl_rows, soft_cross_entropy


def mbi_loss(logits_x: torch.Tensor, logits_adv: torch.Tensor, logits_pgd: torch.Tensor, targets: torch.Tensor,
             lam: float, beta: float) -> dict[str, torch.Tensor]:
    """SSAT-MBI (eq. 9): CE(f(x), y~) + lam * [beta KL(p(x)||p(x_adv)) + (1 - beta) KL(p(x)||p(x_pgd))].

    logits_*: (B, C); targets: (B,) labels or (B, C) soft targets. With x_adv = x_pgd (interpolation
    off) or beta = 0 this is RST (eq. 3); on fully labeled data with the KL inner loss it is TRADES.
    logits_pgd None: x_pgd was not forwarded, its term having weight 0 (beta = 1); the term is left out.
    """
    ce = soft_cross_entropy(logits_x.float(), targets).mean()
    kl_adv = kl_rows(logits_x, logits_adv).mean()
    terms, robust = {"ce": ce, "kl_adv": kl_adv}, beta * kl_adv
    if logits_pgd is not None:
        terms["kl_pgd"] = kl_adv if logits_pgd is logits_adv else kl_rows(logits_x, logits_pgd).mean()
        robust = robust + (1 - beta) * terms["kl_pgd"]
    return {"loss": ce + lam * robust, **terms}


def uat_loss(logits_x: torch.Tensor, logits_adv: torch.Tensor, targets: torch.Tensor,
             lam: float) -> dict[str, torch.Tensor]:
    """UAT++ (eq. 5): CE(f(x_adv), y~) + lam * KL(p_fixed(x) || p(x_adv)), the clean side detached."""
    ce = soft_cross_entropy(logits_adv.float(), targets).mean()
    kl_adv = kl_rows(logits_x.detach(), logits_adv).mean()
    return {"loss": ce + lam * kl_adv, "ce": ce, "kl_adv": kl_adv, "kl_pgd": kl_adv}


def awr_weight(teacher_probs: torch.Tensor, logits_x: torch.Tensor, logits_attacked: torch.Tensor) -> torch.Tensor:
    """w(x) = 1/2 sum_c y~_c p(c|x) + 1/2 sum_c y~_c (1 - p(c|x')) (eq. 11). (B, C) x3 -> (B,), not detached."""
    p_x = F.softmax(logits_x.float(), dim=1)
    p_a = F.softmax(logits_attacked.float(), dim=1)
    return 0.5 * (teacher_probs * p_x).sum(1) + 0.5 * (teacher_probs * (1 - p_a)).sum(1)


def awr_loss(logits_l: torch.Tensor, y_l: torch.Tensor, logits_u: torch.Tensor, logits_u_adv: torch.Tensor,
             logits_u_pgd: torch.Tensor, teacher_logits_u: torch.Tensor, *, lam: float, beta: float,
             label_smoothing: float, gamma_prime: float, tau_prime: float,
             logits_u_kd: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """SSAT-MBI-AWR (appendix; SRST-AWR when beta = 0 or x_adv = x_pgd).

    LS-CE(f(x_l), y_l) + gamma' KL(p_T^tau'(x_u) || p^tau'(x_u))
      + lam * [beta KL(p(x_u)||p(x_u_adv)) w_adv + (1 - beta) KL(p(x_u)||p(x_u_pgd)) w]
    logits_l: (n, C), y_l: (n,); logits_u*, teacher_logits_u: (m, C). y~ = softmax(teacher logits).
    logits_u_kd: (m, C) x_u logits of the distillation term where they come from another forward than
    logits_u (SRST-AWR's code forwards x_u before the attack and again after it); None: logits_u.
    logits_u_pgd None: x_u_pgd was not forwarded, its term having weight 0 (beta = 1); the term is left out.
    """
    ls_ce = F.cross_entropy(logits_l.float(), y_l, label_smoothing=label_smoothing)
    y_t = F.softmax(teacher_logits_u.float(), dim=1)
    student_kd = logits_u if logits_u_kd is None else logits_u_kd
    kd = kl_rows(teacher_logits_u / tau_prime, student_kd / tau_prime).mean()
    w_adv = awr_weight(y_t, logits_u, logits_u_adv)
    kl_adv = (kl_rows(logits_u, logits_u_adv) * w_adv).mean()
    terms, robust = {"ce": ls_ce, "kd": kd, "kl_adv": kl_adv, "w_adv": w_adv.mean()}, beta * kl_adv
    if logits_u_pgd is not None:
        same = logits_u_pgd is logits_u_adv  # interpolation off: x_u_pgd is x_u_adv
        w_pgd = w_adv if same else awr_weight(y_t, logits_u, logits_u_pgd)
        kl_pgd = kl_adv if same else (kl_rows(logits_u, logits_u_pgd) * w_pgd).mean()
        terms.update(kl_pgd=kl_pgd, w_pgd=w_pgd.mean())
        robust = robust + (1 - beta) * kl_pgd
    return {"loss": ls_ce + gamma_prime * kd + lam * robust, **terms}

"""One step of Algorithm 1 as plain functions: the attack (PGD-T, then margin-based interpolation), the train-mode
forwards and the method's loss terms. How fast it runs (autocast, channels_last, torch.compile, CUDA graphs, the
optimiser and its gradient scaler) is ssat/engine.py's business; it calls these functions and nothing here knows it.

    x_pgd, x_adv, alpha = adversarial_examples(net, cfg, x, targets, eps_max, rho)      # lines 5-18
    terms, x, x_pgd, x_adv, alpha = union_step(net, cfg, x, y, eps_max, rho)           # lines 19-20 (eq. 9)
    terms, xu, x_pgd, x_adv, alpha = awr_step(net, teacher, cfg, xl, yl, xu, eps_max, rho)  # the appendix

`terms` is the method's dict of scalar tensors, "loss" first (ssat/losses.py); images are (B, C, H, W) in [0, 1].
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
from torch.profiler import record_function

from .attacks import pgd
from .interpolation import interpolate

Forward = Callable[[nn.Module, list], list]


def separate_forwards(net: nn.Module, xs: list[torch.Tensor]) -> list[torch.Tensor]:
    """One forward per image batch, in order: each BatchNorm layer normalises every batch with its own statistics
    and updates its running statistics once per batch (the paper's code; ssat.segmented gives the same in one)."""
    return [net(x) for x in xs]


def adversarial_examples(net: nn.Module, cfg, x: torch.Tensor, targets: torch.Tensor, eps_max: float, rho: float,
                         pgd_targets: torch.Tensor | None = None):
    """x (B, C, H, W), targets (B,) labels or (B, C) soft targets y~ -> (x_pgd, x_adv, alpha (B,)).

    x_pgd: PGD-T in the eps_max-ball (eq. 2; step attack.step_size, else attack.step_ratio * eps_max) on
    pgd_targets where given (AWR's hard inner target), else on targets. x_adv: margin-based interpolation between
    x and x_pgd at threshold rho (eqs. 6-8, Algorithm 1 lines 9-18) on targets; without interpolation x_adv is
    x_pgd (the same tensor) and alpha is 1.
    """
    a, m = cfg.attack, cfg.method
    step = a.step_size if a.step_size is not None else a.step_ratio * eps_max
    with record_function("pgd"):
        x_pgd = pgd(net, x, targets if pgd_targets is None else pgd_targets, eps_max, a.steps, step,
                    loss=a.inner_loss, init=a.init)
    if not m.interpolate:
        return x_pgd, x_pgd, torch.ones(len(x), device=x.device)
    with record_function("search"):
        x_adv, alpha = interpolate(net, x, x_pgd, targets, rho, m.tau, m.K)
    return x_pgd, x_adv, alpha


def pgd_term_weighted(cfg) -> bool:
    """Whether x_pgd goes through the model for its own KL term: its weight 1 - beta is above 0, or
    method.pgd_forward is "always" (the code before it forwarded x_pgd at beta = 1 too)."""
    return cfg.method.pgd_forward == "always" or cfg.method_entry.beta(cfg.method) < 1


def _with_pgd(xs: list[torch.Tensor], x_adv: torch.Tensor, x_pgd: torch.Tensor, cfg) -> tuple[list, bool]:
    """The batches of one train-mode forward call, x_pgd appended when it is an image of its own (not x_adv
    itself) and its term is weighted; and whether it was appended."""
    own = x_adv is not x_pgd and pgd_term_weighted(cfg)
    return (xs + [x_pgd] if own else xs), own


def _pgd_logits(logits: list[torch.Tensor], la: torch.Tensor, x_adv, x_pgd, own: bool) -> torch.Tensor | None:
    """lp for the loss: x_pgd's own logits (the last), la where x_pgd is x_adv, None where its term has weight 0."""
    if own:
        return logits[-1]
    return la if x_adv is x_pgd else None


def union_step(net: nn.Module, cfg, x: torch.Tensor, y: torch.Tensor, eps_max: float, rho: float,
               forward: Forward = separate_forwards):
    """One union batch (SSAT-MBI, RST, UAT++, TRADES): x (B, C, H, W) with y (B,) labels or (B, C) soft targets
    -> (terms, x, x_pgd, x_adv, alpha). Train-mode forwards of x, x_adv [, x_pgd], in that order; with lambda 0
    (and a method whose CE is on x) no term uses an adversarial example: standard training, no attack."""
    m, method = cfg.method, cfg.method_entry
    if m.lam == 0 and not method.ce_on_adv:
        x_pgd = x_adv = x
        alpha = torch.zeros(len(x), device=x.device)
    else:
        x_pgd, x_adv, alpha = adversarial_examples(net, cfg, x, y, eps_max, rho)
    net.train()
    xs, own = _with_pgd([x, x_adv], x_adv, x_pgd, cfg)
    logits = forward(net, xs)
    lx, la = logits[0], logits[1]
    terms = method.loss(lx, la, _pgd_logits(logits, la, x_adv, x_pgd, own), y, m, method.beta(m))
    return terms, x, x_pgd, x_adv, alpha


def awr_step(net: nn.Module, teacher: nn.Module, cfg, xl: torch.Tensor, yl: torch.Tensor, xu: torch.Tensor,
             eps_max: float, rho: float, forward: Forward = separate_forwards):
    """A labeled batch xl (n, ...), yl (n,) and an unlabeled one xu (u, ...) (SRST-AWR, SSAT-MBI-AWR)
    -> (terms, xu, x_pgd, x_adv, alpha), the attack on xu with the teacher's softmax as y~.

    Train-mode forwards (method.awr_forwards): "single": x_l, x_u, x_adv [, x_pgd] after the attack. "authors"
    (SRST-AWR's code): x_l and x_u before the attack, so that it runs with BN statistics updated by them, then
    x_adv, x_u again [, x_pgd]; the distillation term takes the first x_u logits, the robust KL and its weights the
    second. PGD's CE target (attack.inner_target): the teacher's probabilities (soft) or their argmax (hard); the
    margin always takes the probabilities.
    """
    m, method = cfg.method, cfg.method_entry
    authors = m.awr_forwards == "authors"
    if authors:
        net.train()
        ll, lu_kd = forward(net, [xl, xu])
    with torch.no_grad():
        t_logits = teacher(xu).float()
    y_t = torch.softmax(t_logits, 1)
    hard = y_t.argmax(1) if cfg.attack.inner_target == "hard" else None
    x_pgd, x_adv, alpha = adversarial_examples(net, cfg, xu, y_t, eps_max, rho, pgd_targets=hard)
    net.train()
    if authors:
        xs, own = _with_pgd([x_adv, xu], x_adv, x_pgd, cfg)
        logits = forward(net, xs)
        la, lu = logits[0], logits[1]
    else:
        xs, own = _with_pgd([xl, xu, x_adv], x_adv, x_pgd, cfg)
        logits = forward(net, xs)
        ll, lu, la = logits[0], logits[1], logits[2]
    kd = {"lu_kd": lu_kd} if authors else {}
    terms = method.loss(ll, yl, lu, la, _pgd_logits(logits, la, x_adv, x_pgd, own), t_logits, m, method.beta(m),
                        **kd)
    return terms, xu, x_pgd, x_adv, alpha

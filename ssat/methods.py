"""The training methods, one registry entry each: `register_method(Method(...))` is the one call that adds one.

The config's allowed names and its interpolation rule, the trainer's step dispatch and the dry run's cost
estimate read an entry; nothing else names a method. A method's loss is a pure function of logits (the
equations are in ssat/losses.py); which step produces those logits is its batching (ssat/batchings.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .losses import awr_loss, mbi_loss, uat_loss
from .registry import add_entry

@dataclass(frozen=True)
class Method:
    """One method: its table label, its batching, its loss, whether it may interpolate, and any beta it fixes.

    batching "union": one batch mixing labeled and pseudo-labeled images; the loss is
        loss(lx, la, lp, y, m, beta) with lx, la, lp the (B, C) logits of x, x_adv, x_pgd and y the (B,)
        labels or (B, C) soft targets.
    batching "awr": a labeled and an unlabeled batch and the teacher's logits on the unlabeled one; the loss is
        loss(ll, yl, lu, la, lp, lt, m, beta) with ll (n, C), yl (n,) and lu, la, lp, lt (u, C) for x_u,
        x_u_adv, x_u_pgd and the teacher; with method.awr_forwards=authors it also gets lu_kd=, the logits of
        the first x_u forward (before the attack) for its distillation term (lu: the second, after it).
    Either returns a dict of scalar tensors: "loss" (minimised) and its named terms (logged as train/<term>).
    m is the run's MethodConfig, beta is m.beta or forced_beta (see `beta`).
    may_interpolate: the loss can use x_adv apart from x_pgd; False: method.interpolate=true is refused.
    ce_on_adv: its CE is on x_adv (UAT++), so lam = 0 still attacks; otherwise a union step with lam = 0 is
        standard training and skips the attack. (The AWR step always attacks.)
    """
    name: str
    label: str                        # its row in the paper's tables (runs record it: ssat.method_label)
    batching: str                     # its entry in ssat/batchings.py
    loss: Callable[..., dict[str, torch.Tensor]]
    may_interpolate: bool
    forced_beta: float | None = None
    ce_on_adv: bool = False

    def beta(self, m) -> float:
        """The beta its loss gets: forced_beta where the method fixes it, else method.beta."""
        return m.beta if self.forced_beta is None else self.forced_beta


METHOD_REGISTRY: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add a method under its name; a taken name or an unknown batching is refused."""
    from .batchings import BATCHING_REGISTRY

    if method.batching not in BATCHING_REGISTRY:
        raise ValueError(f"method {method.name!r}: batching {method.batching!r}; allowed: "
                         f"{', '.join(BATCHING_REGISTRY)}")
    return add_entry(METHOD_REGISTRY, "method", method)


def method_names(where=lambda m: True) -> tuple[str, ...]:
    """The registered methods (those for which `where(method)` holds), in registration order (the config's
    allowed values)."""
    return tuple(name for name, m in METHOD_REGISTRY.items() if where(m))


def _mbi(lx, la, lp, y, m, beta: float) -> dict[str, torch.Tensor]:
    """SSAT-MBI (eq. 9); RST (eq. 3) is it with beta = 0, TRADES the same equation on fully labeled data."""
    return mbi_loss(lx, la, lp, y, m.lam, beta)


def _uat(lx, la, lp, y, m, beta: float) -> dict[str, torch.Tensor]:
    """UAT++ (eq. 5): no beta, and no x_pgd term (it never interpolates, so lp is la)."""
    return uat_loss(lx, la, y, m.lam)


def _awr(ll, yl, lu, la, lp, lt, m, beta: float, lu_kd=None) -> dict[str, torch.Tensor]:
    """SSAT-MBI-AWR (appendix); SRST-AWR is it with beta = 0."""
    return awr_loss(ll, yl, lu, la, lp, lt, lam=m.lam, beta=beta, label_smoothing=m.label_smoothing,
                    gamma_prime=m.gamma_prime, tau_prime=m.tau_prime, logits_u_kd=lu_kd)


register_method(Method("ssat-mbi", "SSAT-MBI", "union", _mbi, may_interpolate=True))
register_method(Method("rst", "RST", "union", _mbi, may_interpolate=False, forced_beta=0.0))
register_method(Method("uat++", "UAT++", "union", _uat, may_interpolate=False, ce_on_adv=True))
register_method(Method("trades", "TRADES", "union", _mbi, may_interpolate=True))
register_method(Method("srst-awr", "SRST-AWR", "awr", _awr, may_interpolate=False, forced_beta=0.0))
register_method(Method("ssat-mbi-awr", "SSAT-MBI-AWR", "awr", _awr, may_interpolate=True))

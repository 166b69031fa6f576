"""Pure functions of the epoch (counted from 1): global epsilon scheduling, rho, learning rate."""
from __future__ import annotations

SCHEDULES = ("const", "linear", "curious")


def epsilon_schedule(name: str, epoch: int, *, eps: float = 8 / 255, t: int | None = None,
                     gamma: float = 1.0) -> float:
    """eps_max at `epoch` (Sec. 3.2).

    const:   eps
    linear:  eps * min(e / t, 1)                       (Linear-t)
    curious: gamma * eps * e / t for e <= t, else eps  (Curious-(gamma, t); the paper's text: the peak
             gamma*eps is reached at e = t and eps holds from t + 1; the authors' code settles a step earlier)
    """
    if epoch < 1:
        raise ValueError(f"epoch {epoch}: epochs count from 1")
    if name == "const":
        return eps
    if name not in SCHEDULES:
        raise ValueError(f"schedule {name!r}; allowed: {', '.join(SCHEDULES)}")
    if t is None or t < 1:
        raise ValueError(f"schedule {name!r} needs t >= 1, got {t!r}")
    if name == "linear":
        return eps * min(epoch / t, 1.0)
    return gamma * eps * epoch / t if epoch <= t else eps


def rho_schedule(epoch: int, rho0: float, double_epoch: int | None = None) -> float:
    """rho(e) = rho0, doubled from `double_epoch` on when it is set (CIFAR-10: 0.05 -> 0.1 at 75)."""
    return 2 * rho0 if double_epoch is not None and epoch >= double_epoch else rho0


def lr_at(epoch: int, lr: float, milestones: list[int], factors: list[float]) -> float:
    """Initial rate times the factor of the latest milestone reached (not compounded): 0.1/0.01/0.005 at 60/70/90."""
    mult = 1.0
    for m, f in zip(milestones, factors):
        if epoch >= m:
            mult = f
    return lr * mult

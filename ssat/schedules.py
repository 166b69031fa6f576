"""Pure functions of the epoch (counted from 1): global epsilon scheduling, rho, learning rate.

The epsilon schedules are a registry: one `register_schedule(Schedule(...))` call adds one, and the config's
allowed values and its t / gamma rules, the trainer and the dry run read it from here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .registry import add_entry


@dataclass(frozen=True)
class Schedule:
    """A global epsilon schedule (Sec. 3.2): eps_max(epoch, eps, t, gamma) -> float, epochs from 1.

    needs_t: attack.t must be set, 1 <= t <= optim.epochs (eps_max gets it >= 1);
    needs_gamma: attack.gamma is used and must be >= 1 (the config refuses less).
    title and label are what the tables show; runs record them (ssat.schedule_title, ssat.schedule_label,
    ssat.schedule_row), so analysis needs no list of schedules.
    """
    name: str
    eps_max: Callable[[int, float, int | None, float], float]
    title: str                        # its name in the tables: Table 3's row (with t and gamma), Fig. 5's groups
    label: str                        # its short label in the ablation tables' Glo. column ("none": no schedule)
    needs_t: bool = False
    needs_gamma: bool = False

    @property
    def row_format(self) -> str:
        """Table 3's row name, {t} and {gamma} to fill: Const, Linear-{t}, Curious-({gamma},{t})."""
        if not self.needs_t:
            return self.title
        return f"{self.title}-({{gamma}},{{t}})" if self.needs_gamma else f"{self.title}-{{t}}"


SCHEDULE_REGISTRY: dict[str, Schedule] = {}


def register_schedule(schedule: Schedule) -> Schedule:
    """Add a schedule under its name; a taken name is refused."""
    return add_entry(SCHEDULE_REGISTRY, "schedule", schedule)


def schedule_names() -> tuple[str, ...]:
    """The registered schedules, in registration order (the config's allowed values)."""
    return tuple(SCHEDULE_REGISTRY)


def _const(epoch: int, eps: float, t: int | None, gamma: float) -> float:
    """const: eps at every epoch."""
    return eps


def _linear(epoch: int, eps: float, t: int, gamma: float) -> float:
    """Linear-t: eps * min(e / t, 1)."""
    return eps * min(epoch / t, 1.0)


def _curious(epoch: int, eps: float, t: int, gamma: float) -> float:
    """Curious-(gamma, t): gamma * eps * e / t for e <= t, else eps. The paper's text: the peak gamma*eps is
    reached at e = t and eps holds from t + 1; the authors' code settles a step earlier."""
    return gamma * eps * epoch / t if epoch <= t else eps


register_schedule(Schedule("const", _const, title="Const", label="none"))
register_schedule(Schedule("linear", _linear, title="Linear", label="Lin.", needs_t=True))
register_schedule(Schedule("curious", _curious, title="Curious", label="Cur.", needs_t=True, needs_gamma=True))


def epsilon_schedule(name: str, epoch: int, *, eps: float = 8 / 255, t: int | None = None,
                     gamma: float = 1.0) -> float:
    """eps_max at `epoch` of the registered schedule `name` (Sec. 3.2; const, linear, curious above)."""
    if epoch < 1:
        raise ValueError(f"epoch {epoch}: epochs count from 1")
    if name not in SCHEDULE_REGISTRY:
        raise ValueError(f"schedule {name!r}; allowed: {', '.join(SCHEDULE_REGISTRY)}")
    schedule = SCHEDULE_REGISTRY[name]
    if schedule.needs_t and (t is None or t < 1):
        raise ValueError(f"schedule {name!r} needs t >= 1, got {t!r}")
    return schedule.eps_max(epoch, eps, t, gamma)


def rho_schedule(epoch: int, rho0: float, double_epoch: int | None = None) -> float:
    """rho(e) = rho0, doubled from `double_epoch` on when it is set (CIFAR-10: 0.05 -> 0.1 at 75)."""
    return 2 * rho0 if double_epoch is not None and epoch >= double_epoch else rho0


def lr_at(epoch: int, lr: float, milestones: list[int], factors: list[float], after_milestone: bool = False) -> float:
    """Initial rate times the factor of the latest milestone reached (not compounded): 0.1/0.01/0.005 at 60/70/90.

    after_milestone: a milestone m takes effect at epoch m + 1, as torch's MultiStepLR stepped after each epoch
    (SRST-AWR's code): milestones [50, 150], factors [0.1, 0.01] give lr for epochs 1-50, 0.1 lr for 51-150.
    """
    start = 1 if after_milestone else 0
    mult = 1.0
    for m, f in zip(milestones, factors):
        if epoch >= m + start:
            mult = f
    return lr * mult


def at_epoch(cfg, epoch: int) -> dict[str, float]:
    """A run's (a validated ssat.config.Config) eps_max, rho and lr at `epoch`: what the trainer uses, what the
    dry run prints."""
    a, m, o = cfg.attack, cfg.method, cfg.optim
    return {"eps_max": epsilon_schedule(a.schedule, epoch, eps=cfg.eps, t=a.t, gamma=a.gamma),
            "rho": rho_schedule(epoch, m.rho0, m.rho_double_epoch),
            "lr": lr_at(epoch, o.lr, o.lr_milestones, o.lr_factors, o.lr_decay_after_milestone)}


def schedule_table(cfg) -> dict[str, list[float]]:
    """`at_epoch` for every epoch of the run: {"eps_max": [...], "rho": [...], "lr": [...]}, epochs 1..E."""
    rows = [at_epoch(cfg, e) for e in range(1, cfg.optim.epochs + 1)]
    return {k: [r[k] for r in rows] for k in ("eps_max", "rho", "lr")}

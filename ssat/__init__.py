"""SSAT-MBI: semi-supervised adversarial training with margin-based interpolation (CVPR 2025), in PyTorch.

Pure PyTorch: nothing here imports ray, mlflow or optuna. Public surface:
    margin(logits, targets, tau) -> Tensor[B]
    interpolate(model, x, x_pgd, targets, rho, tau, steps) -> (x_adv, alpha)
    pgd(model, x, targets, eps, steps, step_size, loss="ce", random_start=True) -> x_pgd
    epsilon_schedule(name, epoch, *, eps=8/255, t=None, gamma=1.0) -> float
    register_method(Method(...)), register_schedule(Schedule(...)): a new method / epsilon schedule, one call
    Config / from_dict / preset, Trainer, evaluate_model, create_model
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

# Each public name is imported when first used, not with the package: `python -m ssat.train` (evaluate, teacher,
# datasets) would otherwise find its module imported by this file before runpy runs it (runpy's RuntimeWarning
# "found in sys.modules after import of package 'ssat'", and two copies of the module).
_EXPORTS = {"pgd": "attacks", "Config": "config", "ConfigError": "config", "from_dict": "config",
            "scale_epochs": "epoch_scaling", "evaluate_model": "evaluate", "interpolate": "interpolation",
            "margin": "interpolation", "awr_loss": "losses", "mbi_loss": "losses", "uat_loss": "losses",
            "Method": "methods", "register_method": "methods", "create_model": "models", "PRESETS": "presets",
            "preset": "presets", "Schedule": "schedules", "epsilon_schedule": "schedules", "lr_at": "schedules",
            "register_schedule": "schedules", "rho_schedule": "schedules", "Trainer": "train"}

if TYPE_CHECKING:  # what the names are, for readers and type checkers
    from .attacks import pgd
    from .config import Config, ConfigError, from_dict
    from .epoch_scaling import scale_epochs
    from .evaluate import evaluate_model
    from .interpolation import interpolate, margin
    from .losses import awr_loss, mbi_loss, uat_loss
    from .methods import Method, register_method
    from .models import create_model
    from .presets import PRESETS, preset
    from .schedules import Schedule, epsilon_schedule, lr_at, register_schedule, rho_schedule
    from .train import Trainer


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = ["pgd", "Config", "ConfigError", "from_dict", "scale_epochs", "evaluate_model", "interpolate", "margin",
           "awr_loss", "mbi_loss", "uat_loss", "create_model", "PRESETS", "preset", "epsilon_schedule", "lr_at",
           "rho_schedule", "Trainer", "Method", "register_method", "Schedule", "register_schedule"]

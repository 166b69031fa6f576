"""SSAT-MBI: semi-supervised adversarial training with margin-based interpolation (CVPR 2025), in PyTorch.

Pure PyTorch: nothing here imports ray, mlflow or optuna. Public surface:
    margin(logits, targets, tau) -> Tensor[B]
    interpolate(model, x, x_pgd, targets, rho, tau, steps) -> (x_adv, alpha)
    pgd(model, x, targets, eps, steps, step_size, loss="ce", random_start=True) -> x_pgd
    epsilon_schedule(name, epoch, *, eps=8/255, t=None, gamma=1.0) -> float
    register_method(Method(...)), register_schedule(Schedule(...)): a new method / epsilon schedule, one call
    Config / from_dict / preset, Trainer, evaluate_model, create_model
"""
from .attacks import pgd
from .config import Config, ConfigError, from_dict, scale_epochs
from .evaluate import evaluate_model
from .interpolation import interpolate, margin
from .losses import awr_loss, mbi_loss, uat_loss
from .methods import Method, register_method
from .models import create_model
from .presets import PRESETS, preset
from .schedules import Schedule, epsilon_schedule, lr_at, register_schedule, rho_schedule
from .train import Trainer

__all__ = ["pgd", "Config", "ConfigError", "from_dict", "scale_epochs", "evaluate_model", "interpolate", "margin",
           "awr_loss", "mbi_loss", "uat_loss", "create_model", "PRESETS", "preset", "epsilon_schedule", "lr_at",
           "rho_schedule", "Trainer", "Method", "register_method", "Schedule", "register_schedule"]

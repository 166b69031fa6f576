"""The rules a run's `Config` must follow (ssat/config.py checks every config it builds with `validate`): the allowed
values of each choice, the ranges, and the cross-field rules, each broken rule a `ConfigError` naming the field,
the value and what is allowed."""
from __future__ import annotations

import difflib
from typing import Any

from .messages import brief
from .schedules import SCHEDULE_REGISTRY, schedule_names

DATASETS = ("mnist5k", "cifar10", "cifar100", "svhn")
INNER_LOSSES = ("ce", "kl")
INNER_TARGETS = ("soft", "hard")
INITS = ("uniform", "normal")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
LABELED_SAMPLINGS = ("random", "cycle")
SWA_BNS = ("recompute", "average")
AWR_FORWARDS = ("single", "authors")
DEVICES = ("auto", "cpu", "cuda")
COMPILE_MODES = ("auto", "off", "default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune")
SWITCHES = ("auto", "on", "off")
SWITCH_FIELDS = ("system.graph_mode", "system.fused_forward", "system.fold_bn")
PGD_FORWARDS = ("weighted", "always")
SELECT_BY = ("pgd10", "clean")
MAX_EPOCHS = 10_000  # optim.epochs and --epochs: far past any real run (the paper's longest is 200)


class ConfigError(ValueError):
    """A configuration mistake, reported with the field, the value and what is allowed."""


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _one_of(path: str, value: Any, allowed) -> None:
    if value not in allowed:
        near = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.5)
        hint = f" (did you mean '{near[0]}'?)" if near else ""
        raise ConfigError(f"{path}: {brief(value)} is not allowed{hint}; allowed: {', '.join(map(str, allowed))}")


def validate(cfg) -> None:
    """Every cross-field rule of a run config, in this order: the choices, the method, the batching's own
    settings, the attack, the optimiser, then evaluation, system, data, model and teacher. Raises ConfigError
    naming field, value and the rule (the first rule broken)."""
    _check_choices(cfg)
    _check_method(cfg)
    _check_batching_settings(cfg)
    _check_attack(cfg)
    _check_optim(cfg)
    _check_rest(cfg)
    validate_teacher(cfg.teacher)


def _check_choices(cfg) -> None:
    """Each choice among its allowed values."""
    from .methods import method_names  # local imports: both import torch, config stays light
    from .models import MODELS

    d, m, a, s = cfg.data, cfg.method, cfg.attack, cfg.system
    _one_of("data.dataset", d.dataset, DATASETS)
    _one_of("model.name", cfg.model.name, sorted(MODELS))
    _one_of("method.name", m.name, method_names())
    _one_of("attack.schedule", a.schedule, schedule_names())
    _one_of("attack.inner_loss", a.inner_loss, INNER_LOSSES)
    _one_of("attack.init", a.init, INITS)
    _one_of("attack.inner_target", a.inner_target, INNER_TARGETS)
    _one_of("data.labeled_sampling", d.labeled_sampling, LABELED_SAMPLINGS)
    _one_of("optim.swa_bn", cfg.optim.swa_bn, SWA_BNS)
    _one_of("method.awr_forwards", m.awr_forwards, AWR_FORWARDS)
    _one_of("system.precision", s.precision, PRECISIONS)
    _one_of("system.device", s.device, DEVICES)
    _one_of("system.compile", s.compile, COMPILE_MODES)
    _one_of("system.graph_mode", s.graph_mode, SWITCHES)
    _one_of("system.fused_forward", s.fused_forward, SWITCHES)
    _one_of("system.fold_bn", s.fold_bn, SWITCHES)
    _one_of("method.pgd_forward", m.pgd_forward, PGD_FORWARDS)
    _one_of("eval.select_by", cfg.eval.select_by, SELECT_BY)


def _check_method(cfg) -> None:
    """The method's ranges, and interpolation only where its loss uses it."""
    from .methods import METHOD_REGISTRY, method_names

    m, o = cfg.method, cfg.optim
    _need(0 < m.rho0 < 1, f"method.rho0: {m.rho0} is out of range; allowed: 0 < rho0 < 1 "
          "(and 2*rho0 < 1 when rho_double_epoch is set)")
    if m.rho_double_epoch is not None:
        _need(2 * m.rho0 < 1, f"method.rho0: {m.rho0} doubled is {2 * m.rho0}; allowed: 2*rho0 < 1")
        _need(1 <= m.rho_double_epoch <= o.epochs, f"method.rho_double_epoch: {m.rho_double_epoch} "
              f"is beyond the run; allowed: 1..optim.epochs ({o.epochs}) or None")
    _need(0 <= m.beta <= 1, f"method.beta: {m.beta} is out of range; allowed: 0 <= beta <= 1")
    _need(m.tau > 0, f"method.tau: {m.tau}; allowed: tau > 0")
    _need(m.K >= 1, f"method.K: {m.K}; allowed: K >= 1 (binary-search steps)")
    _need(m.lam >= 0, f"method.lam: {m.lam}; allowed: lambda >= 0")
    _need(0 <= m.label_smoothing < 1, f"method.label_smoothing: {m.label_smoothing}; allowed: [0, 1)")
    _need(m.tau_prime > 0, f"method.tau_prime: {m.tau_prime}; allowed: > 0")
    _need(m.gamma_prime >= 0, f"method.gamma_prime: {m.gamma_prime}; allowed: >= 0")
    if not METHOD_REGISTRY[m.name].may_interpolate:
        interpolating = ", ".join(method_names(lambda e: e.may_interpolate))
        _need(not m.interpolate, f"method.interpolate: true with method.name={brief(m.name)}, whose loss never "
              f"uses the interpolated example; use one of {interpolating}, or set interpolate=false")


def _check_attack(cfg) -> None:
    """Precision on the device, eps, the schedule's length and shape, the training attack."""
    a, o, s = cfg.attack, cfg.optim, cfg.system
    _need(not (s.precision == "fp16" and s.device == "cpu"), "system.precision: 'fp16' with system.device='cpu'; "
          "fp16 is float16 autocast with a gradient scaler, for CUDA; on a CPU use fp32 (or auto)")
    _need(cfg.eps is None or cfg.eps > 0, f"attack.eps: {a.eps}; allowed: eps > 0")
    schedule = SCHEDULE_REGISTRY[a.schedule]
    if schedule.needs_t:
        _need(a.t is not None, f"attack.t: None with attack.schedule={brief(a.schedule)}; allowed: 1..optim.epochs")
        _need(1 <= a.t <= o.epochs, f"attack.t: {a.t} is beyond the run; allowed: 1..optim.epochs ({o.epochs})")
    if schedule.needs_gamma:
        _need(a.gamma >= 1, f"attack.gamma: {a.gamma}; allowed: gamma >= 1 (1 is Linear-t)")
    _need(a.steps >= 1, f"attack.steps: {a.steps}; allowed: >= 1")
    _need(a.step_ratio > 0, f"attack.step_ratio: {a.step_ratio}; allowed: > 0")
    _need(a.step_size is None or a.step_size > 0, f"attack.step_size: {a.step_size}; allowed: > 0 or None")


def _check_optim(cfg) -> None:
    """Epochs, learning rate and its milestones, batch sizes, weight averaging."""
    o = cfg.optim
    _need(1 <= o.epochs <= MAX_EPOCHS,
          f"optim.epochs: {brief(o.epochs)}; allowed: 1..{MAX_EPOCHS:,} (a limit no real run "
          "comes near)")
    _need(o.lr > 0, f"optim.lr: {o.lr}; allowed: > 0")
    _need(len(o.lr_milestones) == len(o.lr_factors), f"optim.lr_milestones {o.lr_milestones} and "
          f"optim.lr_factors {o.lr_factors}: allowed: lists of the same length")
    _need(all(b > a_ for a_, b in zip(o.lr_milestones, o.lr_milestones[1:])),
          f"optim.lr_milestones: {o.lr_milestones}; allowed: strictly increasing epochs")
    _need(all(1 <= x <= o.epochs for x in o.lr_milestones),
          f"optim.lr_milestones: {o.lr_milestones}; allowed: epochs within 1..{o.epochs}")
    _need(all(f > 0 for f in o.lr_factors), f"optim.lr_factors: {o.lr_factors}; allowed: > 0")
    for name in ("batch_size", "labeled_batch", "unlabeled_batch"):
        _need(getattr(o, name) >= 1, f"optim.{name}: {getattr(o, name)}; allowed: >= 1")
    if o.swa_start is not None:
        _need(0 <= o.swa_start < o.epochs, f"optim.swa_start: {o.swa_start}; allowed: 0..{o.epochs - 1} or None")
    _need(o.swa_start is not None or o.swa_bn == "recompute", f"optim.swa_bn: {brief(o.swa_bn)} without SWA "
          "(optim.swa_start is None); allowed without SWA: 'recompute' (the default; set optim.swa_start to average)")


def _check_rest(cfg) -> None:
    """Evaluation, system, seeds, the split's sizes and the model's dropout."""
    d, e, s = cfg.data, cfg.eval, cfg.system
    _need(e.batch_size >= 1, f"eval.batch_size: {e.batch_size}; allowed: >= 1")
    _need(e.val_every >= 1, f"eval.val_every: {e.val_every}; allowed: >= 1")
    _need(e.test_n is None or e.test_n >= 1, f"eval.test_n: {e.test_n}; allowed: >= 1 or None")
    _need(e.autoattack_n is None or e.autoattack_n >= 1, f"eval.autoattack_n: {e.autoattack_n}; allowed: >= 1")
    _need(all(x >= 1 for x in e.pgd_steps), f"eval.pgd_steps: {e.pgd_steps}; allowed: positive integers")
    _need(e.checkpoints and all(c in ("best", "last") for c in e.checkpoints),
          f"eval.checkpoints: {e.checkpoints}; allowed: a non-empty list of best, last")
    _need(all(c in ("best", "last") for c in e.autoattack_checkpoints),
          f"eval.autoattack_checkpoints: {e.autoattack_checkpoints}; allowed: a list of best, last")
    _need(s.threads is None or s.threads >= 1, f"system.threads: {s.threads}; allowed: >= 1 or None")
    _need(s.cuda_memory_fraction is None or 0 < s.cuda_memory_fraction <= 1,
          f"system.cuda_memory_fraction: {s.cuda_memory_fraction}; allowed: 0 < x <= 1 or None")
    _need(-2**63 <= cfg.seed < 2**64, f"seed: {cfg.seed}; allowed: a 64-bit integer (torch's seed range)")
    _need(d.split_seed >= 0, f"data.split_seed: {d.split_seed}; allowed: >= 0 (numpy's seed range)")
    _need(d.n_labeled is None or d.n_labeled >= 1, f"data.n_labeled: {d.n_labeled}; allowed: >= 1")
    _need(d.n_val is None or d.n_val >= 0, f"data.n_val: {d.n_val}; allowed: >= 0")
    _need(d.n_unlabeled is None or d.n_unlabeled >= 0, f"data.n_unlabeled: {d.n_unlabeled}; allowed: >= 0 or None")
    _need(0 <= cfg.model.dropout < 1, f"model.dropout: {cfg.model.dropout}; allowed: [0, 1)")


def _check_batching_settings(cfg) -> None:
    """The settings that one batching alone takes (ssat/batchings.py own_settings) keep their neutral value under a
    method of another batching; hard targets are refused with the KL attack."""
    from .batchings import BATCHING_REGISTRY
    from .methods import method_names

    m, a, mine = cfg.method, cfg.attack, cfg.batching
    for owner in BATCHING_REGISTRY.values():
        for path, neutral in owner.own_settings if owner is not mine else ():
            section, key = path.split(".")
            value = getattr(getattr(cfg, section), key)
            users = ", ".join(method_names(lambda e: e.batching == owner.name))
            _need(value == neutral, f"{path}: {brief(value)} with method.name={brief(m.name)}, whose {mine.label} "
                  f"batches have no {owner.label} step; allowed with it: {brief(neutral)} (the other value is for the "
                  f"{owner.label} methods: {users})")
    _need(a.inner_target == "soft" or a.inner_loss == "ce", f"attack.inner_target: {brief(a.inner_target)} with "
          "attack.inner_loss='kl', whose attack has no target (KL to the clean prediction); allowed with kl: 'soft'")


def validate_teacher(t) -> None:
    from .models import MODELS

    if t.model is not None:
        _one_of("teacher.model", t.model, sorted(MODELS))
    for name in ("steps", "eval_every", "labeled_batch", "unlabeled_batch"):
        _need(getattr(t, name) >= 1, f"teacher.{name}: {getattr(t, name)}; allowed: >= 1")
    _need(t.lr > 0, f"teacher.lr: {t.lr}; allowed: > 0")
    _need(0 < t.threshold < 1, f"teacher.threshold: {t.threshold}; allowed: 0 < threshold < 1")
    _need(t.lambda_u >= 0, f"teacher.lambda_u: {t.lambda_u}; allowed: >= 0")
    _need(t.ema is None or 0 < t.ema < 1, f"teacher.ema: {t.ema}; allowed: 0 < ema < 1 or None")
    _need(0 <= t.cutout <= 1, f"teacher.cutout: {t.cutout}; allowed: 0..1")
    _need(0 <= t.randaugment_magnitude <= 30,
          f"teacher.randaugment_magnitude: {t.randaugment_magnitude}; allowed: 0..30")
    _need(-2**63 <= t.seed < 2**64, f"teacher.seed: {t.seed}; allowed: a 64-bit integer (torch's seed range)")
    _need(t.randaugment_ops >= 0, f"teacher.randaugment_ops: {t.randaugment_ops}; allowed: >= 0")

"""One typed, validated configuration for a run: the single source of truth.

A `Config` is built from nested dicts (YAML/JSON) or dotted overrides (`method.beta=0.5`), validated on
construction, and flattened for logging. Every error names the field, the value given and what is allowed,
and is raised before any compute starts.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from .config_checks import SWITCH_FIELDS, ConfigError, validate
from .config_hash import config_hash
from .messages import brief
from .schedules import schedule_names



def __getattr__(name: str):
    """METHODS and SCHEDULES: the registered names, read when asked (ssat/methods.py, ssat/schedules.py)."""
    if name == "METHODS":
        from .methods import method_names  # local import: the method registry holds losses (torch)

        return method_names()
    if name == "SCHEDULES":
        return schedule_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


MAX_STRING = 4_096   # a string setting (a name from a registry, a path): PATH_MAX


@dataclass
class DataConfig:
    dataset: str = "mnist5k"
    root: str | None = None            # folder holding the torchvision on-disk files (not for mnist5k)
    split_seed: int = 0                # separate from the run seed: one split serves many runs
    n_labeled: int | None = None       # None: dataset default (CIFAR 4000, SVHN 1000, MNIST-5k 100)
    n_val: int | None = None           # None: dataset default (CIFAR/SVHN 1000, MNIST-5k 500)
    n_unlabeled: int | None = None     # cap on the unlabeled pool (a random subset; smoke runs); None: all
    unlabeled_includes_labeled: bool = False  # the paper's SSAT-MBI code: no; FixMatch/SRST-AWR: yes
    fully_labeled: bool = False        # supervised runs (TRADES, Tables 5-6): every non-validation image labeled
    labeled_idx_file: str | None = None       # .npy of labeled train indices (e.g. SRST-AWR's file)
    labeled_sampling: str = "random"   # AWR labeled batches: random (a fresh draw every step) or cycle (shuffled
                                       # passes over the labeled set, restarted every epoch: SRST-AWR's loader)
    pseudo_labels: str | None = None   # teacher outputs file (.pt); None: the split's cached teacher
    teacher_dir: str | None = None     # teacher cache root; None: <runs root>/teachers


@dataclass
class ModelConfig:
    name: str = "cnn-small"
    dropout: float = 0.0


@dataclass
class MethodConfig:
    name: str = "ssat-mbi"
    lam: float = 8.0                   # lambda: weight of the consistency (KL) terms
    beta: float = 0.4                  # share of the interpolated example in the KL terms
    interpolate: bool = True
    rho0: float = 0.05                 # margin threshold at epoch 1
    rho_double_epoch: int | None = None  # rho doubles from this epoch on
    tau: float = 2.0                   # temperature of the margin's softmax
    K: int = 3                         # binary-search steps
    label_smoothing: float = 0.2       # AWR: alpha' of the labeled CE
    gamma_prime: float = 4.0           # AWR: weight of the teacher-KL term
    tau_prime: float = 1.2             # AWR: temperature of the teacher-KL term
    awr_forwards: str = "single"       # AWR: single (x_l, x_u, x_adv after the attack) or authors (x_l, x_u
                                       # before it, x_adv and x_u again after it; see ssat.step.awr_step)
    pgd_forward: str = "weighted"      # weighted: x_pgd goes through the model in train mode only when its KL term
                                       # has weight (1 - beta > 0), as the authors' code; always: also at beta = 1,
                                       # where the forward changes nothing but BatchNorm's running statistics
                                       # (the code before it; hash-neutral)


@dataclass
class AttackConfig:
    eps: float | None = None           # eps of the schedule; None: dataset default (8/255, MNIST 0.3)
    schedule: str = "curious"
    t: int | None = 70
    gamma: float = 1.25
    steps: int = 10
    step_ratio: float = 0.25           # PGD step = step_ratio * eps_max (paper: eps_max/4)
    step_size: float | None = None     # absolute step (TRADES' 0.007); overrides step_ratio
    init: str = "uniform"              # uniform start in the eps-ball, or TRADES' 0.001*N(0,1)
    inner_loss: str = "ce"
    inner_target: str = "soft"         # AWR with the CE inner loss: the teacher's probabilities (soft) or its
                                       # argmax (hard, SRST-AWR's code); the margin always takes the probabilities


@dataclass
class OptimConfig:
    epochs: int = 100
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 2e-4
    nesterov: bool = False
    lr_decay_after_milestone: bool = False  # true: a milestone's rate starts one epoch later (MultiStepLR
                                            # stepped after each epoch, SRST-AWR's code)
    lr_milestones: list[int] = field(default_factory=lambda: [60, 70, 90])
    lr_factors: list[float] = field(default_factory=lambda: [0.1, 0.01, 0.005])  # of the initial rate
    batch_size: int = 128              # union batch (SSAT-MBI, RST, UAT++, TRADES)
    labeled_batch: int = 64            # AWR variants
    unlabeled_batch: int = 128         # AWR variants
    swa_start: int | None = None       # SWA from the epoch after this one (the AWR presets: 50; any method)
    swa_bn: str = "recompute"          # the SWA model's BN statistics: recompute (one pass over the clean training
                                       # images, torch's update_bn; AWR) or average (the running statistics averaged
                                       # with the weights: they keep the adversarial inputs' statistics; the demo)


@dataclass
class EvalConfig:
    val_every: int = 1                 # validate every this many epochs, and at the last two
    select_by: str = "pgd10"           # the validation accuracy that decides the best checkpoint, the other one
                                       # breaking ties: pgd10 (the paper's protocol) or clean (standard training,
                                       # whose PGD-10 is a few surviving images: noise, not robustness)
    batch_size: int = 500
    test_n: int | None = None          # None: the whole test set
    autoattack: bool = True
    autoattack_n: int | None = None    # None: the same images as PGD; e.g. 200 in the demo
    checkpoints: list[str] = field(default_factory=lambda: ["best", "last"])  # which get the test protocol
    autoattack_checkpoints: list[str] = field(default_factory=lambda: ["best"])  # the paper's protocol: the
                                       # checkpoint with the best validation PGD-10; add "last" to attack it too
    tf32: bool = False                 # cuDNN/matmul TF32 in evaluation (CUDA); False: strict fp32 (protocol records
                                       # say which)
    autoattack_seeds: list[int] | None = None  # None: every seed; the CPU demo runs AutoAttack for seed 0 only
    pgd_steps: list[int] = field(default_factory=lambda: [10, 20, 40])


@dataclass
class TeacherConfig:
    """FixMatch teacher (Algorithm 1, lines 1-3; the appendix follows SRST-AWR's recipe)."""
    model: str | None = None           # None: the student's architecture
    steps: int = 1000                  # SGD steps in total (cosine schedule over them)
    eval_every: int = 100              # validate (and maybe select) every this many steps
    lr: float = 0.03
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 5e-4
    labeled_batch: int = 64
    unlabeled_batch: int = 128         # 128 = SRST-AWR; the original FixMatch uses 7 x 64 = 448
    threshold: float = 0.95
    lambda_u: float = 1.0
    ema: float | None = None           # None: no weight EMA (SRST-AWR); the original FixMatch: 0.999
    randaugment_ops: int = 2
    randaugment_magnitude: int = 10
    cutout: float = 0.5                # Cutout square side as a fraction of the image side
    seed: int = 0
    unlabeled_includes_labeled: bool = True  # FixMatch trains on all training images except validation


@dataclass
class SystemConfig:
    device: str = "auto"
    precision: str = "auto"            # training autocast: auto = bf16 on CUDA (1.46x for WRN-28-5 on an
                                       # H200), fp32 on CPU; fp16 = float16 with a gradient scaler on CUDA
                                       # (SRST-AWR's amp), fp32 on CPU; evaluation is always fp32
    channels_last: bool | None = None  # None: on (faster on CPU and GPU, see ssat/train.py)
    compile: str = "auto"              # torch.compile mode of the trained model; auto: "default" on CUDA (its kernels
                                       # are what graph mode captures), off elsewhere; reduce-overhead and
                                       # max-autotune capture CUDA graphs themselves (then graph mode stays off)
    graph_mode: str = "auto"           # the whole step (attack, forwards, loss, backward, SGD) captured as one CUDA
                                       # graph and replayed: auto = on where it can run (CUDA), on, off (true/false
                                       # accepted); a refusal or a failed capture trains eagerly, the reason logged
                                       # and recorded (repro.graph_mode)
    fused_forward: str = "auto"        # a step's train-mode forwards (x, x_adv, x_pgd) as one forward over their
                                       # concatenation, BatchNorm statistics kept per batch (ssat/segmented.py; exact
                                       # up to convolution rounding): auto = on for CUDA, on, off
    fold_bn: str = "auto"              # eval-mode forwards (the attack, the interpolation search, validation and
                                       # test) with each BatchNorm folded into the convolution before it
                                       # (ssat/folding.py; exact up to float rounding): auto = on for CPU, on, off;
                                       # never with torch.compile (it fuses them itself)
    compile_cache: str | None = None   # a folder shared by a sweep's trials: torch.compile's caches as one verified
                                       # bundle per (torch, GPU, model, method, ...) key; None: this machine's own
    cudnn_benchmark: bool = True       # cuDNN picks the fastest convolution algorithms (CUDA runs; reset per trial)
    threads: int | None = None         # torch intra-op threads; pinned for bit-identical resume
    cuda_memory_fraction: float | None = None  # cap for a fractional-GPU trial


@dataclass
class Config:
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    system: SystemConfig = field(default_factory=SystemConfig)

    def __post_init__(self):
        validate(self)

    # ---- conversions -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_flat(self) -> dict[str, Any]:
        """Dotted keys -> values (`method.beta`: 0.4)."""
        return dict(_flatten(self.to_dict()))

    def config_hash(self, exclude_seed: bool = True) -> str:
        """12 hex chars identifying what is trained (ssat/config_hash.py says what is left out, and why)."""
        return config_hash(self, exclude_seed)

    @property
    def eps(self) -> float:
        return self.attack.eps if self.attack.eps is not None else DATASET_EPS[self.data.dataset]

    @property
    def method_entry(self):
        """The method's registry entry (ssat/methods.py): its loss, batching and beta rule."""
        from .methods import METHOD_REGISTRY

        return METHOD_REGISTRY[self.method.name]

    @property
    def batching(self):
        """How the method's steps draw their images: its batching's registry entry (ssat/batchings.py)."""
        from .batchings import BATCHING_REGISTRY

        return BATCHING_REGISTRY[self.method_entry.batching]

    def replace(self, **dotted: Any) -> "Config":
        """A new validated config with dotted overrides (`replace(**{"method.beta": 0.5})`)."""
        return from_dict(self.to_dict(), overrides=dotted)

DATASET_EPS = {"mnist5k": 0.3, "cifar10": 8 / 255, "cifar100": 8 / 255, "svhn": 8 / 255}
SECTIONS = {f.name: f.type for f in dataclasses.fields(Config) if f.name != "seed"}


def _flatten(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


# ---- construction ----------------------------------------------------------------------------
def _suggest(key: str, valid, listed: str | None = None) -> str:
    """'; did you mean X?' for the nearest valid key, then the valid keys (or `listed`, what stands for them)."""
    near = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    return f"{hint} Valid keys: {listed or ', '.join(sorted(valid))}"


def _section_class(name: str):
    return {"data": DataConfig, "model": ModelConfig, "method": MethodConfig, "attack": AttackConfig,
            "optim": OptimConfig, "eval": EvalConfig, "teacher": TeacherConfig, "system": SystemConfig}[name]


def _coerce(path: str, value: Any, tp) -> Any:
    """Check (and gently coerce) a value against a field's annotation, or raise ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        if isinstance(value, str) and value.lower() in ("none", "null") and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)][0]
        return _coerce(path, value, inner)
    if origin is list:
        (inner,) = typing.get_args(tp)
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, str):
            value = [v for v in value.replace("[", "").replace("]", "").split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {brief(value)} ({type(value).__name__})")
        return [_coerce(f"{path}[{i}]", v, inner) for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off"):
            return value.lower() in ("true", "yes", "on")
        raise ConfigError(f"{path}: expected true or false, got {brief(value)}")
    if tp is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ConfigError(f"{path}: expected an integer, got {brief(value)}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{path}: expected an integer, got {brief(value)}") from None
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{path}: expected a number, got {brief(value)}")
        try:
            out = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{path}: expected a number, got {brief(value)}") from None
        if not math.isfinite(out):
            raise ConfigError(f"{path}: expected a finite number, got {brief(value)}")
        return out
    if tp is str:
        if path in SWITCH_FIELDS and isinstance(value, bool):  # graph_mode was a boolean: true/false still mean on/off
            return "on" if value else "off"
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {brief(value)} ({type(value).__name__})")
        if len(value) > MAX_STRING:
            raise ConfigError(f"{path}: {len(value):,} characters ({brief(value)}); allowed: at most {MAX_STRING:,} "
                              "(the longest path a file system takes)")
        return value
    return value


def _build_section(name: str, values: Any):
    cls = _section_class(name)
    if not isinstance(values, dict):
        raise ConfigError(f"{name}: expected a mapping of keys, got {brief(values)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in hints:
            raise ConfigError(f"unknown key {brief(name + '.' + key)}{_suggest(key, hints)}")
        kwargs[key] = _coerce(f"{name}.{key}", value, hints[key])
    return cls(**kwargs)


def from_dict(d: dict | None = None, overrides: dict[str, Any] | None = None) -> Config:
    """Build a validated Config from a nested dict plus dotted overrides."""
    try:
        d = json.loads(json.dumps(d or {}))  # deep copy; also rejects non-JSON values early
    except (TypeError, ValueError) as exc:
        where = next(_non_plain(d, ""), "") if isinstance(exc, TypeError) else ""
        raise ConfigError(f"{where or 'config'}: {exc}; allowed: numbers, strings, booleans, null, lists and "
                          "mappings with string keys") from None
    if not isinstance(d, dict):
        raise ConfigError(f"config: expected a mapping, got {brief(d)}")
    if not isinstance(overrides or {}, dict):
        raise ConfigError(f"overrides: expected a mapping of dotted keys, got {brief(overrides)}")
    for key, value in (overrides or {}).items():
        if not isinstance(key, str):
            raise ConfigError(f"override key {brief(key)}: expected a dotted key string such as 'method.beta'")
        _set_dotted(d, key, value)
    top = {"seed"} | set(SECTIONS)
    for key in d:
        if key not in top:
            raise ConfigError(f"unknown key {brief(key)}{_suggest(key, top)}")
    sections = {name: _build_section(name, d.get(name, {})) for name in SECTIONS}
    seed = _coerce("seed", d.get("seed", 0), int)
    return Config(seed=seed, **sections)


def _non_plain(v: Any, path: str):
    """Dotted paths of the values (or mapping keys) that JSON cannot hold."""
    plain = (str, int, float, bool, type(None))
    if isinstance(v, dict):
        for k, x in v.items():
            sub = f"{path}.{k}" if path else str(k)
            yield from ([sub] if not isinstance(k, plain) else _non_plain(x, sub))
    elif isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            yield from _non_plain(x, f"{path}[{i}]")
    elif not isinstance(v, plain):
        yield path


def _set_dotted(d: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    if len(parts) == 1:
        if parts[0] != "seed":
            raise ConfigError(f"unknown key {brief(key)}{_suggest(key, _all_dotted_keys())}")
        d["seed"] = value
        return
    if len(parts) != 2 or parts[0] not in SECTIONS:  # the sections, not their ~100 keys
        listed = f"seed and <section>.<key> with a section among {', '.join(SECTIONS)} (e.g. method.beta)"
        raise ConfigError(f"unknown key {brief(key)}{_suggest(key, _all_dotted_keys(), listed)}")
    d.setdefault(parts[0], {})
    if not isinstance(d[parts[0]], dict):
        raise ConfigError(f"{parts[0]}: expected a mapping of keys, got {brief(d[parts[0]])}")
    d[parts[0]][parts[1]] = value


def _all_dotted_keys() -> list[str]:
    keys = ["seed"]
    for name in SECTIONS:
        keys += [f"{name}.{f.name}" for f in dataclasses.fields(_section_class(name))]
    return keys


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`["method.beta=0.5", "attack.t=None"]` -> dict. Values are parsed as YAML scalars/lists."""
    import yaml

    out = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set {brief(item)}: expected key=value, e.g. method.beta=0.5")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {brief(item)}: the value {brief(raw)} is not a valid YAML scalar or list "
                              f"({getattr(exc, 'problem', None) or exc}); quote it or fix the brackets") from None
    return out



"""FixMatch (Sohn et al., 2020), the teacher of Algorithm 1, lines 1-3, as the paper's appendix states it
(SRST-AWR's recipe):

    loss = CE(f(alpha(x_l)), y_l) + lambda_u * mean_u[ 1{max p(alpha(x_u)) >= t} * CE(f(A(x_u)), argmax p(alpha(x_u))) ]

with one joint forward pass of the labeled, weak and strong batches (shared BatchNorm statistics), SGD with a
cosine schedule over `teacher.steps`, optional weight EMA (`teacher.ema`, the original FixMatch's 0.999), and
the checkpoint selected by clean accuracy on the validation set, never the test set. `train_teacher` returns
the selected model's logits on the student's unlabeled images, its weights and its provenance; where it is
stored and found again is `ssat.teacher`'s business.

One training step is `TeacherSteps.step` (benchmarks/teacher_steps.py times that very method). On a GPU it makes
no host read except every CHECK_EVERY steps and at validation, and one small host-to-device copy: the step's
random draws (crops, flips, RandAugment parameters, Cutout centres), packed and pinned (`views.upload`).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import time
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .views import StrongDraws, strong_apply, strong_draws, upload, weak_apply, weak_draws
from .datasets import DATASET_INFO, Arrays, Split, to_float
from .engine import compile_mode
from .models import create_model
from .pseudo_labels import TeacherOutputs
from .runtime import resolve_device, threads, training_precision

# fixmatch-2: RandAugment batched on the device, ops drawn per image (fixmatch-1: torchvision's, per chunk of 4
# images); bf16 autocast on CUDA by default (system.precision "auto").
TEACHER_VERSION = "fixmatch-2"  # bump when the training code changes what a config produces
CHECK_EVERY = 25  # steps between finiteness checks on a GPU

Log = Callable[[str], None]


class TeacherTrainingError(RuntimeError):
    """The teacher's loss became NaN or infinite."""


def resolved_teacher_config(cfg) -> dict:
    """cfg.teacher as a dict with the architecture resolved (None -> the student's model.name)."""
    d = dataclasses.asdict(cfg.teacher)
    d["model"] = cfg.teacher.model or cfg.model.name
    return d


def teacher_key(cfg, split: Split) -> str:
    """Hex key of (dataset, split hash, resolved teacher config, code version)."""
    payload = {"version": TEACHER_VERSION, "dataset": cfg.data.dataset, "split_hash": split.hash,
               "teacher": resolved_teacher_config(cfg)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def teacher_pool(cfg, split: Split, n_train: int) -> np.ndarray:
    """The teacher's unlabeled images: every training image except validation (and except the labeled ones
    unless teacher.unlabeled_includes_labeled). When data.n_unlabeled caps the student's pool (smoke runs),
    the teacher's pool is that capped set instead (plus or minus the labeled images)."""
    includes = cfg.teacher.unlabeled_includes_labeled
    base = split.unlabeled if cfg.data.n_unlabeled is not None else np.setdiff1d(np.arange(n_train), split.val)
    if includes:
        return np.union1d(base, split.labeled)
    return np.setdiff1d(base, split.labeled)



# ---- the FixMatch objective ------------------------------------------------------------------
def confidence_mask(logits_weak: torch.Tensor, threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask, hard pseudo-labels): rows whose max softmax probability on the weak view is >= threshold."""
    probs = torch.softmax(logits_weak.detach().float(), dim=1)
    conf, pseudo = probs.max(dim=1)
    return conf >= threshold, pseudo


def fixmatch_loss(logits_l: torch.Tensor, y_l: torch.Tensor, logits_uw: torch.Tensor, logits_us: torch.Tensor, *,
                  threshold: float, lambda_u: float) -> dict[str, torch.Tensor]:
    """l_s + lambda_u * l_u (the paper's appendix); l_u averages over all unlabeled images, masked ones count 0."""
    sup = F.cross_entropy(logits_l.float(), y_l)
    mask, pseudo = confidence_mask(logits_uw, threshold)
    per = F.cross_entropy(logits_us.float(), pseudo, reduction="none")
    unsup = (per * mask.float()).mean() if len(per) else per.sum()
    return {"loss": sup + lambda_u * unsup, "sup": sup.detach(), "unsup": unsup.detach(),
            "mask_rate": mask.float().mean() if len(per) else torch.zeros(())}


def cosine_lr(base: float, step: int, total: int) -> float:
    """Cosine decay from `base` at step 0 towards 0 at `total` (SRST-AWR's CosineAnnealingLR, per step)."""
    return base * 0.5 * (1.0 + math.cos(math.pi * step / max(total, 1)))


class _Cycler:
    """Random batches of indices without replacement; reshuffles when fewer than a batch remain (drop_last).

    The permutation is drawn on the CPU from `gen` and kept on `device`, so a batch's indices are a slice of it
    there: indexing device images with CPU indices would cost a host-to-device copy every step.
    """

    def __init__(self, n: int, batch: int, gen: torch.Generator, device: torch.device | str = "cpu"):
        self.n, self.batch, self.gen, self.device = n, min(batch, n), gen, torch.device(device)
        self.perm, self.pos = self._shuffle(), 0

    def _shuffle(self) -> torch.Tensor:
        perm = torch.randperm(self.n, generator=self.gen)
        if self.device.type == "cuda":  # pinned and non-blocking: the host does not wait for the GPU
            return perm.pin_memory().to(self.device, non_blocking=True)
        return perm.to(self.device)

    def next(self) -> torch.Tensor:
        if self.pos + self.batch > self.n:
            self.perm, self.pos = self._shuffle(), 0
        out = self.perm[self.pos: self.pos + self.batch]
        self.pos += self.batch
        return out


def _logits(model: nn.Module, x_uint8: torch.Tensor, device, batch_size: int) -> torch.Tensor:
    """Eval-mode fp32 logits of un-augmented images, on the CPU."""
    was = model.training
    model.eval()
    with torch.no_grad():
        out = [model(to_float(x_uint8[i: i + batch_size].to(device))).float().cpu()
               for i in range(0, len(x_uint8), batch_size)]
    model.train(was)
    return torch.cat(out) if out else torch.empty(0, 0)


def _accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return 100.0 * (logits.argmax(1) == y.cpu()).float().mean().item() if len(y) else float("nan")


def _ema_update(ema: nn.Module, model: nn.Module, decay: float) -> None:
    """ema = decay * ema + (1 - decay) * model for the weights, buffers copied; a few multi-tensor kernels
    rather than three per tensor."""
    with torch.no_grad():
        pe, pm = list(ema.parameters()), [p.detach() for p in model.parameters()]
        torch._foreach_mul_(pe, decay)
        torch._foreach_add_(pe, pm, alpha=1 - decay)
        torch._foreach_copy_(list(ema.buffers()), list(model.buffers()))


def percent(acc: float | None) -> str:
    """An accuracy in % as printed (two decimals); "n/a" when there is none (no validation images)."""
    return "n/a" if acc is None else f"{acc:.2f}%"


def _plain(x):
    """Provenance values as plain Python (loadable with weights_only=True)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, torch.Tensor):
        return x.item() if x.numel() == 1 else x.tolist()
    return x


# ---- training ------------------------------------------------------------------------------
def train_teacher(cfg, arrays: Arrays, split: Split, log: Log = print) -> TeacherOutputs:
    """Train the FixMatch teacher of this split; return its logits on `split.unlabeled` and weights.

    The global torch RNG is left as it was (the teacher draws from its own seed, `teacher.seed`), so a
    student seeded before this call starts identically whether or not its teacher had to be trained.
    """
    device = resolve_device(cfg.system.device)
    if len(split.labeled) == 0:
        raise ValueError("teacher: the split has no labeled images to train a teacher on")
    forks = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=forks), threads(cfg.system.threads):
        return _train_teacher(cfg, arrays, split, log, device)


def _views(x_l_uint8: torch.Tensor, x_u_uint8: torch.Tensor | None, gen: torch.Generator, t,
           flip: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step's inputs: the weak view of the labeled batch, and the weak and strong views of the unlabeled batch
    (empty when there is none). uint8 (B, C, H, W) on the device in, float in [0, 1] out.

    The same draws, in the same order, as weak_augment(x_l), weak_augment(x_u), strong_augment(x_u) with `gen`,
    but sent to the device in one copy rather than one per view.
    """
    parts = [weak_draws(len(x_l_uint8), gen, flip=flip)]
    if x_u_uint8 is not None:
        parts.append(weak_draws(len(x_u_uint8), gen, flip=flip))
        parts.extend(strong_draws(x_u_uint8.shape, gen, flip=flip, num_ops=t.randaugment_ops,
                                  magnitude=t.randaugment_magnitude, cutout_size=t.cutout))
    parts = upload(parts, x_l_uint8.device)
    x_l = to_float(weak_apply(x_l_uint8, parts[0], flip=flip))
    if x_u_uint8 is None:
        return x_l, x_l[:0], x_l[:0]
    x_uw = to_float(weak_apply(x_u_uint8, parts[1], flip=flip))
    x_us = strong_apply(x_u_uint8, StrongDraws(*parts[2:]), flip=flip, cutout_size=t.cutout)
    return x_l, x_uw, x_us


def teacher_precision(precision: str, device_type: str) -> str:
    """The teacher's autocast: `training_precision` (auto: bf16 on CUDA, fp32 on a CPU), except that fp16 trains
    in bf16. float16 needs a GradScaler, whose step reads its found-inf flag on the host every step (a sync per
    step); bfloat16 has float32's range, needs no scaler, and is as fast on the GPUs the teacher is sized for."""
    p = training_precision(precision, device_type)
    return "bf16" if p == "fp16" else p


class TeacherSteps:
    """FixMatch training, one step at a time: the model, optimizer, data on the device and generator of a teacher,
    and `step`, the step `train_teacher` repeats (and benchmarks/teacher_steps.py times).

    Running sums of the loss terms and a divergence flag stay on the device; `step` reads the flag on the host
    (a synchronisation) every step on a CPU, and on a GPU only every CHECK_EVERY steps and when asked to.

    On CUDA the step runs as the student's does (system.*): the model compiled (system.compile; auto: "default"),
    channels_last (system.channels_last; None: on) and cuDNN autotuning (system.cudnn_benchmark): the joint batch
    has one shape every step. On a CPU the step is what it was (eager, contiguous), so a CPU teacher is unchanged.
    """

    def __init__(self, cfg, arrays: Arrays, split: Split, device: torch.device):
        t = self.t = cfg.teacher
        self.device = device
        self.classes, self.channels, _, _, _, self.flip = DATASET_INFO[cfg.data.dataset]
        self.name = t.model or cfg.model.name
        torch.manual_seed(t.seed)  # the model's initial weights
        self.gen = torch.Generator().manual_seed(t.seed)
        self.model = create_model(self.name, self.classes, self.channels).to(device)
        s = cfg.system
        on_gpu = device.type == "cuda"
        self.channels_last = on_gpu and s.channels_last is not False
        if self.channels_last:
            self.model.to(memory_format=torch.channels_last)
        if on_gpu:
            torch.backends.cudnn.benchmark = s.cudnn_benchmark
        self.compile = compile_mode(s.compile, device.type)
        self.forward = self.model if self.compile == "off" else torch.compile(self.model, mode=self.compile)
        self.ema = copy.deepcopy(self.model).requires_grad_(False) if t.ema else None
        self.opt = torch.optim.SGD(self.model.parameters(), lr=t.lr, momentum=t.momentum,
                                   weight_decay=t.weight_decay, nesterov=t.nesterov)
        lab = torch.from_numpy(split.labeled)
        pool = torch.from_numpy(teacher_pool(cfg, split, len(arrays.y_train)))
        self.xl, self.yl = arrays.x_train[lab].to(device), arrays.y_train[lab].to(device)
        self.xu = arrays.x_train[pool].to(device)
        self.lab_batches = _Cycler(len(self.xl), t.labeled_batch, self.gen, device)
        self.ul_batches = _Cycler(len(self.xu), t.unlabeled_batch, self.gen, device) if len(self.xu) else None
        self.precision = teacher_precision(cfg.system.precision, device.type)
        self.autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16")
        self.sums = self._zero_sums()
        self.n_sum = 0
        self.bad = torch.zeros((), dtype=torch.bool, device=device)

    def _zero_sums(self) -> dict[str, torch.Tensor]:
        return {k: torch.zeros((), device=self.device) for k in ("loss", "sup", "unsup", "mask_rate")}

    def views(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The next step's (x_l, y_l, x_uw, x_us): batches drawn by the cyclers, views by `_views`."""
        bl = self.lab_batches.next()
        x_u = self.xu[self.ul_batches.next()] if self.ul_batches is not None else None
        x_l, x_uw, x_us = _views(self.xl[bl], x_u, self.gen, self.t, self.flip)
        return x_l, self.yl[bl], x_uw, x_us

    def step(self, step: int, *, check: bool = False) -> None:
        """Train step `step` (1-based; its lr is the cosine schedule's at step - 1). Raises TeacherTrainingError
        when the loss has become NaN or infinite, seen on a CPU at once, on a GPU at the next check (`check`,
        or every CHECK_EVERY steps)."""
        t = self.t
        for g in self.opt.param_groups:
            g["lr"] = cosine_lr(t.lr, step - 1, t.steps)
        x_l, y_l, x_uw, x_us = self.views()
        self.model.train()
        x = torch.cat([x_l, x_uw, x_us])
        with self.autocast:
            logits = self.forward(x.contiguous(memory_format=torch.channels_last) if self.channels_last else x)
        l_l, l_uw, l_us = logits.float().split([len(x_l), len(x_uw), len(x_us)])
        terms = fixmatch_loss(l_l, y_l, l_uw, l_us, threshold=t.threshold, lambda_u=t.lambda_u)
        self.bad |= ~torch.isfinite(terms["loss"].detach())
        if self.device.type == "cpu" or check or step % CHECK_EVERY == 0:
            if self.bad.item():
                raise TeacherTrainingError(f"teacher: the loss became NaN or infinite at or before step {step}")
        self.opt.zero_grad(set_to_none=True)
        terms["loss"].backward()
        self.opt.step()
        if self.ema is not None:
            _ema_update(self.ema, self.model, t.ema)
        for k, v in self.sums.items():
            v += terms[k].detach().float()
        self.n_sum += 1

    def take_means(self) -> dict[str, float]:
        """The loss terms averaged over the steps since the last call (a host read), and the sums reset."""
        out = {k: v.item() / max(self.n_sum, 1) for k, v in self.sums.items()}
        self.sums, self.n_sum = self._zero_sums(), 0
        return out

    def net(self) -> nn.Module:
        """The network that is validated and kept: the EMA when there is one."""
        return self.ema if self.ema is not None else self.model


def _test_protocol(model: nn.Module, arrays: Arrays, cfg, device, log: Log) -> dict:
    """The FixMatch row of the main table: the same test protocol as every other model."""
    from .evaluate import evaluate_model, first_n_test

    e = cfg.eval
    x, y, subset = first_n_test(arrays, e.test_n, device)
    test = evaluate_model(model, x, y, eps=cfg.eps, checkpoint="teacher", pgd_steps=e.pgd_steps,
                          autoattack=e.autoattack, autoattack_n=e.autoattack_n, batch_size=e.batch_size,
                          subset=subset, fold_bn=cfg.system.fold_bn, log=log)
    log("teacher test: " + "  ".join(f"{a} {r['acc']:.2f}%" for a, r in test.items()))
    return test


def _progress(rec: dict, steps: int) -> str:
    """A validation step's line: losses, mask rate, validation accuracy, time so far and left."""
    acc, step = rec["val_acc"], rec["step"]
    return (f"teacher step {step}/{steps} | loss {rec['loss']:.4f} (sup {rec['sup']:.4f}, unsup "
            f"{rec['unsup']:.4f}) | mask rate {rec['mask_rate']:.3f} | "
            + (f"val acc {acc:.2f}%" if acc is not None else "no validation set")
            + f" | {rec['seconds']:.1f}s, about {rec['seconds'] * (steps - step) / step:.0f}s left")


def _train_teacher(cfg, arrays, split, log, device) -> TeacherOutputs:
    t, ds = cfg.teacher, cfg.data.dataset
    loop = TeacherSteps(cfg, arrays, split, device)
    name, classes, channels, xl, xu = loop.name, loop.classes, loop.channels, loop.xl, loop.xu
    val = torch.from_numpy(split.val)
    x_val, y_val = arrays.x_train[val], arrays.y_train[val]
    log(f"teacher: FixMatch {name} on {ds} (split {split.hash}): {len(xl)} labeled, {len(xu)} unlabeled, "
        f"{len(x_val)} validation images; {t.steps} steps on {device} ({loop.precision})")
    best_acc, best_step, best_state, history = -math.inf, 0, None, []
    t0, c0 = time.perf_counter(), time.process_time()
    for step in range(1, t.steps + 1):
        validate = step % t.eval_every == 0 or step == t.steps
        loop.step(step, check=validate)
        if validate:
            net = loop.net()
            acc = _accuracy(_logits(net, x_val, device, cfg.eval.batch_size), y_val) if len(x_val) else None
            rec = {"step": step, **loop.take_means(), "val_acc": acc, "lr": loop.opt.param_groups[0]["lr"],
                   "seconds": time.perf_counter() - t0}
            history.append(rec)
            log(_progress(rec, t.steps))
            score = acc if acc is not None else -math.inf
            if score > best_acc or best_state is None or (acc is None and step == t.steps):
                best_acc, best_step = score, step
                best_state = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    train_seconds, train_cpu_seconds = time.perf_counter() - t0, time.process_time() - c0

    final = create_model(name, classes, channels).to(device)
    final.load_state_dict(best_state)
    final.eval()
    if len(split.unlabeled):
        logits_u = _logits(final, arrays.x_train[torch.from_numpy(split.unlabeled)], device, cfg.eval.batch_size)
    else:
        logits_u = torch.empty(0, classes)
    y_u = arrays.y_train[torch.from_numpy(split.unlabeled)]
    pl_acc = _accuracy(logits_u, y_u) if len(y_u) else None
    val_acc = best_acc if math.isfinite(best_acc) else None
    log(f"teacher: selected step {best_step} (val acc {percent(val_acc)}), pseudo-label acc on the {len(y_u)} "
        f"unlabeled images {percent(pl_acc)}, training {train_seconds:.1f}s ({train_cpu_seconds:.1f}s of CPU)")

    t1 = time.perf_counter()
    test = _test_protocol(final, arrays, cfg, device, log)
    eval_seconds = time.perf_counter() - t1

    provenance = _plain({
        "teacher_version": TEACHER_VERSION, "key": teacher_key(cfg, split), "dataset": ds,
        "split_hash": split.hash, "split": split.describe(), "teacher": resolved_teacher_config(cfg),
        "model_name": name, "val_acc": val_acc, "pseudo_label_acc": pl_acc, "train_seconds": train_seconds,
        "train_cpu_seconds": train_cpu_seconds, "eval_seconds": eval_seconds, "steps": t.steps,
        "selected_step": best_step,
        "selection": "val clean accuracy" if len(x_val) else "last step (no validation set)",
        "n_labeled": len(xl), "n_unlabeled_teacher": len(xu), "n_unlabeled_student": len(split.unlabeled),
        "test": test, "test_metrics": {a: r["acc"] for a, r in test.items()}, "eps": cfg.eps,
        "history": history, "device": str(device), "precision": cfg.system.precision,
        "training_precision": loop.precision, "threads": torch.get_num_threads(), "torch": torch.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })
    state = {k: v.detach().cpu().contiguous() for k, v in final.state_dict().items()}
    return TeacherOutputs(logits_u.float().contiguous(), split.hash, name, state, provenance)



"""The step engine: how fast a training step runs, never what it computes (that is ssat/step.py).

    engine = Engine(model, opt, cfg, device, batch_step, sizes, counts, log)
    engine.begin_epoch()
    engine.step(batch, sched, acc)        # one optimiser step; acc: StepStats, read once per epoch
    engine.end_epoch()

What it decides, each from system.* and the device (docs/performance.md has the GPU measurements):
- precision: bf16 or fp16 autocast (system.precision); fp16 with dynamic loss scaling kept on the device
  (DeviceScaler), so that no step reads a device value on the host;
- channels_last inputs;
- torch.compile of the trained model (system.compile; auto is "default" on CUDA), its caches shared by a sweep's
  trials (ssat/compile_cache.py); a batch of another size (an epoch's last) runs the model uncompiled, so it never
  triggers a recompilation;
- graph mode (system.graph_mode; auto is on for CUDA): the whole step (attack, forwards, loss, backward, the
  optimiser and the scaler) captured as one CUDA graph and replayed on static copies of each batch;
- fused forwards (system.fused_forward; auto is on for CUDA): a step's train-mode forwards as one forward over
  their concatenation, BatchNorm statistics per batch (ssat/segmented.py);
- folded BatchNorm (system.fold_bn; auto is on for CPU): the attack's eval-mode forwards with each BatchNorm folded
  into the convolution before it (ssat/folding.py);
- the step's statistics, added on the device into StepStats.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn as nn
from torch.profiler import record_function

from .folding import FoldedEval, fold_plan
from .runtime import training_precision

GRAPH_WARMUP = 3  # eager steps before each CUDA-graph capture (cuDNN autotuning, lazy allocations)
# torch.compile modes that capture CUDA graphs themselves (cudagraph trees): a whole-step capture cannot hold them
GRAPHING_COMPILE_MODES = ("reduce-overhead", "max-autotune")

BatchStep = Callable[..., tuple]  # (net, batch, eps_max, rho, forward) -> (terms, x, x_pgd, x_adv, alpha)


def compile_mode(setting: str, device_type: str) -> str:
    """system.compile on a device: auto is "default" on CUDA (the kernels graph mode captures), off elsewhere."""
    if setting != "auto":
        return setting
    return "default" if device_type == "cuda" else "off"


def graph_refusal(device_type: str, compile_mode: str) -> str | None:
    """Why graph mode cannot run on this device with this compile mode, or None when it can (the capture may
    still fail: then the run trains eagerly, with the reason)."""
    if device_type != "cuda":
        return f"it needs a CUDA device and this run is on {device_type}"
    if compile_mode in GRAPHING_COMPILE_MODES:
        return (f"system.compile={compile_mode!r} captures CUDA graphs itself; with graph_mode, compile is 'off', "
                "'default' or 'max-autotune-no-cudagraphs'")
    return None


def graph_plan(setting: str, device_type: str, compile_mode: str) -> tuple[bool, str]:
    """(capture, status) for system.graph_mode: "off"; "pending" until the capture ran; "eager: <reason>" where
    graph mode was asked for and cannot run; "eager (auto): <reason>" where auto leaves it off."""
    if setting == "off":
        return False, "off"
    refusal = graph_refusal(device_type, compile_mode)
    if refusal is None:
        return True, "pending"
    return False, f"eager{' (auto)' if setting == 'auto' else ''}: {refusal}"


def fused_plan(setting: str, device_type: str, model: nn.Module):
    """(forward, status) for system.fused_forward: the step's train-mode forwards as one segmented forward (on, or
    auto on CUDA) or one forward per batch; a model with dropout keeps separate forwards (their random draws)."""
    from .segmented import segmentation_refusal, segmented_forward
    from .step import separate_forwards

    if setting == "off" or (setting == "auto" and device_type != "cuda"):
        return separate_forwards, "off" if setting == "off" else f"off (auto on {device_type})"
    refusal = segmentation_refusal(model)  # the model as built: in train mode
    if refusal:
        return separate_forwards, f"off: {refusal}"
    return segmented_forward, "on"


class DeviceScaler:
    """fp16's dynamic loss scaling with torch.amp.GradScaler's rule and constants, but no host read: the overflow
    check, the skip of an overflowing step and the scale's update are device ops, so a CUDA graph holds them.

    GradScaler reads the overflow flag on the host and skips optimizer.step(); here the optimiser steps and the
    parameters and momentum buffers are put back where the gradients held inf or NaN: the same result. SGD's
    momentum buffers are made up front as zeros (its first step then gives buf = grad, as a new buffer would), so
    a skipped first step leaves no buffer behind and a captured graph owns them.
    """

    def __init__(self, opt: torch.optim.Optimizer, device: torch.device, init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5, growth_interval: int = 2000):
        self.opt, self.init_scale = opt, init_scale
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self.scale_t = torch.full((), init_scale, dtype=torch.float32, device=device)
        self.tracker = torch.zeros((), dtype=torch.int32, device=device)
        self.found_inf = torch.zeros((), dtype=torch.float32, device=device)
        self.params = [p for g in opt.param_groups for p in g["params"]]
        for g in opt.param_groups:
            if g.get("momentum", 0):
                for p in g["params"]:
                    if opt.state[p].get("momentum_buffer") is None:
                        opt.state[p]["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        self.saved: list[torch.Tensor] | None = None

    def reset(self) -> None:
        """A fresh scale: SRST-AWR's train() makes a new GradScaler every epoch."""
        self.scale_t.fill_(self.init_scale)
        self.tracker.zero_()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale_t

    def _state(self) -> list[torch.Tensor]:
        bufs = [self.opt.state[p]["momentum_buffer"] for p in self.params if "momentum_buffer" in self.opt.state[p]]
        return self.params + bufs

    @torch.no_grad()
    def step(self) -> None:
        """Unscale the gradients, step, undo the step where any gradient was not finite, update the scale."""
        grads = [p.grad for p in self.params if p.grad is not None]
        self.found_inf.zero_()
        torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found_inf,
                                                         self.scale_t.double().reciprocal().float())
        state = self._state()
        if self.saved is None:
            self.saved = [t.clone() for t in state]
        else:
            torch._foreach_copy_(self.saved, state)
        self.opt.step()
        skip = self.found_inf > 0
        for t, s in zip(state, self.saved):
            t.copy_(torch.where(skip, s, t))
        torch._amp_update_scale_(self.scale_t, self.tracker, self.found_inf, self.growth_factor,
                                 self.backoff_factor, self.growth_interval)


class StepStats:
    """An epoch's training statistics and finiteness flag (bad), kept on the device and added to in place by
    every step (a CUDA graph's replays add into the same buffers); read once per epoch by summary(). The image
    counts live on the host: the engine adds them (count), since a replay runs no Python."""

    KEYS = ("linf_max", "adv_linf", "alpha", "a_min", "a_one")

    def __init__(self, device: torch.device, K: int):
        self.device, self.k_floor = device, 2.0 ** -K
        self.sums: dict[str, torch.Tensor] = {}  # loss term -> sum over the attacked images
        self.stats = {k: torch.zeros((), device=device) for k in self.KEYS}
        self.bad = torch.zeros((), dtype=torch.bool, device=device)
        self.reset()

    def reset(self) -> None:
        for v in (*self.sums.values(), *self.stats.values(), self.bad):
            v.zero_()
        self.n_att = self.n_img = self.eager_steps = self.graph_steps = 0

    @torch.no_grad()
    def add(self, terms: dict[str, torch.Tensor], x, x_pgd, x_adv, alpha) -> None:
        """One step's loss terms (0-dim) and its x, x_pgd, x_adv (B, C, H, W) and alpha (B,)."""
        b = len(x)
        for k, v in terms.items():
            if k not in self.sums:
                self.sums[k] = torch.zeros((), device=self.device)
            self.sums[k] += v.detach().float() * b
        s = self.stats
        torch.maximum(s["linf_max"], (x_pgd - x).abs().max().float(), out=s["linf_max"])
        s["adv_linf"] += (x_adv - x).abs().flatten(1).max(1).values.float().sum()
        s["alpha"] += alpha.sum()
        s["a_min"] += (alpha <= self.k_floor + 1e-9).sum()
        s["a_one"] += (alpha >= 1.0).sum()

    def count(self, attacked: int, images: int) -> None:
        self.n_att += attacked
        self.n_img += images

    def summary(self) -> dict[str, float]:
        """train/<term> means over the attacked images and the adv/ statistics (docs/tracking.md names)."""
        n, s = max(self.n_att, 1), self.stats
        out = {f"train/{k}": v.item() / n for k, v in self.sums.items()}
        out.update({"adv/pgd_linf_max": s["linf_max"].item(), "adv/adv_linf_mean": s["adv_linf"].item() / n,
                    "adv/alpha_mean": s["alpha"].item() / n, "adv/alpha_min_share": s["a_min"].item() / n,
                    "adv/alpha_one_share": s["a_one"].item() / n})
        return out


class GraphStep:
    """A step function captured as one CUDA graph and replayed on static copies of each batch.

    GRAPH_WARMUP eager steps on real batches (on a side stream) come before each capture, so cuDNN has picked its
    algorithms and lazy allocations exist; one capture per schedule (eps_max, rho and lr are baked into the
    kernels; an lr tensor would cost SGD's foreach path an .item() per step); randomness inside the graph only
    from the default CUDA generator (PGD's start; augmentation is drawn outside it); statistics accumulated in
    place into StepStats. Batches of other sizes (an epoch's last) and fault steps stay with the caller.
    """

    def __init__(self, step_fn: Callable, sizes: tuple[int, ...], opt: torch.optim.Optimizer):
        self.step_fn, self.sizes, self.opt = step_fn, sizes, opt
        self.graph, self.key, self.static, self.warm = None, None, None, 0

    def fits(self, batch) -> bool:
        return tuple(len(t) for t in batch) == self.sizes

    def step(self, batch, sched: dict[str, float], acc: StepStats) -> bool:
        """Run one step; True when it was a replay, False for an eager warm-up step."""
        key = (sched["eps_max"], sched["rho"], self.opt.param_groups[0]["lr"])
        if key != self.key:
            self.graph, self.key, self.warm = None, key, 0
        if self.graph is None and self.warm < GRAPH_WARMUP:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.step_fn(batch, sched, acc)
            torch.cuda.current_stream().wait_stream(side)
            self.warm += 1
            return False
        if self.graph is None:
            self.static = [b.clone() for b in batch]
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.step_fn(self.static, sched, acc)
            self.graph = graph
        else:
            for s, b in zip(self.static, batch):
                s.copy_(b, non_blocking=True)
        self.graph.replay()
        return True


class Engine:
    """Runs `batch_step` (a batching's step of ssat/step.py, bound to its config) as one optimiser step, as fast as
    the device and system.* allow. Batches are the method's batching's (ssat/batchings.py); sizes: a full batch's
    lengths, the shape graph mode captures and the compiled model runs; counts(batch): (attacked, all) images."""

    def __init__(self, model: nn.Module, opt: torch.optim.Optimizer, cfg, device: torch.device, batch_step: BatchStep,
                 sizes: tuple[int, ...], counts: Callable[..., tuple[int, int]], log: Callable[[str], None] = print):
        s = cfg.system
        self.model, self.opt, self.device, self.batch_step, self.log = model, opt, device, batch_step, log
        self.counts = counts
        if device.type == "cuda":
            torch.backends.cudnn.benchmark = s.cudnn_benchmark  # cuDNN picks its fastest algorithms (autotuning)
        self.precision = training_precision(s.precision, device.type)
        if s.precision == "fp16" and self.precision == "fp32":
            log(f"system.precision fp16 on {device.type}: training in fp32")
        # channels_last by default: 1.45x for the MNIST CNN's PGD on a CPU core, 1.07x for WRN-28-5 (bf16) on an H200
        self.channels_last = s.channels_last if s.channels_last is not None else True
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
        self.compile = compile_mode(s.compile, device.type)
        capture, self.graph_status = graph_plan(s.graph_mode, device.type, self.compile)
        self.forward, self.fused_status = fused_plan(s.fused_forward, device.type, model)
        self.cache = None
        if self.compile != "off" and s.compile_cache:
            from .compile_cache import CompileCache, stack_parts

            parts = {**stack_parts(device), "model": cfg.model.name, "method": cfg.method.name,
                     "precision": self.precision, "channels_last": self.channels_last, "compile": self.compile,
                     "graph": capture, "fused": self.fused_status == "on", "sizes": list(sizes)}
            self.cache = CompileCache(s.compile_cache, parts, log)
            self.cache.activate()  # before the first compile
        fold, self.fold_status = fold_plan(s.fold_bn, device.type, self.compile, model)
        self.eager_net = FoldedEval(model) if fold else model  # what a batch of another size runs
        self.net = self.eager_net if self.compile == "off" else torch.compile(model, mode=self.compile)
        self.scaler = DeviceScaler(opt, device) if self.precision == "fp16" else None
        self.sizes, self.first_step_at = sizes, None
        self.graph = GraphStep(self._step, sizes, opt) if capture else None
        if self.graph_status.startswith("eager"):
            log(f"system.graph_mode: {self.graph_status}")

    # ---- what a step runs in ------------------------------------------------------------------------
    def prep(self, batch) -> list:
        """The batch with its images (4-D tensors) in the memory format the model runs in."""
        return [t.contiguous(memory_format=torch.channels_last) if self.channels_last and t.dim() == 4 else t
                for t in batch]

    def autocast(self):
        dtype = torch.float16 if self.precision == "fp16" else torch.bfloat16
        return torch.autocast(self.device.type, dtype=dtype, enabled=self.precision in ("bf16", "fp16"),
                              cache_enabled=self.graph is None)  # a CUDA graph cannot capture the weight cache

    def terms(self, batch, eps_max: float, rho: float, net: nn.Module | None = None) -> tuple:
        """The step's loss terms and images for `batch` (no optimiser step): what _step differentiates."""
        with self.autocast():
            return self.batch_step(self.net if net is None else net, self.prep(batch), eps_max, rho, self.forward)

    # ---- the step -----------------------------------------------------------------------------------
    def step(self, batch, sched: dict[str, float], acc: StepStats, poison: bool = False) -> None:
        """One optimiser step on `batch` at the schedule's eps_max and rho (floats), its statistics and image
        counts added to `acc`. A full batch replays the CUDA graph where graph mode runs; any other batch (and a
        fault step) runs eagerly, on the uncompiled model where its size differs from a full batch's.
        poison: the loss times NaN (the fault injector's nan fault)."""
        full = tuple(len(t) for t in batch) == self.sizes
        if self.graph is not None and full and not poison:
            self._graph_step(batch, sched, acc)
        else:
            self._step(batch, sched, acc, poison, net=self.net if full else self.eager_net)
            acc.eager_steps += 1
        acc.count(*self.counts(batch))
        if self.first_step_at is None:  # once per process: when training began (compile and capture behind it)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.first_step_at = time.time()

    def _step(self, batch, sched: dict[str, float], acc: StepStats, poison: bool = False,
              net: nn.Module | None = None) -> None:
        """The step itself: terms, backward, optimiser, statistics. Each phase is a torch.profiler range (pgd and
        search nest in the outer forward); nothing here reads a device value, so a GPU is never waited for."""
        with record_function("outer forward"):
            terms, x, x_pgd, x_adv, alpha = self.terms(batch, sched["eps_max"], sched["rho"], net)
            loss = terms["loss"]
            if poison:
                loss = loss * float("nan")
        with record_function("backward"):
            self.opt.zero_grad(set_to_none=True)
            (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        with record_function("optimizer"):
            if self.scaler is None:
                self.opt.step()
            else:  # fp16: the loss scaled up against underflow; a step whose gradients overflow is undone
                self.scaler.step()
        with record_function("statistics"):
            acc.bad |= ~torch.isfinite(loss.detach())
            acc.add(terms, x, x_pgd, x_adv, alpha)

    def _graph_step(self, batch, sched: dict[str, float], acc: StepStats) -> None:
        """A full batch through the CUDA graph; the first ones after a schedule change are eager warm-up steps
        and the one after them is captured (a capture records and runs nothing, so the replay runs it). A failed
        capture sends the run back to eager steps with the reason in graph_status."""
        try:
            replayed = self.graph.step(batch, sched, acc)
        except Exception as exc:  # noqa: BLE001 - any capture error: eager from here on, with the reason
            self.graph, self.graph_status = None, f"eager: capture failed ({type(exc).__name__}: {str(exc)[:200]})"
            self.log(f"system.graph_mode: {self.graph_status}")
            self._step(batch, sched, acc)
            acc.eager_steps += 1
            return
        if replayed:
            acc.graph_steps += 1
            self.graph_status = "captured"
        else:
            acc.eager_steps += 1

    # ---- epochs -------------------------------------------------------------------------------------
    def begin_epoch(self) -> None:
        if self.scaler is not None:
            self.scaler.reset()

    def end_epoch(self) -> None:
        """After an epoch: share this process's compiled kernels with the sweep if it was the first to build them."""
        if self.cache is not None:
            self.cache.publish()

    def status(self) -> dict:
        """What ran and why, for the run's reproducibility record."""
        return {"precision": self.precision, "channels_last": self.channels_last, "compile": self.compile,
                "graph_mode": self.graph_status, "fused_forward": self.fused_status,
                "fold_bn": self.fold_status, "compile_cache": self.cache.status if self.cache else "not shared"}

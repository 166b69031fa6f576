"""Time training steps of SSAT-MBI against RST: same batch, same attack, same model. The step timed is
Engine.step of a real Trainer (ssat/engine.py), the one its epochs run: attack, outer forward, backward, SGD
and statistics.

    python benchmarks/step_time.py [--steps 20] [--batch 128] [--models wrn-28-2 cnn-small] [--device auto]
        [--precision fp32|bf16] [--channels-last] [--compile MODE]

Prints per-step times, their ratio, and the ratio predicted by counting passes: PGD-10 costs 10 forward
and 10 input-gradient backward passes; the outer loss of RST costs 2 forward and 2 backward passes (x, x_pgd);
SSAT-MBI adds K no-grad forwards (the binary search) and one forward/backward on x_adv. A backward pass
counts as 2 forwards when it builds weight gradients and as 1 when it only builds the input gradient.
The paper reports 3.06 vs 2.89 min/epoch (ratio 1.06) on CIFAR-10 with WRN-28-5.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssat.config import from_dict  # noqa: E402
from ssat.models import create_model, forward_flops  # noqa: E402
from ssat.engine import StepStats  # noqa: E402
from ssat.train import Trainer  # noqa: E402
from ssat.synthetic import write_cifar10  # noqa: E402


def predicted_units(method: str, steps: int = 10, K: int = 3) -> float:
    pgd = steps * (1 + 1)              # forward + input-gradient backward
    outer = 2 * (1 + 2)                # x and x_pgd: forward + full backward
    if method == "ssat-mbi":
        return pgd + K + outer + (1 + 2)  # K no-grad forwards, x_adv forward + backward
    return pgd + outer


def bench_trainer(method: str, model_name: str, *, precision: str = "fp32", channels_last: bool = False,
                  compile_mode: str = "off", graph_mode: bool = False, device: str = "auto", batch: int = 128,
                  threads: int | None = None, cudnn_benchmark: bool = True, root: Path | None = None,
                  memory_fraction: float | None = None, compile_cache: str | None = None,
                  fused_forward: str = "off") -> Trainer:
    """A real Trainer whose step (Engine.step, the one the epochs run) the benchmarks time. Fully labeled, so
    no teacher is needed: MNIST-5k (shipped) for cnn-small, else small synthetic CIFAR-10 files in `root`."""
    root = Path(root or tempfile.mkdtemp(prefix="ssat-bench-"))
    data = {"dataset": "mnist5k", "fully_labeled": True, "n_val": 10}
    if model_name != "cnn-small":
        write_cifar10(root / "cifar10", n_train=4 * batch + 10, n_test=10)  # 4 full batches per epoch
        data = {"dataset": "cifar10", "root": str(root / "cifar10"), "fully_labeled": True, "n_val": 10}
    cfg = from_dict({"data": data, "model": {"name": model_name},
                     "method": {"name": method, "interpolate": method == "ssat-mbi", "beta": 0.4},
                     "optim": {"batch_size": batch},
                     "system": {"precision": precision, "channels_last": channels_last, "compile": compile_mode,
                                "graph_mode": graph_mode, "device": device, "threads": threads,
                                "cudnn_benchmark": cudnn_benchmark, "cuda_memory_fraction": memory_fraction,
                                "compile_cache": compile_cache, "fused_forward": fused_forward}})
    return Trainer(cfg, root / "out", log=lambda s: None)


def fixed_batch(tr: Trainer, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random images (B, C, H, W) in [0, 1] and soft targets (B, classes) on the trainer's device."""
    g = torch.Generator().manual_seed(seed)
    shape = tuple(tr.x_val.shape[1:])
    x = torch.rand(batch, *shape, generator=g).to(tr.device)
    y = torch.softmax(torch.randn(batch, tr.num_classes, generator=g), 1).to(tr.device)
    return x, y


def bench_schedule(tr: Trainer) -> dict[str, float]:
    """The step's schedule at full strength: eps_max = eps (PGD step eps/4), rho = rho0."""
    return {"eps_max": tr.cfg.eps, "rho": tr.cfg.method.rho0}


def timed_steps(tr: Trainer, batch: tuple, steps: int, warmup: int) -> tuple[float, float]:
    """(seconds of the warm-up steps, seconds per timed step) of Engine.step on one fixed batch."""
    sched, acc = bench_schedule(tr), StepStats(tr.device, tr.cfg.method.K)
    sync = torch.cuda.synchronize if tr.device.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(warmup):
        tr.engine.step(batch, sched, acc)
    sync()
    t1 = time.perf_counter()
    for _ in range(steps):
        tr.engine.step(batch, sched, acc)
    sync()
    return t1 - t0, (time.perf_counter() - t1) / steps


def time_steps(method: str, model_name: str, args) -> tuple[float, int]:
    tr = bench_trainer(method, model_name, precision=args.precision, channels_last=args.channels_last,
                       compile_mode=args.compile, device=args.device, batch=args.batch, threads=args.threads)
    flops = forward_flops(create_model(model_name, tr.num_classes, tr.channels), tuple(tr.x_val.shape[1:]))
    _, per_step = timed_steps(tr, fixed_batch(tr, args.batch), args.steps, args.warmup)
    return per_step, flops


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--models", nargs="+", default=["wrn-28-2", "cnn-small"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", default="off")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"device: {name}; batch {args.batch}, {args.steps} timed steps after {args.warmup} warm-up, "
          f"{args.precision}, channels_last={args.channels_last}, compile={args.compile}")
    pred = predicted_units("ssat-mbi") / predicted_units("rst")
    for model_name in args.models:
        rst, flops = time_steps("rst", model_name, args)
        mbi, _ = time_steps("ssat-mbi", model_name, args)
        ips = args.batch / mbi
        tflops = flops * predicted_units("ssat-mbi") * args.batch / mbi / 1e12
        print(f"{model_name:10s} RST {rst * 1e3:8.1f} ms/step  SSAT-MBI {mbi * 1e3:8.1f} ms/step  "
              f"ratio {mbi / rst:.3f}  predicted {pred:.3f}  (paper 1.06)  SSAT-MBI {ips:.0f} img/s, "
              f"{tflops:.2f} TFLOP/s achieved ({flops / 1e6:.1f} MFLOP per forward)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time training steps of SSAT-MBI against RST: same batch, same attack, same model.

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
import time

import torch

from ssat.config import from_dict
from ssat.methods import METHOD_REGISTRY
from ssat.models import create_model, forward_flops


def predicted_units(method: str, steps: int = 10, K: int = 3) -> float:
    pgd = steps * (1 + 1)              # forward + input-gradient backward
    outer = 2 * (1 + 2)                # x and x_pgd: forward + full backward
    if method == "ssat-mbi":
        return pgd + K + outer + (1 + 2)  # K no-grad forwards, x_adv forward + backward
    return pgd + outer


def make_step(method: str, model, cfg, opt, device):
    """One training step of the trainer's union path, as a closure over a fixed batch."""
    from ssat.attacks import pgd
    from ssat.interpolation import interpolate

    m, a = cfg.method, cfg.attack
    entry = METHOD_REGISTRY[method]
    prec = torch.bfloat16 if cfg.system.precision == "bf16" else None

    def step(x, y):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=prec is not None):
            x_pgd = pgd(model, x, y, cfg.eps, a.steps, cfg.eps / 4)
            if method == "ssat-mbi":
                x_adv, _ = interpolate(model, x, x_pgd, y, m.rho0, m.tau, m.K)
            else:
                x_adv = x_pgd
            model.train()
            lx, la = model(x), model(x_adv)
            lp = la if x_adv is x_pgd else model(x_pgd)
            loss = entry.loss(lx, la, lp, y, m, entry.beta(m))["loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def time_steps(method: str, model_name: str, args, device) -> tuple[float, int]:
    dataset, shape = ("mnist5k", (1, 28, 28)) if model_name == "cnn-small" else ("cifar10", (3, 32, 32))
    cfg = from_dict({"data": {"dataset": dataset}, "model": {"name": model_name},
                     "method": {"name": method, "interpolate": method == "ssat-mbi", "beta": 0.4},
                     "system": {"precision": args.precision}})
    torch.manual_seed(0)
    model = create_model(model_name, 10, shape[0]).to(device)
    flops = forward_flops(model, shape)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    net = torch.compile(model, mode=args.compile) if args.compile != "off" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(args.batch, *shape, generator=g).to(device)
    if args.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.softmax(torch.randn(args.batch, 10, generator=g), 1).to(device)
    step = make_step(method, net, cfg, opt, device)
    for _ in range(args.warmup):
        step(x, y)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step(x, y)
    sync()
    return (time.perf_counter() - t0) / args.steps, flops


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
        rst, flops = time_steps("rst", model_name, args, device)
        mbi, _ = time_steps("ssat-mbi", model_name, args, device)
        ips = args.batch / mbi
        tflops = flops * predicted_units("ssat-mbi") * args.batch / mbi / 1e12
        print(f"{model_name:10s} RST {rst * 1e3:8.1f} ms/step  SSAT-MBI {mbi * 1e3:8.1f} ms/step  "
              f"ratio {mbi / rst:.3f}  predicted {pred:.3f}  (paper 1.06)  SSAT-MBI {ips:.0f} img/s, "
              f"{tflops:.2f} TFLOP/s achieved ({flops / 1e6:.1f} MFLOP per forward)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The GPU path: images/s, epoch time and model-FLOP utilisation of SSAT-MBI, and trials packed on one GPU.

    python benchmarks/gpu_throughput.py variants [--model wrn-28-5] [--steps 20]
    python benchmarks/gpu_throughput.py pack --n 1 2 4 8 [--model wrn-28-2] [--seconds 20]
    python benchmarks/gpu_throughput.py trainer [--model wrn-28-5] [--images 8192]

`variants` times the trainer's step (PGD-10, K = 3 binary search, three outer forward/backward passes) on a
fixed synthetic CIFAR batch in fp32, bf16 autocast, + channels_last, + torch.compile. `trainer` runs the real
Trainer for one epoch on synthetic CIFAR-shaped images held on the GPU and augmented there (the data path the
sweeps use). `pack` starts N processes that each train WRN-28-2 on the same GPU and sums their images/s over a
common timed window. FLOPs per image per step = forward FLOPs x 32 (see benchmarks/step_time.py's count);
utilisation is against the dense bf16 peak (H100/H200 SXM: 989 TFLOP/s). Fixed iteration counts; no timing
claim is made for a CPU run of this script.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import make_step, predicted_units  # noqa: E402

from ssat.config import from_dict  # noqa: E402
from ssat.models import create_model, forward_flops  # noqa: E402

PEAK_BF16 = 989e12
CIFAR_UNION = 4000 + 45000  # labeled + unlabeled images of one CIFAR-10 epoch (1,000 held out for validation)


def _device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def one_variant(model_name: str, precision: str, channels_last: bool, compile_mode: str, steps: int, batch: int,
                warmup: int = 3) -> dict:
    device = _device()
    torch.manual_seed(0)
    cfg = from_dict({"data": {"dataset": "cifar10"}, "model": {"name": model_name},
                     "method": {"name": "ssat-mbi", "interpolate": True}, "system": {"precision": precision}})
    model = create_model(model_name, 10, 3).to(device)
    flops = forward_flops(model, (3, 32, 32))
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    net = torch.compile(model, mode=compile_mode) if compile_mode != "off" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(batch, 3, 32, 32, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.softmax(torch.randn(batch, 10, device=device), 1)
    step = make_step("ssat-mbi", net, cfg, opt, device)
    t_c = time.perf_counter()
    for _ in range(warmup):
        step(x, y)
    _sync(device)
    warm_s = time.perf_counter() - t_c
    t0 = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    _sync(device)
    dt = (time.perf_counter() - t0) / steps
    ips = batch / dt
    achieved = ips * flops * predicted_units("ssat-mbi")
    return {"model": model_name, "precision": precision, "channels_last": channels_last, "compile": compile_mode,
            "ms_per_step": dt * 1e3, "images_per_s": ips, "cifar10_epoch_s": CIFAR_UNION / ips,
            "tflops": achieved / 1e12, "mfu_vs_bf16_peak": achieved / PEAK_BF16, "warmup_s": warm_s,
            "gflop_per_forward": flops / 1e9}


def cmd_variants(args) -> list[dict]:
    out = []
    for prec, cl, comp in (("fp32", False, "off"), ("bf16", False, "off"), ("bf16", True, "off"),
                           ("bf16", True, "default"), ("bf16", True, "reduce-overhead")):
        if comp != "off" and args.no_compile:
            continue
        try:
            r = one_variant(args.model, prec, cl, comp, args.steps, args.batch)
        except Exception as exc:  # a variant that does not work here is reported, not hidden
            r = {"model": args.model, "precision": prec, "channels_last": cl, "compile": comp,
                 "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps(r), flush=True)
        out.append(r)
    return out


def cmd_trainer(args) -> dict:
    """One real Trainer epoch on synthetic CIFAR-10 files: the GPU-resident data path, augmentation included."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.fakedata import write_cifar10

    from ssat.train import Trainer

    root = Path(tempfile.mkdtemp())
    write_cifar10(root, n_train=args.images + 100, n_test=100)
    over = {"data.root": str(root), "data.fully_labeled": True, "data.n_val": 100, "model.name": args.model,
            "optim.epochs": 2, "attack.schedule": "const", "attack.t": None, "optim.lr_milestones": [],
            "optim.lr_factors": [], "method.interpolate": True, "method.name": "ssat-mbi", "method.rho_double_epoch": None,
            "system.precision": args.precision, "system.compile": args.compile, "eval.val_every": 100}
    from ssat.presets import preset

    cfg = from_dict(preset("cifar10-ssat-mbi"), over)
    tr = Trainer(cfg, root / "out", log=lambda s: None)
    hist = tr.fit()
    m = hist[-1]  # the second epoch: compilation and allocator warm-up are behind
    r = {"trainer_model": args.model, "precision": args.precision, "compile": args.compile, "images": args.images,
         "epoch_s": m["perf/epoch_seconds"], "images_per_s": m["perf/images_per_s"],
         "cifar10_epoch_s": CIFAR_UNION / m["perf/images_per_s"]}
    print(json.dumps(r), flush=True)
    return r


def cmd_worker(args) -> None:
    """One packed trial: warm up, wait for the common start, count steps for `seconds`."""
    device = _device()
    cfg = from_dict({"data": {"dataset": "cifar10"}, "model": {"name": args.model},
                     "method": {"name": "ssat-mbi", "interpolate": True}, "system": {"precision": "bf16"}})
    model = create_model(args.model, 10, 3).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(args.batch, 3, 32, 32, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.softmax(torch.randn(args.batch, 10, device=device), 1)
    step = make_step("ssat-mbi", model, cfg, opt, device)
    for _ in range(3):
        step(x, y)
    _sync(device)
    while time.time() < args.start_at:
        time.sleep(0.01)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        step(x, y)
        n += 1
    _sync(device)
    print(json.dumps({"images_per_s": n * args.batch / (time.perf_counter() - t0)}), flush=True)


def cmd_pack(args) -> list[dict]:
    out = []
    for n in args.n:
        start_at = time.time() + args.startup
        procs = [subprocess.Popen([sys.executable, __file__, "worker", "--model", args.model, "--batch", str(args.batch),
                                   "--seconds", str(args.seconds), "--start-at", str(start_at)],
                                  stdout=subprocess.PIPE, text=True) for _ in range(n)]
        rates = []
        for p in procs:
            stdout, _ = p.communicate(timeout=args.startup + args.seconds + 120)
            lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
            if lines:
                rates.append(json.loads(lines[-1])["images_per_s"])
        r = {"packed_trials": n, "model": args.model, "per_trial_images_per_s": [round(x, 1) for x in rates],
             "total_images_per_s": round(sum(rates), 1), "finished": len(rates)}
        print(json.dumps(r), flush=True)
        out.append(r)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("variants")
    v.add_argument("--model", default="wrn-28-5")
    v.add_argument("--steps", type=int, default=20)
    v.add_argument("--batch", type=int, default=128)
    v.add_argument("--no-compile", action="store_true")
    t = sub.add_parser("trainer")
    t.add_argument("--model", default="wrn-28-5")
    t.add_argument("--images", type=int, default=8192)
    t.add_argument("--precision", default="bf16")
    t.add_argument("--compile", default="off")
    p = sub.add_parser("pack")
    p.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--model", default="wrn-28-2")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--startup", type=float, default=40.0, help="seconds allowed for imports and warm-up")
    w = sub.add_parser("worker")
    w.add_argument("--model", default="wrn-28-2")
    w.add_argument("--batch", type=int, default=128)
    w.add_argument("--seconds", type=float, default=20.0)
    w.add_argument("--start-at", type=float, required=True)
    args = ap.parse_args(argv)
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (not a GPU figure)"
    if args.cmd != "worker":
        print(json.dumps({"device": dev, "torch": torch.__version__, "cuda": torch.version.cuda}), flush=True)
    {"variants": cmd_variants, "trainer": cmd_trainer, "pack": cmd_pack, "worker": cmd_worker}[args.cmd](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

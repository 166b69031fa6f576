"""The GPU path: images/s, epoch time and model-FLOP utilisation of SSAT-MBI, and trials packed on one GPU.

    python benchmarks/gpu_throughput.py variants [--model wrn-28-5] [--steps 20]
    python benchmarks/gpu_throughput.py equivalence [--model wrn-16-1] [--steps 50] [--compile default]
    python benchmarks/gpu_throughput.py pack --n 1 2 4 8 [--model wrn-28-2] [--seconds 20] [--graph-mode]

Every step here is Engine.step (ssat/engine.py) of a real Trainer (step_time.bench_trainer). `variants` times
it on a fixed synthetic CIFAR batch in fp32, bf16 autocast, + channels_last, + torch.compile, + graph mode.
(A real Trainer's epochs in the default mode: benchmarks/sweep_cost.py epoch.) `equivalence` trains two trainers from
the same seed on the same batches, one in graph mode and one eager, and reports how far their weights and statistics
drift apart. `pack` starts N processes that each train WRN-28-2 on the same GPU and sums their images/s over a
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
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import bench_schedule, bench_trainer, fixed_batch, predicted_units, timed_steps  # noqa: E402

from ssat.models import create_model, forward_flops  # noqa: E402
from ssat.engine import GRAPH_WARMUP, StepStats  # noqa: E402

PEAK_BF16 = 989e12
CIFAR_UNION = 4000 + 45000  # labeled + unlabeled images of one CIFAR-10 epoch (1,000 held out for validation)


def one_variant(model_name: str, precision: str, channels_last: bool, compile_mode: str, steps: int, batch: int,
                graph_mode: bool = False, warmup: int = 5, device: str = "auto") -> dict:
    tr = bench_trainer("ssat-mbi", model_name, precision=precision, channels_last=channels_last,
                       compile_mode=compile_mode, graph_mode=graph_mode, device=device, batch=batch)
    flops = forward_flops(create_model(model_name, 10, 3).to(tr.device), (3, 32, 32))
    warm_s, dt = timed_steps(tr, fixed_batch(tr, batch), steps, warmup)
    ips = batch / dt
    achieved = ips * flops * predicted_units("ssat-mbi")
    return {"model": model_name, "precision": precision, "channels_last": channels_last, "compile": compile_mode,
            "graph_mode": tr.engine.graph_status, "ms_per_step": dt * 1e3, "images_per_s": ips,
            "cifar10_epoch_s": CIFAR_UNION / ips, "tflops": achieved / 1e12, "mfu_vs_bf16_peak": achieved / PEAK_BF16,
            "warmup_s": warm_s, "gflop_per_forward": flops / 1e9}


def cmd_variants(args) -> list[dict]:
    out = []
    for prec, cl, comp, graph in (("fp32", False, "off", False), ("bf16", False, "off", False),
                                  ("bf16", True, "off", False), ("bf16", True, "off", True),
                                  ("bf16", True, "default", False), ("bf16", True, "reduce-overhead", False)):
        if comp != "off" and args.no_compile:
            continue
        try:
            r = one_variant(args.model, prec, cl, comp, args.steps, args.batch, graph_mode=graph, device=args.device)
        except Exception as exc:  # a variant that does not work here is reported, not hidden
            r = {"model": args.model, "precision": prec, "channels_last": cl, "compile": comp, "graph_mode": graph,
                 "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps(r), flush=True)
        out.append(r)
    return out


def alpha_bins(summary: dict) -> tuple[float, float, float]:
    """The shares of alpha-hat at its floor, strictly between, and at 1 (StepStats' three bins)."""
    lo, one = summary["adv/alpha_min_share"], summary["adv/alpha_one_share"]
    return lo, 1.0 - lo - one, one


def cmd_equivalence(args) -> dict:
    """Graph mode (with --compile, the compiled step captured) against eager steps: two trainers from the same
    seed and weights, the same batches and the same default-generator state before each step, `steps` steps each;
    how far weights and statistics drift apart (the issue's bounds: loss within 1e-2 relative, alpha-hat's
    distribution within total-variation distance 0.05)."""
    runs = {}
    for graph in (False, True):
        tr = bench_trainer("ssat-mbi", args.model, precision=args.precision, channels_last=True, graph_mode=graph,
                           compile_mode=args.compile if graph else "off", device=args.device, batch=args.batch,
                           cudnn_benchmark=False)
        torch.manual_seed(0)  # the same PGD random starts for both (CUDA: the default generator)
        sched, acc = bench_schedule(tr), StepStats(tr.device, tr.cfg.method.K)
        for i in range(args.steps):
            tr.engine.step(fixed_batch(tr, args.batch, seed=i), sched, acc)
        runs[graph] = (tr, acc)
    (eager, acc_e), (graph, acc_g) = runs[False], runs[True]
    diff = max((a.float() - b.float()).abs().max().item()
               for a, b in zip(eager.model.state_dict().values(), graph.model.state_dict().values()))
    se, sg = acc_e.summary(), acc_g.summary()
    tv = 0.5 * sum(abs(a - b) for a, b in zip(alpha_bins(se), alpha_bins(sg)))
    rel = abs(sg["train/loss"] - se["train/loss"]) / abs(se["train/loss"])
    r = {"equivalence_model": args.model, "steps": args.steps, "precision": eager.engine.precision,
         "compile": args.compile,
         "graph_mode": graph.engine.graph_status, "graph_steps": acc_g.graph_steps,
         "eager_steps_in_graph_run": acc_g.eager_steps,
         "max_abs_weight_diff": diff, "bitwise_equal": diff == 0.0,
         "train_loss_eager": se["train/loss"], "train_loss_graph": sg["train/loss"], "loss_rel_diff": rel,
         "alpha_mean_eager": se["adv/alpha_mean"], "alpha_mean_graph": sg["adv/alpha_mean"],
         "alpha_tv_distance": tv, "within_bounds": rel < 1e-2 and tv <= 0.05}
    print(json.dumps(r), flush=True)
    return r


def cmd_worker(args) -> None:
    """One packed trial: warm up, wait for the common start, count steps for `seconds`."""
    tr = bench_trainer("ssat-mbi", args.model, precision=args.precision, channels_last=True, device=args.device,
                       batch=args.batch, memory_fraction=args.memory_fraction, graph_mode=args.graph_mode)
    batch, sched, acc = fixed_batch(tr, args.batch), bench_schedule(tr), StepStats(tr.device, tr.cfg.method.K)
    sync = torch.cuda.synchronize if tr.device.type == "cuda" else (lambda: None)
    for _ in range(GRAPH_WARMUP + 2):  # graph mode: the warm-up steps, the capture and one replay
        tr.engine.step(batch, sched, acc)
    sync()
    while time.time() < args.start_at:
        time.sleep(0.01)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        tr.engine.step(batch, sched, acc)
        n += 1
    sync()
    peak = torch.cuda.max_memory_allocated(tr.device) / 2**20 if tr.device.type == "cuda" else None
    print(json.dumps({"images_per_s": n * args.batch / (time.perf_counter() - t0), "peak_mib": peak,
                      "graph_mode": tr.engine.graph_status}), flush=True)


def cmd_pack(args) -> list[dict]:
    out = []
    for n in args.n:
        start_at = time.time() + args.startup
        procs = [subprocess.Popen([sys.executable, __file__, "worker", "--model", args.model,
                                   "--batch", str(args.batch), "--seconds", str(args.seconds),
                                   "--start-at", str(start_at), "--device", args.device, "--precision", args.precision]
                                  + (["--memory-fraction", str(args.memory_fraction)] if args.memory_fraction else [])
                                  + (["--graph-mode"] if args.graph_mode else []),
                                  stdout=subprocess.PIPE, text=True) for _ in range(n)]
        rates, peaks, modes = [], [], set()
        for p in procs:
            stdout, _ = p.communicate(timeout=args.startup + args.seconds + 120)
            lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
            if lines:
                rec = json.loads(lines[-1])
                rates.append(rec["images_per_s"])
                peaks.append(rec.get("peak_mib"))
                modes.add(rec.get("graph_mode"))
        r = {"packed_trials": n, "model": args.model, "mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY")),
             "memory_fraction": args.memory_fraction, "graph_mode": sorted(modes, key=str),
             "per_trial_peak_mib": [p and round(p) for p in peaks],
             "per_trial_images_per_s": [round(x, 1) for x in rates],
             "total_images_per_s": round(sum(rates), 1), "finished": len(rates)}
        print(json.dumps(r), flush=True)
        out.append(r)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="auto", help="auto, cuda or cpu (system.device)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("variants", parents=[common])
    v.add_argument("--model", default="wrn-28-5")
    v.add_argument("--steps", type=int, default=20)
    v.add_argument("--batch", type=int, default=128)
    v.add_argument("--no-compile", action="store_true")
    e = sub.add_parser("equivalence", parents=[common])
    e.add_argument("--model", default="wrn-16-1")
    e.add_argument("--steps", type=int, default=50)
    e.add_argument("--batch", type=int, default=128)
    e.add_argument("--precision", default="fp32")
    e.add_argument("--compile", default="off", help="the graph-mode trainer's system.compile (off or default)")
    p = sub.add_parser("pack", parents=[common])
    p.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--model", default="wrn-28-2")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--startup", type=float, default=40.0, help="seconds allowed for imports and warm-up")
    p.add_argument("--memory-fraction", type=float, default=None, help="each trial's CUDA memory cap (its share)")
    p.add_argument("--graph-mode", action="store_true", help="each trial in system.graph_mode")
    w = sub.add_parser("worker", parents=[common])
    w.add_argument("--model", default="wrn-28-2")
    w.add_argument("--batch", type=int, default=128)
    w.add_argument("--precision", default="bf16")
    w.add_argument("--seconds", type=float, default=20.0)
    w.add_argument("--start-at", type=float, required=True)
    w.add_argument("--memory-fraction", type=float, default=None)
    w.add_argument("--graph-mode", action="store_true")
    args = ap.parse_args(argv)
    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU (not a GPU figure)"
    if args.cmd != "worker":
        print(json.dumps({"device": dev, "torch": torch.__version__, "cuda": torch.version.cuda}), flush=True)
    {"variants": cmd_variants, "equivalence": cmd_equivalence, "pack": cmd_pack,
     "worker": cmd_worker}[args.cmd](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

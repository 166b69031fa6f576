"""Profile the training step (Engine.step, ssat/engine.py) with torch.profiler: where a step spends its time.

    python benchmarks/profile_step.py [--model cnn-small] [--method ssat-mbi] [--mode eager|compiled|graph]
        [--steps 10] [--warmup 5] [--batch 128] [--precision fp32|bf16] [--channels-last] [--threads N]
        [--trace step_trace.json] [--json summary.json]

A real Trainer (benchmarks/step_time.py's bench_trainer) runs full batches of its own data, fetched and
augmented as its epochs do. Printed: ms per step of wall time and of device-busy time (CUDA: the summed kernel
durations; CPU: the summed self time of the operators), the kernels executed per step (CPU: the operators), the
top 20 kernels, the time of each phase (the record_function ranges data, pgd, search, outer forward, backward,
optimizer, statistics: a kernel counts for the innermost range around the operator that launched it, so the
outer forward's kernel time leaves out the pgd and search nested in it; the range time is the CPU time from
the range's start to its end, nested ranges included), and whether any weight-gradient kernel runs inside the
PGD phase. The Chrome trace is saved (chrome://tracing, ui.perfetto.dev).

Modes: eager (system.compile off), compiled (system.compile default), graph (system.graph_mode: the step is
replayed as one CUDA graph, inside which no range exists, so the phases are empty and only the kernel totals
and top kernels mean something; on a CPU graph mode falls back to eager steps and the reason is printed),
graph-compiled (both: the compiled step captured as one graph). On CUDA the GPU-busy share is the union of
every device activity's interval (a replay's kernels too, which no operator launched) over the wall time.
No figure of a CPU run is a GPU figure.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import bench_schedule, bench_trainer  # noqa: E402

from ssat.engine import StepStats  # noqa: E402
from ssat.train import Trainer, ranged  # noqa: E402

PHASES = ("data", "pgd", "search", "outer forward", "backward", "optimizer", "statistics")
MODES = {"eager": ("off", False), "compiled": ("default", False), "graph": ("off", True),
         "graph-compiled": ("default", True)}
# cuDNN/CUTLASS weight-gradient kernels and the ATen weight-backward operators
WEIGHT_GRAD = re.compile(r"wgrad|backward_weight|weight_grad", re.IGNORECASE)
ACCUMULATE = "AccumulateGrad"  # one per PGD iteration for x_adv; more would be parameters' gradients


def full_batches(tr: Trainer, size: int):
    """Endless batches of `size` images from the trainer's epochs (a shorter last batch is skipped), each
    fetched inside the "data" range."""
    while True:
        for batch in ranged(tr.batches.epoch(tr.gen), "data"):
            if len(batch[0]) == size:
                yield batch


def _innermost(ranges: list[tuple[int, int, str]], t: int) -> str | None:
    """The name of the latest-starting range (start, end, name) that holds time t: the innermost one."""
    best = None
    for start, end, name in ranges:
        if start <= t <= end and (best is None or start >= best[0]):
            best = (start, name)
    return best[1] if best else None


def busy_union_us(intervals: list[tuple[float, float]]) -> float:
    """Microseconds during which at least one of the (start, end) intervals runs: the device's busy time, with
    kernels that overlap (several streams) counted once."""
    total, end = 0.0, -float("inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def summarize(events, steps: int, wall_s: float, pgd_iterations: int) -> dict:
    """The numbers this script prints, from the profiler's events of `steps` steps."""
    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    # every device activity (kernels, copies), also those of a CUDA-graph replay, which no operator launched
    device = [e for e in events if e.device_type == DeviceType.CUDA and not e.is_user_annotation
              and e.name not in PHASES and e.name != "step"]
    device_busy_us = busy_union_us([(e.time_range.start, e.time_range.end) for e in device])
    ranges = [(e.time_range.start, e.time_range.end, e.name) for e in cpu if e.name in PHASES]
    ops = [e for e in cpu if not e.is_user_annotation and e.name not in PHASES and e.name != "step"]
    # a device kernel's phase is the phase of the operator that launched it: each operator lists its kernels
    # (FunctionEvent.kernels, in every torch 2.x; the device events' own link to it is newer than torch 2.11)
    gpu = [(k.name, k.duration, e) for e in ops for k in e.kernels]
    if gpu:
        kernels = gpu
        busy_us = sum(d for _, d, _ in kernels)
    else:  # on a CPU the operators are the kernels, each with its self time
        kernels = [(e.name, e.self_cpu_time_total, e) for e in ops]
        busy_us = sum(d for _, d, _ in kernels)
    per_phase_us: dict[str, float] = defaultdict(float)
    top: dict[str, list] = {}
    for name, dur, launcher in kernels:
        phase = _innermost(ranges, launcher.time_range.start) if launcher is not None else None
        per_phase_us[phase or "other"] += dur
        if not device:  # else the device's own activities below, which include a replay's kernels
            top.setdefault(name, [0, 0.0])
            top[name][0] += 1
            top[name][1] += dur
    for e in device:
        top.setdefault(e.name, [0, 0.0])
        top[e.name][0] += 1
        top[e.name][1] += e.time_range.elapsed_us()
    phase_ops: dict[str, Counter] = defaultdict(Counter)
    for e in ops:
        phase_ops[_innermost(ranges, e.time_range.start) or "other"][e.name] += 1
    in_pgd = phase_ops.get("pgd", Counter())
    accumulate = sum(n for name, n in in_pgd.items() if ACCUMULATE in name)
    wgrad = sorted({name for name, _, launcher in kernels if WEIGHT_GRAD.search(name)
                    and launcher is not None and _innermost(ranges, launcher.time_range.start) == "pgd"}
                   | {name for name in in_pgd if WEIGHT_GRAD.search(name)})
    range_us = defaultdict(float)
    for start, end, name in ranges:
        range_us[name] += end - start
    return {
        "steps": steps, "wall_ms_per_step": 1e3 * wall_s / steps, "busy_ms_per_step": busy_us / 1e3 / steps,
        "busy_kind": "CUDA kernel time" if gpu else "CPU self time of the operators",
        "kernels_per_step": len(kernels) / steps,
        "device_activities_per_step": len(device) / steps if device else None,
        "gpu_busy_ms_per_step": device_busy_us / 1e3 / steps if device else None,
        "gpu_busy_share": device_busy_us / (wall_s * 1e6) if device else None,
        "top_kernels": [{"name": n, "calls_per_step": c / steps, "ms_per_step": d / 1e3 / steps}
                        for n, (c, d) in sorted(top.items(), key=lambda kv: -kv[1][1])[:20]],
        "phase_kernel_ms_per_step": {p: per_phase_us.get(p, 0.0) / 1e3 / steps for p in (*PHASES, "other")},
        "phase_range_ms_per_step": {p: range_us.get(p, 0.0) / 1e3 / steps for p in PHASES},
        "phase_op_counts_per_step": {p: {n: c / steps for n, c in sorted(cnt.items())} for p, cnt in phase_ops.items()},
        "accumulate_grad_in_pgd_per_iteration": accumulate / max(steps * pgd_iterations, 1),
        "weight_grad_kernels_in_pgd": wgrad,
        "weight_grad_in_pgd": bool(wgrad) or accumulate > steps * pgd_iterations,
    }


def profile(tr: Trainer, batch: int, steps: int, warmup: int, trace: Path | None) -> dict:
    """Run `warmup` steps, then profile `steps` steps of Engine.step; the summary, with the graph mode's status."""
    sched, acc = bench_schedule(tr), StepStats(tr.device, tr.cfg.method.K)
    batches = full_batches(tr, batch)
    sync = torch.cuda.synchronize if tr.device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        tr.engine.step(next(batches), sched, acc)
    sync()
    acc.reset()  # the step counts below are the profiled steps'
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if tr.device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            with record_function("step"):
                tr.engine.step(next(batches), sched, acc)
        sync()
        wall = time.perf_counter() - t0
    if trace is not None:
        prof.export_chrome_trace(str(trace))
    out = summarize(prof.events(), steps, wall, tr.cfg.attack.steps)
    out.update({"device": torch.cuda.get_device_name() if tr.device.type == "cuda" else "cpu",
                "graph_status": tr.engine.graph_status, "graph_steps": acc.graph_steps, "eager_steps": acc.eager_steps})
    return out


def report(r: dict, label: str) -> None:
    print(f"== {label} on {r['device']}: {r['wall_ms_per_step']:.2f} ms/step wall, {r['busy_ms_per_step']:.2f} "
          f"ms/step busy ({r['busy_kind']}), {r['kernels_per_step']:.0f} kernels/step; graph mode: "
          f"{r['graph_status']} ({r['graph_steps']} replays, {r['eager_steps']} eager steps)")
    if r["gpu_busy_share"] is not None:
        print(f"GPU busy (every device activity, replays included, overlaps once): {r['gpu_busy_ms_per_step']:.2f} "
              f"ms/step = {100 * r['gpu_busy_share']:.1f}% of the wall time; {r['device_activities_per_step']:.0f} "
              f"activities/step")
    print("phase          kernel ms/step  range ms/step")
    for p, ms in r["phase_kernel_ms_per_step"].items():
        print(f"{p:14s} {ms:14.3f}  {r['phase_range_ms_per_step'].get(p, float('nan')):13.3f}")
    wgrad = f"YES {r['weight_grad_kernels_in_pgd']}" if r["weight_grad_in_pgd"] else "none"
    print(f"weight-gradient kernels inside PGD: {wgrad} (AccumulateGrad per PGD iteration: "
          f"{r['accumulate_grad_in_pgd_per_iteration']:.2f}; 1 = x_adv only)")
    print("top kernels: calls/step  ms/step  name")
    for k in r["top_kernels"]:
        print(f"  {k['calls_per_step']:8.1f}  {k['ms_per_step']:8.3f}  {k['name'][:100]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="cnn-small")
    ap.add_argument("--method", default="ssat-mbi")
    ap.add_argument("--mode", nargs="+", default=["eager"], choices=list(MODES))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5, help="unprofiled steps first (graph mode captures after 3)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--trace", default=None, help="Chrome trace path; with several modes, the mode is appended")
    ap.add_argument("--json", default=None, help="write the summaries here, one object per mode")
    ap.add_argument("--cache", default=None, help="system.compile_cache (a sweep's shared folder of kernels)")
    ap.add_argument("--fused-forward", default="off", choices=["auto", "on", "off"], help="system.fused_forward")
    args = ap.parse_args(argv)
    results = {}
    for mode in args.mode:
        compile_mode, graph = MODES[mode]
        tr = bench_trainer(args.method, args.model, precision=args.precision, channels_last=args.channels_last,
                           compile_mode=compile_mode, graph_mode=graph, device=args.device, batch=args.batch,
                           threads=args.threads, compile_cache=args.cache, fused_forward=args.fused_forward)
        trace = None
        if args.trace:
            trace = Path(args.trace)
            trace = trace.with_name(f"{trace.stem}-{mode}{trace.suffix}") if len(args.mode) > 1 else trace
        results[mode] = profile(tr, args.batch, args.steps, args.warmup, trace)
        report(results[mode], f"{args.model} {args.method} {mode}, batch {args.batch}, {args.precision}")
        if trace is not None:
            print(f"Chrome trace: {trace}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where one `make demo` trial spends its CPU time, in-process (no Ray): per epoch the training steps by phase and by
operator family, validation, the checkpoint writes; the trial's final PGD-20.

    .venv/bin/python benchmarks/profile_demo_trial.py [--row 'linear|on'] [--epochs 10] [--profile-epochs 2]
        [--set key=value ...] [--json OUT]

The trial is the demo spec's (sweeps/specs/mnist5k-demo.yaml, one CPU thread as a trial has) with random teacher
outputs in place of the FixMatch teacher's (the cost of a step does not depend on them). Epochs 2..1+profile-epochs
run under torch.profiler: each operator's self CPU time goes to its innermost phase (the step's record_function
ranges: data, pgd, search, outer forward, backward, optimizer, statistics) and to its family (convolution and its
backward, linear, batch norm, pooling, elementwise, other). What Ray and MLflow add per epoch is not here: compare a
demo log's epoch overhead (benchmarks/demo_breakdown.py) with validation + checkpoints measured here.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssat.config import parse_overrides  # noqa: E402
from ssat.train import Trainer  # noqa: E402
from sweeps.costs.measure import random_teacher  # noqa: E402
from sweeps.spec import load_spec  # noqa: E402

SPEC = Path(__file__).resolve().parents[1] / "sweeps" / "specs" / "mnist5k-demo.yaml"
PHASES = ("data", "pgd", "search", "outer forward", "backward", "optimizer", "statistics")
FAMILIES = (("convolution backward", ("convolution_backward",)),
            ("convolution", ("convolution", "conv2d", "mkldnn_conv")),
            ("linear", ("addmm", "linear", "mm", "matmul")),
            ("batch norm", ("batch_norm",)), ("pooling", ("max_pool", "pool")),
            ("elementwise", ("add", "mul", "sub", "div", "relu", "threshold", "clamp", "sign", "where", "exp",
                             "log", "softmax", "min", "max", "copy", "fill", "zero", "neg", "abs", "lerp", "pow")))


def family(name: str) -> str:
    n = name.lower()
    return next((f for f, keys in FAMILIES if any(k in n for k in keys)), "other")


def trial_config(row: str, sets: dict):
    spec = load_spec(SPEC, cpu_only=True, sets={"system.threads": 1, **sets})
    return next(t.config for t in spec.trials() if t.row == row and t.seed == 0)


def breakdown(prof) -> dict:
    """Self CPU ms by phase and by operator family, over the profiled epochs."""
    events = prof.events()
    ranges = sorted(((e.time_range.start, e.time_range.end, e.name) for e in events if e.name in PHASES),
                    key=lambda r: r[1] - r[0])  # innermost (shortest) first
    by_phase, by_family = defaultdict(float), defaultdict(float)
    for e in events:
        if e.name in PHASES or e.name.startswith("ProfilerStep"):
            continue
        t = e.self_cpu_time_total / 1e3
        phase = next((n for s, end, n in ranges if s <= e.time_range.start and e.time_range.end <= end), "other")
        by_phase[phase] += t
        by_family[family(e.name)] += t
    return {"phase_ms": dict(by_phase), "family_ms": dict(by_family)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--row", default="linear|on")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--profile-epochs", type=int, default=2)
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    cfg = trial_config(args.row, parse_overrides(args.set))
    torch.set_num_threads(1)
    out = Path(tempfile.mkdtemp(prefix="ssat-profile-"))
    tr = Trainer(cfg, out, teacher=random_teacher(cfg), log=lambda s: None)
    rec: dict = {"bench": "demo_trial_profile", "row": args.row, "device": "cpu", "threads": 1,
                 "load_average_at_start": os.getloadavg(),
                 "torch": torch.__version__, "sets": args.set, "steps_per_epoch": len(tr.batches.spans()),
                 "epochs": [], "engine": tr.engine.status()}
    prof_epochs = range(2, 2 + args.profile_epochs)
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        if epoch in prof_epochs:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                m = tr.train_epoch(epoch)
            for k, v in breakdown(prof).items():
                for name, ms in v.items():
                    rec.setdefault(k, {}).setdefault(name, 0.0)
                    rec[k][name] += ms / args.profile_epochs
        else:
            m = tr.train_epoch(epoch)
        t1 = time.perf_counter()
        val = None
        if epoch % cfg.eval.val_every == 0:
            val = tr.validate(tr.selection_model(epoch))
        t2 = time.perf_counter()
        tr.epoch = epoch
        tr.save({"epoch": epoch, **m, **(val or {})}, tr.selection_model(epoch), improved=val is not None or epoch == 1)
        t3 = time.perf_counter()
        rec["epochs"].append({"epoch": epoch, "train_s": t1 - t0, "validate_s": t2 - t1 if val else 0.0,
                              "save_s": t3 - t2, "profiled": epoch in prof_epochs})
        print(f"epoch {epoch}: train {t1 - t0:.3f} s, validate {t2 - t1:.3f} s, save {t3 - t2:.3f} s", flush=True)
    t = time.perf_counter()
    res = tr.final_evaluation()
    rec["final_evaluation_s"] = time.perf_counter() - t
    plain = [e for e in rec["epochs"] if not e["profiled"] and e["epoch"] > 1]
    rec["train_s_per_epoch"] = sum(e["train_s"] for e in plain) / max(len(plain), 1)
    rec["save_s_per_epoch"] = sum(e["save_s"] for e in rec["epochs"]) / len(rec["epochs"])
    vals = [e["validate_s"] for e in rec["epochs"] if e["validate_s"]]
    rec["validate_s"] = sum(vals) / max(len(vals), 1)
    rec["test"] = {k: {a: r["acc"] for a, r in v.items()} for k, v in res.items()}
    rec["load_average_at_end"] = os.getloadavg()
    print(json.dumps(rec, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

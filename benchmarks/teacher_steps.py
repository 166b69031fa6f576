"""Steps per second of the FixMatch teacher, and its projected time for the CIFAR-10 recipe (195,000 steps).

    python benchmarks/teacher_steps.py --model wrn-28-2 --steps 200 [--device auto] [--precision auto] [--warmup 20]

The step timed is `ssat.fixmatch.TeacherSteps.step`, the one `train_teacher` repeats: batches drawn on the
device, weak and strong views (the batched RandAugment of ssat/views.py), one joint forward of
64 labeled + 2 x 128 unlabeled images, the FixMatch loss, backward, SGD, and the finiteness check every
CHECK_EVERY steps. The data are synthetic CIFAR-10 files (ssat/synthetic.py) in a temporary folder, split as the
recipe splits CIFAR-10 (4,000 labeled, 1,000 validation images) with the cifar10 teacher preset (RandAugment with
3 ops at magnitude 10, Cutout 0.5). Warm-up steps are not timed; on CUDA the clock is read after
torch.cuda.synchronize. `augment_ms_per_step` times the views alone (`TeacherSteps.views`, the same number of
times, synchronised the same way). Prints one JSON line.

Target: cifar10_teacher_gpu_hours <= 1, i.e. >= 54 steps/s on an H100/H200.

CPU numbers are no measurement: the script runs on a CPU only so that it can be tested there (tiny sizes:
--model cnn-small --steps 3 --warmup 1); a CPU step time says nothing about the GPU path.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssat.config import from_dict  # noqa: E402
from ssat.datasets import split_for  # noqa: E402
from ssat.fixmatch import TeacherSteps  # noqa: E402
from ssat.presets import teacher_preset  # noqa: E402
from ssat.runtime import resolve_device  # noqa: E402
from ssat.synthetic import write_cifar10  # noqa: E402

CIFAR10_TEACHER_STEPS = 195_000
N_LABELED, N_VAL = 4000, 1000  # the CIFAR-10 split: labeled and validation images


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="wrn-28-2", help="teacher architecture (ssat.models)")
    ap.add_argument("--steps", type=int, default=200, help="timed steps")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps before (cuDNN, allocator, caches)")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    ap.add_argument("--precision", default="auto", help="system.precision: auto, fp32, bf16 or fp16")
    ap.add_argument("--images", type=int, default=N_LABELED + N_VAL + 1000,
                    help="synthetic training images (>= 5,000: 4,000 labeled and 1,000 validation are set apart)")
    return ap


def teacher_steps(root: Path, args) -> TeacherSteps:
    """A TeacherSteps on synthetic CIFAR-10 files written to `root`, as train_teacher builds it."""
    write_cifar10(root, n_train=args.images, n_test=10)
    teacher = {**teacher_preset("cifar10"), "model": args.model, "steps": args.warmup + args.steps}
    cfg = from_dict({"data": {"dataset": "cifar10", "root": str(root), "n_labeled": N_LABELED, "n_val": N_VAL},
                     "model": {"name": args.model}, "teacher": teacher,
                     "system": {"device": args.device, "precision": args.precision}})
    arrays, split = split_for(cfg)
    return TeacherSteps(cfg, arrays, split, resolve_device(args.device))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(args) -> dict:
    root = Path(tempfile.mkdtemp(prefix="ssat-teacher-bench-"))
    try:
        loop = teacher_steps(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)  # the arrays are in memory now
    dev = loop.device
    for step in range(1, args.warmup + 1):
        loop.step(step)
    _sync(dev)
    t0 = time.perf_counter()
    for step in range(args.warmup + 1, args.warmup + args.steps + 1):
        loop.step(step)
    _sync(dev)
    step_s = (time.perf_counter() - t0) / args.steps
    t1 = time.perf_counter()
    for _ in range(args.steps):
        loop.views()
    _sync(dev)
    views_s = (time.perf_counter() - t1) / args.steps
    t = loop.t
    return {"bench": "teacher", "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "torch": torch.__version__, "teacher_model": args.model, "precision": loop.precision,
            "steps": args.steps, "warmup": args.warmup, "steps_per_s": 1.0 / step_s,
            "augment_ms_per_step": views_s * 1e3,
            "cifar10_teacher_gpu_hours": CIFAR10_TEACHER_STEPS * step_s / 3600,
            "labeled_batch": t.labeled_batch, "unlabeled_batch": t.unlabeled_batch,
            "randaugment_ops": t.randaugment_ops}


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit("--steps must be >= 1 and --warmup >= 0")
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

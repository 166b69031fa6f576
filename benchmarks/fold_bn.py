"""system.fold_bn on a CPU: one training epoch and one validation of a real Trainer with BatchNorm folded into the
convolution before it (`on`) and not (`off`), interleaved (off, on, off, on, ...) so that a machine's drift and
other load fall on both alike. `auto` folds on a CPU; this is the measurement that says whether it should.

    python benchmarks/fold_bn.py [--repeats 5] [--models cnn-small] [--n-unlabeled 3400] [--out FILE]

Per model: the median seconds of the epoch (attack + training step, the attack's forwards in eval mode folded)
and of the validation (clean + PGD-10), each setting's, their ratio on/off, and every repeat's figures; the
machine's load average before and after. Writes JSON to benchmarks/results/<date>-fold-bn-cpu.json (or --out).
The teacher is random (its quality does not change the step's cost).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssat.config import from_dict  # noqa: E402
from ssat.epoch_scaling import scale_epochs  # noqa: E402
from ssat.presets import preset  # noqa: E402
from ssat.train import Trainer  # noqa: E402
from sweeps.costs.measure import random_teacher  # noqa: E402


def one(model: str, fold: str, n_unlabeled: int, folder: Path) -> dict:
    """Seconds of epoch 1 and of its validation, on a fresh Trainer (fresh output folder)."""
    cfg = from_dict(scale_epochs(preset("mnist5k-ssat-mbi"), 4),
                    {"model.name": model, "system.fold_bn": fold, "data.n_unlabeled": n_unlabeled,
                     "eval.autoattack": False})
    out = Path(tempfile.mkdtemp(dir=folder))
    trainer = Trainer(cfg, out, teacher=random_teacher(cfg), log=lambda s: None)
    t0 = time.perf_counter()
    trainer.train_epoch(1)
    t1 = time.perf_counter()
    trainer.validate(trainer.model)
    t2 = time.perf_counter()
    return {"epoch_s": t1 - t0, "val_s": t2 - t1, "threads": torch.get_num_threads(), "fold": trainer.engine.status()
            .get("fold_bn", fold)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", nargs="+", default=["cnn-small"])
    ap.add_argument("--n-unlabeled", type=int, default=3400)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    load = [os.getloadavg()]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            runs = {"off": [], "on": []}
            for r in range(args.repeats):
                for fold in ("off", "on"):
                    rec = one(model, fold, args.n_unlabeled, Path(tmp))
                    runs[fold].append(rec)
                    print(f"{model} repeat {r + 1}/{args.repeats} fold_bn={fold}: epoch {rec['epoch_s']:.2f} s, "
                          f"validation {rec['val_s']:.2f} s", flush=True)
            med = {f: {k: statistics.median(x[k] for x in runs[f]) for k in ("epoch_s", "val_s")} for f in runs}
            ratio = {k: med["on"][k] / med["off"][k] for k in ("epoch_s", "val_s")}
            results[model] = {"median": med, "on_over_off": ratio, "runs": runs}
            print(f"{model}: median epoch off {med['off']['epoch_s']:.2f} s, on {med['on']['epoch_s']:.2f} s "
                  f"(on/off {ratio['epoch_s']:.3f}); validation off {med['off']['val_s']:.2f} s, on "
                  f"{med['on']['val_s']:.2f} s (on/off {ratio['val_s']:.3f})", flush=True)
    load.append(os.getloadavg())
    record = {"bench": "fold_bn_cpu", "date": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.processor()
              or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__, "repeats": args.repeats,
              "n_unlabeled": args.n_unlabeled, "load_before_after": load, "models": results}
    out = Path(args.out or Path(__file__).parent / "results" / f"{time.strftime('%Y-%m-%d')}-fold-bn-cpu.json")
    out.write_text(json.dumps(record, indent=1))
    print(f"load average before {load[0][0]:.2f}, after {load[1][0]:.2f}; written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does TF32 change a robust accuracy? The same checkpoints evaluated in strict fp32 and in TF32 on the same images.

    python benchmarks/tf32_decision.py WORKDIR [--n 1000] [--autoattack 2] [--budget-s 150] [--json OUT]

Every best.pt below WORKDIR/runs (the trials of a sweep, e.g. `make demo` on a GPU; checksums verified) is
evaluated on its dataset's first --n test images with ssat.evaluate.evaluate_model, once with
eval.tf32 off (strict IEEE fp32 convolutions and matmuls) and once on: clean and PGD-20 for every checkpoint,
standard AutoAttack for the --autoattack checkpoints with the highest fp32 PGD-20 (the most robust, where
AutoAttack runs longest), while --budget-s lasts. PGD's random start comes from a seeded generator, so both
precisions attack from the same start. Prints one JSON line per (checkpoint, precision) and a verdict: TF32 may be
the default only if every robust accuracy (PGD-20, AutoAttack) agrees within 0.1 point on at least 1,000 images.
A CPU run is a smoke test (TF32 does not exist there), never the decision.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ssat.evaluate import evaluate_model, first_test_images, load_checkpoint_model  # noqa: E402

TOLERANCE = 0.1  # points
SLACK = 1e-6  # accuracies are float percentages: 63.9 - 63.8 is 0.1000000000000014, one image of 1,000
MIN_IMAGES = 1000


def evaluate(path: Path, n: int, autoattack: bool, tf32: bool, device: torch.device) -> dict:
    model, cfg, _ = load_checkpoint_model(path, device)
    x, y, _ = first_test_images(cfg, n, device)
    t = time.perf_counter()
    res = evaluate_model(model.eval(), x, y, eps=cfg.eps, checkpoint="best", pgd_steps=(20,), autoattack=autoattack,
                         batch_size=cfg.eval.batch_size, tf32=tf32, log=lambda s: None)
    return {"checkpoint": str(path), "model": cfg.model.name, "n": len(x), "tf32": tf32,
            "seconds": time.perf_counter() - t, **{a: r["acc"] for a, r in res.items()}}


def verdict(rows: list[dict]) -> dict:
    """Largest |TF32 - fp32| per robust attack over the checkpoints measured both ways, and whether TF32 passes."""
    pairs: dict[tuple, dict] = {}
    for r in rows:
        pairs.setdefault((r["checkpoint"], "autoattack" in r), {})[r["tf32"]] = r
    diffs: dict[str, list[float]] = {}
    for both in pairs.values():
        if len(both) == 2:
            for attack in ("clean", "pgd20", "autoattack"):
                if attack in both[False]:
                    diffs.setdefault(attack, []).append(abs(both[True][attack] - both[False][attack]))
    worst = {a: max(d) for a, d in diffs.items()}
    n = min((r["n"] for r in rows), default=0)
    robust = [worst.get(a) for a in ("pgd20", "autoattack")]
    ok = n >= MIN_IMAGES and all(w is not None and w <= TOLERANCE + SLACK for w in robust)
    return {"verdict": "tf32" if ok else "fp32", "worst_abs_diff": worst, "images": n,
            "pairs": {a: len(d) for a, d in diffs.items()},
            "rule": f"every robust accuracy within {TOLERANCE} point on >= {MIN_IMAGES} images"}


def failed_already(v: dict) -> bool:
    """True when a robust accuracy measured so far differs by more than TOLERANCE: no later row can pass TF32."""
    return any(v["worst_abs_diff"].get(a, 0.0) > TOLERANCE + SLACK for a in ("pgd20", "autoattack"))


def write(path: str | None, rows: list[dict], paths: list[Path]) -> dict:
    """The verdict on the rows so far; with path, the rows and it as JSON lines (rewritten whole each time)."""
    v = {"bench": "tf32_verdict", "checkpoints": len(paths), **verdict(rows)}
    if path:
        Path(path).write_text("\n".join(json.dumps(r) for r in rows + [v]) + "\n")
    return v


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--autoattack", type=int, default=2, help="checkpoints that also get AutoAttack")
    ap.add_argument("--budget-s", type=float, default=150.0, help="no new AutoAttack pair after this many seconds")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.cuda.get_device_name() if device.type == "cuda" else "CPU (no TF32: not the decision)"
    print(json.dumps({"device": dev, "torch": torch.__version__}), flush=True)
    t0, rows = time.perf_counter(), []
    paths = sorted(Path(args.workdir).glob("runs/sweeps/*/artifacts/*/best.pt"))  # each run's registered copy
    for path in paths:
        for tf32 in (False, True):
            rows.append(evaluate(path, args.n, False, tf32, device))
            print(json.dumps({"bench": "tf32", **rows[-1]}), flush=True)
    if failed_already(write(args.json, rows, paths)):  # written now: kept if AutoAttack runs past a timeout
        print(json.dumps({"bench": "tf32_note", "autoattack": "skipped: a PGD-20 accuracy already differs by more "
                          f"than {TOLERANCE} point, so TF32 fails whatever AutoAttack gives"}), flush=True)
    else:
        strongest = sorted((r for r in rows if not r["tf32"]), key=lambda r: -r["pgd20"])[:args.autoattack]
        for r in strongest:
            if time.perf_counter() - t0 > args.budget_s:
                break
            for tf32 in (False, True):
                rows.append(evaluate(Path(r["checkpoint"]), args.n, True, tf32, device))
                print(json.dumps({"bench": "tf32", **rows[-1]}), flush=True)
    print(json.dumps(write(args.json, rows, paths)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

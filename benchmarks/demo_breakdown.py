"""Where a sweep's trial time goes, from the trial logs its last checkpoints hold: training steps, the per-epoch
validation + checkpoint + report, the final PGD evaluation and AutoAttack.

    .venv/bin/python benchmarks/demo_breakdown.py [--workdir .] [--name mnist5k-demo] [--json out.json]

Trial logs stamp each line to the second, and "training" is the sum of the epochs' own step timers, so the
columns are good to about a second per trial. Core-seconds: every trial runs on one core.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

EPOCH = re.compile(r"^(\d\d):(\d\d):(\d\d) epoch (\d+)/(\d+) .*\| ([0-9.]+)s \(")
STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d) ")


def seconds(line: str) -> int | None:
    m = STAMP.match(line)
    return None if m is None else int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3])


def last_logs(workdir: Path, name: str) -> dict[str, Path]:
    """Trial folder name -> the trial.log of its last checkpoint (the one after the final evaluation)."""
    out = {}
    for log in sorted((workdir / "runs" / "sweeps" / name / "tune").glob("*/*/checkpoint_*/trial.log")):
        out[log.parent.parent.name] = log  # checkpoint_000014 sorts after checkpoint_000013
    return out


def breakdown(text: str) -> dict[str, float]:
    """One trial log -> seconds of: training, epoch_overhead, final_pgd, autoattack, total (wall)."""
    lines = [ln for ln in text.splitlines() if seconds(ln) is not None]
    start = next(seconds(ln) for ln in lines if " trial " in ln)
    epochs = [(seconds(ln), float(m[6])) for ln in lines if (m := EPOCH.match(ln))]
    end_train = epochs[-1][0]
    pgd = [seconds(ln) for ln in lines if re.search(r"\] pgd\d+: ", ln)]
    aa = [seconds(ln) for ln in lines if "] autoattack (" in ln]
    end_pgd = pgd[-1] if pgd else end_train
    end = aa[-1] if aa else end_pgd
    training = sum(s for _, s in epochs)
    return {"epochs": len(epochs), "training": training, "epoch_overhead": end_train - start - training,
            "final_pgd": end_pgd - end_train, "autoattack": end - end_pgd, "total": end - start}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default=".")
    ap.add_argument("--name", default="mnist5k-demo")
    ap.add_argument("--json", help="write the per-trial numbers and totals here")
    args = ap.parse_args(argv)
    logs = last_logs(Path(args.workdir), args.name)
    if not logs:
        print(f"no trial logs under {args.workdir}/runs/sweeps/{args.name}/tune", file=sys.stderr)
        return 2
    rows = {trial: breakdown(log.read_text()) for trial, log in logs.items()}
    keys = ("training", "epoch_overhead", "final_pgd", "autoattack", "total")
    totals = {k: sum(r[k] for r in rows.values()) for k in keys}
    print(f"{'trial':<44} " + " ".join(f"{k:>14}" for k in keys))
    for trial, r in rows.items():
        print(f"{trial[:44]:<44} " + " ".join(f"{r[k]:>14.0f}" for k in keys))
    print(f"{'all trials (core-seconds)':<44} " + " ".join(f"{totals[k]:>14.0f}" for k in keys))
    print("shares of the trials' time: " + ", ".join(f"{k} {100 * totals[k] / totals['total']:.0f}%"
                                                   for k in keys[:-1]))
    if args.json:
        Path(args.json).write_text(json.dumps({"trials": rows, "totals": totals}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

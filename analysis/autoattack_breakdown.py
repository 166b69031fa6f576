"""AutoAttack, attack by attack: the robust accuracy after APGD-CE, APGD-T, FAB-T and Square for every run that
ran it (the trainer records them as ``test/<ckpt>/autoattack/<attack>``).

Each attack of the standard version only runs on the images still robust after the ones before it, so the chain
never rises. What researchers look for is where it falls: a drop at Square, a black-box attack, after the three
gradient-based ones means the gradients hid adversarial examples that exist (gradient masking), and the
white-box numbers overstate robustness.

    python -m analysis.autoattack_breakdown --experiment NAME [--checkpoint best|last] [--format md|csv] [--out FILE]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from .collect import SourceError, add_source_args, load_runs
from .markdown import md_align, md_row
from .protocol import CHECKPOINTS

ATTACKS = ("apgd-ce", "apgd-t", "fab-t", "square")
GRADIENT_ATTACKS = ATTACKS[:3]


def breakdown(runs: pd.DataFrame, checkpoint: str = "best") -> pd.DataFrame:
    """One row per run with AutoAttack results at `checkpoint`: its table row, seed, the accuracy (%) after each
    attack, and `square_drop`: how many points Square took after the gradient attacks (> 0 hints at masking)."""
    cols = {a: f"metric.test/{checkpoint}/autoattack/{a}" for a in ATTACKS}
    if runs.empty or not set(cols.values()) <= set(runs.columns):
        return pd.DataFrame(columns=["run_name", "row", "seed", *ATTACKS, "square_drop"])
    have = runs.dropna(subset=list(cols.values()))
    out = pd.DataFrame({"run_name": have.get("run_name"), "row": have.get("meta.row"), "seed": have.get("meta.seed")})
    for a, c in cols.items():
        out[a] = have[c].astype(float)
    out["square_drop"] = out["fab-t"] - out["square"]
    return out.sort_values(["row", "seed", "run_name"], na_position="last").reset_index(drop=True)


def render(table: pd.DataFrame, fmt: str = "md") -> str:
    if fmt == "csv":
        return table.to_csv(index=False, float_format="%.2f")
    head = ["run", "row", "seed", "APGD-CE", "APGD-T", "FAB-T", "Square", "Square drop"]
    lines = [md_row(head), md_align("---" for _ in head)]
    for _, r in table.iterrows():
        flag = " (masking?)" if r["square_drop"] > 0 else ""
        lines.append(md_row([r["run_name"], r["row"], r["seed"], *(f"{r[a]:.2f}" for a in ATTACKS),
                             f"{r['square_drop']:.2f}{flag}"]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m analysis.autoattack_breakdown", description=__doc__.split("\n")[0])
    add_source_args(ap)
    ap.add_argument("--checkpoint", choices=CHECKPOINTS, default="best")
    ap.add_argument("--format", choices=("md", "csv"), default="md")
    ap.add_argument("--out", default=None, help="write here instead of printing")
    args = ap.parse_args(argv)
    try:
        runs = load_runs(args.experiment, args.ray_results, args.tracking_uri)
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = breakdown(runs, args.checkpoint)
    if table.empty:
        print(f"error: no run holds AutoAttack's per-attack results at checkpoint {args.checkpoint!r} "
              "(runs trained before they were recorded hold only the final number)", file=sys.stderr)
        return 2
    text = render(table, args.format)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    masked = table[table.square_drop > 0]
    if len(masked):
        print(f"{len(masked)} of {len(table)} run(s): Square found adversarial examples the gradient attacks missed "
              "(gradient masking?)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

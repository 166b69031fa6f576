"""Did each configuration train to convergence? Read from the per-epoch history of its runs.

    python -m analysis.convergence --experiment NAME [--stage S ...] [--tracking-uri URI] [--out FILE.md]

A run converges when (1) its final training loss is at most LOSS_RATIO (60%) of its epoch-1 training loss and
(2) its validation clean and PGD-10 accuracies each moved by at most STABLE_POINTS (2 points) between its last
two epochs. A configuration (a table row) converges when all its seeds do. One that does not is reported with
what failed, never left out; its curve is in the learning-curves figure. "not training" marks a configuration
whose training loss did not fall: final at least NOT_TRAINING_RATIO (95%) of epoch 1's in the mean over seeds.

The training loss is the method's whole objective (for SSAT-MBI, CE + lambda x KL terms) at the epoch's own
eps_max: with a schedule that raises eps_max, epoch 1's loss is measured at a small eps, so criterion (1) is
strict for scheduled rows. It is applied as written all the same.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from . import collect
from .markdown import md_align, md_row
from .run_labels import value

LOSS_RATIO = 0.6
STABLE_POINTS = 2.0
NOT_TRAINING_RATIO = 0.95
KEYS = ("train/loss", "val/clean", "val/pgd10")
COLUMNS = ["row", "seed", "epochs", "loss_first", "loss_final", "loss_ratio", "clean_final", "clean_move",
           "pgd10_final", "pgd10_move", "converged", "why"]


# ---- the runs and their short labels (this report's rows, the learning curves' legend) -------
def trial_runs(df_runs: pd.DataFrame, stages=None) -> pd.DataFrame:
    """The trial runs (no parent or teacher run), of `stages` if given."""
    kind = df_runs.get("meta.kind", pd.Series("trial", index=df_runs.index)).fillna("trial")
    runs = df_runs[kind == "trial"]
    if stages:
        runs = runs[runs["meta.stage"].isin(list(stages))]
    return runs


def short_label(run: dict, varying=()) -> str:
    """A configuration's short name: its label (``ssat.label``: the grid row, or what a search sampled, without the
    seed), else its row (runs before the label tag); a search run of before then by its ``sampled.<key>`` values
    (a text value as itself, others ``key=value``, then ``#`` and the config hash's first 4 characters); else the
    `varying` params, else the config hash."""
    for key in ("meta.label", "meta.row"):
        if value(run, key) is not None and str(value(run, key)):
            return str(value(run, key))
    sampled = [(k[len("param.sampled."):], value(run, k)) for k in sorted(run) if k.startswith("param.sampled.")]
    if any(v is not None for _, v in sampled):
        digest = value(run, "meta.config_hash")
        return " ".join([v if isinstance(v, str) else f"{k.rsplit('.', 1)[-1]}={v:.2g}" if isinstance(v, float)
                         else f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sampled if v is not None]
                        + ([f"#{str(digest)[:4]}"] if digest else []))
    if varying:
        return " ".join(f"{c[6:]}={value(run, c)}" for c in varying)
    return str(value(run, "meta.config_hash") or run["run_id"])


def config_labels(runs: pd.DataFrame) -> pd.Series:
    """The short label of each run's configuration (`short_label`; the params that differ between the runs shown
    where a run has neither label, row nor sampled values)."""
    params = [c for c in runs.columns if c.startswith("param.") and c != "param.seed"]
    varying = [c for c in params if runs[c].astype(str).nunique() > 1]
    return pd.Series([short_label(r, varying) for r in runs.to_dict("records")], index=runs.index)


def run_convergence(hist: pd.DataFrame) -> dict:
    """One run's history (key, step, value rows) -> its numbers, whether it converged and why not.

    loss_ratio = final / epoch-1 training loss; *_move = |last - second-to-last epoch| in points."""
    series = {k: hist[hist["key"] == k].sort_values("step")["value"].tolist() for k in KEYS}
    missing = [k for k in KEYS if len(series[k]) < 2]
    if missing:
        return {"epochs": max(map(len, series.values())), "converged": False,
                "why": f"fewer than 2 epochs of {', '.join(missing)}"}
    loss, clean, pgd = series["train/loss"], series["val/clean"], series["val/pgd10"]
    out = {"epochs": len(loss), "loss_first": loss[0], "loss_final": loss[-1], "loss_ratio": loss[-1] / loss[0],
           "clean_final": clean[-1], "clean_move": abs(clean[-1] - clean[-2]),
           "pgd10_final": pgd[-1], "pgd10_move": abs(pgd[-1] - pgd[-2])}
    why = []
    if not out["loss_ratio"] <= LOSS_RATIO:
        why.append(f"final training loss {out['loss_ratio']:.1%} of epoch 1's (> {LOSS_RATIO:.0%})")
    for name, key in (("clean", "clean_move"), ("PGD-10", "pgd10_move")):
        if not out[key] <= STABLE_POINTS:
            why.append(f"validation {name} moved {out[key]:.1f} points in the last epoch (> {STABLE_POINTS:g})")
    return {**out, "converged": not why, "why": "; ".join(why)}


def convergence_frame(df_runs: pd.DataFrame, df_hist: pd.DataFrame, stages=None) -> pd.DataFrame:
    """One line per trial run (COLUMNS), rows in the order of the runs frame, seeds ascending."""
    runs = trial_runs(df_runs, stages)
    labels = config_labels(runs)
    lines = []
    for (_, run), label in zip(runs.iterrows(), labels):
        hist = df_hist[df_hist["run_id"] == run["run_id"]]
        lines.append({"row": label, "seed": run.get("param.seed"), **run_convergence(hist)})
    frame = pd.DataFrame(lines, columns=COLUMNS)
    order = {label: i for i, label in enumerate(dict.fromkeys(labels))}
    return frame.sort_values(["row", "seed"], key=lambda s: s.map(order) if s.name == "row" else s,
                             kind="stable").reset_index(drop=True)


def verdicts(frame: pd.DataFrame) -> pd.DataFrame:
    """Per row: 'converged' (every seed), 'not training' (mean loss ratio over seeds >= NOT_TRAINING_RATIO) or
    'not converged', with the number of seeds and the reasons of the seeds that fail."""
    out = []
    for row, g in frame.groupby("row", sort=False):
        if g["converged"].all():
            verdict = "converged"
        elif g["loss_ratio"].mean() >= NOT_TRAINING_RATIO:
            verdict = "not training"
        else:
            verdict = "not converged"
        why = "; ".join(f"seed {s}: {w}" for s, w in zip(g["seed"], g["why"]) if w)
        out.append({"row": row, "verdict": verdict, "seeds": len(g), "why": why})
    return pd.DataFrame(out, columns=["row", "verdict", "seeds", "why"])


def to_markdown(frame: pd.DataFrame) -> str:
    """The verdict per row, then every run's numbers."""
    v = verdicts(frame)
    lines = [f"**Convergence** (a run converges when its final training loss is <= {LOSS_RATIO:.0%} of epoch "
             f"1's and its validation clean and PGD-10 accuracies moved <= {STABLE_POINTS:g} points over the "
             f"last two epochs; 'not training': the final loss is >= {NOT_TRAINING_RATIO:.0%} of epoch 1's)",
             "", md_row(["row", "verdict", "seeds", "what failed"]), md_align([":-", ":-", "-:", ":-"])]
    lines += [md_row([r.row, r.verdict, r.seeds, r.why or "-"]) for r in v.itertuples()]
    lines += ["", md_row(["row", "seed", "epochs", "loss epoch 1", "loss final", "ratio", "val clean", "moved",
                          "val PGD-10", "moved"]), md_align([":-"] + ["-:"] * 9)]
    for r in frame.itertuples():
        nums = [r.loss_first, r.loss_final, r.loss_ratio, r.clean_final, r.clean_move, r.pgd10_final,
                r.pgd10_move]
        text = ["-" if pd.isna(x) else f"{x:.3f}" if i < 3 else f"{x:.1f}" for i, x in enumerate(nums)]
        lines.append(md_row([r.row, r.seed, r.epochs, *text]))
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m analysis.convergence", description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", action="append", required=True, help="MLflow experiment (repeatable)")
    ap.add_argument("--stage", action="append", help="only trial runs of these stages (default: all)")
    ap.add_argument("--tracking-uri", default=None,
                    help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else MLflow's default ./mlflow.db; a "
                         "local store that does not exist is an error, never created)")
    ap.add_argument("--out", help="write the Markdown here (else print it)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        runs = collect.load_mlflow_runs(args.experiment, args.tracking_uri)
        text = to_markdown(convergence_frame(runs, collect.load_mlflow_history(runs, args.tracking_uri),
                                             args.stage))
    except (collect.SourceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

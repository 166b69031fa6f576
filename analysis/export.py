"""Export a sweep's runs for use outside this package.

    python -m analysis.export --experiment NAME [--format csv|parquet] [--out DIR]
        [--ray-results DIR ...] [--tracking-uri URI]

Writes two files into DIR (default: the current folder):
``<name>.runs.<ext>``     one row per trial (and teacher): params (``param.*``), tags (``meta.*``), the final
                          metrics by checkpoint (``metric.test/<ckpt>/<attack>``, ``metric.time/*`` and the
                          last value of every per-epoch metric) and the protocol records (``protocol.*``, JSON);
``<name>.history.<ext>``  the per-epoch histories, long: run_id, key, step, value.
Numbers are stored as numbers (parameters are typed by `analysis.collect.typed`); parquet keeps the
dtypes, csv writes plain numbers that ``pandas.read_csv`` reads back as numbers.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from . import collect

FORMATS = ("csv", "parquet")


def trial_rows(df_runs: pd.DataFrame) -> pd.DataFrame:
    """The runs without the sweep's parent run (it holds the spec, not results)."""
    if "meta.kind" not in df_runs:
        return df_runs
    return df_runs[df_runs["meta.kind"].fillna("trial") != "sweep"].reset_index(drop=True)


def _parquet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Object columns holding mixed Python types become text, which parquet can store."""
    out = df.copy()
    for col in out.columns[out.dtypes == object]:  # noqa: E721 (pandas compares each dtype, not types)
        kinds = {type(v) for v in out[col].dropna()}
        if len(kinds) > 1:
            out[col] = out[col].map(lambda v: None if v is None or v is pd.NA else str(v))
    return out


def write_frame(df: pd.DataFrame, path: Path, fmt: str) -> Path:
    if fmt == "parquet":
        _parquet_safe(df).to_parquet(path, index=False)
    else:
        df.to_csv(path, index=False)
    return path


def export(df_runs: pd.DataFrame, df_hist: pd.DataFrame, name: str, out_dir=".", fmt: str = "csv") -> dict[str, Path]:
    """Write the runs and history tables; returns their paths under 'runs' and 'history'."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = trial_rows(df_runs)
    hist = df_hist[df_hist["run_id"].isin(runs["run_id"])].reset_index(drop=True)
    return {"runs": write_frame(runs, out / f"{name}.runs.{fmt}", fmt),
            "history": write_frame(hist, out / f"{name}.history.{fmt}", fmt)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.export", description=__doc__.split("\n\n")[0])
    collect.add_source_args(p)
    p.add_argument("--format", default="csv", choices=FORMATS, help="default csv")
    p.add_argument("--out", default=".", help="folder for the two files (default: current folder)")
    args = p.parse_args(argv)
    try:
        runs = collect.load_runs(args.experiment, args.ray_results, args.tracking_uri)
        hist = collect.load_history(runs, args.ray_results, args.tracking_uri)
    except (ValueError, LookupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    name = "+".join(args.experiment + [Path(d).name for d in args.ray_results])
    for path in export(runs, hist, name, args.out, args.format).values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

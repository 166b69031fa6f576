"""The paper's tables regenerated from tracked runs, with the runs behind every cell written beside them.

    python -m analysis.tables --experiment NAME [--experiment OTHER ...] --table T
        [--format md|latex|csv] [--out FILE] [--compare-paper] [--allow-subset] [--checkpoint best|last]
        [--any-tag] [--stage S ...] [--metric M] [--mode max|min] [--ray-results DIR ...] [--tracking-uri URI]

T is one of main, ablation, schedules, awr-ablation, supervised, beta-sensitivity, rho-sensitivity,
training-time (`analysis.table_specs`), or search: a search sweep's confirmed configurations, best first by the
confirm stage's mean of ``--metric`` (default val/pgd10, ``--mode`` max). With ``--out FILE`` the provenance
(options, protocol, run ids, seeds and values of every cell, every result left out and why) goes to ``FILE``'s
stem + ``.provenance.json``.

From Python: ``render_table(df_runs, "ablation", "md")``, or ``write_table(df_runs, "ablation", folder)``
for the md, LaTeX, csv and provenance files at once.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from . import collect
from .cells import Options, TableError, TableResult, build
from .protocol import CHECKPOINTS
from .render import FORMATS, render
from .table_specs import SPECS, get_spec

TABLES = tuple(SPECS)
__all__ = ["TABLES", "TableError", "build_table", "render_table", "write_table", "provenance", "main"]
_SUFFIX = {"md": ".md", "latex": ".tex", "csv": ".csv"}


def _options(**options) -> Options:
    try:
        opts = Options(**options)
    except TypeError as e:
        raise TypeError(f"{e}; options are {', '.join(Options.__dataclass_fields__)}") from None
    return opts if opts.stages is None else Options(**{**asdict(opts), "stages": tuple(opts.stages)})


def build_table(df_runs: pd.DataFrame, table: str, **options) -> TableResult:
    """Cells, marks and notes of `table` from a runs frame (`analysis.collect`); see `cells.Options`."""
    opts = _options(**options)
    return build(df_runs, get_spec(table, opts.metric, opts.mode), opts)


def render_table(df_runs: pd.DataFrame, table: str, fmt: str = "md", **options) -> str:
    """`table` as md, latex or csv text."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    return render(build_table(df_runs, table, **options), fmt)


# ---- provenance ------------------------------------------------------------------------------
def _plain(x):
    """JSON-safe: NaN/NA -> null, numpy scalars -> Python, tuples -> lists."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return None
    return x


def provenance(result: TableResult, command: list[str] | None = None) -> dict:
    """Everything needed to audit or regenerate the table: options, protocol, and per cell its runs."""
    keep = ["group", "row", "column", "mean", "std", "n", "expected_seeds", "run_ids", "seeds", "values",
            "experiments", "config_hashes", "bold", "underline", "missing_seeds", "p_value",
            "not_significant", "subset"]
    cells = result.cells[keep].to_dict("records")
    run_ids = sorted({r for c in cells for r in c["run_ids"]})
    return _plain({
        "table": result.spec.name, "paper": result.spec.paper, "command": command,
        "options": asdict(result.options), "protocol": result.options.protocol().as_dict(),
        "experiments": sorted({e for c in cells for e in c["experiments"]}), "run_ids": run_ids,
        "cells": cells, "excluded": result.excluded.to_dict("records"), "notes": result.notes,
    })


def _write_provenance(result: TableResult, path: Path, command: list[str] | None) -> Path:
    path.write_text(json.dumps(provenance(result, command), indent=1, allow_nan=False) + "\n")
    return path


def write_table(df_runs: pd.DataFrame, table: str, out_dir, formats=("md", "latex", "csv"),
                command: list[str] | None = None, **options) -> dict[str, Path]:
    """Write ``<table>.md/.tex/.csv`` and ``<table>.provenance.json`` into `out_dir`; their paths by format."""
    result = build_table(df_runs, table, **options)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for fmt in formats:
        paths[fmt] = out / f"{table}{_SUFFIX[fmt]}"
        paths[fmt].write_text(render(result, fmt))
    paths["provenance"] = _write_provenance(result, out / f"{table}.provenance.json", command)
    return paths


# ---- CLI -------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m analysis.tables", description=__doc__.split("\n\n")[0])
    collect.add_source_args(p)
    p.add_argument("--table", required=True, choices=TABLES)
    p.add_argument("--format", default="md", choices=FORMATS, help="default md")
    p.add_argument("--out", help="write the table here and its provenance beside it (default: stdout)")
    p.add_argument("--compare-paper", action="store_true", help="the paper's value beside each cell")
    p.add_argument("--allow-subset", action="store_true",
                   help="admit results on a test subset (e.g. the demo's first100 AutoAttack), marked §")
    p.add_argument("--checkpoint", default="best", choices=CHECKPOINTS)
    p.add_argument("--any-tag", action="store_true",
                   help="read every run whose params fit the table, not only runs tagged ssat.table=T")
    p.add_argument("--stage", action="append", default=None,
                   help="only these stages (repeatable; default: every stage but search)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the Welch mark")
    p.add_argument("--setup", default="", help="a sentence added to the caption (what a small run chose)")
    p.add_argument("--metric", help="the search table: the metric it ranks by, the sweep spec's metric "
                                    "(default val/pgd10)")
    p.add_argument("--mode", choices=("max", "min"), help="the search table: which value of --metric is best "
                                                          "(default max)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        runs = collect.load_runs(args.experiment, args.ray_results, args.tracking_uri)
        result = build_table(runs, args.table, checkpoint=args.checkpoint, allow_subset=args.allow_subset,
                             stages=args.stage, any_tag=args.any_tag, alpha=args.alpha,
                             compare_paper=args.compare_paper, setup=args.setup, metric=args.metric,
                             mode=args.mode)
    except (ValueError, LookupError) as e:  # TableError, SourceError
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = render(result, args.format)
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    prov = _write_provenance(result, out.with_name(out.stem + ".provenance.json"),
                             ["python", "-m", "analysis.tables", *(argv if argv is not None else sys.argv[1:])])
    print(f"wrote {out} and {prov}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

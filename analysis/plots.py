"""Figures from tracked runs, as PNG files of a fixed size.

    python -m analysis.plots --experiment NAME --figure F [--out FILE.png]
        [--allow-subset] [--any-tag] [--stage S ...] [--ray-results DIR ...] [--tracking-uri URI]

F is a key of `FIGURES`, the one registry of the figures (name, drawing function, size, what it needs);
``--help`` lists them with what each shows.

Figures are drawn with the object API of matplotlib (no pyplot, no global backend), so importing this
module changes nothing for its caller. `build_figure` returns the figure for inspection.

Every figure states its data under it (`Figure.get_supxlabel()`): the experiment(s), the seeds and the
protocol of the numbers drawn. Bars start at 0; a cell with one seed has no error bar; a cell without runs
is written "n/a" where its bar would be. Legends of figures whose data fills the panels (curves, alpha) sit above
them, inside the figure, never over a curve; configurations go by their short labels (convergence.short_label).
"""
from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from . import collect, protocol
from .cells import TableResult
from .convergence import trial_runs
from .paper import group_title
from .run_labels import value
from .curves import ALPHA_SIZE, CURVES_SIZE, alpha_figure, curves_figure
from .figure_text import DPI, _run_seeds, _state, _val_protocol, data_statement, eps_text
from .tables import build_table

def _figure(name: str) -> Figure:
    return Figure(figsize=FIGURES[name].size, dpi=DPI, layout="constrained")


def _table_statement(df_runs: pd.DataFrame, result: TableResult, cells: pd.DataFrame, unit: str) -> str:
    """Experiments, seeds and the protocol of the drawn cells of a table; test subsets named with their columns."""
    drawn = cells[cells["n"] > 0]
    opts = result.options
    labels = {c.key: c.label for c in result.columns}
    eps = sorted({protocol.dataset_eps(g.split("/")[0]) for g in drawn["group"]})
    records = df_runs.set_index("run_id")
    subsets = set()
    for line in drawn[drawn["subset"]].itertuples():
        tag = f"protocol.{opts.checkpoint}/{line.column}"
        for rid in line.run_ids:
            rec = protocol.parse_record(records.at[rid, tag]) if tag in records else None
            if protocol.is_subset(rec):
                subsets.add(f"{labels[line.column]} on {rec.get('subset')}")
    proto = opts.protocol()
    has_pgd = any(k.startswith("pgd") for k in labels)
    pgd = f", PGD step eps*{proto.step_ratio:g}, {proto.restarts} restart" if has_pgd else ""
    aa = f", AutoAttack {proto.autoattack_version}" if "autoattack" in labels else ""
    text = (f"protocol: test set, checkpoint {proto.checkpoint}, {proto.precision}, {', '.join(labels.values())}, "
            f"{proto.norm} eps {', '.join(map(eps_text, eps))}{pgd}{aa}; "
            + (f"test subsets: {', '.join(sorted(subsets))}" if subsets else "full test set"))
    return data_statement([e for es in drawn["experiments"] for e in es], [s for ss in drawn["seeds"] for s in ss],
                          list(drawn["n"]), unit, text)


# ---- Figs. 4 and 5 ---------------------------------------------------------------------------
def _sweep(df_runs: pd.DataFrame, figure: str, table: str, title: str, xlabel: str, **options) -> Figure:
    """One panel per metric; one error-bar series per column group of the sensitivity table."""
    result = build_table(df_runs, table, **options)
    fig = _figure(figure)
    axes = fig.subplots(1, len(result.columns), squeeze=False)[0]
    cells = result.cells[result.cells["n"] > 0].copy()
    cells["x"] = cells["row"].str.split("=", n=1).str[1].astype(float)
    for ax, col in zip(axes, result.columns):
        for group in result.groups:
            part = cells[(cells["group"] == group) & (cells["column"] == col.key)].sort_values("x")
            # error bars only where two or more seeds give a std
            ax.errorbar(part["x"], part["mean"], yerr=part["std"], errorevery=(part["n"] >= 2).to_numpy(),
                        marker="o", capsize=3, label=group)
        ax.set(title=col.label, xlabel=xlabel, ylabel="accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(title)
    _state(fig, _table_statement(df_runs, result, cells, "point"))
    return fig


def beta_figure(df_runs: pd.DataFrame, **options) -> Figure:
    """Fig. 4: metrics against beta."""
    return _sweep(df_runs, "beta", "beta-sensitivity", "SSAT-MBI with varying beta (Fig. 4)", "beta", **options)


def rho_figure(df_runs: pd.DataFrame, **options) -> Figure:
    """Fig. 5: metrics against the initial rho, four settings."""
    return _sweep(df_runs, "rho", "rho-sensitivity", "SSAT-MBI with varying rho (Fig. 5)", "initial rho",
                  **options)


# ---- Pareto front ----------------------------------------------------------------------------
def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """True for points no other point beats on both x and y (both maximised)."""
    order = np.lexsort((-y, -x))
    mask = np.zeros(len(x), dtype=bool)
    best_y = -np.inf
    for i in order:
        if y[i] > best_y:
            mask[i], best_y = True, y[i]
    return mask


def pareto_figure(df_runs: pd.DataFrame, x: str = "val/clean", y: str = "val/pgd10",
                  stages: tuple[str, ...] | None = None, **_) -> Figure:
    """Clean versus robust accuracy of every trial of a search, the non-dominated ones joined."""
    runs = trial_runs(df_runs, stages)
    cols = [f"metric.{x}", f"metric.{y}"]
    missing = [c for c in cols if c not in runs]
    if missing:
        raise ValueError(f"pareto: no run has {', '.join(c[7:] for c in missing)}")
    drawn = runs.dropna(subset=cols)
    pts = drawn[cols].to_numpy(dtype=float)
    if not len(pts):
        raise ValueError(f"pareto: no trial has both {x} and {y}")
    on_front = pareto_mask(pts[:, 0], pts[:, 1])
    order = np.argsort(pts[on_front, 0], kind="stable")
    front, names = pts[on_front][order], [point_label(r) for r in drawn[on_front].to_dict("records")]
    fig = _figure("pareto")
    ax = fig.subplots()
    ax.scatter(pts[:, 0], pts[:, 1], s=18, alpha=0.6, label=f"trials ({len(pts)})")
    ax.plot(front[:, 0], front[:, 1], "-o", color="C3", label=f"Pareto front ({len(front)})")
    mid = (pts[:, 0].min() + pts[:, 0].max()) / 2
    for (px, py), name in zip(front, [names[i] for i in order]):  # each point of the front says which row it is
        right = px <= mid  # the label on the side with room: left of a point in the right half
        ax.annotate(name, (px, py), xytext=(4 if right else -4, 4), textcoords="offset points", fontsize="x-small",
                    color="C3", ha="left" if right else "right", va="bottom")
    ax.set(xlabel=f"{x} (%)", ylabel=f"{y} (%)", title="Clean versus robust accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _state(fig, data_statement(drawn["experiment"], _run_seeds(drawn), [1] * len(drawn), "point",
                               _val_protocol(drawn, (x, y)) + " (last reported epoch)"))
    return fig


def point_label(run: dict) -> str:
    """What a point of the front is: its row (``ssat.row``), else its label (``ssat.label``: what a search
    sampled), else the values an older search logged (``sampled.<dotted.key>``, by their last name, 3 significant
    digits), else the run's name."""
    row = value(run, "meta.row") or value(run, "meta.label")
    if row:
        return textwrap.fill(str(row), 28)
    sampled = [(k[len("param.sampled."):].rsplit(".", 1)[-1], value(run, k)) for k in sorted(run)
               if k.startswith("param.sampled.")]
    text = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in sampled if v is not None)
    return textwrap.fill(text, 28) if text else str(value(run, "run_name") or run["run_id"])


# ---- learning curves and alpha ---------------------------------------------------------------
def _ablation_colour(row: str) -> str:
    """Light blue without interpolation, dark with it, grey for a row of neither (the standard-training baseline)."""
    return "#9ecae1" if row.endswith("|no-int") else "#3182bd" if row.endswith("|int") else "0.6"


def ablation_figure(df_runs: pd.DataFrame, table: str = "ablation", **options) -> Figure:
    """Table 2 (or 4) as bars from 0: one panel per metric, one bar per row of the first column group, labelled
    with the table's mean; error bars = std over seeds (ddof 1) where a cell has two or more; "n/a" where a
    row has no runs."""
    result = build_table(df_runs, table, **options)
    group = result.groups[0]
    fig = _figure("ablation")
    axes = fig.subplots(1, len(result.columns), squeeze=False)[0]
    rows = [r for block in result.blocks for r in block]
    cells = result.cells[result.cells["group"] == group]
    x = np.arange(len(rows))
    for ax, col in zip(axes, result.columns):
        part = cells[cells["column"] == col.key].set_index("row").reindex(rows)
        n = part["n"].fillna(0).to_numpy()
        has = n > 0
        bars = ax.bar(x[has], part["mean"][has], yerr=part["std"][has], capsize=3,
                      error_kw={"errorevery": n[has] >= 2},
                      color=[_ablation_colour(r) for r in np.array(rows)[has]])
        ax.bar_label(bars, fmt=f"%.{col.decimals}f", label_type="center", fontsize="x-small")
        for xi in x[~has]:
            ax.text(xi, 0.01, "n/a", transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                    fontsize="small", color="0.4")
        ax.set_xticks(x, rows, rotation=30, ha="right", fontsize="small")
        ax.set(title=col.label, ylabel="accuracy (%)")
        # from 0: a cut axis would magnify the differences between the bars
        ax.set_ylim(0, 100 if col.kind == "acc" else None)
        ax.grid(alpha=0.3, axis="y")
    others = f"; not drawn: {', '.join(map(group_title, result.groups[1:]))}" if len(result.groups) > 1 else ""
    fig.suptitle(f"{result.spec.paper}: {result.spec.caption} ({group_title(group)}{others})", fontsize="medium")
    _state(fig, _table_statement(df_runs, result, cells, "bar"))
    return fig


# ---- the registry ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FigureKind:
    """One figure: how it is drawn, its size in inches, and what it needs besides the runs."""

    draw: Callable[..., Figure]     # (df_runs, [df_hist,] **options) -> Figure
    size: tuple[float, float]
    about: str                      # one line for --help
    history: bool = False           # drawn from the per-epoch history: draw(df_runs, df_hist, ...)
    table_options: bool = False     # built from a table's cells: takes allow_subset / any_tag / stages


FIGURES: dict[str, FigureKind] = {
    "beta": FigureKind(beta_figure, (12, 4), "Fig. 4: clean, PGD-20 and AutoAttack accuracy against beta, error "
                       "bars = std over seeds (the cells of the beta-sensitivity table)", table_options=True),
    "rho": FigureKind(rho_figure, (12, 4), "Fig. 5: the same against the initial rho, one series per setting "
                      "(beta 0.4 / 1 x Const / Curious)", table_options=True),
    "pareto": FigureKind(pareto_figure, (6, 5), "the clean-versus-robust front of a search: every trial "
                         "(validation metrics, never the test set) and the non-dominated ones joined, each labelled "
                         "with its row (a search trial: what it sampled)"),
    "curves": FigureKind(curves_figure, CURVES_SIZE, "learning curves, mean +- std over seeds per configuration, "
                         "with the training loss, eps_max, rho and lr under them (a panel flat in every "
                         "configuration is left out and its value said under the figure)", history=True),
    "alpha": FigureKind(alpha_figure, ALPHA_SIZE, "alpha_hat per epoch: the shares at 2^-K, between and at 1, "
                        "and its mean", history=True),
    "ablation": FigureKind(ablation_figure, (12, 4), "Table 2 as bars, one panel per metric, error bars = std "
                           "over seeds (from Python, table='awr-ablation' draws Table 4)", table_options=True),
}


def figure_kind(figure: str) -> FigureKind:
    """The registry entry of a figure; an unknown name lists the valid ones."""
    try:
        return FIGURES[figure]
    except KeyError:
        raise ValueError(f"unknown figure {figure!r}; valid figures: {', '.join(FIGURES)}") from None


# ---- entry points ----------------------------------------------------------------------------
def build_figure(df_runs: pd.DataFrame, df_hist: pd.DataFrame | None, figure: str, **options) -> Figure:
    """The matplotlib Figure of `figure` (a key of FIGURES); `options` go to the table or the selection."""
    kind = figure_kind(figure)
    if not kind.history:
        return kind.draw(df_runs, **options)
    if df_hist is None:
        raise ValueError(f"figure {figure!r} needs the per-epoch history (df_hist)")
    return kind.draw(df_runs, df_hist, **options)


def plot_figure(df_runs: pd.DataFrame, df_hist: pd.DataFrame | None, figure: str, out_png, **options) -> Path:
    """Draw `figure` to the PNG `out_png` (FIGURES[figure].size inches at DPI) and return its path."""
    fig = build_figure(df_runs, df_hist, figure, **options)
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=DPI)
    return out


def main(argv: list[str] | None = None) -> int:
    from_table = ", ".join(name for name, kind in FIGURES.items() if kind.table_options)
    p = argparse.ArgumentParser(prog="python -m analysis.plots", description=__doc__.split("\n\n")[0],
                                epilog="figures:\n" + "\n".join(
                                    textwrap.fill(kind.about, 100, initial_indent=f"  {name:9} ",
                                                  subsequent_indent=" " * 12) for name, kind in FIGURES.items()),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    collect.add_source_args(p)
    p.add_argument("--figure", required=True, choices=FIGURES)
    p.add_argument("--out", help="PNG path (default: <figure>.png)")
    p.add_argument("--allow-subset", action="store_true", help=f"{from_table}: admit test-subset results")
    p.add_argument("--any-tag", action="store_true", help=f"{from_table}: every run whose params fit the table")
    p.add_argument("--stage", action="append", default=None, help="only these stages (repeatable)")
    args = p.parse_args(argv)
    kind = FIGURES[args.figure]
    try:
        runs = collect.load_runs(args.experiment, args.ray_results, args.tracking_uri)
        hist = collect.load_history(runs, args.ray_results, args.tracking_uri) if kind.history else None
        opts = ({"allow_subset": args.allow_subset, "any_tag": args.any_tag, "stages": args.stage}
                if kind.table_options else {"stages": args.stage})
        out = plot_figure(runs, hist, args.figure, args.out or f"{args.figure}.png", **opts)
    except (ValueError, LookupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

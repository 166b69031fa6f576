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
from matplotlib.ticker import MaxNLocator

from . import collect, protocol
from .cells import TableResult
from .convergence import config_labels, trial_runs
from .paper import group_title
from .run_labels import param, value
from .tables import build_table

DPI = 100
MAX_CONFIGS = 8


def _figure(name: str) -> Figure:
    return Figure(figsize=FIGURES[name].size, dpi=DPI, layout="constrained")


# ---- what a figure shows, said on it ---------------------------------------------------------
def eps_text(eps: float) -> str:
    """8/255 as '8/255', anything else as '%g' (0.3)."""
    k = eps * 255
    return f"{round(k)}/255" if 0 < eps < 1 and abs(k - round(k)) < 1e-6 else f"{eps:g}"


def data_statement(experiments, seeds, counts, unit: str, protocol_text: str) -> str:
    """'experiment e; seeds 0, 1 (2 per bar); <protocol>': which runs a figure draws and how they were scored.
    `counts` are the numbers of seeds behind each drawn `unit` (bar, point, curve)."""
    exps = sorted({str(e) for e in experiments if e is not None and not pd.isna(e)})
    known = sorted({int(s) for s in seeds if s is not None and not pd.isna(s)})
    lo, hi = min(counts), max(counts)
    return (f"{'experiments' if len(exps) > 1 else 'experiment'} {', '.join(exps) or 'unknown'}; "
            f"seeds {', '.join(map(str, known)) or 'unknown'} ({lo if lo == hi else f'{lo}-{hi}'} per {unit}); "
            f"{protocol_text}")


def _state(fig: Figure, text: str) -> None:
    """The data statement under the figure (kept inside it by the constrained layout)."""
    fig.supxlabel(textwrap.fill(text, int(fig.get_figwidth() * 14)), fontsize="small")


def _run_seeds(runs: pd.DataFrame) -> list:
    seed = runs.get("meta.seed", pd.Series(None, index=runs.index, dtype=object))
    return list(seed.fillna(runs["param.seed"]) if "param.seed" in runs else seed)


def _val_protocol(runs: pd.DataFrame, keys) -> str:
    """Validation metrics of trial runs: the held-out split; val/pgd10 is PGD-10 at the run's eps."""
    eps = sorted(set(runs.get("param.attack.eps", pd.Series(dtype=float)).dropna().astype(float)))
    pgd = f" (PGD-10 at eps {', '.join(map(eps_text, eps)) or 'of the run'})" if "val/pgd10" in keys else ""
    return f"protocol: validation split, {', '.join(keys)}{pgd}, trial runs"


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
def _seed_stats(hist: pd.DataFrame, run_ids, key: str) -> pd.DataFrame:
    """Per epoch: mean and std (ddof=1) over the runs of one configuration."""
    h = hist[(hist["key"] == key) & hist["run_id"].isin(run_ids)]
    wide = h.pivot_table(index="step", columns="run_id", values="value", aggfunc="last")
    return pd.DataFrame({"mean": wide.mean(axis=1), "std": wide.std(axis=1, ddof=1).fillna(0.0)})


def _configs(df_runs: pd.DataFrame, df_hist: pd.DataFrame, key: str, stages=None) -> dict[str, list]:
    """label -> run ids, for trial runs that have history of `key` (at most MAX_CONFIGS, most seeds first)."""
    runs = trial_runs(df_runs, stages)
    runs = runs[runs["run_id"].isin(df_hist.loc[df_hist["key"] == key, "run_id"])]
    if runs.empty:
        raise ValueError(f"no trial run has a per-epoch history of {key}")
    groups = runs.groupby(config_labels(runs))["run_id"].apply(list)
    groups = groups.loc[sorted(groups.index, key=lambda g: (-len(groups[g]), g))]
    return dict(list(groups.items())[:MAX_CONFIGS])


def _history_statement(df_runs: pd.DataFrame, configs: dict[str, list], what) -> str:
    """The statement of a per-configuration figure; `what(drawn runs)` says what was measured."""
    drawn = df_runs[df_runs["run_id"].isin([r for ids in configs.values() for r in ids])]
    return data_statement(drawn["experiment"], _run_seeds(drawn), [len(v) for v in configs.values()],
                          "configuration", what(drawn))


def swa_start(runs: pd.DataFrame) -> int | None:
    """The epoch after which all these runs validate averaged weights (param optim.swa_start), if they share one."""
    starts = {str(param(r, "optim.swa_start")) for r in runs.to_dict("records")}
    start = starts.pop() if len(starts) == 1 else None
    return int(start) if start is not None and start.isdigit() else None


LOWER_PANELS = ("train/loss", "sched/eps_max", "sched/rho", "sched/lr")  # under the accuracies, in this order


def figure_legend(fig: Figure, handles: list):
    """The legend above the panels, inside the figure (the constrained layout makes room), never over a curve: as
    many columns as its longest label allows (x-small text: 15 characters an inch), a longer label wrapped."""
    width = int(fig.get_figwidth() * 15) - 6
    for h in handles:
        h.set_label(textwrap.fill(h.get_label(), width))
    ncols = min(len(handles), max(1, width // (6 + max(len(x) for h in handles for x in h.get_label().split("\n")))))
    return fig.legend(handles=handles, loc="outside upper center", ncols=ncols, fontsize="x-small")


def constant_panels(df_hist: pd.DataFrame, configs: dict[str, list], keys) -> tuple[list[str], list[str]]:
    """(keys to draw, what the others were): a panel whose every configuration's series is one value at every epoch
    (the demo's rho) shows a flat line and nothing else: it is left out, its value said under the figure. So is a
    key no configuration logged."""
    drawn, notes = [], []
    for key in keys:
        series = [m for m in (_seed_stats(df_hist, ids, key)["mean"].dropna() for ids in configs.values()) if len(m)]
        if not series:
            notes.append(f"{key} (not logged)")
        elif all(np.isclose(m.min(), m.max(), rtol=1e-9, atol=1e-12) for m in series):
            values = sorted({float(f"{m.iloc[0]:.6g}") for m in series})
            notes.append(f"{key} = {' or '.join(f'{v:g}' for v in values)} at every epoch"
                         + (" (per configuration)" if len(values) > 1 else ""))
        else:
            drawn.append(key)
    return drawn, notes


def curves_figure(df_runs: pd.DataFrame, df_hist: pd.DataFrame, stages=None, **_) -> Figure:
    """val/clean and val/pgd10 per epoch (mean +- std over seeds), with a dotted line where validation switches
    to averaged weights (SWA); the training loss (the method's objective), eps_max, rho and lr below: a
    configuration that does not train shows it here. A lower panel that would be flat in every configuration is
    left out, its value said under the figure; the legend is above the panels, epochs are whole numbers."""
    from matplotlib.lines import Line2D

    configs = _configs(df_runs, df_hist, "val/pgd10", stages)
    starts = {swa_start(df_runs[df_runs["run_id"].isin(ids)]) for ids in configs.values()} - {None}
    lower, constant = constant_panels(df_hist, configs, LOWER_PANELS)
    fig = _figure("curves")
    ratios = [3] + [1.5 if k == "train/loss" else 1 for k in lower]
    axes = fig.subplots(len(ratios), 1, sharex=True, squeeze=False, gridspec_kw={"height_ratios": ratios})[:, 0]
    for i, (label, ids) in enumerate(configs.items()):
        for key, style in (("val/clean", "--"), ("val/pgd10", "-")):
            s = _seed_stats(df_hist, ids, key)
            axes[0].plot(s.index, s["mean"], style, color=f"C{i}", label=f"{label} {key}")
            if len(ids) >= 2:  # one seed has no spread to show
                axes[0].fill_between(s.index, s["mean"] - s["std"], s["mean"] + s["std"], color=f"C{i}",
                                     alpha=0.15)
        for ax, key in zip(axes[1:], lower):
            s = _seed_stats(df_hist, ids, key)
            ax.plot(s.index, s["mean"], color=f"C{i}")
            ax.set_ylabel(key.split("/")[1])
    swa = [axes[0].axvline(start + 0.5, color="0.4", ls=":", lw=1, label=f"SWA from epoch {start + 1}")
           for start in sorted(starts)]  # validation of the epochs after `start` is the averaged model's
    axes[0].set(ylabel="validation accuracy (%)", title="Learning curves (mean +- std over seeds)")
    # one entry per configuration (its colour) and per metric (its line style), not one per curve
    handles = [Line2D([], [], color=f"C{i}", label=label) for i, label in enumerate(configs)]
    handles += [Line2D([], [], color="0.3", ls=ls, label=key) for key, ls in (("val/clean", "--"), ("val/pgd10", "-"))]
    figure_legend(fig, handles + swa)
    axes[-1].set_xlabel("epoch")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    left_out = f"; panels left out: {', '.join(constant)}" if constant else ""
    _state(fig, _history_statement(df_runs, configs, lambda runs: _val_protocol(runs, ("val/clean", "val/pgd10"))
                                   + ", per epoch" + left_out))
    return fig


def alpha_figure(df_runs: pd.DataFrame, df_hist: pd.DataFrame, stages=None, **_) -> Figure:
    """Per configuration: shares of alpha_hat at 2^-K, between, and at 1 per epoch, and its mean.
    Configurations with interpolation come first: without it alpha_hat is 1 by construction."""
    interp = df_runs.get("param.method.interpolate", pd.Series(False, index=df_runs.index)).eq(True).fillna(False)
    runs = df_runs[interp] if interp.any() else df_runs
    configs = dict(list(_configs(runs, df_hist, "adv/alpha_mean", stages).items())[:4])
    fig = _figure("alpha")
    axes = fig.subplots(1, len(configs), squeeze=False, sharey=True)[0]
    for ax, (label, ids) in zip(axes, configs.items()):
        low, one = (_seed_stats(df_hist, ids, k)["mean"] for k in ("adv/alpha_min_share", "adv/alpha_one_share"))
        mean = _seed_stats(df_hist, ids, "adv/alpha_mean")["mean"]
        steps = low.index.intersection(one.index)
        low, one = low.loc[steps], one.loc[steps]
        ax.stackplot(steps, low, (1 - low - one).clip(lower=0), one,
                     labels=["alpha = 2^-K", "between", "alpha = 1"], alpha=0.7)
        ax.plot(mean.index, mean, "k-", label="mean alpha")
        ax.set_title(textwrap.fill(label, int(fig.get_figwidth() / len(configs) * 12)), fontsize="small")
        ax.set(xlabel="epoch", ylim=(0, 1))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel("share of samples / mean alpha")
    figure_legend(fig, axes[-1].get_legend_handles_labels()[0])  # the shares fill each panel: no corner is free
    _state(fig, _history_statement(df_runs, configs, lambda _: "alpha_hat of the training batches' adversarial "
                                   "examples (adv/alpha_*), per epoch, trial runs"))
    return fig


# ---- Tables 2 and 4 --------------------------------------------------------------------------
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
    "curves": FigureKind(curves_figure, (9, 9), "learning curves, mean +- std over seeds per configuration, "
                         "with the training loss, eps_max, rho and lr under them (a panel flat in every "
                         "configuration is left out and its value said under the figure)", history=True),
    "alpha": FigureKind(alpha_figure, (12, 4), "alpha_hat per epoch: the shares at 2^-K, between and at 1, "
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

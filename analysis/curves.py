"""The learning-curve figures of `analysis.plots`' registry: `curves` (each configuration's validation accuracies over
epochs, mean and spread over its seeds, with the training loss and the schedules under them) and `alpha` (the
interpolation's alpha over epochs), drawn from the per-epoch history of the runs."""
from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .convergence import config_labels, trial_runs
from .figure_text import DPI, MAX_CONFIGS, _run_seeds, _state, _val_protocol, data_statement
from .run_labels import param

CURVES_SIZE, ALPHA_SIZE = (9, 9), (12, 4)  # inches (analysis.plots.FIGURES)

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
    fig = Figure(figsize=CURVES_SIZE, dpi=DPI, layout="constrained")
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
    fig = Figure(figsize=ALPHA_SIZE, dpi=DPI, layout="constrained")
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

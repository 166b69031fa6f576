"""Figures of a search, drawn by Optuna's matplotlib visualisations from the study the sweep kept.

    python -m analysis.search_figures --experiment NAME --out DIR [--figure F ...] [--epoch E]
        [--tracking-uri URI] [--storage URL --study NAME]

The study is found as `analysis.importance` finds it (the sweep run's tags, or --storage/--study) and read, never
written. One PNG per figure, DIR/<figure>.png:

    importances    fANOVA importance (seed 0) of the unconditional parameters (analysis.importance weighs the
                   conditional ones within their trials)
    parallel       parallel coordinates: every parameter and the objective, one line per trial
    intermediate   the learning curve of every trial: the metric at each epoch that validated, trials by name
    slice          the objective against each parameter, one panel per parameter
    pareto         the non-dominated trials, labelled: a two-objective study's objectives; a single-objective
                   study's val/clean against its metric, each trial at its last report

importances, parallel and slice value every trial at one epoch (the largest all trials reached, or --epoch E), as
analysis.importance does: ASHA stops trials at different epochs. A figure that cannot be drawn (too few trials, no
intermediate values) is skipped with one line saying why.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import optuna
from matplotlib.ticker import MaxNLocator

from . import importance as imp
from .plots import DPI

MIN_TRIALS = 2      # a figure of one trial shows no relation
MAX_NAMED = 20      # trials named in a legend: the best curves by their last value, the first points of the front
DRAWN = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.RUNNING)  # curves


class Skip(Exception):
    """A figure that cannot be drawn, and why (one line)."""


@dataclass
class Search:
    """The persisted study and what the figures derive from it: the objective, and the trials valued at one epoch
    (`scored`, an in-memory study; None with `unscored` saying why)."""
    experiment: str
    study: optuna.Study
    space: dict
    metric: str
    mode: str
    epoch: int | None
    scored: optuna.Study | None
    unscored: str = ""


def load_search(experiment: str, tracking_uri: str | None = None, storage: str | None = None,
                study: str | None = None, epoch: int | None = None) -> Search:
    """The search's study, found and opened as analysis.importance does, with its trials valued at epoch E."""
    persisted = imp.open_study(*imp.find_study(experiment, tracking_uri, storage, study))
    space, (metric, mode) = imp.study_space(persisted), imp.objective(persisted, None, None)
    try:
        trials, values, epoch, _ = imp.scored_trials(persisted, metric, epoch)
    except imp.ImportanceError as e:
        return Search(experiment, persisted, space, metric, mode, None, None, str(e))
    return Search(experiment, persisted, space, metric, mode, epoch, imp.epoch_study(trials, values, mode))


def _scored(search: Search) -> optuna.Study:
    """The trials valued at E, at least MIN_TRIALS of them."""
    if search.scored is None:
        raise Skip(search.unscored)
    n = len(search.scored.trials)
    if n < MIN_TRIALS:
        raise Skip(f"{_count(n)} a value at epoch {search.epoch}; the figure needs {MIN_TRIALS}")
    return search.scored


def _count(n: int) -> str:
    return f"{n} trial has" if n == 1 else f"{n} trials have"


def _target(search: Search) -> str:
    return f"{search.metric} at epoch {search.epoch}"


def _figure_of(axes):
    """The figure of what an Optuna plot returns (one Axes, or an array of them)."""
    return axes.flat[0].figure if hasattr(axes, "flat") else axes.figure


# ---- the figures -----------------------------------------------------------------------------
def importances(search: Search):
    """fANOVA importance of the parameters every trial has, on the trials valued at E."""
    scored = _scored(search)
    params = [k for k, d in search.space.items() if not d.get("when")]
    ax = optuna.visualization.matplotlib.plot_param_importances(
        scored, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=imp.SEED), params=params,
        target_name=_target(search))
    ax.set_title(f"{search.experiment}: importance of {_target(search)} ({len(scored.trials)} trials)\nfANOVA, seed "
                 f"{imp.SEED}; the conditional parameters within their trials: analysis.importance", loc="left",
                 fontsize="small")
    return _figure_of(ax)


def parallel(search: Search):
    """Parallel coordinates of every sampled parameter and the objective at E."""
    scored = _scored(search)
    ax = optuna.visualization.matplotlib.plot_parallel_coordinate(scored, target_name=_target(search))
    ax.figure.set_size_inches(max(8.0, 1.4 * (len(search.space) + 1)), 6)  # room for each axis' ticks
    ax.set_title(f"{search.experiment}: {len(scored.trials)} trials, {_target(search)}", y=1.03)
    return _figure_of(ax)


def slices(search: Search):
    """The objective at E against each parameter."""
    scored = _scored(search)
    axes = optuna.visualization.matplotlib.plot_slice(scored, target_name=_target(search))
    fig = _figure_of(axes)
    fig.suptitle(f"{search.experiment}: {_target(search)} against each parameter ({len(scored.trials)} trials)")
    return fig


def intermediate(search: Search):
    """Every trial's metric per epoch (its intermediate values), the best MAX_NAMED named in the legend."""
    if len(search.study.directions) > 1:
        raise Skip("a multi-objective study keeps no intermediate values")
    curves = {t.number: t for t in search.study.get_trials(deepcopy=False, states=DRAWN) if t.intermediate_values}
    if not curves:
        raise Skip("no trial has an intermediate value (the metric at an epoch)")
    ax = optuna.visualization.matplotlib.plot_intermediate_values(search.study)
    fig = ax.figure
    lines = {int(line.get_label()[len("Trial"):]): line for line in ax.get_lines()}
    last = {n: curves[n].intermediate_values[max(curves[n].intermediate_values)] for n in lines}
    best = sorted(lines, key=lambda n: last[n], reverse=search.mode == "max")[:MAX_NAMED]
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    fig.set_layout_engine("constrained")
    fig.set_size_inches(10, 5 + 0.09 * len(best))
    fig.legend([lines[n] for n in best], [imp.trial_name(curves[n]) for n in best], loc="outside lower center",
               ncols=2, fontsize="x-small",
               title=f"the {len(best)} best of {len(lines)} trials by their last value" if len(lines) > len(best)
               else None, title_fontsize="x-small")
    ax.set(xlabel="epoch", ylabel=search.metric,
           title=f"{search.experiment}: {search.metric} per epoch, every trial ({len(lines)})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def pareto_study(search: Search) -> tuple[optuna.Study, list[str]]:
    """(a two-objective study, its objectives' names): the persisted one, or for a single-objective study an
    in-memory one of val/clean and the metric at each trial's last report. (Optuna's `targets=` on the persisted
    study would not do: it picks the front by the study's own single objective.)"""
    if len(search.study.directions) == 2:
        return search.study, imp.study_metrics(search.study)
    if len(search.study.directions) > 2:
        raise Skip(f"the study has {len(search.study.directions)} objectives; this figure draws two")
    points = []
    for t in search.study.get_trials(deepcopy=False, states=imp.FINISHED):
        curve = imp.metric_series(t, search.metric, [search.metric])
        last = t.value if t.value is not None else curve[max(curve)] if curve else None  # PRUNED: its last report
        if last is not None and isinstance(t.user_attrs.get("val/clean"), (int, float)):
            points.append(optuna.trial.create_trial(values=[t.user_attrs["val/clean"], last], user_attrs=t.user_attrs))
    if len(points) < MIN_TRIALS:
        raise Skip(f"{_count(len(points))} both val/clean and {search.metric}; the figure needs {MIN_TRIALS}")
    with imp.quiet():
        study = optuna.create_study(directions=["maximize", imp.MODES[search.mode]])
        study.add_trials(points)
    return study, ["val/clean", search.metric]


def pareto(search: Search):
    """The non-dominated trials of two objectives, numbered along the front; the legend names each (the first
    MAX_NAMED along it when there are more)."""
    from matplotlib.lines import Line2D

    study, names = pareto_study(search)
    ax = optuna.visualization.matplotlib.plot_pareto_front(study, target_names=names)
    front = sorted(study.best_trials, key=lambda t: t.values[0])
    named = front[:MAX_NAMED]
    for i, t in enumerate(named, 1):
        ax.annotate(str(i), tuple(t.values), xytext=(3, 3), textcoords="offset points", fontsize="x-small")
    last = "" if len(search.study.directions) == 2 else ", each trial at its last report"
    ax.set_title(f"{search.experiment}: {len(front)} non-dominated of {len(study.trials)} trials{last}",
                 fontsize="small")
    fig = ax.figure
    fig.set_layout_engine("constrained")
    fig.set_size_inches(8, 6 + 0.12 * len(named))
    fig.legend([Line2D([], [], ls="", marker=f"${i}$", color="0.2") for i in range(1, len(named) + 1)],
               [t.user_attrs.get("label") or imp.trial_name(t) for t in named], loc="outside lower center",
               fontsize="x-small", title_fontsize="x-small",
               title=f"the first {len(named)} of {len(front)} along the front" if len(front) > len(named) else None)
    return fig


FIGURES = {"importances": importances, "parallel": parallel, "intermediate": intermediate, "slice": slices,
           "pareto": pareto}


# ---- writing them ----------------------------------------------------------------------------
@contextlib.contextmanager
def drawing():
    """Around one Optuna figure: its style (ggplot, set globally by Optuna) undone after, its experimental-API
    warning and INFO lines held back, and every figure it opened closed."""
    import matplotlib.pyplot as plt

    before = set(plt.get_fignums())
    with matplotlib.rc_context(), warnings.catch_warnings(), imp.quiet():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            yield
        finally:
            for num in set(plt.get_fignums()) - before:
                plt.close(num)


def write_figures(search: Search, out_dir, figures=tuple(FIGURES), log=print) -> dict[str, Path]:
    """DIR/<figure>.png for each figure that can be drawn; one line per figure, written or skipped and why."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in figures:
        try:
            with drawing():
                fig = FIGURES[name](search)
                fig.savefig(out / f"{name}.png", format="png", dpi=DPI, bbox_inches="tight")
        except (Skip, ValueError, RuntimeError) as e:  # Optuna's refusals (e.g. fANOVA on equal values) too
            log(f"skipped {name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        written[name] = out / f"{name}.png"
        log(f"wrote {written[name]}")
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.search_figures", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    imp.add_study_args(p)
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the PNGs")
    p.add_argument("--figure", action="append", choices=FIGURES, default=None,
                   help="only this figure (repeatable; default: all)")
    p.add_argument("--epoch", type=int, default=None, metavar="E",
                   help="value every trial at this epoch (default: the largest epoch all trials reached)")
    args = p.parse_args(argv)
    matplotlib.use("Agg")  # files only, on any machine
    try:
        search = load_search(args.experiment, args.tracking_uri, args.storage, args.study, args.epoch)
    except (ValueError, LookupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_figures(search, args.out, args.figure or tuple(FIGURES))
    return 0


if __name__ == "__main__":
    sys.exit(main())

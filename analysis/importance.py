"""Which settings matter: hyperparameter importance of a search, from the Optuna study the sweep kept.

    python -m analysis.importance --experiment NAME [--epoch E] [--metric KEY] [--mode max|min] [--out DIR]
        [--tracking-uri URI] [--storage URL --study NAME]

The sweep driver keeps each search's Optuna study on disk (sweeps/trials/study.py): its storage and name are the tags
``ssat.optuna_storage`` and ``ssat.optuna_study`` of the sweep's parent run in MLflow (``--storage URL --study
NAME`` instead, for a storage whose URL needs its password). This reads that study, never writes it, computes fANOVA
importance (Optuna's FanovaImportanceEvaluator, seed 0), prints a table and writes the bar plot
``DIR/importance.png`` (DIR defaults to ``importance/NAME``). optuna-dashboard opens the study itself.

One epoch for every trial: ASHA stops some trials early, and a value at epoch 2 does not compare with one at
epoch 6. The objective is KEY (default: the study's metric, from the trials' intermediate values, one per epoch
that validated) at epoch E: the largest epoch every trial reached, or ``--epoch E``, which leaves out the trials
that stopped before E and lists them. fANOVA runs on an in-memory study of those trials, valued at E. A
multi-objective study keeps no intermediate values: each objective (and ``val/clean``, ``val/pgd10``) is read at
the trial's last report, whose epoch the trial records.

The space is the study's own (its ``space`` attribute: ranges, choices, log scale, ``when``). Conditional
parameters (``when``: t only for linear/curious, gamma only for curious): fANOVA needs every parameter it weighs
in every trial it reads. So the ranking over all trials weighs the unconditional parameters, and each conditional
one is weighed within the trials where it is active, beside the parameters active in all of those. The two shares
answer different questions and are shown apart; over all trials a conditional parameter's effect shows in its
parent's (the schedule's) share.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import pandas as pd
from matplotlib.figure import Figure

from . import collect
from .plots import DPI

MIN_TRIALS = 30  # below this a forest of 64 trees on N points ranks noise as readily as effects
SEED = 0
MODES = {"max": "maximize", "min": "minimize"}
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)


class ImportanceError(ValueError):
    """A study that cannot be read or scored (none recorded, no space, no value at the epoch), with what exists."""


@dataclass
class Result:
    """What `importance` found: the table (one row per parameter of the space) and where it read and wrote."""
    experiment: str
    metric: str
    epoch: int
    table: pd.DataFrame
    trials: list[int]          # the study's trial numbers scored at `epoch`
    left_out: dict[int, str]   # trial number -> why
    storage: str
    study: str
    png: Path
    warnings: list[str] = field(default_factory=list)


@contextlib.contextmanager
def quiet():
    """Optuna's INFO lines (an in-memory study made, a trial added) held back, its verbosity restored after."""
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(level)


# ---- the study -------------------------------------------------------------------------------
def study_location(runs: pd.DataFrame, experiment: str) -> tuple[str, str]:
    """(storage URL, study name) from the tags of the experiment's sweep run (ssat.kind=sweep)."""
    kind = runs.get("meta.kind", pd.Series(index=runs.index, dtype=object))
    parents = runs[kind == "sweep"]
    if parents.empty:
        raise ImportanceError(f"experiment {experiment!r} has no sweep run (tag ssat.kind=sweep) to name its Optuna "
                              "study; pass --storage URL --study NAME")
    tagged = parents[parents.get("meta.optuna_storage", pd.Series(index=parents.index, dtype=object)).notna()]
    if tagged.empty:
        raise ImportanceError(f"experiment {experiment!r}: its sweep run names no Optuna study (no tag "
                              "ssat.optuna_storage): the search ran before the sweep kept its study "
                              "(sweeps/trials/study.py), "
                              "or the sweep is a grid. Re-run the search to read its importance, or pass --storage URL "
                              "--study NAME of a study kept elsewhere")
    names = tagged.get("meta.optuna_study", pd.Series(index=tagged.index, dtype=object))
    found = sorted({(str(s), experiment if pd.isna(n) else str(n))
                    for s, n in zip(tagged["meta.optuna_storage"], names)})
    if len(found) > 1:
        raise ImportanceError(f"experiment {experiment!r} has sweep runs of {len(found)} studies ("
                              + "; ".join(f"{n} in {s}" for s, n in found) + "): pass --storage URL --study NAME")
    return found[0]


def find_study(experiment: str, tracking_uri: str | None = None, storage: str | None = None,
               study: str | None = None) -> tuple[str, str]:
    """(storage, study name): the ones given, else those the experiment's sweep run records in MLflow."""
    if storage:
        return storage, study or experiment
    return study_location(collect.load_mlflow_runs([experiment], tracking_uri), experiment)


def open_study(storage: str, name: str) -> optuna.Study:
    """The persisted study, read as it is: a SQLite file that is not there is an error (never created)."""
    if ":***@" in storage:
        raise ImportanceError(f"the study's storage {storage} is recorded without its password: pass --storage URL "
                              f"(with the password) --study {name}")
    path = collect.local_store_path(storage) if storage.startswith("sqlite:") else None
    if path is not None and not path.exists():
        raise ImportanceError(f"no Optuna storage at {str(path)!r} (study {name!r}): the sweep's folder moved or was "
                              "removed; pass --storage sqlite:///PATH/optuna.db of its copy")
    try:
        names = optuna.study.get_all_study_names(storage)
    except Exception as exc:  # noqa: BLE001 - any driver or connection error: say it with the URL
        raise ImportanceError(f"the Optuna storage {shown(storage)} cannot be opened ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0][:200]})") from None
    if name not in names:
        raise ImportanceError(f"the Optuna storage {shown(storage)} holds no study {name!r}; its studies: "
                              f"{', '.join(sorted(names)) or 'none'}")
    return optuna.load_study(study_name=name, storage=storage)


def study_space(study: optuna.Study) -> dict:
    """The search space the sweep recorded on its study (with `when`)."""
    if "space" not in study.user_attrs:
        raise ImportanceError(f"study {study.study_name!r} has no `space` attribute: it was not kept by the sweep "
                              "driver (sweeps/trials/study.py)")
    return json.loads(study.user_attrs["space"])


def study_metrics(study: optuna.Study) -> list[str]:
    """The study's objective(s), as the sweep named them (its `metric` attribute: one key or a list), else as
    Optuna does (its metric names, or `objective 0`, ...)."""
    metric = study.user_attrs.get("metric") or study.metric_names or [f"objective {i}" for i in
                                                                         range(len(study.directions))]
    return list(metric) if isinstance(metric, list) else [metric]


def trial_name(trial: optuna.trial.FrozenTrial) -> str:
    """The trial's one name (its `name` attribute), else its configuration's label, else its number."""
    return str(trial.user_attrs.get("name") or trial.user_attrs.get("label") or f"trial {trial.number}")


# ---- values by epoch and the common epoch ----------------------------------------------------
def metric_series(trial: optuna.trial.FrozenTrial, metric: str, metrics: list[str]) -> dict[int, float]:
    """`metric` of a trial by epoch: the intermediate values for a single-objective study's metric, else its final
    value or user attribute at the epoch of its last report; finite values only."""
    if metrics == [metric]:
        found = dict(trial.intermediate_values)
    elif trial.user_attrs.get("epoch") is None:
        found = {}
    elif metric in metrics and trial.values is not None:
        found = {int(trial.user_attrs["epoch"]): trial.values[metrics.index(metric)]}
    else:
        found = {int(trial.user_attrs["epoch"]): trial.user_attrs[metric]} if metric in trial.user_attrs else {}
    return {int(e): float(v) for e, v in found.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def common_epoch(series: dict[int, dict[int, float]], epoch: int | None) -> tuple[int, dict[int, str]]:
    """(E, left out): E is `epoch`, or the largest epoch every trial with any value reached; left out are the
    trials without a value at E, with the reason."""
    last = {n: max(s) if s else None for n, s in series.items()}
    reached = [e for e in last.values() if e is not None]
    if not reached:
        raise ImportanceError("no trial of the study has a value of the metric at any epoch")
    if epoch is None:
        epoch = min(reached)
    elif epoch > max(reached) or epoch < 1:
        raise ImportanceError(f"--epoch {epoch}: no trial has a value there; the trials reached epochs "
                              f"{min(reached)} to {max(reached)}")
    left = {}
    for n, e in last.items():
        if e is None:
            left[n] = "no value at any epoch"
        elif e < epoch:
            left[n] = f"stopped at epoch {e}"
        elif epoch not in series[n]:
            left[n] = f"no value at epoch {epoch}"
    return epoch, left


def objective(study: optuna.Study, metric: str | None, mode: str | None) -> tuple[str, str]:
    """(metric, mode): the given ones, else the study's first objective and its direction; a metric the study
    does not hold is an error naming the ones it does."""
    metrics = study_metrics(study)
    metric = metric or metrics[0]
    held = metrics + sorted({k for t in study.get_trials(deepcopy=False) for k in t.user_attrs
                             if k.startswith("val/") and k not in metrics})
    if metric not in held:
        raise ImportanceError(f"metric {metric!r} is not in study {study.study_name!r}; it holds: {', '.join(held)}")
    if mode is None:
        index = metrics.index(metric) if metric in metrics else None
        mode = "max" if index is None or study.directions[index] == optuna.study.StudyDirection.MAXIMIZE else "min"
    if mode not in MODES:
        raise ImportanceError(f"mode {mode!r}; allowed: {', '.join(MODES)}")
    return metric, mode


def scored_trials(study: optuna.Study, metric: str, epoch: int | None):
    """(trials kept, {number: value at E}, E, left out): the trials that ran, scored at the common epoch E; a
    trial still running is left out and does not bound E, one that never ran (`never_ran`) is not a trial."""
    trials = [t for t in study.get_trials(deepcopy=False) if "never_ran" not in t.user_attrs]
    finished = [t for t in trials if t.state in FINISHED]
    series = {t.number: metric_series(t, metric, study_metrics(study)) for t in finished}
    epoch, left = common_epoch(series, epoch)
    left.update({t.number: "still running" for t in trials if t.state not in FINISHED})
    kept = [t for t in finished if t.number not in left]
    return kept, {t.number: series[t.number][epoch] for t in kept}, epoch, dict(sorted(left.items()))


def epoch_study(trials: list, values: dict[int, float], mode: str) -> optuna.Study:
    """An in-memory study of `trials` (their params and distributions), each COMPLETE at its value at E."""
    with quiet():
        study = optuna.create_study(direction=MODES[mode])
        study.add_trials([optuna.trial.create_trial(params=t.params, distributions=t.distributions,
                                                    value=values[t.number], user_attrs=t.user_attrs)
                          for t in trials])
    return study


# ---- the ranking -----------------------------------------------------------------------------
def fanova(study: optuna.Study, params: list[str]) -> dict[str, float]:
    """fANOVA shares of `params` over the trials that hold all of them (Optuna leaves out the others)."""
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=SEED)
    return optuna.importance.get_param_importances(study, evaluator=evaluator, params=params)


def importance_table(study: optuna.Study, space: dict) -> pd.DataFrame:
    """One row per parameter of the space: ``importance`` over all trials (unconditional parameters),
    ``where_active`` within the trials where a conditional one is active, ``active`` = how many trials."""
    trials = study.get_trials(deepcopy=False)
    conditional = [k for k, d in space.items() if d.get("when")]
    unconditional = [k for k in space if k not in conditional]
    overall = fanova(study, unconditional) if len(trials) >= 2 else {}
    rows = []
    for key in space:
        having = [t for t in trials if key in t.params]
        within = math.nan
        if key in conditional and len(having) >= 2:
            common = [k for k in space if all(k in t.params for t in having)]
            within = fanova(study, common)[key]
        rows.append({"parameter": key, "importance": overall.get(key, math.nan), "where_active": within,
                     "active": len(having), "when": _when_text(space[key])})
    table = pd.DataFrame(rows)
    order = table.assign(_cond=table["when"] != "", _share=table["importance"].fillna(table["where_active"]))
    order = order.sort_values(["_cond", "_share"], ascending=[True, False], kind="stable")
    return table.loc[order.index].reset_index(drop=True)


def _when_text(dist: dict) -> str:
    return "; ".join(f"{p} in {vals}" for p, vals in (dist.get("when") or {}).items())


# ---- output ----------------------------------------------------------------------------------
def _share(v: float) -> str:
    return "-" if math.isnan(v) else f"{v:.3f}"


def render_table(table: pd.DataFrame, n_trials: int) -> str:
    """The table as fixed-width text: parameter, share over all trials, share where active, active in N."""
    width = max(len("parameter"), *(len(p) for p in table["parameter"]))
    lines = [f"{'parameter':<{width}}  {'importance':>10}  {'where active':>12}  active in  (when)"]
    for r in table.itertuples():
        lines.append(f"{r.parameter:<{width}}  {_share(r.importance):>10}  {_share(r.where_active):>12}  "
                     f"{r.active:>3} of {n_trials:<3}  {f'({r.when})' if r.when else ''}".rstrip())
    return "\n".join(lines)


def rule_text(table: pd.DataFrame, n_trials: int) -> str:
    cond = table[table["when"] != ""]
    text = (f"importance: fANOVA (Optuna, seed {SEED}), shares of the explained variance summing to 1 over the "
            f"unconditional parameters, on all {n_trials} trials.")
    if not cond.empty:
        text += ("\nconditional parameters (" + ", ".join(cond["parameter"]) + ") are not in that ranking: each is "
                 "weighed only within the trials where it is active ('where active', shares over the parameters "
                 "active in all of those trials); over all trials its effect can show only in its parent's share.")
    return text


def importance_figure(table: pd.DataFrame, title: str, caption: str) -> Figure:
    """Horizontal bars from 0: all-trials shares, and beside them the where-active shares if any."""
    cond = table[table["when"] != ""]
    panels = [("all trials (unconditional parameters)", table[table["when"] == ""], "importance")]
    if not cond.empty:
        panels.append(("where active (conditional parameters)", cond, "where_active"))
    fig = Figure(figsize=(5 * len(panels) + 1, 1.2 + 0.45 * len(table) + 0.8))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, rows, col) in zip(axes, panels):
        rows = rows.iloc[::-1]
        labels = [p if col == "importance" else f"{p} (n={n})" for p, n in zip(rows["parameter"], rows["active"])]
        ax.barh(labels, rows[col].fillna(0.0), color="tab:blue" if col == "importance" else "tab:orange")
        ax.set_xlim(0, 1)
        ax.set_xlabel("fANOVA importance (sums to 1)" if col == "importance" else "share within its active trials")
        ax.set_title(name, fontsize=10)
    fig.suptitle(title, fontsize=11)
    fig.text(0.01, 0.01, caption, fontsize=8, va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return fig


def plot_importance(table: pd.DataFrame, title: str, caption: str, out_png: Path) -> Path:
    """`importance_figure` as the PNG `out_png`."""
    out_png.parent.mkdir(parents=True, exist_ok=True)
    importance_figure(table, title, caption).savefig(out_png, format="png", dpi=DPI)
    return out_png


def shown(url: str) -> str:
    """A storage URL as a line may show it: without its password."""
    from sqlalchemy.engine import make_url  # MLflow's and Optuna's own dependency

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: nothing to hide in it
        return url


# ---- entry points ----------------------------------------------------------------------------
def importance(experiment: str, tracking_uri: str | None = None, epoch: int | None = None, metric: str | None = None,
               mode: str | None = None, out_dir=None, log=print, storage: str | None = None,
               study: str | None = None) -> Result:
    """Read the search's study, score every trial at the common epoch, rank the parameters, write the plot."""
    storage, name = find_study(experiment, tracking_uri, storage, study)
    persisted = open_study(storage, name)
    space = study_space(persisted)
    metric, mode = objective(persisted, metric, mode)
    trials, values, epoch, left = scored_trials(persisted, metric, epoch)
    table = importance_table(epoch_study(trials, values, mode), space)
    n, names = len(trials), {t.number: trial_name(t) for t in persisted.get_trials(deepcopy=False)}
    warnings = [f"warning: the importance rests on {n} trials (fewer than {MIN_TRIALS}); read the ranking as a "
                "hint, not a finding"] if n < MIN_TRIALS else []
    log(f"{experiment}: {metric} ({mode}) at epoch {epoch}, {n} of {n + len(left)} search trials "
        f"(study {name!r} in {shown(storage)})")
    for number, why in left.items():
        log(f"  left out trial {number} ({names[number]}): {why}")
    log(render_table(table, n))
    log(rule_text(table, n))
    for w in warnings:
        log(w)
    title = f"{experiment}: importance of {metric} at epoch {epoch} ({n} trials)"
    caption = "\n".join([f"fANOVA (Optuna), seed {SEED}; a conditional parameter is weighed only within the n "
                         "trials where it is active, beside the parameters active in all of them."] + warnings)
    out = Path(out_dir) if out_dir is not None else Path("importance") / experiment
    png = plot_importance(table, title, caption, out / "importance.png")
    log(f"plot: {png}; the study: optuna-dashboard {shown(storage)}")
    return Result(experiment, metric, epoch, table, [t.number for t in trials], left, storage, name, png, warnings)


def add_study_args(p: argparse.ArgumentParser) -> None:
    """--experiment, --tracking-uri, --storage and --study: where a search's study is (shared with search_figures)."""
    p.add_argument("--experiment", required=True, metavar="NAME", help="the MLflow experiment of the search")
    p.add_argument("--tracking-uri", default=None, metavar="URI",
                   help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else MLflow's default ./mlflow.db; a "
                        "local store that does not exist is an error, never created)")
    p.add_argument("--storage", default=None, metavar="URL",
                   help="the study's Optuna storage (default: the sweep run's tag ssat.optuna_storage; give it for a "
                        "URL that needs its password)")
    p.add_argument("--study", default=None, metavar="NAME", help="the study in --storage (default: the experiment)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.importance", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_study_args(p)
    p.add_argument("--epoch", type=int, default=None, metavar="E",
                   help="compare every trial at this epoch (default: the largest epoch all trials reached)")
    p.add_argument("--metric", default=None, metavar="KEY", help="objective (default: the study's first metric)")
    p.add_argument("--mode", choices=MODES, default=None, help="direction (default: the study's, max otherwise)")
    p.add_argument("--out", default=None, metavar="DIR", help="folder for importance.png (default: importance/NAME)")
    args = p.parse_args(argv)
    try:
        importance(args.experiment, args.tracking_uri, args.epoch, args.metric, args.mode, args.out,
                   storage=args.storage, study=args.study)
    except (ValueError, LookupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

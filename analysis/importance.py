"""Which settings matter: hyperparameter importance of a search, from its tracked trials.

    python -m analysis.importance --experiment NAME [--epoch E] [--metric KEY] [--mode max|min]
        [--out DIR] [--tracking-uri URI]

Ray's OptunaSearch keeps its Optuna study in memory, so it is gone when the sweep ends. This rebuilds it from
the sweep's search trials in MLflow (``ssat.kind=trial``, ``ssat.stage=search``) into the Optuna storage
``DIR/importance.db`` (SQLite, study NAME; ``optuna-dashboard sqlite:///DIR/importance.db`` opens it),
computes fANOVA importance (Optuna's FanovaImportanceEvaluator, seed 0), prints a table and writes the bar
plot ``DIR/importance.png``. DIR defaults to ``importance/NAME``.

One epoch for every trial: ASHA stops some trials early, and a value at epoch 2 does not compare with one at
epoch 6. The objective is KEY (default: the spec's metric, val/pgd10) at epoch E: the largest epoch every
trial reached, or ``--epoch E``, which leaves out the trials that stopped before E and lists them.

The space is the sweep's own: ``search.space`` of the ``spec.json`` on the sweep's parent run (ranges, choices,
log scale, ``when``); a trial's value is its ``sampled.<dotted.key>`` parameter. Read from the spec, not
inferred from values: ``{choice: [null, 4, 5]}`` and ``{int: [4, 5]}`` log the same strings.

Conditional parameters (``when``: t only for linear/curious, gamma only for curious): fANOVA needs every
parameter it weighs in every trial it reads. So the ranking over all trials weighs the unconditional
parameters, and each conditional one is weighed within the trials where it is active, beside the parameters
active in all of those. The two shares answer different questions and are shown apart; over all trials a
conditional parameter's effect shows in its parent's (the schedule's) share.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import pandas as pd
from matplotlib.figure import Figure

from . import collect
from .plots import DPI

MIN_TRIALS = 30  # below this a forest of 64 trees on N points ranks noise as readily as effects
SEED = 0
DEFAULT_METRIC = "val/pgd10"
MODES = {"max": "maximize", "min": "minimize"}


class ImportanceError(ValueError):
    """A search that cannot be rebuilt (no trials, no space, a value outside it), with what exists instead."""


@dataclass
class Result:
    """What `importance` found: the table (one row per sampled parameter) and where it wrote."""
    experiment: str
    metric: str
    epoch: int
    table: pd.DataFrame
    trial_run_ids: list[str]
    left_out: dict[str, str]  # run_id -> why
    storage: str
    png: Path
    warnings: list[str] = field(default_factory=list)


# ---- the space -------------------------------------------------------------------------------
def distribution(key: str, dist: dict) -> optuna.distributions.BaseDistribution:
    """One entry of a spec's search.space -> the Optuna distribution OptunaSearch sampled it from."""
    if "choice" in dist:
        return optuna.distributions.CategoricalDistribution(dist["choice"])
    for kind, cls in (("float", optuna.distributions.FloatDistribution),
                      ("int", optuna.distributions.IntDistribution)):
        if kind in dist:
            return cls(*dist[kind], log=bool(dist.get("log")))
    raise ImportanceError(f"search.space.{key}: expected one of choice, float, int; got {sorted(dist)}")


def is_active(dist: dict, chosen: dict) -> bool:
    """A parameter is sampled when every ``when`` parent took one of its listed values (sweeps/space.py)."""
    return all(p in chosen and chosen[p] in vals for p, vals in (dist.get("when") or {}).items())


def _as_choice(value, choices: list, where: str):
    """A tracked value -> the spec's own choice object (MLflow's "None" is read as missing, i.e. None)."""
    value = None if pd.isna(value) else value
    for c in choices:
        if (c is None) == (value is None) and c == value:
            return c
    raise ImportanceError(f"{where}: {value!r} is not one of the space's choices {choices}")


def sampled_params(row: pd.Series, space: dict) -> dict:
    """A trial's sampled values, active parameters only, in the space's order (parents before children)."""
    chosen = {}
    for key, dist in space.items():
        if not is_active(dist, chosen):
            continue
        col, where = f"param.sampled.{key}", f"run {row['run_id']}: sampled.{key}"
        value = row.get(col)
        if "choice" in dist:
            chosen[key] = _as_choice(value, dist["choice"], where)
        elif value is None or pd.isna(value):
            raise ImportanceError(f"{where} is missing, but the space's `when` makes it active")
        else:
            chosen[key] = int(value) if "int" in dist else float(value)
    return chosen


def _read_spec(run_id: str, tracking_uri: str | None) -> dict | None:
    import mlflow.artifacts  # imported here like collect's client: a missing artifact raises an MlflowException
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="spec.json", dst_path=tmp,
                                                       tracking_uri=tracking_uri)
        except (MlflowException, OSError):
            return None
        return json.loads(Path(path).read_text())


def sweep_spec(runs: pd.DataFrame, trials: pd.DataFrame, tracking_uri: str | None) -> dict:
    """The spec.json of the parent run(s) of `trials`; several parents must agree on search.space."""
    parents = runs[runs["meta.kind"] == "sweep"]
    ids = [i for i in parents["run_id"] if i in set(trials["parent_run_id"])] or list(parents["run_id"])
    specs = [s for s in (_read_spec(i, tracking_uri) for i in ids) if s is not None]
    if not specs:
        raise ImportanceError(f"no spec.json artifact on the sweep's parent run ({', '.join(ids) or 'none found'}); "
                              "the search space (ranges, choices, `when`) comes from it (docs/tracking.md)")
    spaces = {json.dumps((s.get("search") or {}).get("space"), sort_keys=True) for s in specs}
    if len(spaces) > 1:
        raise ImportanceError(f"the parent runs {', '.join(ids)} hold different search spaces; "
                              "rebuild one sweep at a time")
    if not (specs[0].get("search") or {}).get("space"):
        raise ImportanceError("the sweep's spec.json has no search.space: this experiment is not a search")
    return specs[0]


# ---- the trials and the common epoch ---------------------------------------------------------
def search_trials(runs: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """The search stage's trial runs, in the order they started."""
    kind, stage = runs.get("meta.kind"), runs.get("meta.stage")
    if kind is None or stage is None:
        raise ImportanceError(f"experiment {experiment!r} has no tracked trials (no ssat.kind/ssat.stage tags)")
    trials = runs[(kind == "trial") & (stage == "search")]
    if trials.empty:
        stages = sorted(set(stage[kind == "trial"].dropna()))
        raise ImportanceError(f"experiment {experiment!r} has no search trials (ssat.stage=search); "
                              f"trial stages present: {', '.join(stages) or 'none'}")
    return trials.sort_values("start_time", kind="stable").reset_index(drop=True)


def per_epoch(history: pd.DataFrame, metric: str) -> pd.DataFrame:
    """History -> one row per run, one column per epoch, of `metric` (a step logged twice keeps its last)."""
    h = history[history["key"] == metric]
    return h.groupby(["run_id", "step"])["value"].last().unstack("step")


def common_epoch(values: pd.DataFrame, run_ids: list[str], epoch: int | None) -> tuple[int, dict[str, str]]:
    """(E, left out): E is `epoch`, or the largest epoch every trial with any value reached; left out are
    the trials without a value at E, with the reason."""
    last = {r: (int(values.loc[r].last_valid_index()) if r in values.index and values.loc[r].notna().any()
                else None) for r in run_ids}
    reached = [e for e in last.values() if e is not None]
    if not reached:
        raise ImportanceError("no search trial has logged the metric at any epoch")
    if epoch is None:
        epoch = min(reached)
    elif epoch > max(reached) or epoch < 1:
        raise ImportanceError(f"--epoch {epoch}: no trial has a value there; the trials reached epochs "
                              f"{min(reached)} to {max(reached)}")
    left = {}
    for r, e in last.items():
        if e is None:
            left[r] = "no value at any epoch"
        elif e < epoch:
            left[r] = f"stopped at epoch {e}"
        elif pd.isna(values.loc[r].get(epoch)):
            left[r] = f"no value at epoch {epoch}"
    return epoch, left


# ---- the study -------------------------------------------------------------------------------
def rebuild_study(storage: str, name: str, direction: str, trials: list[dict], space: dict) -> optuna.Study:
    """A fresh study NAME in `storage` holding `trials` ({params, value, user_attrs}) as COMPLETE trials.

    A study of that name already there is replaced: it is derived from the tracking store, never edited."""
    if name in optuna.study.get_all_study_names(storage):
        optuna.delete_study(study_name=name, storage=storage)
    study = optuna.create_study(storage=storage, study_name=name, direction=direction)
    dists = {k: distribution(k, d) for k, d in space.items()}
    study.add_trials([optuna.trial.create_trial(params=t["params"], value=t["value"], user_attrs=t["user_attrs"],
                                                distributions={k: dists[k] for k in t["params"]})
                      for t in trials])
    return study


def _fanova(study: optuna.Study, params: list[str]) -> dict[str, float]:
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=SEED)
    return optuna.importance.get_param_importances(study, evaluator=evaluator, params=params)


def importance_table(study: optuna.Study, space: dict) -> pd.DataFrame:
    """One row per parameter of the space: ``importance`` over all trials (unconditional parameters),
    ``where_active`` within the trials where a conditional one is active, ``active`` = how many trials."""
    trials = study.get_trials(deepcopy=False)
    conditional = [k for k, d in space.items() if d.get("when")]
    unconditional = [k for k in space if k not in conditional]
    overall = _fanova(study, unconditional) if len(trials) >= 2 else {}
    rows = []
    for key in space:
        having = [t for t in trials if key in t.params]
        within = math.nan
        if key in conditional and len(having) >= 2:
            common = [k for k in space if all(k in t.params for t in having)]
            within = _fanova(study, common)[key]
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


def plot_importance(table: pd.DataFrame, title: str, caption: str, out_png: Path) -> Path:
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
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, format="png", dpi=DPI)
    return out_png


# ---- entry points ----------------------------------------------------------------------------
def importance(experiment: str, tracking_uri: str | None = None, epoch: int | None = None,
               metric: str | None = None, mode: str | None = None, out_dir=None, log=print) -> Result:
    """Rebuild the search of `experiment` as an Optuna study, rank its parameters, write table and plot."""
    tracking_uri = collect.resolve_tracking_uri(tracking_uri)  # the spec.json download reads the same store
    runs = collect.load_mlflow_runs([experiment], tracking_uri)
    trials = search_trials(runs, experiment)
    spec = sweep_spec(runs, trials, tracking_uri)
    space = spec["search"]["space"]
    metric = metric or spec.get("metric") or DEFAULT_METRIC
    mode = mode or spec.get("mode") or "max"
    if mode not in MODES:
        raise ImportanceError(f"mode {mode!r}; allowed: {', '.join(MODES)}")
    col = f"metric.{metric}"
    if col not in trials:
        logged = sorted(c[len("metric."):] for c in trials if c.startswith("metric."))
        raise ImportanceError(f"metric {metric!r} is not logged by the search trials; logged: {', '.join(logged)}")
    # only the objective's history: load_mlflow_history reads the metric columns it is given
    values = per_epoch(collect.load_mlflow_history(trials[["run_id", "source", col]], tracking_uri), metric)
    ids = list(trials["run_id"])
    epoch, left = common_epoch(values, ids, epoch)
    kept = trials[~trials["run_id"].isin(left)]
    rebuilt = [{"params": sampled_params(row, space), "value": float(values.loc[row["run_id"], epoch]),
                "user_attrs": {"mlflow_run_id": row["run_id"], "run_name": row["run_name"],
                               "status": row.get("meta.status"), "epoch": epoch}}
               for _, row in kept.iterrows()]
    out = Path(out_dir) if out_dir is not None else Path("importance") / experiment
    out.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{(out / 'importance.db').resolve()}"
    study = rebuild_study(storage, experiment, MODES[mode], rebuilt, space)
    table = importance_table(study, space)

    n = len(rebuilt)
    warnings = []
    if n < MIN_TRIALS:
        warnings.append(f"warning: the importance rests on {n} trials (fewer than {MIN_TRIALS}); "
                        "read the ranking as a hint, not a finding")
    log(f"{experiment}: {metric} ({mode}) at epoch {epoch}, {n} of {len(ids)} search trials")
    for run_id, why in left.items():
        log(f"  left out {run_id}: {why}")
    log(render_table(table, n))
    log(rule_text(table, n))
    for w in warnings:
        log(w)
    title = f"{experiment}: importance of {metric} at epoch {epoch} ({n} trials)"
    caption = "\n".join([f"fANOVA (Optuna), seed {SEED}; a conditional parameter is weighed only within the n "
                         "trials where it is active, beside the parameters active in all of them."] + warnings)
    png = plot_importance(table, title, caption, out / "importance.png")
    log(f"study: {storage} (study {experiment!r}; open with: optuna-dashboard {storage})")
    log(f"plot: {png}")
    return Result(experiment, metric, epoch, table, list(kept["run_id"]), left, storage, png, warnings)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.importance", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 2)[2],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", required=True, metavar="NAME", help="the MLflow experiment of the search")
    p.add_argument("--tracking-uri", default=None, metavar="URI",
                   help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else MLflow's default ./mlflow.db; a "
                        "local store that does not exist is an error, never created)")
    p.add_argument("--epoch", type=int, default=None, metavar="E",
                   help="compare every trial at this epoch (default: the largest epoch all trials reached)")
    p.add_argument("--metric", default=None, metavar="KEY", help=f"objective (default: the spec's metric, else {DEFAULT_METRIC})")
    p.add_argument("--mode", choices=MODES, default=None, help="direction of the study (default: the spec's mode)")
    p.add_argument("--out", default=None, metavar="DIR", help="folder for importance.db and importance.png "
                                               "(default: importance/NAME)")
    args = p.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one small spec.json, no bar
    try:
        importance(args.experiment, args.tracking_uri, args.epoch, args.metric, args.mode, args.out)
    except (ValueError, LookupError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tracked runs -> pandas, from MLflow or from a Ray Tune results folder (docs/tracking.md).

Both readers return the same two frames, so every table and plot works on either source. Both read the run
record the sweeps wrote (its tags and parameters: MLflow's run, or the ``run_json`` a trial reports with every
result) and derive nothing from a config; what older stores recorded otherwise is read as today's record in
one place (`current_record`, applied by `runs_frame`; its frozen tables are analysis/legacy.py).

``runs``: one row per run.
    run_id, experiment, source ('mlflow' | 'ray'), run_name, start_time, parent_run_id
    meta.<x>       the ``ssat.<x>`` tags (kind, key, sweep, stage, table, row, column_group, seed,
                   expected_seeds, config_hash, status, ...)
    param.<x>      the flat parameters under the config's dotted names (method.name, attack.schedule, attack.t,
                   method.beta, method.interpolate, data.dataset, ..., resolved.precision, spec.epochs, spec.t,
                   sampled.<dotted.key>); a run recorded with the names before issue 27 reads the same
    metric.<x>     the last value of every metric (test/<ckpt>/<attack>, time/total_hours, val/clean, ...)
    protocol.<ckpt>/<attack>   the protocol record of a test metric, as compact JSON text
``history``: long, one row per (run_id, key, step) of the per-epoch metrics: run_id, key, step, value.

MLflow returns parameters and tags as strings; both readers pass them through `typed`, so numbers are
stored as numbers, booleans as booleans and the string ``"None"`` as missing, whatever the source.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Iterable

import pandas as pd

from .legacy import current_param_names
from .record import FINAL_PREFIXES, HISTORY_PREFIXES, search_all, with_pg_driver

_MISSING_TEXT = {"None", "none", "null", "NaN", "nan", ""}
_INT_TEXT = re.compile(r"^-?\d+$")
# Tags that are display text, never typed: a schedule's short label is "none", a label may read "1.0".
TEXT_TAGS = frozenset({"meta.method_label", "meta.schedule_label", "meta.schedule_title", "meta.schedule_row",
                       "meta.label", "meta.sampled"})

class SourceError(LookupError):
    """An experiment or results folder that cannot be read, with what exists instead."""


# ---- typing ----------------------------------------------------------------------------------
def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and v in _MISSING_TEXT)


def _is_bool(v) -> bool:
    return isinstance(v, bool) or (isinstance(v, str) and v.lower() in ("true", "false"))


def _is_int(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and bool(_INT_TEXT.match(v)))


def typed(values: pd.Series) -> pd.Series:
    """One column of params/tags -> booleans, integers, floats or text, whichever every value is.

    Why per column: MLflow hands back ``"0.4"``, ``"True"``, ``"None"``; Ray hands back 0.4, True,
    None. Typing a column only when *every* present value fits keeps both sources identical.
    """
    clean = pd.Series([None if _missing(v) else v for v in values], index=values.index, dtype=object)
    present = list(clean.dropna())
    if not present:
        return pd.Series(math.nan, index=values.index, dtype=float)
    if all(_is_bool(v) for v in present):
        return pd.Series([None if v is None else (v if isinstance(v, bool) else v.lower() == "true")
                          for v in clean], index=values.index, dtype="boolean")
    if all(_is_int(v) for v in present):
        return pd.to_numeric(clean).astype("Int64")
    numbers = pd.to_numeric(clean, errors="coerce")
    if numbers.notna().sum() == len(present) and not any(isinstance(v, bool) for v in present):
        return numbers.astype(float)
    return pd.Series([None if v is None else str(v) for v in clean], index=values.index, dtype=object)


def _text(values: pd.Series) -> pd.Series:
    """A display-text column: strings as written ("none" stays "none"), only absent or empty values missing."""
    return pd.Series([None if v is None or (isinstance(v, float) and math.isnan(v)) or v == "" else str(v)
                      for v in values], index=values.index, dtype=object)


def runs_frame(records: list[dict]) -> pd.DataFrame:
    """Records of one run each -> the typed ``runs`` frame (columns sorted by family), every parameter under
    today's name and the spec parameters of older runs filled in (`current_record`)."""
    if not records:
        return pd.DataFrame(columns=["run_id", "experiment", "source"])
    records = [current_record(r) for r in records]
    names = list(dict.fromkeys(k for r in records for k in r))
    # object columns first: letting pandas infer would turn Ray's [70, None] into floats before `typed`
    df = pd.DataFrame({k: pd.Series([r.get(k) for r in records], dtype=object) for k in names})
    for col in df.columns:
        if col in TEXT_TAGS:
            df[col] = _text(df[col])
        elif col.startswith(("meta.", "param.")):
            df[col] = typed(df[col])
        elif col.startswith(("metric.", "start_time")):
            df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
        else:
            df[col] = df[col].infer_objects()
    head = [c for c in ("run_id", "experiment", "source", "run_name", "start_time", "parent_run_id") if c in df]
    rest = sorted(c for c in df.columns if c not in head)
    return df[head + rest].reset_index(drop=True)


# ---- runs logged before the run record carried spec.epochs and spec.t ------------------------
def _lacks_spec_params(rec: dict) -> bool:
    return (rec.get("meta.kind") or "trial") == "trial" and "param.spec.epochs" not in rec


def legacy_spec_params(rec: dict) -> dict:
    """``param.spec.epochs`` and ``param.spec.t`` of a trial run logged without them (by the code before the
    run record, or in a stage a resumed sweep had built before): the one place analysis derives parameters.
    Reads today's parameter names (`current_param_names` runs first).

    Inferred as the tables did before those runs logged what their spec said: a run of another length than
    the paper's (`analysis.table_specs.paper_epochs`) whose t is the rescaled value (``ssat.config.scale_epochs``)
    of exactly one of the paper's t (50, 60, 70) was that paper run; any other run is its own spec.
    """
    from .run_labels import paper_epochs, paper_t

    t, epochs = (None if _missing(rec.get(f"param.{k}")) else int(rec[f"param.{k}"])
                 for k in ("attack.t", "optim.epochs"))
    base = paper_epochs(rec)
    if t is not None and epochs is not None and epochs != base and (back := paper_t(t, epochs, base)):
        return {"param.spec.epochs": base, "param.spec.t": back}
    return {"param.spec.epochs": base if epochs is None else epochs, "param.spec.t": t}


def current_record(rec: dict) -> dict:
    """A run record of any store as today's: parameters under today's names (analysis.legacy), then the spec
    parameters a trial run logged without (`legacy_spec_params`). A record of today is returned as it is."""
    rec = current_param_names(rec)
    return {**rec, **legacy_spec_params(rec)} if _lacks_spec_params(rec) else rec


def history_frame(rows: list[dict]) -> pd.DataFrame:
    """(run_id, key, step, value) rows -> the long ``history`` frame, sorted."""
    df = pd.DataFrame(rows, columns=["run_id", "key", "step", "value"])
    df["step"] = pd.to_numeric(df["step"]).astype("int64")
    df["value"] = pd.to_numeric(df["value"]).astype(float)
    return df.sort_values(["run_id", "key", "step"], kind="stable").reset_index(drop=True)


# ---- MLflow ----------------------------------------------------------------------------------
def local_store_path(uri: str) -> Path | None:
    """The file (SQLite) or folder (file store) a local tracking URI names; None for a server or an in-memory db."""
    from urllib.parse import unquote, urlparse

    if uri.startswith("sqlite:"):
        from sqlalchemy.engine import make_url  # MLflow's own dependency, as its SQLite store parses the URI

        db = make_url(uri).database
        return None if not db or db == ":memory:" else Path(db)
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path(uri) if not parsed.scheme and not uri.startswith("databricks") else None  # a bare path: a file store


def resolve_tracking_uri(tracking_uri: str | None) -> str:
    """The store analysis reads: `tracking_uri`, else $MLFLOW_TRACKING_URI, else MLflow's default (``./mlflow.db``,
    or ``./mlruns`` when that holds runs). The one place analysis resolves it.

    A local store that does not exist is an error naming it: MLflow's client would create it (an empty
    ``./mlflow.db`` wherever a command was run without --tracking-uri), and analysis only reads. A PostgreSQL
    store is read through the driver the project pins (record.with_pg_driver), as the sweep wrote it."""
    import mlflow  # imported here: the tables work on frames without MLflow

    uri = with_pg_driver(tracking_uri or mlflow.get_tracking_uri())
    path = local_store_path(uri)
    if path is not None and not path.exists():
        how = ("given" if tracking_uri else "from $MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI")
               else "MLflow's default: neither --tracking-uri nor $MLFLOW_TRACKING_URI is set")
        raise SourceError(f"no MLflow store at {str(path.resolve())!r} (tracking URI {uri!r}, {how}); analysis reads "
                          "a store and never creates one. Make one by running a sweep (python -m sweeps run SPEC "
                          "--workdir DIR writes DIR/mlflow.db), or pass the store a sweep wrote: --tracking-uri "
                          "sqlite:///DIR/mlflow.db (or a server's http://HOST:PORT)")
    return uri


def _client(tracking_uri: str | None):
    from mlflow.tracking import MlflowClient  # imported here: the tables work on frames without MLflow

    return MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))


def _experiment_id(client, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments())
        raise SourceError(f"experiment {name!r} does not exist at tracking URI {client.tracking_uri!r}; "
                          f"existing experiments: {', '.join(names) or '(none)'}")
    return exp.experiment_id


def _mlflow_record(run, experiment: str) -> dict:
    tags = run.data.tags
    rec = {"run_id": run.info.run_id, "experiment": experiment, "source": "mlflow",
           "run_name": run.info.run_name, "start_time": run.info.start_time,
           "parent_run_id": tags.get("mlflow.parentRunId")}
    for key, value in tags.items():
        if key.startswith("ssat."):
            rec["meta." + key[len("ssat."):]] = value
        elif key.startswith("protocol/"):
            rec["protocol." + key[len("protocol/"):]] = value
    rec.setdefault("meta.status", run.info.status)
    rec.update({"param." + k: v for k, v in run.data.params.items()})
    rec.update({"metric." + k: v for k, v in run.data.metrics.items()})
    return rec


# What a reference run (`ssat.reuses`: a trial a sweep took from another sweep's finished run, sweeps.driver.reuse)
# says of
# itself; everything else (its parameters, metrics, protocol records, history) is read from the run it names.
REFERENCE_IDENTITY = ("experiment", "run_name", "parent_run_id", "meta.kind", "meta.key", "meta.sweep", "meta.stage",
                      "meta.table", "meta.row", "meta.column_group", "meta.expected_seeds", "meta.label",
                      "meta.status")


def followed(client, rec: dict) -> dict:
    """A reference run's record as the run it reuses, under the reference's identity (its sweep, row, table), with
    `meta.reused_by` = the reference's run id; any other record as it is. The run id is the trained run's: a
    table's provenance and curves point at it."""
    original_id = rec.get("meta.reuses")
    if not original_id:
        return rec
    original = _mlflow_record(client.get_run(original_id), rec["experiment"])
    return {**original, **{k: rec[k] for k in REFERENCE_IDENTITY if k in rec}, "meta.reused_by": rec["run_id"],
            "meta.reuses": original_id}


def load_mlflow_runs(experiments: Iterable[str], tracking_uri: str | None = None) -> pd.DataFrame:
    """Every run of the named experiments (sweep parent, teachers, trials) as the ``runs`` frame; a reference run
    (a reused trial) as the run it reuses (`followed`)."""
    client = _client(tracking_uri)
    records = []
    for name in experiments:
        records += [followed(client, _mlflow_record(r, name))
                    for r in search_all(client, [_experiment_id(client, name)])]
    return runs_frame(records)


def load_mlflow_history(runs: pd.DataFrame, tracking_uri: str | None = None) -> pd.DataFrame:
    """Per-epoch history of the MLflow runs in ``runs`` (search_runs only gives the last value)."""
    client = _client(tracking_uri)
    rows = []
    for run_id, keys in _history_keys(runs[runs["source"] == "mlflow"]):
        for key in keys:
            rows += [{"run_id": run_id, "key": key, "step": m.step, "value": m.value}
                     for m in client.get_metric_history(run_id, key)]
    return history_frame(rows)


def _history_keys(runs: pd.DataFrame):
    metric_cols = [c for c in runs.columns if c.startswith("metric.") and c[7:].startswith(HISTORY_PREFIXES)]
    for _, run in runs.iterrows():
        yield run["run_id"], [c[7:] for c in metric_cols if pd.notna(run[c])]


# ---- Ray Tune results folder -----------------------------------------------------------------
def _trial_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        raise SourceError(f"Ray results folder {str(root)!r} does not exist")
    dirs = sorted(p.parent for p in root.rglob("params.json") if (p.parent / "result.json").is_file())
    if not dirs:
        raise SourceError(f"no trial folders (params.json + result.json) under {str(root)!r}")
    return dirs


def _read_results(path: Path) -> list[dict]:
    with path.open() as f:
        return [_flatten(json.loads(line)) for line in f if line.strip()]


def _flatten(d: dict, prefix: str = "") -> dict:
    """Nested result dicts -> 'a/b/c' keys; a protocol record (protocol/<ckpt>/<attack>) stays whole."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if key.startswith("protocol/") and key.count("/") == 2:
            out[key] = v if isinstance(v, str) or v is None else json.dumps(v, separators=(",", ":"))
        elif isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def _is_metric(key: str, value) -> bool:
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return numeric and key.startswith(HISTORY_PREFIXES + FINAL_PREFIXES)


def _run_record(trial: Path, results: list[dict]) -> dict:
    """The run record the trainable reports with every result (``run_json``: key, tags, params, name)."""
    for line in reversed(results):
        if isinstance(line.get("run_json"), str):
            return json.loads(line["run_json"])
    raise SourceError(f"trial folder {str(trial)!r} has no run record (no 'run_json' in its result.json): it was "
                      "written by a sweep older than the run record; read the sweep's MLflow experiment "
                      "instead (--experiment NAME)")


def _ray_status(results: list[dict], rec: dict) -> str:
    last = results[-1] if results else {}
    if last.get("failed_reason"):
        return f"FAILED: {last['failed_reason']}"
    done = any(k.startswith("metric.test/") for k in rec) or bool(last.get("done"))
    return "FINISHED" if done else "INCOMPLETE"


def _ray_record(trial: Path, root: Path, results: list[dict]) -> dict:
    run = _run_record(trial, results)
    rec = {"run_id": str(trial.relative_to(root)), "experiment": root.name, "source": "ray",
           "run_name": trial.name, "start_time": math.nan, "parent_run_id": None}
    rec.update({"meta." + k[len("ssat."):]: v for k, v in run["tags"].items() if k.startswith("ssat.")})
    rec.update({"param." + k: v for k, v in run["params"].items()})
    for line in results:  # later lines overwrite: the last reported value, as MLflow keeps it
        rec.update({"metric." + k: v for k, v in line.items() if _is_metric(k, v)})
        rec.update({"protocol." + k[len("protocol/"):]: v for k, v in line.items() if k.startswith("protocol/")})
    rec.setdefault("meta.status", _ray_status(results, rec))
    return rec


def _epoch(line: dict, index: int) -> int:
    for key in ("epoch", "training_iteration"):
        if isinstance(line.get(key), (int, float)):
            return int(line[key])
    return index + 1


def load_ray_runs(path: str | os.PathLike) -> pd.DataFrame:
    """Every trial folder under a Ray Tune results folder that reported a result, as the ``runs`` frame (a
    trial that never reported has no run in MLflow either)."""
    root = Path(path)
    trials = [(t, _read_results(t / "result.json")) for t in _trial_dirs(root)]
    return runs_frame([_ray_record(t, root, results) for t, results in trials if results])


def load_ray_history(path: str | os.PathLike) -> pd.DataFrame:
    """Per-epoch history from each trial's result.json (one line per reported epoch)."""
    root = Path(path)
    rows = []
    for trial in _trial_dirs(root):
        run_id = str(trial.relative_to(root))
        for i, line in enumerate(_read_results(trial / "result.json")):
            rows += [{"run_id": run_id, "key": k, "step": _epoch(line, i), "value": v}
                     for k, v in line.items() if _is_metric(k, v) and k.startswith(HISTORY_PREFIXES)]
    return history_frame(rows)


# ---- both ------------------------------------------------------------------------------------
def load_runs(experiments: Iterable[str] = (), ray_dirs: Iterable[str] = (),
              tracking_uri: str | None = None) -> pd.DataFrame:
    """Runs of MLflow experiments and/or Ray results folders, stacked into one ``runs`` frame."""
    experiments, ray_dirs = list(experiments), list(ray_dirs)
    if not experiments and not ray_dirs:
        raise SourceError("name at least one --experiment (MLflow) or --ray-results folder")
    frames = [load_ray_runs(d) for d in ray_dirs]
    if experiments:
        frames.insert(0, load_mlflow_runs(experiments, tracking_uri))
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else (frames[0] if frames else runs_frame([]))


def load_history(runs: pd.DataFrame, ray_dirs: Iterable[str] = (), tracking_uri: str | None = None) -> pd.DataFrame:
    """Per-epoch history for the runs of `load_runs` (MLflow runs via the client, Ray runs from disk)."""
    frames = [load_ray_history(d) for d in ray_dirs]
    if (runs.get("source") == "mlflow").any():
        frames.insert(0, load_mlflow_history(runs, tracking_uri))
    return pd.concat(frames, ignore_index=True) if frames else history_frame([])


def add_source_args(parser) -> None:
    """The --experiment / --ray-results / --tracking-uri options every CLI of this package shares."""
    parser.add_argument("--experiment", action="append", default=[], metavar="NAME",
                        help="MLflow experiment (one per sweep); repeat to combine sweeps")
    parser.add_argument("--ray-results", action="append", default=[], metavar="DIR",
                        help="a Ray Tune results folder, read when no MLflow store is at hand; repeatable")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else MLflow's default "
                             "./mlflow.db; a local store that does not exist is an error, never created)")

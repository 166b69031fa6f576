"""Table cells from runs: which runs a table reads, one value per (run, column), and the cell statistics.

Pipeline (each step one function, each testable on a hand-built frame):
    select_runs  -> the table's runs with their row and column group
    run_values   -> one protocol-checked value per (run, column), plus what was left out and why
    rank_rows    -> (the search table) rows best first by a column's mean; the best row is the baseline
    summarize    -> per cell: mean, sample std (ddof=1), n, expected seeds, run ids
    mark         -> emphasis (bold / underline), missing-seed mark, Welch's t-test against the baseline
`build` chains them into a `TableResult` that `analysis.render` prints and `analysis.tables` writes.

Rules, stated once:
* A table reads finished ``trial`` runs (and ``teacher`` runs for FixMatch) whose ``ssat.table`` tag
  names it (training-time reads the ``main`` runs); ``any_tag`` widens this to every run whose params fit
  the table. Stage ``search`` (short ASHA runs) is left out unless ``stages`` names it. The search table
  reads its stages' trials (``TableSpec.stages``: confirm and search) whatever their tag.
* One run gives a cell one value; two runs of the same configuration and seed: the later one counts.
* Ranking compares means rounded as printed; ties share the emphasis. Unranked rows are never emphasised.
* Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``) of a row against its block's baseline row;
  p >= alpha, or fewer than two seeds on either side (p undefined), marks the difference not significant.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy import stats

from . import paper, protocol
from .table_specs import TableError, TableSpec
from .run_labels import dataset_of, is_standard, is_teacher, param, value
from .run_labels import seed_of as _seed

MARKS = {"missing": "†", "not_significant": "‡", "subset": "§"}


@dataclass(frozen=True)
class Options:
    """Everything besides the runs that decides a table's content (recorded in its provenance)."""

    checkpoint: str = "best"
    precision: str = "fp32"
    allow_subset: bool = False
    stages: tuple[str, ...] | None = None   # None: every stage but 'search'
    any_tag: bool = False
    alpha: float = 0.05
    compare_paper: bool = False
    setup: str = ""   # appended to the caption: the choices of a run sized for its machine (the demo's)
    metric: str | None = None   # what the search table ranks by (None: val/pgd10; table_specs.get_spec)
    mode: str | None = None     # and which of its values is best: 'max' or 'min' (None: max)

    def protocol(self) -> protocol.Protocol:
        return protocol.Protocol(checkpoint=self.checkpoint, precision=self.precision,
                                 allow_subset=self.allow_subset)


@dataclass
class TableResult:
    spec: TableSpec
    options: Options
    groups: list[str]
    blocks: list[tuple[str, ...]]
    columns: list                       # the spec's Columns that are shown
    cells: pd.DataFrame                 # one line per (group, row, column)
    excluded: pd.DataFrame              # run_id, group, row, column, reason
    notes: list[str] = field(default_factory=list)


# ---- selection -------------------------------------------------------------------------------
def _stage_ok(run: dict, opts: Options) -> bool:
    stage = value(run, "meta.stage")
    if is_teacher(run) or stage is None:
        return True
    return stage in opts.stages if opts.stages is not None else stage != "search"


def _reads(run: dict, spec: TableSpec, opts: Options) -> bool:
    kind = value(run, "meta.kind") or "trial"
    if spec.stages:  # the search table: its stages' trials, whatever their table tag
        stage = value(run, "meta.stage")
        return kind == "trial" and stage in spec.stages and (opts.stages is None or stage in opts.stages)
    if kind not in ("trial", "teacher") or not _stage_ok(run, opts):
        return False
    return opts.any_tag or value(run, "meta.table") == (spec.reads_tag or spec.name)


def select_runs(runs: pd.DataFrame, spec: TableSpec, opts: Options) -> pd.DataFrame:
    """The table's runs (any status) with columns ``row`` and ``group`` added."""
    records = [run for run in runs.to_dict("records") if _reads(run, spec, opts)]
    kept = []
    for run in spec.prepare(records) if spec.prepare else records:
        # standard training (lambda 0) is no method's cell: the table's standard row, or left out
        row = spec.standard_row if is_standard(run) else spec.row_of(run)
        group = None if row is None else spec.group_of(run)  # (a group may need labels the row did not)
        if group is not None:
            kept.append({**run, "row": row, "group": group})
    return _attach_teachers(pd.DataFrame.from_records(kept))  # (none kept: no columns, and no table)


def _attach_teachers(sel: pd.DataFrame) -> pd.DataFrame:
    """A teacher whose group names no trial group joins the one trial group of its dataset."""
    if sel.empty or "meta.kind" not in sel:
        return sel
    teacher = sel["meta.kind"] == "teacher"
    trial_groups = set(sel.loc[~teacher, "group"])
    for i in sel.index[teacher]:
        if sel.at[i, "group"] in trial_groups:
            continue
        ds = dataset_of(sel.loc[i].to_dict())
        same = [g for g in trial_groups if g.split("/")[0] == ds]
        if len(same) == 1:
            sel.at[i, "group"] = same[0]
    return sel


def _no_runs_message(runs: pd.DataFrame, spec: TableSpec, opts: Options) -> str:
    tags = sorted({str(t) for t in runs["meta.table"].dropna()} if "meta.table" in runs else ())
    how = "" if opts.any_tag or spec.stages else (
        f" tagged ssat.table={spec.reads_tag or spec.name} (tags seen: {', '.join(tags) or 'none'}; --any-tag keys "
        "rows on the params of every run)")
    stages = ", ".join(opts.stages) if opts.stages is not None else ", ".join(spec.stages) or "every stage but 'search'"
    return (f"table {spec.name!r}: none of the {len(runs)} runs is a finished run of this table{how}, "
            f"stages: {stages}")


# ---- one value per (run, column) -------------------------------------------------------------
def _acc_value(run: dict, col, opts: Options) -> tuple[float | None, str | None, str | None]:
    """(value, why it is left out or None, the test subset's name or None for the full set)."""
    ckpt = "teacher" if is_teacher(run) else opts.checkpoint
    v = value(run, f"metric.test/{ckpt}/{col.key}")
    if v is None:
        return None, f"no test/{ckpt}/{col.key} metric", None
    rec = protocol.parse_record(value(run, f"protocol.{ckpt}/{col.key}"))
    reason = protocol.mismatch(rec, col.key, dataset_of(run), ckpt, opts.protocol())
    return float(v), reason, (rec.get("subset") if protocol.is_subset(rec) else None)


def _time_value(run: dict, col, opts: Options) -> tuple[float | None, str | None, str | None]:
    """Training time: only runs trained in the table's precision are comparable."""
    hours = value(run, "metric.time/total_hours")
    epochs = value(run, "metric.time/epochs") or param(run, "optim.epochs")
    if hours is None or epochs is None:
        return None, "no time/total_hours or time/epochs metric", None
    # what it trained in (logged from its first result), else what it was configured to ("auto" compares with none)
    precision = param(run, "resolved.precision") or param(run, "system.precision")
    reason = None if precision == opts.precision else (f"training precision {precision!r}, "
                                                       f"table needs {opts.precision!r}")
    v = {"epochs": float(epochs), "hours": float(hours), "min_per_epoch": 60.0 * float(hours) / float(epochs)}
    return v[col.key], reason, None


def _val_value(run: dict, col, opts: Options) -> tuple[float | None, str | None, str | None]:
    """The last value the run reported of a metric (a validation metric: no test protocol to check)."""
    key = col.metric or col.key
    v = value(run, f"metric.{key}")
    return (None, f"no {key} metric", None) if v is None else (float(v), None, None)


def _seed_value(run: dict, col, opts: Options) -> tuple[float | None, str | None, str | None]:
    """A 'seeds' column counts the runs of a cell: each gives its seed."""
    s = _seed(run)
    return (None, "no seed", None) if s is None else (float(s), None, None)


READERS = {"acc": _acc_value, "time": _time_value, "val": _val_value, "seeds": _seed_value}


def run_values(sel: pd.DataFrame, spec: TableSpec, opts: Options) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(values, excluded): a value per (run, column) that passes the protocol, and each one left out."""
    kept, dropped = [], []
    for run in sel.to_dict("records"):
        where = {"run_id": run["run_id"], "group": run["group"], "row": run["row"]}
        status = value(run, "meta.status")
        for col in spec.columns:
            if col.stage is not None and col.stage != value(run, "meta.stage"):
                continue  # another stage's column: nothing left out
            if status != "FINISHED":
                dropped.append({**where, "column": col.key, "reason": f"status {status}"})
                continue
            v, reason, subset = READERS[col.kind](run, col, opts)
            if v is None or reason:
                dropped.append({**where, "column": col.key, "reason": reason})
                continue
            kept.append({**where, "column": col.key, "value": v, "subset": subset,
                         "experiment": run.get("experiment"), "seed": _seed(run),
                         "config_hash": value(run, "meta.config_hash"),
                         "expected_seeds": value(run, "meta.expected_seeds"),
                         "teacher": is_teacher(run), "start_time": value(run, "start_time")})
    values = pd.DataFrame(kept, columns=["run_id", "group", "row", "column", "value", "subset", "experiment",
                                         "seed", "config_hash", "expected_seeds", "teacher", "start_time"])
    values, dups = _dedupe(values)
    excluded = pd.DataFrame(dropped + dups, columns=["run_id", "group", "row", "column", "reason"])
    return values, excluded


def _dedupe(values: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Keep one run per (cell, configuration, seed): the one that started last. Runs without a seed stay."""
    if values.empty:
        return values, []
    key = ["group", "row", "column", "config_hash", "seed"]
    order = values.assign(_t=values["start_time"].astype(float).fillna(-math.inf)).sort_values("_t", kind="stable")
    dup = order.duplicated(key, keep="last") & order["seed"].notna()
    keys = [tuple(None if pd.isna(x) else x for x in k) for k in order[key].itertuples(index=False, name=None)]
    kept = {k: rid for k, rid, d in zip(keys, order["run_id"], dup) if not d}
    dropped = [{"run_id": rid, "group": k[0], "row": k[1], "column": k[2],
                "reason": f"same configuration and seed as run {kept[k]}"}
               for k, rid, d in zip(keys, order["run_id"], dup) if d]
    return order[~dup].drop(columns="_t").sort_index(), dropped


# ---- layout ----------------------------------------------------------------------------------
def _natural(label: str) -> tuple:
    parts = re.split(r"(-?\d+(?:\.\d+)?)", label)
    return tuple((0, float(p), "") if re.fullmatch(r"-?\d+(?:\.\d+)?", p) else (1, 0.0, p) for p in parts if p)


def layout(spec: TableSpec, sel: pd.DataFrame) -> tuple[list[str], list[tuple], list]:
    """(groups, blocks, baselines): the paper's rows and groups first, then those found only in runs."""
    found_rows = list(dict.fromkeys(sel["row"]))
    known = {r for b in spec.blocks for r in b}
    extra = tuple(sorted((r for r in found_rows if r not in known), key=_natural))
    blocks, baselines = [tuple(b) for b in spec.blocks], list(spec.baselines)
    if not blocks:
        blocks, baselines = [extra], [spec.extra_rows_baseline]
    elif extra:
        blocks[-1] = blocks[-1] + extra
    order = {paper.group_key(g): i for i, g in enumerate(paper.paper_groups(spec.name))}
    groups = sorted(dict.fromkeys(sel["group"]), key=lambda g: (order.get(paper.group_key(g), len(order)),
                                                                  _natural(g)))
    return groups, blocks, baselines


def rank_rows(spec: TableSpec, values: pd.DataFrame, blocks, baselines) -> tuple[list[tuple], list]:
    """With ``spec.order_by``: the rows in one block, best first by that column's mean (ties, and after them the rows
    without one, in their order); the best row is the baseline the others are tested against."""
    if spec.order_by is None:
        return blocks, baselines
    col = next(c for c in spec.columns if c.key == spec.order_by)
    means = values[values["column"] == col.key].groupby("row")["value"].mean()
    rows = [r for b in blocks for r in b]
    ranked = sorted((r for r in rows if r in means), key=means.get, reverse=col.best == "max")
    return [tuple(ranked + [r for r in rows if r not in means])], [ranked[0] if ranked else None]


# ---- statistics ------------------------------------------------------------------------------
def summarize(values: pd.DataFrame, spec: TableSpec, groups, blocks, opts: Options) -> pd.DataFrame:
    """Every displayed cell: mean, std (ddof=1), n, expected seeds, and the runs behind it."""
    by_cell = {k: g for k, g in values.groupby(["group", "row", "column"], sort=False)}
    none = values.iloc[0:0]
    lines = []
    for group in groups:
        for b, block in enumerate(blocks):
            for row in block:
                for col in spec.columns:
                    lines.append(_cell(by_cell.get((group, row, col.key), none), spec, group, b, row, col, opts))
    return pd.DataFrame(lines)


def _cell(vals: pd.DataFrame, spec: TableSpec, group: str, block: int, row: str, col, opts: Options) -> dict:
    vals = vals.sort_values("seed", kind="stable")
    data = [float(x) for x in vals["value"]]
    n = len(data)
    seeds = col.kind == "seeds"  # its values are the seeds: it shows how many
    cell = {"group": group, "block": block, "row": row, "column": col.key, "n": n,
            "mean": float(n if seeds else np.mean(data)) if n else math.nan,
            "std": float(np.std(data, ddof=1)) if n >= 2 and not seeds else math.nan,
            "expected_seeds": _expected(vals, spec) if n else math.nan,
            "values": data, "run_ids": list(vals["run_id"]),
            "seeds": [None if pd.isna(s) else int(s) for s in vals["seed"]],
            "experiments": sorted(set(vals["experiment"])),
            "config_hashes": sorted({str(h) for h in vals["config_hash"].dropna()}),
            "subset": bool(vals["subset"].notna().any())}
    if opts.compare_paper:
        pv = paper.paper_value(spec.name, group, row, col.key)
        cell["paper_mean"], cell["paper_std"] = pv if pv else (math.nan, math.nan)
    return cell


def _expected(v: pd.DataFrame, spec: TableSpec) -> int:
    asked = pd.to_numeric(v["expected_seeds"], errors="coerce").dropna()
    if not asked.empty:
        return int(asked.max())
    return 1 if v["teacher"].all() else spec.default_seeds


def welch_p(a, b) -> float:
    """Two-sided p of Welch's t-test; NaN when either side has fewer than two values."""
    if len(a) < 2 or len(b) < 2:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def mark(cells: pd.DataFrame, spec: TableSpec, blocks, baselines, opts: Options) -> pd.DataFrame:
    """Add bold / underline / missing_seeds / p_value / not_significant to the summarized cells."""
    cells = cells.copy()
    cells["bold"] = False
    cells["underline"] = False
    cells["missing_seeds"] = (cells["n"] > 0) & (cells["n"] < cells["expected_seeds"])
    cells["p_value"] = math.nan
    cells["not_significant"] = False
    columns = {c.key: c for c in spec.columns}
    for (_, b, col), part in cells.groupby(["group", "block", "column"], sort=False):
        _rank(cells, part, spec, columns[col])
        if columns[col].tested:
            _test(cells, part, spec, baselines[b], opts.alpha)
    return cells


def _rank(cells: pd.DataFrame, part: pd.DataFrame, spec: TableSpec, col) -> None:
    if spec.emphasis == "none" or not col.best:
        return
    ranked = part[(part["n"] > 0) & ~part["row"].isin(spec.unranked)]
    shown = ranked["mean"].round(col.decimals)
    levels = sorted(set(shown), reverse=col.best == "max")
    if levels:
        cells.loc[shown.index[shown == levels[0]], "bold"] = True
    if spec.emphasis == "bold+underline" and len(levels) > 1:
        cells.loc[shown.index[shown == levels[1]], "underline"] = True


def _test(cells: pd.DataFrame, part: pd.DataFrame, spec: TableSpec, baseline: str | None, alpha: float) -> None:
    base = part[(part["row"] == baseline) & (part["n"] > 0)]
    if base.empty:
        return
    ref = base["values"].iloc[0]
    for i, line in part.iterrows():
        if line["row"] == baseline or line["n"] == 0 or line["row"] in spec.unranked:
            continue
        p = welch_p(line["values"], ref)
        cells.at[i, "p_value"] = p
        cells.at[i, "not_significant"] = not (p < alpha)


# ---- notes -----------------------------------------------------------------------------------
def _drop_empty_columns(spec: TableSpec, cells: pd.DataFrame, excluded: pd.DataFrame, opts: Options):
    """Columns no run fills (and the paper does not either, when compared) are left out, with a note."""
    keep, notes = [], []
    for col in spec.columns:
        mine = cells[cells["column"] == col.key]
        has_paper = opts.compare_paper and mine["paper_mean"].notna().any()
        if (mine["n"] > 0).any() or has_paper:
            keep.append(col)
            continue
        why = excluded.loc[excluded["column"] == col.key, "reason"].value_counts()
        detail = "; ".join(f"{n} x {r}" for r, n in why.items()) or "no run reports it"
        notes.append(f"{col.label} left out: no result matches the table's protocol ({detail}).")
    return keep, notes


def _protocol_note(spec: TableSpec, opts: Options) -> str:
    p = opts.protocol()
    if all(c.kind == "time" for c in spec.columns):
        return (f"Cells: mean over seeds (sample standard deviation, ddof=1) of runs trained in {p.precision} "
                f"and tagged for the {spec.reads_tag or spec.name} table.")
    which, teacher = ("Test protocol", "") if spec.stages else ("Protocol", " (FixMatch: teacher)")
    return (f"Cells: mean over seeds (sample standard deviation, ddof=1). {which}: checkpoint {p.checkpoint}"
            f"{teacher}, {p.precision}, eps 8/255 (MNIST: 0.3), L-inf, PGD step eps/10, "
            f"{p.restarts} restart, full test set{' (or a labelled subset)' if p.allow_subset else ''}.")


def _notes(spec: TableSpec, cells: pd.DataFrame, values: pd.DataFrame, opts: Options) -> list[str]:
    notes = [_protocol_note(spec, opts)]
    if cells["missing_seeds"].any():
        notes.append(f"{MARKS['missing']} fewer seeds than the sweep asked for.")
    if cells["not_significant"].any():
        notes.append(f"{MARKS['not_significant']} difference to the {'best' if spec.order_by else 'baseline'} row "
                     f"not significant (Welch's t-test, p >= {opts.alpha:g}, or fewer than two seeds).")
    if cells["subset"].any():
        names = ", ".join(sorted(set(values["subset"].dropna())))
        notes.append(f"{MARKS['subset']} includes results on a test subset ({names}): not the paper's protocol.")
    mixed = cells[cells["config_hashes"].map(len) > 1]
    for line in mixed.drop_duplicates(["group", "row"]).itertuples():
        notes.append(f"Cell {line.group} / {line.row} mixes {len(line.config_hashes)} configurations "
                     f"({', '.join(line.config_hashes)}).")
    return notes


def _detail_note(spec: TableSpec, sel: pd.DataFrame, values: pd.DataFrame) -> list[str]:
    """What the short row labels (Lin., Cur.) stand for in these runs, next to the paper's meaning."""
    if spec.detail_of is None:
        return []
    used = sel[sel["run_id"].isin(values["run_id"])]
    found = {}
    for run in used.to_dict("records"):
        glo = run["row"].rsplit("|", 1)[0]  # (a label may hold "|" itself)
        if glo != "none" and run["row"] != spec.standard_row:  # standard training attacks nothing: no schedule
            found.setdefault(glo, set()).add(spec.detail_of(run))
    if not found:
        return []
    ours = ", ".join(f"{glo} = {' / '.join(sorted(map(str, d)))}" for glo, d in sorted(found.items()))
    return [f"Glo. in these runs: {ours} (paper: {spec.paper_detail})."]


def _paper_notes(spec: TableSpec, sel: pd.DataFrame) -> list[str]:
    epochs = sorted({int(e) for e in sel.get("param.optim.epochs", pd.Series(dtype=float)).dropna()})
    found = f" Our runs: {', '.join(map(str, epochs))} epochs." if epochs else ""
    timing = all(c.kind == "time" for c in spec.columns)
    return [f"Paper values from {spec.paper} of the SSAT-MBI paper (CVPR 2025); '—' where it has none.",
            *(paper.TIME_DIFFERENCES if timing else paper.PROTOCOL_DIFFERENCES),
            "Training length: the paper trains 100 epochs (120 or 200 for the AWR variants)." + found]


# ---- all together ----------------------------------------------------------------------------
def _caption(spec: TableSpec, values: pd.DataFrame) -> TableSpec:
    """A caption's ``{seeds}``: the seeds of the ranking column's runs (' 10, 11')."""
    if "{seeds}" not in spec.caption:
        return spec
    seeds = sorted({int(s) for s in values.loc[values["column"] == spec.order_by, "seed"].dropna()})
    return replace(spec, caption=spec.caption.replace("{seeds}", f" {', '.join(map(str, seeds))}" if seeds else ""))


def build(runs: pd.DataFrame, spec: TableSpec, opts: Options = Options()) -> TableResult:
    """The whole table: cells with statistics and marks, what was left out, and the notes."""
    unpublished = opts.compare_paper and not spec.paper
    opts = replace(opts, compare_paper=False) if unpublished else opts
    sel = select_runs(runs, spec, opts)
    values, excluded = run_values(sel, spec, opts)
    if values.empty:
        reasons = excluded["reason"].value_counts().head(5)
        extra = "; left out: " + "; ".join(f"{n} x {r}" for r, n in reasons.items()) if len(reasons) else ""
        raise TableError(_no_runs_message(runs, spec, opts) + extra)
    groups, blocks, baselines = layout(spec, sel[sel["run_id"].isin(values["run_id"])])
    blocks, baselines = rank_rows(spec, values, blocks, baselines)
    cells = mark(summarize(values, spec, groups, blocks, opts), spec, blocks, baselines, opts)
    columns, dropped_notes = _drop_empty_columns(spec, cells, excluded, opts)
    cells = cells[cells["column"].isin([c.key for c in columns])].reset_index(drop=True)
    notes = _notes(spec, cells, values, opts) + _detail_note(spec, sel, values) + dropped_notes
    if opts.compare_paper:
        notes += _paper_notes(spec, sel)
    if unpublished:
        notes.append(f"The paper has no table '{spec.name}': nothing to compare.")
    return TableResult(_caption(spec, values), opts, groups, blocks, columns, cells, excluded, notes)

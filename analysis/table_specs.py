"""One `TableSpec` per paper table: its rows, columns, column groups, emphasis rule and baseline rows.

(A table spec, not a sweep spec: the YAML sweep specs are `sweeps.spec.Spec`.)

How a run finds its row: rows are keyed on the run's **parameters** (docs/tracking.md), never on the
free-text ``ssat.row`` tag. The params are typed and validated by ``ssat.config`` (``attack.schedule`` and
``method.name`` registry keys, ``method.interpolate`` a boolean), so a row label is derived the same way for
every sweep, and a run tagged with a typo cannot land in the wrong row. What a row *reads* comes from the run
record too: the labels of its method and schedule are tags the registry entries wrote (``ssat.method_label``,
``ssat.schedule_label``, ``ssat.schedule_title``, ``ssat.schedule_row``), so a method or schedule added to
``ssat/methods.py`` or ``ssat/schedules.py`` gets its rows with no change here. Runs recorded before issue 27 have
no such tags: `LEGACY_METHOD_LABELS` and `LEGACY_SCHEDULE_LABELS` (frozen) give the labels of the methods and
schedules there were; a run with neither is an error (`LabelError`), never a silently missing row. For the ablation
tables (Tables 2 and 4) the row is (global epsilon schedule family, interpolation): ``none|no-int``,
``Lin.|no-int``, ``Cur.|no-int``, ``none|int``, ``Lin.|int``, ``Cur.|int`` - the paper's "Lin." is
Linear-60 and "Cur." Curious-(1.25,70), but a shortened run (e.g. the MNIST-5k demo) scales ``t``, so
the family, not the exact ``t``, picks the row; a cell that mixes configurations says so in a note.
For Table 3 the row is the schedule as the run's spec gave it, before ``--epochs``
rescaled it (the ``spec.t`` and ``spec.epochs`` params), so a 100-epoch Linear-60 spec run for 10 epochs
is the Linear-60 row; a spec of another length says what it ran: ``Linear-4/6ep``.

Which runs a table reads is decided by the ``ssat.table`` tag (the sweep spec's declaration; see
`analysis.cells.select_runs`), and by the population each ``row_of`` accepts (e.g. the ablation is
``method.name == ssat-mbi``). Parameters are read under today's names (``analysis.collect`` renames those of
older runs).

The ``search`` table (`search_spec`) is none of the paper's: a search sweep's confirmed configurations, rows labelled
by ``ssat.label`` and ordered by the confirm stage's mean of a metric (``TableSpec.order_by``); it reads its stages'
trials whatever their tag (``TableSpec.stages``), prepared by `search_runs`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import pandas as pd

from .run_labels import (STANDARD_ROW, dataset_group, is_teacher, method_label, num_text, param,
                         schedule_label, schedule_short, schedule_title, seed_of, value)


@dataclass(frozen=True)
class Column:
    """One column: ``key`` names the metric (test/<ckpt>/<key>), a timing quantity, or (kind 'val') the metric."""

    key: str
    label: str
    kind: str = "acc"       # 'acc': a protocol-checked test accuracy; 'time': from time/* metrics; 'val': the last
                            # value of metric <metric or key> (no test protocol); 'seeds': a cell's number of seeds
    decimals: int = 2
    tested: bool = True     # Welch's test against the baseline row (not for a fixed setting like epochs)
    best: str = "max"       # which mean is emphasised: 'max', 'min', or '' (never)
    stage: str | None = None  # only runs of this stage fill it (None: every run the table reads)
    metric: str = ""        # what a 'val' column reads when not its key (two columns of one metric)


@dataclass(frozen=True)
class TableSpec:
    """Layout and rules of one table; `analysis.cells` and `analysis.render` do the rest generically."""

    name: str
    paper: str                                   # where it is in the paper ('Table 2', 'Fig. 4')
    caption: str
    columns: tuple[Column, ...]
    row_of: Callable[[Mapping], str | None]      # run record -> row label, None: not in this table
    blocks: tuple[tuple[str, ...], ...] = ()     # the paper's rows, in blocks (midrules); may be empty
    baselines: tuple[str | None, ...] = ()       # per block: the row others are tested against
    emphasis: str = "bold"                       # 'none' | 'bold' | 'bold+underline'
    unranked: frozenset = frozenset()            # rows never emphasised (FixMatch, quoted references)
    label_headers: tuple[str, ...] = ("Method",)
    label_cells: Callable[[str], tuple[str, ...]] = lambda row: (row,)
    group_of: Callable[[Mapping], str | None] = lambda run: dataset_group(run)
    default_seeds: int = 3                       # seeds the paper ran, when a run does not say
    extra_rows_baseline: str | None = None       # baseline of rows found only in the runs
    reads_tag: str = ""                          # the ssat.table tag of its runs ("": its own name)
    detail_of: Callable[[Mapping], str | None] | None = None  # what a row label stands for in a run
    paper_detail: str = ""                       # what the paper's row labels stand for
    standard_row: str | None = None              # the row of standard-training runs (is_standard); None: left out
    stages: tuple[str, ...] = ()                 # read these stages whatever the runs' table tag (the search table)
    prepare: Callable[[list[dict]], list[dict]] | None = None  # the runs it reads -> as it reads them
    order_by: str | None = None                  # rows best first by this column's mean; the best row is the baseline


class TableError(ValueError):
    """A table that cannot be built from the runs given (with what was found instead)."""


def main_row(run: Mapping) -> str | None:
    """Table 1: the method's label; the teacher run is the FixMatch row."""
    return "FixMatch" if is_teacher(run) else method_label(run)


def method_row(run: Mapping) -> str | None:
    """Training-time table: the method's label (teachers have no row)."""
    return None if is_teacher(run) else method_label(run)


def ablation_row(run: Mapping, method: str) -> str | None:
    """Tables 2/4: '<schedule label>|<int or no-int>' for runs of `method`."""
    if is_teacher(run) or param(run, "method.name") != method:
        return None
    interp = param(run, "method.interpolate")
    if interp is None:
        return None
    return f"{schedule_short(run)}|{'int' if bool(interp) else 'no-int'}"


def schedules_row(run: Mapping) -> str | None:
    """Table 3: SSAT-MBI runs with interpolation on, by schedule."""
    if is_teacher(run) or param(run, "method.name") != "ssat-mbi" or param(run, "method.interpolate") is not True:
        return None
    return schedule_label(run)


def supervised_row(run: Mapping) -> str | None:
    """Table 6: TRADES alone, or TRADES with interpolation and Curious ('TRADES+Ours'); any other combination
    says what it ran: 'TRADES (Lin.|no-int)'."""
    if param(run, "method.name") != "trades":
        return None
    interp, sched = bool(param(run, "method.interpolate")), param(run, "attack.schedule")
    if not interp and sched == "const":
        return "TRADES"
    if interp and sched == "curious":
        return "TRADES+Ours"
    return f"{method_label(run)} ({schedule_short(run)}|{'int' if interp else 'no-int'})"


def sweep_row(name: str) -> Callable[[Mapping], str | None]:
    """Figs. 4-5 as tables: SSAT-MBI runs, one row per value of the swept parameter `name` (its dotted name, shown
    without its section: 'beta=0.4')."""
    short = name.rsplit(".", 1)[-1]

    def row(run: Mapping) -> str | None:
        v = param(run, name)
        if is_teacher(run) or param(run, "method.name") != "ssat-mbi" or v is None:
            return None
        return f"{short}={num_text(v)}"
    return row


def rho_group(run: Mapping) -> str | None:
    """Fig. 5's four settings: beta in {0.4, 1} x (Const | Curious), per dataset group."""
    beta, sched = param(run, "method.beta"), param(run, "attack.schedule")
    if beta is None or sched is None:
        return None
    return f"{dataset_group(run)} beta={num_text(beta)}, {schedule_title(run)}"


def ablation_cells(row: str) -> tuple[str, str]:
    """'Lin.|int' -> ('Lin.', '✓'): the paper's two label columns Glo. and Int.; the standard-training row spans
    them ('standard training', '')."""
    if row == STANDARD_ROW:
        return row, ""
    glo, interp = row.rsplit("|", 1)
    return ("✗" if glo == "none" else glo), ("✓" if interp == "int" else "✗")


# ---- the search table: a search sweep's configurations, ranked by its confirm stage --------------------------
SEARCH_METRIC = "val/pgd10"
SEARCH_STAGES = ("confirm", "search")


def _short(v) -> str:
    """A sampled value as a label shows it (sweeps' trial names): on/off, floats to 2 significant digits."""
    if pd.api.types.is_bool(v):
        return "on" if v else "off"
    return f"{v:.2g}" if pd.api.types.is_float(v) else str(v)


def _sampled_text(run: Mapping) -> str:
    """An old store's sampled values (``param.sampled.<key>``): text as itself, any other value by its key's last
    part (``linear t=3 rho0=0.12``)."""
    parts = []
    for col in sorted(k for k in run if k.startswith("param.sampled.")):
        v = value(run, col)
        if v is not None:
            parts.append(v if isinstance(v, str) else f"{col.split('.')[-1]}={_short(v)}")
    return " ".join(parts)


def _count(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _old_label(family: list[dict], key: str) -> str:
    """The label of a configuration recorded before ``ssat.label``, from its runs (`family`: its search and confirm
    runs): the confirm row (``confirm-1``, its search rank) and the values its search trial sampled, else `key`."""
    rows = sorted({str(value(r, "meta.row")) for r in family
                   if value(r, "meta.stage") == "confirm" and value(r, "meta.row") is not None})
    sampled = [t for t in map(_sampled_text, family) if t]
    return " ".join(rows[:1] + sampled[:1]) or f"#{key}"


def search_runs(runs: list[dict]) -> list[dict]:
    """The search table's runs: one sweep's confirm trials and the search trials of the configurations they confirm
    (same ``ssat.config_hash``), each with its label (``ssat.label``, else `_old_label`) and the seeds its cells
    expect: a confirm run the number of confirm seeds among the sweep's confirm runs (their ssat.expected_seeds tag
    counts the search's seeds), a search trial one."""
    sweeps = sorted({str(value(r, "meta.sweep")) for r in runs if value(r, "meta.sweep") is not None})
    if len(sweeps) > 1:
        raise TableError(f"table 'search' ranks the configurations of one sweep; these runs are of {len(sweeps)} "
                         f"({', '.join(sweeps)}): read one sweep's experiment")
    confirm = [r for r in runs if value(r, "meta.stage") == "confirm"]
    confirmed = {value(r, "meta.config_hash") for r in confirm} - {None}
    kept = confirm + [r for r in runs if value(r, "meta.stage") != "confirm"
                      and value(r, "meta.config_hash") in confirmed]
    families: dict = {}
    for r in kept:
        families.setdefault(value(r, "meta.config_hash") or r["run_id"], []).append(r)
    seeds = {seed_of(r) for r in confirm} - {None}
    out = []
    for key, family in families.items():
        label = _old_label(family, key)
        for r in family:
            confirms = value(r, "meta.stage") == "confirm"
            expected = max(len(seeds), _count(value(r, "meta.expected_seeds"))) if confirms else 1
            out.append({**r, "meta.expected_seeds": expected, "meta.label": value(r, "meta.label") or label})
    return out


def search_row(run: Mapping) -> str | None:
    """The search table's row: the configuration's label, the same for its search and confirm runs."""
    label = value(run, "meta.label")
    return None if label is None else str(label)


def search_spec(metric: str = SEARCH_METRIC, mode: str = "max") -> TableSpec:
    """The search table, ranking by `metric` (`mode`: 'max' or 'min', which value is best)."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode {mode!r}; allowed: 'max' or 'min'")
    cols = (Column(metric, metric, "val", best=mode, stage="confirm"),
            Column("clean", "Test clean", stage="confirm"), Column("pgd20", "Test PGD-20", stage="confirm"),
            Column("seeds", "Seeds", "seeds", 0, tested=False, best="", stage="confirm"),
            Column(f"search/{metric}", f"Search {metric}", "val", tested=False, best=mode, stage="search",
                   metric=metric))
    caption = (f"The search's confirmed configurations, best first by the confirm stage's mean {metric} "
               f"({'highest' if mode == 'max' else 'lowest'} first; the last value each confirm run reported, over "
               f"its seeds{{seeds}}), with the confirm runs' test accuracies; Search {metric}: the search trial of "
               "the same configuration, one seed at the search's budget")
    return TableSpec("search", "", caption, cols, search_row, label_headers=("Configuration",),
                     default_seeds=1, stages=SEARCH_STAGES, prepare=search_runs, order_by=metric)


# ---- the specs -------------------------------------------------------------------------------
ACC5 = (Column("clean", "Clean"), Column("pgd10", "PGD-10"), Column("pgd20", "PGD-20"),
        Column("pgd40", "PGD-40"), Column("autoattack", "AutoAttack"))
ACC3 = (ACC5[0], ACC5[2], ACC5[4])
TIME = (Column("epochs", "Epochs", "time", 0, tested=False), Column("hours", "Time (hrs)", "time"),
        Column("min_per_epoch", "Time/epoch (min)", "time"))
ABLATION_ROWS = ("none|no-int", "Lin.|no-int", "Cur.|no-int", "none|int", "Lin.|int", "Cur.|int")
SCHEDULE_ROWS = ("Const", "Linear-50", "Linear-60", "Linear-70", "Curious-(1.25,50)", "Curious-(1.25,60)",
                 "Curious-(1.25,70)", "Curious-(1.5,50)", "Curious-(1.5,60)", "Curious-(1.5,70)")

SPECS: dict[str, TableSpec] = {s.name: s for s in (
    TableSpec("main", "Table 1", "Natural accuracy (%) and robustness of semi-supervised adversarial training "
              "methods", ACC5, main_row,
              blocks=(("FixMatch",), ("UAT++", "RST", "SSAT-MBI"), ("SRST-AWR", "SSAT-MBI-AWR")),
              baselines=(None, "RST", "SRST-AWR"), emphasis="bold", unranked=frozenset({"FixMatch"})),
    TableSpec("ablation", "Table 2", "Ablation study of SSAT-MBI (Glo.: global epsilon scheduling, "
              "Int.: interpolated adversarial examples)", ACC3, lambda r: ablation_row(r, "ssat-mbi"),
              blocks=(ABLATION_ROWS,), baselines=("none|no-int",), emphasis="bold",
              unranked=frozenset({STANDARD_ROW}), label_headers=("Glo.", "Int."), label_cells=ablation_cells,
              detail_of=schedule_label, paper_detail="Lin. = Linear-60, Cur. = Curious-(1.25,70)",
              standard_row=STANDARD_ROW),
    TableSpec("schedules", "Table 3", "Global epsilon scheduling strategies (interpolation on)", ACC3,
              schedules_row, blocks=(SCHEDULE_ROWS,), baselines=("Const",), emphasis="bold+underline",
              label_headers=("Strategy",)),
    TableSpec("awr-ablation", "Table 4", "Ablation study of SSAT-MBI-AWR (Glo.: global epsilon scheduling, "
              "Int.: interpolated adversarial examples)", ACC3, lambda r: ablation_row(r, "ssat-mbi-awr"),
              blocks=(ABLATION_ROWS,), baselines=("none|no-int",), emphasis="bold+underline",
              label_headers=("Glo.", "Int."), label_cells=ablation_cells, detail_of=schedule_label,
              paper_detail="Lin. = Linear-60, Cur. = Curious-(1.25,60)"),
    TableSpec("supervised", "Tables 6-7", "Performance with fully labeled data", ACC3, supervised_row,
              blocks=(("Customized AT", "MMA"), ("TRADES", "TRADES+FAT", "TRADES+DAAT", "TRADES+Ours")),
              baselines=(None, "TRADES"), emphasis="bold", unranked=frozenset({"Customized AT", "MMA"})),
    TableSpec("beta-sensitivity", "Fig. 4", "SSAT-MBI with varying beta", ACC3, sweep_row("method.beta"),
              emphasis="bold", label_headers=("beta",), label_cells=lambda r: (r.split("=", 1)[1],),
              extra_rows_baseline="beta=0.4"),
    TableSpec("rho-sensitivity", "Fig. 5", "SSAT-MBI with varying initial rho (doubled at epoch 75 of 100)",
              ACC3, sweep_row("method.rho0"), emphasis="bold", label_headers=("rho0",),
              label_cells=lambda r: (r.split("=", 1)[1],), group_of=rho_group, extra_rows_baseline="rho0=0.05"),
    TableSpec("training-time", "Table 5", "Average training time of the main-table runs (fp32 training)", TIME,
              method_row, blocks=(("UAT++", "RST", "SSAT-MBI"), ("SRST-AWR", "SSAT-MBI-AWR")),
              baselines=("RST", "SRST-AWR"), emphasis="none", reads_tag="main"),
    search_spec(),
)}


def get_spec(name: str, metric: str | None = None, mode: str | None = None) -> TableSpec:
    """The spec of a table; an unknown name lists the valid ones. `metric` and `mode` (None: val/pgd10, max) are
    what the search table ranks by; no other table takes them."""
    try:
        spec = SPECS[name]
    except KeyError:
        raise ValueError(f"unknown table {name!r}; valid tables: {', '.join(SPECS)}") from None
    if metric is None and mode is None:
        return spec
    if spec.order_by is None:
        raise ValueError(f"table {name!r} ranks by no metric: a metric and mode are for the search table")
    return search_spec(metric or SEARCH_METRIC, mode or "max")

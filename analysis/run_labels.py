"""What a run record says, read the same way by every table: a field of it (any flavour of missing as None), its
dataset and column group, its method's and schedule's labels (the tags the registry entries wrote, else the frozen
map of runs recorded before issue 27: analysis.legacy), whether it is a teacher or standard training, and the
paper's length of its run with the paper's t a shorter run was scaled from (Table 3's rows)."""
from __future__ import annotations

import math
from string import Formatter
from typing import Mapping

import pandas as pd

from .legacy import LEGACY_METHOD_LABELS, LEGACY_SCHEDULE_LABELS, PAPER_T


# ---- reading a run record --------------------------------------------------------------------
def value(run: Mapping, key: str):
    """A field of a run record, with every flavour of missing (None, NaN, pd.NA) as None."""
    v = run.get(key)
    if v is None:
        return None
    try:
        return None if pd.isna(v) else v
    except (TypeError, ValueError):
        return v


def param(run: Mapping, name: str):
    return value(run, f"param.{name}")


def dataset_of(run: Mapping) -> str | None:
    """The run's dataset: its param, else the teacher's ``ssat.dataset`` tag, else the group prefix."""
    ds = param(run, "data.dataset") or value(run, "meta.dataset")
    group = value(run, "meta.column_group")
    return ds or (str(group).split("/")[0] if group else None)


def dataset_group(run: Mapping) -> str | None:
    """Column group 'dataset/model': the ``ssat.column_group`` tag, else the dataset and model params."""
    group = value(run, "meta.column_group")
    if group:
        return str(group)
    ds, model = param(run, "data.dataset"), param(run, "model.name")
    if ds and model:
        return f"{ds}/{model}"
    return dataset_of(run)


def num_text(x) -> str:
    return f"{float(x):g}"


def seed_of(run: Mapping):
    """The run's seed: the ``ssat.seed`` tag, else the ``seed`` param."""
    s = value(run, "meta.seed")
    return s if s is not None else param(run, "seed")


# ---- labels: from the run record, else the frozen map of runs recorded before issue 27 -------------------
class LabelError(ValueError):
    """A run whose method or schedule has no label to show: no label tag and not in the legacy map."""


STANDARD_ROW = "standard training"


def run_name(run: Mapping) -> str:
    """How an error names a run: its name, experiment and id."""
    name, rid, exp = value(run, "run_name"), value(run, "run_id"), value(run, "experiment")
    where = ", ".join(x for x in (f"experiment {exp!r}" if exp else "", f"id {rid}" if rid else "") if x)
    return f"{name or rid or '(unnamed)'!r}" + (f" ({where})" if where else "")


def _missing_label(run: Mapping, what: str, name, tag: str, registry: str, known) -> LabelError:
    return LabelError(f"run {run_name(run)}: {what} {name!r} has no label: its run record has no {tag} tag, and it "
                      f"is none of the {what}s recorded before issue 27 ({', '.join(known)}). Give its entry in "
                      f"{registry} a label; the runs it trains record it")


def method_label(run: Mapping) -> str:
    """The method's row label (Tables 1, 5, 6): the ``ssat.method_label`` tag, else `LEGACY_METHOD_LABELS`."""
    tag = value(run, "meta.method_label")
    if tag is not None:
        return str(tag)
    name = param(run, "method.name")
    if name in LEGACY_METHOD_LABELS:
        return LEGACY_METHOD_LABELS[name]
    raise _missing_label(run, "method", name, "ssat.method_label", "ssat/methods.py", LEGACY_METHOD_LABELS)


def _schedule(run: Mapping, field: str) -> str:
    tag = value(run, f"meta.schedule_{field}")
    if tag is not None:
        return str(tag)
    name = param(run, "attack.schedule")
    if name in LEGACY_SCHEDULE_LABELS:
        return LEGACY_SCHEDULE_LABELS[name][field]
    raise _missing_label(run, "schedule", name, f"ssat.schedule_{field}", "ssat/schedules.py", LEGACY_SCHEDULE_LABELS)


def schedule_short(run: Mapping) -> str:
    """The schedule's label in the ablation tables' Glo. column: 'none' (no schedule), 'Lin.', 'Cur.'."""
    return _schedule(run, "label")


def schedule_title(run: Mapping) -> str:
    """The schedule's name: 'Const', 'Linear', 'Curious' (Fig. 5's settings)."""
    return _schedule(run, "title")


# ---- row keys --------------------------------------------------------------------------------
def is_teacher(run: Mapping) -> bool:
    return value(run, "meta.kind") == "teacher"


def is_standard(run: Mapping) -> bool:
    """Standard training: the method's code with lambda 0 (the mnist5k-standard preset is ssat-mbi with lambda 0,
    schedule const, no interpolation). `analysis.cells.select_runs` puts it in the table's standard_row, never in
    a method's row (in Table 2 it would pass for 'none|no-int'). Runs logged without the param count as
    adversarial."""
    lam = param(run, "method.lam")
    return lam is not None and float(lam) == 0.0


def paper_epochs(run: Mapping) -> int:
    """The paper's training length for the run's method and dataset (appendix A.3)."""
    method = param(run, "method.name")
    if method in ("srst-awr", "ssat-mbi-awr"):
        return 120 if method == "ssat-mbi-awr" and dataset_of(run) != "cifar100" else 200
    return 100


def paper_t(t: int, epochs: int, paper: int) -> int | None:
    """The paper's t (50, 60 or 70 of its `paper` epochs) that ssat.config.scale_epochs makes `t` of in `epochs`,
    when exactly one does; else None."""
    found = [c for c in PAPER_T if max(1, math.floor(c * epochs / paper + 0.5)) == t]
    return found[0] if len(found) == 1 else None


def schedule_label(run: Mapping) -> str | None:
    """Table 3's row name: the schedule's row format (``ssat.schedule_row``: Const, Linear-{t},
    Curious-({gamma},{t})) with the t of the run's spec (before ``--epochs`` rescaled it); a spec of another length
    than the paper's names the paper's t its t was scaled from (`paper_t`: Linear-42 of 70 epochs is Linear-60),
    else 't/<epochs>ep'; gamma as '%g'."""
    fmt = _schedule(run, "row")
    fields = {f for _, f, _, _ in Formatter().parse(fmt) if f is not None}
    unknown = fields - {"t", "gamma"}
    if unknown:
        raise LabelError(f"run {run_name(run)}: schedule row format {fmt!r} has {{{sorted(unknown)[0]}}}; "
                         "it may hold {t} and {gamma} only")
    values = {}
    if "t" in fields:
        t, epochs = param(run, "spec.t"), param(run, "spec.epochs")
        if t is None:
            return None
        t, epochs, paper = int(t), None if epochs is None else int(epochs), paper_epochs(run)
        back = None if epochs in (None, paper) else paper_t(t, epochs, paper)  # a paper row run shorter
        values["t"] = str(t) if epochs == paper else str(back) if back else f"{t}/{epochs}ep"
    if "gamma" in fields:
        gamma = param(run, "attack.gamma")
        if gamma is None:
            return None
        values["gamma"] = num_text(gamma)
    return fmt.format(**values)

"""The numbers the SSAT-MBI paper (CVPR 2025) reports, shipped as data, and how its protocol differs.

``data/paper_results.csv`` was typed once from the paper's LaTeX source (Tables 1-7 there: main,
ablation, schedules, awr-ablation, the training-time table, and the two supervised tables, kept as one
``supervised`` table with groups ``cifar10/wrn-28-5`` and ``cifar10/resnet18``). Columns:
``table, group, row, column, mean, std, emphasis``; ``std`` is empty where the paper gives none
(FixMatch, supervised, training time); ``emphasis`` is the paper's bold/underline, used by a test to check
our emphasis rules. The TRADES and TRADES+DAAT rows of the ResNet-18 group are quoted by the paper from
the DAAT paper. Figs. 4-5 (beta, rho) are plots without printed numbers: nothing to ship for them.
``tests/unit/analysis/test_paper.py`` checks this file against the .tex.
"""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

import pandas as pd

PAPER_TABLES = ("main", "ablation", "schedules", "awr-ablation", "supervised", "training-time")

# How our protocol differs from the paper's, said beside every --compare-paper table.
PROTOCOL_DIFFERENCES = (
    "Checkpoint: the paper selected the reported checkpoint on the test set; ours is the best "
    "checkpoint on a held-out validation split (PGD-10 accuracy), never chosen on the test set.",
    "AutoAttack: ours is the standard AutoAttack (APGD-CE, APGD-T, FAB-T, Square) at exactly the table's "
    "eps; the paper's code ran untargeted FAB at eps 0.031 instead of 8/255.",
    "PGD: both evaluate with step eps/10, a uniform random start and one restart, in fp32.",
)

TIME_DIFFERENCES = (
    "Hardware: the paper's times come from its own GPUs; ours from the machines that ran the sweep, so "
    "compare the ratios between methods rather than the hours.",
)

_DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "svhn": "SVHN", "mnist5k": "MNIST-5k"}
_MODEL_NAMES = {"wrn": "WideResNet", "resnet": "ResNet"}


@lru_cache(maxsize=1)
def paper_results() -> pd.DataFrame:
    """The paper's reported numbers: table, group, row, column, mean, std (NaN if none), emphasis."""
    with resources.files("analysis").joinpath("data/paper_results.csv").open() as f:
        df = pd.read_csv(f, dtype={"table": str, "group": str, "row": str, "column": str, "emphasis": str},
                         keep_default_na=False, na_values={"std": [""], "mean": [""]})
    return df


def group_key(group: str) -> str:
    """A column group reduced for matching: 'cifar10/WideResNet-28-5' and 'cifar10/wrn-28-5' agree."""
    g = group.lower().replace("wideresnet", "wrn")
    return re.sub(r"[^a-z0-9/]", "", g)


def paper_value(table: str, group: str, row: str, column: str) -> tuple[float, float] | None:
    """(mean, std) the paper reports for one cell, or None when the paper has no such cell."""
    df = paper_results()
    hit = df[(df["table"] == table) & (df["row"] == row) & (df["column"] == column)]
    hit = hit[hit["group"].map(group_key) == group_key(group)]
    if hit.empty:
        return None
    return float(hit["mean"].iloc[0]), float(hit["std"].iloc[0])


def paper_groups(table: str) -> list[str]:
    """The paper's column groups of a table, in the paper's order."""
    df = paper_results()
    return list(dict.fromkeys(df.loc[df["table"] == table, "group"]))


def group_title(group: str) -> str:
    """'cifar10/wrn-28-5' -> 'CIFAR-10 (WideResNet-28-5)', as the paper heads its column groups."""
    if "/" not in group:
        return group
    dataset, rest = group.split("/", 1)
    model = rest.split(" ", 1)
    m = re.match(r"^([a-z]+)(.*)$", model[0])
    name = _MODEL_NAMES.get(m.group(1), m.group(1)) + m.group(2) if m else model[0]
    suffix = f" {model[1]}" if len(model) > 1 else ""
    return f"{_DATASET_NAMES.get(dataset, dataset)} ({name}){suffix}"

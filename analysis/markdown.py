"""Markdown table rows, escaped in one place: every Markdown table analysis writes (the paper tables, the AutoAttack
breakdown, the convergence report) builds its rows here, so a run name or label holding ``|`` (``curious|on-seed0``,
``Cur.|int``) stays one cell."""
from __future__ import annotations

from typing import Iterable


def md_cell(text) -> str:
    """One cell's text: ``|`` escaped (it would end the cell), line breaks as spaces (they would end the row)."""
    return " ".join(str(text).splitlines()).replace("|", "\\|")


def md_row(cells: Iterable) -> str:
    """'| a | b\\|c |': the cells escaped by `md_cell`."""
    return "| " + " | ".join(md_cell(c) for c in cells) + " |"


def md_align(aligns: Iterable[str]) -> str:
    """The delimiter row under a header: one of ':-:', ':-', '-:', '---' per column."""
    return "|" + "|".join(aligns) + "|"

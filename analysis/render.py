"""A built table (`analysis.cells.TableResult`) as Markdown, LaTeX or CSV.

md and latex keep the paper's layout: column groups stacked as blocks (as Table 1 stacks CIFAR-10, SVHN,
CIFAR-100), the paper's rows in its order with a rule between method blocks, each cell
``mean (std)`` with the emphasis of that paper table, followed by the marks of `analysis.cells.MARKS`;
notes (mark legend, protocol, left-out columns, the paper's protocol) follow the table.
csv is the machine-readable form of the same cells: one line per cell, numbers as numbers.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .cells import MARKS, TableResult
from .markdown import md_align, md_row
from .paper import group_title

FORMATS = ("md", "latex", "csv")
# Plain text -> LaTeX, one pass over the text (longest match first): LaTeX's specials escaped; characters
# that the default OT1 text font draws as other glyphs (< > | print as inverted marks and a dash) as their
# text or math forms; the paper's symbols (✗ ✓ † ‡ §) as its macros.
_TEX_REPLACE = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                ">=": r"$\geq$", "<=": r"$\leq$", "≥": r"$\geq$", "≤": r"$\leq$", ">": r"\textgreater{}",
                "<": r"\textless{}", "|": r"\textbar{}", "—": "---", "±": r"$\pm$",
                "✗": r"\xmark", "✓": r"\cmark", "†": r"$^{\dagger}$", "‡": r"$^{\ddagger}$", "§": r"$^{\S}$"}
_TEX_PATTERN = re.compile("|".join(map(re.escape, sorted(_TEX_REPLACE, key=len, reverse=True))))
# What a document needs in its preamble for these tables (the README says the same).
TEX_PREAMBLE = (r"\usepackage{booktabs,pifont}", r"\newcommand{\cmark}{\ding{51}}", r"\newcommand{\xmark}{\ding{55}}")
# how each format writes a cell's emphasis ('' = none) around the escaped text
MD_EMPHASIS = {"": "{}", "bold": "**{}**", "underline": "<u>{}</u>"}
TEX_EMPHASIS = {"": "{}", "bold": r"\textbf{{{}}}", "underline": r"\underline{{{}}}"}


def render(result: TableResult, fmt: str) -> str:
    """The table as text in `fmt` (md, latex or csv)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    return {"md": to_markdown, "latex": to_latex, "csv": to_csv}[fmt](result)


# ---- cell text -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Text:
    """One cell's plain text: `emphasis` ('', 'bold' or 'underline') applies to `head` only, `tail` (the
    spread and the marks) follows it unemphasised. Each format escapes and emphasises it its own way."""

    head: str
    tail: str = ""
    emphasis: str = ""


def _number(x: float, decimals: int) -> str:
    return f"{x:.{decimals}f}"


def cell_text(line, decimals: int) -> Text:
    """'mean (std)' with emphasis and marks; '—' for an empty cell; no std with a single seed."""
    if line["n"] == 0:
        return Text("—")
    emphasis = "bold" if line["bold"] else "underline" if line["underline"] else ""
    std = line["std"]
    spread = "" if math.isnan(std) or (decimals == 0 and std == 0) else f" ({_number(std, decimals)})"
    marks = "".join(MARKS[k] for k, flag in (("missing", line["missing_seeds"]),
                                             ("not_significant", line["not_significant"]),
                                             ("subset", line["subset"])) if flag)
    return Text(_number(line["mean"], decimals), spread + marks, emphasis)


def paper_text(line, decimals: int) -> str:
    """The paper's 'mean (std)' for a cell, '—' when the paper has no such cell."""
    mean, std = line.get("paper_mean", math.nan), line.get("paper_std", math.nan)
    if mean is None or math.isnan(mean):
        return "—"
    return _number(mean, decimals) + ("" if math.isnan(std) else f" ({_number(std, decimals)})")


def _header(result: TableResult) -> list[str]:
    head = list(result.spec.label_headers)
    for col in result.columns:
        head.append(col.label)
        if result.options.compare_paper:
            head.append(f"{col.label} (paper)")
    return head


def _grid(result: TableResult, group: str) -> list[list[list[Text]]]:
    """Blocks of rows of cell texts for one column group."""
    cells = result.cells[result.cells["group"] == group].set_index(["row", "column"])
    out = []
    for block in result.blocks:
        rows = []
        for row in block:
            texts = [Text(label) for label in result.spec.label_cells(row)]
            for col in result.columns:
                line = cells.loc[(row, col.key)]
                texts.append(cell_text(line, col.decimals))
                if result.options.compare_paper:
                    texts.append(Text(paper_text(line, col.decimals)))
            rows.append(texts)
        out.append(rows)
    return out


def _title(result: TableResult) -> str:
    spec = result.spec
    setup = f". {result.options.setup}" if result.options.setup else ""
    where = f"{spec.paper} of the paper, " if spec.paper else ""
    return f"{spec.caption} (ours; {where}table '{spec.name}'){setup}"


# ---- Markdown --------------------------------------------------------------------------------

def _md_cell(text: Text) -> str:
    return MD_EMPHASIS[text.emphasis].format(text.head) + text.tail


def to_markdown(result: TableResult) -> str:
    """One Markdown table per column group, under its title; notes as a list below."""
    lines = [f"**{_title(result)}**", ""]
    for group in result.groups:
        head = _header(result)
        lines += [f"*{group_title(group)}*", "", md_row(head), md_align(":-:" for _ in head)]
        for block in _grid(result, group):
            lines += [md_row([_md_cell(t) for t in r]) for r in block]
        lines.append("")
    lines += [f"- {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


# ---- LaTeX -----------------------------------------------------------------------------------
def tex(text: str) -> str:
    """Plain text -> LaTeX that prints it: 'p >= 0.05' -> 'p $\\geq$ 0.05', '†' -> '$^{\\dagger}$'."""
    return _TEX_PATTERN.sub(lambda m: _TEX_REPLACE[m.group()], text)


def to_latex(result: TableResult) -> str:
    """A booktabs tabular in the paper's style: one block per column group, rules between row blocks."""
    head = _header(result)
    width = len(head)
    lines = [f"% generated by analysis.tables (table {result.spec.name}); the runs behind every cell are in "
             "the .provenance.json beside this file",
             "% needs " + ", ".join(TEX_PREAMBLE),
             r"\begin{table}[t]", r"\centering", rf"\caption{{{tex(_title(result))}}}",
             rf"\begin{{tabular}}{{{'c' * width}}}"]
    for group in result.groups:
        lines += [r"\toprule", rf"\multicolumn{{{width}}}{{c}}{{{tex(group_title(group))}}} \\",
                  " & ".join(rf"\textbf{{{tex(h)}}}" for h in head) + r" \\", r"\midrule"]
        blocks = _grid(result, group)
        for i, block in enumerate(blocks):
            lines += [" & ".join(_tex_cell(c) for c in row) + r" \\" for row in block]
            if i < len(blocks) - 1 and block:
                lines.append(r"\midrule")
        lines.append(r"\bottomrule")
    lines += [r"\end{tabular}", r"\par\smallskip\footnotesize",
              " \\\\\n".join(tex(n) for n in result.notes), rf"\label{{table:ours-{result.spec.name}}}",
              r"\end{table}"]
    return "\n".join(lines) + "\n"


def _tex_cell(text: Text) -> str:
    return TEX_EMPHASIS[text.emphasis].format(tex(text.head)) + tex(text.tail)


# ---- CSV -------------------------------------------------------------------------------------
CSV_COLUMNS = ["table", "group", "row", "column", "mean", "std", "n", "expected_seeds", "emphasis",
               "missing_seeds", "not_significant", "p_value", "subset"]


def cells_frame(result: TableResult) -> pd.DataFrame:
    """The cells as a tidy frame (one line per cell, in display order), numbers as numbers."""
    c = result.cells.copy()
    c["table"] = result.spec.name
    c["emphasis"] = np.select([c["bold"].astype(bool), c["underline"].astype(bool)], ["bold", "underline"], "")
    c["expected_seeds"] = c["expected_seeds"].astype("Int64")
    cols = CSV_COLUMNS + (["paper_mean", "paper_std"] if result.options.compare_paper else [])
    return c[cols]


def to_csv(result: TableResult) -> str:
    return cells_frame(result).to_csv(index=False, lineterminator="\n")

"""The LaTeX of every table compiles with pdflatex in the preamble docs/analysis.md gives, and prints what it says.

Each table kind of `analysis.table_specs` is built from hand-typed runs that exercise every mark (†, ‡, §), single-seed
and empty cells, the row labels with '|' and the notes (Welch's 'p >= 0.05', left-out columns, the paper's
protocol), rendered with and without --compare-paper, wrapped in an article and compiled with
``pdflatex -halt-on-error``. pdflatex accepts '>' and '|' in text but the default font draws them as '¿' and
'—', so the text outside math is checked for them too. Needs pdflatex, booktabs and pifont's
fonts (Debian texlive-latex-recommended and texlive-fonts-recommended, installed by clusters/ci_prereqs.sh):
skipped without pdflatex, failed without it when CI=true.
"""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis.render import TEX_PREAMBLE, tex
from analysis.table_specs import SPECS
from analysis.tables import render_table
from devtools.slow.cluster_harness import in_ci
from tests.unit.analysis.test_cells import abl, frame, proto, run

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parents[2] / "docs" / "analysis.md"


@pytest.fixture(scope="module")
def pdflatex():
    exe = shutil.which("pdflatex")
    if exe is None:
        reason = "pdflatex missing (install with: sudo bash clusters/ci_prereqs.sh)"
        if in_ci():
            pytest.fail(reason + " [CI: this test may not skip]", pytrace=False)
        pytest.skip(reason)
    return exe


def readme_preamble() -> str:
    """The preamble docs/analysis.md tells users to load (the code span of its 'LaTeX tables compile' line)."""
    line = next(ln for ln in README.read_text().splitlines() if ln.startswith("LaTeX tables compile"))
    return re.search(r"`([^`]*\\usepackage[^`]*)`", line).group(1)


@pytest.fixture(scope="module")
def runs():
    """Runs of every table: two seeds where a mark needs them, one seed elsewhere, a subset AutoAttack."""
    recs = [run({"clean": 99.0}, table="main", kind="teacher", seed=0, expected=1, ckpt="teacher",
                extra={"meta.column_group": "cifar10/wrn-28-5"})]
    for method, v in {"uat++": 84.0, "rst": 82.0, "ssat-mbi": 83.0}.items():
        recs += [run({"clean": v + i, "pgd20": v - 30 + i}, table="main", method=method, seed=i,
                     interpolate=method == "ssat-mbi",
                     extra={"metric.time/total_hours": 5.0 + i / 10, "metric.time/epochs": 100.0})
                 for i in range(2)]
    recs += [run({"clean": 80.0 + i, "pgd20": 50.0 + i, "autoattack": 45.0 + i}, seed=i, **abl(glo, interp),
                 protocols={"autoattack": proto("autoattack", n=200, subset="first200")})
             for glo, interp in (("none", False), ("Cur.", True)) for i in range(2)]
    recs += [run({"clean": 80.0 + i}, table="schedules", seed=i, schedule=s, t=t, gamma=1.5, expected=2)
             for s, t in (("const", 70), ("curious", 60)) for i in range(2)]
    recs += [run({"clean": 70.0 + i}, table="awr-ablation", method="ssat-mbi-awr", seed=i, schedule="linear",
                 interpolate=True, t=t)
             for i, t in enumerate((50, 60))]  # one cell mixing two configurations: a note lists their hashes
    recs += [run({"clean": 60.0 + i}, table="supervised", method="trades", seed=i, schedule=s, interpolate=it)
             for s, it in (("const", False), ("curious", True), ("linear", True)) for i in range(2)]
    recs += [run({"clean": 70.0 + b}, table="beta-sensitivity", seed=0, beta=b) for b in (0.2, 0.4)]
    recs += [run({"clean": 70.0 + r}, table="rho-sensitivity", seed=0, rho0=r, schedule="const")
             for r in (0.05, 0.1)]
    return frame(*recs)


def text_outside_math(latex: str) -> str:
    """The text a reader sees as text: comment lines and $...$ spans dropped."""
    body = "\n".join(ln for ln in latex.splitlines() if not ln.startswith("%"))
    return re.sub(r"(?<!\\)\$[^$]*\$", "", body)


def compile_tex(pdflatex: str, body: str, folder: Path) -> Path:
    """pdflatex a minimal article around `body`; fails the test on any error, returns the PDF."""
    folder.mkdir()
    doc = "\n".join([r"\documentclass{article}", readme_preamble(),
                     r"\tracinglostchars=3",  # a glyph the font lacks is an error, not a log line
                     r"\begin{document}", body, r"\end{document}", ""])
    (folder / "t.tex").write_text(doc)
    proc = subprocess.run([pdflatex, "-halt-on-error", "-interaction=nonstopmode", "t.tex"], cwd=folder,
                          capture_output=True, text=True, errors="replace", timeout=60)
    errors = [ln for ln in proc.stdout.splitlines() if ln.startswith("! ")]
    assert proc.returncode == 0 and not errors, "\n".join(errors) or proc.stdout[-3000:]
    pdf = folder / "t.pdf"
    assert pdf.exists() and pdf.read_bytes().startswith(b"%PDF")
    return pdf


def test_the_readme_preamble_is_the_one_the_tables_name():
    assert readme_preamble() == " ".join(TEX_PREAMBLE)


@pytest.mark.parametrize("table", list(SPECS))
def test_every_table_compiles_and_prints_what_it_says(table, runs, pdflatex, tmp_path):
    variants = [render_table(runs, table, "latex", allow_subset=True, compare_paper=paper) for paper in (False, True)]
    seen = text_outside_math("\n".join(variants))
    assert not re.search(r"[<>|]", seen) and seen.isascii(), seen
    compile_tex(pdflatex, "\n\\clearpage\n".join(variants), tmp_path / table)


def test_welch_footnote_and_row_labels_become_latex(runs):
    latex = render_table(runs, "supervised", "latex")
    assert r"(Welch's t-test, p $\geq$ 0.05, or fewer than two seeds)" in latex
    assert r"TRADES (Lin.\textbar{}int) & \textbf{60.50} (0.71)$^{\dagger}$$^{\ddagger}$ \\" in latex
    assert "Customized AT & --- \\\\" in latex  # an empty cell: an em dash, as in Markdown


@pytest.mark.parametrize("text, latex", [
    ("p >= 0.05", r"p $\geq$ 0.05"), ("n <= 3", r"n $\leq$ 3"), ("a<b>c", r"a\textless{}b\textgreater{}c"),
    ("Cur.|int", r"Cur.\textbar{}int"), ("50% & 8_9 #1 $x {y}", r"50\% \& 8\_9 \#1 \$x \{y\}"),
    ("a\\b~c^d", r"a\textbackslash{}b\textasciitilde{}c\textasciicircum{}d"),
    ("1.0 ± 0.2 — †‡§ ✓✗", r"1.0 $\pm$ 0.2 --- $^{\dagger}$$^{\ddagger}$$^{\S}$ \cmark\xmark"),
])
def test_tex_escapes(text, latex):
    assert tex(text) == latex

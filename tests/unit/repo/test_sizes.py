"""One job per module: in ssat/, sweeps/ and analysis/ no module over 450 lines, no class over 150, no function over
60 (Trainer and Tracker, the last two over, were split in issue 45: ssat/train_state.py, sweeps/tracking/journal.py
and run_store.py)."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

# mutmut's copy of the sources (devtools/mutation.py) holds every mutant of a module in it: sizes say nothing there
pytestmark = pytest.mark.skipif("MUTANT_UNDER_TEST" in os.environ, reason="the sources are mutmut's copies")
ROOT = Path(__file__).resolve().parents[3]
MODULE, CLASS, FUNCTION = 450, 150, 60


def sizes(path: Path, rel: str) -> list[tuple[str, str, int, int]]:
    """(kind, name, lines, limit) of every part of the file over its limit."""
    src = path.read_text()
    out = [("module", rel, n, MODULE)] if (n := len(src.splitlines())) > MODULE else []
    for node in ast.walk(ast.parse(src)):
        n = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
        if isinstance(node, ast.ClassDef) and n > CLASS:
            out.append(("class", f"{rel}:{node.name}", n, CLASS))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and n > FUNCTION:
            out.append(("function", f"{rel}:{node.name}", n, FUNCTION))
    return out


def test_no_module_class_or_function_is_over_its_size():
    over = [s for top in ("ssat", "sweeps", "analysis") for p in sorted((ROOT / top).rglob("*.py"))
            for s in sizes(p, str(p.relative_to(ROOT)))]
    assert over == []


def test_the_sizes_are_measured(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    (tmp_path / "m.py").write_text(f"def f():\n{body}\n\n\nclass C:\n    pass\n")
    assert sizes(tmp_path / "m.py", "m.py") == [("function", "m.py:f", 61, 60)]

"""sweeps/spec_file.py: a YAML bomb (nested aliases, a "billion laughs") under any field of a spec is refused by
`python -m sweeps run` at once and in little memory, naming the file and the limit (issue 44, item 5); an error
message never builds a huge value's whole text."""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ssat.messages import brief
from sweeps.errors import SpecError
from sweeps.spec_checks import MAX_EXPANDED
from sweeps.spec_file import read_yaml

ROOT = Path(__file__).resolve().parents[3]
LAUGHS = "\n".join(["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
                   + [f"{b}: &{b} [{', '.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")])
BOMBS = {"description": "description: *i", "table": "table: *i", "name": "name: *i",
         "an override": "overrides: {method.beta: *i}", "seeds": "seeds: *i"}


def bomb(tmp_path: Path, where: str) -> Path:
    """1 KB that expands to 9^9 (387 million) strings under `where`."""
    f = tmp_path / "bomb.yaml"
    body = "name: bomb" if where != "name" else ""
    f.write_text("\n".join(filter(None, ["preset: mnist5k-ssat-mbi", "grid: [{row: a}]", LAUGHS, body,
                                         BOMBS[where]])) + "\n")
    return f


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (500 * 2**20, 500 * 2**20))  # the bound: 500 MB


@pytest.mark.parametrize("where", BOMBS)
def test_a_yaml_bomb_under_any_field_is_refused_at_once_in_little_memory(tmp_path, where):
    f = bomb(tmp_path, where)
    assert f.stat().st_size < 1024
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "sweeps", "run", str(f), "--dry-run"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, preexec_fn=_limit_memory)
    took = time.monotonic() - t0
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr == (f"error: {f}: its YAML aliases expand to {expanded(where):,} values; allowed: at most "
                          f"{MAX_EXPANDED:,} (a limit no real spec comes near: nested aliases that repeat a node many "
                          "times)\n")
    print(f"{where}: refused in {took:.2f} s")


def expanded(where: str) -> int:
    """The bomb file's values counted as the check counts them: each node once per time it is reached."""
    laughs = [10]  # a: the list and its 9 strings
    for _ in "bcdefghi":
        laughs.append(1 + 9 * laughs[-1])
    top = 1 + 2 + 5 + sum(1 + n for n in laughs)  # the mapping, preset, grid: [{row: a}], the keys a..i and values
    field = 1 + laughs[-1] + (2 if where == "an override" else 0)  # its key and *i (inside a mapping of one key)
    return top + field + (2 if where != "name" else 0)  # name: bomb, when the bomb is not the name


def test_the_expansion_is_counted_exactly_and_a_spec_at_the_limit_is_read(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: x\nl: &l [a, b, c]\nm: [*l, *l]\n")
    assert read_yaml(f) == {"name": "x", "l": ["a", "b", "c"], "m": [["a", "b", "c"], ["a", "b", "c"]]}
    wide = tmp_path / "w.yaml"
    n = (MAX_EXPANDED - 1) // 2  # a mapping of n keys with null values: 1 + 2n values
    wide.write_text("".join(f"k{i}: \n" for i in range(n)))
    assert len(read_yaml(wide)) == n
    wider = tmp_path / "w2.yaml"
    wider.write_text("".join(f"k{i}: \n" for i in range(n + 1)))
    with pytest.raises(SpecError, match=f"expand to {1 + 2 * (n + 1):,} values; allowed: at most {MAX_EXPANDED:,}"):
        read_yaml(wider)


def test_an_error_names_a_huge_container_without_building_its_text():
    a = ["lol"] * 9
    for _ in range(8):
        a = [a] * 9  # 9^9 strings, shared
    t0 = time.process_time()
    text = brief(a)
    assert time.process_time() - t0 < 5 and text.endswith("(a container of more than 1,000 values)")
    assert len(text) < 250 and text.startswith("[[[[[...], [...]")
    assert brief([1, 2, {"a": 3}]) == "[1, 2, {'a': 3}]"  # a small one exactly as repr writes it
    assert brief({"b": 1, "a": 2}) == "{'b': 1, 'a': 2}"

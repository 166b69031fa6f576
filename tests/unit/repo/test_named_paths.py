"""Every file path and `python -m` module that the README, docs/, the Makefile, the code and the tests name exists
in the repository: a module that moves or a page renamed leaves no stale name behind. A glob or a placeholder
(`paper-*.yaml`, `<name>`) is not a path; a module may be named without its `.py` (`sweeps/tracking`), an
attribute after it (`devtools/servers.PostgresServer`)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOP = ("ssat", "sweeps", "analysis", "clusters", "benchmarks", "tests", "devtools", "docs", "lock")
TOKEN = re.compile(rf"(?<![\w/.$-])((?:{'|'.join(TOP)})/[\w./*<>{{}}$-]*)")
MODULE = re.compile(rf"python -m ((?:{'|'.join(TOP)})(?:\.\w+)*)")
# made-up names the tests use on purpose (a path that must not exist, a file a test writes in tmp_path)
MADE_UP = {"tests/unit/devtools/test_mutation.py": {"analysis/a.py", "analysis/b.py", "tests/unit/a.py",
                                                  "tests/unit/b.py", "tests/unit/test_x.py", "ssat/schedules.py.meta"},
           "devtools/mutation.py": {"tests/unit/test_x.py"},
           "tests/unit/clusters/test_cluster_check.py": {"clusters/gone.sh"},
           "tests/unit/sweeps/test_legacy.py": {"python -m sweeps.dryrun"}}  # an old path a user's script may name


def named_files() -> list[Path]:
    """The README, docs, Makefile and every source, script, spec and page below the packages (not this file: its
    probe names paths that do not exist)."""
    files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md"))]
    for top in ("ssat", "sweeps", "analysis", "clusters", "tests", "devtools", "benchmarks"):
        files += sorted(p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".sh", ".yaml", ".sbatch", ".md")
                        and "__pycache__" not in p.parts and p != Path(__file__).resolve())
    return files


def exists(name: str) -> bool:
    """A path of the repository, a module without its .py, or a module followed by an attribute."""
    if (ROOT / name).exists() or (ROOT / f"{name}.py").exists():
        return True
    head, dot, _ = name.partition(".")
    return bool(dot) and (ROOT / f"{head}.py").exists()


def stale_names(text: str, where: str) -> list[str]:
    """The paths and modules `text` (the file `where`, relative to the repository) names that do not exist."""
    found = []
    for m in TOKEN.finditer(text):
        name = m.group(1).rstrip(".-/")
        if any(c in name for c in "*<>{}$") or exists(name):
            continue
        found.append(name)
    found += [f"python -m {m.group(1)}" for m in MODULE.finditer(text)
              if not (ROOT / (m.group(1).replace(".", "/") + ".py")).exists()
              and not (ROOT / m.group(1).replace(".", "/")).is_dir()]
    return sorted(set(found) - MADE_UP.get(where, set()))


def test_every_path_and_module_named_exists():
    stale = {}
    for p in named_files():
        where = str(p.relative_to(ROOT))
        if names := stale_names(p.read_text(errors="replace"), where):
            stale[where] = names
    assert stale == {}


def test_a_stale_name_is_found_and_globs_placeholders_and_attributes_are_not():
    text = ("`sweeps/gone.py`, `python -m sweeps.gone`, `sweeps/specs/paper-*.yaml`, runs/<name>, `sweeps/tracking` "
            "and `devtools/servers.PostgresServer`, `python -m sweeps.slurm`, ssat/config.py.\nsee docs/nowhere.md; "
            "`tests/unit/test_x.py`")
    assert stale_names(text, "docs/p.md") == ["docs/nowhere.md", "python -m sweeps.gone", "sweeps/gone.py",
                                              "tests/unit/test_x.py"]
    assert stale_names(text, "devtools/mutation.py") == ["docs/nowhere.md", "python -m sweeps.gone", "sweeps/gone.py"]

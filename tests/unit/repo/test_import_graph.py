"""No import cycles in the project, lazy imports (inside functions) included.

The graph is read from the source with `ast`: `from . import x` and `from pkg import x` are edges to the module
`pkg.x` when it is one (not to the package's `__init__`, whose re-exports stay), `from .x import y` is an edge to
`pkg.x`, and only the project's own modules count."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("ssat", "sweeps", "analysis", "clusters")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _target(name: str, modules: dict) -> str | None:
    """The project module an imported name refers to: itself, or the longest module prefix of it."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        here = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = here.split(".")
                    up = up[: len(up) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" for a in node.names] if base else []
                if base and not any(f"{base}.{a.name}" in modules for a in node.names):
                    names = [base]
            for n in names:
                t = _target(n, modules)
                if t is not None and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (c := visit(n)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_the_project_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_lazy_and_relative_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None
    g = import_graph()
    assert "ssat.runtime" in g["ssat.interpolation"]      # from .runtime import eval_mode
    assert "ssat.faults" in g["sweeps.cli"]               # from ssat import faults: the submodule, not ssat
    assert "ssat.datasets" in g["ssat.train"]
    assert "ssat.attacks" in g["ssat"]                    # re-exports of the package


@pytest.mark.parametrize("pkg", ["ssat", "analysis"])
def test_layers_point_one_way(pkg):
    """ssat/ never imports sweeps/ or analysis/; analysis/ never imports sweeps/ (nor torch: see its own test)."""
    g = import_graph()
    banned = {"ssat": ("sweeps", "analysis"), "analysis": ("sweeps",)}[pkg]
    bad = sorted((m, t) for m, ts in g.items() if m.split(".")[0] == pkg for t in ts if t.split(".")[0] in banned)
    assert not bad, bad


# The wings of sweeps/ (docs/architecture.md): the tracking side writes MLflow and knows nothing of Ray; the Tune side
# (sweeps/trials/) never reaches back into the driver that runs it (sweeps/driver/ and the commands on top of it).
def wing(name: str) -> tuple[str, ...]:
    return tuple(sorted(m for m in _modules() if m.startswith(f"sweeps.{name}.")))


TRACKING = (*wing("tracking"), "sweeps.paths")
TRIALS = wing("trials")
DRIVER = (*wing("driver"), "sweeps.demo", "sweeps.paper", "sweeps.cli", "sweeps.slurm")


def test_the_wings_hold_their_modules():
    assert {"sweeps.tracking.tracker", "sweeps.tracking.run_records"} <= set(TRACKING)
    assert {"sweeps.trials.tuners", "sweeps.trials.trainable", "sweeps.trials.mlflow_callback"} <= set(TRIALS)
    assert {"sweeps.driver.sweep", "sweeps.driver.state", "sweeps.driver.lock"} <= set(DRIVER)
    # the flat modules the wings replaced are gone (their old paths: sweeps/legacy.py)
    assert not any((ROOT / "sweeps" / f"{old}.py").exists() for old in ("tuners", "trainable", "driver_lock", "costs"))


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every project module `start` imports, directly or through others (lazy imports included)."""
    seen, todo = set(), [start]
    while todo:
        for n in graph.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def imports_ray(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ray":
            return True
    return False


@pytest.mark.parametrize("mod", TRACKING)
def test_the_tracking_side_imports_no_ray(mod):
    modules = _modules()
    with_ray = sorted(m for m in {mod} | reached(import_graph(), mod) if imports_ray(modules[m]))
    assert with_ray == [], f"{mod} reaches Ray through {with_ray}"


@pytest.mark.parametrize("mod", TRIALS)
def test_the_trials_never_import_the_driver(mod):
    assert sorted(reached(import_graph(), mod) & set(DRIVER)) == []


def test_the_wing_checks_can_fail(tmp_path):
    assert imports_ray(ROOT / "sweeps" / "driver" / "cluster.py")
    assert "sweeps.driver.sweep" in reached(import_graph(), "sweeps.demo")
    assert "sweeps.trials.tuners" in reached(import_graph(), "sweeps.driver.sweep")  # the driver does import trials
    (tmp_path / "m.py").write_text("from ray.tune import Callback\n")
    assert imports_ray(tmp_path / "m.py")


def private_ray_uses(path: Path) -> list[str]:
    """The private Ray modules a file imports or reaches as attributes (ray._private, ray.train._internal, ...)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ray":
            names = [f"ray.{node.attr}"]
        found += [n for n in names if n.split(".")[0] == "ray" and any(p.startswith("_") for p in n.split("."))]
    return found


def test_rays_private_apis_are_touched_in_one_module():
    modules = _modules()
    users = sorted(m for m in modules if m.startswith("sweeps") and private_ray_uses(modules[m]))
    assert users == ["sweeps.trials.ray_private"]


def test_the_private_api_check_can_fail(tmp_path):
    (tmp_path / "m.py").write_text("import ray\nfrom ray.train._internal.session import get_session\n"
                                   "x = ray._private.worker\nfrom ray import tune\n")
    assert private_ray_uses(tmp_path / "m.py") == ["ray.train._internal.session", "ray._private"]

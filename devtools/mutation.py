"""Mutation scores per module with mutmut: python -m devtools.mutation [MODULE ...] (tests/MUTATION.md).

MODULE is a source path (ssat/schedules.py) or a dotted name (ssat.schedules); none means every module.
One `mutmut run` tests the modules' mutants (a fixed, seeded sample for the big ones), each against the
unit tests that mutmut's stats say reach the mutated function; then the scores are printed per module,
written to mutants/scores.json, and the surviving mutants listed (inspect one with `mutmut show NAME`).

Score = killed / (mutants - listed equivalents). Survived, no tests, timeout, suspicious, segfault and
not checked (the time budget ran out) all count against the score.
"""
from __future__ import annotations

import argparse
import ast
import fcntl
import fnmatch
import gc
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
STATS = MUTANTS / "mutmut-stats.json"
FINGERPRINTS = MUTANTS / "mutation-fingerprints.json"
SCORES = MUTANTS / "scores.json"
LOG = MUTANTS / "mutation.log"
KILLERS = MUTANTS / "mutation-killers.tsv"  # function<TAB>test that killed one of its mutants
DOC = ROOT / "tests" / "MUTATION.md"
SOURCE_PATHS = ("ssat", "sweeps", "analysis")  # = [tool.mutmut] source_paths
UNIT = "tests/unit"
TEST_CODE = ("tests/", "devtools/")  # what only the tests run: a change re-runs the tests that import it

# `make mutation` without MODULE: the modules with a score target, in full, and the big ones sampled.
TARGETS = ("ssat/attacks.py", "ssat/divergences.py", "ssat/interpolation.py", "ssat/losses.py", "ssat/schedules.py",
           "ssat/storage.py", "ssat/pseudo_labels.py", "sweeps/tracking/tracker.py", "sweeps/spec.py",
           "sweeps/space.py")
# Big modules run a fixed sample: the same mutants every run while the code stands still. In the default run a
# pattern of several modules (analysis/*.py) is one pool: SAMPLE_SIZE mutants drawn across its modules.
SAMPLED = ("ssat/train.py", "ssat/teacher.py", "ssat/config.py", "ssat/datasets.py", "analysis/*.py")
SAMPLE_SIZE = 200
SAMPLE_SEED = 13
EQUIVALENT_CAP = 0.05  # at most this share of a module's (run) mutants may be listed as equivalent
GPU_ONLY = "GPU-only, not run"   # the status of a listed GPU-only mutant: a survivor, not run here
EQUIVALENT = "listed equivalent, not run"  # excluded from the score; `--check-listed` runs them
# One thread per process: torch's pools are not fork-safe and two cores are shared by the workers.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SPINNER = re.compile(r"^[\u2800-\u28ff] ")


# ---- modules and mutant names -----------------------------------------------------------------

def all_modules() -> list[str]:
    """Every mutatable source file, as a repo-relative path (ssat/schedules.py)."""
    return sorted(p.relative_to(ROOT).as_posix() for src in SOURCE_PATHS for p in (ROOT / src).rglob("*.py"))


def default_modules() -> list[str]:
    """What `make mutation` runs without MODULE: TARGETS and the SAMPLED modules."""
    return [m for m in all_modules() if m in TARGETS or is_sampled(m)]


def selected_modules(named: list[str], every: bool = False, sampled: bool = False) -> list[str]:
    """The modules a run covers: those named, else every module (--all-modules), else the default run, or
    only its SAMPLED part (--sampled)."""
    if sampled and (named or every):
        raise SystemExit("--sampled runs the default run's samples: give no MODULE and no --all-modules with it")
    if named:
        return [resolve_module(m) for m in named]
    modules = all_modules() if every else default_modules()
    return [m for m in modules if is_sampled(m)] if sampled else modules


def resolve_module(arg: str) -> str:
    """'ssat/schedules.py', './ssat/schedules.py' or 'ssat.schedules' -> 'ssat/schedules.py'."""
    path = arg.strip().removeprefix("./")
    if not path.endswith(".py"):
        path = path.replace(".", "/") + ".py"
    known = all_modules()
    if path not in known:
        raise SystemExit(f"MODULE {arg!r}: not a source file of mutmut's source_paths {list(SOURCE_PATHS)}; "
                         f"allowed: {', '.join(known)}")
    return path


def dotted(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def is_sampled(module: str) -> bool:
    return any(fnmatch.fnmatch(module, pattern) for pattern in SAMPLED)


def pool_of(module: str) -> str | None:
    """The SAMPLED pattern of several modules that `module` belongs to (analysis/*.py), else None."""
    return next((p for p in SAMPLED if "*" in p and fnmatch.fnmatch(module, p)), None)


def by_number(name: str) -> tuple[str, int]:
    """Sort key: ssat.schedules.x_lr_at__mutmut_2 before ..._10."""
    head, _, number = name.rpartition("__mutmut_")
    return head, int(number) if number.isdigit() else 0


def mutant_names(module: str) -> list[str]:
    """Every mutant mutmut generated for `module`, from its state file mutants/<module>.meta."""
    meta = MUTANTS / (module + ".meta")
    if not meta.exists():
        return []
    return sorted(json.loads(meta.read_text())["exit_code_by_key"], key=by_number)


def exit_codes(module: str) -> dict[str, int | None]:
    meta = MUTANTS / (module + ".meta")
    return json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}


def forget_results(module: str, run: list[str]) -> None:
    """Clear the last verdicts of the mutants about to run: one that this run leaves unchecked (the
    budget ran out) must not keep an old verdict."""
    meta = MUTANTS / (module + ".meta")
    data = json.loads(meta.read_text())
    for name in run:
        data["exit_code_by_key"][name] = None
    meta.write_text(json.dumps(data, indent=4))


def unchecked(runs: dict[str, list[str]], skip: frozenset[str] = frozenset()) -> list[str]:
    """The planned mutants without a verdict (a budget stop left them), less those not run (`skip`: the listed
    GPU-only and equivalent mutants): what --continue runs."""
    out = []
    for module, run in runs.items():
        codes = exit_codes(module)  # one read of the module's meta file
        out += [n for n in run if codes.get(n) is None and n not in skip]
    return out


def draw(names: list[str]) -> list[str]:
    """The SAMPLE_SIZE names whose seeded hash sorts first: the same sample every run, and an edit elsewhere
    does not redraw it."""
    drawn = sorted(names, key=lambda n: hashlib.sha256(f"{SAMPLE_SEED}:{n}".encode()).hexdigest())[:SAMPLE_SIZE]
    return sorted(drawn, key=by_number)


def select_mutants(module: str, names: list[str], full: bool) -> list[str]:
    """All of a module's mutants, or for a big module its sample."""
    if full or not is_sampled(module) or len(names) <= SAMPLE_SIZE:
        return names
    return draw(names)


def listed_mutants(doc: Path = DOC, block: str = "equivalent-mutants") -> dict[str, str]:
    """Mutant name -> reason, from a fenced block of tests/MUTATION.md: ```equivalent-mutants, or
    ```gpu-only-mutants (listed apart: they survive on a CPU, so a run does not spend their tests' time)."""
    m = re.search(rf"^```{block}\n(.*?)^```", doc.read_text(), flags=re.S | re.M)
    out = {}
    for line in (m.group(1) if m else "").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip()
    return out


def unreachable(module: str) -> list[str]:
    """Code in `module` that mutmut never mutates and that looks like logic: decorated functions (all but
    @staticmethod / @classmethod) and lambdas in module-level assignments. Lines 'path:line what'."""
    tree = ast.parse((ROOT / module).read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if decorators not in (["staticmethod"], ["classmethod"]):
                out.append(f"{module}:{node.lineno} {node.name} (@{', @'.join(decorators)})")
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(isinstance(n, ast.Lambda) for n in ast.walk(node)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            out.append(f"{module}:{node.lineno} {ast.unparse(target)} (lambdas in a module-level table)")
    return out


# ---- scores ------------------------------------------------------------------------------------

@dataclass
class Score:
    module: str
    mutants: int
    killed: int
    survived: int
    equivalents: int
    score: float | None
    seconds: float
    sampled: bool
    unchecked: int = 0
    survivors: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def score_module(module: str, run: list[str], codes: dict[str, int | None], equivalents: dict[str, str],
                 seconds: float, sampled: bool, gpu_only: frozenset[str] = frozenset()) -> Score:
    """Score = killed / (run - accepted equivalents); every status other than killed is a survivor.

    A listed equivalent counts only if it is one of this run's mutants and was not killed; at most
    EQUIVALENT_CAP of the run's mutants are accepted (the rest are reported as problems).
    """
    from mutmut.stats import status_by_exit_code

    problems = []
    own = {n for n in equivalents if n.startswith(dotted(module) + ".")}
    status = {name: GPU_ONLY if name in gpu_only else status_by_exit_code[codes[name]] if codes.get(name) is not None
              else EQUIVALENT if name in own else "not checked" for name in run}
    killed = [n for n in run if status[n] == "killed"]
    stale = sorted((own | {n for n in gpu_only if n.startswith(dotted(module) + ".")}) - set(mutant_names(module)))
    if stale:
        problems.append(f"listed mutants that no longer exist (renumbered?): {', '.join(stale)}")
    wrongly = sorted(n for n in own & set(killed))
    if wrongly:
        problems.append(f"listed equivalents that the tests kill (not equivalent): {', '.join(wrongly)}")
    eq = sorted(n for n in own & set(run) if status[n] != "killed")
    cap = int(EQUIVALENT_CAP * len(run))
    if len(eq) > cap:
        problems.append(f"{len(eq)} equivalents listed, at most {cap} ({EQUIVALENT_CAP:.0%}) accepted: "
                        f"{', '.join(eq[cap:])} not accepted")
        eq = eq[:cap]
    survivors = [n for n in run if status[n] != "killed" and n not in eq]
    denominator = len(run) - len(eq)
    return Score(module=module, mutants=len(run), killed=len(killed), survived=len(survivors), equivalents=len(eq),
                 score=round(100.0 * len(killed) / denominator, 1) if denominator else None,
                 seconds=round(seconds, 1), sampled=sampled,
                 unchecked=sum(status[n] == "not checked" for n in run),
                 survivors=[f"{n}: {status[n]}" for n in survivors], problems=problems)


def pool_scores(scores: list[Score]) -> list[Score]:
    """One more line per multi-module SAMPLED pattern in the run: its modules' mutants added up."""
    out = []
    for pattern in dict.fromkeys(pool_of(s.module) for s in scores if pool_of(s.module)):
        part = [s for s in scores if pool_of(s.module) == pattern]
        n, killed, eq = (sum(getattr(s, k) for s in part) for k in ("mutants", "killed", "equivalents"))
        out.append(Score(module=pattern, mutants=n, killed=killed, survived=sum(s.survived for s in part),
                         equivalents=eq, score=round(100.0 * killed / (n - eq), 1) if n > eq else None,
                         seconds=round(sum(s.seconds for s in part), 1), sampled=any(s.sampled for s in part),
                         unchecked=sum(s.unchecked for s in part)))
    return out


def table(scores: list[Score]) -> str:
    head = f"{'module':<24} {'mutants':>8} {'killed':>7} {'survived':>9} {'equiv':>6} {'score':>7} {'seconds':>8}"
    rows = [head, "-" * len(head)]
    for s in scores:
        score = "-" if s.score is None else f"{s.score:.1f}%"
        note = (" (sample)" if s.sampled else "") + (f" ({s.unchecked} not checked)" if s.unchecked else "")
        rows.append(f"{s.module:<24} {s.mutants:>8} {s.killed:>7} {s.survived:>9} {s.equivalents:>6} {score:>7} "
                    f"{s.seconds:>8.0f}{note}")
    return "\n".join(rows)


def save_scores(scores: list[Score]) -> None:
    """Merge into mutants/scores.json: a one-module run replaces that module's entry only."""
    data = json.loads(SCORES.read_text()) if SCORES.exists() else {}
    for s in scores:
        data[s.module] = {**asdict(s), "sample_seed": SAMPLE_SEED if s.sampled else None}
    SCORES.write_text(json.dumps(dict(sorted(data.items())), indent=1) + "\n")


# ---- keeping mutmut's test stats current -------------------------------------------------------

def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def also_copied() -> list[Path]:
    """The files of [tool.mutmut] also_copy (data the tests read: specs, the README, benchmark results ...)."""
    import tomllib
    names = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"].get("also_copy", [])
    out = []
    for name in names:
        path = ROOT / name
        out += [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts] if path.is_dir() else [path]
    return [p for p in out if p.exists()]


def fingerprints() -> dict[str, str]:
    """Hashes of what the unit tests' outcome and mutmut's test->function map depend on: the test files,
    the sources and the data files copied into mutants/."""
    files = [p for p in ROOT.glob("tests/**/*") if p.is_file() and "__pycache__" not in p.parts]
    files += [ROOT / m for m in all_modules()] + also_copied()
    return {p.relative_to(ROOT).as_posix(): digest(p) for p in sorted(set(files))}


def changed_files(now: dict[str, str]) -> set[str] | None:
    """The files that changed since the last run that passed its clean tests (None: no record of one)."""
    if not FINGERPRINTS.exists():
        return None
    before = json.loads(FINGERPRINTS.read_text())
    return {f for f in before.keys() | now.keys() if before.get(f) != now.get(f)}


def clean_run_needed(changed: set[str] | None, full_collection: bool) -> str | None:
    """Why mutmut's clean run of the tests (about 150 s) is needed, or None when it would prove nothing new.

    A full stats collection runs every test, and mutmut stops if one fails. Otherwise the tests passed in the
    last recorded run, and the stats run re-runs (and checks) those of changed unit test files and of their
    importers; a test of an unchanged file can fail now only through a changed source module or data file.
    """
    if full_collection:
        return None
    if changed is None:
        return "no record of a run whose tests passed"
    other = sorted(f for f in changed if not (f.startswith(TEST_CODE) and f.endswith(".py")))
    return f"changed since the last run: {', '.join(other[:3])}{' ...' if len(other) > 3 else ''}" if other else None


def importers(test_files: set[str]) -> set[str]:
    """The unit test files that import any of `test_files` (devtools/servers.py, tests/unit/test_x.py ...)."""
    wanted = {f.removesuffix(".py").replace("/", ".") for f in test_files}
    out = set()
    for path in ROOT.glob(f"{UNIT}/**/*.py"):
        text = path.read_text()
        imported = re.findall(r"^\s*(?:from|import)\s+((?:tests|devtools)(?:\.\w+)+)", text, flags=re.M)
        imported += [f"{pkg}.{name}" for pkg, name in re.findall(r"^\s*from\s+(tests(?:\.unit(?:\.\w+)*)?|devtools)"
                                                                r"\s+import\s+(\w+)",
                                                                text, flags=re.M)]
        if wanted & {m for name in imported for m in (name, name.rpartition(".")[0])}:
            out.add(path.relative_to(ROOT).as_posix())
    return out


def refresh_stats(changed: set[str] | None) -> str:
    """Forget the stats of tests that may now reach other functions, so mutmut re-collects just those.

    mutmut re-collects only tests it has never seen; a changed test file or source module would leave
    its map stale (a test that now calls f would not be run against f's mutants). Dropped from the map:
    the tests of a changed unit test file and of the unit test files that import a changed test file
    (devtools/servers.py, another test module), and every test that reached a changed source module.
    Without a record of the files the map was made from (`changed` None), the whole map goes (a full, slower
    collection).
    """
    if not STATS.exists():
        return "no stats yet: full collection"
    if changed is None:
        STATS.unlink()
        return "stats of unknown age: full collection"
    changed_tests = {f for f in changed if f.startswith(TEST_CODE) and f.endswith(".py")}
    test_files = {f for f in changed_tests if f.startswith(UNIT + "/")} | importers(changed_tests)
    modules = tuple(dotted(f) + "." for f in changed & set(all_modules()))
    if not test_files and not modules:
        return "stats current"
    stats = json.loads(STATS.read_text())
    tests_by_function = stats["tests_by_mangled_function_name"]
    drop = {t for t in stats["duration_by_test"] if t.split("::")[0] in test_files}
    drop |= {t for fn, tests in tests_by_function.items() if fn.startswith(modules) for t in tests}
    for t in drop:
        stats["duration_by_test"].pop(t, None)
    stats["tests_by_mangled_function_name"] = {fn: [t for t in tests if t not in drop]
                                               for fn, tests in tests_by_function.items()}
    STATS.write_text(json.dumps(stats, indent=4))
    return f"{len(changed)} files changed: the stats of {len(drop)} tests are re-collected"


# ---- a pytest plugin for the mutants' runs ([tool.mutmut] pytest_add_cli_args: -p devtools.mutation) ----

def in_mutant_run() -> bool:
    return "__mutmut_" in os.environ.get("MUTANT_UNDER_TEST", "")


def function_under_test() -> str:
    """The mangled name of the mutated function (mutmut's test map key): ssat.schedules.x_lr_at."""
    return os.environ["MUTANT_UNDER_TEST"].partition("__mutmut_")[0]


def pytest_configure(config) -> None:
    """In a mutant's run (a child forked from mutmut's fork server): freeze the objects the child
    inherited, so that garbage collection skips the fork server's heap (torch, ray, mlflow, the
    collected tests). pytest collects twice at exit (its unraisable-exception check); on that heap the
    two took 0.6-0.7 s of a child's 0.9 s for a test of 0.03 s, and wrote to every inherited page."""
    if in_mutant_run():
        gc.freeze()


def order_tests(items: list[tuple[str, int]], durations: dict[str, float], killers: dict[str, int],
               grouped: set[str]) -> list[str]:
    """The order a mutant's tests run in (mutmut stops at the first failure): first the tests that killed
    other mutants of the same function (most kills first), then every test by its recorded time, cheapest
    first. A file in `grouped` (module- or class-scoped fixtures) runs as one block at its total time, in its
    own order, so its fixtures are built once. items: (node id, line); returns the node ids."""
    file_of = {nodeid: nodeid.split("::")[0] for nodeid, _ in items}
    block: dict[str, float] = {}
    for nodeid, _ in items:
        if file_of[nodeid] in grouped:
            block[file_of[nodeid]] = block.get(file_of[nodeid], 0.0) + durations.get(nodeid, 0.0)

    def key(item: tuple[str, int]):
        nodeid, line = item
        if nodeid in killers:
            return (0, -killers[nodeid], durations.get(nodeid, 0.0), nodeid, line)
        f = file_of[nodeid]
        return (1, block[f], f, line) if f in grouped else (1, durations.get(nodeid, 0.0), nodeid, line)
    return [nodeid for nodeid, _ in sorted(items, key=key)]


def killers_of(function: str, path: Path = Path(KILLERS.name)) -> dict[str, int]:
    """Test node id -> how many mutants of `function` (a mangled name) it killed, from the kill log."""
    counts: dict[str, int] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return counts
    for line in lines:
        fn, _, test = line.partition("\t")
        if fn == function and test:
            counts[test] = counts.get(test, 0) + 1
    return counts


def pytest_collection_modifyitems(session, config, items) -> None:
    """In a mutant's run (cwd mutants/): the tests in `order_tests` (mutmut hands them over as an unordered
    set and stops at the first failure, so a kill should come from the first, cheapest tests)."""
    if not in_mutant_run():
        return
    try:
        durations = json.loads(Path(STATS.name).read_text())["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return
    grouped = {item.nodeid.split("::")[0] for item in items
               if any(d.scope in ("module", "class", "package") for defs in
                      getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values() for d in defs)}
    order = order_tests([(i.nodeid, i.location[1] or 0) for i in items], durations,
                        killers_of(function_under_test()), grouped)
    rank = {nodeid: k for k, nodeid in enumerate(order)}
    items.sort(key=lambda item: rank[item.nodeid])


def pytest_runtest_logreport(report) -> None:
    """In a mutant's run: the first failing test killed the mutant; log it (function, test) for the next
    mutants of that function. One short O_APPEND write per kill: the two workers' lines do not interleave."""
    if report.failed and in_mutant_run():
        fd = os.open(KILLERS.name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{function_under_test()}\t{report.nodeid}\n".encode())
        finally:
            os.close(fd)


# ---- running mutmut ----------------------------------------------------------------------------

def mutmut_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "MUTANT_UNDER_TEST"}
    return {**env, **THREAD_ENV}


def log_stream(proc: subprocess.Popen, log, said: list[str]) -> None:
    """Copy mutmut's spinner output to the log as lines (one per change), and into `said`."""
    last = None
    for chunk in iter(lambda: proc.stdout.read1(4096), b""):
        for line in re.split(r"[\r\n]+", chunk.decode(errors="replace")):
            line = SPINNER.sub("", line.strip())
            if line and line != last:
                log.write(line + "\n")
                last = line
                said.append(line)
    log.flush()


# `mutmut ARGS`, with its clean run of the tests left out when MUTATION_SKIP_CLEAN=1 (`clean_run_needed`).
MUTMUT = """
import os, sys
from mutmut.workers import isolation
if os.environ.get("MUTATION_SKIP_CLEAN") == "1":
    isolation.ForkServerRunner.run_clean_tests = isolation.ForkRunner.run_clean_tests = lambda self, tests: 0
from mutmut.__main__ import cli
sys.argv[0] = "mutmut"
cli()
"""


def run_mutmut(args: list[str], budget: float, log, grace: float = 60.0, skip_clean: bool = False,
               mutmut: list[str] | None = None) -> tuple[int, float, list[str], bool]:
    """Run `mutmut ARGS` with a wall-clock budget; past it, stop it as Ctrl-C does (the results it saved are
    kept), and kill it if it is still running `grace` seconds later (children in a long test).

    Returns mutmut's exit code, the wall time, its output lines and whether the budget stopped it.
    """
    log.write(f"\n$ mutmut {' '.join(args[:6])}{' ...' if len(args) > 6 else ''}\n")
    t0 = time.perf_counter()
    env = {**mutmut_env(), "MUTATION_SKIP_CLEAN": "1" if skip_clean else "0"}
    proc = subprocess.Popen([*(mutmut or [sys.executable, "-c", MUTMUT]), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    said: list[str] = []
    reader = threading.Thread(target=log_stream, args=(proc, log, said), daemon=True)
    reader.start()
    deadline, next_note, stopped = t0 + budget, t0 + 60, False
    while proc.poll() is None:
        now = time.perf_counter()
        if now > deadline:
            print(f"  budget of {budget:.0f} s spent: stopping mutmut", flush=True)
            stopped = True
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            break
        if now > next_note:
            print(f"  {now - t0:5.0f} s  {(said or [''])[-1][:100]}", flush=True)
            next_note = now + 60
        time.sleep(0.5)
    reader.join(timeout=10)
    return proc.returncode, time.perf_counter() - t0, said, stopped


GENERATE = """
from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants
from mutmut.mutation.trampoline import set_mutant_under_test
set_mutant_under_test("mutant_generation")
copy_src_dir()
copy_also_copy_files()
s = create_mutants({children})
print(f"mutants: {{s.mutated}} files mutated, {{s.unmodified}} unchanged")
"""


def generate(children: int, log) -> None:
    """mutmut's own generation step (as `mutmut run` does it first), so that names can be sampled before the run."""
    MUTANTS.mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", GENERATE.format(children=children)], cwd=ROOT, env=mutmut_env(),
                          stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode:
        raise SystemExit(f"mutant generation failed (exit {proc.returncode}); see {LOG}")


def explain_failure(modules: list[str], log) -> None:
    """mutmut says only 'failed to collect stats' / 'Failed to run clean test': show the failing test."""
    tests = [UNIT]
    if STATS.exists():
        keys = tuple(dotted(m) + "." for m in modules)
        hit = {t for fn, ts in json.loads(STATS.read_text())["tests_by_mangled_function_name"].items()
               if fn.startswith(keys) for t in ts}
        tests = sorted(hit) or tests
    print(f"the unmutated tests fail; running them in mutants/ ({len(tests)} node ids):", flush=True)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--rootdir=.",
                           *tests], cwd=MUTANTS, env=mutmut_env(), capture_output=True, text=True)
    log.write(proc.stdout + proc.stderr)
    print("\n".join("    " + line for line in (proc.stdout + proc.stderr).strip().splitlines()[-25:]))


def lock():
    """One run at a time per checkout: concurrent mutmut runs would overwrite each other's mutants/."""
    MUTANTS.mkdir(exist_ok=True)
    handle = open(MUTANTS / ".mutation.lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("another mutation run holds mutants/.mutation.lock: waiting for it", flush=True)
        fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def child_seconds(log_path: Path) -> dict[str, float]:
    """Mutant -> seconds its child ran, from the fork server's log ([tool.mutmut] log_to_file)."""
    done = re.compile(r"Completed (\S+): exit=\S+ \(([0-9.]+)s\)")
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return {m.group(1): float(m.group(2)) for m in done.finditer(text)}


def plan(modules: list[str], full: bool, pooled: bool = False,
         skip: frozenset[str] = frozenset()) -> tuple[dict[str, list[str]], list[str]]:
    """Module -> the mutants to run, and mutmut's selectors: `module.*` for a whole module, names for a sample
    or where listed mutants are left out (`skip`: GPU-only ones are scored as survivors, equivalents are left
    out of the score, both without running).
    pooled: the modules of a multi-module SAMPLED pattern share one sample (the default run)."""
    pools: dict[str, set[str]] = {}
    if pooled and not full:
        for module in modules:
            if pool_of(module):
                pools.setdefault(pool_of(module), set()).update(mutant_names(module))
        pools = {p: set(draw(sorted(names))) for p, names in pools.items()}
    runs, selectors = {}, []
    for module in modules:
        names = mutant_names(module)
        if not names:
            continue  # nothing mutmut can mutate here (MUTATION.md)
        pool = pools.get(pool_of(module))
        runs[module] = [n for n in names if n in pool] if pool is not None else select_mutants(module, names, full)
        if not runs[module]:
            del runs[module]
            continue
        sampled = len(runs[module]) < len(names)
        kept = [n for n in runs[module] if n not in skip]
        selectors += kept if sampled or len(kept) < len(runs[module]) else [f"{dotted(module)}.*"]
        print(f"{module}: {len(runs[module])} of {len(names)} mutants{' (sample)' if sampled else ''}", flush=True)
    return runs, selectors


def report(scores: list[Score], workers: int, wall: float, total: float) -> None:
    print("\n" + table(scores))
    for s in scores:
        for problem in s.problems:
            print(f"PROBLEM {s.module}: {problem}")
        if s.survivors:
            print(f"\nsurvivors in {s.module} (mutmut show NAME):")
            print("\n".join("  " + line for line in s.survivors))
    print(f"\nseconds: a module's share of the mutants' run (its mutants' test time / {workers} workers); "
          f"the mutants' run took {wall:.0f} s, all {total:.0f} s")
    print(f"scores: {SCORES.relative_to(ROOT)}; mutmut's output: {LOG.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.mutation", description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE",
                    help="ssat/schedules.py or ssat.schedules; none: the modules with a target and the sampled ones")
    ap.add_argument("--all-modules", action="store_true", help="every module of the source paths (hours)")
    ap.add_argument("--sampled", action="store_true",
                    help=f"only the sampled part of the default run: {', '.join(SAMPLED)} (one pool per pattern)")
    ap.add_argument("--full", action="store_true", help=f"all mutants of the big modules too (default: a "
                                                        f"{SAMPLE_SIZE}-mutant sample, seed {SAMPLE_SEED})")
    ap.add_argument("--budget", type=float, default=3600.0,
                    help="wall-clock seconds for mutmut (default 3600); mutants left then are 'not checked'")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="mutants run in parallel")
    ap.add_argument("--continue", dest="resume", action="store_true",
                    help="go on with a run the budget stopped: the same modules' mutants that have no verdict "
                         "yet, then the score of the whole plan (the other verdicts and seconds are kept)")
    ap.add_argument("--check-listed", action="store_true",
                    help="run only the listed equivalents of the chosen modules (a run leaves them out): one the "
                         "tests now kill is reported as a problem")
    ap.add_argument("--unreachable", action="store_true",
                    help="list the decorated functions and module-level lambdas that mutmut skips, and stop")
    args = ap.parse_args(argv)
    modules = selected_modules(args.modules, args.all_modules, args.sampled)
    if args.unreachable:
        print("\n".join(line for m in modules for line in unreachable(m)))
        return 0
    t0 = time.perf_counter()

    with lock(), open(LOG, "a") as log:
        log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} python -m devtools.mutation {' '.join(argv or [])}\n")
        now = fingerprints()
        changed = changed_files(now)
        print("generating mutants (files changed since the last run) ...", flush=True)
        generate(args.max_children, log)
        print(f"test stats: {refresh_stats(changed)}  [{time.perf_counter() - t0:.0f} s]", flush=True)
        clean_reason = clean_run_needed(changed, full_collection=not STATS.exists())
        print(f"mutmut's clean run of the tests: {clean_reason or 'left out (the stats run checks what changed)'}",
              flush=True)
        gpu_only, equivalents = frozenset(listed_mutants(block="gpu-only-mutants")), listed_mutants()
        skip = gpu_only | frozenset(equivalents)
        runs, selectors = plan(modules, args.full, pooled=not args.modules, skip=skip)
        if not runs:
            raise SystemExit(f"no mutants in {', '.join(modules)} (MUTATION.md: what mutmut cannot reach)")
        debug_log = MUTANTS / "mutmut-debug.log"
        if args.check_listed:  # are the listed equivalents still survivors? (a killed one is reported)
            selectors = [n for run in runs.values() for n in run if n in equivalents]
            for module, run in runs.items():
                forget_results(module, [n for n in run if n in equivalents])
            print(f"checking {len(selectors)} listed equivalents", flush=True)
        elif args.resume:
            selectors = unchecked(runs, skip)
            print(f"continuing: {len(selectors)} mutants without a verdict", flush=True)
        else:
            for module, run in runs.items():
                forget_results(module, run)
            debug_log.unlink(missing_ok=True)
        rc, wall, said, stopped = (run_mutmut(["run", "--max-children", str(args.max_children), *selectors],
                                              args.budget, log, skip_clean=clean_reason is None)
                                   if selectors else (0, 0.0, [], False))
        if rc != 0 and not stopped:  # stopped by the budget: score what it checked, the rest is "not checked"
            print(f"mutmut failed (exit {rc}); its output is in {LOG.relative_to(ROOT)}", flush=True)
            if any(m in line for line in said for m in ("failed to collect stats", "Failed to run clean test")):
                explain_failure(list(runs), log)
            return 1
        FINGERPRINTS.write_text(json.dumps(now, indent=1))  # mutmut's stats now match these files
        durations = child_seconds(debug_log)
        scores = [score_module(module, run, exit_codes(module), equivalents,
                               seconds=sum(durations.get(n, 0.0) for n in run) / args.max_children,
                               sampled=len(run) < len(mutant_names(module)), gpu_only=gpu_only)
                  for module, run in runs.items()]
        scores += pool_scores(scores)
        save_scores(scores)
    report(scores, args.max_children, wall, time.perf_counter() - t0)
    return 1 if any(s.problems for s in scores) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

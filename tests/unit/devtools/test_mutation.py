"""devtools/mutation.py's choices, on mutant lists written here: what `make mutation` runs without MODULE, the seeded
samples (fixed, and one pool for analysis/*), and the score arithmetic (equivalents capped at 5%)."""
import json

import pytest

from devtools import mutation as mu


@pytest.fixture
def meta(tmp_path, monkeypatch):
    """Write mutmut state files: {module: number of mutants of its one function f}."""
    monkeypatch.setattr(mu, "MUTANTS", tmp_path)

    def write(counts):
        for module, n in counts.items():
            path = tmp_path / (module + ".meta")
            path.parent.mkdir(parents=True, exist_ok=True)
            keys = {f"{mu.dotted(module)}.x_f__mutmut_{i}": None for i in range(1, n + 1)}
            path.write_text(json.dumps({"exit_code_by_key": keys}))
    return write


def test_the_default_run_is_the_issue_scope():
    mods = mu.default_modules()
    assert set(mu.TARGETS) <= set(mods)
    assert {"ssat/train.py", "ssat/teacher.py", "ssat/config.py", "ssat/datasets.py"} <= set(mods)
    assert "analysis/tables.py" in mods and "analysis/plots.py" in mods
    assert "sweeps/driver/sweep.py" not in mods and "ssat/models.py" not in mods  # --all-modules or MODULE= runs them
    assert set(mods) < set(mu.all_modules())


def test_the_modules_a_run_covers():
    assert mu.selected_modules([]) == mu.default_modules()
    assert mu.selected_modules([], every=True) == mu.all_modules()
    assert mu.selected_modules(["ssat.schedules", "./sweeps/spec.py"]) == ["ssat/schedules.py", "sweeps/spec.py"]
    sampled = mu.selected_modules([], sampled=True)
    assert {"ssat/train.py", "ssat/teacher.py", "ssat/config.py", "ssat/datasets.py",
            "analysis/tables.py"} <= set(sampled)
    assert not set(sampled) & set(mu.TARGETS) and set(sampled) < set(mu.default_modules())
    for bad in ((["ssat/train.py"], False), ([], True)):
        with pytest.raises(SystemExit, match="--sampled"):
            mu.selected_modules(bad[0], every=bad[1], sampled=True)


def test_a_sample_is_fixed_by_the_seed_and_keeps_its_draws_when_others_change():
    names = [f"ssat.train.x_f__mutmut_{i}" for i in range(1, 501)]
    first = mu.draw(names)
    assert len(first) == mu.SAMPLE_SIZE == 200 and first == mu.draw(list(reversed(names)))
    others = [f"ssat.train.x_g__mutmut_{i}" for i in range(1, 101)]
    again = mu.draw(names + others)
    # adding another function's mutants can only push some of f's draws out, never draw new ones of f
    assert {n for n in again if "x_f_" in n} <= set(first)
    assert mu.select_mutants("ssat/train.py", names, full=False) == first
    assert mu.select_mutants("ssat/train.py", names, full=True) == names
    assert mu.select_mutants("ssat/losses.py", names, full=False) == names  # a target runs in full


def test_analysis_is_one_pool_in_the_default_run_and_per_module_when_named(meta):
    meta({"analysis/tables.py": 300, "analysis/plots.py": 100, "ssat/losses.py": 7, "ssat/train.py": 250})
    mods = ["analysis/plots.py", "analysis/tables.py", "ssat/losses.py", "ssat/train.py"]
    runs, selectors = mu.plan(mods, full=False, pooled=True)
    assert len(runs["analysis/tables.py"]) + len(runs["analysis/plots.py"]) == 200
    assert len(runs["ssat/train.py"]) == 200 and len(runs["ssat/losses.py"]) == 7
    assert "ssat.losses.*" in selectors and "ssat.train.*" not in selectors  # a sample is named one by one
    alone, _ = mu.plan(["analysis/tables.py"], full=False)
    assert len(alone["analysis/tables.py"]) == 200
    assert set(runs["analysis/tables.py"]) <= set(mu.mutant_names("analysis/tables.py"))


def score(module, killed, survived, equivalents=0):
    return mu.Score(module=module, mutants=killed + survived + equivalents, killed=killed, survived=survived,
                    equivalents=equivalents, score=None, seconds=10.0, sampled=True)


def test_the_pool_line_adds_its_modules_up():
    lines = mu.pool_scores([score("analysis/a.py", 90, 10), score("analysis/b.py", 45, 4, 1),
                            score("ssat/losses.py", 1, 99)])
    assert len(lines) == 1
    line = lines[0]
    assert line.module == "analysis/*.py" and line.mutants == 150 and line.killed == 135
    assert line.survived == 14 and line.equivalents == 1 and line.score == pytest.approx(round(100 * 135 / 149, 1))
    assert line.seconds == 20.0


def test_equivalents_count_up_to_five_percent_and_a_killed_one_is_a_problem(monkeypatch, meta):
    meta({"ssat/losses.py": 40})
    run = mu.mutant_names("ssat/losses.py")
    codes = {n: 1 for n in run[:36]} | {n: 0 for n in run[36:]}  # exit 1 = killed, 0 = survived
    eq = {run[36]: "", run[37]: "", run[38]: "", run[0]: ""}
    s = mu.score_module("ssat/losses.py", run, codes, eq, seconds=1.0, sampled=False)
    # cap int(0.05 * 40) = 2 of the three surviving listed ones; run[0] was killed: listed wrongly
    assert s.equivalents == 2 and s.killed == 36 and s.survived == 2
    assert s.score == pytest.approx(100 * 36 / 38, abs=0.05)
    assert any("not equivalent" in p for p in s.problems) and any("at most 2" in p for p in s.problems)


def test_a_budget_stop_is_reported_as_stopped_not_as_a_mutmut_failure(tmp_path):
    """Past the budget the runner sends Ctrl-C, then kills a mutmut that is still in a long test: the run is
    scored (the rest 'not checked'), not reported as a mutmut failure."""
    fake = tmp_path / "mutmut"
    fake.write_text("#!/usr/bin/env python3\nimport signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "print('working', flush=True)\ntime.sleep(60)\n")
    fake.chmod(0o755)
    log = (tmp_path / "log").open("w")
    rc, wall, said, stopped = mu.run_mutmut(["run"], budget=1.0, log=log, grace=0.5, mutmut=[str(fake)])
    assert stopped and rc == -9 and wall < 30 and said == ["working"]
    quick = tmp_path / "quick"
    quick.write_text("#!/usr/bin/env python3\nprint('done')\n")
    quick.chmod(0o755)
    assert mu.run_mutmut(["run"], budget=30.0, log=log, mutmut=[str(quick)])[::3] == (0, False)


def test_a_mutant_run_freezes_the_inherited_heap_and_a_plain_run_does_not(monkeypatch):
    """The plugin's pytest_configure: gc.freeze() in a mutant's child only (a plain pytest run keeps its gc)."""
    import gc
    assert gc.get_freeze_count() == 0
    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    mu.pytest_configure(None)
    assert gc.get_freeze_count() == 0
    monkeypatch.setenv("MUTANT_UNDER_TEST", "stats")
    mu.pytest_configure(None)
    assert gc.get_freeze_count() == 0
    monkeypatch.setenv("MUTANT_UNDER_TEST", "ssat.schedules.x_f__mutmut_1")
    try:
        mu.pytest_configure(None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


class _Item:
    def __init__(self, nodeid, line):
        self.nodeid, self.location = nodeid, ("", line, "")


def test_a_mutant_runs_its_killers_first_then_every_test_cheapest_first():
    durations = {"a.py::t1": 5.0, "a.py::t2": 1.0, "b.py::t1": 0.5, "b.py::t2": 0.25, "c.py::t1": 2.0,
                 "c.py::t2": 0.1, "c.py::t3": 3.0}
    items = [("a.py::t1", 3), ("a.py::t2", 9), ("b.py::t2", 8), ("b.py::t1", 2),
             ("c.py::t1", 1), ("c.py::t2", 5), ("c.py::t3", 7)]
    # test by test, not file by file
    assert mu.order_tests(items, durations, {}, set()) == [
        "c.py::t2", "b.py::t2", "b.py::t1", "a.py::t2", "c.py::t1", "c.py::t3", "a.py::t1"]
    # c.py has module fixtures: one block at its total time (5.1 s), in file order
    assert mu.order_tests(items, durations, {}, {"c.py"}) == [
        "b.py::t2", "b.py::t1", "a.py::t2", "a.py::t1", "c.py::t1", "c.py::t2", "c.py::t3"]
    # tests that killed mutants of this function go first, the one with more kills before the other
    assert mu.order_tests(items, durations, {"a.py::t1": 1, "c.py::t3": 4}, {"c.py"})[:3] == [
        "c.py::t3", "a.py::t1", "b.py::t2"]
    assert mu.order_tests(items, durations, {"gone.py::t": 9}, set()) == mu.order_tests(items, durations, {}, set())


def test_a_kill_is_logged_for_its_function_and_orders_its_next_mutants(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    durations = {"tests/unit/a.py::t1": 5.0, "tests/unit/b.py::t1": 0.5}
    (tmp_path / "mutmut-stats.json").write_text(json.dumps({"duration_by_test": durations}))

    class Report:
        def __init__(self, nodeid, failed):
            self.nodeid, self.failed = nodeid, failed

    monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    mu.pytest_runtest_logreport(Report("tests/unit/a.py::t1", True))  # a plain run logs nothing
    assert not (tmp_path / mu.KILLERS.name).exists()
    monkeypatch.setenv("MUTANT_UNDER_TEST", "ssat.schedules.x_f__mutmut_1")
    mu.pytest_runtest_logreport(Report("tests/unit/b.py::t1", False))
    mu.pytest_runtest_logreport(Report("tests/unit/a.py::t1", True))
    monkeypatch.setenv("MUTANT_UNDER_TEST", "ssat.schedules.x_g__mutmut_4")
    mu.pytest_runtest_logreport(Report("tests/unit/b.py::t1", True))
    assert (tmp_path / mu.KILLERS.name).read_text() == (
        "ssat.schedules.x_f\ttests/unit/a.py::t1\nssat.schedules.x_g\ttests/unit/b.py::t1\n")
    assert mu.killers_of("ssat.schedules.x_f") == {"tests/unit/a.py::t1": 1}

    items = [_Item("tests/unit/a.py::t1", 3), _Item("tests/unit/b.py::t1", 2)]
    mu.pytest_collection_modifyitems(None, None, items)  # x_g's mutant: b first (its killer, and cheaper)
    assert [i.nodeid for i in items] == ["tests/unit/b.py::t1", "tests/unit/a.py::t1"]
    monkeypatch.setenv("MUTANT_UNDER_TEST", "ssat.schedules.x_f__mutmut_9")
    mu.pytest_collection_modifyitems(None, None, items)  # x_f's next mutant: its killer first, though slower
    assert [i.nodeid for i in items] == ["tests/unit/a.py::t1", "tests/unit/b.py::t1"]
    monkeypatch.delenv("MUTANT_UNDER_TEST")
    mu.pytest_collection_modifyitems(None, None, items[::-1])  # a plain run keeps pytest's order
    assert [i.nodeid for i in items] == ["tests/unit/a.py::t1", "tests/unit/b.py::t1"]


def test_the_clean_run_is_left_out_only_when_nothing_but_unit_test_code_changed():
    assert mu.clean_run_needed(None, full_collection=True) is None  # the stats run ran every test
    assert mu.clean_run_needed(set(), full_collection=False) is None
    assert mu.clean_run_needed({"tests/unit/test_x.py", "devtools/servers.py"}, full_collection=False) is None
    assert "no record" in mu.clean_run_needed(None, full_collection=False)
    for changed in ({"ssat/losses.py"}, {"README.md", "tests/unit/test_x.py"}, {"tests/MUTATION.md"},
                    {"sweeps/specs/mnist5k-demo.yaml"}):
        assert sorted(changed - {"tests/unit/test_x.py"})[0] in mu.clean_run_needed(changed, full_collection=False)


def test_the_fingerprints_cover_tests_sources_and_the_copied_data():
    files = mu.fingerprints()
    assert {"tests/MUTATION.md", "tests/unit/devtools/test_mutation.py", "ssat/losses.py", "README.md",
            "sweeps/specs/mnist5k-demo.yaml", "Makefile"} <= set(files)
    assert not any("__pycache__" in f for f in files)


def test_the_mutmut_driver_leaves_out_the_clean_run_only_when_told(tmp_path):
    import subprocess
    import sys
    assert mu.MUTMUT.rstrip().endswith("cli()")
    probe = mu.MUTMUT.rstrip().removesuffix("cli()") + "print(isolation.ForkServerRunner.run_clean_tests(None, []))"
    for flag, want in (("1", "0"), ("0", "error")):
        proc = subprocess.run([sys.executable, "-c", probe], env={**mu.mutmut_env(), "MUTATION_SKIP_CLEAN": flag},
                              capture_output=True, text=True)
        assert (proc.stdout.strip() if proc.returncode == 0 else "error") == want


def test_continue_runs_only_the_planned_mutants_without_a_verdict(meta):
    meta({"ssat/schedules.py": 4, "ssat/losses.py": 2})
    path = mu.MUTANTS / "ssat/schedules.py.meta"
    data = json.loads(path.read_text())
    data["exit_code_by_key"].update({"ssat.schedules.x_f__mutmut_1": 1, "ssat.schedules.x_f__mutmut_3": 0})
    path.write_text(json.dumps(data))
    runs = {"ssat/schedules.py": [f"ssat.schedules.x_f__mutmut_{i}" for i in (1, 2, 3)],
            "ssat/losses.py": ["ssat.losses.x_f__mutmut_2"]}
    assert mu.unchecked(runs) == ["ssat.schedules.x_f__mutmut_2", "ssat.losses.x_f__mutmut_2"]


def test_listed_gpu_only_mutants_are_not_run_but_scored_as_survivors(meta, tmp_path):
    meta({"ssat/losses.py": 5, "ssat/train.py": 250})
    gpu = frozenset({"ssat.losses.x_f__mutmut_2", "ssat.train.x_f__mutmut_3", "ssat.train.x_f__mutmut_999"})
    runs, selectors = mu.plan(["ssat/losses.py", "ssat/train.py"], full=False, skip=gpu)
    assert len(runs["ssat/losses.py"]) == 5 and "ssat.losses.*" not in selectors  # a module with one: by name
    assert [s for s in selectors if s.startswith("ssat.losses.")] == [
        f"ssat.losses.x_f__mutmut_{i}" for i in (1, 3, 4, 5)]
    assert not gpu & set(selectors)
    codes = {n: 1 for n in runs["ssat/losses.py"] if n not in gpu}
    s = mu.score_module("ssat/losses.py", runs["ssat/losses.py"], codes, {}, seconds=1.0, sampled=False,
                        gpu_only=gpu)
    assert (s.killed, s.survived, s.unchecked, s.score) == (4, 1, 0, 80.0)
    assert s.survivors == [f"ssat.losses.x_f__mutmut_2: {mu.GPU_ONLY}"] and not s.problems
    train = mu.score_module("ssat/train.py", runs["ssat/train.py"], {}, {}, 1.0, True, gpu_only=gpu)
    assert any("x_f__mutmut_999" in p for p in train.problems)  # a listed name that no longer exists
    assert "ssat.losses.x_f__mutmut_2" not in mu.unchecked(runs, gpu)
    doc = tmp_path / "M.md"
    doc.write_text("x\n```gpu-only-mutants\n# why\nssat.train.x_f__mutmut_3\n```\n```equivalent-mutants\na.b\n```\n")
    assert mu.listed_mutants(doc, block="gpu-only-mutants") == {"ssat.train.x_f__mutmut_3": ""}
    assert mu.listed_mutants(doc) == {"a.b": ""}


def test_listed_equivalents_are_not_run_and_leave_the_score(meta):
    """An equivalent is left out of the run (its tests would all pass, at full cost) and out of the score, and is
    not reported as unchecked; once run (--check-listed) and killed, it is a problem."""
    meta({"ssat/losses.py": 20})  # 5% of 20: one equivalent accepted
    eq = {"ssat.losses.x_f__mutmut_4": "why"}
    runs, selectors = mu.plan(["ssat/losses.py"], full=False, skip=frozenset(eq))
    assert selectors == [f"ssat.losses.x_f__mutmut_{i}" for i in range(1, 21) if i != 4]
    assert mu.unchecked(runs, frozenset(eq)) == selectors
    codes = {n: 1 for n in selectors}  # all run and killed
    s = mu.score_module("ssat/losses.py", runs["ssat/losses.py"], codes, eq, seconds=1.0, sampled=False)
    assert (s.killed, s.survived, s.equivalents, s.unchecked, s.score) == (19, 0, 1, 0, 100.0) and not s.problems
    codes["ssat.losses.x_f__mutmut_4"] = 1  # --check-listed ran it, and a test killed it
    s = mu.score_module("ssat/losses.py", runs["ssat/losses.py"], codes, eq, seconds=1.0, sampled=False)
    assert any("kill (not equivalent): ssat.losses.x_f__mutmut_4" in p for p in s.problems)

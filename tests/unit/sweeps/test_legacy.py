"""Sweeps saved before a move still resume, and scripts naming an old module path still run (sweeps/legacy.py).

Tune pickles a stage's callbacks and searcher by module path into its tuner.pkl: before issue 27 as
sweeps.callback.TrackingCallback and sweeps.progress.ProgressCallback; before issue 45 (the wings) as
sweeps.mlflow_callback, sweeps.progress_callback and sweeps.study (tests/data/stage-before-issue45, a stage that
code saved). Restoring must find each under its module of now, as the very class of now."""
from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray import cloudpickle, tune

import sweeps.legacy as legacy
import sweeps.trials.tuners as tuners
from sweeps.trials.mlflow_callback import TrackingCallback
from sweeps.trials.progress_callback import ProgressCallback
from sweeps.spec import load_spec, parse_spec
from sweeps.trials.study import SweepSearch

SPEC = {"name": "unit", "preset": "mnist5k-ssat-mbi", "epochs": 4, "grid": [{"row": "a", "set": {}}]}
# The state each callback was pickled with by the code before issue 27 (TrackingCallback.__getstate__, and
# ProgressCallback's __dict__ after its __init__).
OLD_STATES = {
    ("sweeps.callback", "TrackingCallback"): {
        "uri": "sqlite:///old.db", "experiment": "unit", "sweep_dir": "/old/sweep", "parent_run_id": "p1",
        "artifact_root": "/old/mlartifacts", "_tracker": None, "_seen": set(), "_resolved": set()},
    ("sweeps.progress", "ProgressCallback"): {
        "total": 2, "total_epochs": 8, "t0": 1.0, "epoch": {}, "first": {}, "done": set(), "logs": {}, "polled": 0.0},
}


ROOT = Path(__file__).resolve().parents[3]
BEFORE_45 = ROOT / "tests" / "data" / "stage-before-issue45"


@pytest.fixture
def no_old_modules():
    """No old path is registered before the test, nor after it (another test must not find them registered)."""
    for old in legacy.MOVED_MODULES:
        sys.modules.pop(old, None)
    yield
    for old in legacy.MOVED_MODULES:
        sys.modules.pop(old, None)


@pytest.fixture
def without_finder(monkeypatch):
    """sys.meta_path as it was before sweeps/legacy.py: what Tuner.restore met without the map."""
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, legacy.MovedModules)])


def old_tuner_pkl() -> bytes:
    """tuner.pkl's callbacks as Tune (ray.cloudpickle) wrote them then: each class named by its old module path."""
    callbacks = []
    for (module, name), state in OLD_STATES.items():
        fake = types.ModuleType(module)
        cls = type(name, (), {"__module__": module, "__qualname__": name})
        setattr(fake, name, cls)
        sys.modules[module] = fake  # only while pickling: the pickler checks that the path names the class
        obj = cls.__new__(cls)
        obj.__dict__.update(state)
        callbacks.append(obj)
    try:
        data = cloudpickle.dumps({"_run_config": SimpleNamespace(callbacks=callbacks)})
    finally:
        for module, _ in OLD_STATES:
            del sys.modules[module]
    assert b"sweeps.callback" in data and b"sweeps.progress" in data and b"_callback" not in data
    return data


def test_without_the_map_an_old_stage_fails_to_unpickle(no_old_modules, without_finder):
    with pytest.raises(ModuleNotFoundError, match="sweeps.callback"):
        cloudpickle.loads(old_tuner_pkl())
    with pytest.raises(ModuleNotFoundError, match=r"sweeps\.(mlflow_callback|progress_callback|study)"):
        cloudpickle.loads((BEFORE_45 / "search" / "tuner.pkl").read_bytes())


def test_an_old_stage_restores_with_its_callbacks_under_their_new_modules(no_old_modules, monkeypatch, tmp_path):
    data = old_tuner_pkl()
    (tmp_path / "tuner.pkl").write_bytes(data)
    restored = {}

    def restore(cls, path, trainable, resume_errored, restart_errored):  # Tune's: it unpickles tuner.pkl
        with open(f"{path}/tuner.pkl", "rb") as f:
            restored.update(cloudpickle.loads(f.read()))
        return "tuner"

    monkeypatch.setattr(tune.Tuner, "can_restore", classmethod(lambda cls, path: True))
    monkeypatch.setattr(tune.Tuner, "restore", classmethod(restore))
    assert tuners.restore_tuner(tmp_path, parse_spec(SPEC), rerun_failed=False) == "tuner"
    tracking, progress = restored["_run_config"].callbacks
    assert type(tracking) is TrackingCallback and type(progress) is ProgressCallback
    # their state came along, and what the new code added to it is there too
    assert (tracking.uri, tracking.sweep_dir, tracking.parent_run_id) == ("sqlite:///old.db", "/old/sweep", "p1")
    assert tracking._trials == {} and tracking._resolved == set()
    progress.setup()  # Tune sets every callback up when the restored experiment starts
    assert (progress.total, progress.total_epochs, progress.trials) == (2, 8, {})
    # the aliases are module objects in sys.modules only: no file, and the new module's classes are the old paths'
    assert importlib.import_module("sweeps.callback").TrackingCallback is TrackingCallback
    assert importlib.import_module("sweeps.progress").ProgressCallback is ProgressCallback


def test_a_stage_saved_before_the_wings_restores_with_the_classes_of_now(no_old_modules, tmp_path):
    """A real search stage saved by the flat modules' code: Tune's own restore, no stand-in."""
    saved = (BEFORE_45 / "search" / "tuner.pkl").read_bytes()
    for old in (b"sweeps.mlflow_callback", b"sweeps.progress_callback", b"sweeps.study"):
        assert old in saved
    shutil.copytree(BEFORE_45 / "search", tmp_path / "search")
    tuner = tuners.restore_tuner(tmp_path / "search", load_spec(BEFORE_45 / "spec.yaml"), rerun_failed=False)
    restored = tuner._local_tuner  # what Tune unpickled from tuner.pkl
    assert [type(c) for c in restored._run_config.callbacks] == [TrackingCallback, ProgressCallback]
    searcher = restored._tune_config.search_alg
    assert type(searcher) is SweepSearch and searcher._study_name == "before45"
    assert searcher._space.func.__module__ == "sweeps.space"  # the pickled search space: its module did not move
    assert importlib.import_module("sweeps.study") is importlib.import_module("sweeps.trials.study")


@pytest.mark.parametrize("old", sorted(legacy.MOVED_MODULES))
def test_every_old_path_is_its_new_module(old):
    new = legacy.MOVED_MODULES[old]
    assert importlib.import_module(old) is importlib.import_module(new)
    assert sys.modules[new].__spec__.name == new and sys.modules[new].__spec__.origin.endswith(".py")
    assert not (ROOT / (old.replace(".", "/") + ".py")).exists()  # an alias, not a file
    assert (ROOT / (new.replace(".", "/") + ".py")).exists()


def test_an_unknown_old_path_is_still_not_found():
    with pytest.raises(ModuleNotFoundError, match="sweeps.gone"):
        importlib.import_module("sweeps.gone")


def test_python_m_an_old_path_runs_the_new_module_with_its_arguments():
    """`python -m sweeps.dryrun --table` in a user's script: the moved module runs as __main__, argv and all."""
    new = subprocess.run([sys.executable, "-m", "sweeps.costs.dryrun", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    old = subprocess.run([sys.executable, "-m", "sweeps.dryrun", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert new.returncode == old.returncode == 0, old.stderr
    assert old.stdout == new.stdout and "--table" in old.stdout


def _as_main(code, argv: list[str], monkeypatch) -> int:
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as end:
        exec(code, {"__name__": "__main__"})
    return end.value.code


@pytest.mark.filterwarnings("ignore:'sweeps.costs.dryrun' found in sys.modules:RuntimeWarning")
def test_the_code_python_m_runs_for_an_old_path_is_the_new_module_as_main(monkeypatch, capsys):
    """What runpy asks the finder for under `python -m OLD` (the subprocess above), run here: the new module as
    __main__ with the caller's arguments, a bad option refused by the new module's parser."""
    finder = legacy.MovedModules()
    code = finder.get_code("sweeps.dryrun")
    assert code.co_filename == "<sweeps.dryrun: moved to sweeps.costs.dryrun>"
    assert _as_main(code, ["-m", "--no-such-option"], monkeypatch) == 2
    assert "python -m sweeps.costs.dryrun: error: unrecognized arguments: --no-such-option" in capsys.readouterr().err
    assert _as_main(code, ["-m", "--help"], monkeypatch) == 0
    assert capsys.readouterr().out.startswith("usage: python -m sweeps.costs.dryrun")
    # alter_sys: the module sees its own file as argv[0], as under `python -m NEW`; the caller's argv comes back
    seen = []
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", lambda self, *a: seen.append(list(sys.argv)) or exit(3))
    assert _as_main(code, ["-m", "--table"], monkeypatch) == 3
    assert seen == [[str(ROOT / "sweeps" / "costs" / "dryrun.py"), "--table"]] and sys.argv == ["-m", "--table"]
    assert finder.get_code("sweeps.trainable").co_filename == "<sweeps.trainable: moved to sweeps.trials.trainable>"


def test_the_finder_is_installed_once_at_the_end_of_the_meta_path(monkeypatch):
    before = [f for f in sys.meta_path if not isinstance(f, legacy.MovedModules)]
    monkeypatch.setattr(sys, "meta_path", list(before))
    legacy.find_moved_modules()
    legacy.find_moved_modules()
    assert sys.meta_path[:-1] == before and isinstance(sys.meta_path[-1], legacy.MovedModules)
    finder = sys.meta_path[-1]
    assert finder.find_spec("sweeps.dryrun").loader is finder and finder.find_spec("sweeps.gone") is None

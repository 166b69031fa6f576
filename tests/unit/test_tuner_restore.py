"""A sweep saved before issue 27 still resumes: Tune pickled its callbacks into the stage's tuner.pkl by the
module paths of then (sweeps.callback.TrackingCallback, sweeps.progress.ProgressCallback), and restoring the
stage must find them under their modules of now."""
from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray import cloudpickle, tune

import sweeps.legacy as legacy
import sweeps.tuners as tuners
from sweeps.mlflow_callback import TrackingCallback
from sweeps.progress_callback import ProgressCallback
from sweeps.spec import parse_spec

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


@pytest.fixture
def no_old_modules():
    """Neither old path exists before the test, nor after it (another test must not find them registered)."""
    for old in legacy.MOVED_MODULES:
        sys.modules.pop(old, None)
    yield
    for old in legacy.MOVED_MODULES:
        sys.modules.pop(old, None)


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


def test_an_old_stage_restores_with_its_callbacks_under_their_new_modules(no_old_modules, monkeypatch, tmp_path):
    data = old_tuner_pkl()
    with pytest.raises(ModuleNotFoundError, match="sweeps.callback"):
        cloudpickle.loads(data)  # what Tuner.restore met without the aliases
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
    here = Path(tuners.__file__).parent
    assert not any((here / f"{old.split('.')[1]}.py").exists() for old in legacy.MOVED_MODULES)


def test_nothing_to_restore_registers_nothing(no_old_modules, monkeypatch, tmp_path):
    monkeypatch.setattr(tune.Tuner, "can_restore", classmethod(lambda cls, path: False))
    assert tuners.restore_tuner(tmp_path, parse_spec(SPEC), rerun_failed=False) is None
    assert "sweeps.callback" not in sys.modules

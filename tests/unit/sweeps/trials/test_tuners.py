"""What every Tune stage is configured with (sweeps/trials/tuners.py), read from Tune's public config objects
without starting Ray: the run's name and storage, both callbacks with the sweep's settings, two checkpoints kept,
the retries, Tune's quiet console, the experiment state saved every second; the concurrency and reused actors.
(The stages themselves run in the integration and slow tiers.)"""
from __future__ import annotations

import pytest

from sweeps.paths import sweep_paths
from sweeps.spec import parse_spec
from sweeps.trials import tuners
from sweeps.trials.mlflow_callback import TrackingCallback
from sweeps.trials.progress_callback import ProgressCallback

SPEC = {"name": "s", "preset": "mnist5k-ssat-mbi", "epochs": 4, "seeds": [0, 1], "max_concurrent": 3,
        "grid": [{"row": "a"}]}


def test_a_stages_run_config(tmp_path, monkeypatch):
    monkeypatch.delenv("TUNE_GLOBAL_CHECKPOINT_S", raising=False)
    spec, paths = parse_spec(SPEC), sweep_paths(tmp_path, "s")
    rc = tuners._run_config(spec, paths, "grid", "sqlite:///m.db", 4, "parent-1", 2, 8, study=("sqlite:///o", "s"))
    assert (rc.name, rc.storage_path, rc.verbose) == ("grid", str(paths.tune_dir), 0)
    assert (rc.checkpoint_config.num_to_keep, rc.failure_config.max_failures) == (2, 4)
    tracking, progress = rc.callbacks
    assert isinstance(tracking, TrackingCallback) and isinstance(progress, ProgressCallback)
    assert (tracking.uri, tracking.experiment, tracking.sweep_dir, tracking.parent_run_id, tracking.artifact_root,
            tracking.study) == ("sqlite:///m.db", "s", str(paths.sweep_dir), "parent-1", str(paths.artifact_root),
                                ("sqlite:///o", "s"))
    assert (progress.total, progress.total_epochs) == (2, 8)
    assert tuners.os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "1"
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "5")  # a user's setting stays
    assert tuners._run_config(spec, paths, "grid", "u", 0, None, 1, 1).callbacks[0].study is None
    assert tuners.os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "5"


@pytest.mark.parametrize("value, reuse", [(None, True), ("1", True), ("0", False), ("yes", True)])
def test_actors_are_reused_unless_turned_off(monkeypatch, value, reuse):
    if value is None:
        monkeypatch.delenv("SSAT_REUSE_ACTORS", raising=False)
    else:
        monkeypatch.setenv("SSAT_REUSE_ACTORS", value)
    assert tuners._reuse_actors() is reuse
    tc = tuners._tune_config(parse_spec(SPEC))
    assert (tc.max_concurrent_trials, tc.reuse_actors, tc.num_samples, tc.search_alg) == (3, reuse, 1, None)


def test_a_grid_stages_tuner_builds_without_ray(tmp_path):
    import ray

    spec = parse_spec(SPEC)
    tuner = tuners.grid_tuner(spec, spec.trials(), sweep_paths(tmp_path, "s"), "grid", "sqlite:///m.db", {}, 2, None)
    assert type(tuner).__name__ == "Tuner" and not ray.is_initialized()
    assert tuners._tune_config(spec, num_samples=7).num_samples == 7

"""sweeps/paths.py: the one module that spells a sweep folder's files, and builds the sweep's Tracker from them."""
from __future__ import annotations

from pathlib import Path

from sweeps.paths import sweep_paths


def test_a_sweeps_files_are_spelled_in_one_place(tmp_path):
    p = sweep_paths(tmp_path, "s-1")
    d = tmp_path.resolve() / "runs" / "sweeps" / "s-1"
    assert {k: getattr(p, k) for k in ("sweep_dir", "tune_dir", "state", "stop_cause", "spool", "log_file",
                                        "disk_reserve", "spec_file", "configs", "kept", "artifact_root")} == {
        "sweep_dir": d, "tune_dir": d / "tune", "state": d / "sweep.json", "stop_cause": d / "stop_cause",
        "spool": d / "tracking_spool.jsonl", "log_file": d / "sweep.log", "disk_reserve": d / "disk_reserve",
        "spec_file": d / "spec.json", "configs": d / "configs", "kept": d / "artifacts",
        "artifact_root": tmp_path.resolve() / "mlartifacts"}


def test_the_sweeps_tracker_writes_its_experiment_with_the_folders_spool_and_artifact_root(tmp_path):
    p = sweep_paths(tmp_path, "s-1")
    p.sweep_dir.mkdir(parents=True)
    said = []
    t = p.tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", log=said.append)
    assert (t.experiment, t.spool, t.artifact_root, t.log) == (
        "s-1", p.spool, (tmp_path.resolve() / "mlartifacts").as_uri(), said.append)
    assert Path(t.journal).parent == p.sweep_dir and t.journal.name.startswith("tracking_spool.")

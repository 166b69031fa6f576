"""MLflow tracking against a real `mlflow server` on 127.0.0.1: complete records, checkpoints over HTTP,
resume without duplicates, a driver killed and resumed, a server that goes away, an unreachable server."""
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient

from analysis.collect import load_mlflow_runs, load_ray_runs
from ssat.config import from_dict
from sweeps.tracking.run_records import tracked_params
from sweeps.cli import main as sweeps_main
from sweeps.tracking.run_store import flat_str
from devtools.sweep_helpers import epoch_histories, history, trial_runs, write_spec
from devtools.servers import MlflowServer, free_port, kill_marked

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"row": "const|on", "set": {"attack.schedule": "const"}},
        {"row": "curious|on", "set": {"attack.schedule": "curious", "attack.t": 1}}]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read()


def test_sweep_records_everything_and_resume_adds_nothing(ray_local, teacher_dir, mlflow_server, tmp_path):
    spec = write_spec(tmp_path / "s.yaml", "tracked", epochs=2, rows=ROWS)
    assert sweeps_main(["run", str(spec), "--workdir", str(tmp_path), "--tracking-uri", mlflow_server.url]) == 0
    uri, c = mlflow_server.url, MlflowClient(mlflow_server.url)
    exp = c.get_experiment_by_name("tracked")
    parent = c.search_runs([exp.experiment_id], "tags.`ssat.kind` = 'sweep'")
    teacher = c.search_runs([exp.experiment_id], "tags.`ssat.kind` = 'teacher'")
    assert len(parent) == 1 and len(teacher) == 1 and teacher[0].data.tags["ssat.row"] == "FixMatch"
    runs = trial_runs(uri, "tracked")
    assert len(runs) == 2
    for r in runs:
        assert r.data.tags["mlflow.parentRunId"] == parent[0].info.run_id
        assert r.info.status == "FINISHED"
        for key, hist in epoch_histories(uri, r).items():
            assert [s for s, _ in hist] == [1, 2], key  # one value per epoch for every metric
        for ckpt in ("best", "last"):
            assert 0 <= r.data.metrics[f"test/{ckpt}/clean"] <= 100
            proto = json.loads(r.data.tags[f"protocol/{ckpt}/pgd10"])
            assert proto["checkpoint"] == ckpt and proto["steps"] == 10 and proto["eps"] == pytest.approx(0.3)
        for p in ("method.name", "attack.schedule", "attack.t", "attack.gamma", "method.rho0", "method.beta",
                  "method.lam", "seed", "data.split_seed", "data.dataset", "model.name", "system.precision"):
            assert p in r.data.params
        assert r.data.params["resolved.precision"] == "fp32"  # auto, as it ran on this CPU
        assert r.data.tags["ssat.method_label"] == "SSAT-MBI"
        repro = {k[6:]: v for k, v in r.data.tags.items() if k.startswith("repro.")}
        for k in ("git_commit", "lock_sha256", "torch", "threads", "split_hash", "teacher_run_id", "dataset_checksums",
                  "ray_trial_id", "node", "gpu_share"):
            assert repro.get(k) not in (None, "", "None"), k
        assert repro["teacher_run_id"] == teacher[0].info.run_id
        for ckpt in ("best", "last"):  # both checkpoints through the server's HTTP API alone
            base = f"{uri}/get-artifact?run_uuid={r.info.run_id}&path=checkpoints/{ckpt}.pt"
            data = _get(base)
            assert hashlib.sha256(data).hexdigest() == _get(base + ".sha256").decode().strip()
            state = torch.load(io.BytesIO(data), weights_only=True)
            assert state["kind"] == ckpt and state["model_name"] == "cnn-small"
        cfg = from_dict(json.loads(_get(f"{uri}/get-artifact?run_uuid={r.info.run_id}&path=config.json")))
        assert cfg.seed == 0 and r.data.tags["ssat.config_hash"] == cfg.config_hash()
        assert r.data.tags["ssat.key"] == f"tracked-{cfg.config_hash()}-s0-grid"
        want = tracked_params(cfg)
        assert {k: r.data.params[k] for k in want} == {k: flat_str(v) for k, v in want.items()}
        assert b"trial" in _get(f"{uri}/get-artifact?run_uuid={r.info.run_id}&path=trial.log")
    # the Ray results folder carries the same run record (run_json): analysis reads the same tags and params
    ray = load_ray_runs(tmp_path / "runs" / "sweeps" / "tracked" / "tune" / "grid").set_index("meta.key")
    ml = load_mlflow_runs(["tracked"], tracking_uri=uri).set_index("meta.key").loc[ray.index]
    cols = [c for c in ray.columns if c.startswith("param.") or c in ("meta.config_hash", "meta.row", "meta.seed")]
    assert len(ray) == 2 and "param.attack.t" in cols and set(cols) <= set(ml.columns)
    pd.testing.assert_frame_equal(ml[cols], ray[cols])

    steps_before = {r.info.run_id: len(history(uri, r, "val/pgd10")) for r in runs}
    assert sweeps_main(["resume", "tracked", "--workdir", str(tmp_path)]) == 0
    again = trial_runs(uri, "tracked")
    assert {r.info.run_id for r in again} == set(steps_before)  # no new run
    assert {r.info.run_id: len(history(uri, r, "val/pgd10")) for r in again} == steps_before  # no new step


def test_unreachable_server_fails_fast(tmp_path, capsys):
    spec = write_spec(tmp_path / "s.yaml", "unreach")
    t0 = time.monotonic()
    rc = sweeps_main(["run", str(spec), "--workdir", str(tmp_path), "--tracking-uri",
                      f"http://127.0.0.1:{free_port()}"])
    assert rc == 2 and time.monotonic() - t0 < 30
    # the option named
    assert "error: --tracking-uri: MLflow tracking server at http://127.0.0.1:" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written


def test_server_away_mid_sweep_loses_nothing(ray_local, teacher_dir, tmp_path, monkeypatch):
    """The server dies after the first epoch; training goes on, operations are spooled, `sync` sends them."""
    srv = MlflowServer(tmp_path / "srv").start()
    monkeypatch.setenv("SSAT_TRACKING_FLUSH_S", "2")
    spec = write_spec(tmp_path / "s.yaml", "away", epochs=3, rows=ROWS[:1], seeds=[0, 1], max_concurrent=1)
    import threading

    def kill_after_first_epoch():
        c = MlflowClient(srv.url)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                exp = c.get_experiment_by_name("away")
                runs = c.search_runs([exp.experiment_id], "tags.`ssat.kind` = 'trial'") if exp else []
                if runs and c.get_metric_history(runs[0].info.run_id, "val/pgd10"):
                    srv.stop()
                    return
            except Exception:
                pass
            time.sleep(0.5)

    killer = threading.Thread(target=kill_after_first_epoch, daemon=True)
    killer.start()
    try:
        assert sweeps_main(["run", str(spec), "--workdir", str(tmp_path), "--tracking-uri", srv.url]) == 0
        killer.join(5)
        spool = tmp_path / "runs" / "sweeps" / "away" / "tracking_spool.jsonl"
        assert spool.exists() and spool.read_text().strip()  # kept on disk while the server was away
        srv.start()
        assert sweeps_main(["sync", "away", "--workdir", str(tmp_path)]) == 0
        runs = trial_runs(srv.url, "away")
        assert len(runs) == 2
        for r in runs:
            assert [s for s, _ in history(srv.url, r, "val/pgd10")] == [1, 2, 3]
            assert r.info.status == "FINISHED" and "test/best/clean" in r.data.metrics
    finally:
        srv.stop()


def test_driver_killed_then_resumed_runs_every_trial_once(teacher_dir, tmp_path):
    rtmp = tempfile.mkdtemp(prefix="rk", dir="/tmp")  # short: Ray's socket paths have a length limit
    spec = write_spec(tmp_path / "s.yaml", "killed", epochs=3, rows=ROWS[:1], seeds=[0, 1, 2], max_concurrent=2)
    env = {**os.environ, "SSAT_RAY_TMPDIR": rtmp, "SSAT_TEACHER_DIR": str(teacher_dir), "PYTHONPATH": str(ROOT)}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "sweeps", "run", str(spec), "--workdir", str(tmp_path)]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True, stdout=open(tmp_path / "run.log", "wb"),
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                runs = trial_runs(uri, "killed")
                if any(history(uri, r, "val/pgd10") for r in runs):
                    break
            except Exception:
                pass
            time.sleep(1)
        assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and what it started in its session
        proc.wait(30)
    finally:
        kill_marked(rtmp)
    state = json.loads((tmp_path / "runs" / "sweeps" / "killed" / "sweep.json").read_text())
    assert state["status"] == "running"
    res = subprocess.run([sys.executable, "-m", "sweeps", "resume", "killed", "--workdir", str(tmp_path)], env=env,
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    kill_marked(rtmp)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    runs = trial_runs(uri, "killed")
    assert sorted(r.data.tags["ssat.seed"] for r in runs) == ["0", "1", "2"]  # each (config, seed) once
    for r in runs:
        assert r.info.status == "FINISHED"
        assert [s for s, _ in history(uri, r, "val/pgd10")] == [1, 2, 3]

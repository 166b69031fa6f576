"""clusters/migrate_store.py against a real PostgreSQL: a SQLite store made by a real sweep (tests/data), and one
written through the Tracker with every kind of record, come out the same when read back with MlflowClient."""
import gzip
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.entities import Metric, ViewType
from mlflow.tracking import MlflowClient

from clusters.migrate_store import migrate
from sweeps.tracking.tracker import Tracker
from devtools.servers import PostgresServer, require_postgres

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SWEEP_STORE = ROOT / "tests" / "data" / "store-before-issue27" / "mlflow.db.gz"


@pytest.fixture(scope="module")
def postgres():
    require_postgres()
    pg = PostgresServer().start()
    yield pg
    pg.cleanup()


def store_contents(uri: str) -> dict:
    """Everything a reader of the store sees through MlflowClient: experiments (deleted ones too), every run's
    info, params, tags and latest metrics, every metric's whole history, and the artifact listing."""
    c = MlflowClient(uri)
    out = {}
    for exp in c.search_experiments(view_type=ViewType.ALL):
        runs = {}
        for run in c.search_runs([exp.experiment_id], run_view_type=ViewType.ALL, max_results=10_000):
            info = {k: getattr(run.info, k) for k in ("run_id", "run_name", "experiment_id", "user_id", "status",
                                                      "start_time", "end_time", "artifact_uri", "lifecycle_stage")}
            histories = {k: sorted((m.step, m.timestamp, m.value if not math.isnan(m.value) else "nan")
                                   for m in c.get_metric_history(run.info.run_id, k)) for k in run.data.metrics}
            artifacts = sorted((f.path, f.is_dir, f.file_size) for f in c.list_artifacts(run.info.run_id))
            runs[run.info.run_id] = {"info": info, "params": run.data.params, "tags": run.data.tags,
                                     "latest": {k: v if not math.isnan(v) else "nan"
                                                for k, v in run.data.metrics.items()},
                                     "histories": histories, "artifacts": artifacts}
        out[exp.experiment_id] = {"name": exp.name, "artifact_location": exp.artifact_location,
                                  "lifecycle_stage": exp.lifecycle_stage, "tags": exp.tags,
                                  "creation_time": exp.creation_time, "last_update_time": exp.last_update_time,
                                  "runs": runs}
    return out


def write_tracker_store(workdir: Path) -> str:
    """A store written the way a sweep's driver writes it (the Tracker), plus what a sweep can leave behind:
    finished, failed, killed and deleted runs, a parent, a NaN, a step logged twice, a deleted experiment."""
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    t = Tracker(uri, "migrated-sweep", artifact_root=workdir / "artifacts", log=lambda *_: None)
    t.ensure_run("parent", {"ssat.kind": "sweep"}, {"spec": "x" * 5000}, name="sweep")
    parent = t.find_run("parent")
    for i, status in enumerate(("FINISHED", "FAILED", "KILLED")):
        key = f"trial-{i}"
        t.ensure_run(key, {"ssat.kind": "trial", "mlflow.parentRunId": parent, "ssat.status": "RUNNING"},
                     {"attack.t": i, "method.name": "ssat-mbi", "optim.lr_milestones": [1, 2]}, name=key)
        for epoch in range(1, 6):
            t.log_epoch(key, {"train/loss": 1.0 / epoch + i, "val/pgd10": 10.0 * epoch, "sched/lr": 0.1,
                              "perf/epoch_seconds": 1.5}, epoch)
        cfg = workdir / f"{key}.json"
        cfg.write_text(json.dumps({"trial": i}))
        t.log_artifact(key, cfg)
        if status == "FINISHED":
            t.log_final(key, {"test/best/clean": 98.5, "test/best/pgd20": 91.25},
                        {"protocol/best/pgd20": json.dumps({"steps": 20, "eps": 0.3})}, 5)
            t.set_tags(key, {"ssat.status": "FINISHED"})
            t.end(key)
        elif status == "FAILED":
            t.set_tags(key, {"ssat.status": "FAILED: loss is nan"})
            t.end(key, "FAILED")
        else:
            t.kill(key, {"ssat.status": "KILLED: interrupted"})
    assert t.flush(timeout=10)
    c = MlflowClient(uri)
    rid = t.find_run("trial-0")
    c.log_batch(rid, metrics=[Metric("val/nan_once", float("nan"), 1_700_000_000_000, 1),
                              Metric("val/twice", 1.0, 1_700_000_000_000, 3),
                              Metric("val/twice", 2.0, 1_700_000_000_001, 3)])
    gone = c.create_run(t.experiment_id, run_name="deleted")
    c.delete_run(gone.info.run_id)
    other = c.create_experiment("deleted-experiment")
    c.create_run(other, run_name="in-a-deleted-experiment")
    c.delete_experiment(other)
    return uri


def test_a_real_sweeps_store_migrates_whole(postgres, tmp_path):
    db = tmp_path / "sweep.db"
    with gzip.open(SWEEP_STORE) as f, open(db, "wb") as out:
        shutil.copyfileobj(f, out)
    source = f"sqlite:///{db}"
    target = postgres.create_database("from_sweep")
    before = store_contents(source)
    cli = subprocess.run([sys.executable, "-m", "clusters.migrate_store", source, target],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert "ids and artifact locations kept" in cli.stdout
    after = store_contents(target)
    assert after == before
    runs = [r for e in after.values() for r in e["runs"].values()]
    assert len(runs) == 12 and sum(len(h) for r in runs for h in r["histories"].values()) >= 400
    assert db.read_bytes() == gzip.decompress(SWEEP_STORE.read_bytes())  # the source is never written


def test_a_tracker_store_migrates_whole_and_stays_usable(postgres, tmp_path):
    source = write_tracker_store(tmp_path)
    target = postgres.create_database("from_tracker")
    MlflowClient(target).search_experiments()  # what a new `mlflow server` writes: its schema, the Default experiment
    before = store_contents(source)
    copied = migrate(source, target, log=lambda *_: None)
    assert copied["runs"] == 6 and copied["metrics"] == 3 * 5 * 4 + 2 + 3  # epochs, finals, the extras
    after = store_contents(target)
    assert after == before
    trial = next(r for e in after.values() for r in e["runs"].values() if r["info"]["run_name"] == "trial-0")
    assert trial["histories"]["val/twice"] == [(3, 1_700_000_000_000, 1.0), (3, 1_700_000_000_001, 2.0)]
    assert trial["histories"]["val/nan_once"] == [(1, 1_700_000_000_000, "nan")]
    assert trial["artifacts"] == [("trial-0.json", False, len('{"trial": 0}'))]
    assert trial["info"]["artifact_uri"].startswith((tmp_path / "artifacts").as_uri())

    # the Tracker goes on in the migrated store: runs found by key, logged epochs skipped, new ids do not collide
    t = Tracker(target, "migrated-sweep", log=lambda *_: None)
    t.log_epoch("trial-0", {"train/loss": 0.0}, 5)  # already there: skipped
    t.ensure_run("trial-3", {"ssat.kind": "trial"}, {"attack.t": 3}, name="trial-3")
    t.log_epoch("trial-3", {"train/loss": 0.5}, 1)
    assert t.flush(timeout=10)
    c = MlflowClient(target)
    assert [m.value for m in c.get_metric_history(t.find_run("trial-0"), "train/loss")] == [1.0, 0.5, 1 / 3, 0.25, 0.2]
    new = c.create_experiment("after-migration")
    assert int(new) > max(int(e) for e in before)


def test_a_target_with_data_is_refused(postgres, tmp_path):
    source = write_tracker_store(tmp_path)
    target = postgres.create_database("not_empty")
    migrate(source, target, log=lambda *_: None)
    with pytest.raises(SystemExit, match="already holds MLflow data"):
        migrate(source, target, log=lambda *_: None)
    with pytest.raises(SystemExit, match="must be a PostgreSQL URI"):
        migrate(source, f"sqlite:///{tmp_path / 'other.db'}", log=lambda *_: None)
    with pytest.raises(SystemExit, match="no SQLite store"):
        migrate(f"sqlite:///{tmp_path / 'nowhere.db'}", target, log=lambda *_: None)

"""clusters/postgres.sh, the head's MLflow PostgreSQL, for real: a store made, written by the Tracker, dumped at
stop, restored by a "replaced head" (no data folder), and the refusals that keep a dump from being overwritten."""
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from analysis.export import main as export_main
from sweeps.tracking.tracker import Tracker, resolve_uri
from devtools.servers import free_port, require_postgres

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[2] / "clusters" / "postgres.sh"


@pytest.fixture
def head(tmp_path, monkeypatch):
    require_postgres()
    local = Path(tempfile.mkdtemp(prefix="ssat-head-", dir="/tmp"))  # PostgreSQL's user must reach it (as root)
    local.chmod(0o755)
    port = free_port()
    h = {"local": local, "data": local / "pgdata", "state": tmp_path / "state",
         "dump": tmp_path / "efs" / "mlflow.pgdump", "port": port,
         "uri": resolve_uri(f"postgresql://mlflow@127.0.0.1:{port}/mlflow", tmp_path)}  # as the driver
    assert h["uri"].startswith("postgresql+psycopg2://")  # the pinned driver (SQLAlchemy 2.1 would want psycopg 3)
    monkeypatch.setenv("PGPASSFILE", str(h["state"] / "pgpass"))
    yield h
    for data in local.glob("*"):
        if (data / "postmaster.pid").exists():
            pg(h, "stop", data=data, dump=None)
    shutil.rmtree(local, ignore_errors=True)


def pg(h: dict, action: str, *extra: str, data: Path | None = None, dump: Path | None | str = "", check=True):
    args = ["bash", str(SCRIPT), action, "--data-dir", str(data or h["data"]), "--port", str(h["port"]),
            "--state-dir", str(h["state"]), "--dump-every", "0", *extra]
    dump = h["dump"] if dump == "" else dump
    if dump is not None:
        args += ["--dump", str(dump)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=180)
    if check:
        assert done.returncode == 0, done.stderr[-2000:]
    return done


def write_runs(uri: str, keys, epochs=3) -> None:
    t = Tracker(uri, "head-store", log=lambda *_: None)
    for key in keys:
        t.ensure_run(key, {"ssat.kind": "trial"}, {"seed": 0}, name=key)
        for epoch in range(1, epochs + 1):
            t.log_epoch(key, {"val/pgd10": float(epoch)}, epoch)
        t.end(key)
    assert t.flush(timeout=10)


def read_runs(uri: str) -> dict:
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("head-store")
    return {r.info.run_name: [m.step for m in c.get_metric_history(r.info.run_id, "val/pgd10")]
            for r in c.search_runs([exp.experiment_id])}


def test_dumped_at_stop_and_restored_by_a_new_head(head):
    started = pg(head, "start")
    assert "a new, empty store" in started.stderr
    assert oct(os.stat(head["state"] / "pgpass").st_mode & 0o777) == "0o600"
    assert "already running" in pg(head, "start").stderr  # ray up --restart-only runs it again
    write_runs(head["uri"], ["a", "b"])
    stopped = pg(head, "stop")
    assert "dumped mlflow to" in stopped.stderr and head["dump"].stat().st_size > 0
    first = json.loads(Path(f"{head['dump']}.json").read_text())
    assert pg(head, "status", check=False).returncode == 3

    shutil.rmtree(head["data"])  # a replaced head: its own disk is new, the shared storage is not
    restored = pg(head, "start")
    assert "restored mlflow from" in restored.stderr
    assert read_runs(head["uri"]) == {"a": [1, 2, 3], "b": [1, 2, 3]}
    # analysis reads the same store from the bare URI a user types (its own resolver adds the pinned driver)
    bare = f"postgresql://mlflow@127.0.0.1:{head['port']}/mlflow"
    out = head["state"] / "export"
    assert export_main(["--experiment", "head-store", "--tracking-uri", bare, "--out", str(out)]) == 0
    history = (out / "head-store.history.csv").read_text().splitlines()
    assert history[0] == "run_id,key,step,value" and len(history) == 1 + 2 * 3
    assert sorted(ln.split(",")[1:3] for ln in history[1:]) == [["val/pgd10", s] for s in "112233"]
    write_runs(head["uri"], ["c"])
    pg(head, "stop")
    second = json.loads(Path(f"{head['dump']}.json").read_text())
    assert second["system_identifier"] != first["system_identifier"]  # the new head's cluster wrote it
    assert Path(f"{head['dump']}.prev").exists()
    pg(head, "start")  # its own data folder again: started as it is, the dump not restored over it
    assert read_runs(head["uri"]) == {"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 2, 3]}


def test_a_dump_written_by_another_cluster_is_never_overwritten(head):
    pg(head, "start")
    write_runs(head["uri"], ["old"])
    pg(head, "stop")
    other = head["local"] / "other"  # a second head restores the dump, goes on, and dumps
    pg(head, "start", data=other)
    write_runs(head["uri"], ["newer"])
    pg(head, "stop", data=other)
    before = head["dump"].read_bytes()
    refused = pg(head, "start", check=False)  # the first head's data folder: older than the dump
    assert refused.returncode != 0 and "written by another PostgreSQL cluster" in refused.stderr
    assert f"move {head['data']} away" in refused.stderr
    assert head["dump"].read_bytes() == before


def test_an_unmounted_shared_storage_is_refused(head):
    refused = pg(head, "start", "--shared-mount", str(head["local"]), check=False)
    assert refused.returncode != 0 and "is not mounted" in refused.stderr
    assert not head["data"].exists()

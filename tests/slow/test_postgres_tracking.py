"""A real sweep tracked through an `mlflow server` whose store is PostgreSQL, with the database stopped and started
again while the trials train: the tracker keeps what fails and sends it once the database is back, so every
trial's run ends FINISHED with every epoch exactly once (issue 28 item 6)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from devtools.sweep_helpers import epoch_histories, trial_runs
from devtools.servers import MlflowServer, PostgresServer, kill_marked, require_postgres

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "sweeps" / "specs" / "mnist5k-smoke.yaml"
SWEEP = "mnist5k-smoke"


def epochs_in_store(pg: PostgresServer) -> int:
    import psycopg2

    try:
        conn = psycopg2.connect(host="127.0.0.1", port=pg.port, user=pg.user, dbname="mlflow", connect_timeout=2)
    except psycopg2.OperationalError:
        return 0
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM metrics WHERE key = 'val/pgd10'")
            return cur.fetchone()[0]
    except psycopg2.Error:  # the tables are not there yet
        return 0
    finally:
        conn.close()


def wait_for(what, timeout: float, proc) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.5)
    return False


def test_a_sweep_loses_nothing_when_its_postgres_restarts(tmp_path):
    require_postgres()
    pg = PostgresServer().start()
    srv = MlflowServer(tmp_path / "mlflow", backend_uri=pg.create_database("mlflow"))
    ray_tmp = tempfile.mkdtemp(prefix="rpg", dir="/tmp")  # short: Ray's socket paths have a length limit
    log = tmp_path / "sweep.log"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "SSAT_RAY_TMPDIR": ray_tmp, "PYTHONPATH": str(ROOT),
           "SSAT_TEACHER_DIR": str(tmp_path / "teachers")}
    # the smoke spec, 3 epochs, a 10-step teacher (the store's writes are what is tested, not the teacher)
    cmd = [sys.executable, "-m", "sweeps", "run", str(SPEC), "--epochs", "3", "--workdir", str(tmp_path / "work"),
           "--tracking-uri", srv.url, "--set", "teacher.steps=10", "teacher.eval_every=10"]
    proc = None
    try:
        srv.start()
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        # the first trial epoch in the store: the database goes away while the trials train on
        assert wait_for(lambda: epochs_in_store(pg) > 0, 300, proc), \
            f"no epoch reached the store:\n{log.read_text()[-3000:]}"
        first_pid = pg.pid
        pg.stop("fast")
        # kept down until the driver's tracker has met the outage (a write failed and was kept)
        hit = wait_for(lambda: "unavailable" in log.read_text(), 120, proc)
        time.sleep(2)
        pg.start()
        assert hit, f"no tracking write met the stopped database:\n{log.read_text()[-3000:]}"
        assert pg.pid != first_pid
        rc = proc.wait(timeout=420)
        out = log.read_text()
        assert rc == 0, out[-4000:]
        assert "store reachable again" in out  # the kept operations went once the database was back
        assert not (tmp_path / "work" / "runs" / "sweeps" / SWEEP / "tracking_spool.jsonl").exists()  # none unsent

        runs = trial_runs(srv.url, SWEEP)
        assert sorted(r.data.tags["ssat.row"] for r in runs) == ["const|on", "curious|on"]
        for r in runs:
            assert r.info.status == "FINISHED" and r.data.tags["ssat.status"] == "FINISHED"
            histories = epoch_histories(srv.url, r)
            assert "val/pgd10" in histories and "train/loss" in histories
            for key, hist in histories.items():
                assert [step for step, _ in hist] == [1, 2, 3], key  # every epoch, once
            assert "test/best/clean" in r.data.metrics and "test/last/pgd20" in r.data.metrics
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(10)
        kill_marked(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
        srv.stop()
        pg.cleanup()

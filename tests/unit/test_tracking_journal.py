"""The tracking journal: what a driver queued while the store was away survives the driver's SIGKILL."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from sweeps.tracking import Tracker
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
# A driver whose store is away: it queues a run, two epochs, a tag and the end, then is killed.
DRIVER = """
import os, signal, sys
from sweeps.tracking import Tracker
t = Tracker(sys.argv[1], "exp", spool=sys.argv[2], log=lambda line: None)
t.ensure_run("k1", {"ssat.kind": "trial"}, {"p": 1}, name="k1")
for step in (1, 2):
    t.log_epoch("k1", {"val/pgd10": 0.25 * step, "perf/epoch_seconds": 1.0}, step)
t.set_tags("k1", {"ssat.status": "FINISHED"})
t.end("k1")
print(len(t.queue), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_a_killed_drivers_queue_is_adopted_sent_once_and_replays_add_nothing(tmp_path):
    spool = tmp_path / "tracking_spool.jsonl"
    away = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.run([sys.executable, "-c", DRIVER, away, str(spool)], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert proc.stdout.strip() == "5"  # nothing could be sent
    journals = list(tmp_path.glob("tracking_spool.*.jsonl"))
    assert len(journals) == 1 and len(journals[0].read_text().splitlines()) == 5, journals
    ops = journals[0].read_text()

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    t = Tracker(uri, "exp", spool=spool, log=lambda line: None)
    assert len(t.queue) == 5 and not journals[0].exists()  # adopted: the dead driver's file is gone
    assert t.flush(timeout=30)
    assert not list(tmp_path.glob("tracking_spool*.jsonl"))  # all sent: no journal, no spool left
    client = MlflowClient(uri)
    exp_id = client.get_experiment_by_name("exp").experiment_id
    (run,) = client.search_runs([exp_id])
    assert run.info.status == "FINISHED" and run.data.tags["ssat.status"] == "FINISHED"
    assert _history(client, run.info.run_id, "val/pgd10") == [(1, 0.25), (2, 0.5)]

    # The same operations once more (a journal whose removal a kill interrupted): nothing changes.
    spool.write_text(ops)
    again = Tracker(uri, "exp", spool=spool, log=lambda line: None)
    assert again.flush(timeout=30)
    (run,) = client.search_runs([exp_id])
    assert _history(client, run.info.run_id, "val/pgd10") == [(1, 0.25), (2, 0.5)]


def test_a_live_trackers_journal_is_not_taken(tmp_path):
    spool = tmp_path / "tracking_spool.jsonl"
    live = Tracker(f"http://127.0.0.1:{free_port()}", "exp", spool=spool, log=lambda line: None)
    live.ensure_run("k1", {"ssat.kind": "trial"})
    assert len(live.queue) == 1 and live.journal.exists()
    other = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp", spool=spool, log=lambda line: None)
    assert other.queue == [] and live.journal.exists()  # same process, still alive: left to its owner
    assert live.flush(timeout=0.1) is False  # still away: moved to the spool for `sync`
    assert not live.journal.exists() and len(spool.read_text().splitlines()) == 1

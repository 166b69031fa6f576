"""The tracking journal: what a driver queued while the store was away survives the driver's SIGKILL, is
adopted by the next driver only once its owner is gone, and sent once."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from sweeps.tracking.journal import Journal, _owner_gone
from sweeps.tracking.tracker import Tracker
from devtools.servers import free_port
from tests.unit.sweeps.tracking import test_tracker_store as stores
from tests.unit.sweeps.tracking.test_tracker_store import _history, _replay, _run

_one_try = stores._one_try  # fixture: no retries (the store fixture, a fresh real SQLite store per test: conftest.py)

ROOT = Path(__file__).resolve().parents[4]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
QUIET = {"log": lambda line: None}
# A driver whose store is away: it queues a run, two epochs, a tag and the end, then is killed.
DRIVER = """
import os, signal, sys
from sweeps.tracking.tracker import Tracker
t = Tracker(sys.argv[1], "exp", spool=sys.argv[2], log=lambda line: None)
t.ensure_run("k1", {"ssat.kind": "trial"}, {"p": 1}, name="k1")
for step in (1, 2):
    t.log_epoch("k1", {"val/pgd10": 0.25 * step, "perf/epoch_seconds": 1.0}, step)
t.set_tags("k1", {"ssat.status": "FINISHED"})
t.end("k1")
print(len(t.queue), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
# A live driver whose store is away: it queues a run and an epoch, then waits (alive) until it is killed.
LIVE_DRIVER = """
import sys
from sweeps.tracking.tracker import Tracker
t = Tracker(sys.argv[1], "exp", spool=sys.argv[2], log=lambda line: None)
t.ensure_run("k1", {"ssat.kind": "trial"}, name="k1")
t.log_epoch("k1", {"val/pgd10": 0.25}, 1)
print(len(t.queue), t.journal.name, flush=True)
sys.stdin.read()
"""


def _away() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_a_killed_drivers_queue_is_adopted_sent_once_and_a_replay_changes_nothing(tmp_path, store):
    spool = tmp_path / "tracking_spool.jsonl"
    proc = subprocess.run([sys.executable, "-c", DRIVER, _away(), str(spool)], capture_output=True, text=True,
                          timeout=180, cwd=ROOT, env=ENV)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert proc.stdout.strip() == "5"  # nothing could be sent
    journals = list(tmp_path.glob("tracking_spool.*.jsonl"))
    assert len(journals) == 1 and len(journals[0].read_text().splitlines()) == 5, journals
    ops = [json.loads(line) for line in journals[0].read_text().splitlines()]

    t = Tracker(store, "exp", spool=spool, **QUIET)
    assert t.queue == ops and not journals[0].exists()  # adopted in order: the dead driver's file is gone
    assert t.flush(timeout=1, interval=0.1)
    assert [p.name for p in tmp_path.glob("tracking_spool*.jsonl")] == []  # all sent: no journal, no spool left
    client, run = _run(store)
    assert run.info.status == "FINISHED" and run.data.tags["ssat.status"] == "FINISHED"
    assert _history(client, run.info.run_id, "val/pgd10") == [(1, 0.25), (2, 0.5)]

    # The same operations once more (a journal whose removal a kill interrupted), each with a new timestamp
    # and a new value: the first values stay, one per step.
    _replay(store, spool, ops, shift=10.0)
    client, again = _run(store)
    assert again.info.run_id == run.info.run_id
    assert _history(client, run.info.run_id, "val/pgd10") == [(1, 0.25), (2, 0.5)]
    assert _history(client, run.info.run_id, "perf/epoch_seconds") == [(1, 1.0), (2, 1.0)]


def test_a_live_drivers_journal_in_another_process_is_not_taken_until_it_is_gone(tmp_path, store):
    spool = tmp_path / "tracking_spool.jsonl"
    live = subprocess.Popen([sys.executable, "-c", LIVE_DRIVER, _away(), str(spool)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)
    try:
        queued, name = live.stdout.readline().split()
        assert queued == "2" and name == f"tracking_spool.{socket.gethostname()}.{live.pid}.0.jsonl"
        journal = tmp_path / name
        held = journal.read_text()
        other = Tracker(store, "exp", spool=spool, **QUIET)
        assert other.queue == [] and journal.read_text() == held  # its owner is alive: left alone
        assert other.flush(timeout=1, interval=0.1) and journal.read_text() == held
    finally:
        live.kill()
        live.wait(timeout=30)
    assert live.returncode == -signal.SIGKILL, live.stderr.read()[-2000:]
    adopter = Tracker(store, "exp", spool=spool, **QUIET)
    assert [op["op"] for op in adopter.queue] == ["ensure", "epoch"] and not journal.exists()
    assert adopter.flush(timeout=1, interval=0.1)
    client, run = _run(store)
    assert _history(client, run.info.run_id, "val/pgd10") == [(1, 0.25)]


def test_a_live_tracker_of_this_process_keeps_its_journal(tmp_path, store):
    spool = tmp_path / "tracking_spool.jsonl"
    live = Tracker(_away(), "exp", spool=spool, **QUIET)
    live.ensure_run("k1", {"ssat.kind": "trial"})
    assert len(live.queue) == 1 and live.journal.exists()
    other = Tracker(store, "exp", spool=spool, **QUIET)
    assert other.queue == [] and live.journal.exists()  # same process, still alive: left to its owner
    assert live.flush(timeout=0.1, interval=0.1) is False  # still away: moved to the spool for `sync`
    assert not live.journal.exists() and [json.loads(x)["op"] for x in spool.read_text().splitlines()] == ["ensure"]


def test_a_torn_last_line_is_reported_and_skipped(tmp_path, store):
    spool = tmp_path / "tracking_spool.jsonl"
    ensure = {"op": "ensure", "key": "k1", "tags": {"ssat.kind": "trial"}, "params": {}, "name": "k1"}
    epoch = {"op": "epoch", "key": "k1", "metrics": {f"val/m{i}": 0.25 for i in range(20)}, "step": 1, "ts": 1000}
    torn = json.dumps(epoch)[:200]  # the driver died while writing it
    spool.write_text(json.dumps(ensure) + "\n\n   \n" + json.dumps(epoch) + "\n" + torn)  # blank lines are no ops
    lines = []
    t = Tracker(store, "exp", spool=spool, log=lines.append)
    assert t.queue == [ensure, epoch]
    assert lines[0] == f"[tracking] skipped a torn line of tracking_spool.jsonl: {torn[:80]}"
    assert len(lines) == 2 and lines[1].startswith("[tracking] adopted 2 operation(s)")
    assert t.flush(timeout=1, interval=0.1) and not spool.exists()
    client, run = _run(store)
    assert _history(client, run.info.run_id, "val/m0") == [(1, 0.25)]


def _dead_pid() -> int:
    """The PID of a process of this host that has exited."""
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)


def test_adopted_operations_are_journaled_as_ours_before_the_old_files_go(tmp_path):
    spool = tmp_path / "tracking_spool.jsonl"
    host, dead = socket.gethostname(), _dead_pid()
    ops = [{"op": "tags", "key": f"k{i}", "tags": {"i": i}} for i in range(4)]
    spool.write_text(json.dumps(ops[0]) + "\n")  # what an earlier sweep's end left unsent
    (tmp_path / f"tracking_spool.{host}.{dead}.1.jsonl").write_text(json.dumps(ops[2]) + "\n" + json.dumps(ops[3]))
    (tmp_path / f"tracking_spool.{host}.{dead}.0.jsonl").write_text(json.dumps(ops[1]) + "\n")
    (tmp_path / "tracking_spool.other.jsonl").write_text(json.dumps(ops[0]) + "\n")  # not a journal name
    lines = []
    t = Tracker(_away(), "exp", spool=spool, log=lines.append)  # adopting sends nothing yet
    assert t.queue == ops
    assert [json.loads(x) for x in t.journal.read_text().splitlines()] == ops  # a kill now loses nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([t.journal.name, "tracking_spool.other.jsonl"])
    assert lines == [f"[tracking] adopted 4 operation(s) left unsent by an earlier driver (tracking_spool.jsonl, "
                     f"tracking_spool.{host}.{dead}.0.jsonl, tracking_spool.{host}.{dead}.1.jsonl)"]
    assert Tracker(_away(), "exp", spool=tmp_path / "elsewhere" / "tracking_spool.jsonl", **QUIET).queue == []


def test_whose_journal_counts_as_gone():
    host, me, dead = socket.gethostname(), os.getpid(), _dead_pid()
    stem = "tracking_spool"
    cases = {f"{stem}.other-host.{me}.0.jsonl": True,     # another host's driver: one driver per sweep at a time
             f"{stem}.{host}.{dead}.0.jsonl": True,        # a process of this host that exited
             f"{stem}.{host}.{me}.3.jsonl": False,         # this process (another Tracker in it)
             f"{stem}.{host}.1.0.jsonl": False,            # a live process of this host
             f"{stem}.{host}.x1.0.jsonl": False,           # not a journal name: never taken
             f"{stem}.{host}.jsonl": False,
             f"{stem}.node.example.org.{me}.0.jsonl": True}  # a host name with dots
    assert {name: _owner_gone(Path(name), stem) for name in cases} == cases


def test_a_store_that_failed_is_left_alone_until_its_retry_and_the_journal_makes_its_folders(tmp_path):
    """After a failed send, an unforced drain does not knock again before RETRY_AFTER_S and says the queue is not
    empty; the journal lives next to a spool whose folders do not exist yet."""
    spool = tmp_path / "sweep" / "state" / "tracking_spool.jsonl"
    t = Tracker(_away(), "exp", spool=spool, **QUIET)
    t.ensure_run("k1", {"ssat.kind": "trial"})
    assert len(t.queue) == 1 and t.journal.exists() and t.journal.parent == spool.parent
    assert t.drain() is False and len(t.queue) == 1


def test_an_artifact_root_is_used_for_a_local_store_only(tmp_path):
    """A tracking server keeps its own artifact root (`mlflow server --artifacts-destination`); a local store is
    given ours as a file URI."""
    assert Tracker(_away(), "exp", artifact_root=tmp_path, **QUIET).artifact_root is None
    local = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "exp", artifact_root=tmp_path / "art", **QUIET)
    assert local.artifact_root == (tmp_path / "art").resolve().as_uri()


def test_a_journal_that_cannot_be_written_is_said_once_and_nothing_queued_is_lost(tmp_path, store):
    """A full disk (here: the journal's folder is a file) fails the journal, never the sweep: the operations stay
    queued in memory and are sent once the store answers."""
    (tmp_path / "full").write_text("")
    spool = tmp_path / "full" / "tracking_spool.jsonl"
    lines = []
    away = Tracker(_away(), "exp", spool=spool, log=lines.append)
    away.ensure_run("k1", {"ssat.kind": "trial"}, name="k1")
    away.log_epoch("k1", {"val/pgd10": 0.5}, 1)
    assert [op["op"] for op in away.queue] == ["ensure", "epoch"]
    journal_lines = [ln for ln in lines if "journal" in ln]
    assert journal_lines == [f"[tracking] cannot write the journal {away.journal} (File exists); operations are "
                             "kept in memory"]
    t = Tracker(store, "exp", spool=spool, log=lines.append)
    t.ensure_run("k1", {"ssat.kind": "trial"}, name="k1")
    t.log_epoch("k1", {"val/pgd10": 0.5}, 1)
    client, run = _run(store)
    assert t.queue == [] and _history(client, run.info.run_id, "val/pgd10") == [(1, 0.5)]


def test_what_is_adopted_stays_on_disk_while_this_journal_cannot_be_written(tmp_path):
    """Adopting deletes the earlier driver's files only once they are journaled as ours: with this journal failing
    (a full disk), the spool stays, and a kill of this driver now loses nothing."""
    spool = tmp_path / "tracking_spool.jsonl"
    op = {"op": "tags", "key": "k1", "tags": {"i": 1}}
    spool.write_text(json.dumps(op) + "\n")
    (tmp_path / "full").write_text("")
    journal = Journal(spool, log=lambda line: None)
    journal.path = tmp_path / "full" / journal.path.name
    assert journal.adopt() == [op]
    assert spool.read_text() == json.dumps(op) + "\n"


def test_the_unsent_are_spooled_by_a_driver_whose_journal_was_never_written(tmp_path):
    spool = tmp_path / "tracking_spool.jsonl"
    journal = Journal(spool, log=lambda line: None)
    journal.spool_ops([{"op": "end", "key": "k1"}])
    assert not journal.path.exists() and spool.read_text() == '{"op": "end", "key": "k1"}\n'


def test_an_adopted_file_removed_meanwhile_is_no_error(tmp_path, monkeypatch):
    """`sweeps sync` may replay and remove the spool while a driver adopts it: both have it, nothing fails."""
    spool = tmp_path / "tracking_spool.jsonl"
    spool.write_text('{"op": "end", "key": "k1"}\n')
    journal = Journal(spool, log=lambda line: None)
    wrote = Journal.write

    def write_then_sync_removes_the_spool(self, ops):
        spool.unlink()
        return wrote(self, ops)

    monkeypatch.setattr(Journal, "write", write_then_sync_removes_the_spool)
    assert journal.adopt() == [{"op": "end", "key": "k1"}] and not spool.exists()

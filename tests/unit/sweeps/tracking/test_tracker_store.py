"""The Tracker against a real MLflow SQLite store: each operation, and first write wins for operations sent
again (a replayed journal, a retried trial).

Every replay here carries NEW timestamps and NEW values (MLflow itself drops only exact duplicates), and is
sent by a fresh Tracker, so the store is the only memory of what was logged.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from sweeps.tracking import tracker as tracking
from sweeps.tracking.run_store import flat_str
from sweeps.tracking.tracker import Tracker
from devtools.servers import free_port

QUIET = {"log": lambda line: None}


@pytest.fixture(autouse=True)
def _one_try(monkeypatch):
    """One request per try at a store that is away (MLflow would retry it), so those tests take no time."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _run(uri: str, key: str = "k1"):
    client = MlflowClient(uri)
    exp_id = client.get_experiment_by_name("exp").experiment_id
    (run,) = client.search_runs([exp_id], filter_string=f"tags.`ssat.key` = '{key}'")
    return client, run


def _first_driver(uri: str, epochs: list[dict], final: dict | None = None) -> list[dict]:
    """Log epochs 1..len(epochs) (and a final) and return the operations as a journal holds them."""
    t = Tracker(uri, "exp", **QUIET)
    t.ensure_run("k1", {"ssat.kind": "trial"}, {"p": 1}, name="k1")
    ops = [{"op": "ensure", "key": "k1", "tags": {"ssat.kind": "trial"}, "params": {"p": 1}, "name": "k1"}]
    for step, metrics in enumerate(epochs, start=1):
        t.log_epoch("k1", metrics, step)
        ops.append({"op": "epoch", "key": "k1", "metrics": metrics, "step": step})
    if final:
        t.log_final("k1", final["metrics"], final["tags"], len(epochs))
        ops.append({"op": "final", "key": "k1", **final, "step": len(epochs)})
    assert t.queue == []
    return ops


def _replay(uri: str, spool, ops: list[dict], shift: float) -> Tracker:
    """A fresh Tracker adopts `ops` as a dead driver's spool, each with a later timestamp and its values + shift."""
    later = []
    for op in ops:
        op = json.loads(json.dumps(op))
        if "metrics" in op:
            op["metrics"] = {k: v + shift for k, v in op["metrics"].items()}
            op["ts"] = 4_000_000_000_000 + op["step"]  # far later than any real write
        if "tags" in op and op["op"] == "final":
            op["tags"] = {k: f"{v}-replayed" for k, v in op["tags"].items()}
        later.append(op)
    spool.write_text("".join(json.dumps(op) + "\n" for op in later))
    t = Tracker(uri, "exp", spool=spool, **QUIET)
    assert len(t.queue) == len(later) and t.last_step == {} and t.runs == {}  # nothing known but the store
    assert t.flush(timeout=1, interval=0.1)
    return t


@pytest.mark.parametrize("with_probe", [True, False], ids=["epoch-seconds", "no-epoch-seconds"])
def test_a_replay_with_new_timestamps_and_values_keeps_the_first_value_per_step(tmp_path, store, with_probe):
    extra = {"perf/epoch_seconds": 1.5} if with_probe else {}
    # epoch 2 logs another metric than epoch 1: the last step must not depend on one metric's history
    epochs = [{"val/pgd10": 0.25, **extra}, {"train/loss": 0.5, **extra}]
    final = {"metrics": {"test/best/pgd20": 40.0}, "tags": {"protocol/best/pgd20": "pgd20-record"}}
    ops = _first_driver(store, epochs, final)
    client, run = _run(store)
    first_ts = {m.step: m.timestamp for m in client.get_metric_history(run.info.run_id, "val/pgd10")}

    third = {"op": "epoch", "key": "k1", "metrics": {"val/pgd10": 0.75, "train/loss": 0.125}, "step": 3}
    _replay(store, tmp_path / "tracking_spool.jsonl", ops + [third], shift=100.0)

    client, run = _run(store)
    rid = run.info.run_id
    assert _history(client, rid, "val/pgd10") == [(1, 0.25), (3, 100.75)]  # step 1 kept, step 3 is new
    assert _history(client, rid, "train/loss") == [(2, 0.5), (3, 100.125)]
    assert {m.step: m.timestamp for m in client.get_metric_history(rid, "val/pgd10")}[1] == first_ts[1]
    if with_probe:
        assert _history(client, rid, "perf/epoch_seconds") == [(1, 1.5), (2, 1.5)]
    assert _history(client, rid, "test/best/pgd20") == [(2, 40.0)]  # one final value, the first
    assert run.data.tags["protocol/best/pgd20"] == "pgd20-record"  # its record stays with it
    assert run.data.params == {"p": "1"}


def test_a_live_tracker_skips_an_epoch_it_logged_and_logs_a_later_one(store):
    t = Tracker(store, "exp", **QUIET)
    t.ensure_run("k1", {"ssat.kind": "trial"})
    t.log_epoch("k1", {"val/pgd10": 0.25}, 1)
    t.log_epoch("k1", {"val/pgd10": 0.5}, 1)   # a retried trial reports epoch 1 again
    t.log_epoch("k1", {"val/pgd10": 0.75}, 2)
    t.log_final("k1", {"test/best/pgd20": 40.0}, {}, 2)
    t.log_final("k1", {"test/best/pgd20": 41.0, "test/last/pgd20": 39.0}, {}, 2)  # only the new metric lands
    client, run = _run(store)
    assert _history(client, run.info.run_id, "val/pgd10") == [(1, 0.25), (2, 0.75)]
    assert run.data.metrics == {"val/pgd10": 0.75, "test/best/pgd20": 40.0, "test/last/pgd20": 39.0}
    assert t.last_step == {"k1": 2}


def test_a_fresh_tracker_logs_the_first_epoch_of_a_run_without_metrics(store):
    Tracker(store, "exp", **QUIET).ensure_run("k1", {"ssat.kind": "trial"})
    t = Tracker(store, "exp", **QUIET)
    t.log_epoch("k1", {"val/pgd10": 0.25}, 0)  # nothing logged yet: even step 0 is new
    t.log_epoch("k1", {"val/pgd10": 0.5}, 1)
    client, run = _run(store)
    assert _history(client, run.info.run_id, "val/pgd10") == [(0, 0.25), (1, 0.5)]


# ---- each operation, as the store sees it ------------------------------------------------------------------
def test_a_run_is_made_once_with_its_tags_params_and_name(tmp_path, store, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRUNCATE_LONG_VALUES", "false")  # a store that refuses a value past its limit
    root = tmp_path / "artifacts"
    t = Tracker(store, "exp", artifact_root=root, **QUIET)
    t.ensure_run("k1", {"ssat.kind": "trial", "ssat.row": None}, {"p": 1, "long": "x" * 7000, "none": None})
    t.ensure_run("k1", {"ssat.kind": "other"}, {"p": 2})  # found again by its key: nothing changes
    t.ensure_run("k2", {})
    t.end("k2")
    client, run = _run(store)
    exp = client.get_experiment_by_name("exp")
    assert exp.artifact_location == root.resolve().as_uri()
    assert run.info.run_name == "k1" and run.data.tags["ssat.key"] == "k1"
    assert run.data.tags["ssat.kind"] == "trial" and run.data.tags["ssat.row"] == "None"
    assert run.data.params == {"p": "1", "long": "x" * 6000, "none": "None"}  # cut to MLflow's limit
    assert _run(store, "k2")[1].data.params == {} and _run(store, "k2")[1].info.status == "FINISHED"
    fresh = Tracker(store, "exp", **QUIET)  # another driver finds both by key in the store
    assert fresh.find_run("k1") == run.info.run_id and fresh.find_run("nope") is None
    assert fresh.experiment_id == exp.experiment_id
    assert len(client.search_runs([exp.experiment_id])) == 2


def test_tags_artifacts_finals_and_the_end_reach_the_run(tmp_path, store):
    import time

    (tmp_path / "config.json").write_text("{}")
    t = Tracker(store, "exp", artifact_root=tmp_path / "artifacts", **QUIET)
    t.ensure_run("k1", {"ssat.status": "RUNNING"}, name="row-a")
    before = int(time.time() * 1000)
    t.log_epoch("k1", {f"train/m{i:04d}": float(i) for i in range(1001)}, 1)  # more than one MLflow batch
    t.log_final("k1", {"test/best/pgd20": 40}, {"protocol/best/pgd20": {"n": 4}}, 1)
    after = int(time.time() * 1000)
    t.set_tags("k1", {"ssat.status": "FAILED: boom", "x": None})
    t.log_artifact("k1", tmp_path / "config.json", "configs")
    t.log_artifact("k1", tmp_path / "gone.pt", None)  # a checkpoint that is not there is skipped
    t.end("k1", "FAILED")
    assert t.queue == []
    client, run = _run(store)
    rid = run.info.run_id
    assert run.info.run_name == "row-a" and run.info.status == "FAILED"
    assert run.data.tags["ssat.status"] == "FAILED: boom" and run.data.tags["x"] == "None"
    assert run.data.tags["protocol/best/pgd20"] == "{'n': 4}"
    assert {k: v for k, v in run.data.metrics.items() if k.startswith("train/")} == {
        f"train/m{i:04d}": float(i) for i in range(1001)}
    (final,) = client.get_metric_history(rid, "test/best/pgd20")
    (epoch,) = client.get_metric_history(rid, "train/m0000")
    assert (final.step, final.value, epoch.step) == (1, 40.0, 1)
    assert before <= epoch.timestamp <= final.timestamp <= after
    assert [a.path for a in client.list_artifacts(rid)] == ["configs"]
    assert [a.path for a in client.list_artifacts(rid, "configs")] == ["configs/config.json"]


def test_a_run_ended_killed_is_reopened_running(store):
    t = Tracker(store, "exp", **QUIET)
    t.ensure_run("k1", {"ssat.status": "KILLED"})
    t.end("k1", "KILLED")
    assert _run(store)[1].info.status == "KILLED"
    t.reopen("k1")  # the sweep resumes it
    run = _run(store)[1]
    assert run.info.status == "RUNNING" and run.data.tags["ssat.status"] == "RUNNING"


@pytest.mark.parametrize("ended", ["FINISHED", "FAILED", None])
def test_kill_ends_only_a_run_still_running_and_leaves_an_ended_one_as_it_was(store, ended):
    """Ctrl+C can land after a trial's last report but before Tune completed it: the driver kills every trial
    that reported, and only those nobody ended must change (a FINISHED run stays FINISHED, with its tags)."""
    t = Tracker(store, "exp", **QUIET)
    t.ensure_run("k1", {"ssat.status": "RUNNING"})
    if ended:
        t.set_tags("k1", {"ssat.status": ended})
        t.end("k1", ended)
    t.kill("k1", {"ssat.status": "KILLED: interrupted (Ctrl+C) in epoch 2", "extra": "x"})
    run = _run(store)[1]
    if ended:
        assert run.info.status == ended and run.data.tags["ssat.status"] == ended and "extra" not in run.data.tags
    else:
        assert run.info.status == "KILLED" and run.info.end_time is not None
        assert run.data.tags["ssat.status"] == "KILLED: interrupted (Ctrl+C) in epoch 2"
        assert run.data.tags["extra"] == "x"


def test_a_kill_replayed_after_the_run_was_ended_elsewhere_changes_nothing(tmp_path, store):
    """The kill is queued like any operation: replayed later (a spool), it must not undo an end that landed
    meanwhile, e.g. the callback's FINISHED sent before it."""
    Tracker(store, "exp", **QUIET).ensure_run("k1", {"ssat.status": "RUNNING"})
    spool = tmp_path / "tracking_spool.jsonl"
    spool.write_text(json.dumps({"op": "end", "key": "k1", "status": "FINISHED"}) + "\n"
                     + json.dumps({"op": "kill", "key": "k1", "tags": {"ssat.status": "KILLED: x"}}) + "\n")
    assert Tracker(store, "exp", spool=spool, **QUIET).flush(timeout=1, interval=0.1)
    run = _run(store)[1]
    assert run.info.status == "FINISHED" and run.data.tags["ssat.status"] == "RUNNING"


def test_an_unreachable_store_keeps_operations_in_order_and_they_go_when_it_is_back(store, monkeypatch):
    lines = []
    t = Tracker(f"http://127.0.0.1:{free_port()}", "exp", log=lines.append)
    t.ensure_run("k1", {"ssat.kind": "trial"})
    assert len(t.queue) == 1 and len(lines) == 1 and "unavailable" in lines[0] and "1 operation(s) kept" in lines[0]
    t.client = MlflowClient(store)  # the store is back
    t.log_epoch("k1", {"val/pgd10": 0.25}, 1)
    assert [op["op"] for op in t.queue] == ["ensure", "epoch"]  # left alone until RETRY_AFTER_S has passed
    assert MlflowClient(store).get_experiment_by_name("exp") is None
    assert t.drain(force=True) and t.queue == []
    assert lines[1:] == ["[tracking] store reachable again; queued operations sent"]
    client, run = _run(store)
    assert _history(client, run.info.run_id, "val/pgd10") == [(1, 0.25)]
    t.log_epoch("ghost", {"val/pgd10": 0.5}, 1)  # a run nobody made: kept (the earlier failure's pause holds it)
    monkeypatch.setattr(tracking, "RETRY_AFTER_S", 0.0)
    assert not t.drain(force=True) and len(t.queue) == 1 and "LookupError: no run for key ghost" in lines[2]
    t.ensure_run("k2", {})  # tried again at once (no pause now), and stuck behind it: order is kept
    assert [op["op"] for op in t.queue] == ["epoch", "ensure"] and len(lines) == 3  # warned once
    assert _run(store)[0].search_runs([_run(store)[1].info.experiment_id], "tags.`ssat.key` = 'k2'") == []


def test_flush_spools_what_is_left_and_reports_it(tmp_path):
    lines = []
    spool = tmp_path / "sweep" / "tracking_spool.jsonl"
    t = Tracker(f"http://127.0.0.1:{free_port()}", "exp", spool=spool, log=lines.append)
    t.ensure_run("k1", {"ssat.kind": "trial"})
    t.end("k1")
    journal = t.journal
    assert journal.parent == spool.parent and [json.loads(x)["op"] for x in journal.read_text().splitlines()] == [
        "ensure", "end"]
    assert t.flush(timeout=0.5, interval=0.1) is False
    assert t.queue == [] and not journal.exists()
    assert [json.loads(x)["op"] for x in spool.read_text().splitlines()] == ["ensure", "end"]
    assert lines[-1] == (f"[tracking] 2 operation(s) spooled to {spool}; replay them with "
                         "`python -m sweeps sync NAME` once the store is back")
    without = Tracker(f"http://127.0.0.1:{free_port()}", "exp", log=lines.append)
    without.ensure_run("k1", {})
    assert without.flush(timeout=0.1, interval=0.1) is False and len(without.queue) == 1  # nowhere to spool


def test_flush_waits_for_the_store_and_returns_once_all_is_sent(store):
    import threading
    import time

    t = Tracker(store, "exp", **QUIET)
    t.log_epoch("late", {"val/pgd10": 0.25}, 1)  # its run is made by another writer a moment later
    assert len(t.queue) == 1
    other = threading.Timer(0.5, lambda: Tracker(store, "exp", **QUIET).ensure_run("late", {}))
    other.start()
    t0 = time.monotonic()
    assert t.flush(timeout=20, interval=0.1) is True and t.queue == []
    assert time.monotonic() - t0 < 10  # back as soon as it is sent, not at the timeout
    other.join()
    client, run = _run(store, "late")
    assert _history(client, run.info.run_id, "val/pgd10") == [(1, 0.25)]


# ---- helpers of the module ---------------------------------------------------------------------------------
def test_the_store_uri_and_its_check(tmp_path, store, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.default_uri(tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert tracking.resolve_uri(None, tmp_path) == tracking.default_uri(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:5000")
    assert tracking.resolve_uri(None, tmp_path) == "http://env:5000"
    assert tracking.resolve_uri("http://given:5000", tmp_path) == "http://given:5000"
    # a bare postgresql:// store goes through the pinned psycopg2 (SQLAlchemy 2.1 would load psycopg 3)
    assert tracking.resolve_uri("postgresql://mlflow@127.0.0.1:5432/mlflow", tmp_path) == \
        "postgresql+psycopg2://mlflow@127.0.0.1:5432/mlflow"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql://u@h/db")
    assert tracking.resolve_uri(None, tmp_path) == "postgresql+psycopg2://u@h/db"
    for kept in ("postgresql+psycopg2://u@h/db", "mysql://u@h/postgresql://", "sqlite:///x/postgresql://"):
        assert tracking.with_pg_driver(kept) == kept

    tracking.check_reachable(store)  # a usable store: no error
    for away in (f"http://127.0.0.1:{free_port()}", f"https://127.0.0.1:{free_port()}"):
        with pytest.raises(tracking.TrackingUnavailable, match=rf"MLflow tracking server at {away} cannot be reached "
                           r"\(.*\); start it, or pass --tracking-uri / MLFLOW_TRACKING_URI of a running one$"):
            tracking.check_reachable(away, timeout=2)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(tracking.TrackingUnavailable, match=r"MLflow store sqlite:///.*a-file/x/mlflow\.db cannot be "
                       r"used: \[Errno 20\] Not a directory: '.*a-file/x'$"):  # the cause, as the OS gave it
        tracking.check_reachable(f"sqlite:///{tmp_path / 'a-file' / 'x' / 'mlflow.db'}")
    deep = tmp_path / ("d" * 250) / ("e" * 250)  # a cause longer than 500 characters is cut there
    deep.mkdir(parents=True)
    (deep / "a-file").write_text("")
    uri = f"sqlite:///{deep / 'a-file' / 'x' / 'mlflow.db'}"
    with pytest.raises(tracking.TrackingUnavailable) as err:
        tracking.check_reachable(uri)
    cause = f"[Errno 20] Not a directory: '{deep / 'a-file' / 'x'}'"
    assert len(cause) > 500 and str(err.value) == f"MLflow store {uri} cannot be used: {cause[:500]}"
    with pytest.raises(tracking.TrackingUnavailable) as err:  # the error names where the URI came from
        tracking.check_reachable(uri, source="--tracking-uri")
    assert str(err.value) == f"--tracking-uri: MLflow store {uri} cannot be used: {cause[:500]}"


def test_the_source_of_a_tracking_uri_is_the_option_the_variable_or_the_default(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.uri_source("sqlite:///x.db") == "--tracking-uri"
    assert tracking.uri_source(None) == "the default store (--workdir)"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    assert tracking.uri_source(None) == "MLFLOW_TRACKING_URI" and tracking.uri_source("y") == "--tracking-uri"


def test_check_reachable_asks_a_servers_health(tmp_path):
    import http.server
    import threading

    class Health(http.server.BaseHTTPRequestHandler):
        code = 200

        def do_GET(self):  # noqa: N802 (http.server's name)
            asked.append(self.requestline)  # as sent (self.path has '//' folded)
            self.send_response(self.code)
            self.end_headers()

        def log_message(self, *args):
            pass

    asked = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        tracking.check_reachable(url + "/")
        tracking.check_reachable(url + "/mlfloX/")  # a server behind a path prefix: only the slash is stripped
        Health.code = 204
        with pytest.raises(tracking.TrackingUnavailable, match=rf"MLflow server at {url} answered 204 on /health"):
            tracking.check_reachable(url)
        assert asked == ["GET /health HTTP/1.1", "GET /mlfloX/health HTTP/1.1", "GET /health HTTP/1.1"]
    finally:
        server.shutdown()
        server.server_close()


def test_check_reachable_gives_up_on_a_silent_server_after_its_timeout():
    import socket
    import threading

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        errors = []

        def check():
            try:
                tracking.check_reachable(url, timeout=0.3)
            except tracking.TrackingUnavailable as exc:
                errors.append(str(exc))

        worker = threading.Thread(target=check, daemon=True)
        worker.start()
        worker.join(timeout=10)
        assert not worker.is_alive() and len(errors) == 1 and "timed out" in errors[0]


def test_epoch_and_final_metrics_are_picked_by_prefix_and_type():
    result = {"train/loss": 0.5, "val/pgd10": 40, "adv/alpha": 0.1, "sched/eps": 0.03, "perf/epoch_seconds": 2.0,
              "val/flag": True, "val/name": "x", "test/best/pgd20": 41.0, "time/total_s": 9, "epoch": 3,
              "protocol/best/pgd20": "{}", "other": 1.0}
    assert tracking.epoch_metrics(result) == {"train/loss": 0.5, "val/pgd10": 40, "adv/alpha": 0.1,
                                              "sched/eps": 0.03, "perf/epoch_seconds": 2.0}
    assert tracking.final_metrics(result) == ({"test/best/pgd20": 41.0, "time/total_s": 9},
                                              {"protocol/best/pgd20": "{}"})
    assert flat_str(None) == "None" and flat_str(1.5) == "1.5"


def test_params_learnt_later_join_the_run_and_the_first_write_wins(store, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRUNCATE_LONG_VALUES", "false")  # a store that refuses a value past its limit
    t = Tracker(store, "exp", **QUIET)
    t.ensure_run("k1", {}, {"p": 1})
    t.log_params("k1", {"p": 2, "gpu": "H200", "long": "y" * 7000, "nested": {"a": [1, 2]}})
    t.log_params("k1", {"gpu": "A100", "threads": 4})  # "gpu" is logged already: kept as it is
    assert t.flush(timeout=5)
    params = _run(store)[1].data.params
    assert params == {"p": "1", "gpu": "H200", "long": "y" * 6000, "nested": flat_str({"a": [1, 2]}),
                      "threads": "4"}


def test_the_file_of_a_sqlite_store():
    assert tracking.sqlite_path("sqlite:////abs/dir/mlflow.db") == Path("/abs/dir/mlflow.db")
    assert tracking.sqlite_path("sqlite:///rel/mlflow.db?mode=rwc&cache=shared") == Path("rel/mlflow.db")
    assert tracking.sqlite_path("sqlite:///a.db?x=1?y=2") == Path("a.db")  # the query starts at its first "?"
    for other in ("sqlite:///:memory:", "sqlite:///", "sqlite://", "SQLITE:///a.db", "postgresql://u@h/db",
                  "http://127.0.0.1:5000", "a.db"):
        assert tracking.sqlite_path(other) is None, other


def test_a_journal_that_cannot_be_written_is_said_once_per_spell_and_nothing_is_lost(tmp_path):
    lines = []
    blocked = tmp_path / "sweep"
    blocked.write_text("")  # a file where the sweep's folder should be: the journal cannot be made
    t = Tracker(f"http://127.0.0.1:{free_port()}", "exp", spool=blocked / "tracking_spool.jsonl", log=lines.append)
    t.ensure_run("k1", {})
    t.end("k1")
    said = [ln for ln in lines if "cannot write the journal" in ln]
    assert len(said) == 1 and said[0].endswith("operations are kept in memory")  # once, not per operation
    assert [op["op"] for op in t.queue] == ["ensure", "end"]  # kept, in order
    blocked.unlink()  # the folder can be made again: the next operation is journaled
    t.log_params("k1", {"p": 1})
    assert [json.loads(x)["op"] for x in t.journal.read_text().splitlines()] == ["params"]
    blocked_again = t.journal
    blocked_again.unlink()
    blocked_again.mkdir()  # a directory where the journal file should be: failing again is said again
    t.end("k1")
    assert len([ln for ln in lines if "cannot write the journal" in ln]) == 2
    assert [op["op"] for op in t.queue] == ["ensure", "end", "params", "end"]


def test_an_empty_spool_left_by_a_driver_is_adopted_and_removed(tmp_path):
    spool = tmp_path / "tracking_spool.jsonl"
    spool.write_text("\n\n")  # a spool whose operations were all sent: blank lines only
    lines = []
    t = Tracker(f"http://127.0.0.1:{free_port()}", "exp", spool=spool, log=lines.append)
    assert t.queue == [] and not spool.exists()  # nothing to journal: the file goes
    assert lines == ["[tracking] adopted 0 operation(s) left unsent by an earlier driver (tracking_spool.jsonl)"]


def test_a_second_creator_of_a_new_store_waits_for_the_first_then_finds_it_made(tmp_path):
    """While one driver holds the creation lock of a new SQLite store, another's check_reachable waits (it neither
    refuses nor creates beside it); once the lock is released it opens the store the first one made."""
    import fcntl
    import threading

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    outcome = []

    def second():
        try:
            tracking.check_reachable(uri)
            outcome.append("ok")
        except Exception as exc:  # noqa: BLE001 - the test reports whatever it raised
            outcome.append(repr(exc))

    with open(db, "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first creator, mid-creation
        waiter = threading.Thread(target=second, daemon=True)
        waiter.start()
        waiter.join(1.5)
        assert waiter.is_alive() and outcome == [] and db.stat().st_size == 0  # waiting, nothing made
        tracking.new_sqlite_store(uri)  # the first creator makes the store, then lets go
    waiter.join(60)
    assert outcome == ["ok"] and not list(tmp_path.glob(".mlflow.db.creating-*"))
    assert MlflowClient(uri).search_experiments()  # the store both opened


def test_a_store_wedged_by_a_cut_migration_fails_the_check_with_its_fix(store, monkeypatch):
    """What check_reachable says when MLflow meets the `_alembic_tmp_` table a stop during creation left behind."""
    class Wedged:
        def __init__(self, uri):
            pass

        def search_experiments(self):
            raise RuntimeError("(sqlite3.OperationalError) table _alembic_tmp_endpoints already exists")

    monkeypatch.setattr(tracking, "MlflowClient", Wedged)
    with pytest.raises(tracking.TrackingUnavailable) as err:
        tracking.check_reachable(store, source="--tracking-uri")
    db = store.removeprefix("sqlite:///")
    assert str(err.value) == (
        f"--tracking-uri: MLflow store {store} cannot be used: (sqlite3.OperationalError) table _alembic_tmp_endpoints "
        "already exists. Its tables were left half-made by a stop while MLflow created them: if no sweep wrote to "
        f"{db} (a new store), delete that file and start again; `mlflow db upgrade` cannot mend it")


def test_a_servers_health_is_asked_with_a_ten_second_timeout(monkeypatch):
    asked = []

    def urlopen(url, timeout):
        asked.append((url, timeout))
        raise tracking.urllib.error.URLError("refused")

    monkeypatch.setattr(tracking.urllib.request, "urlopen", urlopen)
    with pytest.raises(tracking.TrackingUnavailable, match="cannot be reached"):
        tracking.check_reachable("http://127.0.0.1:5/")
    assert asked == [("http://127.0.0.1:5/health", 10.0)]


def test_an_empty_store_file_is_made_whole(tmp_path):
    """An empty file (a creation stopped before its rename, or `touch`) is a new store: made beside it and renamed."""
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"")
    tracking.new_sqlite_store(f"sqlite:///{db}")
    assert db.stat().st_size > 0 and list(tmp_path.iterdir()) == [db]


def test_the_first_failure_is_said_once_with_its_error_cut_at_120_characters(store):
    lines = []
    t = Tracker(store, "exp", log=lines.append)

    def away(op):
        raise ConnectionError("x" * 200)

    t.store.apply = away
    t.set_tags("k1", {"a": "1"})
    t.set_tags("k1", {"b": "2"})
    assert t.drain(force=True) is False
    assert lines == [f"[tracking] {store} unavailable (ConnectionError: {'x' * 120}); 1 operation(s) kept and retried; "
                     "training goes on"]


def test_flush_retries_every_two_seconds_until_its_timeout(store, monkeypatch):
    t = Tracker(store, "exp", **QUIET)
    t.queue = [{"op": "tags", "key": "k1", "tags": {"a": "1"}}]
    t.store.apply = lambda op: (_ for _ in ()).throw(ConnectionError("away"))
    clock, slept = [0.0], []

    def sleep(s):
        slept.append(s)
        clock[0] += s

    # the tracker's clock only: the process's time module stays real (pytest and mutmut time with it)
    monkeypatch.setattr(tracking, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep))
    assert t.flush(timeout=5) is False
    assert slept == [2.0, 2.0, 2.0] and len(t.queue) == 1  # no journal to spool to: kept in memory

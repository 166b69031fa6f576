"""First write wins: operations sent again (a replayed journal, a retried trial) against a real MLflow SQLite store.

Every replay here carries NEW timestamps and NEW values (MLflow itself drops only exact duplicates), and is
sent by a fresh Tracker, so the store is the only memory of what was logged.
"""
from __future__ import annotations

import json
import shutil

import pytest
from mlflow.tracking import MlflowClient

from sweeps.tracking import Tracker

QUIET = {"log": lambda line: None}


@pytest.fixture
def store(tmp_path, tmp_path_factory) -> str:
    """The URI of a fresh, real MLflow SQLite store of this test's own: a copy of an empty store made once per
    session (creating its tables takes seconds, copying the file does not)."""
    empty = tmp_path_factory.getbasetemp() / "mlflow-empty-store.db"
    if not empty.exists():
        MlflowClient(f"sqlite:///{empty}").search_experiments(max_results=1)
    shutil.copy(empty, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


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
    assert t.flush(timeout=10)
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

"""sweeps/driver/reuse.py on a real SQLite MLflow store: a trial takes a whole FINISHED run of the same config hash and
seed from another sweep; a damaged or partly recorded one is passed over, saying why; the reference run it
becomes is read by analysis as the run it names."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from analysis.collect import load_mlflow_runs
from sweeps.driver.reuse import Reuse, code_differs, find, reference, summary, why_not
from sweeps.tracking.tracker import Tracker

CODE = {"git_commit": "abc", "git_dirty": False, "lock_sha256": "l0"}


def record(key: str, h: str = "h1", seed: int = 0, name: str = "a s0") -> SimpleNamespace:
    return SimpleNamespace(key=key, name=name, params={"optim.epochs": 3, "method.beta": 0.4},
                           tags={"ssat.kind": "trial", "ssat.key": key, "ssat.config_hash": h, "ssat.seed": seed,
                                 "ssat.sweep": key.split("-")[0], "ssat.row": "a", "ssat.table": "ablation",
                                 "ssat.stage": "grid"})


def trained(client, tmp: Path, sweep: str, h: str = "h1", seed: int = 0, epochs_logged: int = 3, status="FINISHED",
            damage: str | None = None, code=CODE, tests=("clean", "pgd20")) -> str:
    """A trial run as a sweep leaves it: params, per-epoch loss, test metrics with protocol records, checkpoints."""
    exp = client.get_experiment_by_name(sweep) or client.get_experiment(client.create_experiment(sweep))
    tags = {"ssat.kind": "trial", "ssat.key": f"{sweep}-{h}-s{seed}-grid", "ssat.config_hash": h,
            "ssat.seed": str(seed), "ssat.sweep": sweep, "ssat.status": status,
            **{f"repro.{k}": str(v) for k, v in code.items()}}
    run = client.create_run(exp.experiment_id, run_name=f"a s{seed}", tags=tags)
    rid = run.info.run_id
    client.log_param(rid, "optim.epochs", 3)
    for e in range(1, epochs_logged + 1):
        client.log_metric(rid, "train/loss", 2.0 - e / 10, step=e)
    client.log_metric(rid, "time/epochs", epochs_logged, step=epochs_logged)
    for t in tests:
        client.log_metric(rid, f"test/best/{t}", 50.0, step=3)
        if damage != "protocol":
            client.set_tag(rid, f"protocol/best/{t}", json.dumps({"attack": t}))
    ck = tmp / f"{rid}"
    ck.mkdir()
    (ck / "best.pt").write_bytes(b"weights")
    digest = hashlib.sha256(b"weights" if damage != "checksum" else b"other").hexdigest()
    (ck / "best.pt.sha256").write_text(f"{digest}  best.pt\n")
    if damage != "no checkpoint":
        client.log_artifacts(rid, str(ck), "checkpoints")
    client.set_terminated(rid, "FINISHED")
    return rid


def new_sweep(uri: str) -> tuple[Tracker, str]:
    """The tracker of a sweep "new" whose parent run is in the store, and that run's id."""
    tracker = Tracker(uri, "new", log=lambda s: None)
    tracker.ensure_run("new-sweep", {"ssat.kind": "sweep"}, {}, name="new")
    tracker.drain()
    return tracker, tracker.find_run("new-sweep")


@pytest.fixture
def store(store):
    """The shared fresh store (tests/unit/conftest.py) and its client."""
    return store, MlflowClient(store)


def test_a_whole_run_is_reusable_and_each_kind_of_damage_is_named(store, tmp_path):
    uri, client = store
    assert why_not(client, client.get_run(trained(client, tmp_path, "a"))) is None
    cases = {"its status is 'STOPPED_EARLY: asha'": dict(status="STOPPED_EARLY: asha"),
             "it recorded 2 of 3 epochs": dict(epochs_logged=2),
             "it has no test metric": dict(tests=()),
             "a test metric lacks its protocol record": dict(damage="protocol"),
             "its best checkpoint is not among its artifacts": dict(damage="no checkpoint"),
             "its best checkpoint fails its checksum": dict(damage="checksum")}
    for why, kw in cases.items():
        assert why_not(client, client.get_run(trained(client, tmp_path, "b", **kw))) == why, why


def test_a_run_missing_an_epochs_loss_is_partly_recorded(store, tmp_path):
    """It says all its epochs ran (time/epochs), but an epoch's metrics never reached the store."""
    uri, client = store
    rid = trained(client, tmp_path, "a", epochs_logged=2)
    client.log_metric(rid, "time/epochs", 3, step=3)
    assert why_not(client, client.get_run(rid)) == "its training loss is logged at 2 of 3 epochs"


def test_find_takes_the_whole_run_of_another_sweep_and_says_why_it_passes_one_over(store, tmp_path):
    uri, client = store
    good = trained(client, tmp_path, "old", code={**CODE, "git_commit": "def"})
    other = trained(client, tmp_path, "other", damage="checksum")
    client.delete_tag(other, "ssat.sweep")  # a run that does not say its sweep is named by "?"
    trained(client, tmp_path, "old", h="h2")  # another configuration
    said = []
    mine = Tracker(uri, "new", log=lambda s: None).experiment_id
    found = find([("new-h1-s0-grid", record("new-h1-s0-grid")), ("new-h3-s0-grid", record("new-h3-s0-grid", "h3"))],
                 client, mine, CODE, said.append)
    assert found == {"new-h1-s0-grid": Reuse(good, "old", ["the git commit"])}
    assert said == [f"[reuse] not reusing run {other} of ? for a s0: its best checkpoint fails its checksum"]
    assert summary(found, 2) == "[reuse] 1 of 2 trials reused: 1 from old (the git commit differs for 1)"


def test_the_sweeps_own_runs_and_references_are_never_candidates(store, tmp_path):
    uri, client = store
    tracker = Tracker(uri, "new", log=lambda s: None)
    trained(client, tmp_path, "new")  # this sweep's own run of that config
    assert find([("k", record("k"))], client, tracker.experiment_id, CODE, lambda s: None) == {}


def test_code_differences_are_named():
    run = SimpleNamespace(data=SimpleNamespace(tags={"repro.git_commit": "abc", "repro.git_dirty": "True",
                                                     "repro.lock_sha256": "l0"}))
    assert code_differs(run, CODE) == ["uncommitted changes"]


def test_a_reference_run_reads_in_analysis_as_the_run_it_reuses(store, tmp_path):
    uri, client = store
    original = trained(client, tmp_path, "old")
    tracker, parent = new_sweep(uri)
    rec = record("new-h1-s0-grid", name="b s0")
    rec.tags["ssat.row"] = "b"
    reference(tracker, rec, Reuse(original, "old", []), parent, client)
    assert tracker.flush(timeout=10)
    ref = client.get_run(tracker.find_run("new-h1-s0-grid"))
    assert (ref.data.tags["ssat.reuses"], ref.data.tags["ssat.reused_from"], ref.info.status) == (original, "old",
                                                                                                   "FINISHED")
    assert ref.data.metrics["test/best/pgd20"] == 50.0 and "protocol/best/pgd20" in ref.data.tags  # for the UI
    runs = load_mlflow_runs(["new"], uri)
    trial = runs[runs["meta.kind"] == "trial"].iloc[0]
    assert (trial["run_id"], trial["meta.reused_by"], trial["meta.row"], trial["run_name"], trial["experiment"]) == (
        original, ref.info.run_id, "b", "b s0", "new")  # the trained run, under the new sweep's identity


def test_what_a_run_lacks_is_named_with_its_numbers(store, tmp_path):
    uri, client = store
    untagged = trained(client, tmp_path, "a")
    client.delete_tag(untagged, "ssat.status")
    assert why_not(client, client.get_run(untagged)) == "its status is 'unknown'"
    run = client.get_run(trained(client, tmp_path, "a"))
    run.data.params.pop("optim.epochs")  # a run of code that did not record it: never taken for whole
    assert why_not(client, run) == "it recorded 3 of 0 epochs"
    run = client.get_run(trained(client, tmp_path, "a"))
    run.data.metrics.pop("time/epochs")
    assert why_not(client, run) == "it recorded 0 of 3 epochs"
    run.data.params["optim.epochs"] = "1"  # one epoch, and no record of it
    assert why_not(client, run) == "it recorded 0 of 1 epochs"


def test_a_run_without_its_first_epochs_loss_is_partly_recorded(store, tmp_path):
    uri, client = store
    rid = trained(client, tmp_path, "a", epochs_logged=0)
    for e in (2, 3):
        client.log_metric(rid, "train/loss", 1.0, step=e)
    client.log_metric(rid, "time/epochs", 3, step=3)
    assert why_not(client, client.get_run(rid)) == "its training loss is logged at 2 of 3 epochs"


def test_only_finished_trained_runs_of_other_sweeps_are_candidates(store, tmp_path):
    uri, client = store
    mine = Tracker(uri, "new", log=lambda s: None).experiment_id
    running = trained(client, tmp_path, "old")
    client.update_run(running, "RUNNING")  # its tag says FINISHED, MLflow does not: still being written
    ref = trained(client, tmp_path, "other")
    client.set_tag(ref, "ssat.reuses", "r0")  # a reference: never reused in turn (the run it names is)
    anon = trained(client, tmp_path, "third")
    client.delete_tag(anon, "ssat.config_hash")
    assert find([("k", record("k"))], client, mine, CODE, lambda s: None) == {}


def test_the_newest_whole_run_is_taken(store, tmp_path):
    """By when it ended, not when it started: a run started first may end last."""
    uri, client = store
    first = trained(client, tmp_path, "old")
    second = trained(client, tmp_path, "old")
    client.update_run(first, "FINISHED")  # ends again, now after the second
    client.set_terminated(first, "FINISHED", end_time=client.get_run(second).info.end_time + 1000)
    assert find([("k", record("k"))], client, None, CODE, lambda s: None)["k"].run_id == first


def test_the_summary_counts_per_sweep_and_per_difference():
    found = {"a": Reuse("1", "s2", ["the git commit", "the lock file"]), "b": Reuse("2", "s1", ["the git commit"]),
             "c": Reuse("3", "s2", [])}
    assert summary(found, 5) == ("[reuse] 3 of 5 trials reused: 1 from s1, 2 from s2 (the git commit differs for 2; "
                                 "the lock file differs for 1)")
    assert summary({}, 4) == "[reuse] 0 of 4 trials reused"


def test_a_reference_carries_the_trial_its_parent_and_what_code_differs(store, tmp_path):
    uri, client = store
    original = trained(client, tmp_path, "old")
    tracker, parent = new_sweep(uri)
    rec = record("new-h1-s0-grid", name="b s0")
    reference(tracker, rec, Reuse(original, "old", ["the git commit", "the lock file"]), parent, client)
    assert tracker.flush(timeout=10)
    ref = client.get_run(tracker.find_run("new-h1-s0-grid"))
    assert {k: v for k, v in ref.data.tags.items() if not k.startswith(("mlflow.", "protocol/"))
            or k == "mlflow.parentRunId"} == {
        **{k: str(v) for k, v in rec.tags.items()}, "ssat.status": "FINISHED", "ssat.reuses": original,
        "ssat.reused_from": "old", "ssat.reused_code_differs": "the git commit, the lock file",
        "mlflow.parentRunId": parent}
    assert ref.data.params == {"optim.epochs": "3", "method.beta": "0.4"} and ref.info.run_name == "b s0"
    assert [m.step for m in client.get_metric_history(ref.info.run_id, "test/best/pgd20")] == [3]
    assert ref.info.status == "FINISHED"


def test_a_stage_trains_only_the_trials_no_whole_run_exists_for_decided_once(store, tmp_path):
    """to_train on a real store: the reused trial gets its reference run, the others are handed back to train, the
    choice is kept in the sweep's state, and a resumed stage keeps it even when more runs have appeared since."""
    from sweeps.driver.reuse import records, to_train
    from sweeps.spec import parse_spec

    uri, client = store
    spec = parse_spec({"name": "new", "preset": "mnist5k-ssat-mbi", "table": "ablation", "seeds": [0, 1],
                       "grid": [{"row": "a", "set": {"method.beta": 0.4}}]})
    trials = spec.trials()
    recs = records(spec, trials, {})
    assert [k for k, _ in recs] == [r.key for _, r in recs] and [r.tags["ssat.seed"] for _, r in recs] == [0, 1]
    h = recs[0][1].tags["ssat.config_hash"]
    original = trained(client, tmp_path, "old", h=h, seed=0)
    damaged = trained(client, tmp_path, "broken", h=h, seed=1, damage="checksum")
    trained(client, tmp_path, "new", h=h, seed=1)  # the sweep's own run: never a candidate
    tracker, parent = new_sweep(uri)
    state, said = SimpleNamespace(reused={}, code=CODE), []
    left = to_train("grid", spec, trials, state, tracker, {}, parent, said.append)
    assert left == [trials[1]] and said == [
        f"[reuse] not reusing run {damaged} of broken for {recs[1][1].name}: its best checkpoint fails its checksum",
        "[reuse] 1 of 2 trials reused: 1 from old"]
    assert state.reused == {"grid": {recs[0][0]: {"run_id": original, "sweep": "old", "differs": []}}}
    assert tracker.flush(timeout=10)
    ref = client.get_run(tracker.find_run(recs[0][0])).data.tags
    assert (ref["ssat.reuses"], ref["mlflow.parentRunId"]) == (original, parent)
    trained(client, tmp_path, "old", h=h, seed=1)  # a whole run of the other trial, after the stage decided
    assert to_train("grid", spec, trials, state, tracker, {}, None, said.append) == [trials[1]]
    assert to_train("confirm", spec, trials[1:], SimpleNamespace(reused={}, code=CODE), tracker, {}, None,
                    said.append) == []  # a new decision finds it

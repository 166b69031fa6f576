"""The sweep driver's judgement of a stage, without Ray: which trials count as finished, what the confirm stage
may rank, how a scheduler's early stop is recorded, and the state file (what Ctrl+C turns into: test_interrupt.py)."""
from __future__ import annotations

import json

import pytest

from sweeps.driver.interrupt import Interrupt
from sweeps.driver.sweep import RunArgs, SweepState, cut_at
from sweeps.errors import SpecError
from sweeps.trials.mlflow_callback import _end_tags
from sweeps.trials.outcomes import StageOutcome, TrialOutcome, stage_outcome, top_configs, trial_outcome
from sweeps.paths import sweep_paths
from sweeps.spec import parse_spec

BASE = {"name": "s", "preset": "mnist5k-ssat-mbi", "epochs": 4, "overrides": {"optim.lr_milestones": [],
                                                                              "optim.lr_factors": []}}


def _search_spec(**confirm):
    raw = {**BASE, "search": {"num_samples": 3, "space": {"method.beta": {"float": [0.0, 1.0]}},
                              "confirm": {"top_k": confirm.get("top_k", 2), "seeds": [10]}}}
    return parse_spec(raw)


def _config(beta: float, scheduler: str | None = None) -> dict:
    spec = _search_spec()
    meta = {"sweep": "s", "stage": "search", "seed": 0, **({"scheduler": scheduler} if scheduler else {})}
    return {"meta": meta, "base": spec.base, "method.beta": beta}


FINAL = {"time/epochs": 4}


def test_a_trial_is_finished_only_with_its_last_epoch_and_final_report():
    full = trial_outcome(_config(0.1), {"epoch": 4, **FINAL, "val/pgd10": 9.0}, None, False, "search")
    assert (full.state, full.last_epoch, full.epochs, full.sampled) == ("finished", 4, 4, {"method.beta": 0.1})
    assert full.key.startswith("s-") and full.key.endswith("-s0-search")
    # last epoch without its final report (cut during the test protocol): not finished
    assert trial_outcome(_config(0.1), {"epoch": 4}, None, True, "search").state == "interrupted"
    # Tune marks a trial it stopped on Ctrl+C as TERMINATED: the epoch count decides
    cut = trial_outcome(_config(0.1), {"epoch": 2}, None, True, "search")
    assert (cut.state, cut.reason) == ("interrupted", "Ctrl+C")
    # without Ctrl+C and with a scheduler, a short search trial was stopped early by it
    early = trial_outcome(_config(0.1, "asha"), {"epoch": 2}, None, False, "search")
    assert (early.state, early.reason) == ("stopped_early", "asha at epoch 2")
    # no scheduler: a short trial is never "stopped early"
    assert trial_outcome(_config(0.1), {"epoch": 2}, None, False, "search").state == "interrupted"
    assert trial_outcome(_config(0.1), {"epoch": 2, "failed_reason": "nan"}, None, False, "search").state == "failed"
    err = trial_outcome(_config(0.1), {"epoch": 1}, RuntimeError("boom\nValueError: bad"), False, "search")
    assert (err.state, err.reason) == ("error", "ValueError: bad")


class _Result:
    def __init__(self, config, metrics, error=None):
        self.config, self.metrics, self.error = config, metrics, error


def test_a_stage_counts_against_what_the_spec_asked_for():
    done = [_Result(_config(b), {"epoch": 4, **FINAL}) for b in (0.1, 0.2)]
    # Tune created 2 of the 3 samples (it was stopped): never "2/2 finished"
    out = stage_outcome(done, "search", expected=3, interrupted=False)
    assert out.done == 2 and not out.complete and "1 trial(s) never started" in out.problems
    assert stage_outcome(done + [_Result(_config(0.3), {"epoch": 4, **FINAL})], "search", 3, False).complete
    # a search may go on with samples that failed or were stopped early; a grid may not
    mixed = done + [_Result(_config(0.3, "asha"), {"epoch": 1})]
    assert stage_outcome(mixed, "search", 3, False).complete
    assert stage_outcome(mixed, "search", 3, False).stopped_early == 1
    grid = stage_outcome(done + [_Result(_config(0.3), {"epoch": 4, "failed_reason": "nan"})], "grid", 3, False)
    assert not grid.complete and grid.done == 2 and any("failed: nan" in p for p in grid.problems)
    # interrupted: incomplete even if every created trial happens to be done
    cut = stage_outcome(done + [_Result(_config(0.3), {"epoch": 2})], "search", 3, True)
    assert not cut.complete and [t.last_epoch for t in cut.interrupted] == [2]


def test_confirm_never_ranks_a_partial_run():
    spec = _search_spec(top_k=2)
    trials = [trial_outcome(_config(b), m, None, False, "search") for b, m in [
        (0.1, {"epoch": 4, **FINAL, "val/pgd10": 30.0}),
        (0.2, {"epoch": 4, **FINAL, "val/pgd10": 50.0}),
        (0.3, {"epoch": 4, **FINAL, "val/pgd10": 40.0}),
        (0.4, {"epoch": 4, **FINAL, "val/pgd10": 40.0}),  # same score: ties by name (beta=0.3 before beta=0.4)
    ]]
    partial = trial_outcome(_config(0.9), {"epoch": 2, "val/pgd10": 99.0}, None, True, "search")
    out = StageOutcome("search", 5, trials + [partial])
    assert top_configs(out.finished, spec) == [{"method.beta": 0.2}, {"method.beta": 0.3}]
    spec_min = parse_spec({**BASE, "mode": "min", "search": spec.source["search"]})
    assert top_configs(out.finished, spec_min) == [{"method.beta": 0.1}, {"method.beta": 0.3}]


def test_end_tags_record_an_early_stop_with_scheduler_and_epoch():
    meta = {"epochs": 6, "scheduler": "asha"}
    assert _end_tags({"epoch": 6, "time/epochs": 6}, meta) == ({"ssat.status": "FINISHED"}, "FINISHED")
    assert _end_tags({"epoch": 2}, meta) == ({"ssat.status": "STOPPED_EARLY: asha at epoch 2 of 6",
                                              "ssat.stopped_by": "asha", "ssat.stopped_epoch": 2}, "FINISHED")


@pytest.mark.parametrize("meta", [{"epochs": 12}, {}])
def test_a_run_is_finished_only_with_all_its_epochs_where_no_scheduler_stops_trials(meta):
    """Issue 44 item 6: a grid trial that Tune completed after 4 of its 12 epochs read FINISHED in MLflow. Without
    a scheduler nothing should end a trial early: its run ends KILLED, saying so."""
    tags, status = _end_tags({"epoch": 4}, meta)
    assert status == "KILLED" and tags == {"ssat.status": f"KILLED: ended at epoch 4 of {meta.get('epochs', '?')} "
                                                          "without its last (Tune completed it early)"}
    assert _end_tags({"epoch": 12, "time/epochs": 12}, meta) == ({"ssat.status": "FINISHED"}, "FINISHED")
    assert _end_tags({"epoch": 12}, {"epochs": 12})[1] == "FINISHED"  # its last epoch reported
    assert _end_tags({}, {"epochs": 12})[0]["ssat.status"].startswith("KILLED: ended at epoch 0 of 12")  # none reported


def test_a_cut_trial_says_the_epoch_it_was_in_or_that_only_its_completion_was_missing():
    def cut(last: int, state: str = "interrupted") -> str:
        return cut_at(TrialOutcome("k", state, last, 4, {}, {}))

    assert cut(1) == "in epoch 2"
    assert cut(3) == "in epoch 4"
    # its last report was processed, Tune's completion of it was not (it counts as finished)
    assert cut(4, "finished") == "after its last epoch, before Tune completed it"


def test_sweep_state_round_trips_and_reads_the_old_format(tmp_path):
    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    st = SweepState(name="s", spec_path="x.yaml", source={"name": "s"}, tracking_uri="sqlite:///m.db",
                    args=RunArgs(epochs=3, seeds=[1], sets={"method.beta": 0.5}), phases={"grid": "running"})
    st.save(paths)
    back = SweepState.load(paths)
    assert back == st and isinstance(back.args, RunArgs)
    # a sweep.json written before the driver existed (args as a plain dict, no `name` key)
    old = {"name": "s", "spec_path": "x.yaml", "source": {"name": "s"}, "tracking_uri": "sqlite:///m.db",
           "args": {"epochs": None, "seeds": None, "sets": {}, "cpu_only": True, "max_concurrent": 2,
                    "data_root": None, "address": None, "max_failures": 2},
           "phases": {"search": "done"}, "status": "running", "driver_pid": 1, "code": {}, "created": "",
           "confirm_configs": [{"method.beta": 0.5}]}
    paths.state.write_text(json.dumps(old))
    st = SweepState.load(paths)
    assert st.args.cpu_only and st.args.max_concurrent == 2 and st.confirm_configs == [{"method.beta": 0.5}]


def _grid_raw():
    return {**BASE, "seeds": [0, 1], "grid": [{"row": "a", "set": {"method.beta": 0.1}},
                                              {"row": "b", "set": {"method.beta": 0.2}},
                                              {"row": "c", "set": {"method.beta": 0.3}}]}


def test_rows_keeps_the_named_grid_rows_in_the_specs_order():
    spec = parse_spec(_grid_raw(), rows=["c", "a"])
    assert [(t.row, t.seed) for t in spec.trials()] == [("a", 0), ("a", 1), ("c", 0), ("c", 1)]
    assert [t.config.method.beta for t in spec.trials()] == [0.1, 0.1, 0.3, 0.3]
    assert len(parse_spec(_grid_raw()).trials()) == 6  # no --rows: every row


def test_rows_refuses_an_unknown_row_or_a_search_spec_naming_the_allowed_rows():
    with pytest.raises(SpecError, match=r"^my.yaml: --rows: \['d'\] not rows of this grid; allowed: a, b, c"):
        parse_spec(_grid_raw(), "my.yaml", rows=["a", "d"])
    with pytest.raises(SpecError, match="--rows: .*allowed: a, b, c"):
        parse_spec(_grid_raw(), rows=[])
    with pytest.raises(SpecError, match="--rows: this spec has a search"):
        parse_spec({**BASE, "search": {"num_samples": 2, "space": {"method.beta": {"float": [0.0, 1.0]}}}},
                   rows=["a"])


def test_a_resumed_sweep_runs_the_same_rows(tmp_path):
    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    SweepState(name="s", spec_path="x.yaml", source=_grid_raw(), tracking_uri="sqlite:///m.db",
               args=RunArgs(rows=["b"])).save(paths)
    assert [t.row for t in SweepState.load(paths).spec().trials()] == ["b", "b"]


def test_a_stop_ends_each_cut_trials_run_killed_with_the_epoch_it_was_in_and_the_resume_command(tmp_path):
    """The branch a stop in a stage takes after Tune returns (driver.end_cut_trials), on a real SQLite store: a
    trial cut in its second epoch reads KILLED 'in epoch 2'; one whose last report Tune processed but never
    completed reads 'after its last epoch'; a run already ended keeps its end; a trial that never reported is
    left to _end_left_running."""
    from mlflow.tracking import MlflowClient

    from sweeps.driver.sweep import end_cut_trials
    from sweeps.tracking.tracker import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, "exp", log=lambda line: None)
    for key in ("second", "last", "ended", "never"):
        tracker.ensure_run(key, {"ssat.key": key, "ssat.status": "RUNNING"}, name=key)
    tracker.end("ended")
    out = StageOutcome("grid", 4, [TrialOutcome("second", "interrupted", 1, 4, {}, {}),
                                   TrialOutcome("last", "finished", 4, 4, {}, {}),
                                   TrialOutcome("ended", "finished", 4, 4, {}, {}),
                                   TrialOutcome("never", "interrupted", 0, 4, {}, {})])
    end_cut_trials(out, tracker, "SIGTERM", "python -m sweeps resume s --workdir W")
    tracker.drain(force=True)
    runs = {r.data.tags["ssat.key"]: r for r in MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name("exp").experiment_id])}
    assert runs["second"].info.status == "KILLED" and runs["second"].data.tags["ssat.status"] == (
        "KILLED: interrupted (SIGTERM) in epoch 2; resume with: python -m sweeps resume s --workdir W")
    assert runs["last"].info.status == "KILLED" and runs["last"].data.tags["ssat.status"].startswith(
        "KILLED: interrupted (SIGTERM) after its last epoch, before Tune completed it;")
    assert (runs["ended"].info.status, runs["ended"].data.tags["ssat.status"]) == ("FINISHED", "RUNNING")
    assert (runs["never"].info.status, runs["never"].data.tags["ssat.status"]) == ("RUNNING", "RUNNING")


# ---- how a sweep's run opens and ends, on a real MLflow store (the stages themselves need Ray: integration tier) --
@pytest.fixture(autouse=True)
def quick_flush(monkeypatch):
    """An operation the store refuses is retried until the flush's timeout (60 s): 5 s here."""
    monkeypatch.setenv("SSAT_TRACKING_FLUSH_S", "5")


def opened(store: str, tmp_path, raw: dict | None = None):
    """A sweep's paths, state, spec and tracker with its run opened as the driver opens it."""
    from sweeps.driver.sweep import _open_sweep_run

    raw = raw or {**BASE, "grid": [{"row": "a", "set": {}}]}
    spec = parse_spec(raw)
    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    state = SweepState(name="s", spec_path="s.yaml", source=raw, tracking_uri=store, args=RunArgs(),
                       code={"git_commit": "abc"})
    lines: list[str] = []
    tracker = _open_sweep_run(spec, paths, state, lines.append)
    return spec, paths, state, tracker, lines


def runs_by_key(store: str) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(store)
    return {r.data.tags["ssat.key"]: r for r in client.search_runs([client.get_experiment_by_name("s").experiment_id])}


def test_the_sweeps_run_opens_with_its_spec_and_runs_again_after_a_stop(store, tmp_path):
    from mlflow.tracking import MlflowClient

    from sweeps.driver.sweep import _open_sweep_run
    from sweeps.tracking.run_records import sweep_key

    spec, paths, state, tracker, _ = opened(store, tmp_path)
    run = runs_by_key(store)[sweep_key("s")]
    assert (run.info.status, run.info.run_name, run.data.tags["ssat.kind"]) == ("RUNNING", "s", "sweep")
    assert paths.spec_file.read_text() == json.dumps(state.source, indent=1)
    assert [a.path for a in MlflowClient(store).list_artifacts(run.info.run_id)] == [paths.spec_file.name]
    assert tracker.queue == []  # sent before the teacher stage starts
    tracker.end(sweep_key("s"), "KILLED")
    _open_sweep_run(spec, paths, state, print)
    assert runs_by_key(store)[sweep_key("s")].info.status == "RUNNING"  # a resume reopens the same run


def test_a_finished_sweep_ends_its_run_saves_its_state_and_says_where_to_look(store, tmp_path):
    from sweeps.driver.sweep import _finished
    from sweeps.tracking.run_records import sweep_key

    spec, paths, state, tracker, lines = opened(store, tmp_path)
    assert _finished(spec, paths, state, tracker, sweep_key("s"), lines.append) == 0
    run = runs_by_key(store)[sweep_key("s")]
    assert (run.info.status, run.data.tags["ssat.status"]) == ("FINISHED", "FINISHED")
    assert SweepState.load(paths).status == "done"
    assert lines[0] == f"sweep s finished; runs in {store} (experiment s)"
    assert lines[1].startswith(f"its trials in MLflow's UI: http://127.0.0.1:5000/#/experiments/"
                               f"{tracker.experiment_id}/runs?workflowType=machine_learning&viewStateShareKey=ssat-")
    assert len(lines) == 2  # a grid: no search table, no study


def test_a_finished_search_names_its_table_with_the_metric_it_ranks_by_and_its_study(store, tmp_path):
    from sweeps.driver.sweep import _finished
    from sweeps.tracking.run_records import sweep_key

    search = {**BASE, "metric": "train/loss", "mode": "min",
              "search": {"num_samples": 2, "space": {"method.beta": {"float": [0.0, 1.0]}},
                         "confirm": {"top_k": 1, "seeds": [10]}}}
    for raw, rank in [(search, " --metric train/loss --mode min"),
                      ({**search, "metric": "val/pgd10", "mode": "max"}, "")]:
        spec, paths, state, tracker, lines = opened(store, tmp_path / raw["mode"], raw)
        state.study_url = f"sqlite:///{tmp_path}/optuna.db"
        _finished(spec, paths, state, tracker, sweep_key("s"), lines.append)
        assert lines[2:] == [f"the search table: python -m analysis.tables --experiment s --table search{rank} "
                             f"--tracking-uri {store}",
                             f"the study (every trial, its curve, the importances): optuna-dashboard "
                             f"{state.study_url} --host 127.0.0.1 --port 8080"]


def test_an_mlflow_server_store_links_its_own_ui(tmp_path):
    from sweeps.driver.sweep import _finished

    class Away:  # a tracker whose server is down: nothing is sent, the links are still said
        experiment_id = "4"

        def __getattr__(self, name):
            return lambda *a, **k: None

    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    state = SweepState(name="s", spec_path="s.yaml", source={}, tracking_uri="http://127.0.0.1:5077", args=RunArgs())
    lines: list[str] = []
    _finished(parse_spec({**BASE, "grid": [{"row": "a", "set": {}}]}), paths, state, Away(), "p", lines.append)
    assert lines[1].startswith("its trials in MLflow's UI: http://127.0.0.1:5077/#/experiments/4/runs?")


@pytest.mark.parametrize("interrupted", ["Ctrl+C", None])
def test_an_incomplete_sweep_ends_its_run_and_every_run_left_running(store, tmp_path, interrupted):
    from sweeps.driver.sweep import _incomplete
    from sweeps.tracking.run_records import sweep_key

    spec, paths, state, tracker, lines = opened(store, tmp_path)
    for key in ("running", "done"):
        tracker.ensure_run(key, {"ssat.key": key, "ssat.status": "RUNNING"}, name=key)
    tracker.end("done")
    resume = f"python -m sweeps resume s --workdir {tmp_path}"
    assert _incomplete(paths, state, tracker, sweep_key("s"), "grid", "had 1 failed trial", interrupted,
                       lines.append) == 1
    runs = runs_by_key(store)
    why = "interrupted (Ctrl+C)" if interrupted else "had 1 failed trial"
    parent = runs[sweep_key("s")]
    if interrupted:
        assert (parent.info.status, parent.data.tags["ssat.status"]) == (
            "KILLED", f"KILLED: interrupted (Ctrl+C) in stage grid; resume with: {resume}")
    else:
        assert (parent.info.status, parent.data.tags["ssat.status"]) == (
            "FAILED", f"FAILED: stage grid had 1 failed trial; resume with: {resume}")
    assert (runs["running"].info.status, runs["running"].data.tags["ssat.status"]) == (
        "KILLED", f"KILLED: the sweep stopped in stage grid ({why}) while this run was RUNNING; resume with: {resume}")
    assert (runs["done"].info.status, runs["done"].data.tags["ssat.status"]) == ("FINISHED", "RUNNING")
    assert SweepState.load(paths).status == "incomplete"
    hint = "" if interrupted else "  (add --rerun-failed to re-run failed trials)"
    assert lines == [f"sweep s is INCOMPLETE: stage grid {why}. Resume with:\n  {resume}{hint}"]


def test_a_stop_before_the_sweeps_run_opened_and_one_whose_record_fails(tmp_path):
    from sweeps.driver.sweep import _incomplete, _stopping

    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    state = SweepState(name="s", spec_path="s.yaml", source={}, tracking_uri="sqlite:///x.db", args=RunArgs())
    lines: list[str] = []
    stop = Interrupt()
    assert _stopping(stop, paths, state, None, "p", "start", "", "SIGTERM", lines.append) == 1
    assert stop.stopping is True and SweepState.load(paths).status == "incomplete"
    assert lines == [f"sweep s is INCOMPLETE: stage start interrupted (SIGTERM). Resume with:\n  python -m sweeps "
                     f"resume s --workdir {tmp_path}"]

    class Broken:
        def __getattr__(self, name):
            raise ConnectionError("store away")

    lines.clear()
    assert _incomplete(paths, state, Broken(), "p", "grid", "stopped by ValueError: x", None, lines.append,
                       error=True) == 1  # the error itself goes on from the caller
    assert lines[0] == "[driver] could not record the sweep's end (ConnectionError: store away)"
    assert lines[1].endswith("resume s --workdir " + str(tmp_path))  # no --rerun-failed hint after an error
    with pytest.raises(ConnectionError):
        _incomplete(paths, state, Broken(), "p", "grid", "had 1 failed trial", None, lines.append)


def test_runs_left_running_are_not_looked_for_in_a_store_that_is_away(tmp_path):
    from sweeps.driver.sweep import _end_left_running

    class Away:
        experiment_id = "1"

        class client:
            @staticmethod
            def search_runs(*a, **k):
                raise ConnectionError("refused")

    lines: list[str] = []
    _end_left_running(Away(), "p", "KILLED", lines.append)
    assert lines == ["[tracking] could not look for runs left RUNNING (ConnectionError)"]


def test_a_finished_sweep_is_not_run_again_and_names_a_free_name(tmp_path):
    from sweeps.driver.sweep import finished_message

    paths = sweep_paths(tmp_path, "s")
    (tmp_path / "runs" / "sweeps" / "s-2").mkdir(parents=True)
    state = SweepState(name="s", spec_path="s.yaml", source={}, tracking_uri="sqlite:///m.db", args=RunArgs(),
                       created="2026-11-29 10:00")
    assert finished_message(paths, state, "specs/s.yaml") == (
        "sweep s is already finished (started 2026-11-29 10:00); nothing was run. Its runs are in sqlite:///m.db, "
        f"experiment s (`python -m sweeps status s --workdir {tmp_path}`); its state is in {paths.sweep_dir}. To run "
        f"it again, give it another name: `python -m sweeps run specs/s.yaml --name s-3 --workdir {tmp_path}` (with "
        "your other options)")
    assert "(started earlier)" in finished_message(paths, SweepState(
        name="s", spec_path="s.yaml", source={}, tracking_uri="x", args=RunArgs()), "s.yaml")


def test_a_live_driver_refuses_a_command_that_would_write_and_a_dead_one_does_not(tmp_path):
    import subprocess

    from sweeps.driver import lock as DL
    from sweeps.driver.sweep import _refuse_if_driven

    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    _refuse_if_driven(paths)  # no lock
    here = DL.Host.here()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        info = DL.LockInfo(sleeper.pid, here.name, here.boot_id, DL.proc_start_ticks(sleeper.pid), 0.0, 0.0, "cmd",
                           "t")
        (paths.sweep_dir / DL.LOCK_FILE).write_bytes(info.to_json())
        with pytest.raises(DL.DriverBusy, match=f"sweep s already has a driver: pid {sleeper.pid}"):
            _refuse_if_driven(paths)
    finally:
        sleeper.kill()
        sleeper.wait()
    _refuse_if_driven(paths)  # its driver is gone

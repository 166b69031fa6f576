"""Ctrl+C (SIGINT to the driver) in every stage of a sweep: the sweep stops in that stage (INCOMPLETE, exit 1,
the resume command printed, no later stage starts), the runs it cut end as KILLED with the reason, and `resume`
continues the same runs from their checkpoints, then the later stages.

The driver runs in this process (as `python -m sweeps` would) and a watcher thread sends the SIGINT once the
stage under test is under way (its files appear on disk)."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sweeps.cli import main as sweeps_main
from sweeps.trials.mlflow_callback import TrackingCallback
from devtools.sweep_helpers import check_study_mirrors_the_store, history, trial_runs, write_spec

pytestmark = pytest.mark.integration


def _driver_listens() -> bool:
    """Only the sweep driver's own handler may receive the watcher's SIGINT (never pytest's)."""
    return type(getattr(signal.getsignal(signal.SIGINT), "__self__", None)).__name__ == "Interrupt"


def _interrupt_when(cond, timeout: float = 400) -> threading.Event:
    sent = threading.Event()

    def watch():
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if _driver_listens() and cond():
                time.sleep(0.5)
                os.kill(os.getpid(), signal.SIGINT)
                sent.set()
                return
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    return sent


def _reported(workdir: Path, name: str, stage: str) -> bool:
    """Some trial of the stage reported an epoch (Tune's result files)."""
    return any(f.stat().st_size > 0
               for f in (workdir / "runs" / "sweeps" / name / "tune" / stage).glob("*/result.json"))


def _runs(uri: str, name: str, kind: str):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(name)
    return c.search_runs([exp.experiment_id], f"tags.`ssat.kind` = '{kind}'", max_results=100)


def _state(workdir: Path, name: str) -> dict:
    return json.loads((workdir / "runs" / "sweeps" / name / "sweep.json").read_text())


def _assert_incomplete(out: str, stage: str, workdir: Path, name: str) -> None:
    assert f"INCOMPLETE: stage {stage} interrupted (Ctrl+C)" in out, out[-3000:]
    assert f"python -m sweeps resume {name} --workdir {workdir}" in out


def _assert_killed(uri: str, name: str, runs) -> None:
    assert runs, "nothing was cut: the interrupt came too late to test anything"
    for r in runs:
        assert r.info.status == "KILLED", (r.data.tags.get("ssat.key"), r.info.status)
        if r.data.metrics:  # it reported: the driver says where Ctrl+C cut it
            assert r.data.tags["ssat.status"].startswith(("KILLED: interrupted (Ctrl+C) in epoch ",  # or, by chance:
                                                          "KILLED: interrupted (Ctrl+C) after its last epoch")), \
                r.data.tags["ssat.status"]
        else:  # started (its run is made then) but cut before its first report: the driver's last guard ends it
            assert r.data.tags["ssat.status"].startswith(
                f"KILLED: the sweep stopped in stage {r.data.tags['ssat.stage']} (interrupted (Ctrl+C)) "
                "while this run was RUNNING"), r.data.tags["ssat.status"]
        assert f"python -m sweeps resume {name}" in r.data.tags["ssat.status"]


def test_ctrl_c_in_the_teacher_and_grid_stages_then_resume(ray_local, tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("SSAT_TEACHER_DIR", str(tmp_path / "teachers"))  # the teacher must be trained here
    rows = [{"row": "const|on", "set": {"attack.schedule": "const"}},
            {"row": "curious|on", "set": {"attack.schedule": "curious", "attack.t": 1}}]
    spec = write_spec(tmp_path / "s.yaml", "cut-grid", epochs=3, rows=rows, max_concurrent=1,
                      overrides={"teacher.steps": 150, "teacher.eval_every": 50})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    # 1. Ctrl+C while the teacher trains: nothing later starts, the parent run is KILLED with the reason.
    sent = _interrupt_when(lambda: any((tmp_path / "teachers").glob("*/teacher.pt.lock")))
    assert sweeps_main(["run", str(spec), "--workdir", str(tmp_path)]) == 1
    assert sent.is_set()
    _assert_incomplete(capfd.readouterr().out, "teacher", tmp_path, "cut-grid")
    assert not (tmp_path / "runs" / "sweeps" / "cut-grid" / "tune").exists()  # no Tune stage started
    assert not list((tmp_path / "teachers").glob("*/teacher.pt"))
    (parent,) = _runs(uri, "cut-grid", "sweep")
    assert parent.info.status == "KILLED" and "in stage teacher" in parent.data.tags["ssat.status"]
    assert _runs(uri, "cut-grid", "trial") == []

    # 2. Resume; Ctrl+C once the first trial has reported an epoch: the grid is cut, its runs KILLED. The trial waits
    # at epoch 2 until then: its epochs take half a second, and CI once saw it finish before the Ctrl+C took effect.
    once = tmp_path / "once"
    monkeypatch.setenv("SSAT_FAULT", "hold@2:1")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(once))
    sent = _interrupt_when(lambda: _reported(tmp_path, "cut-grid", "grid") and any(once.glob("hold@2_1-*")))
    assert sweeps_main(["resume", "cut-grid", "--workdir", str(tmp_path)]) == 1
    assert sent.is_set()
    _assert_incomplete(capfd.readouterr().out, "grid", tmp_path, "cut-grid")
    cut = trial_runs(uri, "cut-grid")
    _assert_killed(uri, "cut-grid", cut)
    assert _state(tmp_path, "cut-grid")["phases"] == {"grid": "running"}
    (parent,) = _runs(uri, "cut-grid", "sweep")
    assert parent.info.status == "KILLED" and "in stage grid" in parent.data.tags["ssat.status"]
    cut_ids = {r.data.tags["ssat.key"]: r.info.run_id for r in cut}

    # 3. Resume to the end: the same runs continue (same run ids), every trial once, one value per epoch.
    (once / "release").touch()  # the hold is the stage's (saved with it): the second trial must not wait
    assert sweeps_main(["resume", "cut-grid", "--workdir", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    assert "[stage] grid: 2/2 trials finished" in out, out[-3000:]
    runs = trial_runs(uri, "cut-grid")
    assert len(runs) == 2
    for r in runs:
        assert r.info.status == "FINISHED" and r.data.tags["ssat.status"] == "FINISHED"
        assert [s for s, _ in history(uri, r, "val/pgd10")] == [1, 2, 3]
        assert [s for s, _ in history(uri, r, "train/loss")] == [1, 2, 3]
        assert "test/best/clean" in r.data.metrics
        if r.data.tags["ssat.key"] in cut_ids:
            assert r.info.run_id == cut_ids[r.data.tags["ssat.key"]]
    (parent,) = _runs(uri, "cut-grid", "sweep")
    assert parent.info.status == "FINISHED"
    assert len(_runs(uri, "cut-grid", "teacher")) == 1


def test_ctrl_c_in_the_search_and_confirm_stages_then_resume(ray_local, teacher_dir, tmp_path, capfd, monkeypatch):
    search = {"num_samples": 3, "sampler_seed": 3,
              "space": {"method.beta": {"float": [0.0, 1.0]}, "method.tau": {"float": [0.5, 4.0]}},
              "early_stopping": {"grace_period": 2, "reduction_factor": 2}, "confirm": {"top_k": 1, "seeds": [10]}}
    spec = write_spec(tmp_path / "s.yaml", "cut-search", epochs=3, seeds=[0], search=search, max_concurrent=2,
                      overrides={"attack.schedule": "const"})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    # 1. Ctrl+C in the search: fewer than num_samples trials exist; the search is not "finished", confirm never starts.
    sent = _interrupt_when(lambda: _reported(tmp_path, "cut-search", "search"))
    assert sweeps_main(["run", str(spec), "--workdir", str(tmp_path)]) == 1
    assert sent.is_set()
    _assert_incomplete(capfd.readouterr().out, "search", tmp_path, "cut-search")
    searched = trial_runs(uri, "cut-search", "search")
    _assert_killed(uri, "cut-search", [r for r in searched if r.info.status != "FINISHED"])
    assert not any(r.info.status == "RUNNING" for r in searched)
    assert trial_runs(uri, "cut-search", "confirm") == []
    assert not (tmp_path / "runs" / "sweeps" / "cut-search" / "tune" / "confirm").exists()

    # 2. Resume: the search runs up to its 3 samples; Ctrl+C in the confirm stage. Its one trial (seed 10) waits at
    # epoch 2 until then: on a fast machine its 3 epochs ended before the Ctrl+C that its first report set off.
    once = tmp_path / "once"
    monkeypatch.setenv("SSAT_FAULT", "hold@2:1/seed=10")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(once))
    sent = _interrupt_when(lambda: any(once.glob("hold@2_1_seed=10-*")))
    assert sweeps_main(["resume", "cut-search", "--workdir", str(tmp_path)]) == 1
    assert sent.is_set()
    out = capfd.readouterr().out
    _assert_incomplete(out, "confirm", tmp_path, "cut-search")
    searched = trial_runs(uri, "cut-search", "search")
    assert len(searched) == 3
    full = []
    for r in searched:  # every sample ran to its end (the interrupted ones in the same run), or ASHA stopped it
        steps = [s for s, _ in history(uri, r, "val/pgd10")]
        assert r.info.status == "FINISHED", r.data.tags
        if r.data.tags["ssat.status"] == "FINISHED":
            assert steps == [1, 2, 3]
            full.append(r)
        else:  # stopped at its rung (epoch 2 of 3): recorded as such, never as an ordinary finished run
            assert r.data.tags["ssat.status"] == "STOPPED_EARLY: asha at epoch 2 of 3", r.data.tags
            assert (r.data.tags["ssat.stopped_by"], r.data.tags["ssat.stopped_epoch"]) == ("asha", "2")
            assert steps == [1, 2]
    stopped = 3 - len(full)
    assert f"[stage] search: {len(full)}/3 trials finished" in out, out[-3000:]
    assert (f", {stopped} stopped early by the scheduler" in out) == (stopped > 0)
    (confirm,) = trial_runs(uri, "cut-search", "confirm")
    _assert_killed(uri, "cut-search", [confirm])
    # the confirmed configuration is a best search trial among those that ran all their epochs
    score = {(r.data.params["method.beta"], r.data.params["method.tau"]): r.data.metrics["val/pgd10"] for r in full}
    assert score[(confirm.data.params["method.beta"], confirm.data.params["method.tau"])] == max(score.values())
    # the resumed search went on with the same Optuna study: one trial per search run, none asked twice
    ran = check_study_mirrors_the_store(tmp_path, uri, "cut-search")
    assert len(ran) == 3 and sum(t.state.name == "PRUNED" for t in ran) == stopped
    assert confirm.info.run_name.startswith("top1 ") and confirm.info.run_name.endswith(" s10")

    # 3. Resume to the end: the same confirm run finishes.
    assert sweeps_main(["resume", "cut-search", "--workdir", str(tmp_path)]) == 0
    (done,) = trial_runs(uri, "cut-search", "confirm")
    assert done.info.run_id == confirm.info.run_id and done.info.status == "FINISHED"
    assert [s for s, _ in history(uri, done, "val/pgd10")] == [1, 2, 3]
    assert len(trial_runs(uri, "cut-search", "search")) == 3


def test_ctrl_c_after_a_trials_last_report_before_tune_completed_it(ray_local, teacher_dir, tmp_path, capfd,
                                                                    monkeypatch):
    """The window CI once hit by chance, opened on purpose: the callback has recorded the last epoch (the run is
    RUNNING, its outcome counts as finished) when Ctrl+C arrives, so Tune never completes the trial. Its run must
    still end KILLED, never stay RUNNING; on resume Tune completes it: FINISHED, checkpoints, same run."""
    spec = write_spec(tmp_path / "s.yaml", "cut-last", epochs=2, rows=[{"row": "const|on", "set": {}}],
                      max_concurrent=1, overrides={"attack.schedule": "const"})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    recorded = TrackingCallback.on_trial_result

    def ctrl_c_after_the_last_report(self, iteration, trials, trial, result, **info):
        recorded(self, iteration, trials, trial, result, **info)
        if "time/epochs" in result:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # Tune sees its stop signal before the trial's end

    monkeypatch.setattr(TrackingCallback, "on_trial_result", ctrl_c_after_the_last_report)
    assert sweeps_main(["run", str(spec), "--workdir", str(tmp_path)]) == 1
    _assert_incomplete(capfd.readouterr().out, "grid", tmp_path, "cut-last")
    (cut,) = trial_runs(uri, "cut-last")
    assert [s for s, _ in history(uri, cut, "val/pgd10")] == [1, 2]
    assert cut.info.status == "KILLED", cut.data.tags["ssat.status"]
    assert cut.data.tags["ssat.status"] == ("KILLED: interrupted (Ctrl+C) after its last epoch, before Tune completed "
                                            f"it; resume with: python -m sweeps resume cut-last --workdir {tmp_path}")
    assert MlflowClient(uri).list_artifacts(cut.info.run_id, "checkpoints") == []

    monkeypatch.setattr(TrackingCallback, "on_trial_result", recorded)
    assert sweeps_main(["resume", "cut-last", "--workdir", str(tmp_path)]) == 0
    assert "[stage] grid: 1/1 trials finished" in capfd.readouterr().out
    (run,) = trial_runs(uri, "cut-last")
    assert run.info.run_id == cut.info.run_id
    assert run.info.status == "FINISHED" and run.data.tags["ssat.status"] == "FINISHED"
    assert [s for s, _ in history(uri, run, "val/pgd10")] == [1, 2]
    assert {a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id, "checkpoints")} >= {
        "checkpoints/best.pt", "checkpoints/last.pt"}


def test_a_trial_tune_ended_before_its_last_epoch_is_continued_by_resume(ray_local, teacher_dir, tmp_path, capfd,
                                                                         monkeypatch):
    """A trial Tune completes before its last epoch (issue 44: Tune's state a checkpoint behind after retries) would
    never run again: Tune restores it TERMINATED. Its run must not read FINISHED, the sweep is INCOMPLETE, and
    `resume` continues the trial from its last checkpoint into the same run, every epoch once, to FINISHED."""
    once = tmp_path / "once"
    monkeypatch.setenv("SSAT_FAULT", "end@1")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(once))
    spec = write_spec(tmp_path / "s.yaml", "short", epochs=2, rows=[{"row": "const|on", "set": {}}],
                      max_concurrent=1, overrides={"attack.schedule": "const"})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert sweeps_main(["run", str(spec), "--workdir", str(tmp_path)]) == 1
    out = capfd.readouterr().out
    assert "[stage] grid: 0/1 trials finished" in out and "interrupted: ended before its last epoch (epoch 1/2)" in out
    (cut,) = trial_runs(uri, "short")
    assert cut.info.status == "KILLED"
    assert cut.data.tags["ssat.status"] == ("KILLED: ended at epoch 1 of 2 without its last (Tune completed it "
                                            "early)")

    assert sweeps_main(["resume", "short", "--workdir", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    assert ("[resume] 1 trial(s) of stage grid ended before their last epoch without an error or a stop (const|on s0 "
            "at epoch 1 of 2): continuing them from their last checkpoints") in out
    assert "[stage] grid: 1/1 trials finished" in out
    (run,) = trial_runs(uri, "short")
    assert run.info.run_id == cut.info.run_id
    assert run.info.status == "FINISHED" and run.data.tags["ssat.status"] == "FINISHED"
    assert run.data.tags["ssat.recovery"] == ("Tune ended this trial before its last epoch; continued from "
                                              "checkpoint_000000 (epoch 1)")
    assert [s for s, _ in history(uri, run, "val/pgd10")] == [1, 2]  # epoch 1 not trained again
    assert run.data.metrics["time/epochs"] == 2 and "test/best/clean" in run.data.metrics
    assert _state(tmp_path, "short")["status"] == "done"
    assert sweeps_main(["resume", "short", "--workdir", str(tmp_path)]) == 0  # nothing left: no second continuation
    assert "[resume]" not in capfd.readouterr().out

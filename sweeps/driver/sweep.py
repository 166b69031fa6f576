"""The sweep driver: every stage of a sweep, run or resumed, with a typed state on disk.

    run_sweep(spec_path, RunArgs(...), workdir=".")     # validate, track, teacher, grid | search -> confirm
    resume_sweep(name, workdir=".")                      # the stage that was cut, then the later ones

Stages in order: teacher (one per split, on the driver) -> grid, or search then confirm (Ray Tune). Each stage
counts its trials against what the spec asked for, never against what Tune happened to create. Ctrl+C (SIGINT,
also `python -m sweeps stop`), SIGTERM and SIGHUP stop the sweep in the stage it reaches: Tune saves its state, the
runs it cut end as KILLED in MLflow with the reason, the driver says INCOMPLETE, prints the resume command and
returns 1; no later stage starts. A stage that ends incomplete for another reason (failed trials, an error) ends the
sweep's run FAILED with the reason; no run of the sweep is left RUNNING either way. Everything `resume` needs is in
<sweep dir>/sweep.json (`SweepState`).

One driver per sweep: `run`, `resume` and `sync` hold <sweep dir>/driver.lock (sweeps/driver/lock.py) from
before their first write to their end; another is refused (exit code 2) while that driver lives.
"""
from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Callable

from analysis.record import search_all

from .lock import (DriverBusy, DriverLock, LockInfo, busy_message, hold, inspect)
from .disk import CAUSE as DISK_FULL, DiskFull, DiskWatch, check_free, disk_guard, drop_torn_checkpoints
from ..errors import SweepError
from .interrupt import Interrupt
from ..trials.outcomes import StageOutcome, TrialOutcome, stage_outcome, top_configs
from ..paths import Paths, sweep_paths
from ..tracking.provenance import code_version
from .cluster import check_gpu, init_ray
from ..tracking.run_records import sweep_key, sweep_record
from ..trials.ranking import confirm_summary, search_ranking
from .reuse import to_train
from .run_options import RunArgs, load_run_spec
from .state import SweepState
from ..spec import Spec
from ..trials.study import check_new_study, dashboard_command, redacted, storage_url
from ..sweep_log import diverted
from .teacher_stage import teacher_stage
from ..tracking.tracker import Tracker, check_reachable, resolve_uri, uri_source
from ..tracking.ui_link import ui_url
from ..trials.ray_private import session_dir
from ..trials.tuners import continue_short, grid_tuner, restore_tuner, search_tuner

Log = Callable[[str], None]
PHASES_GRID = ("grid",)
PHASES_SEARCH = ("search", "confirm")


def _lost_lock(other: LockInfo | None) -> None:
    """Another driver took this sweep's lock (this one's heartbeat went stale, e.g. its file system stalled for
    over a minute): stop at once, writing nothing more, so the two never both write the sweep."""
    print("[driver] exiting now: another driver took over this sweep (resume it from one machine only)", flush=True)
    os._exit(3)


def _refuse_if_driven(paths: Paths) -> None:
    """DriverBusy when a live driver holds the sweep (read only: nothing is written)."""
    lock, verdict = inspect(paths.sweep_dir)
    if lock is not None and verdict.live:
        raise DriverBusy(busy_message(paths.name, lock, verdict, paths.workdir))


def finished_message(paths: Paths, state: SweepState, spec_path: str | Path) -> str:
    root = paths.workdir / "runs" / "sweeps"
    free = next(f"{paths.name}-{i}" for i in itertools.count(2) if not (root / f"{paths.name}-{i}").exists())
    return (f"sweep {paths.name} is already finished (started {state.created or 'earlier'}); nothing was run. Its runs "
            f"are in {state.tracking_uri}, experiment {paths.name} (`python -m sweeps status {paths.name} --workdir "
            f"{paths.workdir}`); its state is in {paths.sweep_dir}. To run it again, give it another name: "
            f"`python -m sweeps run {spec_path} --name {free} --workdir {paths.workdir}` (with your other options)")


def run_sweep(spec_path: str | Path, args: RunArgs, *, workdir: str | Path = ".", tracking_uri: str | None = None,
              log: Log = print, command: str | None = None) -> int:
    """Start a sweep; 0 when every stage finished, 1 when it is incomplete (it says how to resume). A sweep of
    that name that exists is refused, writing nothing: finished (run it under another --name), driven by a live
    driver, or unfinished (resume it)."""
    spec = load_run_spec(spec_path, args)
    paths = sweep_paths(workdir, spec.name)
    if paths.state.exists() and SweepState.load(paths).status == "done":
        raise SweepError(finished_message(paths, SweepState.load(paths), spec_path))
    from ssat.datasets import check_root

    for cfg in spec.configs():
        check_root(cfg.data.dataset, cfg.data.root)
    uri = resolve_uri(tracking_uri, paths.workdir)
    unfinished = (f"sweep {spec.name} already exists in {paths.sweep_dir} and is not finished; use "
                  f"`python -m sweeps resume {spec.name} --workdir {paths.workdir}` or another --name")
    if paths.state.exists():
        _refuse_if_driven(paths)
        raise SweepError(unfinished)
    check_free(paths.workdir)
    check_reachable(uri, source=uri_source(tracking_uri))  # before the lock: an unreachable store leaves no folder
    study_url = storage_url(paths.sweep_dir, args.optuna_storage) if spec.search else None
    if study_url:
        check_new_study(study_url, spec.name)
    with hold(paths.sweep_dir, command or f"python -m sweeps run {spec_path}", name=spec.name,
              workdir=paths.workdir, log=log, on_lost=_lost_lock) as lock:
        if paths.state.exists():  # made meanwhile by a driver that has ended since
            raise SweepError(unfinished)
        state = SweepState(name=spec.name, spec_path=str(spec_path), source=spec.source, tracking_uri=uri,
                           args=args, driver_pid=os.getpid(), code=code_version(),
                           created=time.strftime("%Y-%m-%d %H:%M:%S"), study_url=study_url)
        state.save(paths)
        return execute(spec, paths, state, log=log, lock=lock)


def resume_sweep(name: str, *, workdir: str | Path = ".", rerun_failed: bool = False, address: str | None = None,
                 tracking_uri: str | None = None, log: Log = print, command: str | None = None) -> int:
    """Continue a sweep where it stopped: the stage that was cut (its interrupted trials from their
    checkpoints, a search up to its num_samples), then the later stages. Refused while another driver lives."""
    paths = sweep_paths(workdir, name)
    SweepState.load(paths)  # "no sweep named ..." before anything is written
    check_free(paths.workdir)
    with hold(paths.sweep_dir, command or f"python -m sweeps resume {name}", name=name, workdir=paths.workdir,
              log=log, on_lost=_lost_lock) as lock:
        state = SweepState.load(paths)  # as the last driver left it
        if address:
            state.args.address = address
        if tracking_uri:
            state.tracking_uri = tracking_uri
        check_reachable(state.tracking_uri, source="--tracking-uri" if tracking_uri else "the sweep's store "
                        "(resume --tracking-uri gives another)")
        state.driver_pid, state.status = os.getpid(), "running"
        state.save(paths)
        return execute(state.spec(), paths, state, resume=True, rerun_failed=rerun_failed, log=log, lock=lock)


def resume_command(paths: Paths) -> str:
    return f"python -m sweeps resume {paths.name} --workdir {paths.workdir}"


def execute(spec: Spec, paths: Paths, state: SweepState, resume: bool = False, rerun_failed: bool = False,
            log: Log = print, lock: DriverLock | None = None) -> int:
    """Run (or resume) every stage of a sweep; 0 when every trial finished, 1 otherwise. A stop (STOP_SIGNALS, a
    full disk) at any point from the sweep's first write on ends it INCOMPLETE, its runs ended with the reason; on
    an error the sweep's run ends FAILED with it, the state says "incomplete", and the error goes on to the
    caller."""
    paths.stop_cause.unlink(missing_ok=True)  # one left by an earlier stop would misname this driver's Ctrl+C
    interrupt = Interrupt(paths.stop_cause)
    parent, tracker, stage = sweep_key(spec.name), None, "start"
    with interrupt.installed():
        try:
            tracker = _open_sweep_run(spec, paths, state, log)
            stage = "teacher"
            teacher_runs = _teacher_stage(spec, paths, tracker, log)
            interrupt.check()
            stage = "ray"
            with interrupt.held():
                init_ray(state.args.address)
                if lock is not None and not state.args.address:
                    lock.update(ray_session=session_dir())
            check_gpu(spec)
            meta = {**state.code, "teacher_dir": str(paths.teacher_dir), "compile_cache": str(paths.compile_cache),
                    "teacher_run_id": next(iter(teacher_runs.values()), None)}
            for stage in (PHASES_SEARCH if spec.search else PHASES_GRID):
                if state.phases.get(stage) == "done":
                    continue
                why = _run_stage(stage, spec, paths, state, tracker, meta, interrupt, resume, rerun_failed, log)
                if why is not None:
                    return _stopping(interrupt, paths, state, tracker, parent, stage, why, interrupt.cause, log)
        except KeyboardInterrupt:
            return _stopping(interrupt, paths, state, tracker, parent, stage, "", interrupt.cause or "Ctrl+C", log)
        except DiskFull:
            return _stopping(interrupt, paths, state, tracker, parent, stage, "", DISK_FULL, log)
        except Exception as exc:
            _stopping(interrupt, paths, state, tracker, parent, stage,
                      f"stopped by {type(exc).__name__}: {str(exc)[:300]}", None, log, error=True)
            raise
    return _finished(spec, paths, state, tracker, parent, log)


def _open_sweep_run(spec: Spec, paths: Paths, state: SweepState, log: Log) -> Tracker:
    """The sweep's tracker and its parent run (made, or RUNNING again), with the spec as an artifact."""
    tracker = paths.tracker(state.tracking_uri, log)
    run = sweep_record(spec.name, spec.table, state.spec_path, spec.preset, state.code,
                       state.study_url and redacted(state.study_url))
    tracker.ensure_run(run.key, run.tags, run.params, name=run.name)
    tracker.reopen(run.key)
    spec_file = paths.spec_file
    spec_file.write_text(json.dumps(state.source, indent=1))
    tracker.log_artifact(run.key, spec_file, None)
    tracker.drain()
    return tracker


def _teacher_stage(spec: Spec, paths: Paths, tracker: Tracker, log: Log) -> dict:
    """The teachers, with the disk's reserve held (sweeps.driver.disk): a disk that fills meanwhile stops the sweep as
    in
    a Tune stage (DiskFull), one line on the console and the rest in the sweep's log."""
    t0 = time.perf_counter()
    with diverted(paths.log_file), disk_guard(paths.workdir, paths.disk_reserve, log):
        runs = teacher_stage(spec.configs(), tracker, spec.name, paths.teacher_dir, log=log)
    log(f"[stage] teacher: {time.perf_counter() - t0:.1f} s")
    return runs


def _stopping(interrupt: Interrupt, *args, **kwargs) -> int:
    """_incomplete, with any further stop signal ignored while it records the stop (a second Ctrl+C there would
    leave runs RUNNING and print a traceback)."""
    interrupt.stopping = True
    return _incomplete(*args, **kwargs)


def _finished(spec: Spec, paths: Paths, state: SweepState, tracker: Tracker, parent: str, log: Log) -> int:
    tracker.set_tags(parent, {"ssat.status": "FINISHED"})
    tracker.end(parent, "FINISHED")
    tracker.flush(timeout=float(os.environ.get("SSAT_TRACKING_FLUSH_S", "60")))
    state.status = "done"
    state.save(paths)
    log(f"sweep {spec.name} finished; runs in {state.tracking_uri} (experiment {spec.name})")
    base = state.tracking_uri if state.tracking_uri.startswith("http") else "http://127.0.0.1:5000"
    log(f"its trials in MLflow's UI: {ui_url(tracker.experiment_id, base, store=state.tracking_uri, spec=spec)}")
    if spec.search:
        rank = "" if (spec.metric[0], spec.mode[0]) == ("val/pgd10", "max") else \
            f" --metric {spec.metric[0]} --mode {spec.mode[0]}"
        log(f"the search table: python -m analysis.tables --experiment {spec.name} --table search{rank} "
            f"--tracking-uri {state.tracking_uri}")
        log(f"the study (every trial, its curve, the importances): {dashboard_command(state.study_url)}")
    return 0


def _run_stage(stage: str, spec: Spec, paths: Paths, state: SweepState, tracker: Tracker, meta: dict,
               interrupt: Interrupt, resume: bool, rerun_failed: bool, log: Log) -> str | None:
    """One Tune stage; None when it is complete (the sweep may go on to the next stage), else why it is not."""
    state.phases[stage] = "running"
    state.save(paths)
    t1 = time.perf_counter()
    parent_run_id = tracker.find_run(sweep_key(spec.name))
    trials = None if stage == "search" else (
        spec.trials() if stage == "grid" else spec.confirm_trials(state.confirm_configs))
    if trials is not None and state.args.reuse:
        trials = to_train(stage, spec, trials, state, tracker, meta, parent_run_id, log)
        state.save(paths)
        if not trials:
            log(f"[stage] {stage}: every trial reused, nothing to train")
            return _stage_done(stage, paths, state)
    expected = spec.search["num_samples"] if stage == "search" else len(trials)
    if stage == "search":
        log(f"[search] Optuna study {spec.name} in {state.study_url}; follow it live: "
            f"{dashboard_command(state.study_url)}")
    with interrupt.tune_stage(), diverted(paths.log_file) as sweep_log, \
            DiskWatch(paths.workdir, paths.tune_dir / stage, paths.disk_reserve, spec.max_concurrent,
                      interrupt.request, log):
        tuner = restore_tuner(paths.tune_dir / stage, spec, rerun_failed) if resume else None
        if tuner is None and stage == "search":
            tuner = search_tuner(spec, paths, state.tracking_uri, meta, state.args.max_failures, parent_run_id,
                                 state.study_url or storage_url(paths.sweep_dir))
        elif tuner is None:
            tuner = grid_tuner(spec, trials, paths, stage, state.tracking_uri, meta, state.args.max_failures,
                               parent_run_id)
        results = tuner.fit()
        if resume and stage != "search" and not interrupt.requested:
            results = continue_short(results, stage, spec, paths, state.tracking_uri, state.args.max_failures,
                                     parent_run_id, log)
        if interrupt.cause == DISK_FULL:
            for torn in drop_torn_checkpoints(paths.tune_dir / stage):
                sweep_log.write(f"[disk] removed {torn}: a checkpoint the full disk cut short (never registered)")
    out = stage_outcome(results, stage, expected, interrupt.requested)
    log(f"[stage] {stage}: {out.done}/{expected} trials finished"
        + (f", {out.stopped_early} stopped early by the scheduler" if out.stopped_early else "")
        + f" in {time.perf_counter() - t1:.1f} s")
    if interrupt.requested:
        end_cut_trials(out, tracker, interrupt.cause, resume_command(paths))
        return ""
    if not out.complete:
        for p in out.problems:
            log(f"  not finished: {p}")
        return f"finished {out.done}/{expected} trials"
    if stage == "search":
        state.confirm_configs = top_configs(out.finished, spec)
        for line in search_ranking(out, spec, state.confirm_configs):
            log(line)
        if not state.confirm_configs:
            return "had no trial that ran its full epochs"
        log(f"[confirm] re-running the top {len(state.confirm_configs)} configuration(s) with seeds "
            f"{', '.join(map(str, spec.search['confirm']['seeds']))}")
    if stage == "confirm":
        for line in confirm_summary(out, spec):
            log(line)
    return _stage_done(stage, paths, state)


def _stage_done(stage: str, paths: Paths, state: SweepState) -> None:
    state.phases[stage] = "done"
    state.save(paths)
    return None


def end_cut_trials(out: StageOutcome, tracker: Tracker, cause: str, resume: str) -> None:
    """After a stop in a stage: each trial's run that reported an epoch ends KILLED, saying by what, where it was cut
    (cut_at) and the resume command. Even a trial judged finished: Tune may not have completed it (`Tracker.kill`
    ends only a RUNNING run); one cut before its first report is ended by _end_left_running, if it started."""
    for t in out.trials:
        if t.last_epoch >= 1:
            tracker.kill(t.key, {"ssat.status": f"KILLED: interrupted ({cause}) {cut_at(t)}; resume with: {resume}"})


def cut_at(t: TrialOutcome) -> str:
    """Where Ctrl+C cut a trial: in the epoch after its last report, or after its last epoch (its report was
    processed, Tune's completion of it was not: resuming records its checkpoints and ends it)."""
    if t.last_epoch < t.epochs:
        return f"in epoch {t.last_epoch + 1}"
    return "after its last epoch, before Tune completed it"


def _incomplete(paths: Paths, state: SweepState, tracker: Tracker | None, parent: str, stage: str, why: str,
                interrupted: str | None, log: Log, error: bool = False) -> int:
    """The sweep stops short: its run ends KILLED (interrupted: by what, e.g. "Ctrl+C") or FAILED (trials that did
    not finish, an error) with the reason in `ssat.status`, no run of it is left RUNNING, and its state says
    "incomplete" (no driver)."""
    why = f"interrupted ({interrupted})" if interrupted else why
    end, reason = (("KILLED", f"KILLED: {why} in stage {stage}") if interrupted
                   else ("FAILED", f"FAILED: stage {stage} {why}"))
    try:
        if tracker is not None:  # None: stopped before the sweep's run was opened
            tracker.set_tags(parent, {"ssat.status": f"{reason}; resume with: {resume_command(paths)}"})
            tracker.end(parent, end)
            _end_left_running(tracker, parent, f"KILLED: the sweep stopped in stage {stage} ({why}) while this run "
                                               f"was RUNNING; resume with: {resume_command(paths)}", log)
        state.status = "incomplete"
        state.save(paths)
        if tracker is not None:
            tracker.flush(timeout=float(os.environ.get("SSAT_TRACKING_FLUSH_S", "60")))
    except Exception as exc:
        if not error:
            raise
        log(f"[driver] could not record the sweep's end ({type(exc).__name__}: {exc})")  # the error itself goes on
    log(f"sweep {state.name} is INCOMPLETE: stage {stage} {why}. Resume with:\n  {resume_command(paths)}"
        + ("" if interrupted or error else "  (add --rerun-failed to re-run failed trials)"))
    return 1


def _end_left_running(tracker: Tracker, parent: str, tags_status: str, log: Log) -> None:
    """The last guard: every run of the sweep's experiment still RUNNING (but its own run, ended apart) ends
    KILLED with the reason. Runs already ended keep their end (`Tracker.kill` only ends a RUNNING run)."""
    try:
        running = search_all(tracker.client, [tracker.experiment_id], "attributes.status = 'RUNNING'")
    except Exception as exc:  # the store is away: its runs are ended when it is back and the sweep resumes
        log(f"[tracking] could not look for runs left RUNNING ({type(exc).__name__})")
        return
    for r in running:
        key = r.data.tags.get("ssat.key")
        if key and key != parent:
            tracker.kill(key, {"ssat.status": tags_status})



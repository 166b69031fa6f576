"""python -m sweeps run|resume|status|stop|sync|demo - see `python -m sweeps --help`."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from ssat import faults
from ssat.config import ConfigError, parse_overrides
from ssat.datasets import DataError
from ssat.pseudo_labels import PseudoLabelError

from .runner import (Paths, SweepError, check_gpu, code_version, confirm_trials, dry_run, grid_tuner, init_ray,
                     phase_status, search_tuner, spec_configs, sweep_paths, teacher_stage, top_configs)
from .spec import Spec, load_spec, parse_spec
from .tracking import Tracker, TrackingUnavailable, check_reachable, resolve_uri


def _spec_from_state(state: dict) -> Spec:
    a = state["args"]
    return parse_spec(state["source"], state["spec_path"], epochs=a["epochs"], seeds=a["seeds"], sets=a["sets"],
                      cpu_only=a["cpu_only"], max_concurrent=a["max_concurrent"], data_root=a["data_root"])


def _save_state(paths: Paths, state: dict) -> None:
    from ssat.storage import atomic_write_bytes

    atomic_write_bytes(paths.state, json.dumps(state, indent=1).encode())


def _parent_key(spec: Spec) -> str:
    return f"{spec.name}-sweep"


def execute(spec: Spec, paths: Paths, state: dict, resume: bool = False, rerun_failed: bool = False,
            log=print) -> int:
    """Run (or resume) every phase of a sweep; 0 when every trial finished, 1 otherwise."""
    from ray import tune

    from .trainable import train_trial

    uri, a = state["tracking_uri"], state["args"]
    tracker = Tracker(uri, spec.name, artifact_root=paths.workdir / "mlartifacts",
                      spool=paths.sweep_dir / "tracking_spool.jsonl", log=log)
    parent = _parent_key(spec)
    tracker.ensure_run(parent, {"ssat.kind": "sweep", "ssat.sweep": spec.name, "ssat.table": spec.table},
                       {"spec": state["spec_path"], "preset": spec.preset, **state["code"]}, name=spec.name)
    spec_file = paths.sweep_dir / "spec.json"
    spec_file.write_text(json.dumps(state["source"], indent=1))
    tracker.log_artifact(parent, spec_file, None)
    tracker.drain()
    parent_run_id = tracker.find_run(parent)
    t0 = time.perf_counter()
    teacher_runs = teacher_stage(spec_configs(spec), tracker, spec.name, paths.teacher_dir, log=log)
    log(f"[stage] teacher: {time.perf_counter() - t0:.1f} s")
    init_ray(a["address"])
    check_gpu(spec)
    meta = _meta_extra(spec, state, teacher_runs, paths)
    phases = ["search", "confirm"] if spec.search else ["grid"]
    for phase in phases:
        if state["phases"].get(phase) == "done":
            continue
        state["phases"][phase] = "running"
        _save_state(paths, state)
        t1 = time.perf_counter()
        phase_dir = paths.tune_dir / phase
        if resume and tune.Tuner.can_restore(str(phase_dir)):
            tuner = tune.Tuner.restore(str(phase_dir), trainable=tune.with_resources(train_trial, spec.resources),
                                       resume_errored=True, restart_errored=rerun_failed)
        elif phase == "search":
            tuner = search_tuner(spec, paths, state["tracking_uri"], meta, a["max_failures"], parent_run_id)
        else:
            trials = spec.trials() if phase == "grid" else confirm_trials(spec, state["confirm_configs"])
            tuner = grid_tuner(spec, trials, paths, phase, state["tracking_uri"], meta, a["max_failures"], parent_run_id)
        results = tuner.fit()
        done, total, problems = phase_status(results)
        log(f"[stage] {phase}: {done}/{total} trials finished in {time.perf_counter() - t1:.1f} s")
        if done < total and not (phase == "search" and _search_usable(results, spec)):
            for p in problems:
                log(f"  not finished: {p}")
            log(f"sweep {spec.name} is INCOMPLETE ({done}/{total} trials of phase {phase} finished). Resume with:\n"
                f"  python -m sweeps resume {spec.name} --workdir {paths.workdir}"
                f"{'' if not problems else '  (add --rerun-failed to re-run failed trials)'}")
            _save_state(paths, state)
            tracker.flush()
            return 1
        if phase == "search":
            state["confirm_configs"] = top_configs(results, spec)
            log(f"[confirm] re-running the top {len(state['confirm_configs'])} configuration(s) with seeds "
                f"{spec.search['confirm']['seeds']}: {json.dumps(state['confirm_configs'])}")
        state["phases"][phase] = "done"
        _save_state(paths, state)
    tracker.set_tags(parent, {"ssat.status": "FINISHED"})
    tracker.end(parent, "FINISHED")
    tracker.flush(timeout=float(os.environ.get("SSAT_TRACKING_FLUSH_S", "60")))
    state["status"] = "done"
    _save_state(paths, state)
    log(f"sweep {spec.name} finished; runs in {uri} (experiment {spec.name})")
    return 0


def _search_usable(results, spec) -> bool:
    """A search phase with some early-stopped/failed trials may still proceed if it was not interrupted."""
    return all(t.status in ("TERMINATED", "ERROR") for t in results._experiment_analysis.trials) and bool(
        top_configs(results, spec))


def _meta_extra(spec: Spec, state: dict, teacher_runs: dict, paths: Paths) -> dict:
    from .runner import _meta

    return _meta(spec, {**state["code"], "teacher_dir": str(paths.teacher_dir),
                        "teacher_run_id": next(iter(teacher_runs.values()), None)})


def cmd_run(args) -> int:
    sets = parse_overrides(args.set or [])
    spec = load_spec(args.spec, epochs=args.epochs, seeds=args.seeds, sets=sets, cpu_only=args.cpu_only,
                     max_concurrent=args.max_concurrent, data_root=args.data_root)
    if args.name:
        spec = parse_spec({**spec.source, "name": args.name}, args.spec, epochs=args.epochs, seeds=args.seeds,
                          sets=sets, cpu_only=args.cpu_only, max_concurrent=args.max_concurrent, data_root=args.data_root)
    if args.dry_run:
        dry_run(spec)
        return 0
    paths = sweep_paths(args.workdir, spec.name)
    from ssat.datasets import check_root

    for cfg in spec_configs(spec):
        check_root(cfg.data.dataset, cfg.data.root)
    uri = resolve_uri(args.tracking_uri, paths.workdir)
    check_reachable(uri)
    if paths.state.exists():
        old = json.loads(paths.state.read_text())
        if old.get("status") != "done":
            raise SweepError(f"sweep {spec.name} already exists in {paths.sweep_dir} and is not finished; use "
                             f"`python -m sweeps resume {spec.name}` or another --name")
    paths.sweep_dir.mkdir(parents=True, exist_ok=True)
    state = {"name": spec.name, "spec_path": str(args.spec), "source": spec.source, "tracking_uri": uri,
             "args": {"epochs": args.epochs, "seeds": args.seeds, "sets": sets, "cpu_only": args.cpu_only,
                      "max_concurrent": args.max_concurrent, "data_root": args.data_root, "address": args.address,
                      "max_failures": args.max_failures},
             "phases": {}, "status": "running", "driver_pid": os.getpid(), "code": code_version(),
             "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    _save_state(paths, state)
    return execute(spec, paths, state)


def _load_state(args) -> tuple[Paths, dict]:
    paths = sweep_paths(args.workdir, args.name)
    if not paths.state.exists():
        raise SweepError(f"no sweep named {args.name!r} in {paths.workdir / 'runs' / 'sweeps'}")
    return paths, json.loads(paths.state.read_text())


def cmd_resume(args) -> int:
    paths, state = _load_state(args)
    if getattr(args, "address", None):
        state["args"]["address"] = args.address
    if getattr(args, "tracking_uri", None):
        state["tracking_uri"] = args.tracking_uri
    check_reachable(state["tracking_uri"])
    state["driver_pid"], state["status"] = os.getpid(), "running"
    _save_state(paths, state)
    return execute(_spec_from_state(state), paths, state, resume=True, rerun_failed=args.rerun_failed)


def cmd_status(args) -> int:
    from mlflow.tracking import MlflowClient

    paths, state = _load_state(args)
    spec = _spec_from_state(state)
    expected = len(spec.trials()) if spec.grid else spec.search["num_samples"] + (
        spec.search["confirm"]["top_k"] * len(spec.search["confirm"]["seeds"]))
    client = MlflowClient(state["tracking_uri"])
    exp = client.get_experiment_by_name(spec.name)
    runs = client.search_runs([exp.experiment_id], "tags.`ssat.kind` = 'trial'", max_results=5000) if exp else []
    by = {}
    for r in runs:
        s = r.data.tags.get("ssat.status", r.info.status).split(":")[0]
        by[s] = by.get(s, 0) + 1
    print(f"sweep {spec.name}: {state.get('status')}, phases {state['phases']}, driver pid {state.get('driver_pid')}")
    print(f"trials expected {expected}; runs by status: {json.dumps(by)}")
    for r in sorted(runs, key=lambda r: (r.data.tags.get("ssat.row", ""), r.data.tags.get("ssat.seed", ""))):
        m = r.data.metrics
        print(f"  {r.data.tags.get('ssat.stage')} {r.data.tags.get('ssat.row', ''):<14} seed {r.data.tags.get('ssat.seed')}"
              f"  {r.data.tags.get('ssat.status', r.info.status)[:40]:<40} val/pgd10 {m.get('val/pgd10', float('nan')):.2f}")
    return 0


def cmd_stop(args) -> int:
    paths, state = _load_state(args)
    pid = state.get("driver_pid")
    try:
        os.kill(pid, signal.SIGINT)  # Tune saves its state on SIGINT and fit() returns
    except (ProcessLookupError, TypeError):
        print(f"sweep {args.name}: no driver running (pid {pid})")
        return 1
    print(f"sent SIGINT to the driver of {args.name} (pid {pid}); resume with `python -m sweeps resume {args.name}`")
    return 0


def cmd_sync(args) -> int:
    paths, state = _load_state(args)
    t = Tracker(state["tracking_uri"], state["name"], artifact_root=paths.workdir / "mlartifacts",
                spool=paths.sweep_dir / "tracking_spool.jsonl")
    n = len(t.queue)
    ok = t.flush(timeout=args.timeout)
    print(f"sync {args.name}: {n} spooled operation(s); {'all sent' if ok else 'store still unreachable, kept'}")
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sweeps", description="Ray Tune sweeps of SSAT-MBI, tracked in MLflow.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a sweep spec")
    r.add_argument("spec")
    r.add_argument("--address", default=None, help="Ray cluster address (default: a local Ray on 127.0.0.1)")
    r.add_argument("--data-root", default=os.environ.get("SSAT_DATA_ROOT"), help="default: $SSAT_DATA_ROOT")
    r.add_argument("--epochs", type=int, default=None, help="rescale every epoch number of the spec to N epochs")
    r.add_argument("--tracking-uri", default=None, help="MLflow server or store (default: ./mlflow.db)")
    r.add_argument("--cpu-only", action="store_true", help="train on CPUs even if the spec asks for GPU shares")
    r.add_argument("--seeds", type=int, nargs="+", default=None)
    r.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    r.add_argument("--max-concurrent", type=int, default=None)
    r.add_argument("--max-failures", type=int, default=2, help="retries of a crashed trial from its checkpoint")
    r.add_argument("--name", default=None, help="sweep name (default: the spec's)")
    r.add_argument("--dry-run", action="store_true", help="print every trial's config, schedules and cost; start nothing")
    for name, helptext in (("resume", "finish an interrupted sweep"), ("status", "trials and their state"),
                           ("stop", "interrupt a running sweep (it can be resumed)"),
                           ("sync", "send tracking operations spooled while the store was away")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("name")
        if name == "resume":
            p.add_argument("--rerun-failed", action="store_true", help="also re-run trials that failed")
            p.add_argument("--address", default=None)
            p.add_argument("--tracking-uri", default=None, help="a new address of the tracking server (e.g. after "
                                                                "a SLURM re-submit moved the head)")
        if name == "sync":
            p.add_argument("--timeout", type=float, default=30.0)
    d = sub.add_parser("demo", help="the main job on MNIST-5k: teacher, ablation sweep, table, plot")
    d.add_argument("--epochs", type=int, default=None)
    d.add_argument("--seeds", type=int, nargs="+", default=None)
    d.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    d.add_argument("--name", default=None)
    d.add_argument("--max-concurrent", type=int, default=2)
    for p in sub.choices.values():
        p.add_argument("--workdir", default=os.environ.get("SSAT_STORAGE_PATH", "."),
                       help="folder holding runs/, mlflow.db and mlartifacts/ (default: $SSAT_STORAGE_PATH or .); "
                            "on a cluster a folder every node reaches")
    return ap


def main(argv=None) -> int:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # explicit (shared/STACK.md); a cluster may set token
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    args = build_parser().parse_args(argv)
    try:
        try:
            faults.parse(os.environ.get("SSAT_FAULT", ""))  # a test's typo must fail here, not in a trial
        except ValueError as exc:
            raise SweepError(str(exc)) from None
        if args.cmd == "demo":
            from .demo import run_demo

            return run_demo(args)
        return {"run": cmd_run, "resume": cmd_resume, "status": cmd_status, "stop": cmd_stop, "sync": cmd_sync}[args.cmd](args)
    except (ConfigError, SweepError, TrackingUnavailable, DataError, PseudoLabelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

"""python -m sweeps run|resume|status|stop|sync|demo - see `python -m sweeps --help`."""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from ssat import faults
from ssat.config import ConfigError, parse_overrides
from ssat.datasets import DataError
from ssat.pseudo_labels import PseudoLabelError

from .calibrate import add_parser as add_calibrate
from .driver import RunArgs, load_run_spec, resume_sweep, run_sweep, stop_sweep, sweep_status, sync_sweep
from .dryrun import dry_run
from .errors import SweepError, UsageError, cut
from .tracking import TrackingUnavailable


def _run_args(args) -> RunArgs:
    return RunArgs(epochs=args.epochs, seeds=args.seeds, sets=parse_overrides(args.set or []), cpu_only=args.cpu_only,
                   max_concurrent=args.max_concurrent, data_root=args.data_root, address=args.address,
                   max_failures=args.max_failures, name=args.name, rows=args.rows, gpu_share=args.gpu_share)


def cmd_run(args) -> int:
    run = _run_args(args)
    if args.dry_run:
        dry_run(load_run_spec(args.spec, run), verbose=args.verbose, gpu=args.gpu, json_path=args.json,
                spec_path=args.spec)
        return 0
    return run_sweep(args.spec, run, workdir=args.workdir, tracking_uri=args.tracking_uri, command=args.command)


def cmd_resume(args) -> int:
    return resume_sweep(args.name, workdir=args.workdir, rerun_failed=args.rerun_failed, address=args.address,
                        tracking_uri=args.tracking_uri, command=args.command)


def cmd_status(args) -> int:
    print(sweep_status(args.name, workdir=args.workdir))
    return 0


def cmd_stop(args) -> int:
    return stop_sweep(args.name, workdir=args.workdir)


def cmd_sync(args) -> int:
    return sync_sweep(args.name, workdir=args.workdir, timeout=args.timeout, command=args.command)


def check_args(args) -> None:
    """What the spec does not check of the command line, before anything runs; each error names its option."""
    flag = "--workdir" + (" ($SSAT_STORAGE_PATH)" if os.environ.get("SSAT_STORAGE_PATH") == args.workdir else "")
    w = Path(args.workdir)
    first = next((p for p in (w, *w.parents) if p.exists()), w)  # the folder itself, or where it would be made
    if first.exists() and not first.is_dir():
        where = "is a file" if first == w else f"is below {first}, which is a file"
        raise UsageError(f"{flag} {args.workdir}: {where}, not a folder; give the folder that holds (or will "
                         "hold) runs/, mlflow.db and mlartifacts/")
    writes = args.cmd in ("run", "resume", "sync", "demo", "calibrate") and not getattr(args, "dry_run", False)
    if writes and first.exists() and not os.access(first, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {args.workdir}: {first} is not writable by this user")
    failures = getattr(args, "max_failures", None)
    if failures is not None and failures < -1:
        raise UsageError(f"--max-failures: {failures}; allowed: -1 (retry a crashed trial forever, as Ray Tune "
                         "reads -1), 0 (never retry) or a number of retries")
    if getattr(args, "timeout", 0) < 0:
        raise UsageError(f"--timeout: {args.timeout}; allowed: seconds >= 0")


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
    r.add_argument("--gpu-share", type=float, default=None, metavar="S",
                   help="each trial's share of a GPU instead of the spec's resources.gpu (0.25: four per GPU)")
    r.add_argument("--seeds", type=int, nargs="+", default=None)
    r.add_argument("--rows", nargs="+", default=None, metavar="ROW",
                   help="only these rows of a grid spec (quote them: 'linear|on')")
    r.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    r.add_argument("--max-concurrent", type=int, default=None)
    r.add_argument("--max-failures", type=int, default=2,
                   help="retries of a crashed trial from its checkpoint (default 2; 0: none; -1: retry forever, "
                        "as in Ray Tune)")
    r.add_argument("--name", default=None, help="sweep name (default: the spec's)")
    r.add_argument("--dry-run", action="store_true", help="print every trial, its schedules and cost; start nothing")
    r.add_argument("--verbose", action="store_true", help="with --dry-run: every trial's full config and per-epoch values")
    r.add_argument("--gpu", default=None, metavar="NAME", help="with --dry-run: GPU-hours per stage (teachers, training, "
                                                               "validation, SWA, evaluation) from this GPU type's "
                                                               "measurements in benchmarks/results/")
    r.add_argument("--json", default=None, metavar="PATH", help="with --dry-run: also write the estimate as JSON")
    for name, helptext in (("resume", "finish an interrupted sweep"), ("status", "trials and their state"),
                           ("stop", "interrupt a running sweep (it can be resumed)"),
                           ("sync", "send tracking operations spooled while the store was away")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("name")
        if name == "resume":
            p.add_argument("--rerun-failed", action="store_true", help="also re-run failed trials, from their first epoch (without it they resume "
                                                        "from their checkpoints; a trial stopped for NaN is not re-run)")
            p.add_argument("--address", default=None)
            p.add_argument("--tracking-uri", default=None, help="a new address of the tracking server (e.g. after "
                                                                "a SLURM re-submit moved the head)")
        if name == "sync":
            p.add_argument("--timeout", type=float, default=30.0)
    d = sub.add_parser("demo", help="the main job on MNIST-5k: teacher, ablation sweep, table, plot")
    d.add_argument("--epochs", type=int, default=None)
    d.add_argument("--seeds", type=int, nargs="+", default=None)
    d.add_argument("--rows", nargs="+", default=None, metavar="ROW", help="only these rows (e.g. 'linear|on')")
    d.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE")
    d.add_argument("--name", default=None)
    d.add_argument("--max-concurrent", type=int, default=None,
                   help="trials at once (default: 2 on a CPU; on a GPU as many as fit, 8 per GPU)")
    add_calibrate(sub)
    for p in sub.choices.values():
        p.add_argument("--workdir", default=os.environ.get("SSAT_STORAGE_PATH", "."),
                       help="folder holding runs/, mlflow.db and mlartifacts/ (default: $SSAT_STORAGE_PATH or .); "
                            "on a cluster a folder every node reaches")
    return ap


def main(argv=None) -> int:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # explicit: CLI clients fail on a token cluster otherwise; a cluster may set token
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command = "python -m sweeps " + shlex.join(argv)  # what driver.lock says drives the sweep
    try:
        try:
            faults.parse(os.environ.get("SSAT_FAULT", ""))  # a test's typo must fail here, not in a trial
        except ValueError as exc:
            raise SweepError(str(exc)) from None
        check_args(args)
        if args.cmd == "demo":
            from .demo import run_demo

            return run_demo(args)
        if args.cmd == "calibrate":
            from .calibrate import run_calibrate

            return run_calibrate(args)
        return {"run": cmd_run, "resume": cmd_resume, "status": cmd_status, "stop": cmd_stop, "sync": cmd_sync}[args.cmd](args)
    except (ConfigError, SweepError, TrackingUnavailable, DataError, PseudoLabelError) as exc:
        print(f"error: {cut(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130

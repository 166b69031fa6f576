"""python -m sweeps run|resume|status|stop|sync|demo|paper|calibrate - see `python -m sweeps --help`.

Building the parser imports nothing heavy (no torch, mlflow or Ray): `--help` answers at once, and each command
imports what it needs when it runs.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

EXAMPLES = {
    "run": "python -m sweeps run sweeps/specs/mnist5k-demo.yaml --dry-run\n"
           "python -m sweeps run sweeps/specs/paper-table1-main.yaml --dry-run --gpu H200\n"
           "python -m sweeps run sweeps/specs/mnist5k-search.yaml --samples 4 --top-k 1 --epochs 3",
    "resume": "python -m sweeps resume mnist5k-demo --rerun-failed",
    "status": "python -m sweeps status                 # the sweeps of the working folder\n"
              "python -m sweeps status mnist5k-demo    # one sweep: stages, driver, trials",
    "stop": "python -m sweeps stop mnist5k-demo      # as Ctrl+C in its driver; resume it later",
    "sync": "python -m sweeps sync mnist5k-demo --timeout 60",
    "demo": "python -m sweeps demo --epochs 10 --rows 'linear|on' 'const|off'",
    "paper": "python -m sweeps paper                       # every table and figure (make paper)\n"
             "python -m sweeps paper --only table2 fig4     # some of them",
}
HELP = {"resume": "finish an interrupted sweep", "status": "list the sweeps, or one sweep's stages and trials",
        "stop": "interrupt a running sweep (it can be resumed)",
        "sync": "send tracking operations spooled while the store was away"}
# Errors a person can fix, as (module, class): printed as one line with exit code 2. Matched only in modules
# already imported: an error of a module never imported cannot have been raised, and importing it would cost.
USER_ERRORS = (("ssat.config", "ConfigError"), ("sweeps.errors", "SweepError"), ("ssat.datasets", "DataError"),
               ("ssat.pseudo_labels", "PseudoLabelError"), ("sweeps.tracking.tracker", "TrackingUnavailable"))


def _run_args(args):
    from ssat.config import parse_overrides

    from .driver.sweep import RunArgs

    return RunArgs(epochs=args.epochs, seeds=args.seeds, sets=parse_overrides(args.set or []), cpu_only=args.cpu_only,
                   max_concurrent=args.max_concurrent, data_root=args.data_root, address=args.address,
                   max_failures=args.max_failures, name=args.name, rows=args.rows, gpu_share=args.gpu_share,
                   samples=args.samples, top_k=args.top_k, optuna_storage=args.optuna_storage, reuse=args.reuse)


def cmd_run(args) -> int:
    from .spec_file import read_yaml

    read_yaml(args.spec)  # a file that cannot be a spec is refused before torch, Ray or MLflow are imported
    gpu = None
    if args.gpu is not None:  # a GPU name no measurement has is refused before any other work
        from .costs.dryrun import gpu_choice

        gpu = gpu_choice(args.gpu)
    from .driver.sweep import run_sweep
    from .driver.run_options import load_run_spec

    run = _run_args(args)
    if args.dry_run:
        from .costs.dryrun import dry_run

        spec = load_run_spec(args.spec, run)
        dry_run(spec, verbose=args.verbose, gpu=gpu, json_path=args.json, spec_path=args.spec,
                measure=not args.no_measure, reused=_would_reuse(spec, args) if args.reuse else None)
        return 0
    return run_sweep(args.spec, run, workdir=args.workdir, tracking_uri=args.tracking_uri, command=args.command)


def _would_reuse(spec, args) -> dict:
    """(row, seed) -> sweep of the grid trials `run --reuse` would take from the store's finished runs (its local
    store not there yet: none)."""
    from mlflow.tracking import MlflowClient

    from .tracking.provenance import code_version
    from .driver.reuse import find, records
    from .tracking.tracker import resolve_uri, sqlite_path

    uri = resolve_uri(args.tracking_uri, args.workdir)
    if not spec.grid or (sqlite_path(uri) is not None and not sqlite_path(uri).exists()):
        return {}
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(spec.name)
    trials = spec.trials()
    recs = records(spec, trials, {})
    found = find(recs, client, exp.experiment_id if exp else None, code_version(), log=lambda s: None)
    return {(t.row, t.seed): found[key].sweep for t, (key, _) in zip(trials, recs) if key in found}


def cmd_resume(args) -> int:
    from .driver.sweep import resume_sweep

    return resume_sweep(args.name, workdir=args.workdir, rerun_failed=args.rerun_failed, address=args.address,
                        tracking_uri=args.tracking_uri, command=args.command)


def cmd_status(args) -> int:
    if args.name is None:
        from .paths import sweeps_table

        print(sweeps_table(args.workdir))
        return 0
    from .driver.commands import sweep_status

    print(sweep_status(args.name, workdir=args.workdir))
    return 0


def cmd_stop(args) -> int:
    from .driver.commands import stop_sweep

    return stop_sweep(args.name, workdir=args.workdir)


def cmd_sync(args) -> int:
    from .driver.commands import sync_sweep

    return sync_sweep(args.name, workdir=args.workdir, timeout=args.timeout, command=args.command)


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args)


def cmd_paper(args) -> int:
    from .paper import run_paper

    return run_paper(args)


def cmd_calibrate(args) -> int:
    from .costs.calibrate import run_calibrate

    return run_calibrate(args)


COMMANDS = {"run": cmd_run, "resume": cmd_resume, "status": cmd_status, "stop": cmd_stop, "sync": cmd_sync,
            "demo": cmd_demo, "paper": cmd_paper, "calibrate": cmd_calibrate}


def check_args(args) -> None:
    """What the spec does not check of the command line, before anything runs; each error names its option."""
    from .errors import UsageError

    flag = "--workdir" + (" ($SSAT_STORAGE_PATH)" if os.environ.get("SSAT_STORAGE_PATH") == args.workdir else "")
    w = Path(args.workdir)
    first = next((p for p in (w, *w.parents) if p.exists()), w)  # the folder itself, or where it would be made
    if first.exists() and not first.is_dir():
        where = "is a file" if first == w else f"is below {first}, which is a file"
        raise UsageError(f"{flag} {args.workdir}: {where}, not a folder; give the folder that holds (or will "
                         "hold) runs/, mlflow.db and mlartifacts/")
    writes = args.cmd in ("run", "resume", "sync", "demo", "paper", "calibrate") and not getattr(args, "dry_run", False)
    if writes and first.exists() and not os.access(first, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {args.workdir}: {first} is not writable by this user")
    failures = getattr(args, "max_failures", None)
    if failures is not None and failures < -1:
        raise UsageError(f"--max-failures: {failures}; allowed: -1 (retry a crashed trial forever, as Ray Tune "
                         "reads -1), 0 (never retry) or a number of retries")
    if getattr(args, "timeout", 0) < 0:
        raise UsageError(f"--timeout: {args.timeout}; allowed: seconds >= 0")


# ---- the parser ----------------------------------------------------------------------------------------------
def _sub(sub, name: str, helptext: str) -> argparse.ArgumentParser:
    """A subcommand with its help and its examples as the epilog."""
    return sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".",
                          epilog="example:\n  " + EXAMPLES[name].replace("\n", "\n  "),
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _trial_options(p: argparse.ArgumentParser) -> None:
    """The options `run` and `demo` share: what each trial runs."""
    p.add_argument("--epochs", type=int, default=None, metavar="N",
                   help="rescale every epoch number of the spec (t, LR milestones, SWA start) to N epochs")
    p.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                   help="these seeds instead of the spec's (each row runs once per seed)")
    p.add_argument("--rows", nargs="+", default=None, metavar="ROW",
                   help="only these rows of a grid spec (quote them: 'linear|on')")
    p.add_argument("--set", nargs="*", default=[], action="extend", metavar="KEY=VALUE",
                   help="config overrides applied to every trial (e.g. method.beta=0.5 optim.lr=0.05)")
    p.add_argument("--name", default=None, help="the sweep's name (default: the spec's); its state is in "
                                                "<workdir>/runs/sweeps/NAME, its runs in the MLflow experiment NAME")


def _run_parser(sub) -> None:
    r = _sub(sub, "run", "run a sweep spec (or with --dry-run: print its trials and cost, start nothing)")
    r.add_argument("spec", metavar="SPEC", help="a sweep spec, e.g. sweeps/specs/mnist5k-demo.yaml")
    _trial_options(r)
    r.add_argument("--address", default=None, help="Ray cluster address (default: a local Ray on 127.0.0.1)")
    r.add_argument("--data-root", default=os.environ.get("SSAT_DATA_ROOT"), metavar="DIR",
                   help="where the datasets are (default: $SSAT_DATA_ROOT, else the spec's data.root)")
    r.add_argument("--tracking-uri", default=None, metavar="URI", help="MLflow server or store (default: "
                                                                        "<workdir>/mlflow.db)")
    r.add_argument("--cpu-only", action="store_true", help="train on CPUs even if the spec asks for GPU shares")
    r.add_argument("--gpu-share", type=float, default=None, metavar="S",
                   help="each trial's share of a GPU instead of the spec's resources.gpu (0.25: four per GPU)")
    r.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                   help="trials at once (default: the spec's max_concurrent)")
    r.add_argument("--max-failures", type=int, default=2, metavar="N",
                   help="retries of a crashed trial from its checkpoint (default 2; 0: none; -1: retry forever, "
                        "as in Ray Tune)")
    r.add_argument("--reuse", action=argparse.BooleanOptionalAction, default=False,
                   help="a grid or confirm trial with a whole FINISHED run (same config hash and seed) anywhere in "
                        "the store references it instead of training again (default: --no-reuse)")
    r.add_argument("--samples", type=int, default=None, metavar="N",
                   help="a search's number of sampled trials (its search.num_samples)")
    r.add_argument("--top-k", type=int, default=None, metavar="K",
                   help="a search's configurations re-run by the confirm stage (its search.confirm.top_k)")
    r.add_argument("--optuna-storage", default=None, metavar="URL",
                   help="a search's Optuna study in this RDB (e.g. postgresql://HOST/optuna, a database of its own) "
                        "instead of optuna.db in the sweep's folder")
    r.add_argument("--dry-run", action="store_true", help="print every trial, its schedules and cost; start nothing")
    r.add_argument("--verbose", action="store_true", help="with --dry-run: every trial's full config and per-epoch "
                                                          "values")
    r.add_argument("--gpu", default=None, metavar="NAME", help="with --dry-run: GPU-hours per stage (teachers, "
                   "training, validation, SWA, evaluation) from this GPU type's measurements (benchmarks/results/ "
                   "and your calibrations); an unknown name is refused with the known ones")
    r.add_argument("--no-measure", action="store_true", help="with --dry-run of CPU trials: do not time their "
                   "epochs on this machine (a few seconds per distinct configuration), so no wall time")
    r.add_argument("--json", default=None, metavar="PATH", help="with --dry-run: also write the estimate as JSON")


def _name_parsers(sub) -> None:
    for name, helptext in HELP.items():
        p = _sub(sub, name, helptext)
        p.add_argument("name", nargs="?" if name == "status" else None, metavar="NAME",
                       help="the sweep's name (as `python -m sweeps status` lists them)"
                            + ("; without it: every sweep of --workdir" if name == "status" else ""))
        if name == "resume":
            p.add_argument("--rerun-failed", action="store_true", help="also re-run failed trials, from their first "
                           "epoch (without it they resume from their checkpoints; a trial stopped for NaN is not "
                           "re-run)")
            p.add_argument("--address", default=None, help="Ray cluster address (default: the one the sweep was "
                                                           "run with, else a local Ray)")
            p.add_argument("--tracking-uri", default=None, metavar="URI", help="a new address of the tracking server "
                                                                                "(e.g. after a SLURM re-submit moved "
                                                                                "the head)")
        if name == "sync":
            p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                           help="give up sending after this long (default 30); what is unsent stays spooled")


def build_parser() -> argparse.ArgumentParser:
    """Every command and option; imports nothing but the standard library (and calibrate's parser, as light)."""
    from .costs.calibrate import add_parser as add_calibrate

    ap = argparse.ArgumentParser(prog="python -m sweeps", description="Ray Tune sweeps of SSAT-MBI, tracked in MLflow.",
                                 epilog="examples (`python -m sweeps COMMAND --help` for each):\n  "
                                        + "\n  ".join(e.split("\n")[0] for e in EXAMPLES.values())
                                        + "\n  python -m sweeps calibrate sweeps/specs/paper-table1-main.yaml",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    _run_parser(sub)
    _name_parsers(sub)
    d = _sub(sub, "demo", "the main job on MNIST-5k: teacher, ablation sweep, table, plot")
    _trial_options(d)
    d.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                   help="trials at once (default: 2 on a CPU; on a GPU as many as fit, 8 per GPU)")
    pp = _sub(sub, "paper", "every table and figure of the paper in miniature on MNIST-5k, from real tracked runs")
    pp.add_argument("--only", nargs="+", default=None, metavar="PART",
                    help="only these parts: table1 table2 table3 table4 table5 tables6-7 fig4 fig5 (default: all)")
    pp.add_argument("--specs", default=None, metavar="DIR",
                    help="read the parts' spec files (the names of sweeps/specs) from DIR instead: your own set")
    pp.add_argument("--autoattack-images", type=int, default=50, metavar="N",
                    help="AutoAttack on the first N test images of each trial (default 50; tagged firstN)")
    pp.add_argument("--autoattack-seeds", type=int, nargs="+", default=[0, 1], metavar="SEED",
                    help="the seeds whose trials AutoAttack evaluates (default 0 1)")
    add_calibrate(sub)
    for p in sub.choices.values():
        p.add_argument("--workdir", default=os.environ.get("SSAT_STORAGE_PATH", "."), metavar="DIR",
                       help="folder holding runs/, mlflow.db and mlartifacts/ (default: $SSAT_STORAGE_PATH or .); "
                            "on a cluster a folder every node reaches")
    return ap


def main(argv=None) -> int:
    # explicit: CLI clients fail on a token cluster otherwise; a cluster may set token
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Tune's "... took 1.5 s, which may be a performance bottleneck" on a loaded machine: the progress lines say
    # how fast epochs go; its warnings of a driver stalled for half a minute still show
    os.environ.setdefault("TUNE_WARN_THRESHOLD_S", "30")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command = "python -m sweeps " + shlex.join(argv)  # what driver.lock says drives the sweep
    from ssat.entry import run_command

    from .errors import cut

    return run_command(_dispatch, args, errors=USER_ERRORS, said=cut)


def _dispatch(args) -> int:
    from ssat import faults

    from .errors import SweepError

    try:
        faults.parse(os.environ.get("SSAT_FAULT", ""))  # a test's typo must fail here, not in a trial
    except ValueError as exc:
        raise SweepError(str(exc)) from None
    check_args(args)
    return COMMANDS[args.cmd](args)

"""The project's side of the SLURM template (clusters/slurm/ray_sweep.sbatch): what a job decides before Ray starts,
and what it leaves behind when SLURM ends it.

    python -m sweeps.slurm plan --workdir DIR -- run SPEC [args...] | resume NAME [args...]
        Prints one line for the template: the sweep's name, the action (run, resume, or finished: nothing to do),
        and the CPUs and GPUs each node's Ray offers (from the allocation's SLURM_* variables).
        A requeued job (SLURM_RESTART_COUNT > 0) resumes the sweep its first run started. Refused (exit 2), before
        any server starts: a spec or option error, and an allocation whose nodes cannot hold one trial.
    python -m sweeps.slurm settle NAME --workdir DIR --why TEXT [--grace S]
        After SLURM's SIGTERM (scancel, a requeue, the hard time limit), before its SIGKILL: Ctrl+C to the sweep's
        driver if it still runs (which ends its runs with TEXT as the cause), SIGKILL after S seconds, then, holding
        the sweep's lock, what the driver could not send is sent, every run of the sweep left RUNNING ends KILLED
        with TEXT and the resume command, and the sweep's state says incomplete. Nothing is left RUNNING; `resume`
        goes on from the trials' checkpoints.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ssat.config import ConfigError

from .driver.lock import Host, hold, inspect, signal_holder
from .errors import SweepError

CPU_VARS = ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE")
GPU_VARS = ("SLURM_GPUS_PER_TASK", "SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE")
TEMPLATE = "clusters/slurm/ray_sweep.sbatch"


@dataclass(frozen=True)
class NodeShare:
    """What Ray gets on each node of the allocation (the template runs one task per node), and where from."""
    cpus: int
    gpus: int
    cpus_from: str  # e.g. "SLURM_CPUS_PER_TASK=16"
    gpus_from: str  # e.g. "SLURM_GPUS_PER_TASK=a100:4", or "no GPU requested"


def slurm_count(name: str, value: str) -> int:
    """A count as SLURM writes it into the environment: `4`, `a100:4`, `gpu:a100:4`, or one per type joined by
    commas (`a100:2,v100:1`, summed)."""
    try:
        counts = [int(part.rsplit(":", 1)[-1]) for part in value.split(",")]
    except ValueError:
        raise SweepError(f"{name}={value!r}: expected a count such as 4, a100:4 or a100:2,v100:1") from None
    if any(c < 0 for c in counts):
        raise SweepError(f"{name}={value!r}: a count cannot be negative")
    return sum(counts)


def node_share(env: Mapping[str, str]) -> NodeShare:
    """CPUs per node: --cpus-per-task (one task per node), else the node's CPUs; GPUs per node: --gpus-per-task,
    else --gpus-per-node, else what the node was given (--gres=gpu:N), else none."""
    cpu_var = next((v for v in CPU_VARS if env.get(v)), None)
    if cpu_var is None:
        raise SweepError(f"none of {', '.join(CPU_VARS)} is set: not inside a SLURM allocation (submit with "
                         f"`sbatch {TEMPLATE} ...`)")
    gpu_var = next((v for v in GPU_VARS if env.get(v)), None)
    cpus = slurm_count(cpu_var, env[cpu_var])
    gpus = slurm_count(gpu_var, env[gpu_var]) if gpu_var else 0
    return NodeShare(cpus, gpus, f"{cpu_var}={env[cpu_var]}", f"{gpu_var}={env[gpu_var]}" if gpu_var else
                     "no GPU requested")


def misfits(resources: dict, share: NodeShare) -> list[str]:
    """Why no trial of a spec with these per-trial `resources` could ever start on a node of the allocation (each
    reason names both numbers and what to change); empty when one fits."""
    found = []
    cpu, gpu = resources["cpu"], resources["gpu"]
    if cpu > share.cpus:
        found.append(f"resources.cpu = {cpu:g} per trial, but each node of this allocation gives Ray {share.cpus} "
                     f"CPU(s) ({share.cpus_from}): ask for at least {math.ceil(cpu)} with `#SBATCH --cpus-per-task` "
                     f"in {TEMPLATE}, or lower resources.cpu in the spec")
    if gpu > share.gpus:
        found.append(f"resources.gpu = {gpu:g} per trial, but each node of this allocation gives Ray {share.gpus} "
                     f"GPU(s) ({share.gpus_from}): ask for GPUs with `#SBATCH --gpus-per-task` in {TEMPLATE}, "
                     "or add --cpu-only to train on CPUs")
    custom = resources.get("custom_resources") or {}
    if custom:
        found.append(f"resources.custom = {custom}: the template's Ray nodes offer no custom resources, so no trial "
                     "could start; remove resources.custom from the spec")
    return found


@dataclass(frozen=True)
class Plan:
    sweep: str
    action: str  # run | resume | finished
    share: NodeShare

    def line(self) -> str:
        """What the template reads: `SWEEP ACTION RAY_CPUS RAY_GPUS` (a sweep name holds no space)."""
        return f"{self.sweep} {self.action} {self.share.cpus} {self.share.gpus}"


def plan(argv: list[str], workdir: str | Path, env: Mapping[str, str], log=print) -> Plan:
    """What the job does with `run SPEC ...` or `resume NAME ...` (the template's arguments): the spec and options
    are checked as `python -m sweeps` would, then the allocation against one trial of the spec."""
    from .cli import _run_args, build_parser, check_args
    from .driver.sweep import SweepState, finished_message
    from .driver.run_options import load_run_spec
    from .paths import sweep_paths

    if not argv or argv[0] not in ("run", "resume"):
        raise SweepError(f"usage: sbatch {TEMPLATE} run SPEC [args...] | resume SWEEP_NAME [args...]")
    args = build_parser().parse_args([*argv, "--workdir", str(workdir)])
    check_args(args)
    restarted = int(env.get("SLURM_RESTART_COUNT") or 0) > 0
    share = node_share(env)
    if args.cmd == "run":
        spec = load_run_spec(args.spec, _run_args(args))
        paths = sweep_paths(workdir, spec.name)
        state = SweepState.load(paths) if paths.state.exists() else None
        resources = spec.resources
        if state is not None and state.status == "done" and not restarted:
            raise SweepError(finished_message(paths, state, args.spec))
        # A requeued job runs its script again with the same arguments: the sweep its first run made goes on.
        action = "resume" if restarted and state is not None else "run"
    else:
        paths = sweep_paths(workdir, args.name)
        state = SweepState.load(paths)
        resources = state.spec().resources
        action = "resume"
    if state is not None and state.status == "done":
        log(f"sweep {paths.name} is finished; nothing to do (its runs: {state.tracking_uri}, experiment {paths.name})")
        return Plan(paths.name, "finished", share)
    problems = misfits(resources, share)
    if problems:
        raise SweepError(f"this allocation cannot run sweep {paths.name}: " + "; ".join(problems))
    return Plan(paths.name, action, share)


def settle(name: str, workdir: str | Path, why: str, grace: float = 10.0, log=print) -> int:
    """Leave a sweep whose job SLURM is ending as a Ctrl+C would (see the module doc); 0 when every operation
    reached the store, 1 when some are spooled for `python -m sweeps sync`."""
    from .driver.sweep import SweepState, _end_left_running, resume_command
    from .paths import sweep_paths
    from .tracking.run_records import sweep_key

    paths = sweep_paths(workdir, name)
    if not paths.state.exists():
        log(f"sweep {name} was not started; nothing to settle")
        return 0
    paths.stop_cause.write_text(why + "\n")  # read by the driver's signal handler: its runs' reasons name SLURM
    try:
        _stop_driver(paths.sweep_dir, grace, log)
    finally:
        paths.stop_cause.unlink(missing_ok=True)
    # Bounded: SLURM's SIGKILL comes KillWait (30 s by default) after its SIGTERM.
    flush_s = float(os.environ.get("SSAT_TRACKING_FLUSH_S", "15"))
    with hold(paths.sweep_dir, f"python -m sweeps.slurm settle {name}", name=name, workdir=paths.workdir, log=log):
        state = SweepState.load(paths)
        if state.status == "done":
            return 0
        tracker = paths.tracker(state.tracking_uri, log)  # adopts the driver's journal
        sent = tracker.flush(timeout=flush_s)  # what the driver left unsent goes first
        parent = sweep_key(name)
        if sent and tracker.find_run(parent) is not None:  # else the driver was stopped before it logged anything
            reason = f"KILLED: {why}; resume with: {resume_command(paths)}"
            tracker.kill(parent, {"ssat.status": reason})  # a run the driver ended keeps its end and reason
            _end_left_running(tracker, parent, reason, log)
            sent = tracker.flush(timeout=flush_s)
        state.status = "incomplete"
        state.save(paths)
    log(f"sweep {name} stopped ({why}); " + ("no run of it is RUNNING" if sent else
                                             "the store did not answer: `python -m sweeps sync` sends the rest")
        + f". Resume with:\n  {resume_command(paths)}")
    return 0 if sent else 1


def _stop_driver(sweep_dir: Path, grace: float, log) -> None:
    """Ctrl+C to the live driver of this host (it stops as on Ctrl+C), SIGKILL when it has not ended after `grace`
    seconds (Ray may be going down under it). A driver on another host is left alone (the lock then waits for its
    heartbeat to go stale)."""
    lock, verdict = inspect(sweep_dir)
    here = Host.here()
    if (lock is None or not verdict.live or lock.start_ticks is None or lock.host != here.name
            or lock.boot_id != here.boot_id):
        return
    if not signal_holder(lock, signal.SIGINT):
        return
    gone, lock = _gone_within(sweep_dir, grace)
    if not gone and signal_holder(lock, signal.SIGKILL):
        log(f"[slurm] the sweep's driver (pid {lock.pid}) did not stop within {grace:g} s: killed")
        # A killed process still holds the lock until the kernel has torn it down (seconds on a loaded node):
        # settling before that would find "a driver" and refuse.
        _gone_within(sweep_dir, KILLED_GONE_S)


KILLED_GONE_S = 10.0  # how long a SIGKILLed driver may take to be gone


def _gone_within(sweep_dir: Path, seconds: float):
    """(True, None) once the sweep's lock has no live holder, within `seconds` (polled every 0.5 s); else
    (False, the lock as last seen)."""
    deadline = time.monotonic() + seconds
    while True:
        time.sleep(0.5)
        lock, verdict = inspect(sweep_dir)
        if lock is None or not verdict.live:
            return True, None
        if time.monotonic() >= deadline:
            return False, lock


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sweeps.slurm", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="the job's sweep, what to do with it, and Ray's share of each node")
    p.add_argument("--workdir", required=True)
    p.add_argument("sweep_args", nargs=argparse.REMAINDER, help="-- run SPEC [args...] | resume NAME [args...]")
    s = sub.add_parser("settle", help="after SLURM's SIGTERM: no run of the sweep left RUNNING")
    s.add_argument("name")
    s.add_argument("--workdir", required=True)
    s.add_argument("--why", required=True, help="the reason the runs carry (e.g. 'SLURM job 12 was cancelled')")
    s.add_argument("--grace", type=float, default=10.0, help="seconds the driver gets to stop before SIGKILL")
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        if args.cmd == "plan":
            sweep_args = args.sweep_args[1:] if args.sweep_args[:1] == ["--"] else args.sweep_args
            print(plan(sweep_args, args.workdir, os.environ, log=lambda m: print(m, file=sys.stderr)).line())
            return 0
        return settle(args.name, args.workdir, args.why, args.grace)
    except (SweepError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

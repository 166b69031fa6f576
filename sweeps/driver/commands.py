"""The commands that look at or act on a sweep from outside its driver: `status` (its stages, driver and trials),
`stop` (Ctrl+C to its driver, wherever it runs) and `sync` (the tracking operations dead drivers left unsent)."""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from analysis.record import search_all

from .sweep import SweepState, resume_command
from .lock import Host, hold, inspect, leftover_ray_processes, proc_start_ticks, signal_holder
from ..paths import Paths, sweep_paths
from ..spec import Spec

def _driver_lines(paths: Paths, state: SweepState) -> list[str]:
    """Who drives the sweep, from its driver.lock: a live driver and its heartbeat, or a dead one (and what its
    local Ray left running), or none."""
    lock, verdict = inspect(paths.sweep_dir)
    resume = f"resume with `{resume_command(paths)}`"
    if lock is not None and verdict.live:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lock.started))
        return [f"driver: pid {lock.pid} on host {lock.host} runs (`{lock.command}`, since {since}); last heartbeat "
                f"{max(verdict.age, 0):.0f} s ago"]
    if lock is not None:
        lines = [f"driver pid {lock.pid} is not running ({verdict.reason}, host {lock.host}); {resume}"]
        left = leftover_ray_processes(lock.ray_session) if lock.host == Host.here().name else []
        if left:
            lines.append("its local Ray left these running: " + ", ".join(f"pid {p} ({n})" for p, n in left)
                         + "; they train nothing and exit on their own (or now: `kill "
                         + " ".join(str(p) for p, _ in left) + "`)")
        return lines
    if state.status == "running":  # no lock: a driver older than driver.lock, known by its pid alone
        alive = state.driver_pid is not None and proc_start_ticks(state.driver_pid) is not None
        return [f"driver pid {state.driver_pid} may still run (it left no driver.lock: an older version)" if alive
                else f"driver pid {state.driver_pid} is not running; {resume}"]
    return [f"no driver; {resume}"] if state.status == "incomplete" else []


def sweep_status(name: str, *, workdir: str | Path = ".") -> str:
    """The sweep's stages, its driver and its trial runs by status, as lines for a person."""
    from mlflow.tracking import MlflowClient

    paths = sweep_paths(workdir, name)
    state = SweepState.load(paths)
    spec = state.spec()
    expected = len(spec.trials()) if spec.grid else spec.search["num_samples"] + (
        spec.search["confirm"]["top_k"] * len(spec.search["confirm"]["seeds"]))
    client = MlflowClient(state.tracking_uri)
    exp = client.get_experiment_by_name(spec.name)
    runs = search_all(client, [exp.experiment_id], "tags.`ssat.kind` = 'trial'") if exp else []
    by: dict[str, int] = {}
    for r in runs:
        s = r.data.tags.get("ssat.status", r.info.status).split(":")[0]
        by[s] = by.get(s, 0) + 1
    lines = [f"sweep {spec.name}: {state.status}, phases {state.phases}", *_driver_lines(paths, state),
             f"trials expected {expected}; runs by status: {json.dumps(by)}"]
    return "\n".join(lines + trial_lines(runs, spec))


STAGE_ORDER = ("search", "confirm", "grid", "demo")


def trial_lines(runs: list, spec: Spec) -> list[str]:
    """The trial runs as a table: per stage, best first by the spec's (first) metric, the best marked `*`; each by
    its one name (the MLflow run name, as the console printed it) and its status."""
    metric, mode = spec.metric[0], spec.mode[0]

    def value(r) -> float | None:
        v = r.data.metrics.get(metric)
        return None if v is None or v != v else v

    rows = []
    for stage in sorted({r.data.tags.get("ssat.stage", "") for r in runs},
                        key=lambda s: (STAGE_ORDER.index(s) if s in STAGE_ORDER else len(STAGE_ORDER), s)):
        group = [r for r in runs if r.data.tags.get("ssat.stage", "") == stage]
        # a trial stopped early (ASHA) ran fewer epochs: its value does not compare, it is listed after the others
        short = lambda r: r.data.tags.get("ssat.status", "").startswith("STOPPED_EARLY")  # noqa: E731
        group.sort(key=lambda r: (short(r), value(r) is None, -(value(r) or 0) if mode == "max" else (value(r) or 0),
                                  r.info.run_name or ""))
        for i, r in enumerate(group):
            mark = "*" if i == 0 and value(r) is not None and not short(r) else " "
            status = r.data.tags.get("ssat.status", r.info.status)
            rows.append([stage, f"{mark} {r.info.run_name}", status if len(status) <= 40 else status[:39] + "…",
                         "-" if value(r) is None else f"{value(r):.2f}"])
    if not rows:
        return []
    header = ["stage", "  trial", "status", metric]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(3)]
    fmt = lambda row: "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[3].rjust(len(metric))  # noqa: E731
    return [fmt(header), *map(fmt, rows), f"  (* the best of its stage by {metric}, {mode})"]


def stop_sweep(name: str, *, workdir: str | Path = ".") -> int:
    """Ctrl+C for a driver running elsewhere: SIGINT to the process driver.lock names (it stops in the stage it is
    in), only when it is that process: same host and boot, same start time (never a pid reused since)."""
    paths = sweep_paths(workdir, name)
    state = SweepState.load(paths)
    lock, verdict = inspect(paths.sweep_dir)
    here, after = Host.here(), f"resume it with `{resume_command(paths)}`"
    if lock is None:
        print(f"sweep {name}: no driver holds it (no driver.lock in {paths.sweep_dir}); nothing signalled"
              + ("; it is finished" if state.status == "done" else f"; {after}"))
        return 1
    if lock.host != here.name or not lock.boot_id or lock.boot_id != here.boot_id:
        print(f"sweep {name}: its driver, pid {lock.pid}, is on host {lock.host}, not this one ({here.name}): nothing "
              f"signalled; run `python -m sweeps stop {name}` there"
              + ("" if verdict.live else f" (it may be gone: {verdict.reason})"))
        return 1
    if not verdict.live:
        print(f"sweep {name}: driver pid {lock.pid} is not running ({verdict.reason}); nothing signalled; {after}")
        return 1
    if lock.start_ticks is None:
        print(f"sweep {name}: driver.lock gives no start time for pid {lock.pid}, so it cannot be told from a reused "
              f"pid: nothing signalled; interrupt the driver where it runs (Ctrl+C)")
        return 1
    if not signal_holder(lock, signal.SIGINT):
        print(f"sweep {name}: driver pid {lock.pid} ended just now; nothing signalled; {after}")
        return 1
    print(f"sent SIGINT to the driver of {name} (pid {lock.pid}, `{lock.command}`): it stops in the stage it is in; "
          f"{after}")
    return 0


def sync_sweep(name: str, *, workdir: str | Path = ".", timeout: float = 30.0, command: str | None = None) -> int:
    """Send the tracking operations that drivers of this sweep left unsent (spool and dead drivers' journals).
    Refused while a driver runs the sweep (it sends its own, and its journal is not a dead driver's)."""
    paths = sweep_paths(workdir, name)
    state = SweepState.load(paths)
    with hold(paths.sweep_dir, command or f"python -m sweeps sync {name}", name=name, workdir=paths.workdir):
        t = paths.tracker(state.tracking_uri)
        n = len(t.queue)
        ok = t.flush(timeout=timeout)
    print(f"sync {name}: {n} spooled operation(s); {'all sent' if ok else 'store still unreachable, kept'}")
    return 0 if ok else 1

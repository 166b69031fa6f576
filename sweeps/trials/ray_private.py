"""Ray's private APIs, every use of them in one place (Ray 2.60; the unit tests pin each): the patches that keep a
local Ray on 127.0.0.1 and out of the driver's signals, the printer Ray's driver prints raylet messages with, the
trial's storage and checkpoint results inside Tune, and the surgery on Tune's list of kept checkpoints."""
from __future__ import annotations

import contextlib
import signal
import subprocess


@contextlib.contextmanager
def keep_sigterm_handler():
    """ray.init installs, first thing, a SIGTERM handler that exits at once (SystemExit 15): a SIGTERM during Ray's
    start then left the sweep's run RUNNING, with no message. Inside, Ray's installer does nothing, so the driver's
    own handler (sweeps.driver.interrupt.Interrupt) stops the sweep as it does in any stage."""
    from ray._private import utils

    install, sigterm = utils.set_sigterm_handler, signal.getsignal(signal.SIGTERM)
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = install
        signal.signal(signal.SIGTERM, sigterm)


class _OwnSession(subprocess.Popen):
    """What Ray starts its GCS, raylet, agents and reaper with (ray._private.services.ConsolePopen on Linux), in a
    session of its own."""

    def __init__(self, *args, **kwargs):
        kwargs["start_new_session"] = True
        super().__init__(*args, **kwargs)


@contextlib.contextmanager
def own_sessions():
    """Inside: the processes a local Ray starts are leaders of their own session and process group. In the
    driver's group a signal to the whole group (a closed terminal's SIGHUP, `kill -TERM -PGID`, `timeout`, systemd,
    a container's stop) also reached Ray's GCS and raylet: they died, the driver waited 60 s to reconnect and exited
    without ending its runs. Out of the group only the driver gets it, and stops the sweep as for its own SIGTERM.
    They still die with the driver: Ray binds them to it (the kernel's parent-death signal)."""
    from ray._private import services

    popen = services.ConsolePopen
    services.ConsolePopen = _OwnSession
    try:
        yield
    finally:
        services.ConsolePopen = popen


@contextlib.contextmanager
def loopback_node():
    """Inside: a local Ray started with the node address 127.0.0.1 keeps it. Ray 2.60's init swaps that address for
    the machine's network one (`services.resolve_ip_for_localhost`), and then its GCS, raylet, workers and agents
    listen on every interface; with 127.0.0.1 they all bind loopback (its servers test for that address)."""
    from ray._private import services

    resolve = services.resolve_ip_for_localhost
    services.resolve_ip_for_localhost = lambda host: host
    try:
        yield
    finally:
        services.resolve_ip_for_localhost = resolve


def session_dir() -> str | None:
    """The running local Ray's session folder (for the driver lock), or None."""
    with contextlib.suppress(Exception):
        import ray._private.worker as ray_worker

        return ray_worker._global_node.get_session_dir_path()
    return None


def driver_printer():
    """What Ray's driver prints the raylet's and autoscaler's published lines with (listen_error_messages)."""
    import ray._private.worker as ray_worker

    return ray_worker.print_to_stdstream


def set_driver_printer(printer) -> None:
    import ray._private.worker as ray_worker

    ray_worker.print_to_stdstream = printer


def trial_storage():
    """The running trial's Tune storage context (inside a function trainable)."""
    from ray.train._internal.session import get_session

    return get_session().storage


def training_result(checkpoint, metrics: dict):
    """Tune's record of a checkpoint with its metrics, as Trainable.restore and load_checkpoint take it."""
    from ray.train._internal.checkpoint_manager import _TrainingResult

    return _TrainingResult(checkpoint=checkpoint, metrics=metrics)


def forget_gone_checkpoints(trial) -> int:
    """Take the checkpoints of `trial` whose folders are gone from Tune's list of those it deletes as newer ones
    come (CheckpointConfig.num_to_keep); returns how many. Tune fails on deleting a folder that is gone, half-way
    through registering the new checkpoint (the trial's checkpoint index then stops advancing, and a restore
    would write over a kept checkpoint). The latest one stays named: `sweeps.trials.trainable.SweepTrainable.restore`
    resumes from what exists instead. Called as Tune starts the trial, before it restores it."""
    from ray.train._internal.storage import _exists_at_fs_path

    manager = getattr(getattr(trial, "run_metadata", None), "checkpoint_manager", None)
    kept = getattr(manager, "_checkpoint_results", None)  # Ray 2.60's _CheckpointManager (tests/unit pin it)
    if not kept:
        return 0
    here = [r for r in kept if r.checkpoint is None or _exists_at_fs_path(r.checkpoint.filesystem, r.checkpoint.path)]
    if len(here) == len(kept):
        return 0
    manager._checkpoint_results = here
    trial.invalidate_json_state()
    trial.run_metadata.invalidate_cache()
    return len(kept) - len(here)

"""A sweep's disk: a sweep is refused when its work folder is too full to start, and stopped (as Ctrl+C stops it)
before that folder fills, with room kept for the stop itself.

The work folder holds Tune's storage (every trial's checkpoints and Tune's experiment state), the MLflow SQLite store
and the sweep's own files. A write that meets a full disk tears the file it writes, and Ray retries its syncs every
second, each failure a traceback. So the driver keeps a reserve there:
- `run` and `resume` are refused, writing nothing, with less than START_FREE free;
- while a Tune stage runs, a ballast file of FLOOR bytes (<sweep dir>/disk_reserve) holds room for the stop, and a
  watcher thread looks at the free space every second: once it is under `reserve` (FLOOR plus one checkpoint of
  every trial that may be writing one), it prints one line, deletes the ballast and stops the sweep as Ctrl+C does.
  Whatever filled the disk, even to the last byte, the stop then has FLOOR bytes to write Tune's state, the runs'
  KILLED ends and the sweep's state in.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from ..errors import SweepError
from ..sweep_log import LOG

FLOOR = 16 * 2**20        # what a stop writes (Tune's state, MLflow's ends, sweep.json) fits many times in it
START_FREE = 2 * FLOOR    # the ballast, and as much again to run in
SIZE_EVERY_S = 30.0       # how often the largest checkpoint of the stage is measured again
CAUSE = "disk full"       # how the sweep's messages name the stop (sweep X is INCOMPLETE: ... interrupted (disk full))


def mb(n: float) -> str:
    return f"{n / 2**20:.1f} MB"


def reserve(largest_checkpoint: int, concurrent: int) -> int:
    """The free space under which a stage stops: FLOOR, and one more checkpoint of each trial that may write one."""
    return FLOOR + concurrent * largest_checkpoint


def full_line(folder: Path, free: int, total: int, need: int) -> str:
    """The one console line of a sweep stopped for its disk."""
    return (f"[sweep] disk full: {folder} has {mb(free)} free of {mb(total)}, less than the {mb(need)} this sweep "
            "keeps free to stop cleanly; stopping it as Ctrl+C does (details in its sweep.log). Free space there, "
            "then resume it")


def check_free(folder: Path, free: int | None = None) -> None:
    """Before a sweep starts (run, resume): refused, naming the folder and its free space, when too full."""
    free = shutil.disk_usage(_existing(folder)).free if free is None else free
    if free < START_FREE:
        raise SweepError(f"--workdir {folder}: {mb(free)} free; a sweep needs at least {mb(START_FREE)} free there "
                         "to start (checkpoints, the tracking store, and room to stop cleanly if the disk fills). "
                         "Free space there, or give another --workdir")


def _existing(folder: Path) -> Path:
    """The folder, or the nearest of its parents that exists (where it would be made)."""
    return next(p for p in (folder, *folder.parents) if p.exists())


def checkpoint_bytes(stage_dir: Path) -> int:
    """The largest checkpoint folder of the stage (0 before the first): what one report of a trial writes."""
    sizes = [sum(f.stat().st_size for f in ckpt.iterdir() if f.is_file())
             for ckpt in stage_dir.glob("*/checkpoint_*") if ckpt.is_dir()]
    return max(sizes, default=0)


def make_ballast(path: Path, size: int = FLOOR) -> bool:
    """Hold `size` bytes of the disk in `path` (really allocated, not a sparse file); False when there is no room."""
    try:
        with open(path, "wb") as f:
            try:
                os.posix_fallocate(f.fileno(), 0, size)
            except OSError:  # a file system without fallocate (some NFS): write the bytes
                block = bytes(2**20)
                for _ in range(size // len(block)):
                    f.write(block)
            f.flush()
            os.fsync(f.fileno())
        return True
    except OSError:
        path.unlink(missing_ok=True)
        return False


def drop_torn_checkpoints(stage_dir: Path) -> list[Path]:
    """After a stop for a full disk: each trial's checkpoint folders newer than its newest intact one (a file
    missing or failing its checksum) are removed. They are writes the disk cut short, which Tune never registered
    (it registers a checkpoint once all of it is in storage), so nothing names them; gone, no resume can meet them."""
    from ssat.storage import CorruptFileError, verify_file

    from ..trials.trainable import VERIFIED_FILES, checkpoint_index

    def intact(folder: Path) -> bool:
        try:
            return all(verify_file(folder / f) for f in VERIFIED_FILES)
        except (OSError, CorruptFileError):
            return False

    dropped = []
    for trial in (d for d in stage_dir.iterdir() if d.is_dir()):
        folders = [c for c in trial.glob("checkpoint_*") if checkpoint_index(c.name) is not None]
        for folder in sorted(folders, key=lambda c: checkpoint_index(c.name), reverse=True):
            if intact(folder):
                break
            shutil.rmtree(folder, ignore_errors=True)
            dropped.append(folder)
    return dropped


class DiskFull(Exception):
    """The disk filled outside a Tune stage (the teacher stage): the sweep stops as Ctrl+C stops it."""


@contextlib.contextmanager
def disk_guard(folder: Path, ballast: Path, log: Callable[[str], None]):
    """The reserve of a stage that is not Tune's (the teachers): FLOOR bytes held while it runs. When it fails with
    less than FLOOR free (a full disk fails writes as OSError, torch's RuntimeError, SQLite's OperationalError...),
    the ballast is given back, one line says so, and DiskFull stops the sweep, with room to record the stop."""
    make_ballast(ballast)
    try:
        yield
    except Exception as exc:
        usage = shutil.disk_usage(_existing(folder))
        if usage.free >= FLOOR:
            raise
        ballast.unlink(missing_ok=True)
        log(full_line(folder, usage.free, usage.total, FLOOR))
        LOG.write(f"[disk] {folder}: {usage.free:,} of {usage.total:,} bytes free; the stage failed with "
                  f"{type(exc).__name__}: {exc}; {ballast} ({FLOOR:,} bytes) given back for the stop")
        raise DiskFull(str(exc)) from None
    finally:
        ballast.unlink(missing_ok=True)


class DiskWatch:
    """The watcher of one Tune stage (see the module's doc). `stop(cause)` stops the sweep as Ctrl+C does."""

    def __init__(self, folder: Path, stage_dir: Path, ballast: Path, concurrent: int, stop: Callable[[str], object],
                 log: Callable[[str], None], interval: float = 1.0):
        self.folder, self.stage_dir, self.ballast, self.concurrent = folder, stage_dir, ballast, concurrent
        self.stop, self.log, self.interval = stop, log, interval
        self.largest, self._sized_at = 0, float("-inf")
        self.tripped = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sweep-disk-watch", daemon=True)

    def need(self) -> int:
        if not self.largest or time.monotonic() - self._sized_at >= SIZE_EVERY_S:  # cheap before the first
            with contextlib.suppress(OSError):  # a folder Tune removed while it was read: the last size stays
                self.largest = max(self.largest, checkpoint_bytes(self.stage_dir))
            self._sized_at = time.monotonic()
        return reserve(self.largest, self.concurrent)

    def check(self, free: int, total: int) -> bool:
        """True (once) when the stage must stop: the line is printed, the ballast given back, the stop asked."""
        need = self.need()
        if self.tripped or free >= need:
            return False
        self.tripped = True
        self.ballast.unlink(missing_ok=True)
        self.log(full_line(self.folder, free, total, need))
        LOG.write(f"[disk] {self.folder}: {free:,} of {total:,} bytes free, under the reserve of {need:,} = "
                  f"{FLOOR:,} + {self.concurrent} trial(s) x {self.largest:,} (the stage's largest checkpoint); "
                  f"{self.ballast} ({FLOOR:,} bytes) given back for the stop")
        self.stop(CAUSE)
        return True

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            try:
                usage = shutil.disk_usage(self.folder)
            except OSError:
                continue
            if self.check(usage.free, usage.total):
                return

    def __enter__(self) -> "DiskWatch":
        if not make_ballast(self.ballast):
            self.log(f"[sweep] no room for the {mb(FLOOR)} reserve in {self.folder}")  # the first check stops it
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        self.ballast.unlink(missing_ok=True)

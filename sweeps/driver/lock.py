"""One driver per sweep: `<sweep dir>/driver.lock`, held by whichever command drives the sweep (run, resume, sync).

The lock (JSON, written atomically) names its driver: pid, host, the machine's boot id, the process's start time
(field 22 of /proc/<pid>/stat, so a reused pid is told apart), the command, and a heartbeat renewed every
HEARTBEAT_S by a daemon thread. Another driver is refused (DriverBusy: the CLI's exit code 2); a lock whose driver
is gone is taken over, in one logged line. Who is gone (`judge`, a pure function):
  - on this machine (same host name and boot id) the process table decides: no such pid, or the pid now held by a
    process that started at another time, is a dead driver; a live one keeps the lock whatever its heartbeat says;
  - anywhere else (another host, or this host before a reboot, or a system without /proc) a heartbeat older than
    STALE_AFTER_S is a dead driver.

    with hold(sweep_dir, "python -m sweeps resume s", name="s", workdir=w, log=print) as lock:
        lock.update(ray_session="/tmp/ray/session_...")    # fields `status` reads later
    info, verdict = inspect(sweep_dir)                     # status, stop: who holds it, and is it alive
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import signal
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import SweepError

LOCK_FILE = "driver.lock"
HEARTBEAT_S = 10.0
STALE_AFTER_S = 60.0
RELEASE_WAIT_S = 5.0  # how long release waits for a heartbeat stuck in a write (a stalled file system)


class DriverBusy(SweepError):
    """Another driver holds the sweep; the message names it and says what to do."""


@dataclass(frozen=True)
class LockInfo:
    pid: int
    host: str
    boot_id: str             # /proc/sys/kernel/random/boot_id of the driver's machine ("" if unknown)
    start_ticks: int | None  # the driver's start, clock ticks after boot (/proc/<pid>/stat field 22)
    started: float           # when it took the lock (time.time())
    heartbeat: float         # its last heartbeat (time.time())
    command: str
    token: str               # tells this holder's lock from a later one of the same pid
    ray_session: str | None = None  # the local Ray session it started (status lists what of it outlived a kill)

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), indent=1).encode()


@dataclass(frozen=True)
class Host:
    """This machine as the judgement needs it."""
    name: str
    boot_id: str
    boot_time: float  # time.time() at boot (/proc/stat btime)
    ticks: int        # clock ticks per second

    @classmethod
    def here(cls, proc: Path = Path("/proc")) -> "Host":
        """This machine; without /proc (or a part of it) the boot id is "" and the boot time 0."""
        boot_id, boot_time = "", 0.0
        with contextlib.suppress(OSError, ValueError):
            boot_id = (proc / "sys/kernel/random/boot_id").read_text().strip()
            boot_time = float(next(ln.split()[1] for ln in (proc / "stat").read_text().splitlines()
                                   if ln.startswith("btime ")))
        return cls(socket.gethostname(), boot_id, boot_time, os.sysconf("SC_CLK_TCK"))

    def wall(self, ticks: int | None) -> str:
        return "an unknown time" if ticks is None else time.strftime(
            "%Y-%m-%d %H:%M:%S", time.localtime(self.boot_time + ticks / self.ticks))


@dataclass(frozen=True)
class Verdict:
    live: bool
    reason: str
    age: float  # seconds since the heartbeat


def proc_start_ticks(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks after boot), or None when there is no such live process
    (a zombie counts as gone: it is dead, only not reaped yet)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    rest = text[text.rindex(")") + 2:].split()  # the name (field 2) may hold spaces and ')'
    return None if rest[0] in ("Z", "X") else int(rest[19])


def signal_holder(lock: LockInfo, sig: int) -> bool:
    """Send `sig` to the lock's driver, a process of this host, only while it is that process (same start time:
    never a pid reused since); False when it has ended."""
    try:
        fd = os.pidfd_open(lock.pid)  # pins the process: checked, then signalled, with no reuse in between
    except (AttributeError, OSError):
        fd = None
    try:
        if proc_start_ticks(lock.pid) != lock.start_ticks:
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(lock.pid, sig)
        return True
    finally:
        if fd is not None:
            os.close(fd)


def judge(lock: LockInfo, now: float, here: Host, start_ticks_of: Callable[[int], int | None]) -> Verdict:
    """Is the lock's driver alive? `start_ticks_of(pid)` is the process table (None: no such process)."""
    age = now - lock.heartbeat
    if lock.host == here.name and lock.boot_id and lock.boot_id == here.boot_id:
        ticks = start_ticks_of(lock.pid)
        if ticks is None:
            return Verdict(False, f"no process {lock.pid} on this host", age)
        if lock.start_ticks is not None and ticks != lock.start_ticks:
            return Verdict(False, f"pid {lock.pid} is now another process (started {here.wall(ticks)}; the "
                                  f"driver started {here.wall(lock.start_ticks)})", age)
        return Verdict(True, f"pid {lock.pid} runs on this host", age)
    if lock.host == here.name and here.boot_id and lock.heartbeat < here.boot_time:
        return Verdict(False, "its last heartbeat is older than this host's last boot", age)
    if age > STALE_AFTER_S:
        return Verdict(False, f"no heartbeat for {age:.0f} s (over {STALE_AFTER_S:.0f} s)", age)
    return Verdict(True, f"last heartbeat {max(age, 0):.0f} s ago", age)


def read_lock(path: Path) -> LockInfo | None:
    """The lock at `path`; None when there is none. A file that does not parse (written by hand, or by a system
    that cannot write it in one step) reads as a lock of an unknown driver whose heartbeat is the file's mtime."""
    try:
        raw, mtime = path.read_bytes(), path.stat().st_mtime
    except FileNotFoundError:
        return None
    try:
        d = json.loads(raw)
        return LockInfo(**{f.name: d[f.name] for f in dataclasses.fields(LockInfo) if f.name in d})
    except (ValueError, TypeError, AttributeError):
        return LockInfo(0, "?", "", None, mtime, mtime, "(unreadable driver.lock)", "unreadable")


def inspect(sweep_dir: Path, now: float | None = None) -> tuple[LockInfo | None, Verdict | None]:
    lock = read_lock(Path(sweep_dir) / LOCK_FILE)
    if lock is None:
        return None, None
    return lock, judge(lock, time.time() if now is None else now, Host.here(), proc_start_ticks)


def busy_message(name: str, lock: LockInfo, verdict: Verdict, workdir: Path) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lock.started))
    w = f"{name} --workdir {workdir}"
    return (f"sweep {name} already has a driver: pid {lock.pid} on host {lock.host} (`{lock.command}`, since "
            f"{when}), last heartbeat {max(verdict.age, 0):.0f} s ago. One driver per sweep: wait for it to finish, "
            f"follow it with `python -m sweeps status {w}`, or interrupt it with `python -m sweeps stop {w}` "
            "(then resume it)")


def _tmp(path: Path, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return Path(tmp)


def _create(path: Path, info: LockInfo) -> bool:
    """Write the lock only if there is none, in one step (a hard link of a complete file); False if one exists."""
    tmp = _tmp(path, info.to_json())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as exc:  # a file system without hard links: exclusive create, then write
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(info.to_json())
        return True
    finally:
        tmp.unlink()  # the complete file stays only under the lock's name


def _take_over(path: Path, stale: LockInfo, mine: LockInfo) -> bool:
    """Replace the stale lock by `mine` if it is still the one judged. Takers wait for one another on a guard
    file (flock), and the lock file is replaced in one step, never removed: there is no moment without a lock in
    which a new driver's create could slip in, so of drivers starting together exactly one holds it."""
    with open(path.with_name(f".{path.name}.guard"), "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # released when the file closes
        current = read_lock(path)
        if current is None or current.token != stale.token:  # another taker was quicker, or its owner left
            return False
        os.replace(_tmp(path, mine.to_json()), path)
        return True


class DriverLock:
    """A held lock: renewed by a daemon thread until `release`; `on_lost` runs once if another driver took it."""

    def __init__(self, path: Path, info: LockInfo, log: Callable[[str], None],
                 on_lost: Callable[[LockInfo | None], None] | None = None, interval: float = HEARTBEAT_S):
        self.path, self.info, self.log, self.on_lost = path, info, log, on_lost
        self._stop, self._mutex, self._failing = threading.Event(), threading.Lock(), False
        self._thread = threading.Thread(target=self._beat, args=(interval,), name="driver-lock-heartbeat",
                                        daemon=True)
        self._thread.start()

    def update(self, **fields) -> None:
        with self._mutex:
            self.info = dataclasses.replace(self.info, **fields)
        self.renew()

    def renew(self) -> bool:
        """Write a new heartbeat; False (and `on_lost`) when another driver holds the lock now."""
        with self._mutex:
            if self._stop.is_set():
                return True
            self.info = dataclasses.replace(self.info, heartbeat=time.time())
            now = read_lock(self.path)
            if now is None:  # removed by hand: ours again, unless another driver took it meanwhile
                if _create(self.path, self.info):
                    return True
                now = read_lock(self.path)
            if now is not None and now.token != self.info.token:
                self._stop.set()
                self.log(f"[driver] driver.lock of this sweep is now held by pid {now.pid} on host {now.host} "
                         f"(`{now.command}`): this driver no longer owns the sweep")
                if self.on_lost:
                    self.on_lost(now)
                return False
            tmp = _tmp(self.path, self.info.to_json())
            os.replace(tmp, self.path)
            return True

    def _beat(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.renew()
                self._failing = False
            except Exception as exc:  # a file system hiccup: say it once, keep trying
                if not self._failing:
                    self.log(f"[driver] could not renew {self.path} ({type(exc).__name__}: {exc}); retrying")
                self._failing = True

    def release(self) -> None:
        with self._mutex:
            self._stop.set()
        self._thread.join(timeout=RELEASE_WAIT_S)
        with self._mutex, contextlib.suppress(OSError):
            now = read_lock(self.path)
            if now is not None and now.token == self.info.token:
                self.path.unlink()


def acquire(sweep_dir: Path, command: str, *, name: str, workdir: Path, log: Callable[[str], None],
            on_lost: Callable[[LockInfo | None], None] | None = None, interval: float = HEARTBEAT_S) -> DriverLock:
    """Take the sweep's lock (taking over a dead driver's, in one logged line), or raise DriverBusy."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path, here, now = sweep_dir / LOCK_FILE, Host.here(), time.time()
    pid = os.getpid()
    mine = LockInfo(pid, here.name, here.boot_id, proc_start_ticks(pid), now, now, command, uuid.uuid4().hex)
    for _ in range(10):
        if _create(path, mine):
            return DriverLock(path, mine, log, on_lost, interval)
        other = read_lock(path)
        if other is None:
            continue
        verdict = judge(other, time.time(), here, proc_start_ticks)
        if verdict.live:
            raise DriverBusy(busy_message(name, other, verdict, workdir))
        if _take_over(path, other, mine):
            log(f"[driver] took over driver.lock from pid {other.pid} on host {other.host} (`{other.command}`): "
                f"{verdict.reason}")
            return DriverLock(path, mine, log, on_lost, interval)
    raise SweepError(f"could not take {path}: other drivers kept taking it; try again")


@contextlib.contextmanager
def hold(sweep_dir: Path, command: str, *, name: str, workdir: Path, log: Callable[[str], None] = print,
         on_lost: Callable[[LockInfo | None], None] | None = None):
    """The sweep's lock for the duration of the block; released on any exit (Ctrl+C and exceptions included)."""
    lock = acquire(sweep_dir, command, name=name, workdir=workdir, log=log, on_lost=on_lost)
    try:
        yield lock
    finally:
        lock.release()


def leftover_ray_processes(session_dir: str | None) -> list[tuple[int, str]]:
    """Processes of this host holding files of a local Ray session open (pid, name): what a killed driver's Ray
    left running (Ray's DashboardAgent and RuntimeEnvAgent outlive a SIGKILLed driver for a while)."""
    if not session_dir:
        return []
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid():
            continue
        try:
            if any(os.readlink(fd).startswith(session_dir + "/") for fd in (proc / "fd").iterdir()):
                name = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
                found.append((int(proc.name), Path(name).name if name.startswith("/") else name))
        except OSError:
            continue
    return sorted(found)

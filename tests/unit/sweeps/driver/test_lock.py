"""One driver per sweep (sweeps/driver/lock.py): the judgement of a lock from (lock, now, this host, the process
table), then the lock file itself with real files and real processes: a `sleep` subprocess as a live driver, a
dead pid, a live pid with another start time (a reused pid), an old heartbeat of another host; taking over, the
heartbeat, release, and what `status`, `stop` and `sync` make of a lock."""
from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from sweeps.driver import lock as DL
from sweeps.driver.commands import _driver_lines, stop_sweep, sync_sweep
from sweeps.driver.sweep import RunArgs, SweepState
from sweeps.driver.lock import DriverBusy, Host, LockInfo, Verdict, judge, proc_start_ticks
from sweeps.errors import SweepError
from sweeps.paths import sweep_paths

HERE = Host.here()
NOW = 1_800_000_000.0


@pytest.fixture
def sleeper():
    """A live process that is not this one: a driver stand-in."""
    # SIGINT's default restored: a shell's background job (`make test &`) starts its children with it ignored
    proc = subprocess.Popen(["sleep", "300"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def dead_pid() -> int:
    """A pid whose process has ended and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def lock_of(pid: int, *, host: str = HERE.name, boot_id: str = HERE.boot_id, start: int | None = None,
            heartbeat: float = NOW, command: str = "python -m sweeps run s.yaml") -> LockInfo:
    start = proc_start_ticks(pid) if start is None else start
    return LockInfo(pid, host, boot_id, start, heartbeat - 30, heartbeat, command, f"token-{pid}-{start}")


def table(entries: dict[int, int]):
    return entries.get


# ---- the judgement (pure) ------------------------------------------------------------------------------------
def test_on_this_host_the_process_table_decides():
    here = Host("vm", "boot-1", NOW - 3600, 100)
    lock = LockInfo(42, "vm", "boot-1", 5000, NOW - 100, NOW - 90, "cmd", "t")
    assert judge(lock, NOW, here, table({42: 5000})).live  # alive, however old its heartbeat
    gone = judge(lock, NOW, here, table({}))
    assert not gone.live and gone.reason == "no process 42 on this host"
    reused = judge(lock, NOW, here, table({42: 7000}))
    assert not reused.live and reused.reason.startswith("pid 42 is now another process (started ")
    assert judge(dataclasses.replace(lock, start_ticks=None), NOW, here, table({42: 7000})).live  # nothing to compare


def test_elsewhere_the_heartbeat_decides():
    here = Host("vm", "boot-1", NOW - 3600, 100)
    other = LockInfo(42, "node-2", "boot-9", 5000, NOW - 100, NOW - 59, "cmd", "t")
    assert judge(other, NOW, here, table({})).live  # the process table of this host says nothing about node-2
    old = judge(dataclasses.replace(other, heartbeat=NOW - 61), NOW, here, table({42: 5000}))
    assert not old.live and old.reason == "no heartbeat for 61 s (over 60 s)"
    # this host before its last boot: gone, whatever the heartbeat's age
    before = dataclasses.replace(other, host="vm", heartbeat=NOW - 3700)
    assert not judge(before, NOW - 3690, here, table({42: 5000})).live
    # a system without /proc (no boot id): the heartbeat decides
    assert judge(dataclasses.replace(other, host="vm", boot_id=""), NOW, Host("vm", "", 0.0, 100), table({})).live


def test_process_start_ticks_tell_a_live_process_from_a_dead_or_zombie_one(sleeper):
    assert proc_start_ticks(os.getpid()) is not None
    assert proc_start_ticks(sleeper.pid) is not None and proc_start_ticks(sleeper.pid) != proc_start_ticks(1)
    assert proc_start_ticks(dead_pid()) is None
    zombie = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zombie.pid}/stat").read_text().split(") ")[1][0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc_start_ticks(zombie.pid) is None  # ended, not reaped yet: dead all the same
    zombie.wait()


# ---- the lock file: real files, real processes ---------------------------------------------------------------
def write_lock(sweep_dir: Path, lock: LockInfo) -> Path:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / DL.LOCK_FILE
    path.write_bytes(lock.to_json())
    return path


def take(sweep_dir: Path, log=None) -> DL.DriverLock:
    return DL.acquire(sweep_dir, "python -m sweeps resume s", name="s", workdir=sweep_dir.parent,
                      log=(log if log is not None else (lambda line: None)))


def test_a_live_driver_refuses_another_naming_itself_and_what_to_do(tmp_path, sleeper):
    path = write_lock(tmp_path / "s", lock_of(sleeper.pid, heartbeat=time.time() - 4))
    before = path.read_bytes()
    with pytest.raises(DriverBusy) as info:
        take(tmp_path / "s")
    msg = str(info.value)
    assert msg.startswith(f"sweep s already has a driver: pid {sleeper.pid} on host {HERE.name} "
                          "(`python -m sweeps run s.yaml`, since ")
    assert "last heartbeat 4 s ago" in msg
    assert f"`python -m sweeps status s --workdir {tmp_path}`" in msg
    assert f"`python -m sweeps stop s --workdir {tmp_path}`" in msg and "wait for it to finish" in msg
    assert path.read_bytes() == before  # untouched


@pytest.mark.parametrize("case", ["dead pid", "reused pid", "old heartbeat of another host", "unreadable"])
def test_a_dead_drivers_lock_is_taken_over_in_one_line(tmp_path, sleeper, case):
    lock = {"dead pid": lambda: lock_of(dead_pid(), start=12345),
            "reused pid": lambda: lock_of(sleeper.pid, start=proc_start_ticks(sleeper.pid) - 1),
            "old heartbeat of another host": lambda: lock_of(4242, host="node-2", boot_id="b", start=1,
                                                             heartbeat=time.time() - 75),
            "unreadable": lambda: None}[case]()
    if lock is None:
        path = tmp_path / "s" / DL.LOCK_FILE
        path.parent.mkdir()
        path.write_text("{torn")
        os.utime(path, (time.time() - 120, time.time() - 120))
    else:
        write_lock(tmp_path / "s", lock)
    lines = []
    held = take(tmp_path / "s", lines.append)
    try:
        assert len(lines) == 1 and lines[0].startswith("[driver] took over driver.lock from pid "), lines
        reason = {"dead pid": "no process", "reused pid": "is now another process", "unreadable": "no heartbeat for 12",
                  "old heartbeat of another host": "no heartbeat for 75 s (over 60 s)"}[case]
        assert reason in lines[0], lines
        mine = json.loads((tmp_path / "s" / DL.LOCK_FILE).read_text())
        assert (mine["pid"], mine["host"], mine["start_ticks"]) == (os.getpid(), HERE.name,
                                                                    proc_start_ticks(os.getpid()))
        assert mine["command"] == "python -m sweeps resume s"
        assert sleeper.poll() is None  # a reused pid is never touched
    finally:
        held.release()
    assert not (tmp_path / "s" / DL.LOCK_FILE).exists()


def test_a_fresh_unreadable_lock_counts_as_held(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / DL.LOCK_FILE).write_text("")  # being written by a file system without hard links
    with pytest.raises(DriverBusy, match="pid 0 on host \\?"):
        take(tmp_path / "s")


def test_of_drivers_starting_together_exactly_one_gets_the_lock(tmp_path):
    write_lock(tmp_path / "s", lock_of(dead_pid(), start=1))  # and they all find a dead driver's lock
    got, refused, start = [], [], threading.Barrier(6)

    def driver():
        start.wait()
        try:
            got.append(take(tmp_path / "s"))
        except DriverBusy:
            refused.append(1)

    threads = [threading.Thread(target=driver) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(got), len(refused)) == (1, 5)
    assert json.loads((tmp_path / "s" / DL.LOCK_FILE).read_text())["token"] == got[0].info.token
    got[0].release()
    # no temporary file left (the takers' guard file stays: removing it would race with a waiting taker)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [".driver.lock.guard"]


def test_the_heartbeat_is_renewed_and_the_lock_released_on_any_exit(tmp_path):
    path = tmp_path / "s" / DL.LOCK_FILE
    held = DL.acquire(tmp_path / "s", "cmd", name="s", workdir=tmp_path, log=print, interval=0.05)
    first = json.loads(path.read_text())["heartbeat"]
    deadline = time.monotonic() + 10
    while json.loads(path.read_text())["heartbeat"] == first and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(path.read_text())["heartbeat"] > first
    held.update(ray_session="/tmp/ray/session_x")
    assert json.loads(path.read_text())["ray_session"] == "/tmp/ray/session_x"
    held.release()
    assert not path.exists()
    for exc in (KeyboardInterrupt, RuntimeError):
        with pytest.raises(exc):
            with DL.hold(tmp_path / "s", "cmd", name="s", workdir=tmp_path, log=print):
                assert path.exists()
                raise exc()
        assert not path.exists()


def test_a_driver_that_lost_its_lock_says_so_and_never_removes_the_new_one(tmp_path, sleeper):
    lines, lost = [], []
    held = DL.DriverLock(tmp_path / DL.LOCK_FILE, lock_of(os.getpid(), heartbeat=time.time()), lines.append,
                         lost.append, interval=3600)  # renewed by hand below
    assert held.renew()
    write_lock(tmp_path, lock_of(sleeper.pid))  # taken over by another driver
    assert held.renew() is False and len(lost) == 1 and lost[0].pid == sleeper.pid
    assert f"now held by pid {sleeper.pid}" in lines[-1]
    held.release()
    assert json.loads((tmp_path / DL.LOCK_FILE).read_text())["pid"] == sleeper.pid


def test_leftover_ray_processes_are_those_holding_the_sessions_files(tmp_path, sleeper):
    session = tmp_path / "session_x"
    (session / "logs").mkdir(parents=True)
    with open(session / "logs" / "dashboard_agent.log", "w") as log:
        agent = subprocess.Popen(["sleep", "300"], stdout=log)
    try:
        assert DL.leftover_ray_processes(str(session)) == [(agent.pid, "sleep")]
        assert DL.leftover_ray_processes(str(tmp_path / "session")) == []  # a prefix of the name is not the folder
        assert DL.leftover_ray_processes(None) == []
    finally:
        agent.kill()
        agent.wait()


# ---- what status, stop and sync make of it ---------------------------------------------------------------------
def sweep(tmp_path: Path, status: str = "running"):
    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True, exist_ok=True)
    state = SweepState(name="s", spec_path="s.yaml", source={"name": "s"}, tracking_uri="sqlite:///nowhere.db",
                       args=RunArgs(), status=status, driver_pid=4242)
    state.save(paths)
    return paths, state


def test_status_says_whether_the_driver_runs_and_what_a_killed_one_left(tmp_path, sleeper):
    paths, state = sweep(tmp_path)
    write_lock(paths.sweep_dir, lock_of(sleeper.pid, heartbeat=time.time() - 3))
    (line,) = _driver_lines(paths, state)
    assert line.startswith(f"driver: pid {sleeper.pid} on host {HERE.name} runs (`python -m sweeps run s.yaml`")
    assert line.endswith("last heartbeat 3 s ago")

    session = tmp_path / "ray" / "session_1"
    (session / "logs").mkdir(parents=True)
    pid = dead_pid()
    write_lock(paths.sweep_dir, dataclasses.replace(lock_of(pid, start=1), ray_session=str(session)))
    with open(session / "logs" / "runtime_env_agent.log", "w") as log:
        agent = subprocess.Popen(["sleep", "300"], stdout=log)
    try:
        dead, left = _driver_lines(paths, state)
    finally:
        agent.kill()
        agent.wait()
    assert dead == (f"driver pid {pid} is not running (no process {pid} on this host, host {HERE.name}); resume "
                    f"with `python -m sweeps resume s --workdir {tmp_path}`")
    assert left.startswith(f"its local Ray left these running: pid {agent.pid} (sleep); they train nothing")
    assert left.endswith(f"`kill {agent.pid}`)")

    (paths.sweep_dir / DL.LOCK_FILE).unlink()
    assert _driver_lines(paths, dataclasses.replace(state, status="incomplete")) == [
        f"no driver; resume with `python -m sweeps resume s --workdir {tmp_path}`"]
    assert _driver_lines(paths, dataclasses.replace(state, status="done")) == []


def test_stop_signals_only_the_process_the_lock_names(tmp_path, sleeper, capsys):
    paths, _ = sweep(tmp_path)
    start = proc_start_ticks(sleeper.pid)
    for lock, says in [(lock_of(sleeper.pid, start=start - 1), "is now another process"),
                       (lock_of(sleeper.pid, host="node-2", boot_id="b"), "is on host node-2, not this one"),
                       (lock_of(dead_pid(), start=1), "is not running (no process ")]:
        write_lock(paths.sweep_dir, lock)
        assert stop_sweep("s", workdir=tmp_path) == 1
        out = capsys.readouterr().out
        assert says in out and "nothing signalled" in out, out
        assert sleeper.poll() is None
    (paths.sweep_dir / DL.LOCK_FILE).unlink()
    assert stop_sweep("s", workdir=tmp_path) == 1
    assert "no driver holds it" in capsys.readouterr().out

    write_lock(paths.sweep_dir, lock_of(sleeper.pid))
    assert stop_sweep("s", workdir=tmp_path) == 0
    assert f"sent SIGINT to the driver of s (pid {sleeper.pid}" in capsys.readouterr().out
    assert sleeper.wait(10) == -signal.SIGINT


def test_sync_is_refused_while_a_driver_lives(tmp_path, sleeper):
    paths, _ = sweep(tmp_path)
    write_lock(paths.sweep_dir, lock_of(sleeper.pid, heartbeat=time.time()))
    with pytest.raises(DriverBusy, match=f"^sweep s already has a driver: pid {sleeper.pid}") as info:
        sync_sweep("s", workdir=tmp_path)
    assert f"`python -m sweeps status s --workdir {tmp_path}`" in str(info.value)
    assert not list(paths.sweep_dir.glob("tracking_spool*"))


def test_status_counts_the_trial_runs_by_status_and_lists_them_best_first_by_name(tmp_path, store):
    """`python -m sweeps status` on a real (sqlite) store: the expected trials from the spec, the runs by status
    (ssat.status before its ":" reason, else MLflow's own), one line per run by its name (the MLflow run name, as
    the console says it), per stage best first by the spec's metric, the best marked."""
    from mlflow.tracking import MlflowClient

    from sweeps.driver.commands import sweep_status

    uri = store
    source = {"name": "s", "preset": "mnist5k-ssat-mbi", "seeds": [0, 1], "resources": {"cpu": 1, "gpu": 0},
              "grid": [{"row": "a"}, {"row": "b"}]}
    paths = sweep_paths(tmp_path, "s")
    paths.sweep_dir.mkdir(parents=True)
    SweepState(name="s", spec_path="s.yaml", source=source, tracking_uri=uri, args=RunArgs(), status="incomplete",
               phases={"grid": "running"}).save(paths)
    assert sweep_status("s", workdir=tmp_path).splitlines()[-1] == "trials expected 4; runs by status: {}"

    c = MlflowClient(uri)
    exp = c.create_experiment("s")
    c.create_run(exp, tags={"ssat.kind": "sweep"})  # the sweep's parent run: not a trial
    for row, seed, status, pgd in [("b", "0", None, 60.0), ("a", "1", "KILLED: interrupted (SIGINT) in epoch 3; "
                                   "resume with: python -m sweeps resume s", None), ("a", "0", "FINISHED", 71.25)]:
        tags = {"ssat.kind": "trial", "ssat.stage": "grid", "ssat.row": row, "ssat.seed": seed}
        run = c.create_run(exp, run_name=f"{row} s{seed}", tags={**tags, **({"ssat.status": status} if status else {})})
        if pgd is not None:
            c.log_metric(run.info.run_id, "val/pgd10", pgd)
    lines = sweep_status("s", workdir=tmp_path).splitlines()
    resume = f"resume with `python -m sweeps resume s --workdir {tmp_path}`"
    assert lines[:2] == ["sweep s: incomplete, phases {'grid': 'running'}", f"no driver; {resume}"]
    head, by = lines[2].split(": ", 1)
    assert head == "trials expected 4; runs by status" and json.loads(by) == {"RUNNING": 1, "KILLED": 1, "FINISHED": 1}
    assert [" ".join(ln.split()) for ln in lines[3:]] == [
        "stage trial status val/pgd10",
        "grid * a s0 FINISHED 71.25",  # the best first, marked
        "grid b s0 RUNNING 60.00",
        "grid a s1 KILLED: interrupted (SIGINT) in epoch 3… -",  # no value last; the status cut at 40 characters
        "(* the best of its stage by val/pgd10, max)"]
    widths = {len(ln) for ln in lines[3:-1]}
    assert len(widths) == 1  # aligned: every row as wide as the header


def test_status_lists_stages_in_their_order_and_ranks_a_minimised_metric_lowest_first(tmp_path, store):
    from mlflow.tracking import MlflowClient

    from sweeps.driver.commands import trial_lines
    from sweeps.spec import parse_spec

    spec = parse_spec({"name": "s", "preset": "mnist5k-ssat-mbi", "metric": "train/loss", "mode": "min",
                       "search": {"space": {"method.beta": {"float": [0.0, 1.0]}}, "confirm": {"top_k": 1,
                                                                                                "seeds": [9]}}})
    c = MlflowClient(store)
    exp = c.create_experiment("s2")
    for stage, name, loss, status in [("confirm", "top1 x s9", 0.5, "FINISHED"), ("search", "x s0", 0.9, "FINISHED"),
                                      ("search", "y s0", 0.2, "STOPPED_EARLY: asha at epoch 2 of 6"),
                                      ("search", "z s0", 0.4, "FINISHED")]:
        run = c.create_run(exp, run_name=name, tags={"ssat.kind": "trial", "ssat.stage": stage, "ssat.status": status})
        c.log_metric(run.info.run_id, "train/loss", loss)
    rows = [" ".join(ln.split()) for ln in trial_lines(c.search_runs([exp]), spec)[1:-1]]
    # search first; z (0.4) best, x after it; y stopped early: its shorter run is listed last, never marked best
    assert rows == ["search * z s0 FINISHED 0.40", "search x s0 FINISHED 0.90",
                    "search y s0 STOPPED_EARLY: asha at epoch 2 of 6 0.20", "confirm * top1 x s9 FINISHED 0.50"]


# ---- every field, message and fallback of the lock ------------------------------------------------------------
def stamp(t: float) -> str:
    """A wall time as the lock's messages write it (computed here through datetime, not time.strftime)."""
    return datetime.fromtimestamp(t).isoformat(sep=" ", timespec="seconds")


def test_the_judgements_verdicts_in_full():
    here = Host("vm", "boot-1", NOW - 3600, 100)
    lock = LockInfo(42, "vm", "boot-1", 5000, NOW - 100, NOW - 90, "cmd", "t")
    assert judge(lock, NOW, here, table({42: 5000})) == Verdict(True, "pid 42 runs on this host", 90.0)
    assert judge(lock, NOW, here, table({})) == Verdict(False, "no process 42 on this host", 90.0)
    assert judge(lock, NOW, here, table({42: 7000})) == Verdict(
        False, f"pid 42 is now another process (started {stamp(NOW - 3600 + 70)}; the driver started "
               f"{stamp(NOW - 3600 + 50)})", 90.0)
    before_boot = dataclasses.replace(lock, boot_id="boot-0", heartbeat=NOW - 3610)
    assert judge(before_boot, NOW - 3600, here, table({})) == Verdict(
        False, "its last heartbeat is older than this host's last boot", 10.0)
    # a heartbeat at the very second of the boot is not older than it: its age decides
    at_boot = dataclasses.replace(before_boot, heartbeat=NOW - 3600)
    assert judge(at_boot, NOW - 3590, here, table({})) == Verdict(True, "last heartbeat 10 s ago", 10.0)
    # another host's heartbeat from before this host's boot says nothing about that host
    other = dataclasses.replace(before_boot, host="node-2")
    assert judge(other, NOW - 3600, here, table({})) == Verdict(True, "last heartbeat 10 s ago", 10.0)
    assert judge(other, other.heartbeat + 60, here, table({})).live  # 60 s is not over STALE_AFTER_S
    assert judge(other, other.heartbeat + 61.5, here, table({})) == Verdict(
        False, "no heartbeat for 62 s (over 60 s)", 61.5)
    assert judge(other, other.heartbeat + 0.4, here, table({})).reason == "last heartbeat 0 s ago"
    assert judge(other, other.heartbeat - 5, here, table({})).reason == "last heartbeat 0 s ago"  # a clock ahead


def test_host_wall_time_and_host_here_with_and_without_proc(tmp_path):
    host = Host("vm", "b", NOW, 100)
    assert host.wall(250) == stamp(NOW + 2.5) and host.wall(None) == "an unknown time"
    real = Host.here()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert abs(time.time() - uptime - real.boot_time) < 2 and real.boot_id and real.ticks == 100
    assert Host.here(tmp_path) == Host(socket.gethostname(), "", 0.0, real.ticks)  # no /proc at all
    (tmp_path / "sys/kernel/random").mkdir(parents=True)
    (tmp_path / "sys/kernel/random/boot_id").write_text("abc\n")
    assert Host.here(tmp_path) == Host(socket.gethostname(), "abc", 0.0, real.ticks)  # no /proc/stat
    (tmp_path / "stat").write_text("cpu 1 2\nbtime x\n")
    assert Host.here(tmp_path).boot_time == 0.0  # a btime that does not parse
    (tmp_path / "stat").write_text("cpu 1 2\nbtime 1700000000\n")
    assert Host.here(tmp_path).boot_time == 1_700_000_000.0


def test_the_lock_file_as_written_and_an_unreadable_one_as_read(tmp_path):
    info = LockInfo(42, "vm", "b", 7, 1.5, 2.5, "cmd", "t")
    assert info.to_json() == (b'{\n "pid": 42,\n "host": "vm",\n "boot_id": "b",\n "start_ticks": 7,\n "started": 1.5,'
                              b'\n "heartbeat": 2.5,\n "command": "cmd",\n "token": "t",\n "ray_session": null\n}')
    path = tmp_path / DL.LOCK_FILE
    path.write_bytes(info.to_json())
    assert DL.read_lock(path) == info
    path.write_text("[1, 2]")
    os.utime(path, (1000.0, 1000.0))
    assert DL.read_lock(path) == LockInfo(0, "?", "", None, 1000.0, 1000.0, "(unreadable driver.lock)", "unreadable")
    assert DL.read_lock(tmp_path / "none") is None


def test_inspect_judges_at_the_time_it_is_given(tmp_path):
    then = 1_000_000_000.0  # 2001
    write_lock(tmp_path, lock_of(4242, host="node-2", boot_id="b", start=1, heartbeat=then))
    lock, verdict = DL.inspect(tmp_path, now=then + 30)
    assert lock.pid == 4242 and verdict == Verdict(True, "last heartbeat 30 s ago", 30.0)
    assert not DL.inspect(tmp_path)[1].live  # judged now: decades without a heartbeat
    assert DL.inspect(tmp_path / "none") == (None, None)


def test_the_busy_message_in_full(tmp_path):
    lock = LockInfo(42, "vm", "b", 7, NOW, NOW + 10, "python -m sweeps run s.yaml", "t")
    for age, said in [(3.6, "4"), (0.3, "0"), (-2.0, "0")]:
        assert DL.busy_message("s", lock, Verdict(True, "", age), tmp_path) == (
            f"sweep s already has a driver: pid 42 on host vm (`python -m sweeps run s.yaml`, since {stamp(NOW)}), "
            f"last heartbeat {said} s ago. One driver per sweep: wait for it to finish, follow it with "
            f"`python -m sweeps status s --workdir {tmp_path}`, or interrupt it with "
            f"`python -m sweeps stop s --workdir {tmp_path}` (then resume it)")


def test_a_temporary_file_is_complete_and_hidden_beside_the_lock(tmp_path):
    tmp = DL._tmp(tmp_path / DL.LOCK_FILE, b"data")
    assert tmp.parent == tmp_path and tmp.name.startswith(".driver.lock.") and tmp.name.endswith(".tmp")
    assert tmp.read_bytes() == b"data"


@pytest.mark.parametrize("no_links", [errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS])
def test_without_hard_links_the_lock_is_created_exclusively(tmp_path, monkeypatch, no_links):
    def link(src, dst):
        raise OSError(no_links, os.strerror(no_links))

    monkeypatch.setattr(DL.os, "link", link)
    path, info = tmp_path / DL.LOCK_FILE, lock_of(os.getpid(), heartbeat=NOW)
    old_umask = os.umask(0o022)
    try:
        assert DL._create(path, info) is True
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == info.to_json() and path.stat().st_mode & 0o777 == 0o644
    assert DL._create(path, dataclasses.replace(info, pid=1)) is False and DL.read_lock(path) == info
    assert [p.name for p in tmp_path.iterdir()] == [DL.LOCK_FILE]  # no temporary file left


def test_another_link_failure_is_raised_and_leaves_nothing(tmp_path, monkeypatch):
    def link(src, dst):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(DL.os, "link", link)
    with pytest.raises(OSError, match="I/O error"):
        DL._create(tmp_path / DL.LOCK_FILE, lock_of(os.getpid(), heartbeat=NOW))
    assert list(tmp_path.iterdir()) == []


def test_a_new_lock_names_this_driver_in_every_field(tmp_path):
    before = time.time()
    held, again = take(tmp_path / "a"), take(tmp_path / "b")
    try:
        mine = DL.read_lock(tmp_path / "a" / DL.LOCK_FILE)
        assert (mine.pid, mine.host, mine.boot_id, mine.start_ticks) == (
            os.getpid(), HERE.name, HERE.boot_id, proc_start_ticks(os.getpid()))
        assert before <= mine.started == mine.heartbeat <= time.time()
        assert re.fullmatch("[0-9a-f]{32}", mine.token) and mine.token != again.info.token
    finally:
        held.release()
        again.release()


@pytest.mark.parametrize("found", ["no lock", "a dead driver's lock"])
def test_the_acquired_lock_heartbeats_at_the_interval_and_reports_its_loss(tmp_path, sleeper, found):
    if found == "a dead driver's lock":
        write_lock(tmp_path / "s", lock_of(dead_pid(), start=1))
    lines, lost = [], []
    held = DL.acquire(tmp_path / "s", "cmd", name="s", workdir=tmp_path, log=lines.append, on_lost=lost.append,
                      interval=0.05)
    try:
        assert held._thread.name == "driver-lock-heartbeat" and held._thread.daemon
        write_lock(tmp_path / "s", lock_of(sleeper.pid))  # another driver takes it
        deadline = time.monotonic() + 5  # well under HEARTBEAT_S: the interval given is the one used
        while not lost and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [x.pid for x in lost] == [sleeper.pid]
        assert lines[-1] == (f"[driver] driver.lock of this sweep is now held by pid {sleeper.pid} on host "
                             f"{HERE.name} (`python -m sweeps run s.yaml`): this driver no longer owns the sweep")
    finally:
        held.release()


def test_after_ten_lost_races_acquire_gives_up(tmp_path, monkeypatch):
    tries = []
    monkeypatch.setattr(DL, "_create", lambda path, info: tries.append(path) or False)
    monkeypatch.setattr(DL, "read_lock", lambda path: None)  # each time removed before it could be read
    with pytest.raises(SweepError) as info:
        take(tmp_path / "s")
    assert str(info.value) == (f"could not take {tmp_path / 's' / DL.LOCK_FILE}: other drivers kept taking it; "
                               "try again")
    assert len(tries) == 10


def test_renewal_failures_are_said_once_until_one_succeeds(tmp_path, monkeypatch):
    lines, fail = [], [True]
    real = DL.DriverLock.renew

    def renew(self):
        if fail[0]:
            raise OSError("disk gone")
        return real(self)

    monkeypatch.setattr(DL.DriverLock, "renew", renew)
    held = DL.DriverLock(tmp_path / DL.LOCK_FILE, lock_of(os.getpid(), heartbeat=time.time()), lines.append,
                         interval=0.02)

    def wait_for(n_lines):
        deadline = time.monotonic() + 5
        while len(lines) < n_lines and time.monotonic() < deadline:
            time.sleep(0.02)

    wait_for(1)
    time.sleep(0.2)  # ten more failed renewals: still one line
    assert lines == [f"[driver] could not renew {tmp_path / DL.LOCK_FILE} (OSError: disk gone); retrying"]
    fail[0] = False
    deadline = time.monotonic() + 5
    while not (tmp_path / DL.LOCK_FILE).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)
    fail[0] = True  # a success in between: the next failure is said again
    wait_for(2)
    held.release()
    assert len(lines) == 2 and lines[1] == lines[0]


def test_renew_keeps_its_lock_and_a_released_lock_is_left_alone(tmp_path, monkeypatch):
    held = DL.DriverLock(tmp_path / DL.LOCK_FILE, lock_of(os.getpid(), heartbeat=time.time()), print,
                         interval=3600)
    assert held.renew() is True and held.renew() is True  # created, then replaced
    first = held.info.heartbeat
    held.release()
    assert held.renew() is True and held.info.heartbeat == first  # stopped: nothing written
    assert not (tmp_path / DL.LOCK_FILE).exists()
    held = DL.DriverLock(tmp_path / DL.LOCK_FILE, lock_of(os.getpid(), heartbeat=time.time()), print,
                         interval=3600)
    held.renew()

    def unreadable(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(DL, "read_lock", unreadable)
    held.release()  # a lock it cannot read is not removed, and release does not fail
    assert (tmp_path / DL.LOCK_FILE).exists()


def test_the_holder_is_signalled_through_its_pidfd_and_by_pid_without_one(sleeper, monkeypatch):
    lock = lock_of(sleeper.pid)

    def no_kill(pid, sig):
        raise AssertionError("signalled by pid although a pidfd pinned the process")

    with monkeypatch.context() as m:
        m.setattr(DL.os, "kill", no_kill)
        assert DL.signal_holder(dataclasses.replace(lock, start_ticks=lock.start_ticks - 1), signal.SIGTERM) is False
        assert sleeper.poll() is None  # a reused pid is never signalled
        assert DL.signal_holder(lock, signal.SIGCONT) is True

    def no_pidfd(pid):
        raise OSError(errno.ENOSYS, "no pidfd")

    monkeypatch.setattr(DL.os, "pidfd_open", no_pidfd)
    assert DL.signal_holder(lock, signal.SIGTERM) is True
    assert sleeper.wait(10) == -signal.SIGTERM
    assert DL.signal_holder(lock, signal.SIGTERM) is False  # ended


def test_process_names_with_a_parenthesis_and_leftovers_named_by_their_command(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline(); "
                              "open('/proc/self/comm', 'w').write('x) Z 1 2 3'); print('ok', flush=True); "
                              "sys.stdin.readline()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        start = proc_start_ticks(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "ok\n"
        assert "x) Z 1 2 3" in Path(f"/proc/{child.pid}/stat").read_text()
        assert proc_start_ticks(child.pid) == start is not None  # a name with ") Z" is still a live process
    finally:
        child.kill()
        child.wait()

    session = tmp_path / "session_x"
    session.mkdir()
    agents = []
    with open(session / "log", "w") as log:
        for argv0 in ["/bin/sleep", "ray::IDLE", "ray/agent", b"ray\xff"]:
            agents.append(subprocess.Popen([argv0, "300"], executable="/bin/sleep", stdout=log))
    try:
        found = dict(DL.leftover_ray_processes(str(session)))
        assert [found[a.pid] for a in agents] == ["sleep", "ray::IDLE", "ray/agent", "ray\ufffd"]
    finally:
        for a in agents:
            a.kill()
            a.wait()


def test_release_does_not_wait_for_a_heartbeat_stuck_in_a_write(tmp_path, monkeypatch):
    """A heartbeat stuck (here in its log line, as on a stalled file system) is left behind after RELEASE_WAIT_S:
    the lock is removed and the driver exits all the same."""
    stuck, unblock = threading.Event(), threading.Event()

    def log(line):
        stuck.set()
        unblock.wait(20)

    def renew(self):
        raise OSError("stalled")

    monkeypatch.setattr(DL, "RELEASE_WAIT_S", 0.2)
    monkeypatch.setattr(DL.DriverLock, "renew", renew)
    path = tmp_path / DL.LOCK_FILE
    path.write_bytes(lock_of(os.getpid(), heartbeat=time.time()).to_json())
    held = DL.DriverLock(path, DL.read_lock(path), log, interval=0.01)
    try:
        assert stuck.wait(10)
        held.release()
        assert held._thread.is_alive() and not path.exists()  # not waited for: it is still stuck
    finally:
        unblock.set()
        held._thread.join(10)

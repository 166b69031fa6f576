"""A sweep's disk: refused when too full to start, stopped before it fills, room kept for the stop."""
import os

import pytest

from sweeps.driver import disk
from sweeps.driver.disk import (FLOOR, START_FREE, DiskWatch, check_free, checkpoint_bytes, full_line, make_ballast,
                                reserve)
from sweeps.errors import SweepError

MB = 2**20


def test_the_reserve_is_the_floor_plus_a_checkpoint_of_each_trial_that_may_write_one():
    assert FLOOR == 16 * MB and START_FREE == 32 * MB
    assert reserve(0, 4) == FLOOR
    assert reserve(3 * MB, 2) == FLOOR + 6 * MB


def test_a_sweep_is_refused_before_it_starts_with_too_little_free(tmp_path):
    with pytest.raises(SweepError) as err:
        check_free(tmp_path / "new" / "work", free=START_FREE - 1)
    assert str(err.value) == (f"--workdir {tmp_path / 'new' / 'work'}: 32.0 MB free; a sweep needs at least 32.0 MB "
                              "free there to start (checkpoints, the tracking store, and room to stop cleanly if the "
                              "disk fills). Free space there, or give another --workdir")
    check_free(tmp_path, free=START_FREE)
    check_free(tmp_path / "new" / "work")  # this machine's disk, measured where the folder would be made


def test_the_largest_checkpoint_of_a_stage(tmp_path):
    assert checkpoint_bytes(tmp_path) == 0
    for trial, sizes in (("t0", (100, 20)), ("t1", (50,))):
        ckpt = tmp_path / trial / "checkpoint_000000"
        ckpt.mkdir(parents=True)
        for i, n in enumerate(sizes):
            (ckpt / f"f{i}").write_bytes(b"x" * n)
    (tmp_path / "t1" / "result.json").write_bytes(b"x" * 1000)  # not a checkpoint
    assert checkpoint_bytes(tmp_path) == 120


def test_the_ballast_really_holds_its_bytes(tmp_path):
    assert make_ballast(tmp_path / "b", 2 * MB)
    st = os.stat(tmp_path / "b")
    assert st.st_size == 2 * MB and st.st_blocks * 512 >= 2 * MB  # allocated, not a sparse file
    assert not make_ballast(tmp_path / "no" / "b") and not (tmp_path / "no").exists()


def test_the_watch_stops_the_sweep_once_under_the_reserve_and_gives_the_ballast_back(tmp_path):
    stops, lines = [], []
    ballast = tmp_path / "disk_reserve"
    ballast.write_bytes(b"x")
    ckpt = tmp_path / "stage" / "t0" / "checkpoint_000000"
    ckpt.mkdir(parents=True)
    (ckpt / "state.pt").write_bytes(b"x" * MB)
    watch = DiskWatch(tmp_path, tmp_path / "stage", ballast, 2, stops.append, lines.append)
    need = FLOOR + 2 * MB
    assert not watch.check(need, 100 * MB) and ballast.exists() and stops == [] == lines
    assert watch.check(need - 1, 100 * MB)
    assert stops == ["disk full"] and not ballast.exists()
    assert lines == [full_line(tmp_path, need - 1, 100 * MB, need)]
    assert lines[0] == (f"[sweep] disk full: {tmp_path} has 18.0 MB free of 100.0 MB, less than the 18.0 MB this "
                        "sweep keeps free to stop cleanly; stopping it as Ctrl+C does (details in its sweep.log). "
                        "Free space there, then resume it")
    assert not watch.check(0, 100 * MB) and len(stops) == 1  # once


def test_the_details_of_a_full_disk_go_to_the_sweeps_log(tmp_path):
    from sweeps.sweep_log import diverted

    watch = DiskWatch(tmp_path, tmp_path, tmp_path / "disk_reserve", 3, print, print)
    with diverted(tmp_path / "sweep.log"):
        assert watch.check(5 * MB, 64 * MB)
    assert (f"[disk] {tmp_path}: 5,242,880 of 67,108,864 bytes free, under the reserve of 16,777,216 = 16,777,216 + "
            f"3 trial(s) x 0 (the stage's largest checkpoint); {tmp_path / 'disk_reserve'} (16,777,216 bytes) given "
            "back for the stop") in (tmp_path / "sweep.log").read_text()


def test_the_checkpoint_size_is_measured_until_known_then_only_now_and_then(tmp_path, monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(disk.time, "monotonic", lambda: clock[0])
    watch = DiskWatch(tmp_path, tmp_path, tmp_path / "b", 1, print, print)
    assert watch.need() == FLOOR
    state = tmp_path / "t" / "checkpoint_000000" / "state.pt"
    state.parent.mkdir(parents=True)
    state.write_bytes(b"x" * 1000)
    assert watch.need() == FLOOR + 1000  # no size known yet: looked at again at once
    state.write_bytes(b"x" * 2000)
    clock[0] += disk.SIZE_EVERY_S - 1
    assert watch.need() == FLOOR + 1000
    clock[0] += 1
    assert watch.need() == FLOOR + 2000
    state.write_bytes(b"x" * 10)
    clock[0] += disk.SIZE_EVERY_S
    assert watch.need() == FLOOR + 2000  # the largest seen stays


def test_a_stage_holds_its_ballast_while_it_runs(tmp_path):
    ballast = tmp_path / "disk_reserve"
    with DiskWatch(tmp_path, tmp_path, ballast, 1, print, print, interval=60) as watch:
        assert ballast.stat().st_size == FLOOR and watch._thread.is_alive()
    assert not ballast.exists() and not watch._thread.is_alive()


def _checkpoint(folder, epoch, torn=None):
    from ssat.storage import save_verified

    folder.mkdir(parents=True)
    for name in ("state.pt", "best.pt", "last.pt"):
        save_verified({"epoch": epoch}, folder / name)
    if torn == "cut":
        data = (folder / "state.pt").read_bytes()
        (folder / "state.pt").write_bytes(data[: len(data) // 2])
    elif torn == "empty":
        (folder / "last.pt").write_bytes(b"")
    elif torn == "missing":
        (folder / "best.pt").unlink()


def test_after_a_full_disk_only_the_checkpoints_it_cut_short_past_the_newest_intact_one_go(tmp_path):
    a, b, c = tmp_path / "trial_a", tmp_path / "trial_b", tmp_path / "trial_c"
    _checkpoint(a / "checkpoint_000000", 1)
    _checkpoint(a / "checkpoint_000001", 2, torn="cut")
    _checkpoint(a / "checkpoint_000010", 3, torn="empty")      # by number, not by name: 10 is after 1
    _checkpoint(b / "checkpoint_000003", 3, torn="missing")    # an older torn one stays: the newest is intact
    _checkpoint(b / "checkpoint_000004", 4)
    _checkpoint(c / "checkpoint_000000", 1, torn="cut")        # none intact: all go (the trial starts over)
    (tmp_path / "experiment_state-x.json").write_text("{}")
    dropped = disk.drop_torn_checkpoints(tmp_path)
    assert sorted(dropped) == sorted([a / "checkpoint_000001", a / "checkpoint_000010", c / "checkpoint_000000"])
    assert sorted(p.name for p in a.iterdir()) == ["checkpoint_000000"]
    assert sorted(p.name for p in b.iterdir()) == ["checkpoint_000003", "checkpoint_000004"]
    assert list(c.iterdir()) == []


def test_the_ballast_is_written_where_fallocate_is_not_supported(tmp_path, monkeypatch):
    def unsupported(fd, offset, length):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(disk.os, "posix_fallocate", unsupported)
    assert make_ballast(tmp_path / "b", 3 * MB)
    st = os.stat(tmp_path / "b")
    assert st.st_size == 3 * MB and st.st_blocks * 512 >= 3 * MB


def test_a_stage_without_room_for_its_ballast_says_so_and_the_watch_stops_it(tmp_path, monkeypatch):
    usage = type("Usage", (), {"free": 1 * MB, "total": 64 * MB})()
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda folder: usage)
    stops, lines = [], []
    with DiskWatch(tmp_path, tmp_path, tmp_path / "no" / "disk_reserve", 1, stops.append, lines.append,
                   interval=0.01) as watch:
        watch._thread.join(timeout=10)  # the watch ends once it has stopped the sweep
    assert stops == ["disk full"] and not watch._thread.is_alive()
    assert lines == [f"[sweep] no room for the 16.0 MB reserve in {tmp_path}", full_line(tmp_path, MB, 64 * MB, FLOOR)]
    quiet = []
    with DiskWatch(tmp_path, tmp_path, tmp_path / "disk_reserve", 1, print, quiet.append, interval=60):
        pass
    assert quiet == []  # a ballast made: nothing said


def test_the_checkpoint_size_is_measured_again_after_30_s_of_a_late_clock(tmp_path, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(disk.time, "monotonic", lambda: clock[0])
    state = tmp_path / "t" / "checkpoint_000000" / "state.pt"
    state.parent.mkdir(parents=True)
    state.write_bytes(b"x" * 1000)
    watch = DiskWatch(tmp_path, tmp_path, tmp_path / "b", 1, print, print)
    assert watch.need() == FLOOR + 1000
    state.write_bytes(b"x" * 2000)
    clock[0] += disk.SIZE_EVERY_S - 0.5
    assert watch.need() == FLOOR + 1000
    clock[0] += 0.5
    assert watch.need() == FLOOR + 2000


def test_the_watch_runs_in_a_daemon_thread_and_outlasts_a_folder_it_cannot_read_yet(tmp_path, monkeypatch):
    calls = []

    def disk_usage(folder):
        calls.append(folder)
        if len(calls) == 1:
            raise FileNotFoundError(folder)  # e.g. a network file system's hiccup: looked at again next time
        return type("Usage", (), {"free": 1 * MB, "total": 64 * MB})()

    monkeypatch.setattr(disk.shutil, "disk_usage", disk_usage)
    stops = []
    with DiskWatch(tmp_path, tmp_path, tmp_path / "disk_reserve", 1, stops.append, lambda line: None,
                   interval=0.01) as watch:
        assert watch._thread.name == "sweep-disk-watch" and watch._thread.daemon  # never keeps the driver alive
        watch._thread.join(timeout=10)
    assert stops == ["disk full"] and calls[:2] == [tmp_path, tmp_path]


def test_a_stray_file_named_like_a_checkpoint_does_not_stop_the_cleanup(tmp_path):
    _checkpoint(tmp_path / "trial_a" / "checkpoint_000001", 1, torn="cut")
    (tmp_path / "trial_a" / "checkpoint_000002").write_text("not a folder")
    dropped = disk.drop_torn_checkpoints(tmp_path)
    assert sorted(p.name for p in dropped) == ["checkpoint_000001", "checkpoint_000002"]
    assert not (tmp_path / "trial_a" / "checkpoint_000001").exists()


def test_a_stage_folder_removed_while_it_is_sized_keeps_the_last_size(tmp_path, monkeypatch):
    watch = DiskWatch(tmp_path, tmp_path, tmp_path / "b", 1, print, print)
    watch.largest = 3 * MB

    def gone(stage_dir):
        raise FileNotFoundError(stage_dir)  # Tune removed a checkpoint folder meanwhile

    monkeypatch.setattr(disk, "checkpoint_bytes", gone)
    watch._sized_at = float("-inf")  # due for sizing
    assert watch.need() == FLOOR + 3 * MB and watch.largest == 3 * MB

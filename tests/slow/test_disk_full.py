"""A full disk (issue 32, item 3), for real: the smoke sweep at 3 epochs runs with its work folder on a 64 MB tmpfs
(Tune's storage, the MLflow SQLite store, the sweep's files); once a trial reported its first epoch, another
process fills that disk to the last byte, while the trials write their checkpoints.

The driver notices within a second, gives back its 16 MB ballast (sweeps.driver.disk) and stops the sweep as Ctrl+C
does:
one console line names the folder and its free space, no traceback (the details are in the sweep's log), exit 1
with the resume command; nothing torn is left where Ray reads (every checkpoint folder intact, Tune's experiment
state and every result line whole), and no run is left RUNNING. Once the space is freed, one `resume` finishes the
sweep: every run FINISHED, every epoch once.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from devtools.slow.cluster_harness import in_ci
from devtools.slow.real_driver import (NAME, assert_finished_unharmed, assert_no_traceback, cli, kill_ray_leftovers,
                                       start_driver, sweep_env)
from ssat.storage import verify_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
SIZE_MB = 64


@pytest.fixture
def small_disk(tmp_path):
    """A fresh 64 MB tmpfs (root only); unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(disk)],
                           capture_output=True, text=True)
    if mount.returncode:
        reason = f"cannot mount a tmpfs (root needed): {mount.stderr.strip()[:200]}"
        pytest.fail(reason + " [CI]") if in_ci() else pytest.skip(reason)
    yield disk
    if subprocess.run(["umount", str(disk)], capture_output=True).returncode:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def fill(folder: Path) -> Path:
    """Write a file in `folder` until the disk refuses another byte."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for block in (2**20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * block)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def assert_nothing_torn_where_ray_reads(stage: Path) -> None:
    states = sorted(stage.glob("experiment_state-*.json"))
    assert states, sorted(p.name for p in stage.iterdir())
    for state in states:
        json.loads(state.read_text())
    checkpoints = sorted(stage.glob("*/checkpoint_*"))
    assert checkpoints, "no checkpoint was written before the disk filled"
    for ckpt in checkpoints:
        for name in ("state.pt", "best.pt", "last.pt"):
            verify_file(ckpt / name)
    for result in stage.glob("*/result.json"):
        for line in result.read_text().splitlines():
            json.loads(line)


def test_a_full_disk_stops_the_sweep_in_one_line_and_resume_finishes_it(small_disk, tmp_path, teachers):
    ray_tmp = tempfile.mkdtemp(prefix="rd", dir="/tmp")
    env = sweep_env(small_disk, ray_tmp, teachers, fault="")
    log = tmp_path / "driver.log"  # off the small disk
    stage = small_disk / "runs" / "sweeps" / NAME / "tune" / "grid"
    driver = start_driver(small_disk, env, epochs=3, log=log)
    try:
        deadline = time.monotonic() + 480
        while not any(f.stat().st_size for f in stage.glob("*/result.json")):
            assert driver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        filler = fill(small_disk)
        rc = driver.wait(300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        kill_ray_leftovers(ray_tmp)
    out = log.read_text()
    assert rc == 1, out[-3000:]
    full = [ln for ln in out.splitlines() if ln.startswith("[sweep] disk full: ")]
    assert len(full) == 1, out[-3000:]
    assert re.fullmatch(rf"\[sweep\] disk full: {re.escape(str(small_disk))} has \d+\.\d MB free of {SIZE_MB}\.0 MB, "
                        r"less than the \d+\.\d MB this sweep keeps free to stop cleanly; stopping it as Ctrl\+C does "
                        r"\(details in its sweep\.log\)\. Free space there, then resume it", full[0]), full[0]
    assert (f"sweep {NAME} is INCOMPLETE: stage grid interrupted (disk full). Resume with:\n"
            f"  python -m sweeps resume {NAME} --workdir {small_disk}\n") in out, out[-3000:]
    assert_no_traceback(out)
    assert "[disk] " in (small_disk / "runs" / "sweeps" / NAME / "sweep.log").read_text()  # the details
    assert not (small_disk / "runs" / "sweeps" / NAME / "disk_reserve").exists()
    assert_nothing_torn_where_ray_reads(stage)
    client = MlflowClient(f"sqlite:///{small_disk / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(NAME).experiment_id], max_results=100)
    assert runs and not [r.data.tags.get("ssat.key") for r in runs if r.info.status == "RUNNING"]
    for r in runs:
        if r.data.tags["ssat.kind"] in ("sweep", "trial") and r.info.status == "KILLED":
            assert "interrupted (disk full)" in r.data.tags["ssat.status"], r.data.tags["ssat.status"]

    refused = cli(env, "resume", NAME, "--workdir", str(small_disk))  # still full: refused before anything
    assert refused.returncode == 2 and "MB free; a sweep needs at least 32.0 MB free there to start" in refused.stderr

    filler.unlink()
    res = cli(env, "resume", NAME, "--workdir", str(small_disk))
    kill_ray_leftovers(ray_tmp)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert_no_traceback(res.stdout + res.stderr)
    assert_finished_unharmed(small_disk, epochs=3)
    assert not (small_disk / "runs" / "sweeps" / NAME / "disk_reserve").exists()


def test_a_full_disk_in_the_teacher_stage_stops_the_sweep_in_one_line(small_disk, tmp_path):
    """Issue 44, item 4: the same fault while the teacher trains (its cache on the small disk) gave 4 tracebacks and
    left the sweep's run RUNNING. Now: one line, exit 1, INCOMPLETE in stage teacher, nothing RUNNING."""
    ray_tmp = tempfile.mkdtemp(prefix="rd", dir="/tmp")
    env = sweep_env(small_disk, ray_tmp, small_disk / "teachers", fault="")
    log = tmp_path / "driver.log"
    driver = start_driver(small_disk, env, epochs=3, log=log)
    try:
        deadline = time.monotonic() + 480
        while "teacher step " not in (log.read_text() if log.exists() else ""):
            assert driver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        fill(small_disk)
        rc = driver.wait(300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        kill_ray_leftovers(ray_tmp)
    out = log.read_text()
    assert rc == 1, out[-3000:]
    assert len([ln for ln in out.splitlines() if ln.startswith("[sweep] disk full: ")]) == 1, out[-3000:]
    assert (f"sweep {NAME} is INCOMPLETE: stage teacher interrupted (disk full). Resume with:\n"
            f"  python -m sweeps resume {NAME} --workdir {small_disk}\n") in out, out[-3000:]
    assert_no_traceback(out)
    assert not (small_disk / "runs" / "sweeps" / NAME / "disk_reserve").exists()
    client = MlflowClient(f"sqlite:///{small_disk / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(NAME).experiment_id], max_results=100)
    assert runs and not [r.data.tags.get("ssat.key") for r in runs if r.info.status == "RUNNING"]
    (parent,) = [r for r in runs if r.data.tags["ssat.kind"] == "sweep"]
    assert (parent.info.status == "KILLED"
            and "interrupted (disk full) in stage teacher" in parent.data.tags["ssat.status"])

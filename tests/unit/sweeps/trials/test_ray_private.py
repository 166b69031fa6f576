"""Ray's private APIs in one module (sweeps/trials/ray_private.py), each pinned against the installed Ray: the
processes a local Ray starts lead sessions of their own, the driver's printer is swapped and read back, and
Tune's record of a checkpoint is built as Trainable.restore takes it (the loopback patch: test_cluster.py; the
printer as the sweep log uses it: test_sweep_log.py; the checkpoint surgery: test_trainable_checkpoints.py)."""
from __future__ import annotations

import os

from ray._private import services
from ray.train import Checkpoint
from ray.train._internal.checkpoint_manager import _TrainingResult

from sweeps.trials import ray_private


def test_inside_own_sessions_rays_processes_lead_a_session_and_group_of_their_own():
    before = services.ConsolePopen  # the name Ray 2.60 starts its GCS, raylet and agents with
    with ray_private.own_sessions():
        proc = services.ConsolePopen(["sleep", "30"])
        try:
            assert os.getsid(proc.pid) == proc.pid and os.getpgid(proc.pid) == proc.pid
            assert os.getsid(proc.pid) != os.getsid(0)
        finally:
            proc.kill()
            proc.wait()
    assert services.ConsolePopen is before


def test_the_drivers_printer_is_set_and_read_back():
    before = ray_private.driver_printer()
    mine = print
    try:
        ray_private.set_driver_printer(mine)
        assert ray_private.driver_printer() is mine
    finally:
        ray_private.set_driver_printer(before)
    assert ray_private.driver_printer() is before


def test_a_training_result_holds_its_checkpoint_and_metrics(tmp_path):
    checkpoint = Checkpoint(str(tmp_path))
    got = ray_private.training_result(checkpoint, {"epoch": 3})
    assert isinstance(got, _TrainingResult) and got.checkpoint is checkpoint and got.metrics == {"epoch": 3}

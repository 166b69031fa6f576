"""Fault injection specs: what fires where, once per run with a marker, and nothing for the wrong run/node/step."""
import socket

import pytest

from ssat import faults


def test_parse_reads_epoch_step_and_selectors():
    (a, b) = faults.parse("exit@3:1/node=nodeA/seed=2, raise@2")
    assert (a["kind"], a["epoch"], a["step"], a["seed"], a["node"]) == ("exit", 3, 1, 2, "nodeA")
    assert (b["kind"], b["epoch"], b["step"], b["seed"], b["node"]) == ("raise", 2, 0, None, None)
    assert faults.parse("") == []


@pytest.mark.parametrize("bad", ["boom@1", "raise@x", "raise@1:", "raise@1:a", "raise@1/seed=", "raise@1/pod=a"])
def test_parse_refuses_bad_specs(bad):
    with pytest.raises(ValueError, match="SSAT_FAULT"):
        faults.parse(bad)


def test_selectors_and_once_markers(tmp_path, monkeypatch):
    here = socket.gethostname()
    monkeypatch.setenv("SSAT_FAULT", f"raise@2:1/node={here}/seed=7,exit@2/node=not-{here}")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(tmp_path))
    faults.set_context(7, "abc-s7")
    faults.maybe("epoch", 2, step=0)      # step 0: nothing due here (the exit is for another node)
    faults.maybe("epoch", 1, step=1)      # another epoch
    with pytest.raises(faults.InjectedFault, match="raise@2:1"):
        faults.maybe("epoch", 2, step=1)
    marker = tmp_path / f"raise@2_1_node={here}_seed=7-abc-s7"
    assert marker.exists() and f"fired on {here}" in marker.read_text()
    faults.maybe("epoch", 2, step=1)      # fired once for this run: the retried trial goes on
    faults.set_context(8, "abc-s8")
    faults.maybe("epoch", 2, step=1)      # another seed: not selected
    assert sorted(p.name for p in tmp_path.iterdir()) == [marker.name]


def test_end_fires_once_per_run_at_its_epoch(tmp_path, monkeypatch):
    """`end@N` (a trial Tune completes early): the continuation of that trial must train on past epoch N."""
    monkeypatch.setenv("SSAT_FAULT", "end@1")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(tmp_path))
    faults.set_context(0, "k-s0")
    assert faults.parse("end@1")[0]["kind"] == "end"
    assert not faults.active("end", 2)
    assert faults.active("end", 1) and not faults.active("end", 1)
    faults.maybe("epoch", 1)  # not a point of the trainer's: the trainable asks for it
    assert [p.name for p in tmp_path.iterdir()] == ["end@1-k-s0"]


def test_nan_fires_every_time_a_diverging_run_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("SSAT_FAULT", "nan@2/seed=3")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(tmp_path))
    faults.set_context(3, "k-s3")
    assert not faults.active("nan", 1)
    assert faults.active("nan", 2) and faults.active("nan", 2)  # a retry diverges again
    assert [p.name for p in tmp_path.iterdir()] == ["nan@2_seed=3-k-s3"]


def test_hold_waits_for_the_release_file_then_goes_on(tmp_path, monkeypatch):
    import threading
    import time

    monkeypatch.setenv("SSAT_FAULT", "hold@2:1")
    monkeypatch.setenv("SSAT_FAULT_ONCE_DIR", str(tmp_path))
    faults.set_context(0, "k-s0")
    held = threading.Thread(target=faults.maybe, args=("epoch", 2, 1))
    held.start()
    time.sleep(1.0)
    assert held.is_alive() and (tmp_path / "hold@2_1-k-s0").exists()  # held, and the test can see it
    (tmp_path / "release").write_text("")
    held.join(timeout=5)
    assert not held.is_alive()
    faults.maybe("epoch", 2, 1)  # once per run: a retried trial is not held again

"""The dry run a person can read: one line per trial, each schedule once as breakpoints, totals, honest sources."""
import json
from pathlib import Path

from ssat.config import from_dict
from ssat.presets import preset
from sweeps.dryrun import describe, dry_run, measured_epoch_seconds, schedule_lines
from sweeps.spec import load_spec

SPECS = Path(__file__).resolve().parents[2] / "sweeps" / "specs"


def test_breakpoints_of_the_papers_schedules():
    cfg = from_dict(preset("cifar10-ssat-mbi"))  # Curious-(1.25, 70), rho 0.05 doubled at 75, lr 60/70/90
    assert schedule_lines(cfg) == ("eps 0.14/255 -> 10/255 by epoch 70, then 8/255 from 71; rho 0.05, then 0.1 from "
                                   "75; lr 0.1, then x0.1 from 60, then x0.01 from 70, then x0.005 from 90")
    lin = cfg.replace(**{"attack.schedule": "linear", "attack.t": 60, "method.rho_double_epoch": None,
                         "optim.lr_milestones": [], "optim.lr_factors": []})
    assert schedule_lines(lin) == "eps 0.13/255 -> 8/255 by epoch 60, then 8/255 from 61; rho 0.05; lr 0.1"
    mnist = from_dict(preset("mnist5k-ssat-mbi"))  # eps 0.3 is not k/255: plain numbers
    assert schedule_lines(mnist).startswith("eps 0.05357 -> 0.375 by epoch 7, then 0.3 from 8;")


def test_describe_tells_a_jump_from_a_ramp():
    assert describe([0.15, 0.3], str) == "0.15, then 0.3 from 2"
    assert describe([1.0, 2.0, 3.0, 3.0], str) == "1.0 -> 3.0 by epoch 3, then 3.0 from 4"
    assert describe([5.0, 5.0, 1.0, 2.0, 3.0], str) == "5.0, then 1.0 -> 3.0 over epochs 3-5"
    assert describe([7.0], str) == "7.0"


def test_table1_dry_run_is_short_and_complete():
    lines = []
    dry_run(load_spec(SPECS / "paper-table1-main.yaml"), out=lines.append)
    text = "\n".join(lines)
    assert len(text) < 20_000  # it printed ~200 KB before
    trials = [ln for ln in lines if ln.startswith("- ")]
    assert len(trials) == 45 and all("GPU-hours" in ln for ln in trials)
    assert "- cifar10/SSAT-MBI seed 0: the base | GPU-hours 5.10 (paper)" in lines
    schedules = lines[lines.index("schedules:") + 1: lines.index(next(ln for ln in lines if ln.startswith("total:")))]
    assert len(schedules) == len(set(schedules)) == 7  # each distinct schedule once
    assert lines[-1].startswith("total: 45 trial(s), estimated GPU-hours 382.6") and "nothing was started" in lines[-1]
    verbose = []
    dry_run(load_spec(SPECS / "paper-table1-main.yaml"), out=verbose.append, verbose=True)
    assert sum(ln.startswith("  config ") for ln in verbose) == 45


def test_measured_times_name_their_source(tmp_path):
    (tmp_path / "a100.json").write_text("\n".join([json.dumps({"device": "NVIDIA A100-SXM4-80GB", "torch": "2.11"}),
                                                  "a warning line between the records",  # skipped, not the end
                                                  "[1, 2]",  # JSON, but not a record: skipped too
                                                  json.dumps({"trainer_model": "wrn-28-5", "cifar10_epoch_s": 36.0}),
                                                  json.dumps({"model": "wrn-28-5", "cifar10_epoch_s": 1.0})]))
    got = measured_epoch_seconds("a100", tmp_path)
    assert got == {"wrn-28-5": (36.0, "NVIDIA A100-SXM4-80GB: real Trainer, SSAT-MBI wrn-28-5, 36.0 s per CIFAR-10 "
                                      "epoch (1 run; a100.json)")}
    assert measured_epoch_seconds("H100", tmp_path) == {}
    (tmp_path / "b.log").write_text("\n".join(json.dumps(r) for r in [
        {"device": "NVIDIA A100-SXM4-80GB"}, {"trainer_model": "wrn-28-5", "cifar10_epoch_s": 40.0}]))
    assert measured_epoch_seconds("a100", tmp_path)["wrn-28-5"] == (
        38.0, "NVIDIA A100-SXM4-80GB: real Trainer, SSAT-MBI wrn-28-5, 38.0 s per CIFAR-10 epoch (the median of 2 "
              "runs; a100.json, b.log)")
    (tmp_path / "b.log").write_text("\n".join(json.dumps(r) for r in [
        {"device": "NVIDIA A100-SXM4-80GB"}, {"trainer_model": "wrn-28-5", "cifar10_epoch_s": 50.0},
        {"trainer_model": "wrn-28-5", "cifar10_epoch_s": 40.0},
        {"trainer_model": "wrn-28-5", "cifar10_epoch_s": 9.0, "graph_mode": "captured"},  # not the default mode
        {"trainer_model": "wrn-28-5", "cifar10_epoch_s": 9.0, "baseline": True}]))
    # a file without a device line is not another file's device
    (tmp_path / "c.log").write_text(json.dumps({"trainer_model": "wrn-28-5", "cifar10_epoch_s": 1.0}))
    secs, source = measured_epoch_seconds("a100", tmp_path)["wrn-28-5"]
    assert secs == 40.0 and "the median of 3 runs" in source and "a100.json, b.log" in source
    # the shipped H200 logs: the real Trainer's eager WRN-28-5 epoch on two machines (37.7-38.3 s and 49-56 s)
    assert round(measured_epoch_seconds("H200")["wrn-28-5"][0], 1) == 49.0

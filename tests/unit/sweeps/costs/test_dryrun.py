"""The dry run a person can read: one line per trial, each schedule once as breakpoints, totals, honest sources;
with --gpu the whole sweep's GPU-hours per stage from that GPU's own measurements only."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ssat.config import from_dict
from ssat.presets import preset
from ssat.schedules import schedule_table
from sweeps.costs.model import TRIAL_STAGES, engine_mode, estimate, final_images, validation_epochs
from sweeps.costs.measurements import Measurements, read_records
from sweeps.costs.dryrun import COSTS_PAGE, costs_page, describe, dry_run, gpu_choice, schedule_lines
from sweeps.errors import UsageError
from sweeps.spec import load_spec, parse_spec

SPECS = Path(__file__).resolve().parents[4] / "sweeps" / "specs"


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
    schedules = lines[lines.index("schedules:") + 1: lines.index(next(ln for ln in lines if ln.startswith("meas")))]
    assert len(schedules) == len(set(schedules)) == 7  # each distinct schedule once
    assert lines[-2].startswith("measurements in benchmarks/results/: NVIDIA H100 80GB HBM3 (training); NVIDIA H200")
    assert lines[-1].startswith("total: 45 trial(s), estimated GPU-hours 382.6") and "nothing was started" in lines[-1]
    gpu = []
    dry_run(load_spec(SPECS / "paper-table1-main.yaml"), out=gpu.append, gpu="NVIDIA H200", records=read_records())
    assert gpu[-1] == ("total: 45 trial(s); on NVIDIA H200: 208.3 GPU-h; the paper's: 382.6 GPU-h (whole-GPU trials at "
                       "the paper's Table 8 per-epoch times, training only); nothing was started")  # measured first
    verbose = []
    dry_run(load_spec(SPECS / "paper-table1-main.yaml"), out=verbose.append, verbose=True)
    assert sum(ln.startswith("  config ") for ln in verbose) == 45


# ---- measurements ----------------------------------------------------------------------------------------
def write(folder: Path, name: str, lines: list) -> Path:
    (folder / name).write_text("\n".join(ln if isinstance(ln, str) else json.dumps(ln) for ln in lines) + "\n")
    return folder


def test_measured_times_name_their_source(tmp_path):
    # old-format records: no "bench", "method" or "mode"; the mode comes from compile and graph_mode
    write(tmp_path, "a100.json", [{"device": "NVIDIA A100-SXM4-80GB", "torch": "2.11"},
                                  "a warning line between the records",  # skipped, not the end
                                  "[1, 2]",  # JSON, but not a record: skipped too
                                  {"trainer_model": "wrn-28-5", "precision": "bf16", "cifar10_epoch_s": 36.0},
                                  {"model": "wrn-28-5", "cifar10_epoch_s": 1.0}])  # a step benchmark, no Trainer
    m = Measurements("NVIDIA A100-SXM4-80GB", read_records(tmp_path))
    f = m.figure("training", "wrn-28-5", "ssat-mbi", "eager", "bf16")
    assert (f.value, f.cite()) == (36.0, "1 run: a100.json")
    assert m.figure("training", "wrn-28-5", "ssat-mbi", "graph+compile", "bf16") is None
    write(tmp_path, "b.log", [{"device": "NVIDIA A100-SXM4-80GB"},
                              {"trainer_model": "wrn-28-5", "precision": "bf16", "cifar10_epoch_s": 50.0},
                              {"trainer_model": "wrn-28-5", "precision": "bf16", "cifar10_epoch_s": 40.0},
                              {"trainer_model": "wrn-28-5", "precision": "bf16", "cifar10_epoch_s": 9.0,
                               "compile": "off", "graph_mode": "captured"},  # graph mode: another figure
                              {"trainer_model": "wrn-28-5", "precision": "bf16", "cifar10_epoch_s": 7.0,
                               "compile": "default", "graph_mode": "captured"},
                              {"trainer_model": "wrn-28-5", "precision": "bf16", "cifar10_epoch_s": 3.0,
                               "compile": "default", "graph_mode": "captured", "baseline": True}])  # never used
    write(tmp_path, "c.log", [{"trainer_model": "wrn-28-5", "precision": "bf16", "cifar10_epoch_s": 1.0}])  # no device
    m = Measurements("NVIDIA A100-SXM4-80GB", read_records(tmp_path))
    f = m.figure("training", "wrn-28-5", "ssat-mbi", "eager", "bf16")
    assert (f.value, f.runs, f.cite()) == (40.0, 3, "median of 3: a100.json, b.log")
    assert m.figure("training", "wrn-28-5", "ssat-mbi", "graph", "bf16").value == 9.0
    assert m.figure("training", "wrn-28-5", "ssat-mbi", "graph+compile", "bf16").value == 7.0  # not the baseline's 3
    assert m.figure("training", "wrn-28-5", "ssat-mbi", "eager", "fp16") is None  # another precision: not borrowed
    # the shipped H200 logs: the eager Trainer on two machines (37.7-38.3 s and 49-56 s), graph+compile twice
    h200 = Measurements("NVIDIA H200", read_records())
    assert round(h200.figure("training", "wrn-28-5", "ssat-mbi", "eager", "bf16").value, 1) == 49.0
    gc = h200.figure("training", "wrn-28-5", "ssat-mbi", "graph+compile", "bf16")
    assert (round(gc.value, 2), gc.cite()) == (19.15, "median of 2: h200-2026-11-26b-step-engine.log")
    h100 = Measurements("NVIDIA H100 80GB HBM3", read_records())
    assert round(h100.figure("training", "wrn-28-5", "ssat-mbi", "graph+compile", "bf16").value, 1) == 20.6


def test_engine_mode_is_what_runs_on_a_gpu():
    def mode(graph, comp, method="ssat-mbi", fused="off", dropout=0.0):
        return engine_mode(SimpleNamespace(system=SimpleNamespace(graph_mode=graph, compile=comp, precision="auto",
                                                                  fused_forward=fused),
                                           method=SimpleNamespace(name=method), model=SimpleNamespace(dropout=dropout)))

    assert mode("auto", "auto") == mode("auto", "auto", "ssat-mbi-awr") == "graph+compile"  # union and AWR
    assert mode("on", "off") == "graph"
    assert mode("off", "auto") == mode("off", "default") == "compile"
    assert mode("off", "off") == "eager"
    assert mode("auto", "reduce-overhead") == "compile"  # it captures CUDA graphs itself: graph mode stays off
    assert mode("on", "max-autotune-no-cudagraphs") == "graph+compile"
    assert mode("auto", "auto", fused="auto") == mode("auto", "auto", fused="on") == "graph+compile+fused"
    assert mode("auto", "auto", fused="auto", dropout=0.3) == "graph+compile"  # dropout: separate forwards
    assert engine_mode(from_dict(preset("cifar10-ssat-mbi-awr"))) == "graph+compile+fused"  # the defaults
    # a config read graph_mode: true/false as on/off
    assert engine_mode(from_dict(preset("cifar10-rst"), {"system.graph_mode": False})) == "compile+fused"
    assert engine_mode(from_dict(preset("cifar10-rst"), {"system.graph_mode": True, "system.compile": "off"})) == \
        "graph+fused"


def test_validations_and_final_evaluation_follow_the_trainer():
    cfg = from_dict(preset("cifar10-ssat-mbi"), {"optim.epochs": 10, "attack.t": 5, "method.rho_double_epoch": None,
                                                 "optim.lr_milestones": [], "optim.lr_factors": []})
    assert validation_epochs(cfg) == 10
    assert validation_epochs(cfg.replace(**{"eval.val_every": 3})) == 4  # 3, 6, 9 and the last two (9, 10)
    assert validation_epochs(cfg.replace(**{"eval.val_every": 20})) == 2
    e = cfg.replace(**{"eval.test_n": None, "eval.autoattack_n": 200, "eval.autoattack_checkpoints": ["best"],
                       "eval.autoattack_seeds": [1]})
    assert final_images(e, "grid") == {"clean": 20_000, "pgd10": 20_000, "pgd20": 20_000, "pgd40": 20_000}  # seed 0
    assert final_images(e.replace(seed=1), "confirm")["autoattack"] == 200
    assert final_images(e.replace(seed=1), "search") == {}  # sweeps/trials/trainable.py _final: none in a search
    svhn = from_dict(preset("svhn-ssat-mbi"), {"eval.test_n": None, "eval.checkpoints": ["last"],
                                               "eval.autoattack_checkpoints": ["best", "last"]})
    assert final_images(svhn, "grid") == {"clean": 26_032, "pgd10": 26_032, "pgd20": 26_032, "pgd40": 26_032,
                                          "autoattack": 26_032}


# ---- a sweep's GPU-hours, by hand ---------------------------------------------------------------------------
GPU = "NVIDIA T1000 Test"


def fake_results(folder: Path) -> list[dict]:
    """One GPU measured in full (new-format records) and an H100 with one old-format training record only."""
    trainer = {"bench": "trainer", "trainer_model": "wrn-28-5", "method": "ssat-mbi", "precision": "bf16", "images": 64}
    ev = {"bench": "eval", "eval_model": "wrn-28-5", "batch": 500, "n": 1000, "tf32": False}
    pack = {"model": "wrn-28-5", "graph_mode": ["captured"]}
    write(folder, "t1000.log", [
        {"device": GPU, "torch": "2.11"},
        {**trainer, "mode": "graph+compile+fused", "cifar10_epoch_s": 1.0},
        {**trainer, "mode": "eager", "cifar10_epoch_s": 5.0},  # not the mode that runs
        {**trainer, "mode": "graph+compile+fused", "cifar10_epoch_s": 0.1, "baseline": True},  # a baseline: never used
        {**ev, "attack": "clean", "seconds": 0.5, "s_per_1000": 0.5},
        {**ev, "attack": "pgd10", "seconds": 1.5},  # s_per_1000 from seconds and n
        {**ev, "attack": "swa-bn", "s_per_1000": 0.25},
        {**ev, "attack": "autoattack", "s_per_1000": 40.0, "robust_acc": 48.0},  # accuracy-bound: never a figure
        {**ev, "attack": "apgd-t", "s_per_1000": 1.0},  # on points not all robust: never a figure
        *({**ev, "attack": a, "s_per_1000": v, "points": "robust"}
          for a, v in (("apgd-ce", 10.0), ("apgd-t", 20.0), ("fab-t", 5.0), ("square", 5.0))),
        {**ev, "attack": "clean", "s_per_1000": 0.05, "tf32": True},  # TF32: not how the trials evaluate
        {"bench": "teacher", "teacher_model": "wrn-28-5", "precision": "bf16", "steps_per_s": 10.0,
         "compile": "default"},
        {"bench": "teacher", "teacher_model": "wrn-28-5", "precision": "bf16", "steps_per_s": 1.0},  # the old eager one
        {**pack, "packed_trials": 1, "mps": True, "total_images_per_s": 100.0, "finished": 1},
        {**pack, "packed_trials": 4, "mps": True, "total_images_per_s": 250.0, "finished": 4},
        {**pack, "packed_trials": 4, "mps": True, "total_images_per_s": 400.0, "finished": 3},  # one died: no figure
        {**pack, "packed_trials": 1, "mps": False, "total_images_per_s": 100.0},  # no MPS: 1.5x, not preferred
        {**pack, "packed_trials": 4, "mps": False, "total_images_per_s": 150.0}])
    write(folder, "h100.log", ["# an old-format log", {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11"},
                               {"trainer_model": "wrn-28-5", "precision": "bf16", "compile": "default",
                                "graph_mode": "captured", "cifar10_epoch_s": 3.0}])
    return read_records(folder)


PAPER = "the paper's: 1.0 GPU-h (whole-GPU trials at the paper's Table 8 per-epoch times, training only)"
TINY = {"optim.swa_start": 5, "eval.val_every": 1, "eval.test_n": 1000, "eval.pgd_steps": [10],
        "eval.checkpoints": ["best", "last"], "eval.autoattack_checkpoints": ["best"], "eval.autoattack_n": 500,
        "teacher.steps": 36_000, "system.precision": "bf16", "system.graph_mode": "on", "system.compile": "default"}


def tiny_raw(**raw) -> dict:
    """2 trials x 10 epochs of WRN-28-5 on CIFAR-10, a quarter GPU each: validation every epoch, SWA from 6,
    PGD-10 and AutoAttack (best only, 500 images) on 1,000 test images, a 36,000-step teacher."""
    return {"name": "tiny", "preset": "cifar10-ssat-mbi", "epochs": 10, "seeds": [0, 1],
            "resources": {"cpu": 1, "gpu": 0.25}, "overrides": TINY, "grid": [{"row": "r", "set": {}}], **raw}


def tiny_spec(**raw):
    return parse_spec(tiny_raw(**raw))


def hours(est: dict) -> dict:
    return {s: round(st["gpu_hours"] * 3600, 6) for s, st in est["stages"].items()}


def test_every_stage_by_hand(tmp_path):
    records = fake_results(tmp_path)
    lines = []
    est = dry_run(tiny_spec(), out=lines.append, gpu="t1000", records=records)
    # one trial alone: training 10 x 1 s; validation 10 x 1,000 images x (0.5 + 1.5) s/1000; SWA after epoch 5:
    # 5 x 49,000 x 0.25 s/1000; evaluation 2 checkpoints x (0.5 + 1.5) + AutoAttack on best's 500 images: a clean
    # pass (0.5 s/1000), then each attack on CIFAR-10's robust share (Table 1, SSAT-MBI) x its s/1000 robust
    # images. 4 per GPU with MPS gain 2.5 -> 1/2.5 of that per trial; two trials. One teacher: 36,000 / 10 per s.
    aa = 0.5 * (0.5 + 0.8331 * 10 + 0.5539 * 20 + 0.5121 * 5 + 0.5121 * 5)
    assert aa == pytest.approx(12.515)
    assert hours(est) == {"teachers": 3600.0, "training": 8.0, "validation": 16.0, "SWA": 49.0,
                          "evaluation": pytest.approx(2 * (4 + aa) / 2.5)}
    assert est["total"] == {"gpu_hours": pytest.approx(1 + (73 + 2 * (4 + aa) / 2.5) / 3600), "complete": True}
    assert est["gpu"] == GPU and est["units"][0]["gpu_hours"]["evaluation"] == pytest.approx((4 + aa) / 2.5 / 3600)
    text = "\n".join(lines)
    assert "not measured" not in text
    assert (f"training   0.0022 GPU-h, 2 trial(s) ({GPU}, graph+compile+fused, ssat-mbi wrn-28-5 bf16: 1.0 s/epoch, "
            "1 run: t1000.log)") in text
    assert "4 packed wrn-28-5 trials, MPS, graph mode: gain 2.50 (250 / 100 images/s" in text
    assert ("apgd-t: 20.00 s/1000 robust images, 1 run: t1000.log; run on the images still robust: 55.4% of "
            "AutoAttack's (the paper's Table 1, SSAT-MBI, cifar10)") in text
    assert "40.00" not in text and "1.00 s/1000" not in text  # the records that do not fit the model
    assert f"SWA        0.014 GPU-h, 2 trial(s) ({GPU}, wrn-28-5 swa-bn: 0.25 s/1000 images, 1 run: t1000.log)" in text
    assert f"teachers   1.00 GPU-h, 1 teacher(s) ({GPU}, FixMatch teacher wrn-28-5 bf16: 10.0 steps/s" in text
    # the measured total first, then the paper's figure (it came first before)
    assert lines[-1] == (f"total: 2 trial(s); on {GPU}: 1.02 GPU-h; {PAPER}; nothing was started")
    # a whole GPU per trial: no packing; the same figures
    whole = estimate(tiny_spec(resources={"cpu": 1, "gpu": 1}), "t1000", records)
    assert hours(whole) == {"teachers": 3600.0, "training": 20.0, "validation": 40.0, "SWA": 122.5,
                            "evaluation": pytest.approx(2 * (4 + aa))}
    # precision auto trains the student and (ssat.fixmatch.teacher_precision) the teacher in bf16 on a GPU
    auto = estimate(tiny_spec(overrides={**TINY, "system.precision": "auto"}), "t1000", records)
    assert hours(auto) == hours(est)
    # TF32 evaluation is its own figure: measured for clean only, so the rest is not measured
    tf32 = estimate(tiny_spec(overrides={**TINY, "eval.tf32": True}), "t1000", records)
    assert tf32["stages"]["evaluation"]["not_measured"] == 2 and tf32["stages"]["training"]["not_measured"] == 0


def test_an_unmeasured_figure_is_never_borrowed_from_another_gpu(tmp_path):
    records = fake_results(tmp_path)
    lines = []
    h100 = "NVIDIA H100 80GB HBM3"
    unfused = tiny_spec(overrides={**TINY, "system.fused_forward": "off"})  # the old record's engine: no fused forward
    assert dry_run(tiny_spec(), out=[].append, gpu="H100", records=records)["stages"]["training"]["gpu_hours"] == 0
    est = dry_run(unfused, out=lines.append, gpu="H100", records=records)
    # training: the old record's graph+compile 3 s/epoch; no packing record there: no gain (GPU-h = alone)
    assert est["stages"]["training"]["gpu_hours"] * 3600 == pytest.approx(60.0)
    for stage in ("teachers", "validation", "SWA", "evaluation"):
        st = est["stages"][stage]
        assert (st["gpu_hours"], st["not_measured"]) == (0, st["of"]) and st["of"] > 0
    text = "\n".join(lines)
    assert (f"evaluation not measured on {h100}: wrn-28-5 evaluation: apgd-ce, apgd-t, clean, fab-t, pgd10, square "
            "(2 trial(s))") in text
    assert f"no packing record of 4 and 1 wrn-28-5 trials on {h100}: assumed no gain" in text
    assert "0.50 s/1000" not in text and "t1000.log" not in text  # nothing of the other GPU
    assert lines[-1] == (f"total: 2 trial(s); on {h100}: at least 0.017 GPU-h (not measured on {h100}: teachers, "
                         f"validation, SWA, evaluation); {PAPER}; nothing was started")
    assert f"not measured on {h100}: FixMatch teacher steps/s (wrn-28-5 bf16)" in text
    # a GPU type with no measurement at all: every figure "not measured on" it
    none = []
    est = dry_run(tiny_spec(), out=none.append, gpu="A100", records=records)
    assert all(st["not_measured"] == st["of"] for st in est["stages"].values())
    assert none[-1] == ("total: 2 trial(s); on A100: not measured on A100 (teachers, training, validation, SWA, "
                        f"evaluation); {PAPER}; nothing was started")
    # a name that fits several measured GPUs is refused, not guessed
    amb = []
    dry_run(tiny_spec(), out=amb.append, gpu="NVIDIA", records=records)
    assert f"names several measured GPUs: {h100}, {GPU}; name one" in amb[1]
    # without --gpu: the paper's figure and a line naming what is measured where
    plain = []
    dry_run(tiny_spec(), out=plain.append, records=records)
    assert plain[-2] == (f"measurements in benchmarks/results/: {h100} (training); {GPU} (training, eval, teacher, "
                         "packing); `--gpu NAME` estimates every stage of the sweep on one of them")


def test_a_search_counts_search_trials_without_and_confirm_trials_with_final_evaluation(tmp_path):
    records = fake_results(tmp_path)
    raw = tiny_raw(resources={"cpu": 1, "gpu": 1}, seeds=[0], overrides={**TINY, "eval.autoattack_seeds": [10]},
                   search={"num_samples": 5, "space": {"method.beta": {"float": [0, 1]}},
                           "confirm": {"top_k": 2, "seeds": [10, 11]}})
    raw.pop("grid")
    lines = []
    est = dry_run(parse_spec(raw), out=lines.append, gpu="t1000", records=records, json_path=tmp_path / "est.json")
    # 5 search + 2 x 2 confirm trials at full length, a whole GPU each (training 10 s, validation 20 s, SWA 122.5 s
    # per trial); evaluation only for the 4 confirm trials: 2 checkpoints x (0.5 + 1.5) s each, and AutoAttack
    # (12.515 s, as by hand above) for the 2 of seed 10 alone (eval.autoattack_seeds)
    assert est["trials"] == 9
    assert hours(est) == {"teachers": 3600.0, "training": 90.0, "validation": 180.0, "SWA": 9 * 61.25,
                          "evaluation": pytest.approx(4 * 4.0 + 2 * 12.515)}
    assert lines[0].startswith("sweep tiny: preset cifar10-ssat-mbi, stage search, 5 search + 4 confirm trial(s)")
    assert any(ln.startswith("- search seed 0 (x5, at most: ASHA may stop them early; no final evaluation)")
               and ln.endswith("eval - per trial") for ln in lines)
    assert "search trials counted at full length: at most" in "\n".join(lines)
    assert json.loads((tmp_path / "est.json").read_text())["stages"]["evaluation"]["of"] == 4
    assert (tmp_path / "est.json").read_text() == json.dumps(est, indent=1, sort_keys=True) + "\n"


def test_gpu_names_are_checked_against_the_measured_ones(tmp_path):
    records = fake_results(tmp_path)
    assert gpu_choice("t1000", records) == gpu_choice("NVIDIA T1000 TEST", records) == GPU
    assert gpu_choice("h100", records) == "NVIDIA H100 80GB HBM3"
    known = f"NVIDIA H100 80GB HBM3, {GPU}"
    with pytest.raises(UsageError) as err:
        gpu_choice("foo", records)
    assert str(err.value) == (f"--gpu 'foo': no measured GPU has that name; allowed: one of {known} (or a part of "
                              "one name, any case)")
    with pytest.raises(UsageError) as err:
        gpu_choice("NVIDIA", records)
    assert str(err.value).startswith(f"--gpu 'NVIDIA': names several measured GPUs ({known}); allowed: one of ")
    cpu_only = [{**r, "_device": "cpu"} for r in records]  # a CPU's figures are no GPU's
    with pytest.raises(UsageError) as err:
        gpu_choice("t1000", cpu_only)
    assert str(err.value) == ("--gpu 't1000': no measured GPU has that name; none has measurements: measure yours "
                              "with `python -m sweeps calibrate SPEC` on it")
    own = tmp_path / "own"
    own.mkdir()
    write(own, "mine.json", [{"device": "My GPU"}, {"bench": "teacher", "teacher_model": "wrn-28-5",
                                                    "precision": "bf16", "steps_per_s": 3.0, "compile": "off"}])
    with pytest.MonkeyPatch.context() as mp:  # without records: the repository's and this user's calibrations
        mp.setenv("SSAT_CALIBRATION_DIR", str(own))
        assert gpu_choice("my gpu") == "My GPU" and gpu_choice("h200") == "NVIDIA H200"


def test_the_dryrun_command_refuses_an_unknown_gpu(capsys):
    from sweeps.costs.dryrun import main

    assert main([str(SPECS / "mnist5k-demo.yaml"), "--gpu", "nosuchgpu", "--no-measure"]) == 2
    assert capsys.readouterr().err.startswith("error: --gpu 'nosuchgpu': no measured GPU has that name; allowed: ")
    assert main([str(SPECS / "mnist5k-demo.yaml"), "--no-measure"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("total: 14 CPU trial(s); wall time on this machine not")


def test_cpu_trials_cost_no_gpu_hours(tmp_path):
    est = estimate(tiny_spec(resources={"cpu": 1, "gpu": 0}), "t1000", fake_results(tmp_path))
    assert est["total"] == {"gpu_hours": 0, "complete": True} and est["packing"] == [
        "resources.gpu 0: the trials run on CPUs; no GPU-hours"]
    assert [u["gpu_hours"] for u in est["units"]] == [{s: 0.0 for s in TRIAL_STAGES}] * 2  # zero, not unmeasured


def test_docs_costs_page_is_generated_from_the_current_measurements():
    page = costs_page()
    assert "## NVIDIA H200" in page and "## NVIDIA H100 80GB HBM3" in page
    assert "| paper-table1-main | 45 |" in page and "| paper-fig5-rho | 48 |" in page
    assert COSTS_PAGE.read_text() == page, \
        "docs/costs.md is out of date: .venv/bin/python -m sweeps.costs.dryrun --table"


def test_without_records_the_estimate_reads_the_users_calibrations(tmp_path, monkeypatch):
    own = tmp_path / "calibration"
    own.mkdir()
    fake_results(own)  # the same figures, found only through $SSAT_CALIBRATION_DIR
    monkeypatch.setenv("SSAT_CALIBRATION_DIR", str(own))
    est = estimate(tiny_spec(), "t1000")
    assert est["gpu"] == GPU and est["total"]["complete"] is True
    assert est["measured"][GPU] == ["training", "eval", "teacher", "packing"]
    assert hours(est) == hours(estimate(tiny_spec(), "t1000", fake_results(tmp_path)))


def test_the_dryrun_commands_help_table_and_options(tmp_path, capsys, monkeypatch):
    import sweeps.costs.dryrun as DR

    with pytest.raises(SystemExit) as end:
        DR.main(["--help"])
    assert end.value.code == 0
    said = capsys.readouterr().out
    assert "A sweep's cost, or docs/costs.md." in said.splitlines()
    text = " ".join(said.split())  # argparse wraps lines
    for said in ("usage: python -m sweeps.costs.dryrun [-h] [--gpu NAME] [--json PATH] [--no-measure] [--table] "
                 "[--check] [spec]", "A sweep's cost, or docs/costs.md.",
                 "spec a sweep spec: its dry run (as `python -m sweeps run SPEC --dry-run`)",
                 "--gpu NAME estimate every stage on this measured GPU type",
                 "--json PATH also write the numbers as JSON",
                 "--no-measure CPU trials: do not time them on this machine",
                 "--table write docs/costs.md", "--check with --table: exit 1 if the page is out of date"):
        assert said in text, said
    with pytest.raises(SystemExit) as end:
        DR.main([])
    assert end.value.code == 2 and capsys.readouterr().err.endswith("error: name a SPEC, or --table\n")
    page = tmp_path / "docs" / "costs.md"
    page.parent.mkdir()
    monkeypatch.setattr(DR, "ROOT", tmp_path)
    monkeypatch.setattr(DR, "COSTS_PAGE", page)
    monkeypatch.setattr(DR, "costs_page", lambda: "the page\n")
    assert DR.main(["--table", "--check"]) == 1 and not page.exists()
    assert capsys.readouterr().out == f"{page}: out of date; run python -m sweeps.costs.dryrun --table\n"
    assert DR.main(["--table"]) == 0 and page.read_text() == "the page\n"
    assert capsys.readouterr().out == f"wrote {page}\n"
    assert DR.main(["--table", "--check"]) == 0
    assert capsys.readouterr().out == f"{page}: up to date\n"
    page.write_text("an older page\n")
    assert DR.main(["--table", "--check"]) == 1 and page.read_text() == "an older page\n"
    capsys.readouterr()
    monkeypatch.setenv("SSAT_CALIBRATION_DIR", str(tmp_path / "none"))
    spec = str(SPECS / "gpu-smoke.yaml")
    assert DR.main([spec, "--gpu", "h100", "--json", str(tmp_path / "e.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "GPU-hours on NVIDIA H100 80GB HBM3 per stage:" in out
    assert any(f"python -m sweeps calibrate {spec} --missing-only" in ln for ln in out)
    assert json.loads((tmp_path / "e.json").read_text())["gpu"] == "NVIDIA H100 80GB HBM3"


def test_each_line_of_a_dry_run_word_for_word(tmp_path):
    records = fake_results(tmp_path)
    lines = []
    raw = tiny_raw(resources={"cpu": 1, "gpu": 1}, seeds=[0], overrides={**TINY, "eval.autoattack_seeds": [10]},
                   search={"num_samples": 5, "space": {"method.beta": {"float": [0, 1]}},
                           "confirm": {"top_k": 2, "seeds": [10, 11]}})
    raw.pop("grid")
    dry_run(parse_spec(raw), out=lines.append, gpu="H100", records=records, verbose=True)
    h100 = "NVIDIA H100 80GB HBM3"
    assert lines[0] == ("sweep tiny: preset cifar10-ssat-mbi, stage search, 5 search + 4 confirm trial(s), resources "
                        "per trial {'cpu': 1, 'gpu': 1}, max concurrent 1")
    unit = next(ln for ln in lines if ln.startswith("- confirm top-2 seed 10"))
    assert unit == (f"- confirm top-2 seed 10 (x2, full budget, final evaluation): the base | GPU-hours 0.51 (paper) | "
                    f"{h100}, graph+compile+fused: train not measured, val not measured, SWA not measured, eval not "
                    "measured per trial")
    cfg = parse_spec(raw).config_for({}, 10)
    assert lines[lines.index(unit) + 1] == "  config " + json.dumps(cfg.to_flat(), sort_keys=True)
    assert lines[lines.index(unit) + 2] == "  eps_max  " + " ".join(
        f"{round(x, 6):g}" for x in schedule_table(cfg)["eps_max"])
    assert lines[lines.index(unit) + 2].startswith("  eps_max  0.005602 0.011204 ")  # 6 decimals
    assert lines[lines.index("schedules:") + 1].endswith("  [confirm top-2, search]")
    assert ('search space {"method.beta": {"float": [0, 1]}}; confirm {\'top_k\': 2, \'seeds\': [10, 11]}'
            in lines)
    whole = []
    dry_run(tiny_spec(resources={"cpu": 1, "gpu": 1}), out=whole.append, gpu="t1000", records=records)
    first = next(ln for ln in whole if ln.startswith("- "))
    assert first == (f"- r seed 0: the base | GPU-hours 0.51 (paper) | {GPU}, graph+compile+fused: train 0.00, "
                     "val 0.01, SWA 0.02, eval 0.00")
    demo = []
    dry_run(load_spec(SPECS / "mnist5k-demo.yaml"), out=demo.append)
    assert demo[0].startswith("sweep mnist5k-demo: preset mnist5k-ssat-mbi, stage demo, 14 trial(s), resources ")
    assert "  eps 0.3; rho 0.05; lr 0.05, then x0.1 from 49  [const|off, const|on, standard]" in demo
    amb = []
    dry_run(tiny_spec(), out=amb.append, gpu="NVIDIA", records=records)
    assert amb[1] == (f"  (--gpu 'NVIDIA' names several measured GPUs: {h100}, {GPU}; name one. The paper's figures "
                      "only)")
    gone = []
    dry_run(tiny_spec(), out=gone.append, gpu="A100", records=records)
    assert ("  what is not measured, measured on a A100: python -m sweeps calibrate SPEC --missing-only (minutes; the "
            "dry run then reads your figures first)") in gone


def test_the_dry_run_with_reuse_marks_the_reused_trials_and_says_what_they_save():
    """run --dry-run --reuse: the trials a finished run of the store stands in for (sweeps.driver.reuse) are marked, and
    their cost is said as saved (the paper's GPU-hours of a CIFAR grid here)."""
    from sweeps.costs.dryrun import dry_run
    from sweeps.spec import load_spec

    spec = load_spec(SPECS / "paper-table2-ablation.yaml")
    lines = []
    est = dry_run(spec, lines.append, records=[], reused={("linear|on", 0): "old-sweep", ("linear|on", 1): "old-sweep",
                                                           ("const|off", 2): "other"})
    marked = [ln for ln in lines if ln.endswith(("| reused from old-sweep", "| reused from other"))]
    assert len(marked) == 3 and all(ln.startswith(("- linear|on seed 0", "- linear|on seed 1", "- const|off seed 2"))
                                    for ln in marked)
    one = est["units"][0]["paper_gpu_hours"]
    assert est["reuse"]["trials"] == 3 and abs(est["reuse"]["paper_gpu_hours"] - 3 * one) < 1e-9
    said = next(ln for ln in lines if ln.startswith("reuse: "))
    assert said == ("reuse: 3 of 18 trials have a finished run in the store (2 from old-sweep, 1 from other) "
                    f"and would not train: saves {3 * one:.1f} GPU-h of the paper's")
    assert dry_run(spec, lines.append, records=[], reused={}).get("reuse") == {
        "trials": 0, "paper_gpu_hours": 0, "gpu_hours": 0, "cpu_seconds": 0}


def test_what_reuse_saves_on_the_paper_on_a_gpu_and_here():
    from sweeps.costs.dryrun import reuse_text

    units = [{"row": "a", "seed": 0, "paper_gpu_hours": 1.5, "gpu_hours": {"train": 0.25, "aa": 0.5},
              "cpu_seconds": 90.0},
             {"row": "a", "seed": 1, "paper_gpu_hours": None, "gpu_hours": {"train": None}, "cpu_seconds": None},
             {"row": "b", "seed": 0, "paper_gpu_hours": 7.0, "gpu_hours": {"train": 9.0}, "cpu_seconds": 600.0}]
    est = {"trials": 3, "gpu": "H200", "units": units}
    reused = {("a", 0): "s1", ("a", 1): "s0", ("c", 9): "s1"}  # (c, 9) is no trial of this spec
    assert reuse_text(est, reused) == (
        "reuse: 2 of 3 trials have a finished run in the store (1 from s0, 1 from s1) and would not train: saves "
        "1.50 GPU-h of the paper's, 0.75 GPU-h on H200, 1.5 trial-minutes here")
    assert est["reuse"] == {"trials": 2, "paper_gpu_hours": 1.5, "gpu_hours": 0.75, "cpu_seconds": 90.0}
    bare = {"trials": 3, "units": [{**u, "paper_gpu_hours": None, "cpu_seconds": None} for u in units]}
    assert reuse_text(bare, {("b", 0): "s1"}) == ("reuse: 1 of 3 trials have a finished run in the store (1 from "
                                                   "s1) and would not train")  # nothing measured: nothing said saved


def test_gpu_hours_eps_and_a_partly_measured_stage_as_they_are_read():
    from ssat.config import from_dict
    from ssat.presets import preset
    from sweeps.costs.dryrun import _eps_fmt, gh, stage_text

    assert [gh(x) for x in (0, 10, 9.999, 0.1, 0.0999, 123.456)] == ["0.0", "10.0", "10.00", "0.10", "0.1",
                                                                      "123.5"]
    assert gh(0.0999) == f"{0.0999:.2g}" and gh(0.05) == "0.05"
    cifar = from_dict(preset("cifar10-ssat-mbi"))  # eps 8/255
    fmt = _eps_fmt(cifar)
    assert (fmt(8 / 255), fmt(2 / 255), fmt(8.5 / 255), fmt(0.1 / 255)) == ("8/255", "2/255", "8.5/255", "0.1/255")
    mnist = from_dict(preset("mnist5k-ssat-mbi"))  # eps 0.3: not k/255
    assert _eps_fmt(mnist)(0.3) == "0.3" and _eps_fmt(mnist)(0.123456) == "0.1235"
    assert _eps_fmt(cifar.replace(**{"attack.eps": 8.4 / 255}))(8.4 / 255) == "0.03294"  # 8.4/255 is no k/255
    st = {"of": 4, "not_measured": 1, "gpu_hours": 2.5, "sources": ["H200 measured 2026-11-28", "paper"],
          "missing": ["wrn-28-5 evaluation: clean", "wrn-28-5 evaluation: pgd10", "teacher"]}
    assert stage_text(st, "grid", "H200") == (
        "2.50 GPU-h for 3 of 4 trial(s) (H200 measured 2026-11-28; paper); not measured on H200: wrn-28-5 "
        "evaluation: clean, pgd10; teacher (the other 1)")

"""The dry run of CPU trials: their wall time on this machine from figures measured now (sweeps/costs/wall_time.py), by
hand from given figures, and one real measurement of the demo's training configuration."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import sweeps.costs.wall_time as W
from ssat.config import from_dict
from ssat.datasets import split_for
from ssat.presets import preset
from sweeps.costs.dryrun import dry_run
from sweeps.spec import load_spec, parse_spec

DEMO = Path(__file__).resolve().parents[4] / "sweeps" / "specs" / "mnist5k-demo.yaml"
PAPER = "whole-GPU trials at the paper's Table 8 per-epoch times, training only"


def demo(**kw):
    return load_spec(DEMO, **kw)


@pytest.mark.parametrize("dotted, steps", [
    ({}, 28),  # 100 labeled + 3,400 unlabeled in batches of 128: 27 and one of 44
    ({"optim.batch_size": 32, "data.n_unlabeled": 500}, 19),  # the demo's: 600 images
    ({"data.n_val": 1055, "data.fully_labeled": True, "method.lam": 0.0}, 23),  # 2,945 = 23 x 128 + 1 labeled
    ({"data.n_labeled": 250, "data.n_unlabeled": 500, "optim.batch_size": 64}, 12),  # 750 = 11 x 64 + 46
    ({"data.unlabeled_includes_labeled": True}, 29),  # 100 + 3,500
    ({"data.unlabeled_includes_labeled": True, "data.n_val": 130}, 32),  # 100 + 3,870 = 31 x 128 + 2
    ({"data.fully_labeled": True, "data.unlabeled_includes_labeled": True, "method.lam": 0.0}, 28),  # no unlabeled
    ({"optim.batch_size": 32, "data.n_unlabeled": 189}, 9)])  # 289 = 9 x 32 + 1: the single image is left out
def test_epoch_steps_are_the_splits_batches(dotted, steps):
    cfg = from_dict(preset("mnist5k-ssat-mbi"), dotted)
    _, split = split_for(cfg)  # the real split of the shipped MNIST-5k
    n, b = len(split.labeled) + len(split.unlabeled), cfg.optim.batch_size
    assert W.epoch_steps(cfg) == n // b + (n % b >= 2) == steps


def test_an_awr_epoch_is_a_pass_over_the_unlabeled_images():
    cfg = from_dict(preset("mnist5k-ssat-mbi-awr"))
    _, split = split_for(cfg)
    assert len(split.unlabeled) == 3400 and cfg.optim.unlabeled_batch == 128
    assert W.epoch_steps(cfg) == 27  # 26 batches of 128 and one of 72
    assert W.epoch_steps(cfg.replace(**{"data.n_unlabeled": 129})) == 1  # 128 + 1: the single image is left out
    assert W.epoch_steps(cfg.replace(**{"data.n_unlabeled": 130})) == 2


def test_rows_that_differ_in_values_only_share_a_training_figure():
    us = W.units(demo())
    keys = {u.row: W.step_key(u.cfg) for u in us}
    assert keys["const|off"] == keys["linear|off"] == keys["curious|off"]  # schedules: values, not work
    assert keys["const|on"] == keys["linear|on"] == keys["curious|on"] != keys["const|off"]  # interpolation: work
    assert keys["standard"] not in (keys["const|on"], keys["const|off"])  # lambda 0: no attack
    assert len({W.step_key(u.cfg) for u in us}) == 3 and W.step_key(us[0].cfg) == W.step_key(us[1].cfg)  # seeds
    cfg = us[0].cfg
    for k, v in (("attack.steps", 5), ("model.name", "resnet18"), ("optim.batch_size", 64),
                 ("system.threads", 2), ("method.beta", 1.0)):
        assert W.step_key(cfg.replace(**{k: v})) != W.step_key(cfg), k
    for k, v in (("optim.lr", 0.2), ("eval.val_every", 2), ("teacher.steps", 9), ("method.tau", 1.0),
                 ("optim.epochs", 80), ("data.n_unlabeled", 50), ("seed", 5), ("method.rho0", 0.1),
                 ("optim.momentum", 0.5), ("optim.weight_decay", 0.0), ("optim.nesterov", True),
                 ("optim.swa_start", 65), ("attack.eps", 0.2), ("attack.gamma", 1.5), ("attack.step_ratio", 0.3),
                 ("method.label_smoothing", 0.1), ("method.gamma_prime", 2.0), ("method.rho_double_epoch", 50)):
        assert W.step_key(cfg.replace(**{k: v})) == W.step_key(cfg), k
    svhn = from_dict(preset("svhn-ssat-mbi"), {"model.name": "cnn-small"})
    assert json.loads(W.step_key(svhn))["data.dataset"] == "svhn"  # the images' size and count per class differ


def test_trials_at_once_and_in_what_order():
    spec = demo()  # max_concurrent 2, one CPU a trial
    assert [W.concurrency(spec, c) for c in (1, 2, 8)] == [1, 2, 2]
    wide = demo(max_concurrent=4)
    assert [W.concurrency(wide, c) for c in (3, 8)] == [3, 4]
    two = parse_spec({**spec.source, "resources": {"cpu": 2, "gpu": 0}, "max_concurrent": 4})
    assert [W.concurrency(two, c) for c in (1, 4, 5, 16)] == [1, 2, 2, 4]
    tenth = parse_spec({**spec.source, "resources": {"cpu": 0.1, "gpu": 0}, "max_concurrent": 20})
    assert [W.concurrency(tenth, c) for c in (1, 3)] == [10, 20]  # 1 // 0.1 is 9.0 in floating point
    assert W.makespan([3, 1, 1, 1], 2) == 3 and W.makespan([1, 1, 1], 2) == 2 and W.makespan([], 3) == 0
    assert W.makespan([1, 1, 3], 2) == 4  # in the spec's order, each to the first free slot: not sorted
    assert W.makespan([2, 2, 2, 2], 4) == 2 and W.makespan([5, 1, 1], 1) == 7


def figures(spec, **over) -> dict:
    """Given figures for the demo: 10, 20 and 5 ms a step (interpolation off, on, lambda 0), evaluation 1, 2 and 4
    s/1000 images (clean, PGD-10, PGD-20), the teacher 10 steps/s."""
    us = W.units(spec)
    step = {u.row: W.step_key(u.cfg) for u in us}
    figs = {"training": {step["const|off"]: 0.01, step["const|on"]: 0.02, step["standard"]: 0.005},
            "eval": {json.dumps(["cnn-small", False]): {"clean": 1.0, "pgd10": 2.0, "pgd20": 4.0}},
            "teacher": {W.teacher_identity(us[0].cfg): 10.0}, "errors": [], "seconds": 2.5, "load": 1.25}
    return {**figs, **over}


def test_the_demos_wall_time_by_hand():
    spec = demo()
    wt = W.wall_time(spec, figures(spec), cores=2)
    # a trial: 70 epochs x 19 steps x its step; validation at epochs 10, 20, ..., 70 and 69: 8 x 500 images x (1 + 2)
    # s/1000 = 12 s; SWA averages weights (no BN pass); the final PGD-20 and clean pass on the 1,000 test images: 5 s
    on, off, std = 70 * 19 * 0.02 + 17, 70 * 19 * 0.01 + 17, 70 * 19 * 0.005 + 17
    assert wt["units"][0] == {"training": pytest.approx(13.3), "validation": pytest.approx(12.0), "SWA": 0,
                              "evaluation": pytest.approx(5.0)}
    assert [round(sum(u.values()), 6) for u in wt["units"]] == [round(x, 6) for x in [off] * 6 + [on] * 6 + [std] * 2]
    assert (wt["trials"], wt["concurrency"], wt["teachers"], wt["complete"]) == (14, 2, 1, True)
    assert wt["trials_s"] == pytest.approx(3 * off + 3 * on + std)  # two at a time, pair by pair
    assert wt["teachers_s"] == pytest.approx(50.0) and wt["total_s"] == pytest.approx(50 + 3 * off + 3 * on + std)
    assert wt["trial_s"] == [pytest.approx(std), pytest.approx(on)]
    assert W.wall_time(spec, figures(spec), cores=1)["trials_s"] == pytest.approx(6 * off + 6 * on + 2 * std)
    # a figure that failed: that stage is not measured and the total a lower bound
    part = W.wall_time(spec, figures(spec, eval={json.dumps(["cnn-small", False]): {"clean": 1.0, "pgd10": 2.0}}), 2)
    assert part["units"][0]["evaluation"] is None and part["units"][0]["validation"] == pytest.approx(12.0)
    assert not part["complete"] and W.total_text(part).startswith("at least ")
    no_teacher = W.wall_time(spec, figures(spec, teacher={}), cores=2)
    assert not no_teacher["complete"] and no_teacher["total_s"] == pytest.approx(3 * off + 3 * on + std)


def test_a_trials_seconds_take_its_own_figures():
    from sweeps.costs.model import attack_work, final_images

    spec = demo()
    cfg = spec.trials()[0].config
    assert W.trial_seconds(cfg, "grid", figures(spec, eval={})) == {
        "training": pytest.approx(13.3), "validation": None, "SWA": 0, "evaluation": None}  # no figure: not measured
    tf32 = cfg.replace(**{"eval.tf32": True})
    figs = figures(spec)
    figs["eval"][json.dumps(["cnn-small", True])] = {"clean": 10.0, "pgd10": 20.0, "pgd20": 40.0}
    assert W.trial_seconds(tf32, "grid", figs)["evaluation"] == pytest.approx(50.0)  # TF32's own figures
    c = from_dict(preset("cifar10-ssat-mbi"), {"eval.test_n": 1000, "eval.autoattack_n": 100})
    attacks = attack_work(final_images(c, "grid"), "cifar10")
    assert attacks["apgd-t"] == pytest.approx(100 * 0.5539)  # run on the images still robust (sweeps.costs.model)
    per = {a: 1.0 for a in attacks}
    got = W.trial_seconds(c, "grid", {"training": {}, "eval": {json.dumps([c.model.name, False]): per}})
    assert got["evaluation"] == pytest.approx(sum(attacks.values()) / 1000) and got["training"] is None


def test_durations_read_well():
    assert [W.dur(s) for s in (0.453, 8.26, 41.4, 119, 120, 295.35, 7199, 7200, 8460)] == [
        "0.45 s", "8.3 s", "41 s", "119 s", "2.0 min", "4.9 min", "120.0 min", "2.0 h", "2.4 h"]
    assert W.unit_text({"training": 13.3, "validation": None, "SWA": 0, "evaluation": 5.0}) == (
        "this machine: train 13 s, val not measured, SWA -, eval 5 s")


def test_a_cpu_specs_dry_run_gives_its_wall_time_here_not_zero_gpu_hours(monkeypatch):
    spec = demo()
    monkeypatch.setattr(W, "measure", lambda s: figures(s))
    monkeypatch.setattr(W, "machine", lambda: "Test CPU 9000")
    monkeypatch.setattr(W.os, "sched_getaffinity", lambda pid: {0, 1})
    lines = []
    est = dry_run(spec, out=lines.append, measure=True)
    text = "\n".join(lines)
    assert "GPU-hours" not in text and "measurements in benchmarks/results/" not in text
    assert lines[1] == ('- const|off seed 0: attack.schedule="const", method.interpolate=false | CPU trial | this '
                        "machine: train 13 s, val 12 s, SWA -, eval 5 s")
    block = lines[lines.index(next(ln for ln in lines if ln.startswith("wall time"))):]
    assert block[:6] == [
        "wall time on this machine (Test CPU 9000, 2 core(s)), from figures measured here now (in 2.5 s, load "
        "average 1.2 then: a busy machine measures slower; --no-measure skips it):",
        "  training   cnn-small ssat-mbi: 10.0 ms a step x 19 steps = 0.19 s an epoch on 1 thread(s) [const|off, "
        "linear|off, curious|off]",
        "  training   cnn-small ssat-mbi (method.interpolate=true): 20.0 ms a step x 19 steps = 0.38 s an epoch on 1 "
        "thread(s) [const|on, linear|on, curious|on]",
        "  training   cnn-small ssat-mbi (method.lam=0.0): 5.0 ms a step x 19 steps = 0.095 s an epoch on 1 thread(s) "
        "[standard]",
        "  evaluation cnn-small: clean 1, pgd10 2, pgd20 4 s/1000 images",
        "  teacher    cnn-small: 10.0 FixMatch steps/s x 500 steps = 50 s"]
    assert block[6] == "  teachers   50 s: 1 teacher(s), one after another on the driver, before the trials"
    assert block[7] == ("  trials     4.1 min: 14 trial(s) of 24 s to 44 s each, 2 at a time (max_concurrent 2, "
                        "1 CPU(s) a trial on 2 core(s))")
    assert block[8] == "  total      4.9 min wall time" and block[9] == "  not measured: " + W.NOT_MEASURED
    assert len(block) == 11 and W.NOT_MEASURED.startswith("Ray's start and each trial's start-up")
    assert lines[-1] == "total: 14 CPU trial(s); on this machine: 4.9 min wall time (measured now); nothing was started"
    assert est["cpu"]["total_s"] == pytest.approx(50 + 3 * 30.3 + 3 * 43.6 + 23.65)
    assert est["units"][0]["cpu_seconds"]["training"] == pytest.approx(13.3)
    failed = []
    figs = figures(spec, teacher={}, errors=["teacher: RuntimeError: no"])
    figs["training"][W.step_key(W.units(spec)[-1].cfg)] = None
    figs["eval"][json.dumps(["cnn-small", True])] = {}
    monkeypatch.setattr(W, "measure", lambda s: figs)
    dry_run(spec, out=failed.append, measure=True)
    assert "  training   cnn-small ssat-mbi (method.lam=0.0): not measured [standard]" in failed
    assert "  evaluation cnn-small TF32: not measured" in failed
    assert "- standard seed 1: " in failed[14] and failed[14].endswith("this machine: train not measured, val 12 s, "
                                                                       "SWA -, eval 5 s")
    assert "  teacher    cnn-small: not measured" in failed
    assert "  failed to measure: teacher: RuntimeError: no" in failed
    assert failed[-1] == ("total: 14 CPU trial(s); on this machine: at least 4.0 min wall time (measured now); nothing "
                          "was started")


def test_without_measuring_a_cpu_spec_says_it_was_not_timed():
    lines = []
    est = dry_run(demo(), out=lines.append)
    assert "cpu" not in est and est["cpu_trials"] is True
    assert lines[1].endswith("| CPU trial | this machine: not timed (--no-measure)")
    assert lines[-1] == ("total: 14 CPU trial(s); wall time on this machine not measured (--no-measure); nothing was "
                         "started")
    cifar = parse_spec({"name": "c", "preset": "cifar10-ssat-mbi", "seeds": [0], "resources": {"cpu": 1, "gpu": 0.5},
                        "grid": [{"row": "r", "set": {}}]}, cpu_only=True)  # --cpu-only: CPU trials, a paper figure
    cl = []
    dry_run(cifar, out=cl.append)
    assert cl[1].endswith("| GPU-hours 5.10 (paper) | this machine: not timed (--no-measure)")
    assert cl[-1] == (f"total: 1 CPU trial(s); wall time on this machine not measured (--no-measure); the paper's: 5.1 "
                      f"GPU-h ({PAPER}); nothing was started")


def test_measuring_the_demos_figures_here(capsys):
    spec = demo(rows=["linear|on"], seeds=[0])  # one training configuration (SWA averaged: swa_bn average)
    capsys.readouterr()
    figs = W.measure(spec)
    assert capsys.readouterr() == ("", "")  # the Trainer's log kept off the console
    assert figs["errors"] == []
    (step,) = figs["training"].values()
    assert 0 < step < 5 and list(figs["training"]) == [W.step_key(spec.trials()[0].config)]
    per = figs["eval"][json.dumps(["cnn-small", False])]
    assert set(per) == {"clean", "pgd10", "pgd20"} and per["clean"] < per["pgd10"] < per["pgd20"]
    (rate,) = figs["teacher"].values()
    assert rate > 0 and figs["seconds"] > 0 and figs["load"] >= 0
    wt = W.wall_time(spec, figs)
    assert wt["complete"] and wt["trials"] == 1 and wt["total_s"] > wt["trials_s"] > 0


def test_a_config_that_averages_swa_weights_can_be_timed(tmp_path):
    from sweeps.costs.measure import training_config

    cfg = demo().trials()[0].config
    assert (cfg.optim.swa_start, cfg.optim.swa_bn) == (60, "average")
    timed = training_config({"config": cfg.to_dict(), "steps": 2, "device": "cpu"}, tmp_path)
    assert (timed.optim.swa_start, timed.optim.swa_bn) == (None, "recompute")  # no SWA while timing: a valid config


def test_trials_on_a_gpu_are_never_timed_here_and_keep_the_gpu_lines(monkeypatch):
    def no(spec):
        raise AssertionError("GPU trials timed on this machine")

    monkeypatch.setattr(W, "measure", no)
    gpu = parse_spec({**demo().source, "resources": {"cpu": 1, "gpu": 0.25}})
    lines = []
    est = dry_run(gpu, out=lines.append, measure=True)
    assert "cpu" not in est and est["cpu_trials"] is False
    assert lines[1].endswith("| GPU-hours n/a (no per-epoch figure for this dataset and model)")
    assert lines[-2].startswith("measurements in benchmarks/results/: ")
    assert lines[-1] == (f"total: 14 trial(s), estimated GPU-hours 0.0 ({PAPER}; 14 trial(s) without a figure); "
                         "nothing was started")


def test_cpu_trials_with_a_gpu_named_get_both(monkeypatch):
    from sweeps.costs.measurements import read_records

    spec = demo()
    monkeypatch.setattr(W, "measure", lambda s: figures(s))
    monkeypatch.setattr(W.os, "sched_getaffinity", lambda pid: {0, 1})
    lines = []
    dry_run(spec, out=lines.append, measure=True, gpu="NVIDIA H200", records=read_records())
    assert "GPU-hours on NVIDIA H200 per stage:" in lines and "  total      0.0 GPU-h" in lines
    assert lines.index("GPU-hours on NVIDIA H200 per stage:") > lines.index(
        next(ln for ln in lines if ln.startswith("wall time on this machine")))
    assert lines[-1].startswith("total: 14 CPU trial(s); on this machine: 4.9 min wall time (measured now); nothing")
    assert lines[3].endswith("| CPU trial | this machine: train 13 s, val 12 s, SWA -, eval 5 s | NVIDIA H200, "
                             "graph+compile+fused: train -, val -, SWA -, eval -")  # no GPU-hours: CPU trials


def test_the_dryrun_command_times_cpu_trials_unless_told_not(monkeypatch, capsys):
    from sweeps.costs.dryrun import main

    monkeypatch.setattr(W, "measure", lambda s: figures(s))
    monkeypatch.setattr(W.os, "sched_getaffinity", lambda pid: {0, 1})
    assert main([str(DEMO)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == ("total: 14 CPU trial(s); on this machine: 4.9 min wall time "
                                                        "(measured now); nothing was started")


def test_the_search_and_uniform_trials_read_so(monkeypatch):
    spec = demo(rows=["const|on"])  # two trials alike: "of 44 s each"
    wt = W.wall_time(spec, figures(demo()), cores=2)
    text = W.lines(spec, wt)
    assert text[-3] == ("  trials     44 s: 2 trial(s) of 44 s each, 2 at a time (max_concurrent 2, 1 CPU(s) a trial "
                        "on 2 core(s))")
    search = load_spec(DEMO.parent / "mnist5k-search.yaml")
    base = W.step_key(search.base_config())
    figs = {"training": {base: 0.01}, "eval": {json.dumps(["cnn-small", False]): {"clean": 1.0, "pgd10": 2.0,
                                                                                   "pgd20": 4.0, "pgd40": 8.0}},
            "teacher": {}, "errors": [], "seconds": 1.0}
    wt = W.wall_time(search, figs, cores=2)
    assert [u.stage for u in W.units(search)] == ["search", "confirm", "confirm"]
    assert wt["units"][0]["evaluation"] == 0 and wt["units"][1]["evaluation"] > 0  # search trials: no final one
    lines = W.lines(search, wt)
    assert lines[-3].endswith(" core(s)); search trials at full length: at most, as ASHA may stop them early")
    assert lines[0].endswith("(in 1 s; --no-measure skips it):")  # no load average given: none said


def test_swa_bn_passes_are_timed_over_the_epochs_images():
    spec = demo(rows=["const|on"], seeds=[0], sets={"optim.swa_bn": "recompute"})
    figs = figures(demo())
    figs["eval"][json.dumps(["cnn-small", False])]["swa-bn"] = 0.5
    (secs,) = W.wall_time(spec, figs, cores=2)["units"]
    assert secs["SWA"] == pytest.approx(10 * 19 * 32 / 1000 * 0.5)  # epochs 61-70, 19 batches of 32 each
    del figs["eval"][json.dumps(["cnn-small", False])]["swa-bn"]
    assert W.trial_seconds(spec.trials()[0].config, "grid", figs)["SWA"] is None


def test_what_is_timed_and_how(monkeypatch):
    from ssat.engine import GRAPH_WARMUP

    calls = []

    def timed(kind, cfg, threads, **job):
        calls.append((kind, threads, job))
        if kind == "training":
            return [{"schedule_change_s": 0.4, "steps_timed": job["steps"], "step_ms": 50.0}], ""
        if kind == "eval":
            return [{"attack": a, "s_per_1000": 1.0} for a in job["attacks"]], ""
        return None, "RuntimeError: no teacher"

    monkeypatch.setattr(W, "_timed", timed)
    figs = W.measure(demo())
    assert [c[0] for c in calls] == ["training"] * 3 + ["eval", "teacher"]  # each distinct configuration once
    assert calls[0][1:] == (1, {"steps": W.TRAIN_STEPS})
    assert calls[3][1:] == (1, {"attacks": ["clean", "pgd10", "pgd20"], "n": 100, "aa_n": W.AA_N})
    assert calls[4][1:] == (None, {"steps": W.TEACHER_STEPS, "warmup": 1})  # the driver's threads
    step = (0.4 + W.TRAIN_STEPS * 0.05) / (GRAPH_WARMUP + 1 + W.TRAIN_STEPS)  # every step timed, on a CPU alike
    assert list(figs["training"].values()) == [pytest.approx(step)] * 3
    assert figs["teacher"] == {W.teacher_identity(demo().trials()[0].config): None}
    assert figs["errors"] == ["teacher: RuntimeError: no teacher"]
    assert 0 < figs["seconds"] < 30
    calls.clear()
    monkeypatch.setattr(W.os, "getloadavg", lambda: (1.5, 2.5, 3.5))
    small = demo(sets={"eval.batch_size": 50, "system.threads": 3, "eval.tf32": True})
    figs = W.measure(small)
    assert calls[0][1] == calls[3][1] == calls[4][1] == 3  # system.threads wins, the teacher's too
    assert calls[3][2]["n"] == 50 and figs["load"] == 1.5  # at most eval.batch_size images; the 1-minute load
    assert list(figs["eval"]) == [json.dumps(["cnn-small", True])]
    monkeypatch.setattr(W, "_timed", lambda kind, cfg, threads, **job: (None, f"E {kind}"))
    assert W.measure(demo())["errors"] == ["training (const|off): E training", "training (const|on): E training",
                                            "training (standard): E training", "evaluation (cnn-small): E eval",
                                            "teacher: E teacher"]
    search = load_spec(DEMO.parent / "mnist5k-search.yaml", sets={"eval.autoattack": True,
                                                                   "eval.autoattack_seeds": [0]})
    calls.clear()
    monkeypatch.setattr(W, "_timed", timed)
    W.measure(search)  # AutoAttack only for seed 0, a search trial's: none runs (no final evaluation in a search)
    assert calls[1][2]["attacks"] == ["clean", "pgd10", "pgd20"]


def test_a_job_runs_on_the_trials_threads_and_restores_them(monkeypatch):
    import torch

    import sweeps.costs.measure as M

    before = torch.get_num_threads()
    monkeypatch.setattr(M, "run_here", lambda job: [torch.get_num_threads(), job["device"], job["kind"]])
    assert W._timed("eval", demo().base_config(), 3) == ([3, "cpu", "eval"], "")
    assert torch.get_num_threads() == before


def test_a_job_that_fails_is_not_measured_with_its_reason(monkeypatch):
    import sweeps.costs.measure as M

    def boom(job):
        raise RuntimeError("x" * 300)

    monkeypatch.setattr(M, "run_here", boom)
    assert W._timed("eval", demo().base_config(), 1) == (None, "RuntimeError: " + "x" * 200)


def test_one_trial_and_settings_that_differ_in_two_keys(monkeypatch):
    raw = {**demo().source, "seeds": [0], "grid": [{"row": "a", "set": {}},
                                                   {"row": "b", "set": {"attack.steps": 5, "method.K": 2}}]}
    spec = parse_spec(raw)
    us = W.units(spec)
    figs = {"training": {W.step_key(us[0].cfg): 0.5, W.step_key(us[1].cfg): 0.00125}, "eval": {}, "teacher": {},
            "errors": [], "seconds": 1.0}
    text = W.lines(spec, W.wall_time(spec, figs, cores=2))
    assert text[1] == "  training   cnn-small ssat-mbi: 500.0 ms a step x 19 steps = 9.5 s an epoch on 1 thread(s) [a]"
    assert text[2].startswith("  training   cnn-small ssat-mbi (attack.steps=5, method.K=2): 1.2 ms a step x 19 ")
    one = parse_spec({**raw, "grid": raw["grid"][:1]})
    assert W.lines(one, W.wall_time(one, figs, cores=2))[1] == text[1]  # a single trial: its own base


def test_the_machine_is_named_by_its_processor(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU: v2 @ 2GHz\nflags\t: x\n")
    assert W.machine(str(info)) == "Some CPU: v2 @ 2GHz"
    info.write_text("processor\t: 0\n")  # no model name (some ARM kernels): the platform's word
    monkeypatch.setattr(W.platform, "processor", lambda: "")
    monkeypatch.setattr(W.platform, "machine", lambda: "aarch64")
    assert W.machine(str(info)) == "aarch64" and W.machine(str(tmp_path / "none")) == "aarch64"
    monkeypatch.setattr(W.platform, "processor", lambda: "arm")
    assert W.machine(str(info)) == "arm"
    monkeypatch.setattr(W.platform, "processor", lambda: "")
    monkeypatch.setattr(W.platform, "machine", lambda: "")
    assert W.machine(str(info)) == "unknown processor"


def test_the_machines_own_processor():
    try:
        with open("/proc/cpuinfo") as f:
            expected = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pytest.skip("no model name in /proc/cpuinfo here")
    assert W.machine() == expected and expected

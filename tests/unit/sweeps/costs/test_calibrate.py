"""`python -m sweeps calibrate`: which figures it measures, how a figure is timed and scaled, what it refuses,
and the dry run reading a user's own figures first. The measuring processes themselves run on the CPU in
tests/slow/test_calibrate_cpu.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ssat.config import from_dict
from ssat.presets import preset
from sweeps.costs import calibrate as cal
from sweeps.costs import measure
from sweeps.costs.model import eval_key, needed_figures, teacher_figure_key, training_key
from sweeps.costs.measurements import Measurements, calibration_dir, read_records
from sweeps.costs.dryrun import dry_run
from sweeps.spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[4]
TINY = ROOT / "tests" / "data" / "calibrate-tiny.yaml"


def test_the_figures_of_a_spec_are_what_its_cost_model_asks_for():
    spec = load_spec(TINY)
    need = needed_figures(spec)
    training = sorted(k[2] for k in need if k[0] == "training")
    assert training == ["rst", "ssat-mbi", "ssat-mbi-awr"]  # a figure per method, not per batching
    assert {k[1:] for k in need if k[0] == "teacher"} == {("cnn-small", "bf16")}  # one split: one teacher
    attacks = {k[2] for k in need if k[0] == "eval"}
    # validation: clean, PGD-10; SWA recomputes BN statistics; final: PGD-10 and AutoAttack's four attacks
    assert attacks == {"clean", "pgd10", "swa-bn", "apgd-ce", "apgd-t", "fab-t", "square"}
    assert all(k[3] is False for k in need if k[0] == "eval")  # eval.tf32 off: strict fp32 figures
    # trials on CPUs need no GPU figure at all
    assert needed_figures(load_spec(TINY, cpu_only=True)) == {}


def test_each_figure_comes_with_a_config_that_needs_it():
    need = needed_figures(load_spec(TINY))
    for key, cfg in need.items():  # calibrate builds the figure's process from this config
        derive = {"training": lambda: training_key(cfg), "teacher": lambda: teacher_figure_key(cfg),
                  "eval": lambda: eval_key(cfg, key[2])}[key[0]]
        assert key[1:] == derive(), key
    # the AWR figure is measured on an AWR config, not the first trial's
    (awr,) = [cfg for key, cfg in need.items() if key[0] == "training" and key[2] == "ssat-mbi-awr"]
    assert awr.method.name == "ssat-mbi-awr"


def test_a_search_trial_needs_no_final_evaluation_figure():
    """Search trials end without a final evaluation (sweeps/trials/trainable.py): AutoAttack on seed 0 only, run by the
    search's seed 0 and never by the confirm seed, is not a figure the sweep needs."""
    raw = {"name": "s", "preset": "mnist5k-ssat-mbi", "epochs": 4, "seeds": [0], "resources": {"cpu": 1, "gpu": 0.25},
           "overrides": {"eval.autoattack_seeds": [0]},
           "search": {"num_samples": 2, "space": {"method.beta": {"float": [0.0, 1.0]}},
                      "confirm": {"top_k": 1, "seeds": [10]}}}
    attacks = {k[2] for k in needed_figures(parse_spec(raw)) if k[0] == "eval"}
    assert attacks == {"clean", "pgd10", "pgd20", "pgd40"}  # validation, the confirm trial's PGD-k, no AutoAttack


def test_plan_groups_a_models_evaluation_into_one_process_and_skips_what_is_measured(tmp_path):
    spec = load_spec(TINY)
    items = cal.plan([spec])
    assert [i.kind for i in items] == ["training"] * 3 + ["teacher", "eval"]
    assert len(items[-1].keys) == 7 and items[-1].label.startswith("eval cnn-small (")
    assert [i.label for i in cal.plan([spec], kinds=("eval",))] == [items[-1].label]
    # a spec given twice, or two specs sharing figures: each figure once
    assert len(cal.plan([spec, load_spec(TINY)])) == 5
    # --missing-only: a measured figure is left out
    rec = {"device": "GPU X", "bench": "teacher", "teacher_model": "cnn-small", "precision": "bf16",
           "steps_per_s": 3.0, "compile": "off"}
    (tmp_path / "x.json").write_text(json.dumps(rec) + "\n")
    measured = Measurements("GPU X", read_records(tmp_path))
    assert [i.kind for i in cal.plan([spec], measured)] == ["training"] * 3 + ["eval"]
    # TF32 evaluation figures are figures of their own
    tf32 = load_spec(TINY, sets={"eval.tf32": True})
    assert all(k[3] is True for i in cal.plan([tf32], kinds=("eval",)) for k in i.keys)


def test_only_compiling_training_steps_on_a_gpu_go_through_the_compile_phase():
    items = cal.plan([load_spec(TINY)])
    assert [cal.compiles(i, "cuda") for i in items] == [True, True, True, False, False]
    assert not any(cal.compiles(i, "cpu") for i in items)
    eager = cal.plan([load_spec(TINY, sets={"system.compile": "off"})])
    assert not any(cal.compiles(i, "cuda") for i in eager)


def test_groups_fit_the_gpu_memory_measured_in_the_compile_phase():
    items = cal.plan([load_spec(TINY)])
    for it, peak in zip(items, (40.0, 30.0, 20.0, None, None)):
        it.peak_gib = peak

    class Args:
        jobs = 16

    c = object.__new__(cal.Calibration)
    c.items, c.args, c.gpu_gib = items, Args(), 100.0  # 80 GiB usable: 40 + 30, then 20 + 6 + 6 (assumed)
    assert [[i.kind for i in g] for g in c.groups()] == [["training", "training"], ["training", "teacher", "eval"]]
    c.args.jobs = 2
    assert [len(g) for g in c.groups()] == [2, 2, 1]
    items[0].error = "failed to compile"
    assert sum(len(g) for g in c.groups()) == 4  # a figure that failed is not measured again


def test_no_gpu_is_refused_before_anything_runs(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    from sweeps.cli import main

    assert main(["calibrate", str(TINY), "--workdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "calibrate measures this machine's GPU, and no CUDA GPU is visible here" in err
    assert "--device cpu only tries the code path" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("flag,value,allowed", [("--jobs", "0", ">= 1"), ("--steps", "0", ">= 1"),
                                               ("--eval-n", "1", ">= 2"), ("--budget", "0", "minutes > 0")])
def test_bad_options_name_themselves(tmp_path, capsys, flag, value, allowed):
    from sweeps.cli import main

    assert main(["calibrate", str(TINY), "--device", "cpu", flag, value, "--workdir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{flag}: {value}" in err and allowed in err
    assert list(tmp_path.iterdir()) == []


def test_cpu_figures_stay_out_of_the_repository(tmp_path, monkeypatch):
    class Args:
        out = str(tmp_path / "out")

    repo = tmp_path / "repo"  # a checkout: its .git and its results folder
    (repo / ".git").mkdir(parents=True)
    (repo / "benchmarks" / "results").mkdir(parents=True)
    monkeypatch.setattr(cal, "ROOT", repo)
    monkeypatch.setattr(cal, "RESULTS", repo / "benchmarks" / "results")
    today = cal.datetime.date.today()
    out = (tmp_path / "out").resolve()
    assert cal.out_files(Args(), "cpu") == [out / f"cpu-{today}-calibrate.json"]
    name = f"nvidia-h200-{today}-calibrate.json"
    assert cal.out_files(Args(), "NVIDIA H200") == [out / name, (repo / "benchmarks" / "results").resolve() / name]
    (repo / ".git").rmdir()  # an installed copy (no checkout) keeps them in the user's folder only
    assert cal.out_files(Args(), "NVIDIA H200") == [out / name]


# ---- how a figure is timed ------------------------------------------------------------------------------------
def test_the_autoattack_budgets_are_pyautoattacks_standard_version():
    from pyautoattack import AutoAttack

    aa = AutoAttack(torch.nn.Linear(4, 10), norm="Linf", eps=0.1, version="standard", device="cpu")
    assert aa.attacks_to_run == list(measure.AA_STANDARD)
    assert measure.AA_STANDARD == {"apgd-ce": (aa.apgd.n_iter, aa.apgd.n_restarts),
                                   "apgd-t": (aa.apgd_targeted.n_iter, aa.apgd_targeted.n_target_classes),
                                   "fab-t": (aa.fab.n_iter, aa.fab.n_target_classes),
                                   "square": (aa.square.n_queries, 1)}
    assert (aa.apgd_targeted.n_restarts, aa.fab.n_restarts, aa.square.n_restarts) == (1, 1, 1)
    assert [measure.aa_passes(a, b) for a, b in measure.AA_STANDARD.items()] == [100, 900, 900, 5000]


def test_the_robust_stand_in_keeps_every_image_robust_at_the_networks_cost():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 10))
    stand_in = measure.RobustStandIn(net, 10)
    x, y = torch.rand(6, 3, 2, 2), torch.zeros(6, dtype=torch.long)
    assert (stand_in(x).argmax(1) == 0).all()
    for name in measure.AA_STANDARD:
        adv = measure.aa_attack(stand_in, name, 0.3, (2, 1), torch.device("cpu")).perturb(x, y)
        assert (stand_in(adv).argmax(1) == 0).all(), name  # the attack found nothing: it ran its whole budget
    x.requires_grad_(True)
    (stand_in(x)[:, 1] - stand_in(x)[:, 0]).sum().backward()  # FAB's and APGD-T's logit differences
    assert x.grad.abs().sum() > 0  # the gradient flows through the network: a pass costs its backward too


def test_data_sizes_give_each_training_figure_its_full_batches():
    union = from_dict(preset("cifar100-ssat-mbi")).to_dict()
    s = measure.data_sizes(union, 40)
    assert s == {"n_labeled": 1600, "n_val": 100, "n_unlabeled": 48 * 128, "n_train": 100 + 1600 + 48 * 128}
    awr = from_dict(preset("cifar10-ssat-mbi-awr")).to_dict()
    s = measure.data_sizes(awr, 40)
    assert s["n_labeled"] == 320 and s["n_unlabeled"] == 48 * awr["optim"]["unlabeled_batch"]  # 5 batches of 64


# ---- the dry run reads the user's own figures first -------------------------------------------------------------
def test_the_users_figures_come_first_and_a_missing_one_says_how_to_fill_it(tmp_path, monkeypatch):
    repo, own = tmp_path / "repo", tmp_path / "own"
    repo.mkdir(), own.mkdir()
    head = {"device": "GPU X"}
    rec = {"bench": "teacher", "teacher_model": "cnn-small", "precision": "bf16", "compile": "default"}
    (repo / "r.json").write_text("\n".join(json.dumps(r) for r in (head, {**rec, "steps_per_s": 10.0})) + "\n")
    (own / "o.json").write_text("\n".join(json.dumps(r) for r in (head, {**rec, "steps_per_s": 40.0})) + "\n")
    both = Measurements("GPU X", read_records(repo, own))
    assert both.figure("teacher", "cnn-small", "bf16").value == 40.0  # the user's, not the median with the repo's
    assert both.figure("teacher", "cnn-small", "bf16").files == (str(own / "o.json"),)
    assert Measurements("GPU X", read_records(repo)).figure("teacher", "cnn-small", "bf16").value == 10.0
    monkeypatch.setenv("SSAT_CALIBRATION_DIR", str(own))
    assert calibration_dir() == own
    monkeypatch.delenv("SSAT_CALIBRATION_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert calibration_dir() == tmp_path / "cache" / "ssat-sweeps" / "calibration"
    lines = []
    dry_run(load_spec(TINY), out=lines.append, gpu="GPU X", records=read_records(repo, own), spec_path="my.yaml")
    assert ("  what is not measured, measured on a GPU X: python -m sweeps calibrate my.yaml --missing-only "
            "(minutes; the dry run then reads your figures first)") in lines


def test_the_summary_has_a_line_per_figure_and_says_what_was_not_measured():
    items = cal.plan([load_spec(TINY)])
    items[0].records = [{"bench": "trainer", "trainer_model": "m", "method": "rst", "mode": "graph",
                         "precision": "bf16", "cifar10_epoch_s": 12.34, "steps_timed": 40, "step_ms": 30.0,
                         "schedule_change_s": 0.5}]
    items[1].error = "RuntimeError: boom"
    items[3].records = [{"bench": "teacher", "teacher_model": "m", "precision": "bf16", "steps_per_s": 50.0,
                         "steps": 40, "warmup": 20}]
    items[4].records = [{"bench": "eval", "eval_model": "m", "attack": "square", "tf32": True, "s_per_1000": 7.0,
                         "points": "robust", "timed": "100 passes"}]
    lines = cal.summary(items)
    assert len({ln.index("|") for ln in lines}) == 1  # a table: the columns line up
    text = "\n".join(" ".join(ln.split()) for ln in lines)
    assert "training m rst graph bf16 | 12.3 s/CIFAR-10 epoch" in text
    assert "40 steps at 30.0 ms + a schedule change (0.50 s)" in text
    assert "| not measured" in text and "RuntimeError: boom" in text and "stopped by --budget" in text
    assert "teacher m bf16" in text and "50.0 steps/s" in text
    assert "eval m square TF32" in text and "7.00 s/1000 robust images" in text


def test_a_spec_with_a_gpu_share_given_on_the_command_line(tmp_path):
    raw = {"name": "s", "preset": "mnist5k-ssat-mbi", "resources": {"cpu": 1, "gpu": 0}, "grid": [{"row": "r"}]}
    assert parse_spec(raw, gpu_share=0.125).resources["gpu"] == 0.125
    assert parse_spec(raw, gpu_share=0.125, cpu_only=True).resources["gpu"] == 0
    from sweeps.errors import SpecError

    with pytest.raises(SpecError, match=r"--gpu-share: 2; allowed: a share of one GPU, 0 <= gpu <= 1"):
        parse_spec(raw, gpu_share=2)


def test_pgds_rate_from_two_timings_and_when_noise_swamps_the_difference():
    start, per_iter, how = measure.pgd_rate(3.0, 7.0, 2, 6, 100)  # 1 s an iteration on 100 images, 1 s the rest
    assert (start, per_iter) == (pytest.approx(0.01), pytest.approx(0.01))
    assert how.format(k=20) == ("PGD-2 and PGD-6 on 100 images; 20 iterations at the difference's rate "
                                "+ the rest of PGD-2")
    for t_hi in (3.0, 2.5):  # PGD-6 no slower than PGD-2 on a busy machine: no zero rate, no division by zero
        start, per_iter, how = measure.pgd_rate(3.0, t_hi, 2, 6, 100)
        assert (start, per_iter) == (0.0, pytest.approx(t_hi / 6 / 100)) and 1 / per_iter > 0
        assert how.format(k=10).endswith("no difference to time); 10 iterations at that rate, an upper bound")


def test_the_events_of_a_worker_not_waited_for_are_kept_for_its_turn(tmp_path):
    """Calibration.next(w): the processes of a group warm up together and are timed one at a time, so while one is
    timed another's events (its exit, say) arrive; they wait in order for that worker's turn."""
    import time
    from argparse import Namespace

    run = cal.Calibration([], Namespace(budget=None, gpu_gib=None), tmp_path, tmp_path, write=None)
    a, b = "worker a", "worker b"
    for who, ev in ((b, "ready"), (a, "result"), (b, "exit")):
        run.events.put((who, {"event": ev}))
    assert run.next(a) == (a, {"event": "result"})
    assert run.next(b) == (b, {"event": "ready"}) and run.next(b) == (b, {"event": "exit"})
    run.events.put((a, {"event": "exit"}))
    assert run.next() == (a, {"event": "exit"})  # any worker's next event
    assert run.next(deadline=time.perf_counter() - 1) is None  # past its deadline: nothing more is waited for
    assert not run.over()  # no --budget: never over
    timed = cal.Calibration([], Namespace(budget=1e-6, gpu_gib=None), tmp_path, tmp_path, write=None)
    time.sleep(0.01)
    assert timed.over() and timed.next() is None


def test_each_autoattack_part_is_made_as_the_standard_version_runs_it():
    """The settings of AutoAttack's standard version (one restart, seed 0, Linf, CE then targeted DLR, FAB-T,
    Square with p_init 0.8) at the budget measured: what the cost of a part is the cost of."""
    net, cpu = torch.nn.Linear(4, 3), torch.device("cpu")
    got = {name: measure.aa_attack(net, name, 0.3, (5, 2), cpu) for name in ("apgd-ce", "apgd-t", "fab-t", "square")}
    assert [type(a).__name__ for a in got.values()] == ["APGDAttack", "APGDAttack_targeted", "FABAttack_PT",
                                                        "SquareAttack"]
    common = {"eps": 0.3, "norm": "Linf", "n_restarts": 1, "seed": 0, "device": cpu}
    assert all({k: vars(a)[k] for k in common} == common for a in got.values())
    assert (got["apgd-ce"].n_iter, got["apgd-ce"].loss) == (5, "ce")
    assert (got["apgd-t"].n_iter, got["apgd-t"].n_target_classes) == (5, 2)
    assert (got["fab-t"].n_iter, got["fab-t"].targeted, got["fab-t"].n_target_classes) == (5, True, 2)
    assert (got["square"].n_queries, got["square"].p_init) == (5, 0.8)
    assert got["apgd-ce"].model is net and got["square"].predict is net

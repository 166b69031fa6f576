"""The trainer on a tiny MNIST-5k split: exact resume, checkpoints, per-epoch metrics, faults."""
import json

import pytest
import torch

from ssat.config import from_dict
from ssat.datasets import split_for
from ssat.models import create_model
from ssat.presets import preset
from ssat.pseudo_labels import TeacherOutputs
from ssat import faults
from ssat.storage import CorruptFileError, load_verified
from ssat.train import Trainer, TrainingDiverged

TINY = {"data.n_unlabeled": 120, "data.n_val": 60, "optim.epochs": 3, "attack.t": 2, "optim.lr_milestones": [3],
        "optim.lr_factors": [0.1], "eval.autoattack": False, "eval.test_n": 60, "eval.pgd_steps": [10, 20],
        "system.threads": 1}


def tiny(method="mnist5k-ssat-mbi", **over):
    extra = {"optim.swa_start": 1, "optim.lr_milestones": [2], "optim.lr_factors": [0.1]} if "awr" in method else {}
    return from_dict(preset(method), {**TINY, **extra, **over})


def fake_teacher(cfg):
    """Random-but-fixed pseudo-labels: the trainer's mechanics do not depend on their quality."""
    _, split = split_for(cfg)
    g = torch.Generator().manual_seed(0)
    model = create_model("cnn-small", 10, 1)
    return TeacherOutputs(torch.randn(len(split.unlabeled), 10, generator=g) * 3, split.hash, "cnn-small",
                          model.state_dict())


def strip(history):
    return [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in history]


@pytest.mark.parametrize("method", ["mnist5k-ssat-mbi", "mnist5k-ssat-mbi-awr"])
def test_resume_is_bit_identical(tmp_path, method):
    cfg = tiny(method)
    teacher = fake_teacher(cfg)
    straight = Trainer(cfg, tmp_path / "a", teacher=teacher, log=lambda s: None)
    straight.fit()
    stopped = Trainer(cfg, tmp_path / "b", teacher=teacher, log=lambda s: None)
    for m in stopped.epochs():
        if m["epoch"] == 2:
            break
    del stopped
    resumed = Trainer(cfg, tmp_path / "b", teacher=teacher, log=lambda s: None)
    assert resumed.epoch == 2
    resumed.fit()
    assert strip(resumed.history) == strip(straight.history)
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    if straight.swa is not None:  # the AWR runs' weight average resumes too (its count and its weights)
        assert int(straight.swa.avg.n_averaged) == 2
        for k, v in straight.swa.avg.state_dict().items():
            assert torch.equal(v, resumed.swa.avg.state_dict()[k]), k


def test_metrics_follow_the_schedule_and_checkpoints_exist(tmp_path):
    cfg = tiny(**{"attack.schedule": "linear", "attack.t": 3})
    progress = []
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=progress.append)
    hist, lrs = [], []
    for m in tr.epochs():  # the optimiser's learning rate is the schedule's, epoch by epoch
        hist.append(m)
        lrs.append(tr.opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([m["sched/lr"] for m in hist]) and lrs[-1] == pytest.approx(lrs[0] * 0.1)
    assert tr.train_seconds == pytest.approx(sum(m["perf/epoch_seconds"] for m in hist)) and tr.train_seconds > 0
    assert [line.split(" | ")[0] for line in progress if line.startswith("epoch ")] == [
        "epoch 1/3", "epoch 2/3", "epoch 3/3"]
    eps = [m["sched/eps_max"] for m in hist]
    assert eps == pytest.approx([0.1, 0.2, 0.3])
    assert [m["adv/pgd_linf_max"] for m in hist] == pytest.approx(eps, abs=1e-5)
    for m in hist:
        assert 2 ** -3 <= m["adv/alpha_mean"] <= 1
        assert m["adv/adv_linf_mean"] <= m["sched/eps_max"] + 1e-6
        assert {"train/loss", "train/ce", "train/kl_adv", "val/clean", "val/pgd10", "sched/lr"} <= set(m)
    for name in ("best.pt", "last.pt", "state.pt", "best.pt.sha256"):
        assert (tmp_path / name).exists()
    said = []
    tr.log = said.append
    res = tr.final_evaluation()
    assert set(res) == {"best", "last"} and set(res["best"]) == {"clean", "pgd10", "pgd20"}
    n = res["best"]["clean"]["protocol"]["n"]
    # the driver follows this stage from these lines (sweeps.trials.progress_callback): no AutoAttack in this config
    assert said[0] == f"final evaluation: best/last checkpoint on {n:,} test images, PGD-10, PGD-20"
    assert said[1:] == [f"  [{k}] pgd{s}: {res[k][f'pgd{s}']['acc']:.2f}%" for k in ("best", "last") for s in (10, 20)]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert json.loads(saved["protocols"]["protocol/best/pgd20"])["step"] == pytest.approx(0.03)
    assert saved["best_epoch"] == tr.best_epoch >= 1


def test_nan_loss_stops_with_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("SSAT_FAULT", "nan@2")
    cfg = tiny()
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    with pytest.raises(TrainingDiverged, match=r"at epoch 2 \(detected at step 1\)"):
        tr.fit()
    assert tr.epoch == 1


def test_an_injected_fault_fires_at_its_epoch_and_step(tmp_path, monkeypatch):
    """raise@2:1 fires before step 1 of epoch 2: one optimiser step of epoch 2 has been taken by then."""
    monkeypatch.setenv("SSAT_FAULT", "raise@2:1")
    cfg = tiny()
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    assert len(list(tr.batches.epoch(torch.Generator().manual_seed(0)))) >= 2
    with pytest.raises(faults.InjectedFault, match="raise@2:1"):
        tr.fit()
    assert tr.epoch == 1
    after_epoch_1 = load_verified(tmp_path / "last.pt")["model"]
    moved = [k for k, v in tr.model.state_dict().items() if not torch.equal(v, after_epoch_1[k])]
    assert moved  # one step of epoch 2 (a fault at step 0 would leave the weights of epoch 1)


def test_best_is_the_highest_val_pgd10_and_the_checkpoints_say_what_they_are(tmp_path):
    cfg = tiny(**{"eval.val_every": 3})  # validated at epoch 3 (every 3rd) and at 2 and 3 (the last two)
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    epochs = tr.epochs()
    first = next(epochs)
    assert load_verified(tmp_path / "best.pt")["epoch"] == 1  # a run stopped before validating has a best checkpoint
    hist = [first, *epochs]
    assert "val/pgd10" not in hist[0] and {"val/pgd10", "val/clean"} <= set(hist[1]) <= set(hist[2])
    assert "val/best_pgd10" not in hist[0]  # nothing validated yet: no -inf for the loggers (TensorBoard warns)
    best = max((1, 2), key=lambda i: (hist[i]["val/pgd10"], hist[i]["val/clean"], -i))
    assert (tr.best_epoch, tr.best_score, tr.best_clean) == (best + 1, hist[best]["val/pgd10"], hist[best]["val/clean"])
    assert hist[2]["val/best_pgd10"] == max(hist[1]["val/pgd10"], hist[2]["val/pgd10"])
    for kind, epoch in (("best", best + 1), ("last", 3)):
        ckpt = load_verified(tmp_path / f"{kind}.pt")
        assert (ckpt["kind"], ckpt["epoch"], ckpt["model_name"]) == (kind, epoch, cfg.model.name)
        assert ckpt["split_hash"] == tr.split.hash and ckpt["config"] == cfg.to_dict()
        assert ckpt["metrics"] == hist[epoch - 1]  # the metrics of the epoch it was taken at


def test_the_optimiser_is_the_configs_sgd(tmp_path):
    """The SGD settings reach the optimiser; a GPU memory fraction is ignored on a CPU (setting it needs CUDA)."""
    cfg = tiny(**{"optim.weight_decay": 0.0123, "optim.momentum": 0.8, "optim.nesterov": True, "optim.lr": 0.07,
                  "system.cuda_memory_fraction": 0.5})
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    (group,) = tr.opt.param_groups
    assert isinstance(tr.opt, torch.optim.SGD) and len(group["params"]) == len(list(tr.model.parameters()))
    assert (group["weight_decay"], group["momentum"], group["nesterov"], group["lr"]) == (0.0123, 0.8, True, 0.07)


def test_awr_refuses_a_teacher_without_weights(tmp_path):
    cfg = tiny("mnist5k-ssat-mbi-awr")
    t = fake_teacher(cfg)
    labels_only = TeacherOutputs(t.logits, t.split_hash, None, None)
    with pytest.raises(ValueError, match="teacher's weights"):
        Trainer(cfg, tmp_path, teacher=labels_only, log=lambda s: None)


def test_corrupt_state_is_reported_not_loaded(tmp_path):
    cfg = tiny(**{"optim.epochs": 1, "attack.t": 1, "optim.lr_milestones": [], "optim.lr_factors": []})
    teacher = fake_teacher(cfg)
    Trainer(cfg, tmp_path, teacher=teacher, log=lambda s: None).fit()
    data = bytearray((tmp_path / "state.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "state.pt").write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum mismatch"):
        Trainer(cfg, tmp_path, teacher=teacher, log=lambda s: None)


def test_resume_refuses_another_config(tmp_path):
    cfg = tiny(**{"optim.epochs": 1, "attack.t": 1, "optim.lr_milestones": [], "optim.lr_factors": []})
    teacher = fake_teacher(cfg)
    Trainer(cfg, tmp_path, teacher=teacher, log=lambda s: None).fit()
    with pytest.raises(ValueError, match="another configuration"):
        Trainer(cfg.replace(**{"method.beta": 0.9}), tmp_path, teacher=teacher, log=lambda s: None)


def test_a_tie_keeps_the_earlier_best_epoch(tmp_path, monkeypatch):
    """Equal validation scores (PGD-10 and clean) do not move the best checkpoint to the later epoch."""
    cfg = tiny(**{"optim.epochs": 2, "optim.lr_milestones": [2]})
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    monkeypatch.setattr(tr, "validate", lambda model: {"val/clean": 50.0, "val/pgd10": 25.0})
    tr.fit()
    assert (tr.best_epoch, tr.best_score, tr.best_clean) == (1, 25.0, 50.0)
    assert load_verified(tmp_path / "best.pt")["epoch"] == 1


@pytest.mark.parametrize("select_by, best_after", [("pgd10", [1, 1, 3, 3]), ("clean", [1, 2, 3, 3])])
def test_select_by_names_the_accuracy_that_decides_best_and_the_other_breaks_ties(tmp_path, monkeypatch, select_by,
                                                                                   best_after):
    """Standard training's case (the demo's baseline, 2026-11-28): one image of 500 survives PGD-10 at epoch 1 (0.2)
    and none at epoch 2; by pgd10 the half-trained epoch 1 stays best, by clean the trained epoch 2 takes it. Epoch
    3 wins either way through the tie-break: it ties the best on select_by's accuracy and beats it on the other.
    Epoch 4 is below epoch 3 either way."""
    clean, pgd10 = [70.0, 92.0, 92.0, 75.0], [0.2, 0.0, 0.2, 0.2]
    vals = iter(zip(clean, pgd10))
    cfg = tiny(**{"optim.epochs": 4, "optim.lr_milestones": [3], "attack.t": 4, "eval.select_by": select_by})
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    monkeypatch.setattr(tr, "validate", lambda model: dict(zip(("val/clean", "val/pgd10"), next(vals))))
    hist = tr.fit()
    assert [h["val/best_pgd10"] for h in hist] == [pgd10[b - 1] for b in best_after]  # the best epoch's PGD-10
    assert tr.best_epoch == 3 and load_verified(tmp_path / "best.pt")["epoch"] == 3
    assert (tr.best_score, tr.best_clean) == (0.2, 92.0)


def test_a_compile_mode_wraps_the_model_the_optimiser_trains(tmp_path):
    """system.compile: the step's forwards go through torch.compile of the trained model (compiled lazily, at the
    first call, so building the trainer costs nothing here)."""
    cfg = tiny(**{"system.compile": "default"})
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    assert tr.engine.net is not tr.model and tr.engine.net._orig_mod is tr.model
    for setting in ("off", "auto"):  # auto: off on a CPU
        off = Trainer(tiny(**{"system.compile": setting}), tmp_path / setting, teacher=fake_teacher(cfg),
                      log=lambda s: None)
        net = off.engine.net  # uncompiled: the model itself, or the model with its BatchNorm folded (system.fold_bn)
        assert (net.model if off.engine.fold_status == "on" else net) is off.model and off.engine.compile == "off"


def test_an_epoch_fetches_each_batch_inside_the_profilers_data_range(tmp_path):
    """benchmarks/profile_step.py and a user's torch.profiler trace attribute batch fetching to the range "data":
    one range per fetch, the last one finding the epoch's end."""
    from torch.profiler import ProfilerActivity, profile
    cfg = tiny()
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    n = len(list(tr.batches.epoch(torch.Generator().manual_seed(0))))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tr.train_epoch(1)
    assert sum(e.name == "data" for e in prof.events()) == n + 1


def test_a_trainer_without_a_teacher_resolves_one_and_reports_it_in_its_log(tmp_path):
    """Pseudo-labels a user names (data.pseudo_labels) are what the trainer trains on, and the teacher stage's
    lines reach the trainer's log (the driver shows them)."""
    cfg = tiny()
    _, split = split_for(cfg)
    probs = torch.softmax(torch.randn(len(split.unlabeled), 10, generator=torch.Generator().manual_seed(1)), 1)
    torch.save({"probs": probs, "split_hash": split.hash}, tmp_path / "pl.pt")
    said = []
    tr = Trainer(cfg.replace(**{"data.pseudo_labels": str(tmp_path / "pl.pt")}), tmp_path / "run", log=said.append)
    torch.testing.assert_close(tr.teacher.probabilities(), probs, rtol=1e-4, atol=1e-6)
    assert [s for s in said if s.startswith("teacher: user-provided pseudo-labels")]


def test_validation_runs_in_batches_of_the_configs_eval_batch_size(tmp_path):
    """eval.batch_size bounds the memory of validation's PGD: no forward sees more images than it."""
    cfg = tiny(**{"eval.batch_size": 16})
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    sizes = []

    class Spy(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            sizes.append(len(x))
            return self.inner(x)

    res = tr.validate(Spy(tr.model))
    assert max(sizes) == 16 and len(tr.x_val) == 60 and {"val/clean", "val/pgd10"} == set(res)

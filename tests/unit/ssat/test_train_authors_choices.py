"""The settings where the AWR presets follow the authors' code (SRST-AWR's and the SSAT-MBI-AWR code built on it)
and the paper is silent: each setting changes what it says and nothing else (README "Where we differ from the
authors' code"). Real Trainer on MNIST-5k, real AWRBatches, torch's own MultiStepLR as the lr reference."""
import copy
import dataclasses

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ssat.attacks import pgd
from ssat.divergences import kl_rows
from ssat.config import ConfigError, from_dict
from ssat.batchings import AWRBatches
from ssat.datasets import Split, to_float
from ssat.interpolation import interpolate
from ssat.losses import awr_loss
from ssat.methods import METHOD_REGISTRY
from ssat.presets import PRESETS, preset
from ssat.schedules import lr_at, schedule_table
from ssat.runtime import training_precision
from ssat.train import Trainer
from tests.unit.ssat.test_train import fake_teacher, strip, tiny

EPS_MAX, RHO = 0.2, 0.004  # as test_trainer_wiring: some samples cross rho inside the segment
AUTHORS = {"optim.nesterov": True, "optim.lr_decay_after_milestone": True, "data.unlabeled_includes_labeled": True,
           "data.labeled_sampling": "cycle", "method.awr_forwards": "authors", "attack.inner_target": "hard"}
AWR_PAPER_PRESETS = [f"{ds}-{m}" for ds in ("cifar10", "svhn", "cifar100") for m in ("srst-awr", "ssat-mbi-awr")]


def trainer(tmp_path, name="mnist5k-ssat-mbi-awr", **over):
    cfg = tiny(name, **over)
    return Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)


def awr_batch(tr):
    b = tr.batches
    return to_float(b.xl[:8]), b.yl[:8], to_float(b.xu[:16])


def bn_buffers(model):
    return [(k, v.clone()) for k, v in model.state_dict().items() if "running" in k or "num_batches" in k]


def train_forwards(tr, state, *xs):
    """The model from `state`, forwarded in train mode on xs in order (no gradient): its BN buffers."""
    tr.model.load_state_dict(state)
    tr.engine.net.train()
    with torch.no_grad():
        for x in xs:
            tr.engine.net(x)
    return bn_buffers(tr.model)


# ---- the learning-rate decay ---------------------------------------------------------------------------
def test_lr_decay_after_milestone_is_torchs_multisteplr_stepped_after_each_epoch():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.2)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[3, 5], gamma=0.1)
    torch_lrs = []
    for _ in range(1, 8):  # the rate an epoch trains with, then the authors' scheduler.step() after it
        torch_lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    ours = [lr_at(e, 0.2, [3, 5], [0.1, 0.01], after_milestone=True) for e in range(1, 8)]
    assert ours == pytest.approx(torch_lrs)
    assert ours == pytest.approx([0.2, 0.2, 0.2, 0.02, 0.02, 0.002, 0.002])
    # off: the milestone epoch itself trains with the new rate (epochs m-1, m, m+1 around m = 3 and 5)
    assert [lr_at(e, 0.2, [3, 5], [0.1, 0.01]) for e in range(1, 8)] == pytest.approx(
        [0.2, 0.2, 0.02, 0.02, 0.002, 0.002, 0.002])


def test_the_awr_presets_decay_one_epoch_after_the_milestone_in_the_trainer_and_the_dry_run():
    lr = schedule_table(from_dict(preset("cifar10-ssat-mbi-awr")))["lr"]  # milestone 50
    assert lr[49] == pytest.approx(0.1) and lr[50] == pytest.approx(0.01)  # epochs 50 and 51
    lr = schedule_table(from_dict(preset("cifar100-srst-awr")))["lr"]      # milestones 50, 150
    assert [lr[i] for i in (49, 50, 149, 150)] == pytest.approx([0.1, 0.01, 0.01, 0.001])
    lr = schedule_table(from_dict(preset("cifar10-ssat-mbi")))["lr"]       # union: at the milestone (60)
    assert lr[58] == pytest.approx(0.1) and lr[59] == pytest.approx(0.01)


# ---- the presets and the config ------------------------------------------------------------------------
@pytest.mark.parametrize("name", AWR_PAPER_PRESETS)
def test_the_awr_paper_presets_take_the_authors_choices(name):
    cfg = from_dict(preset(name))
    assert cfg.optim.nesterov and cfg.optim.lr_decay_after_milestone and cfg.data.unlabeled_includes_labeled
    assert (cfg.data.labeled_sampling, cfg.method.awr_forwards, cfg.system.precision) == ("cycle", "authors", "fp16")
    # the authors' --inner-target hard matters only for a CE attack: the Table 7 rows of SVHN and CIFAR-100
    want = "hard" if cfg.attack.inner_loss == "ce" else "soft"
    assert cfg.attack.inner_target == want and (want == "hard") == (not name.startswith("cifar10-"))


@pytest.mark.parametrize("name", sorted(set(PRESETS) - set(AWR_PAPER_PRESETS)))
def test_the_other_presets_keep_the_earlier_choices(name):
    cfg = from_dict(preset(name))
    assert not cfg.optim.lr_decay_after_milestone and cfg.system.precision == "auto"
    assert (cfg.data.labeled_sampling, cfg.method.awr_forwards, cfg.attack.inner_target) == ("random", "single", "soft")
    assert cfg.optim.nesterov is False and cfg.data.unlabeled_includes_labeled is False


def test_a_neutral_value_keeps_the_config_hash_and_any_other_changes_it():
    cfg = from_dict(preset("mnist5k-ssat-mbi-awr"))
    neutral = {"data.labeled_sampling": "random", "method.awr_forwards": "single", "attack.inner_target": "soft",
               "optim.lr_decay_after_milestone": False, "optim.swa_bn": "recompute"}
    assert cfg.replace(**neutral).config_hash() == cfg.config_hash() == "673476a50887"
    other = {"data.labeled_sampling": "cycle", "method.awr_forwards": "authors", "attack.inner_target": "hard",
             "optim.lr_decay_after_milestone": True, "system.precision": "fp16", "optim.swa_bn": "average"}
    hashes = {cfg.replace(**{k: v}).config_hash() for k, v in other.items()}
    assert len(hashes) == len(other) and cfg.config_hash() not in hashes


@pytest.mark.parametrize("over, fragments", [
    ({"attack.inner_target": "hard", "attack.inner_loss": "kl"},
     ["attack.inner_target: 'hard' with attack.inner_loss='kl'", "allowed with kl: 'soft'"]),
    ({"method.name": "ssat-mbi", "attack.inner_target": "hard"},
     ["attack.inner_target: 'hard' with method.name='ssat-mbi'", "srst-awr, ssat-mbi-awr"]),
    ({"method.name": "rst", "method.interpolate": False, "data.labeled_sampling": "cycle"},
     ["data.labeled_sampling: 'cycle' with method.name='rst'", "allowed with it: 'random'"]),
    ({"method.name": "ssat-mbi", "method.awr_forwards": "authors"},
     ["method.awr_forwards: 'authors' with method.name='ssat-mbi'", "allowed with it: 'single'"]),
    ({"system.precision": "fp16", "system.device": "cpu"}, ["system.precision: 'fp16' with system.device='cpu'"]),
    ({"system.precision": "fp8"}, ["system.precision: 'fp8' is not allowed", "auto, fp32, bf16, fp16"]),
    ({"data.labeled_sampling": "cycles"}, ["data.labeled_sampling: 'cycles'", "did you mean 'cycle'", "random, cycle"]),
    ({"method.awr_forwards": "author"}, ["method.awr_forwards: 'author'", "single, authors"]),
    ({"attack.inner_target": "argmax"}, ["attack.inner_target: 'argmax'", "soft, hard"]),
])
def test_bad_settings_are_refused_with_the_field_and_the_allowed_values(over, fragments):
    with pytest.raises(ConfigError) as exc:
        from_dict(preset("mnist5k-ssat-mbi-awr"), over)
    for frag in fragments:
        assert frag in str(exc.value), str(exc.value)


def test_fp16_is_accepted_where_a_gpu_may_run_it():
    for device in ("auto", "cuda"):
        assert from_dict(preset("mnist5k-ssat-mbi-awr"), {"system.precision": "fp16",
                                                          "system.device": device}).system.precision == "fp16"


# ---- precision -----------------------------------------------------------------------------------------
def test_training_precision_per_device():
    want = {("auto", "cuda"): "bf16", ("auto", "cpu"): "fp32", ("fp16", "cuda"): "fp16", ("fp16", "cpu"): "fp32",
            ("bf16", "cpu"): "bf16", ("bf16", "cuda"): "bf16", ("fp32", "cuda"): "fp32", ("fp32", "cpu"): "fp32"}
    assert {k: training_precision(*k) for k in want} == want


def test_fp16_on_a_cpu_trains_in_fp32_without_a_gradient_scaler(tmp_path):
    lines = []
    cfg = tiny("mnist5k-srst-awr", **{"system.precision": "fp16", "data.n_unlabeled": 30})
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lines.append)
    assert tr.engine.precision == "fp32" and "system.precision fp16 on cpu: training in fp32" in lines
    xl, yl, xu = awr_batch(tr)
    with tr.engine.autocast():
        assert tr.engine.net(xu).dtype == torch.float32  # autocast off
    tr.train_epoch(1)
    assert tr.engine.scaler is None


# ---- the labeled batches -------------------------------------------------------------------------------
def labeled_sequence(sampling, epochs=2, seed=0):
    """Labels of each step's labeled batch; the labels are the training indices, so they name the images."""
    split = Split("mnist5k", np.arange(10), np.empty(0, np.int64), np.arange(10, 30), 0)
    x = torch.zeros(30, 1, 8, 8, dtype=torch.uint8)
    b = AWRBatches(x, torch.arange(30), split, 4, 4, "cpu", False, sampling)
    gen = torch.Generator().manual_seed(seed)
    return [[yl.tolist() for _, yl, _ in b.epoch(gen)] for _ in range(epochs)]


def test_cycle_covers_the_labeled_set_without_repetition_before_a_reshuffle_and_restarts_every_epoch():
    epochs = labeled_sequence("cycle")
    for steps in epochs:  # 5 steps of 4 unlabeled: a pass of 10 labeled in 4 + 4 + 2, then a fresh pass
        assert [len(s) for s in steps] == [4, 4, 2, 4, 4]
        assert sorted(sum(steps[:3], [])) == list(range(10))
        second = steps[3] + steps[4]
        assert len(set(second)) == 8
    assert epochs[0] != epochs[1]  # reshuffled, and epoch 2 starts a pass (not the rest of epoch 1's)
    assert labeled_sequence("cycle") == epochs  # from the generator alone: checkpointable


def test_random_draws_a_fresh_batch_every_step():
    steps = sum(labeled_sequence("random"), [])
    assert all(len(s) == 4 and len(set(s)) == 4 for s in steps)
    firsts = [sorted(sum(steps[i: i + 3], [])) for i in range(0, 10, 5)]
    assert any(f != list(range(10)) for f in firsts)  # 12 draws from 10 images: some repeat within a "pass"
    assert labeled_sequence("random") != labeled_sequence("cycle")


# ---- the attack's target -------------------------------------------------------------------------------
def test_hard_inner_target_attacks_the_teachers_argmax_and_keeps_the_soft_margin(tmp_path):
    tr = trainer(tmp_path, **{"attack.inner_target": "hard"})
    xl, yl, xu = awr_batch(tr)
    state = copy.deepcopy(tr.model.state_dict())
    torch.manual_seed(3)
    terms, xs, x_pgd, x_adv, alpha = tr.engine.terms((xl, yl, xu), EPS_MAX, RHO)
    with torch.no_grad():
        y_t = torch.softmax(tr.teacher_model(xs), 1)
    one_hot = F.one_hot(y_t.argmax(1), 10).float()
    a = tr.cfg.attack

    def replay(targets):
        tr.model.load_state_dict(state)
        torch.manual_seed(3)
        return pgd(tr.engine.net, xs, targets, EPS_MAX, a.steps, 0.25 * EPS_MAX, loss="ce", init=a.init)

    assert torch.equal(x_pgd, replay(one_hot))    # CE on the argmax as a class index = CE on its one-hot
    assert not torch.equal(x_pgd, replay(y_t))    # not the soft target
    tr.model.load_state_dict(state)
    _, alpha_soft = interpolate(tr.engine.net, xs, x_pgd, y_t, RHO, tr.cfg.method.tau, tr.cfg.method.K)
    _, alpha_hard = interpolate(tr.engine.net, xs, x_pgd, one_hot, RHO, tr.cfg.method.tau, tr.cfg.method.K)
    assert torch.equal(alpha, alpha_soft) and not torch.equal(alpha, alpha_hard)


# ---- the order of the forwards -------------------------------------------------------------------------
def test_authors_forwards_update_bn_as_x_l_x_u_then_x_adv_x_u_x_pgd_and_attack_after_the_first_two(tmp_path):
    tr = trainer(tmp_path, **{"method.awr_forwards": "authors"})
    assert tr.cfg.method.interpolate and tr.cfg.method.beta < 1  # x_pgd has a forward of its own
    xl, yl, xu = awr_batch(tr)
    state = copy.deepcopy(tr.model.state_dict())
    torch.manual_seed(5)
    terms, xs, x_pgd, x_adv, alpha = tr.engine.terms((xl, yl, xu), EPS_MAX, RHO)
    after = bn_buffers(tr.model)
    xl = tr.engine.prep([xl])[0]
    for (k, v), (_, w) in zip(after, train_forwards(tr, state, xl, xs, x_adv, xs, x_pgd)):
        assert torch.allclose(v.float(), w.float(), rtol=1e-6, atol=1e-7), k
    single = train_forwards(tr, state, xl, xs, x_adv, x_pgd)
    assert not all(torch.equal(v, w) for (_, v), (_, w) in zip(after, single))
    # the attack ran with the statistics after the first two forwards, not with those the step started from
    a = tr.cfg.attack
    for forwards, same in (((xl, xs), True), ((), False)):
        train_forwards(tr, state, *forwards)
        torch.manual_seed(5)
        with torch.no_grad():
            y_t = torch.softmax(tr.teacher_model(xs), 1)
        replay = pgd(tr.engine.net, xs, y_t, EPS_MAX, a.steps, 0.25 * EPS_MAX, loss="ce", init=a.init)
        assert torch.equal(replay, x_pgd) == same


def test_authors_forwards_feed_the_first_x_u_to_distillation_and_the_second_to_the_robust_terms(tmp_path, monkeypatch):
    # dropout: every train-mode forward of x_u gives other logits, so the two cannot be mistaken
    tr = trainer(tmp_path, **{"method.awr_forwards": "authors", "model.dropout": 0.5})
    outs, seen = [], {}
    tr.model.register_forward_hook(lambda mod, inp, out: outs.append(out) if mod.training else None)
    entry = METHOD_REGISTRY[tr.cfg.method.name]

    def recording(*args, **kw):
        seen["args"], seen["kw"] = args, kw
        return entry.loss(*args, **kw)

    monkeypatch.setitem(METHOD_REGISTRY, entry.name, dataclasses.replace(entry, loss=recording))
    xl, yl, xu = awr_batch(tr)
    torch.manual_seed(6)
    terms, *_ = tr.engine.terms((xl, yl, xu), EPS_MAX, RHO)
    ll, _, lu, la, lp, lt, m, beta = seen["args"]
    assert len(outs) == 5 and not torch.equal(outs[1], outs[3])
    assert ll is outs[0] and seen["kw"]["lu_kd"] is outs[1] and la is outs[2] and lu is outs[3] and lp is outs[4]
    tp = m.tau_prime
    assert torch.allclose(terms["kd"], kl_rows(lt / tp, outs[1] / tp).mean())
    assert not torch.allclose(terms["kd"], kl_rows(lt / tp, outs[3] / tp).mean())
    want = awr_loss(outs[0], yl, outs[3], outs[2], outs[4], lt, lam=m.lam, beta=beta, label_smoothing=m.label_smoothing,
                    gamma_prime=m.gamma_prime, tau_prime=tp)
    for k in ("kl_adv", "kl_pgd", "w_adv", "w_pgd", "ce"):
        assert torch.allclose(terms[k], want[k]), k


def test_single_forwards_are_unchanged_x_l_x_u_x_adv_x_pgd_after_the_attack(tmp_path):
    tr = trainer(tmp_path)
    assert tr.cfg.method.awr_forwards == "single"
    xl, yl, xu = awr_batch(tr)
    state = copy.deepcopy(tr.model.state_dict())
    torch.manual_seed(7)
    _, xs, x_pgd, x_adv, _ = tr.engine.terms((xl, yl, xu), EPS_MAX, RHO)
    after = bn_buffers(tr.model)
    for (k, v), (_, w) in zip(after, train_forwards(tr, state, tr.engine.prep([xl])[0], xs, x_adv, x_pgd)):
        assert torch.allclose(v.float(), w.float(), rtol=1e-6, atol=1e-7), k


def test_awr_loss_takes_the_distillation_logits_apart_from_the_robust_ones():
    g = torch.Generator().manual_seed(0)
    ll, la, lp, lt, lu, lu_kd = (torch.randn(6, 5, generator=g) for _ in range(6))
    yl = torch.tensor([0, 1, 2, 3, 4, 0])
    kw = dict(lam=3.0, beta=0.4, label_smoothing=0.2, gamma_prime=4.0, tau_prime=1.5)
    both = awr_loss(ll, yl, lu, la, lp, lt, logits_u_kd=lu_kd, **kw)
    only_kd = awr_loss(ll, yl, lu_kd, la, lp, lt, **kw)   # lu_kd everywhere
    only_rob = awr_loss(ll, yl, lu, la, lp, lt, **kw)     # lu everywhere
    assert torch.allclose(both["kd"], only_kd["kd"]) and not torch.allclose(both["kd"], only_rob["kd"])
    for k in ("kl_adv", "kl_pgd", "w_adv", "w_pgd"):
        assert torch.allclose(both[k], only_rob[k]) and not torch.allclose(both[k], only_kd[k]), k
    assert torch.allclose(both["loss"], only_rob["ce"] + 4.0 * only_kd["kd"]
                          + 3.0 * (0.4 * only_rob["kl_adv"] + 0.6 * only_rob["kl_pgd"]))


# ---- exact resume with every authors' choice -----------------------------------------------------------
def test_resume_with_the_authors_choices_is_bit_identical(tmp_path):
    cfg = tiny("mnist5k-ssat-mbi-awr", **AUTHORS, **{"data.n_unlabeled": 48, "data.n_val": 20})
    teacher = fake_teacher(cfg)
    straight = Trainer(cfg, tmp_path / "a", teacher=teacher, log=lambda s: None)
    straight.fit()
    stopped = Trainer(cfg, tmp_path / "b", teacher=teacher, log=lambda s: None)
    for m in stopped.epochs():
        if m["epoch"] == 2:
            break
    del stopped
    resumed = Trainer(cfg, tmp_path / "b", teacher=teacher, log=lambda s: None)
    resumed.fit()
    assert strip(resumed.history) == strip(straight.history)
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k
    # the choices were in force: Nesterov, the milestone (epoch 2) taking effect at epoch 3
    assert straight.opt.param_groups[0]["nesterov"]
    assert [h["sched/lr"] for h in straight.history] == pytest.approx([0.1, 0.1, 0.01])

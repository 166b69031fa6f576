"""The method, batching and schedule registries: a toy method, a toy batching and a toy schedule, each registered by
one call in the fixtures below, are accepted by the config, dispatched by the real Trainer (one epoch on MNIST-5k)
and shown by the dry run; nothing else had to be edited for them."""
import dataclasses

import pytest
import torch

from ssat.divergences import kl_rows, soft_cross_entropy
from ssat.batchings import BATCHING_REGISTRY, Batching, register_batching
from ssat.config import ConfigError, from_dict
from ssat.datasets import to_float
from ssat.methods import METHOD_REGISTRY, Method, method_names, register_method
from ssat.presets import preset
from ssat.schedules import (SCHEDULE_REGISTRY, Schedule, at_epoch, epsilon_schedule, register_schedule,
                            schedule_table)
from ssat.train import Trainer
from tests.unit.ssat.test_train import TINY, fake_teacher

CALLS = []  # what the toy losses were given, one entry per training step


def toy_pgd_at(lx, la, lp, y, m, beta):
    """Union batching: CE(f(x_pgd), y~) (Madry's PGD-AT) + lam * 0 * KL, to see lam and beta arrive."""
    ce = soft_cross_entropy(lp.float(), y).mean()
    kl = kl_rows(lx, lp).mean()
    CALLS.append({"shapes": (lx.shape, la.shape, lp.shape, y.shape), "beta": beta, "lam": m.lam,
                  "pgd_is_adv": lp is la, "loss": ce.item(), "n": len(lx)})
    return {"loss": ce + beta * 0.0 * kl, "ce_pgd": ce}


def toy_awr_at(ll, yl, lu, la, lp, lt, m, beta):
    """AWR batching: CE on the labeled batch + KL(teacher(x_u) || f(x_u_pgd))."""
    ce = torch.nn.functional.cross_entropy(ll.float(), yl)
    kd = kl_rows(lt, lp).mean()
    CALLS.append({"shapes": (ll.shape, yl.shape, lu.shape, la.shape, lp.shape, lt.shape), "beta": beta,
                  "labels": yl.dtype, "n": len(lu), "pgd_is_adv": lp is la})
    return {"loss": ce + kd, "ce_l": ce, "kd_pgd": kd}


def toy_step(epoch, eps, t, gamma):
    """eps / 2 up to epoch t, eps after."""
    return eps / 2 if epoch <= t else eps


@pytest.fixture
def toys():
    register_method(Method("toy-pgd-at", "Toy PGD-AT", "union", toy_pgd_at, may_interpolate=False, forced_beta=0.25))
    register_method(Method("toy-awr-at", "Toy AWR-AT", "awr", toy_awr_at, may_interpolate=True))
    register_schedule(Schedule("toy-step", toy_step, title="Step", label="Step", needs_t=True))
    CALLS.clear()
    yield
    for name in ("toy-pgd-at", "toy-awr-at"):
        del METHOD_REGISTRY[name]
    del SCHEDULE_REGISTRY["toy-step"]


def one_epoch(name, **over):
    awr = {"optim.swa_start": 0} if "awr" in name else {}
    base = {**TINY, "optim.epochs": 1, "attack.t": 1, "optim.lr_milestones": [], "optim.lr_factors": []}
    return from_dict(preset(name), {**base, **awr, **over})


def train(cfg, tmp_path):
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    (metrics,) = tr.fit()
    moved = any(not torch.equal(v, tr.model.state_dict()[k]) for k, v in before.items() if v.is_floating_point())
    return tr, metrics, moved


def test_a_registered_union_method_trains_through_the_union_step(toys, tmp_path):
    cfg = one_epoch("mnist5k-rst", **{"method.name": "toy-pgd-at", "method.beta": 0.4, "method.lam": 3.0})
    assert cfg.batching.name != "awr"
    tr, metrics, moved = train(cfg, tmp_path)
    steps = -(-len(tr.batches) // cfg.optim.batch_size)
    assert len(CALLS) == steps and moved
    for c in CALLS:  # forced beta, not method.beta; lam from the config; no interpolation: x_pgd's logits twice
        assert c["beta"] == 0.25 and c["lam"] == 3.0 and c["pgd_is_adv"]
        assert c["shapes"][0] == c["shapes"][2] == (c["n"], 10) and c["shapes"][3] == (c["n"], 10)
    # the logged terms are the toy's, averaged over images
    assert {k for k in metrics if k.startswith("train/")} == {"train/loss", "train/ce_pgd"}
    want = sum(c["loss"] * c["n"] for c in CALLS) / sum(c["n"] for c in CALLS)
    assert metrics["train/loss"] == pytest.approx(want, rel=1e-5)
    assert metrics["train/ce_pgd"] == pytest.approx(want, rel=1e-5)
    assert metrics["adv/pgd_linf_max"] == pytest.approx(cfg.eps, abs=1e-5)  # it attacked, at lam > 0


def test_a_registered_awr_method_trains_through_the_awr_step(toys, tmp_path):
    cfg = one_epoch("mnist5k-ssat-mbi-awr", **{"method.name": "toy-awr-at", "method.beta": 0.6})
    assert cfg.batching.name == "awr" and cfg.method.interpolate
    tr, metrics, moved = train(cfg, tmp_path)
    assert CALLS and moved
    for c in CALLS:
        ll, yl, lu, la, lp, lt = c["shapes"]
        assert c["beta"] == 0.6 and c["labels"] == torch.int64  # labeled batch: integer labels
        assert not c["pgd_is_adv"]  # interpolation on (the toy may interpolate): x_adv is its own example
        assert ll[0] == yl[0] <= cfg.optim.labeled_batch and lu == la == lp == lt == (c["n"], 10)
    assert sum(c["n"] for c in CALLS) == len(tr.batches)  # every unlabeled image once
    assert {k for k in metrics if k.startswith("train/")} == {"train/loss", "train/ce_l", "train/kd_pgd"}


def test_the_config_reads_the_method_entry(toys):
    assert method_names()[-2:] == ("toy-pgd-at", "toy-awr-at")
    with pytest.raises(ConfigError, match=r"method\.interpolate: true with method\.name='toy-pgd-at'"):
        one_epoch("mnist5k-rst", **{"method.name": "toy-pgd-at", "method.interpolate": True})
    with pytest.raises(ConfigError, match=r"method\.name: 'toy-pgd' is not allowed.*allowed: .*toy-pgd-at"):
        one_epoch("mnist5k-rst", **{"method.name": "toy-pgd"})


def test_built_in_interpolation_rule():
    """rst, uat++ and srst-awr never use x_adv: interpolate=true is refused for them alone."""
    refused = set()
    for name in method_names():
        try:
            from_dict({}, {"method.name": name, "method.interpolate": True})
        except ConfigError:
            refused.add(name)
    assert refused == {"rst", "uat++", "srst-awr"}
    assert {n: m.forced_beta for n, m in METHOD_REGISTRY.items() if m.forced_beta is not None} == {
        "rst": 0.0, "srst-awr": 0.0}


@pytest.mark.parametrize("name, attacks", [("mnist5k-uat++", True), ("mnist5k-rst", False)])
def test_lambda_zero_skips_the_attack_unless_the_ce_is_on_x_adv(tmp_path, name, attacks):
    cfg = one_epoch(name, **{"method.lam": 0.0})
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    x, y = to_float(tr.batches.x[:16]), tr.batches.targets[:16]
    _, xs, x_pgd, x_adv, _ = tr.engine.terms((x, y), 0.2, 0.05)
    assert (x_pgd is xs) is not attacks and (x_adv is xs) is not attacks
    assert (x_pgd - xs).abs().max().item() == pytest.approx(0.2 if attacks else 0.0, abs=1e-5)


def test_a_registered_schedule_drives_training_and_the_dry_run(toys, tmp_path):
    cfg = one_epoch("mnist5k-ssat-mbi", **{"attack.schedule": "toy-step", "attack.t": 1, "attack.gamma": 0.5})
    half = cfg.eps / 2
    assert schedule_table(cfg)["eps_max"] == [half]
    tr, metrics, _ = train(cfg, tmp_path)
    assert metrics["sched/eps_max"] == half
    assert metrics["adv/pgd_linf_max"] == pytest.approx(half, abs=1e-5)  # the attack followed eps_max
    assert at_epoch(tr.cfg, 1) == {"eps_max": half, "rho": cfg.method.rho0, "lr": cfg.optim.lr}
    two = one_epoch("mnist5k-ssat-mbi", **{"attack.schedule": "toy-step", "attack.t": 1, "optim.epochs": 2})
    assert schedule_table(two)["eps_max"] == [half, cfg.eps]


def test_the_config_reads_the_schedule_entry(toys):
    assert epsilon_schedule("toy-step", 3, eps=0.3, t=2) == 0.3
    with pytest.raises(ConfigError, match=r"attack\.t: None with attack\.schedule='toy-step'"):
        one_epoch("mnist5k-ssat-mbi", **{"attack.schedule": "toy-step", "attack.t": None})
    with pytest.raises(ValueError, match="allowed: const, linear, curious, toy-step"):
        epsilon_schedule("toy", 1, t=1)
    with pytest.raises(ValueError, match="needs t >= 1"):
        epsilon_schedule("toy-step", 1)
    # gamma is checked only where the schedule uses it
    with pytest.raises(ConfigError, match=r"attack\.gamma: 0\.5"):
        one_epoch("mnist5k-ssat-mbi", **{"attack.gamma": 0.5})


def test_registration_refuses_a_taken_name_or_an_unknown_batching(toys):
    with pytest.raises(ValueError, match="^method 'rst' is registered already$"):
        register_method(Method("rst", "RST", "union", toy_pgd_at, may_interpolate=False))
    with pytest.raises(ValueError, match="batching 'paired'; allowed: union, awr"):
        register_method(Method("toy-paired", "Toy", "paired", toy_pgd_at, may_interpolate=False))
    with pytest.raises(ValueError, match="^schedule 'linear' is registered already$"):
        register_schedule(Schedule("linear", toy_step, title="Linear", label="Lin."))
    union = BATCHING_REGISTRY["union"]
    with pytest.raises(ValueError, match="^batching 'union' is registered already$"):
        register_batching(dataclasses.replace(union, sizes=None))
    assert BATCHING_REGISTRY["union"] is union
    assert "toy-paired" not in METHOD_REGISTRY and SCHEDULE_REGISTRY["linear"].eps_max is not toy_step


# ---- a third batching: one entry and its step -------------------------------------------------------------------
class LabeledOnly:
    """Toy batches: the labeled images alone, two at a time, with their one-hot targets."""

    def __init__(self, arrays, split, num_classes):
        lab = torch.from_numpy(split.labeled)
        self.x = arrays.x_train[lab]
        self.targets = torch.nn.functional.one_hot(arrays.y_train[lab], num_classes).float()

    def __len__(self):
        return len(self.x)

    def epoch(self, gen):
        order = torch.randperm(len(self.x), generator=gen)
        for i in range(0, len(order) - 1, 2):
            b = order[i: i + 2]
            yield to_float(self.x[b]), self.targets[b]


STEPS = []


def labeled_only_step(net, cfg, teacher_net, batch, eps_max, rho, forward):
    from ssat.step import union_step

    STEPS.append((len(batch[0]), teacher_net))
    return union_step(net, cfg, *batch, eps_max, rho, forward=forward)


@pytest.fixture
def toy_batching():
    register_batching(Batching("labeled-only", "labeled-only", lambda cfg, arrays, split, teacher, classes, device:
                               LabeledOnly(arrays, split, classes), step=labeled_only_step,
                               sizes=lambda cfg, b: (2, 2), counts=lambda batch: (len(batch[0]), 2 * len(batch[0])),
                               bn_images=lambda b: b.x, step_images=lambda cfg: 2))
    register_method(Method("toy-labeled-at", "Toy labeled AT", "labeled-only", toy_pgd_at, may_interpolate=False))
    STEPS.clear()
    CALLS.clear()
    yield
    del METHOD_REGISTRY["toy-labeled-at"]
    del BATCHING_REGISTRY["labeled-only"]


def test_a_registered_batching_builds_the_batches_and_runs_its_step(toy_batching, tmp_path):
    cfg = one_epoch("mnist5k-rst", **{"method.name": "toy-labeled-at", "optim.swa_start": 0,
                                      "optim.swa_bn": "recompute"})
    assert cfg.batching is BATCHING_REGISTRY["labeled-only"]
    tr, metrics, moved = train(cfg, tmp_path)
    n = len(tr.split.labeled)
    assert moved and len(tr.batches) == n  # the toy's batches: the labeled images alone
    assert STEPS == [(2, None)] * (n // 2)  # its step, on its pairs, with no teacher network
    assert len(CALLS) == n // 2 and all(c["n"] == 2 for c in CALLS)  # the method's loss, on the toy's batches
    assert tr.engine.sizes == (2, 2)
    # its counts: a pair attacked, and (the toy's own rule) twice as many images counted
    assert metrics["perf/images_per_s"] * metrics["perf/epoch_seconds"] == pytest.approx(2 * 2 * (n // 2))
    assert torch.equal(next(iter(tr._bn_images())).cpu(), tr.engine.prep([to_float(tr.batches.x[:500])])[0].cpu())
    # the AWR batching's own settings stay refused with it, the message naming both batchings
    with pytest.raises(ConfigError, match=r"data\.labeled_sampling: 'cycle' with method\.name='toy-labeled-at', "
                                          r"whose labeled-only batches have no AWR step; allowed with it: 'random' "
                                          r"\(the other value is for the AWR methods: srst-awr, ssat-mbi-awr\)"):
        one_epoch("mnist5k-rst", **{"method.name": "toy-labeled-at", "data.labeled_sampling": "cycle"})

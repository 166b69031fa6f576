"""beta = 1 gives x_pgd's KL term weight 0: with method.pgd_forward "weighted" (the default, as the authors' code)
x_pgd is not forwarded in train mode, so the step makes one train-mode forward fewer and BatchNorm's running
statistics see only the forwards the loss uses; "always" keeps the code before it. The loss and its gradients are
the same either way; what changes is the BN statistics every later eval-mode attack runs with. Checked against
hand-built references: the same model state forwarded in train mode on the step's own images, in order."""
import copy

import pytest
import torch

from ssat.config import from_dict
from ssat.presets import PRESETS, preset
from ssat.train import Trainer
from tests.unit.ssat.test_train import fake_teacher, tiny

EPS_MAX, RHO = 0.2, 0.004  # as test_trainer_wiring: some samples cross rho inside the segment


def trainer(tmp_path, name, teacher=None, **over):
    cfg = tiny(name, **over)
    return Trainer(cfg, tmp_path, teacher=teacher or fake_teacher(cfg), log=lambda s: None)


def bn_state(model):
    return {k: v.clone() for k, v in model.state_dict().items() if "running" in k or "num_batches" in k}


def reference_bn(tr, state, xs):
    """BN buffers after forwarding xs in train mode, in order, from `state` (no gradient)."""
    tr.model.load_state_dict(state)
    tr.model.train()
    with torch.no_grad():
        for x in xs:
            tr.model(x)
    return bn_state(tr.model)


def step_from(tr, state, batch, seed):
    """The step's terms from a known model state and seed; the BN buffers after it; the step's images."""
    tr.model.load_state_dict(state)
    torch.manual_seed(seed)
    terms, x, x_pgd, x_adv, _ = tr.engine.terms(batch, EPS_MAX, RHO)
    return terms, bn_state(tr.model), x, x_pgd, x_adv


def union_case(tr):
    x, y = next(iter(tr.batches.epoch(torch.Generator().manual_seed(1))))
    return (x[:16], y[:16]), None


def awr_case(tr):
    b = tr.batches
    xl = tr.engine.prep([b.xl[:8].float() / 255])[0]
    return (xl, b.yl[:8], b.xu[:16].float() / 255), xl


CASES = {"union": ("mnist5k-ssat-mbi", union_case), "awr": ("mnist5k-ssat-mbi-awr", awr_case)}


@pytest.mark.parametrize("batching", sorted(CASES))
@pytest.mark.parametrize("beta, pgd_forward, forwards_pgd", [
    (0.4, "weighted", True),   # x_pgd's term has weight 0.6: forwarded
    (1.0, "weighted", False),  # weight 0: skipped (the authors' code)
    (1.0, "always", True),     # the code before: forwarded anyway
])
def test_x_pgd_is_forwarded_in_train_mode_only_when_its_term_has_weight(tmp_path, batching, beta, pgd_forward,
                                                                        forwards_pgd):
    name, case = CASES[batching]
    tr = trainer(tmp_path, name, **{"method.beta": beta, "method.pgd_forward": pgd_forward})
    assert tr.cfg.method.interpolate
    batch, xl = case(tr)
    state = copy.deepcopy(tr.model.state_dict())
    terms, after, x, x_pgd, x_adv = step_from(tr, state, batch, seed=3)
    assert x_pgd is not x_adv and not torch.equal(x_pgd, x_adv)
    before = [x, x_adv] if batching == "union" else [xl, x, x_adv]  # union: x, x_adv; AWR: x_l, x_u, x_adv
    want = reference_bn(tr, state, before + ([x_pgd] if forwards_pgd else []))
    n0 = {k: v for k, v in state.items() if k.endswith("num_batches_tracked")}
    for k, v in after.items():
        assert torch.allclose(v.float(), want[k].float(), rtol=1e-6, atol=1e-7), k
        if k.endswith("num_batches_tracked"):  # one per train-mode forward
            assert int(v - n0[k]) == len(before) + forwards_pgd
    assert ("kl_pgd" in terms) == forwards_pgd


@pytest.mark.parametrize("batching", sorted(CASES))
def test_at_beta_one_skipping_x_pgd_changes_neither_the_loss_nor_its_gradients(tmp_path, batching):
    name, case = CASES[batching]
    grads, losses, bns = {}, {}, {}
    teacher = fake_teacher(tiny(name))  # one teacher for both (its weights are random draws)
    for mode in ("weighted", "always"):
        tr = trainer(tmp_path / mode, name, teacher, **{"method.beta": 1.0, "method.pgd_forward": mode})
        batch, _ = case(tr)
        state = copy.deepcopy(tr.model.state_dict())
        terms, bns[mode], *_ = step_from(tr, state, batch, seed=5)
        tr.model.zero_grad()
        terms["loss"].backward()
        losses[mode] = terms["loss"].item()
        grads[mode] = [p.grad.clone() for p in tr.model.parameters()]
    assert losses["weighted"] == losses["always"]
    assert all(torch.allclose(a, b, rtol=1e-6, atol=1e-8) for a, b in zip(grads["weighted"], grads["always"]))
    assert any(not torch.equal(bns["weighted"][k], bns["always"][k]) for k in bns["weighted"]
               if "running_mean" in k)  # the statistics are what differs


# The presets whose trained result changes: x_pgd's term has weight 0 (beta 1) and x_pgd is not x_adv
# (interpolation on). Every other preset keeps its config_hash (tests/unit/ssat/test_presets_hashes.py).
CHANGED = {"cifar100-ssat-mbi", "cifar100-ssat-mbi-awr", "cifar10-trades-ours-resnet18", "cifar10-trades-ours-wrn-28-5"}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_pgd_forward_enters_the_hash_of_exactly_the_beta_one_interpolating_presets(name):
    cfg = from_dict(preset(name))
    old = from_dict(preset(name), {"method.pgd_forward": "always"})
    assert (cfg.config_hash() != old.config_hash()) == (name in CHANGED)
    assert (cfg.method.beta == 1 and cfg.method.interpolate) == (name in CHANGED)

"""Which inputs and logits feed which loss term in the trainer's steps (a real Trainer on MNIST-5k).

Each test runs the trainer's step terms (ssat/step.py's union_step / awr_step) on a fixed batch, then rebuilds the loss
from the model's own train-mode forwards of the returned x, x_pgd and x_adv with the configured lam and beta, and the
attack from the same seed and the model state it ran with. A step that feeds x_adv to the x_pgd term, ignores
beta, attacks with the wrong step or in train mode gives other numbers.
"""
import copy

import pytest
import torch
import torch.nn as nn

from ssat.attacks import pgd
from ssat.divergences import kl_rows
from ssat.datasets import to_float
from ssat.interpolation import interpolate
from ssat.losses import awr_loss, mbi_loss, uat_loss
from ssat.step import adversarial_examples
from ssat.train import Trainer
from tests.unit.ssat.test_train import fake_teacher, tiny

EPS_MAX = 0.2  # differs from cfg.eps (0.3): the PGD step must follow eps_max
RHO = 0.004    # the untrained model's margins are ~0.001-0.008: some samples cross rho inside the segment


def trainer(tmp_path, method="mnist5k-ssat-mbi", **over):
    cfg = tiny(method, **over)
    return Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)


def union_batch(tr, n_lab=4, n_unl=12):
    """Labeled images (one-hot targets) and pseudo-labeled ones (soft targets), as UnionBatches mixes them."""
    idx = torch.cat([torch.arange(n_lab), torch.arange(len(tr.batches) - n_unl, len(tr.batches))])
    y = tr.batches.targets[idx]
    assert (y[:n_lab].max(1).values == 1).all() and (y[n_lab:].max(1).values < 1).all()
    return to_float(tr.batches.x[idx]), y


def bn_layers(model):
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def seeded_step(tr, seed, *args):
    """Run the trainer's step from a known RNG state; returns its outputs and the model state it started from."""
    state = copy.deepcopy(tr.model.state_dict())
    torch.manual_seed(seed)
    return tr.engine.terms(args, EPS_MAX, RHO), state


def replay_attack(tr, state, seed, x, targets, step):
    """PGD from the same seed and model state, with the step size given here (not the trainer's)."""
    tr.model.load_state_dict(state)
    a = tr.cfg.attack
    torch.manual_seed(seed)
    return pgd(tr.engine.net, x, targets, EPS_MAX, a.steps, step, loss=a.inner_loss, init=a.init)


def train_logits(tr, *xs):
    tr.engine.net.train()
    with torch.no_grad():
        return [tr.engine.net(x) for x in xs]


def close(a, b):
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


# ---- SSAT-MBI -----------------------------------------------------------------------------------------
def test_ssat_mbi_terms_come_from_x_x_adv_and_x_pgd(tmp_path):
    tr = trainer(tmp_path)
    m = tr.cfg.method
    assert m.interpolate and 0 < m.beta < 1
    x, y = union_batch(tr)
    (terms, xs, x_pgd, x_adv, alpha), state = seeded_step(tr, 0, x, y)
    # the attack: PGD with step eps_max / 4, in the eps_max-ball; x_adv on the segment at alpha
    assert torch.equal(x_pgd, replay_attack(tr, state, 0, xs, y, 0.25 * EPS_MAX))
    assert (x_pgd - x).abs().max() <= EPS_MAX + 1e-6
    assert (x_pgd - x).abs().max() > 0.9 * EPS_MAX
    a = alpha.view(-1, 1, 1, 1)
    assert close(x_adv, a * x_pgd + (1 - a) * xs)
    assert (alpha < 1).any() and not torch.equal(x_adv, x_pgd)
    tr.model.load_state_dict(state)
    _, alpha_again = interpolate(tr.engine.net, xs, x_pgd, y, RHO, m.tau, m.K)
    assert torch.equal(alpha, alpha_again)  # rho and tau reach the search as given
    # the loss: eq. 9 on the train-mode logits of x, x_adv, x_pgd, with the configured lam and beta
    lx, la, lp = train_logits(tr, xs, x_adv, x_pgd)
    want = mbi_loss(lx, la, lp, y, m.lam, m.beta)
    for k in ("loss", "ce", "kl_adv", "kl_pgd"):
        assert close(terms[k].detach(), want[k]), k
    # kl_pgd is KL(p(x) || p(x_pgd)), not the x_adv term again
    assert close(terms["kl_pgd"].detach(), kl_rows(lx, lp).mean())
    assert not close(terms["kl_pgd"].detach(), kl_rows(lx, la).mean())
    assert not close(terms["loss"].detach(), mbi_loss(lx, la, lp, y, m.lam, 1 - m.beta)["loss"])


def test_beta_changes_the_ssat_mbi_loss_but_not_rst(tmp_path):
    losses = {}
    for method in ("mnist5k-ssat-mbi", "mnist5k-rst"):
        for beta in (0.2, 0.9):
            tr = trainer(tmp_path / f"{method}-{beta}", method, **{"method.beta": beta})
            x, y = union_batch(tr)
            (terms, xs, x_pgd, x_adv, _), _ = seeded_step(tr, 1, x, y)
            losses[method, beta] = terms["loss"].item()
            if method == "mnist5k-rst":
                # no interpolation: one attacked batch, the loss is RST's CE + lam KL(p(x) || p(x_pgd))
                assert x_adv is x_pgd
                lx, lp = train_logits(tr, xs, x_pgd)
                want = mbi_loss(lx, lp, lp, y, tr.cfg.method.lam, 0.0)["loss"]
                assert close(terms["loss"].detach(), want)
    assert losses["mnist5k-ssat-mbi", 0.2] != pytest.approx(losses["mnist5k-ssat-mbi", 0.9], rel=1e-4)
    assert losses["mnist5k-rst", 0.2] == pytest.approx(losses["mnist5k-rst", 0.9], rel=1e-6)


def test_train_forwards_update_batchnorm_and_the_attack_does_not(tmp_path):
    tr = trainer(tmp_path)
    x, y = union_batch(tr)
    bns = bn_layers(tr.model)
    before = [copy.deepcopy(b.state_dict()) for b in bns]
    tr.model.train()
    # 10 PGD steps and K = 3 margin evaluations
    adversarial_examples(tr.engine.net, tr.cfg, tr.engine.prep([x])[0], y, EPS_MAX, RHO)
    assert tr.model.training
    for b, s in zip(bns, before):
        for k, v in b.state_dict().items():
            assert torch.equal(v, s[k]), k
    tr.engine.terms((x, y), EPS_MAX, RHO)
    # exactly three train-mode forwards per step: x, x_adv, x_pgd
    assert [int(b.num_batches_tracked) for b in bns] == [int(s["num_batches_tracked"]) + 3 for s in before]
    assert not torch.equal(bns[0].running_mean, before[0]["running_mean"])


def test_step_size_setting_overrides_step_ratio(tmp_path):
    tr = trainer(tmp_path, **{"attack.step_size": 0.01, "attack.inner_loss": "kl", "attack.init": "normal"})
    x, y = union_batch(tr)
    (_, xs, x_pgd, _, _), state = seeded_step(tr, 2, x, y)
    assert torch.equal(x_pgd, replay_attack(tr, state, 2, xs, y, 0.01))
    assert not torch.equal(x_pgd, replay_attack(tr, state, 2, xs, y, 0.25 * EPS_MAX))
    assert (x_pgd - x).abs().max() <= 10 * 0.01 + 0.006  # ten steps of 0.01 from a 0.001 * N(0, 1) start


# ---- UAT++ and standard training ------------------------------------------------------------------------
def test_uat_ce_is_on_x_adv_and_the_clean_side_is_fixed(tmp_path):
    tr = trainer(tmp_path, "mnist5k-uat++")
    x, y = union_batch(tr)
    (terms, xs, x_pgd, x_adv, _), _ = seeded_step(tr, 3, x, y)
    assert x_adv is x_pgd
    lx, la = train_logits(tr, xs, x_adv)
    want = uat_loss(lx, la, y, tr.cfg.method.lam)
    for k in ("loss", "ce", "kl_adv"):
        assert close(terms[k].detach(), want[k]), k
    # CE on f(x), as in eq. 9, would be another number
    assert not close(terms["ce"].detach(), -(y * torch.log_softmax(lx, 1)).sum(1).mean())


def test_lambda_zero_is_standard_training_without_an_attack(tmp_path):
    tr = trainer(tmp_path, "mnist5k-standard")
    assert tr.cfg.method.lam == 0
    x, y = union_batch(tr)
    terms, xs, x_pgd, x_adv, alpha = tr.engine.terms((x, y), EPS_MAX, RHO)
    assert x_pgd is xs and x_adv is xs and torch.equal(alpha, torch.zeros(len(x)))
    (lx,) = train_logits(tr, xs)
    assert close(terms["loss"].detach(), -(y * torch.log_softmax(lx, 1)).sum(1).mean())


# ---- the AWR variants -------------------------------------------------------------------------------------
def awr_batch(tr):
    b = tr.batches
    return to_float(b.xl[:8]), b.yl[:8], to_float(b.xu[:16])


def test_ssat_mbi_awr_terms_teacher_targets_and_weights(tmp_path):
    tr = trainer(tmp_path, "mnist5k-ssat-mbi-awr")
    m = tr.cfg.method
    assert m.interpolate and 0 < m.beta
    xl, yl, xu = awr_batch(tr)
    teacher_state = copy.deepcopy(tr.teacher_model.state_dict())
    (terms, xs, x_pgd, x_adv, alpha), state = seeded_step(tr, 4, xl, yl, xu)
    # the teacher is a constant: eval mode, no gradient, its BN statistics untouched by the step
    terms["loss"].backward()
    assert not tr.teacher_model.training
    assert all(p.grad is None and not p.requires_grad for p in tr.teacher_model.parameters())
    for k, v in tr.teacher_model.state_dict().items():
        assert torch.equal(v, teacher_state[k]), k
    assert all(p.grad is not None for p in tr.model.parameters())
    with torch.no_grad():
        t_logits = tr.teacher_model(xs)
    y_t = torch.softmax(t_logits, 1)
    # the attack's targets are the teacher's soft labels of x_u
    assert torch.equal(x_pgd, replay_attack(tr, state, 4, xs, y_t, 0.25 * EPS_MAX))
    assert (x_pgd - xs).abs().max() <= EPS_MAX + 1e-6
    a = alpha.view(-1, 1, 1, 1)
    assert close(x_adv, a * x_pgd + (1 - a) * xs) and (alpha < 1).any()
    ll, lu, la, lp = train_logits(tr, tr.engine.prep([xl])[0], xs, x_adv, x_pgd)
    want = awr_loss(ll, yl, lu, la, lp, t_logits, lam=m.lam, beta=m.beta, label_smoothing=m.label_smoothing,
                    gamma_prime=m.gamma_prime, tau_prime=m.tau_prime)
    for k in ("loss", "ce", "kd", "kl_adv", "kl_pgd", "w_adv", "w_pgd"):
        assert close(terms[k].detach(), want[k]), k
    beta_zero = awr_loss(ll, yl, lu, la, lp, t_logits, lam=m.lam, beta=0.0, label_smoothing=m.label_smoothing,
                         gamma_prime=m.gamma_prime, tau_prime=m.tau_prime)
    assert not close(terms["loss"].detach(), beta_zero["loss"])  # beta is used, not forced to 0


def test_srst_awr_is_the_rst_form_on_x_pgd(tmp_path):
    tr = trainer(tmp_path, "mnist5k-srst-awr", **{"method.beta": 0.7})
    m = tr.cfg.method
    xl, yl, xu = awr_batch(tr)
    (terms, xs, x_pgd, x_adv, alpha), _ = seeded_step(tr, 5, xl, yl, xu)
    assert x_adv is x_pgd and torch.equal(alpha, torch.ones(len(xu)))
    with torch.no_grad():
        t_logits = tr.teacher_model(xs)
    ll, lu, lp = train_logits(tr, tr.engine.prep([xl])[0], xs, x_pgd)
    want = awr_loss(ll, yl, lu, lp, lp, t_logits, lam=m.lam, beta=0.0, label_smoothing=m.label_smoothing,
                    gamma_prime=m.gamma_prime, tau_prime=m.tau_prime)
    assert close(terms["loss"].detach(), want["loss"])
    assert close(terms["kl_pgd"].detach(), want["kl_pgd"])

"""The paper's equations checked against hand-computed cases and independent implementations."""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from ssat import epsilon_schedule, interpolate, margin, pgd
from ssat.losses import awr_loss, awr_weight, mbi_loss, uat_loss
from ssat.schedules import lr_at, rho_schedule


# ---- margin (eqs. 6-8) ---------------------------------------------------------------------------
def test_margin_hand_computed_labeled_and_soft():
    logits = torch.tensor([[math.log(1.0), math.log(2.0), math.log(7.0)]])  # softmax = [0.1, 0.2, 0.7]
    # labeled, true class 1: max 0.7 - 0.2
    assert margin(logits, torch.tensor([1]), tau=1.0).item() == pytest.approx(0.5, abs=1e-6)
    # labeled, true class is the argmax: margin 0
    assert margin(logits, torch.tensor([2]), tau=1.0).item() == pytest.approx(0.0, abs=1e-6)
    # soft target [0.5, 0.5, 0]: 0.7 - (0.05 + 0.1)
    soft = torch.tensor([[0.5, 0.5, 0.0]])
    assert margin(logits, soft, tau=1.0).item() == pytest.approx(0.55, abs=1e-6)
    # tau = 2 squares-roots the odds: s = [1, sqrt2, sqrt7] / (1 + sqrt2 + sqrt7)
    z = 1 + math.sqrt(2) + math.sqrt(7)
    assert margin(logits, torch.tensor([0]), tau=2.0).item() == pytest.approx((math.sqrt(7) - 1) / z, abs=1e-6)


# ---- binary search (Algorithm 1, lines 9-18) -------------------------------------------------------
class Line(nn.Module):
    """logits = [0, scale * x]: along x(alpha) = alpha * v the margin for class 0 is tanh(scale*alpha*v / (2 tau))."""

    def __init__(self, scale):
        super().__init__()
        self.scale, self.calls = scale, 0

    def forward(self, x):
        self.calls += 1
        z = self.scale * x.flatten(1).sum(1)
        return torch.stack([torch.zeros_like(z), z], 1)


@pytest.mark.parametrize("K", [3, 5, 8])
def test_binary_search_matches_closed_form_crossing(K):
    rho, tau, scale = 0.1, 2.0, 4.0
    v = torch.tensor([0.3, 0.5, 0.8, 1.0, 0.25])
    x = torch.zeros(5, 1, 1, 1)
    x_pgd = v.view(5, 1, 1, 1)
    model = Line(scale)
    x_adv, alpha = interpolate(model, x, x_pgd, torch.zeros(5, dtype=torch.long), rho, tau, K)
    alpha_star = 2 * tau * math.atanh(rho) / (scale * v)  # d(alpha*) = rho
    reachable = alpha_star <= 1
    assert reachable.sum() >= 3
    # alpha_r is the first grid point at or past the crossing: alpha* <= alpha_r < alpha* + 2^-K
    assert torch.all(alpha[reachable] >= alpha_star[reachable] - 1e-6)
    assert torch.all(alpha[reachable] - alpha_star[reachable] <= 2.0 ** -K + 1e-6)
    assert torch.all(alpha[~reachable] == 1.0)
    assert torch.allclose(x_adv.flatten(), alpha * v)
    assert model.calls == K  # batched: K forwards for the whole batch, never K x B


def test_binary_search_edge_cases():
    K, model = 4, Line(10.0)
    x = torch.tensor([1.0, 0.0]).view(2, 1, 1, 1)       # sample 0 already across (d >= rho at every alpha)
    x_pgd = torch.tensor([1.0, 0.0]).view(2, 1, 1, 1)   # sample 1 never moves (d = 0 < rho)
    _, alpha = interpolate(model, x, x_pgd, torch.zeros(2, dtype=torch.long), rho=0.05, tau=1.0, steps=K)
    assert alpha.tolist() == [2.0 ** -K, 1.0]


def test_interpolation_restores_mode_and_uses_eval():
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.BatchNorm1d(3))
    model.train()
    before = model[2].running_mean.clone()
    x = torch.rand(8, 1, 2, 2)
    interpolate(model, x, (x + 0.1).clamp(0, 1), torch.randint(0, 3, (8,)), 0.05, 2.0, 3)
    assert model.training
    assert torch.equal(model[2].running_mean, before)  # eval mode: BN statistics untouched


# ---- PGD -------------------------------------------------------------------------------------------
def test_pgd_stays_in_ball_and_box_and_leaves_parameters_alone():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    model.train()
    x = torch.rand(6, 1, 6, 6)
    y = torch.randint(0, 3, (6,))
    for loss, tgt in (("ce", y), ("ce", torch.softmax(torch.randn(6, 3), 1)), ("kl", y)):
        x_adv = pgd(model, x, tgt, eps=0.1, steps=5, step_size=0.04, loss=loss)
        assert (x_adv - x).abs().max() <= 0.1 + 1e-6
        assert x_adv.min() >= 0 and x_adv.max() <= 1
        assert not torch.equal(x_adv, x)
    assert model.training
    assert all(p.grad is None for p in model.parameters())


def test_pgd_increases_loss_over_clean():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 5))
    x, y = torch.rand(32, 1, 4, 4), torch.randint(0, 5, (32,))
    ce = nn.functional.cross_entropy
    x_adv = pgd(model, x, y, eps=0.2, steps=10, step_size=0.05, random_start=False)
    assert ce(model(x_adv), y) > ce(model(x), y) + 0.05


def test_pgd_normal_start_is_small():
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 5))
    x = torch.full((4, 1, 4, 4), 0.5)
    x0 = pgd(model, x, torch.zeros(4, dtype=torch.long), eps=0.1, steps=1, step_size=0.0, init="normal")
    assert 0 < (x0 - x).abs().max() < 0.01


# ---- schedules ---------------------------------------------------------------------------------------
def test_epsilon_schedules_at_boundaries():
    eps, t = 8 / 255, 70
    assert epsilon_schedule("const", 1, eps=eps) == eps
    lin = [epsilon_schedule("linear", e, eps=eps, t=t) for e in (1, t - 1, t, t + 1)]
    assert lin == pytest.approx([eps / t, eps * (t - 1) / t, eps, eps])
    cur = [epsilon_schedule("curious", e, eps=eps, t=t, gamma=1.25) for e in (1, t - 1, t, t + 1)]
    assert cur == pytest.approx([1.25 * eps / t, 1.25 * eps * (t - 1) / t, 1.25 * eps, eps])
    # gamma = 1 is Linear-t
    assert [epsilon_schedule("curious", e, eps=eps, t=t, gamma=1.0) for e in range(1, 100)] == pytest.approx(
        [epsilon_schedule("linear", e, eps=eps, t=t) for e in range(1, 100)])
    with pytest.raises(ValueError):
        epsilon_schedule("linear", 0, eps=eps, t=t)
    with pytest.raises(ValueError):
        epsilon_schedule("curious", 3, eps=eps)


def test_rho_and_lr_schedules():
    assert [rho_schedule(e, 0.05, 75) for e in (1, 74, 75, 100)] == [0.05, 0.05, 0.1, 0.1]
    assert rho_schedule(90, 0.05, None) == 0.05
    lrs = [lr_at(e, 0.1, [60, 70, 90], [0.1, 0.01, 0.005]) for e in (1, 59, 60, 69, 70, 90, 100)]
    assert lrs == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001, 0.0005, 0.0005])


# ---- losses --------------------------------------------------------------------------------------------
def _np_softmax(z):
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def _paper_loss(lx, la, lp, y, lam, beta):
    """eq. 9 written out in numpy: CE(f(x), y~) + lam [beta KL(p(x)||p(x_adv)) + (1-beta) KL(p(x)||p(x_pgd))]."""
    px, pa, pp = _np_softmax(lx), _np_softmax(la), _np_softmax(lp)
    ce = -(y * np.log(px)).sum(1).mean()
    kl = lambda p, q: (p * (np.log(p) - np.log(q))).sum(1).mean()  # noqa: E731
    return ce + lam * (beta * kl(px, pa) + (1 - beta) * kl(px, pp))


def test_ssat_mbi_loss_matches_the_paper_equation():
    g = torch.Generator().manual_seed(3)
    lx, la, lp = (torch.randn(16, 10, generator=g, dtype=torch.float64) for _ in range(3))
    y = torch.softmax(torch.randn(16, 10, generator=g, dtype=torch.float64), 1)
    y[:4] = torch.nn.functional.one_hot(torch.arange(4), 10).double()  # labeled rows: one-hot
    for lam, beta in ((8.0, 0.4), (6.0, 1.0), (4.0, 0.0)):
        got = mbi_loss(lx, la, lp, y, lam, beta)["loss"].item()
        want = _paper_loss(lx.numpy(), la.numpy(), lp.numpy(), y.numpy(), lam, beta)
        assert got == pytest.approx(want, rel=1e-5)


def test_interpolation_off_is_rst_for_every_beta_and_beta_switches_terms():
    g = torch.Generator().manual_seed(4)
    lx, la, lp = (torch.randn(8, 5, generator=g) for _ in range(3))
    y = torch.softmax(torch.randn(8, 5, generator=g), 1)
    rst = mbi_loss(lx, lp, lp, y, 8.0, 0.0)["loss"]
    for beta in (0.0, 0.3, 0.7, 1.0):
        # interpolation off: x_adv is x_pgd
        assert torch.allclose(mbi_loss(lx, lp, lp, y, 8.0, beta)["loss"], rst)
    # beta = 0 with interpolation on: RST on the same x_pgd
    assert torch.allclose(mbi_loss(lx, la, lp, y, 8.0, 0.0)["loss"], rst)
    # beta = 1: only x_adv counts, which differs
    assert not torch.allclose(mbi_loss(lx, la, lp, y, 8.0, 1.0)["loss"], rst)


def test_uat_detaches_the_clean_side():
    lx = torch.randn(4, 3, requires_grad=True)
    la = torch.randn(4, 3, requires_grad=True)
    y = torch.randint(0, 3, (4,))
    uat_loss(lx, la, y, 6.0)["loss"].backward()
    assert lx.grad is None and la.grad is not None
    lx2 = lx.detach().clone().requires_grad_(True)
    mbi_loss(lx2, la, la, y, 6.0, 1.0)["loss"].backward()
    assert lx2.grad is not None  # RST/SSAT-MBI: the clean side carries gradients


def test_awr_weights_hand_computed():
    y_t = torch.tensor([[0.8, 0.2, 0.0]])
    lx = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    la = torch.log(torch.tensor([[0.1, 0.6, 0.3]]))
    # 1/2 (0.8*0.5 + 0.2*0.25) + 1/2 (0.8*0.9 + 0.2*0.4) = 0.225 + 0.4
    assert awr_weight(y_t, lx, la).item() == pytest.approx(0.625, abs=1e-6)


def test_awr_loss_matches_the_appendix_equation():
    g = torch.Generator().manual_seed(5)
    ll, lu, la, lp, lt = (torch.randn(n, 4, generator=g, dtype=torch.float64) for n in (3, 6, 6, 6, 6))
    yl = torch.tensor([0, 2, 1])
    out = awr_loss(ll, yl, lu, la, lp, lt, lam=20.0, beta=0.3, label_smoothing=0.2, gamma_prime=4.0, tau_prime=1.2)
    sm = _np_softmax
    ll_, lu_, la_, lp_, lt_ = (t.numpy() for t in (ll, lu, la, lp, lt))
    smooth = np.full((3, 4), 0.2 / 4) + 0.8 * np.eye(4)[yl.numpy()]
    ls = -(smooth * np.log(sm(ll_))).sum(1).mean()
    kl = lambda p, q: (p * (np.log(p) - np.log(q))).sum(1)  # noqa: E731
    yt = sm(lt_)
    kd = kl(sm(lt_ / 1.2), sm(lu_ / 1.2)).mean()
    w = lambda q: 0.5 * (yt * sm(lu_)).sum(1) + 0.5 * (yt * (1 - sm(q))).sum(1)  # noqa: E731
    # beta = 0.3 on x_adv, 0.7 on x_pgd (an asymmetric beta, so a swap shows)
    rob = 0.3 * (kl(sm(lu_), sm(la_)) * w(la_)).mean() + 0.7 * (kl(sm(lu_), sm(lp_)) * w(lp_)).mean()
    assert out["loss"].item() == pytest.approx(ls + 4.0 * kd + 20.0 * rob, rel=1e-6)
    assert out["kd"].item() == pytest.approx(kd, rel=1e-6)
    assert out["ce"].item() == pytest.approx(ls, rel=1e-6)
    assert out["w_adv"].item() == pytest.approx(w(la_).mean(), rel=1e-6)
    assert out["w_pgd"].item() == pytest.approx(w(lp_).mean(), rel=1e-6)


# ---- losses on two classes, by hand -------------------------------------------------------------------
L3, L9 = math.log(3.0), math.log(9.0)


def _two_rows():
    """Row 1: p(x) = [.5, .5], p(x_adv) = [.25, .75], p(x_pgd) = [.1, .9], label 0.
    Row 2: p(x) = [.75, .25], p(x_adv) = [.1, .9], p(x_pgd) = [.25, .75], label 1."""
    lx = torch.tensor([[0.0, 0.0], [L3, 0.0]])
    la = torch.tensor([[0.0, L3], [0.0, L9]])
    lp = torch.tensor([[0.0, L9], [0.0, L3]])
    return lx, la, lp, torch.tensor([0, 1])


# KL(p(x) || p(x_adv)) and KL(p(x) || p(x_pgd)) per row, written out; the reversed KL(q || p) differs
KL_ADV = [0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75),
          0.75 * math.log(0.75 / 0.1) + 0.25 * math.log(0.25 / 0.9)]
KL_ADV_REVERSED = [0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5),
                   0.1 * math.log(0.1 / 0.75) + 0.9 * math.log(0.9 / 0.25)]
KL_PGD = [0.5 * math.log(0.5 / 0.1) + 0.5 * math.log(0.5 / 0.9), 0.75 * math.log(3.0) + 0.25 * math.log(1 / 3)]


def test_mbi_loss_two_class_values_by_hand():
    lx, la, lp, y = _two_rows()
    t = mbi_loss(lx, la, lp, y, lam=2.0, beta=0.25)
    ce = (math.log(2.0) + math.log(4.0)) / 2            # -log 0.5, -log 0.25: a batch mean
    kl_adv, kl_pgd = sum(KL_ADV) / 2, sum(KL_PGD) / 2
    assert t["ce"].item() == pytest.approx(ce, abs=1e-6)
    assert t["kl_adv"].item() == pytest.approx(kl_adv, abs=1e-6)
    assert t["kl_pgd"].item() == pytest.approx(kl_pgd, abs=1e-6)
    assert t["loss"].item() == pytest.approx(ce + 2.0 * (0.25 * kl_adv + 0.75 * kl_pgd), abs=1e-6)
    assert abs(kl_adv - sum(KL_ADV_REVERSED) / 2) > 0.1  # the hand values tell the two directions apart
    # soft targets: y~ = [.5, .5] on row 1, one-hot on row 2
    soft = torch.tensor([[0.5, 0.5], [0.0, 1.0]])
    assert mbi_loss(lx, la, lp, soft, 2.0, 0.25)["ce"].item() == pytest.approx(ce, abs=1e-6)
    soft = torch.tensor([[0.2, 0.8], [0.0, 1.0]])  # row 1: -(0.2 + 0.8) log 0.5 = log 2 still (p uniform)
    lx2 = torch.tensor([[0.0, L3], [L3, 0.0]])     # row 1 now [.25, .75]: -(0.2 log .25 + 0.8 log .75)
    want = (-(0.2 * math.log(0.25) + 0.8 * math.log(0.75)) + math.log(4.0)) / 2
    assert mbi_loss(lx2, la, lp, soft, 2.0, 0.25)["ce"].item() == pytest.approx(want, abs=1e-6)


def test_uat_loss_two_class_values_by_hand():
    lx, la, _, y = _two_rows()
    t = uat_loss(lx, la, y, lam=3.0)
    ce = (-math.log(0.25) - math.log(0.9)) / 2  # CE on f(x_adv), eq. 5
    assert t["ce"].item() == pytest.approx(ce, abs=1e-6)
    assert t["kl_adv"].item() == pytest.approx(sum(KL_ADV) / 2, abs=1e-6)
    assert t["loss"].item() == pytest.approx(ce + 3.0 * sum(KL_ADV) / 2, abs=1e-6)
    # UAT++ attacks once: its x_pgd term is the x_adv term (the trainer logs both names for every method)
    assert set(t) == {"loss", "ce", "kl_adv", "kl_pgd"} and t["kl_pgd"].item() == t["kl_adv"].item()


@pytest.mark.filterwarnings("error")  # e.g. softmax without dim: right on 2-D logits, but a warning per step
def test_awr_label_smoothing_and_teacher_temperature_by_hand():
    ll = torch.tensor([[0.0, L3], [0.0, 0.0]])            # [.25, .75], [.5, .5]
    yl = torch.tensor([1, 0])
    lt = torch.tensor([[0.0, 2 * L3]])                    # / tau' = 2: [.25, .75]
    lu = torch.tensor([[0.0, 2 * L9]])                    # / tau' = 2: [.1, .9]
    la = lp = lu
    t = awr_loss(ll, yl, lu, la, lp, lt, lam=0.0, beta=0.3, label_smoothing=0.2, gamma_prime=4.0, tau_prime=2.0)
    # label smoothing 0.2 over 2 classes: targets [0.1, 0.9] and [0.9, 0.1]
    ls = (-(0.1 * math.log(0.25) + 0.9 * math.log(0.75)) + math.log(2.0)) / 2
    kd = 0.25 * math.log(0.25 / 0.1) + 0.75 * math.log(0.75 / 0.9)  # KL(p_T^tau' || p^tau')
    assert t["ce"].item() == pytest.approx(ls, abs=1e-6)
    assert t["kd"].item() == pytest.approx(kd, abs=1e-6)
    assert t["loss"].item() == pytest.approx(ls + 4.0 * kd, abs=1e-6)
    # x_u = x_u_adv: the KL terms vanish whatever lam; w = 1/2 <y~, p> + 1/2 <y~, 1 - p> = 1/2
    t = awr_loss(ll, yl, lu, la, lp, lt, lam=5.0, beta=0.3, label_smoothing=0.2, gamma_prime=4.0, tau_prime=2.0)
    assert t["loss"].item() == pytest.approx(ls + 4.0 * kd, abs=1e-6)
    assert t["w_adv"].item() == pytest.approx(0.5, abs=1e-6)


@pytest.mark.filterwarnings("error")
def test_awr_weight_two_rows_by_hand():
    y_t = torch.tensor([[1.0, 0.0], [0.25, 0.75]])
    lx = torch.tensor([[L3, 0.0], [0.0, 0.0]])     # [.75, .25], [.5, .5]
    la = torch.tensor([[0.0, L3], [0.0, L9]])      # [.25, .75], [.1, .9]
    # row 1: 1/2 * .75 + 1/2 * (1 - .25); row 2: 1/2 * .5 + 1/2 * (.25 * .9 + .75 * .1)
    want = [0.5 * 0.75 + 0.5 * 0.75, 0.25 + 0.5 * (0.25 * 0.9 + 0.75 * 0.1)]
    assert awr_weight(y_t, lx, la).tolist() == pytest.approx(want, abs=1e-6)


# ---- schedules: every branch at its boundary ------------------------------------------------------------
def test_curious_gamma_scales_the_ramp_and_eps_holds_after_t():
    eps, t = 0.3, 4
    got = [epsilon_schedule("curious", e, eps=eps, t=t, gamma=2.0) for e in (1, 2, 4, 5, 50)]
    assert got == pytest.approx([0.15, 0.3, 0.6, 0.3, 0.3])
    assert [epsilon_schedule("linear", e, eps=eps, t=t) for e in (1, 4, 5, 50)] == pytest.approx(
        [0.075, 0.3, 0.3, 0.3])
    # the trainer passes attack.gamma (default 1.25) to every schedule: Linear-t must ignore it
    assert [epsilon_schedule("linear", e, eps=eps, t=t, gamma=2.0) for e in (2, 5)] == pytest.approx([0.15, 0.3])
    assert epsilon_schedule("curious", 4, eps=eps, t=t) == pytest.approx(eps)  # gamma defaults to 1
    assert epsilon_schedule("linear", 1, eps=eps, t=1) == pytest.approx(eps)  # t = 1: eps from the start
    assert epsilon_schedule("const", 1, eps=eps, t=4, gamma=2.0) == eps      # const ignores t and gamma
    assert epsilon_schedule("const", 2) == pytest.approx(8 / 255)              # the default eps


def test_epsilon_schedule_errors_name_the_problem():
    with pytest.raises(ValueError, match="epochs count from 1"):
        epsilon_schedule("const", 0)
    with pytest.raises(ValueError, match="epochs count from 1"):
        epsilon_schedule("curious", -3, t=5)
    with pytest.raises(ValueError, match="allowed: const, linear, curious"):
        epsilon_schedule("cosine", 3, t=5)
    for name in ("linear", "curious"):
        with pytest.raises(ValueError, match="needs t >= 1"):
            epsilon_schedule(name, 3)
        with pytest.raises(ValueError, match="needs t >= 1"):
            epsilon_schedule(name, 3, t=0)


def test_rho_doubles_from_double_epoch_and_lr_factors_are_of_the_initial_rate():
    assert [rho_schedule(e, 0.03, 3) for e in (1, 2, 3, 4)] == [0.03, 0.03, 0.06, 0.06]
    assert rho_schedule(1, 0.03, 1) == 0.06
    assert lr_at(5, 0.2, [], []) == 0.2
    assert [lr_at(e, 0.2, [2, 4], [0.5, 0.1]) for e in (1, 2, 3, 4, 9)] == pytest.approx(
        [0.2, 0.1, 0.1, 0.02, 0.02])

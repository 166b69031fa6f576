"""The contract of PGD-T (eq. 2) and of margin-based interpolation (Algorithm 1, lines 9-18).

Each test uses a model whose input gradient or margin is known, so a step along the raw gradient,
a missing projection, a train-mode forward or a wrong interpolation end point gives another number.
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ssat.attacks import eval_mode, pgd, start_point
from ssat.divergences import kl_rows, soft_cross_entropy
from ssat.interpolation import as_probabilities, interpolate, margin


class Linear(nn.Module):
    """logits = x.flatten(1) @ W: the CE input gradient is W (softmax - y), of non-unit magnitude."""

    def __init__(self, W):
        super().__init__()
        self.W = nn.Parameter(W)

    def forward(self, x):
        return x.flatten(1) @ self.W


class SquaredBN(nn.Module):
    """z = sum of pixels -> BatchNorm1d(1) -> logits [0, -z_bn^2]; records its mode at every forward.

    With running mean 10 (above every z) the eval-mode z_bn is negative, so CE towards class 0 rises with
    every pixel: PGD moves each pixel up. Train-mode (batch) statistics centre z_bn at 0 and send the
    samples above the batch mean down instead.
    """

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(1, affine=False)
        self.bn.running_mean.fill_(10.0)
        self.modes = []

    def forward(self, x):
        self.modes.append(self.training)
        z = self.bn(x.flatten(1).sum(1, keepdim=True))
        return torch.cat([torch.zeros_like(z), -z ** 2], 1)


def _linear_model(seed=0, pixels=6, classes=3):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(pixels, classes, generator=g) * torch.tensor([0.3, 2.0, 5.0, 0.7, 1.3, 9.0])[:pixels, None]
    return Linear(W)


def _input_grad(model, x, y):
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(soft_cross_entropy(model(x), y).sum(), x)
    return g


# ---- one step -----------------------------------------------------------------------------------------
def test_step_is_step_size_times_the_sign_of_the_input_gradient():
    model = _linear_model()
    x = torch.full((4, 1, 2, 3), 0.5)
    y = torch.tensor([0, 1, 2, 0])
    g = _input_grad(model, x, y)
    assert not torch.allclose(g.abs(), torch.ones_like(g))  # a raw-gradient step would differ
    x1 = pgd(model, x, y, eps=0.3, steps=1, step_size=0.01, random_start=False)
    assert torch.allclose(x1 - x, 0.01 * g.sign(), atol=1e-7, rtol=0)
    assert (g != 0).all()


def test_each_step_uses_the_gradient_at_the_current_point():
    """Two steps of 0.05 from x equal one step of 0.05 from the point after the first."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    x = torch.rand(16, 1, 2, 3) * 0.4 + 0.3
    y = torch.randint(0, 3, (16,))
    x1 = pgd(model, x, y, eps=0.3, steps=1, step_size=0.05, random_start=False)
    x2 = pgd(model, x, y, eps=0.3, steps=2, step_size=0.05, random_start=False)
    want = (x1 + 0.05 * _input_grad(model, x1, y).sign()).clamp(x - 0.3, x + 0.3)
    assert torch.allclose(x2, want, atol=1e-7, rtol=0)


def test_soft_targets_follow_the_soft_cross_entropy_gradient():
    model = _linear_model(1)
    x = torch.full((3, 1, 2, 3), 0.5)
    y_soft = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]])
    x1 = pgd(model, x, y_soft, eps=0.3, steps=1, step_size=0.02, random_start=False)
    g = _input_grad(model, x, y_soft)
    assert torch.allclose(x1 - x, 0.02 * g.sign(), atol=1e-7, rtol=0)
    # one-hot soft targets and hard labels are the same attack
    y = torch.tensor([2, 0, 1])
    a = pgd(model, x, y, eps=0.3, steps=3, step_size=0.02, random_start=False)
    b = pgd(model, x, F.one_hot(y, 3).float(), eps=0.3, steps=3, step_size=0.02, random_start=False)
    assert torch.equal(a, b)


# ---- projection -----------------------------------------------------------------------------------------
def test_projection_onto_the_eps_ball_on_both_sides():
    model = _linear_model(2)
    x = torch.full((4, 1, 2, 3), 0.5)
    y = torch.tensor([0, 1, 2, 1])
    g = _input_grad(model, x, y)
    x1 = pgd(model, x, y, eps=0.1, steps=3, step_size=1.0, random_start=False)  # every step overshoots
    assert torch.allclose(x1, x + 0.1 * g.sign(), atol=1e-7, rtol=0)
    assert (x1 > x).any() and (x1 < x).any()  # both faces of the ball are hit


def test_projection_onto_the_box_on_both_sides():
    W = torch.zeros(2, 2)
    W[0, 1], W[1, 1] = 1.0, -1.0  # CE towards class 0: pixel 0 goes up, pixel 1 down
    model = Linear(W)
    x = torch.tensor([[0.97, 0.02], [0.5, 0.5]]).view(2, 1, 1, 2)
    y = torch.zeros(2, dtype=torch.long)
    x1 = pgd(model, x, y, eps=0.1, steps=2, step_size=0.1, random_start=False)
    assert x1[0].flatten().tolist() == [1.0, 0.0]
    assert torch.allclose(x1[1].flatten(), torch.tensor([0.6, 0.4]))


def test_zero_gradient_pixels_stay_put_and_no_steps_or_no_eps_return_x():
    W = _linear_model(3).W.detach().clone()
    W[2] = 0.0  # pixel 2 has no influence: sign(0) = 0, it never moves
    model = Linear(W)
    x = torch.rand(5, 1, 2, 3)
    y = torch.randint(0, 3, (5,))
    x1 = pgd(model, x, y, eps=0.2, steps=4, step_size=0.05, random_start=False)
    assert torch.equal(x1.flatten(1)[:, 2], x.flatten(1)[:, 2])
    for eps, steps in ((0.0, 5), (0.2, 0), (-0.1, 5)):
        out = pgd(model, x, y, eps=eps, steps=steps, step_size=0.05)
        assert torch.equal(out, x) and out is not x
    probe = SquaredBN()
    pgd(probe, torch.rand(4, 1, 2, 2), torch.zeros(4, dtype=torch.long), eps=0.0, steps=5, step_size=0.05)
    assert probe.modes == []  # nothing to attack: the model is not run at all


# ---- mode, parameters, graph ------------------------------------------------------------------------------
def test_attack_runs_in_eval_mode_with_running_statistics():
    model = SquaredBN().train()
    torch.manual_seed(0)
    x = torch.rand(8, 1, 2, 2) * 0.6 + 0.2
    y = torch.zeros(8, dtype=torch.long)
    stats = {k: v.clone() for k, v in model.bn.state_dict().items()}
    x1 = pgd(model, x, y, eps=0.1, steps=1, step_size=0.05, random_start=False)
    assert model.modes == [False]
    assert model.training  # restored
    for k, v in model.bn.state_dict().items():
        assert torch.equal(v, stats[k]), k  # running statistics untouched
    assert torch.allclose(x1, x + 0.05)  # running statistics: every pixel goes up
    # the same step with batch statistics sends some samples down: the check above can fail
    xg = x.clone().requires_grad_(True)
    (g_train,) = torch.autograd.grad(F.cross_entropy(model(xg), y, reduction="sum"), xg)
    assert (g_train < 0).any()


def test_eval_mode_model_stays_in_eval_mode():
    model = SquaredBN().eval()
    pgd(model, torch.rand(4, 1, 2, 2), torch.zeros(4, dtype=torch.long), eps=0.1, steps=2, step_size=0.05)
    assert not model.training and model.modes == [False, False]
    with eval_mode(model.train()):
        assert not model.training
    assert model.training


def test_parameters_gradients_are_left_alone_and_result_is_detached():
    model = _linear_model(4)
    x = torch.rand(3, 1, 2, 3, requires_grad=True)
    y = torch.randint(0, 3, (3,))
    assert model.W.grad is None
    x1 = pgd(model, x, y, eps=0.1, steps=2, step_size=0.03)
    assert model.W.grad is None
    model.W.grad = torch.ones_like(model.W)
    x2 = pgd(model, x, y, eps=0.1, steps=2, step_size=0.03, loss="kl", init="normal")
    assert torch.equal(model.W.grad, torch.ones_like(model.W))  # not accumulated into
    for out in (x1, x2):
        assert not out.requires_grad and out.grad_fn is None
    assert x.grad is None


# ---- random start ------------------------------------------------------------------------------------------
def test_uniform_start_fills_the_eps_ball():
    torch.manual_seed(0)
    x = torch.full((200_000,), 0.5)
    d = start_point(x, 0.1) - x  # uniform is the default
    assert d.abs().max() <= 0.1 + 1e-7
    assert d.min() < -0.099 and d.max() > 0.099
    assert abs(d.mean().item()) < 1e-3
    assert d.std().item() == pytest.approx(0.1 / math.sqrt(3), rel=0.02)
    # pgd's default start is this one: zero steps of zero size leave the start point (projected)
    torch.manual_seed(1)
    d_pgd = pgd(Linear(torch.zeros(1, 2)), x.view(-1, 1, 1, 1), torch.zeros(len(x), dtype=torch.long),
                eps=0.1, steps=1, step_size=0.0) - x.view(-1, 1, 1, 1)
    assert d_pgd.min() < -0.099 and d_pgd.max() > 0.099 and d_pgd.abs().max() <= 0.1 + 1e-7


def test_normal_start_is_trades_small_gaussian():
    torch.manual_seed(0)
    x = torch.full((200_000,), 0.5)
    d = start_point(x, 0.3, "normal") - x
    assert d.std().item() == pytest.approx(0.001, rel=0.02)
    assert abs(d.mean().item()) < 2e-5


def test_a_generator_gives_the_start_and_the_default_stream_is_left_alone():
    x = torch.full((4, 1, 2, 3), 0.5)
    for init in ("uniform", "normal"):
        torch.manual_seed(0)
        before = torch.get_rng_state()
        a = start_point(x, 0.1, init, torch.Generator().manual_seed(7))
        b = start_point(x, 0.1, init, torch.Generator().manual_seed(7))
        c = start_point(x, 0.1, init, torch.Generator().manual_seed(8))
        assert torch.equal(a, b) and not torch.equal(a, c)
        assert torch.equal(torch.get_rng_state(), before)  # nothing drawn from the default generator
    # pgd passes it on: the same generator seed, the same adversarial images; the default stream untouched
    model, y = _linear_model(pixels=6), torch.zeros(4, dtype=torch.long)
    before = torch.get_rng_state()
    one = pgd(model, x, y, 0.2, 1, 0.0, generator=torch.Generator().manual_seed(3))
    two = pgd(model, x, y, 0.2, 1, 0.0, generator=torch.Generator().manual_seed(3))
    assert torch.equal(one, two) and not torch.equal(one, x)
    assert torch.equal(torch.get_rng_state(), before)


def test_the_start_keeps_the_images_dtype():
    for init in ("uniform", "normal"):  # a half-precision batch gets a half-precision start, not a float32 one
        assert start_point(torch.full((2, 3), 0.5, dtype=torch.float16), 0.1, init).dtype == torch.float16


def test_start_point_is_clamped_to_the_box():
    torch.manual_seed(0)
    for value, bound in ((0.0, 0.0), (1.0, 1.0)):
        x = torch.full((10_000,), value)
        s = start_point(x, 0.2, "uniform")
        assert s.min() >= 0.0 and s.max() <= 1.0
        share_on_bound = (s == bound).float().mean().item()
        assert 0.45 < share_on_bound < 0.55  # half of the noise points out of the box
    with pytest.raises(ValueError, match="uniform, normal"):
        start_point(torch.zeros(3), 0.1, "gaussian")
    with pytest.raises(ValueError, match="ce, kl"):
        pgd(_linear_model(), torch.zeros(1, 1, 2, 3), torch.zeros(1, dtype=torch.long), 0.1, 1, 0.1, loss="mse")


def test_random_start_false_starts_at_x():
    model = _linear_model(5)
    x = torch.rand(4, 1, 2, 3)
    y = torch.randint(0, 3, (4,))
    torch.manual_seed(0)
    assert torch.equal(pgd(model, x, y, eps=0.2, steps=1, step_size=0.0, random_start=False), x)


# ---- loss "kl" (TRADES inner maximisation, eq. 4) -------------------------------------------------------
@pytest.mark.filterwarnings("error")  # log_softmax without dim: right on 2-D logits, but a warning per call
def test_kl_rows_is_kl_of_the_first_from_the_second():
    a = torch.log(torch.tensor([[0.5, 0.5]]))
    b = torch.log(torch.tensor([[0.25, 0.75]]))
    assert kl_rows(a, b).item() == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)  # KL(p||q)
    assert kl_rows(b, a).item() == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5), abs=1e-6)


def test_kl_attack_steps_up_the_kl_from_the_clean_prediction():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 4))
    with torch.no_grad():
        model[3].weight.mul_(10)  # confident predictions: forward and reverse KL differ in direction
    x = torch.rand(32, 1, 2, 3) * 0.6 + 0.2
    with torch.no_grad():
        clean = model(x)
    torch.manual_seed(1)
    x0 = start_point(x, 0.4, "uniform")
    torch.manual_seed(1)
    x1 = pgd(model, x, None, eps=0.4, steps=1, step_size=0.01, loss="kl")  # targets ignored
    x0g = x0.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(kl_rows(clean, model(x0g)).sum(), x0g)
    assert torch.allclose(x1, (x0 + 0.01 * g.sign()).clamp(x - 0.4, x + 0.4).clamp(0, 1), atol=1e-7, rtol=0)
    # the reverse KL, KL(p(x') || p(x)), points elsewhere for some pixels: the check above tells them apart
    x0g = x0.clone().requires_grad_(True)
    (g_rev,) = torch.autograd.grad(kl_rows(model(x0g), clean).sum(), x0g)
    assert (g_rev.sign() != g.sign()).any()
    # ten steps raise the KL well above the start's and above a random point of the ball's surface
    torch.manual_seed(1)
    x10 = pgd(model, x, None, eps=0.2, steps=10, step_size=0.05, loss="kl", init="normal")
    corner = (x + 0.2 * torch.randn_like(x).sign()).clamp(0, 1)
    with torch.no_grad():
        kl_pgd = kl_rows(clean, model(x10)).mean()
        assert kl_pgd > 10 * kl_rows(clean, model(start_point(x, 0.2, "normal"))).mean()
        assert kl_pgd > 2 * kl_rows(clean, model(corner)).mean()


# ---- interpolation (Algorithm 1, lines 9-18) ---------------------------------------------------------------
class Line(nn.Module):
    """logits = [0, z], z = scale * (sum(x) - offset); for class 0 the margin is tanh(z / (2 tau)) when z > 0."""

    def __init__(self, scale=4.0, offset=0.0):
        super().__init__()
        self.scale, self.offset, self.calls = scale, offset, 0
        self.bn = nn.BatchNorm1d(1)
        self.modes = []

    def forward(self, x):
        self.calls += 1
        self.modes.append(self.training)
        z = self.scale * (x.flatten(1).sum(1) - self.offset)
        self.bn(z[:, None])  # touches running statistics in train mode only
        return torch.stack([torch.zeros_like(z), z], 1)


def test_interpolated_point_is_alpha_x_pgd_plus_one_minus_alpha_x():
    torch.manual_seed(0)
    x = torch.rand(6, 1, 2, 2) * 0.2                 # sum(x) < 1: class 1 predicted, margin 0
    x_pgd = (x + torch.rand(6, 1, 2, 2) * 0.3 + 0.2).clamp(0, 1)  # sum(x_pgd) > 1: margin > 0
    x_adv, alpha = interpolate(Line(offset=1.0), x, x_pgd, torch.zeros(6, dtype=torch.long), rho=0.3, tau=1.0, steps=4)
    a = alpha.view(6, 1, 1, 1)
    assert torch.allclose(x_adv, a * x_pgd + (1 - a) * x, atol=1e-7)
    assert len(set(alpha.tolist())) > 1  # per-sample alphas
    assert not x_adv.requires_grad


def test_binary_search_trace_returns_alpha_r():
    """x = 0.25, x_pgd = 1, offset 0.25, scale 4, tau 1: the point x + alpha (x_pgd - x) has z = 3 alpha and
    margin tanh(1.5 alpha); rho = tanh(0.45) puts the crossing at alpha* = 0.3.

    K=1: 0.5 >= 0.3 -> r = 0.5.   K=2: 0.25 < 0.3 -> l = 0.25, r = 0.5.   K=3: 0.375 -> r = 0.375.
    """
    x = torch.full((1, 1, 1, 1), 0.25)
    x_pgd = torch.ones(1, 1, 1, 1)
    y = torch.zeros(1, dtype=torch.long)
    got = [interpolate(Line(offset=0.25), x, x_pgd, y, math.tanh(0.45), 1.0, K)[1].item() for K in (1, 2, 3, 4)]
    assert got == [0.5, 0.5, 0.375, 0.3125]


def test_margin_equal_to_rho_counts_as_crossed():
    """Algorithm 1: d < rho moves alpha_l; d = rho moves alpha_r."""
    model = Line().eval()
    x, x_pgd, y = torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1), torch.zeros(1, dtype=torch.long)
    d_half = margin(model(0.5 * x_pgd), y, 1.0).item()
    _, alpha = interpolate(model, x, x_pgd, y, d_half, 1.0, 1)
    assert alpha.item() == 0.5
    above = torch.nextafter(torch.tensor(d_half), torch.tensor(1.0)).item()  # the next float32
    _, alpha = interpolate(model, x, x_pgd, y, above, 1.0, 1)
    assert alpha.item() == 1.0


def test_interpolation_soft_targets_and_mode():
    """Soft target [0.5, 0.5] halves the margin: d = max(s) - (s0 + s1)/2 = (s1 - s0)/2 for s1 > s0."""
    model = Line().train()
    x, x_pgd = torch.zeros(2, 1, 1, 1), torch.ones(2, 1, 1, 1)
    stats = {k: v.clone() for k, v in model.bn.state_dict().items()}
    hard = torch.zeros(2, dtype=torch.long)
    soft = torch.tensor([[0.5, 0.5], [0.0, 1.0]])  # the second: the predicted class, margin 0
    rho = math.tanh(0.6) / 2
    _, a_soft = interpolate(model, x, x_pgd, soft, rho, 1.0, 3)
    _, a_hard = interpolate(model, x, x_pgd, hard, rho, 1.0, 3)
    assert a_soft.tolist() == [0.375, 1.0]
    assert a_hard[0].item() < 0.375  # the hard label crosses rho earlier
    assert model.calls == 6 and model.modes == [False] * 6  # K forwards, all in eval mode
    assert model.training
    for k, v in model.bn.state_dict().items():
        assert torch.equal(v, stats[k]), k


class Probe(nn.Module):
    """logits = [0, 4 (sum(x) - 0.25)] in float32, recording the dtype of every input."""

    def __init__(self):
        super().__init__()
        self.dtypes = []

    def forward(self, x):
        self.dtypes.append(x.dtype)
        z = 4 * (x.flatten(1).float().sum(1) - 0.25)
        return torch.stack([torch.zeros_like(z), z], 1)


def test_interpolation_keeps_the_inputs_dtype_and_device():
    x, x_pgd = torch.full((2, 1, 1, 1), 0.25), torch.ones(2, 1, 1, 1)
    y = torch.zeros(2, dtype=torch.long)
    probe = Probe()
    x_adv, alpha = interpolate(probe, x.bfloat16(), x_pgd.bfloat16(), y, 0.3, 1.0, 3)
    assert probe.dtypes == [torch.bfloat16] * 3 and x_adv.dtype == torch.bfloat16
    assert alpha.dtype == torch.float32
    # the search's state lives on the inputs' device (the meta device stands in for a GPU here)
    x_adv, alpha = interpolate(Probe(), x.to("meta"), x_pgd.to("meta"), y.to("meta"), 0.3, 1.0, 3)
    assert x_adv.device.type == "meta" and alpha.device.type == "meta"


@pytest.mark.filterwarnings("error")  # softmax without dim: right on 2-D logits, but a warning per call
def test_as_probabilities_and_margin_on_soft_targets():
    assert torch.equal(as_probabilities(torch.tensor([2, 0]), 3), torch.tensor([[0.0, 0, 1], [1, 0, 0]]))
    p = torch.tensor([[0.2, 0.8]], dtype=torch.float64)
    assert as_probabilities(p, 2).dtype == torch.float32
    logits = torch.log(torch.tensor([[0.2, 0.3, 0.5]]))
    assert margin(logits, torch.tensor([[0.0, 1.0, 0.0]]), 1.0).item() == pytest.approx(0.2, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_soft_cross_entropy_is_per_sample_for_class_indices(dtype):
    """(B, C) logits and (B,) class indices of either integer type -> (B,), one CE per sample, equal to the CE
    against the one-hot distribution."""
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    y = torch.tensor([0, 1], dtype=dtype)
    want = -torch.log_softmax(logits, dim=1)[torch.arange(2), y.long()]
    assert torch.allclose(soft_cross_entropy(logits, y), want)
    assert torch.allclose(soft_cross_entropy(logits, torch.nn.functional.one_hot(y.long(), 3).float()), want)

"""Which logits each loss term sends gradient to, term by term, against hand-derived gradients.

The total loss hides detaching mistakes (its CE term gives the clean logits a gradient anyway), so each
named term is differentiated on its own with torch.autograd.grad. Closed forms used below, for one row
with p = softmax(a), q = softmax(b) and the batch mean over B rows:
    d KL(p||q) / d b = (q - p) / B
    d KL(p||q) / d a = p * (log p - log q - KL(p||q)) / B
    d CE(a, y) / d a = (p - y) / B   (y a probability vector)
"""
import torch
import torch.nn.functional as F

from ssat.losses import awr_loss, awr_weight, mbi_loss, uat_loss

B, C = 5, 4
ATOL = 1e-6  # the losses compute in float32 (kl_rows casts), the inputs are float64


def _logits(seed, n=B, c=C, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, c, generator=g, dtype=torch.float64) * scale).requires_grad_(True) for _ in range(4)]


def grad(term, wrt):
    """d term / d wrt; a tensor that takes no part in `term` gets zeros (autograd gives None)."""
    (g,) = torch.autograd.grad(term, wrt, retain_graph=True, allow_unused=True)
    return torch.zeros_like(wrt) if g is None else g


def kl_row(a, b):
    p, q = F.softmax(a.detach(), 1), F.softmax(b.detach(), 1)
    return (p * (p.log() - q.log())).sum(1)


def d_kl_d_q(a, b):
    return (F.softmax(b.detach(), 1) - F.softmax(a.detach(), 1)) / len(a)


def d_kl_d_p(a, b):
    p, q = F.softmax(a.detach(), 1), F.softmax(b.detach(), 1)
    return p * (p.log() - q.log() - kl_row(a, b)[:, None]) / len(a)


def close(x, y):
    return torch.allclose(x, y, atol=ATOL, rtol=1e-5)


# ---- SSAT-MBI / RST / TRADES (eq. 9): nothing detached ----------------------------------------------
def test_mbi_kl_terms_send_gradient_to_both_sides():
    lx, la, lp, _ = _logits(0)
    y = torch.softmax(torch.randn(B, C, dtype=torch.float64), 1)
    t = mbi_loss(lx, la, lp, y, lam=6.0, beta=0.4)
    # kl_adv = KL(p(x) || p(x_adv)): the clean side carries gradient (RST/TRADES code), x_pgd takes no part
    assert close(grad(t["kl_adv"], lx), d_kl_d_p(lx, la))
    assert grad(t["kl_adv"], lx).abs().max() > 1e-3
    assert close(grad(t["kl_adv"], la), d_kl_d_q(lx, la))
    assert torch.equal(grad(t["kl_adv"], lp), torch.zeros_like(lp))
    # kl_pgd = KL(p(x) || p(x_pgd)): x_adv takes no part
    assert close(grad(t["kl_pgd"], lx), d_kl_d_p(lx, lp))
    assert close(grad(t["kl_pgd"], lp), d_kl_d_q(lx, lp))
    assert torch.equal(grad(t["kl_pgd"], la), torch.zeros_like(la))
    # CE(f(x), y~) only on the clean logits
    assert close(grad(t["ce"], lx), (F.softmax(lx.detach(), 1) - y) / B)
    assert torch.equal(grad(t["ce"], la), torch.zeros_like(la))


def test_mbi_total_gradient_weights_beta_on_x_adv_and_one_minus_beta_on_x_pgd():
    lx, la, lp, _ = _logits(1)
    y = torch.randint(0, C, (B,))
    lam, beta = 6.0, 0.25
    loss = mbi_loss(lx, la, lp, y, lam, beta)["loss"]
    # a swapped beta (or a missing lam) would put 0.75 / 0.25 here
    assert close(grad(loss, la), lam * beta * d_kl_d_q(lx, la))
    assert close(grad(loss, lp), lam * (1 - beta) * d_kl_d_q(lx, lp))
    want_x = (F.softmax(lx.detach(), 1) - F.one_hot(y, C)) / B \
        + lam * (beta * d_kl_d_p(lx, la) + (1 - beta) * d_kl_d_p(lx, lp))
    assert close(grad(loss, lx), want_x)


def test_mbi_with_x_adv_is_x_pgd_counts_the_one_kl_once():
    """Interpolation off passes the same tensor twice: the KL's weight is beta + (1 - beta) = 1."""
    lx, la, _, _ = _logits(2)
    y = torch.randint(0, C, (B,))
    loss = mbi_loss(lx, la, la, y, 6.0, 0.3)["loss"]
    assert close(grad(loss, la), 6.0 * d_kl_d_q(lx, la))


# ---- UAT++ (eq. 5): the clean side is a fixed copy ---------------------------------------------------
def test_uat_clean_side_is_detached_and_adversarial_side_is_not():
    lx, la, _, _ = _logits(3)
    y = torch.softmax(torch.randn(B, C, dtype=torch.float64), 1)
    t = uat_loss(lx, la, y, lam=6.0)
    assert torch.equal(grad(t["kl_adv"], lx), torch.zeros_like(lx))
    assert torch.equal(grad(t["loss"], lx), torch.zeros_like(lx))
    assert close(grad(t["kl_adv"], la), d_kl_d_q(lx, la))
    # CE is on f(x_adv), not on f(x)
    assert close(grad(t["ce"], la), (F.softmax(la.detach(), 1) - y) / B)
    assert close(grad(t["loss"], la), (F.softmax(la.detach(), 1) - y) / B + 6.0 * d_kl_d_q(lx, la))


# ---- SRST-AWR / SSAT-MBI-AWR: the weights are not detached ----------------------------------------------
def _awr_terms(seed, beta=0.5, tau_prime=1.5):
    ll, lu, la, lp = _logits(seed)
    lt = (torch.randn(B, C, dtype=torch.float64, generator=torch.Generator().manual_seed(seed + 100)) * 3)
    yl = torch.arange(B) % C
    t = awr_loss(ll, yl, lu, la, lp, lt, lam=20.0, beta=beta, label_smoothing=0.2, gamma_prime=4.0,
                 tau_prime=tau_prime)
    return t, ll, yl, lu, la, lp, lt


def _dw_d_attacked(y_t, b):
    """d w_j / d b_j for w = 1/2 sum y p(x) + 1/2 sum y (1 - q), q = softmax(b): -1/2 q (y - <y, q>)."""
    q = F.softmax(b.detach(), 1)
    return -0.5 * q * (y_t - (y_t * q).sum(1, keepdim=True))


def _dw_d_clean(y_t, a):
    p = F.softmax(a.detach(), 1)
    return 0.5 * p * (y_t - (y_t * p).sum(1, keepdim=True))


def test_awr_weighted_kl_includes_the_weights_derivative():
    t, _, _, lu, la, lp, lt = _awr_terms(4)
    y_t = F.softmax(lt, 1)
    w_adv = awr_weight(y_t, lu.detach(), la.detach())
    kl = kl_row(lu, la)
    # d/d la of mean(KL * w): the KL's own gradient times w, plus KL times w's gradient
    detached_w = d_kl_d_q(lu, la) * w_adv[:, None]
    want = detached_w + kl[:, None] * _dw_d_attacked(y_t, la) / B
    got = grad(t["kl_adv"], la)
    assert close(got, want)
    assert (got - detached_w).abs().max() > 1e-3  # a detached weight gives a visibly different gradient
    # the clean side: the KL's gradient and w's clean-side gradient
    want_u = d_kl_d_p(lu, la) * w_adv[:, None] + kl[:, None] * _dw_d_clean(y_t, lu) / B
    assert close(grad(t["kl_adv"], lu), want_u)
    # kl_adv has nothing to do with x_pgd, kl_pgd nothing with x_adv
    assert torch.equal(grad(t["kl_adv"], lp), torch.zeros_like(lp))
    assert torch.equal(grad(t["kl_pgd"], la), torch.zeros_like(la))
    w_pgd = awr_weight(y_t, lu.detach(), lp.detach())
    want_p = d_kl_d_q(lu, lp) * w_pgd[:, None] + kl_row(lu, lp)[:, None] * _dw_d_attacked(y_t, lp) / B
    assert close(grad(t["kl_pgd"], lp), want_p)


def test_awr_total_gradient_splits_beta_between_x_adv_and_x_pgd():
    beta = 0.3
    t, _, _, lu, la, lp, lt = _awr_terms(5, beta=beta)
    ka, kp = grad(t["kl_adv"], la), grad(t["kl_pgd"], lp)
    assert close(grad(t["loss"], la), 20.0 * beta * ka)
    assert close(grad(t["loss"], lp), 20.0 * (1 - beta) * kp)


def test_awr_kd_and_label_smoothing_terms_touch_only_their_logits():
    tau_prime = 1.5
    t, ll, yl, lu, la, lp, lt = _awr_terms(6, tau_prime=tau_prime)
    # kd = KL(p_T^tau' || p^tau'): d/d lu = (softmax(lu/tau') - softmax(lt/tau')) / (tau' B)
    want = (F.softmax(lu.detach() / tau_prime, 1) - F.softmax(lt / tau_prime, 1)) / (tau_prime * B)
    assert close(grad(t["kd"], lu), want)
    for other in (ll, la, lp):
        assert torch.equal(grad(t["kd"], other), torch.zeros_like(other))
    # LS-CE on the labeled logits only: (softmax(ll) - smoothed one-hot) / n
    smooth = 0.8 * F.one_hot(yl, C) + 0.2 / C
    assert close(grad(t["ce"], ll), (F.softmax(ll.detach(), 1) - smooth) / B)
    for other in (lu, la, lp):
        assert torch.equal(grad(t["ce"], other), torch.zeros_like(other))
    # the labeled logits feed nothing else
    assert close(grad(t["loss"], ll), grad(t["ce"], ll))

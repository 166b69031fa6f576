"""ssat.segmented: one train-mode forward over several batches equals separate forwards in order (float64, CPU).

The batches have different means and scales, so BatchNorm statistics taken over the whole concatenation, running
statistics updated once (or in another order) or segments returned in another order all change the logits or
the buffers far beyond the 1e-12 tolerance.
"""
from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ssat.models import create_model
from ssat.segmented import segmentation_refusal, segmented_batchnorm, segmented_forward

CL = torch.channels_last
SHAPES = {"wrn-16-1": (3, 16, 16), "resnet18": (3, 8, 8), "cnn-small": (1, 28, 28)}
EQUAL, UNEQUAL = (8, 8, 8), (4, 8, 8, 8)
# ResNet-18 (8x8 images: 1x1 maps in its last stage): smaller batches, its float64 convolutions are slow on a CPU
SMALL = {EQUAL: (4, 4, 4), UNEQUAL: (3, 4, 4, 4)}
WEIGHTS = (1.0, 0.5, 2.0, 0.25)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small float64 convolutions: one thread is several times faster than two on shared, loaded cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _model(name: str, dropout: float = 0.0, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return create_model(name, 10, SHAPES[name][0], dropout).double().train()


def _batches(shape, sizes, seed: int = 1, memory_format=torch.contiguous_format) -> list[torch.Tensor]:
    """Batch k: N(k/2, (1 + k/2)^2) values, so that each batch has statistics of its own."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, *shape, generator=g, dtype=torch.float64) * (1 + k / 2) + k / 2)
            .contiguous(memory_format=memory_format) for k, n in enumerate(sizes)]


def _labels(sizes, seed: int = 2) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 10, (n,), generator=g) for n in sizes]


def _loss(logits, ys):
    """Per-batch CE with different weights, plus a KL between the last two batches (as TRADES pairs x, x_adv)."""
    ce = sum(w * F.cross_entropy(lo, y) for w, lo, y in zip(WEIGHTS, logits, ys))
    kl = F.kl_div(F.log_softmax(logits[-1], 1), F.softmax(logits[-2], 1), reduction="batchmean")
    return ce + 0.7 * kl


def _bns(model):
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def _close(got, want, rtol=1e-12, scale=None):
    """Relative closeness at rtol, with an absolute floor of rtol x `scale` (default: the largest |want|), for
    values near 0 (a gradient that is 0 up to rounding, such as a conv bias before a BatchNorm)."""
    scale = want.abs().max().item() if scale is None else scale
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * max(scale, 1e-300))


def _assert_same_state(model, ref):
    for a, b in zip(_bns(model), _bns(ref)):
        if b.running_mean is None:  # track_running_stats=False
            assert a.running_mean is a.running_var is a.num_batches_tracked is None
            continue
        assert a.num_batches_tracked.item() == b.num_batches_tracked.item()
        _close(a.running_mean, b.running_mean)
        _close(a.running_var, b.running_var)


def _assert_no_segmented_bn(model):
    assert all("forward" not in m.__dict__ for m in _bns(model))


def _compare(model, xs, ys, **kw):
    """Segmented on `model` against separate forwards on a copy: logits, every gradient, BN buffers."""
    ref = copy.deepcopy(model)
    want = [ref(x) for x in xs]
    got = segmented_forward(model, xs, **kw)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        _close(g, w)
    _loss(got, ys).backward()
    _loss(want, ys).backward()
    scale = max(q.grad.abs().max().item() for q in ref.parameters())
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        _close(p.grad, q.grad, scale=scale)
    _assert_same_state(model, ref)
    _assert_no_segmented_bn(model)
    return got


# ---- (a) logits, (b) gradients, (c) running statistics; (d) channels_last ------------------------------------
@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("sizes", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
def test_segmented_equals_separate_forwards(name, sizes):
    sizes = SMALL[sizes] if name == "resnet18" else sizes
    model = _model(name)
    for m in _bns(model):  # non-trivial running statistics, so that the momentum updates show
        m.running_mean.uniform_(-1, 1)
        m.running_var.uniform_(0.5, 2)
        m.num_batches_tracked.fill_(5)
    _compare(model, _batches(SHAPES[name], sizes), _labels(sizes))
    assert all(m.num_batches_tracked.item() == 5 + len(sizes) for m in _bns(model))


@pytest.mark.parametrize("name", ["wrn-16-1", "cnn-small"])
def test_channels_last(name):
    model = _model(name).to(memory_format=CL)
    xs = _batches(SHAPES[name], UNEQUAL, memory_format=CL)
    seen = []
    model.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    bn = _bns(model)[0]
    bn.register_forward_hook(lambda mod, args, out: seen.append(out))
    _compare(model, xs, _labels(UNEQUAL))
    x_in, bn_out = [t for t in seen if t.shape[0] == sum(UNEQUAL)]  # the segmented forward's (the copy's hooks
    assert x_in.is_contiguous(memory_format=CL)                     # ran on the separate batches)
    if SHAPES[name][0] > 1:  # a one-channel batch is contiguous in both formats
        assert not x_in.is_contiguous()
    assert bn_out.is_contiguous(memory_format=CL) and not bn_out.is_contiguous()


def test_a_channels_last_first_batch_makes_the_concatenation_channels_last():
    model = _model("wrn-16-1")
    xs = _batches(SHAPES["wrn-16-1"], EQUAL)
    xs[0] = xs[0].contiguous(memory_format=CL)
    seen = []
    model.register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    _compare(model, xs, _labels(EQUAL))
    assert seen[-1].shape[0] == sum(EQUAL) and seen[-1].is_contiguous(memory_format=CL)


# ---- (e) eval mode ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["wrn-16-1", "cnn-small"])
def test_eval_mode_is_a_plain_forward(name):
    model = _model(name).eval()
    xs = _batches(SHAPES[name], UNEQUAL)
    before = copy.deepcopy(model.state_dict())
    with torch.no_grad():
        got = segmented_forward(model, xs)
        plain = model(torch.cat(xs))
    torch.testing.assert_close(torch.cat(got), plain, rtol=0, atol=0)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_batchnorm_without_running_statistics_uses_batch_statistics_in_eval_mode_too():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, track_running_stats=False), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 14 * 14, 10)).double().eval()
    xs = _batches(SHAPES["wrn-16-1"], UNEQUAL)
    _compare(model, xs, _labels(UNEQUAL))


def test_momentum_none_cumulative_average_and_batchnorm1d():
    """momentum=None averages with 1/num_batches_tracked per segment; BatchNorm1d on (N, C) is segmented too."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4, momentum=None), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 14 * 14, 16), nn.BatchNorm1d(16, momentum=0.3), nn.ReLU(),
                          nn.Linear(16, 10)).double().train()
    model[1].num_batches_tracked.fill_(2)
    model[1].running_mean.fill_(3.0)
    _compare(model, _batches(SHAPES["wrn-16-1"], UNEQUAL), _labels(UNEQUAL))
    assert model[1].num_batches_tracked.item() == 6 and model[5].num_batches_tracked.item() == 4


def test_running_statistics_follow_the_sequential_updates_by_hand():
    """r <- (1 - m) r + m stat_k for k = 1..S in order; the unbiased variance goes into running_var."""
    bn = nn.BatchNorm2d(2, momentum=0.25).double().train()
    xs = _batches((2, 3, 3), UNEQUAL)
    segmented_forward(bn, xs)
    mean, var = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    for x in xs:
        flat = x.transpose(0, 1).flatten(1)
        mean = 0.75 * mean + 0.25 * flat.mean(1)
        var = 0.75 * var + 0.25 * flat.var(1, unbiased=True)
    _close(bn.running_mean, mean)
    _close(bn.running_var, var)
    assert bn.num_batches_tracked.item() == len(UNEQUAL)
    # and the normalisation uses each segment's own mean and biased variance
    got = segmented_forward(bn, xs)
    for g, x in zip(got, xs):
        m, v = x.mean((0, 2, 3), keepdim=True), x.var((0, 2, 3), unbiased=False, keepdim=True)
        _close(g, (x - m) / torch.sqrt(v + bn.eps))


# ---- (f) restoring the modules ---------------------------------------------------------------------------------
def test_modules_are_restored_after_an_exception():
    model = _model("cnn-small")
    own = _bns(model)[1]
    own_forward = own.forward  # an instance-level forward of its own (bound method) must come back, not vanish
    own.forward = own_forward
    with pytest.raises(KeyError):
        with segmented_batchnorm(model, (2, 2)):
            assert all(hasattr(m.forward, "_ssat_segments") for m in _bns(model))
            raise KeyError("inside")
    assert "forward" not in _bns(model)[0].__dict__ and own.__dict__["forward"] is own_forward
    # an exception inside the forward: the batch does not match the segments
    with pytest.raises(ValueError, match="sum to"):
        with segmented_batchnorm(model, (2, 2)):
            model(torch.zeros(3, 1, 28, 28, dtype=torch.float64))
    assert "forward" not in _bns(model)[0].__dict__ and own.__dict__["forward"] is own_forward


def test_refusals_of_the_context_manager():
    model = _model("cnn-small")
    for bad in [(), (4, 0)]:
        with pytest.raises(ValueError, match="positive"):
            with segmented_batchnorm(model, bad):
                pass
    with segmented_batchnorm(model, (2, 2)):
        with pytest.raises(RuntimeError, match="already segmented"):
            with segmented_batchnorm(model, (1, 3)):
                pass
        assert all(m.forward._ssat_segments == (2, 2) for m in _bns(model))
    _assert_no_segmented_bn(model)


# ---- (g) dropout -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["wrn-16-1", "cnn-small"])
def test_active_dropout_is_refused_or_falls_back_to_separate_forwards(name):
    model = _model(name, dropout=0.3)
    xs = _batches(SHAPES[name], UNEQUAL)
    assert "dropout" in segmentation_refusal(model)
    with pytest.raises(ValueError, match="dropout"):
        segmented_forward(model, xs, strict=True)
    with pytest.raises(ValueError, match="dropout"):
        with segmented_batchnorm(model, UNEQUAL):
            pass
    _assert_no_segmented_bn(model)
    ref = copy.deepcopy(model)
    torch.manual_seed(7)
    got = segmented_forward(model, xs)  # the fallback: the separate forwards, the same random draws
    torch.manual_seed(7)
    want = [ref(x) for x in xs]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    _assert_same_state(model, ref)
    model.eval()  # dropout in eval mode is the identity: no refusal
    assert segmentation_refusal(model) is None


# ---- torch.compile and autocast --------------------------------------------------------------------------------
@pytest.mark.skipif(os.environ.get("MUTANT_UNDER_TEST") == "stats",
                    reason="mutmut's stats run: its trampolines (a ContextVar.set) break a fullgraph compile")
def test_compiled_model_traces_the_segmented_forward_in_one_graph_and_keeps_the_plain_one():
    """A torch.compile'd model (fullgraph: no graph break) given to segmented_forward equals the eager one, and
    its plain forward afterwards is the plain forward again (the swapped BatchNorm forwards are guarded on)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _model("cnn-small")
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    sizes = UNEQUAL
    xs, ys = _batches(SHAPES["cnn-small"], sizes), _labels(sizes)
    x = torch.cat(xs)
    _close(compiled(x), eager(x))
    got, want = segmented_forward(compiled, xs), segmented_forward(eager, xs)
    for g, w in zip(got, want):
        _close(g, w)
    model.zero_grad(), eager.zero_grad()
    _loss(got, ys).backward()
    _loss(want, ys).backward()
    scale = max(q.grad.abs().max().item() for q in eager.parameters())
    for p, q in zip(model.parameters(), eager.parameters()):
        _close(p.grad, q.grad, scale=scale)
    _close(compiled(x), eager(x))  # plain again: not the segmented graph
    _assert_same_state(model, eager)
    _assert_no_segmented_bn(model)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 2  # the plain and the segmented forward
    for _ in range(2):  # a step later: the same two graphs, no recompilation
        for g, w in zip(segmented_forward(compiled, xs), segmented_forward(eager, xs)):
            _close(g, w)
        _close(compiled(x), eager(x))
    assert counters["stats"]["unique_graphs"] == graphs
    _assert_same_state(model, eager)
    torch._dynamo.reset()


def test_bf16_autocast_matches_separate_forwards():
    """Under CPU bf16 autocast each segment goes through the same BatchNorm call as a separate forward."""
    torch.manual_seed(0)
    model = create_model("cnn-small", 10, 1).train()
    ref = copy.deepcopy(model)
    xs = [x.float() for x in _batches(SHAPES["cnn-small"], UNEQUAL)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = segmented_forward(model, xs)
        want = [ref(x) for x in xs]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2 * w.abs().max().item())
    for a, b in zip(_bns(model), _bns(ref)):
        assert a.running_mean.dtype == b.running_mean.dtype == torch.float32
        torch.testing.assert_close(a.running_mean, b.running_mean, rtol=1e-2, atol=1e-3)
        torch.testing.assert_close(a.running_var, b.running_var, rtol=1e-2, atol=1e-3)
        assert a.num_batches_tracked.item() == b.num_batches_tracked.item() == len(UNEQUAL)


def test_one_batch_or_none():
    model = _model("cnn-small")
    x = _batches(SHAPES["cnn-small"], (4,))[0]
    ref = copy.deepcopy(model)
    (got,) = segmented_forward(model, [x])
    torch.testing.assert_close(got, ref(x), rtol=0, atol=0)
    assert segmented_forward(model, []) == []

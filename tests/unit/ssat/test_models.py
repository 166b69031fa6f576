"""The MNIST CNN's block order (conv, BN, max-pool, ReLU) is a speed rewrite of conv, BN, ReLU, max-pool: the
same logits and the same gradients, for inputs and weights, bit for bit; old checkpoints keep loading."""
import pytest
import torch
import torch.nn.functional as F

from ssat.models import SmallCNN, create_model


def reference_forward(m: SmallCNN, x: torch.Tensor) -> torch.Tensor:
    """The textbook order on m's own weights: conv, BN, ReLU, max-pool twice, then the 7x7 average pool."""
    f = m.features
    for conv, bn in ((f[0], f[1]), (f[4], f[5])):
        x = F.max_pool2d(F.relu(bn(conv(x))), 2)
    return m.head(F.adaptive_avg_pool2d(x, 7))


@pytest.mark.parametrize("size", [28, 32])
@pytest.mark.parametrize("channels_last", [False, True])
def test_logits_and_gradients_equal_the_textbook_order(size, channels_last):
    torch.manual_seed(0)
    a, b = SmallCNN(10), SmallCNN(10)
    b.load_state_dict(a.state_dict())
    # centred inputs: many BN outputs are negative, so windows with no positive value are common
    x = torch.rand(16, 1, size, size) * 2 - 1
    if channels_last:
        a, b = a.to(memory_format=torch.channels_last), b.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    la, lb = a(xa), reference_forward(b, xb)
    assert la.shape == (16, 10)
    assert torch.equal(la, lb)
    w = torch.randn(16, 10)
    (la * w).sum().backward()
    (lb * w).sum().backward()
    assert torch.equal(xa.grad, xb.grad)
    assert xa.grad.abs().sum() > 0
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_a_window_without_a_positive_value_passes_no_gradient():
    """All of BN's outputs negative (bias -1, weight 0): ReLU before or after the pool, nothing flows back."""
    m = SmallCNN(10)
    with torch.no_grad():
        m.features[1].weight.zero_()
        m.features[1].bias.fill_(-1.0)
    x = torch.rand(4, 1, 28, 28, requires_grad=True)
    m(x).sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    assert torch.equal(m.features[0].weight.grad, torch.zeros_like(m.features[0].weight))


def test_parameter_names_are_those_of_saved_checkpoints():
    """Teacher caches and trial checkpoints written before the reorder load into the model as it is."""
    names = [n for n, _ in create_model("cnn-small", 10, 1).state_dict().items()]
    assert names == [
        "features.0.weight",
        "features.1.weight", "features.1.bias", "features.1.running_mean", "features.1.running_var",
        "features.1.num_batches_tracked",
        "features.4.weight",
        "features.5.weight", "features.5.bias", "features.5.running_mean", "features.5.running_var",
        "features.5.num_batches_tracked",
        "head.1.weight", "head.1.bias", "head.4.weight", "head.4.bias",
    ]


def test_28x28_images_reach_the_head_as_32_maps_of_7x7_without_the_average_pool(monkeypatch):
    """The 7x7 average pool is the identity on 7x7 maps and is skipped there (a CPU PGD step's 10%); other
    sizes still go through it."""
    m = SmallCNN(10)
    assert m.features(torch.rand(2, 1, 28, 28)).shape == (2, 32, 7, 7)
    pooled = []
    real = F.adaptive_avg_pool2d
    monkeypatch.setattr(F, "adaptive_avg_pool2d", lambda x, size: pooled.append(tuple(x.shape)) or real(x, size))
    assert m(torch.rand(2, 1, 28, 28)).shape == (2, 10) and pooled == []
    assert m(torch.rand(2, 1, 32, 32)).shape == (2, 10) and pooled == [(2, 32, 8, 8)]

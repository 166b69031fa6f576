"""BatchNorm folded into the convolution before it (ssat/folding.py): the weights by hand, the pairs each model has,
the folded eval-mode forward against the unfolded one (outputs and input gradients), train mode untouched, the
forwards restored, and the engine's plan for system.fold_bn."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from ssat.attacks import frozen, pgd
from ssat.folding import FoldedEval, conv_bn_pairs, fold_plan, folded_batchnorm, folded_weights
from ssat.interpolation import interpolate
from ssat.models import create_model


def one_channel(conv_bias: float | None = None) -> tuple[nn.Conv2d, nn.BatchNorm2d]:
    """A 1x1 convolution with weight 2 (and bias conv_bias) and a BN with gamma 3, beta 1, mean 0.5, var 3, eps 1:
    s = 3 / sqrt(3 + 1) = 1.5."""
    conv = nn.Conv2d(1, 1, 1, bias=conv_bias is not None)
    bn = nn.BatchNorm2d(1, eps=1.0)
    with torch.no_grad():
        conv.weight.fill_(2.0)
        if conv_bias is not None:
            conv.bias.fill_(conv_bias)
        bn.weight.fill_(3.0)
        bn.bias.fill_(1.0)
        bn.running_mean.fill_(0.5)
        bn.running_var.fill_(3.0)
    return conv, bn


def test_folded_weights_by_hand():
    w, b = folded_weights(*one_channel())
    assert w.flatten().tolist() == [3.0] and b.tolist() == [0.25]  # 2 * 1.5; 1 - 0.5 * 1.5
    w, b = folded_weights(*one_channel(conv_bias=0.5))
    assert w.flatten().tolist() == [3.0] and b.tolist() == [1.0]  # the conv's bias scaled too: 0.25 + 0.5 * 1.5
    conv, bn = one_channel(conv_bias=0.5)
    bn.eval()
    x = torch.tensor([[[[0.0, 1.0], [-2.0, 4.0]]]])
    seq = nn.Sequential(conv, bn).eval()
    expected = (2 * x + 0.5 - 0.5) * 1.5 + 1.0
    with folded_batchnorm(seq):
        assert torch.equal(seq(x), expected)  # 3 x + 1, exact in floats
    assert torch.allclose(seq(x), expected)


def test_the_pairs_of_each_model():
    small = create_model("cnn-small", 10, 1)
    pairs = conv_bn_pairs(small)
    assert [(c.out_channels, b.num_features) for c, b in pairs] == [(16, 16), (32, 32)]
    assert pairs[0] == (small.features[0], small.features[1]) and pairs[1] == (small.features[4], small.features[5])
    resnet = create_model("resnet18", 10, 3)
    assert len(conv_bn_pairs(resnet)) == 1 + 8 * 2 + 3  # the stem, two per block, three shortcuts
    assert conv_bn_pairs(create_model("wrn-16-1", 10, 3)) == []  # pre-activation: BN, ReLU, then conv
    # not a pair: a BN over other channels, a BN without running statistics or affine parameters, BN before conv
    assert conv_bn_pairs(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(5))) == []
    assert conv_bn_pairs(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4, track_running_stats=False))) == []
    assert conv_bn_pairs(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4, affine=False))) == []
    assert conv_bn_pairs(nn.Sequential(nn.BatchNorm2d(1), nn.Conv2d(1, 4, 3))) == []
    assert conv_bn_pairs(nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.BatchNorm2d(4))) == []


def trained_like(name: str, channels: int) -> nn.Module:
    """A model whose BN layers hold statistics and affine parameters far from their initial 0/1."""
    torch.manual_seed(0)
    model = create_model(name, 10, channels)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.to(memory_format=torch.channels_last)


@pytest.mark.parametrize("name,channels", [("cnn-small", 1), ("resnet18", 3)])
def test_folded_eval_equals_the_unfolded_forward_and_input_gradient(name, channels):
    model = trained_like(name, channels).eval()
    x = torch.rand(4, channels, 28 if channels == 1 else 16, 28 if channels == 1 else 16)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.tensor([0, 3, 5, 9])

    def logits_and_grad(net):
        xa = x.clone().requires_grad_(True)
        out = net(xa)
        (g,) = torch.autograd.grad(F.cross_entropy(out, y, reduction="sum"), xa)
        return out.detach(), g

    passed_through = []  # per BatchNorm call: whether it returned its input itself (folded into its convolution)
    hooks = [m.register_forward_hook(lambda m, i, o: passed_through.append(o is i[0]))
             for _, m in conv_bn_pairs(model)]
    with frozen(model):
        plain, g_plain = logits_and_grad(model)
        assert passed_through and not any(passed_through)
        passed_through.clear()
        folded, g_folded = logits_and_grad(FoldedEval(model))
        assert passed_through and all(passed_through)
    for h in hooks:
        h.remove()
    assert torch.allclose(folded, plain, atol=1e-4, rtol=1e-4)
    assert torch.allclose(g_folded, g_plain, atol=1e-5, rtol=1e-3)
    # and with the parameters trainable: their gradients flow through the fold
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    F.cross_entropy(FoldedEval(model)(x), y).backward()
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, expected[n], atol=1e-5, rtol=1e-3), n


def test_train_mode_is_never_folded():
    model = trained_like("cnn-small", 1).train()
    x = torch.rand(8, 1, 28, 28)
    ref = create_model("cnn-small", 10, 1).to(memory_format=torch.channels_last)
    ref.load_state_dict(model.state_dict())
    ref.train()
    assert torch.equal(FoldedEval(model)(x), ref(x))  # batch statistics, bit for bit
    assert torch.equal(model.features[1].running_mean, ref.features[1].running_mean)  # and they were updated
    assert model.features[1].num_batches_tracked.item() == 1


def test_the_forwards_are_restored_also_when_the_block_raises():
    model = trained_like("cnn-small", 1).eval()
    pairs = conv_bn_pairs(model)
    with pytest.raises(RuntimeError, match="inside"):
        with folded_batchnorm(model):
            assert all("forward" in m.__dict__ for pair in pairs for m in pair)
            raise RuntimeError("inside")
    assert not any("forward" in m.__dict__ for pair in pairs for m in pair)
    own = pairs[0][1].forward = lambda x: x + 1  # an instance forward of its own (e.g. a segmented BN) survives
    with folded_batchnorm(model):
        pass
    assert pairs[0][1].__dict__["forward"] is own


def test_each_call_folds_the_current_weights():
    model = trained_like("cnn-small", 1).eval()
    net = FoldedEval(model)
    x = torch.rand(2, 1, 28, 28)
    before = net(x)
    with torch.no_grad():
        model.features[1].running_var.mul_(4.0)  # what an optimiser step or a BN update does between calls
    assert not torch.allclose(net(x), before)
    assert torch.allclose(net(x), model(x), atol=1e-4, rtol=1e-4)


def test_the_attack_and_the_search_agree_folded_and_unfolded():
    model = trained_like("cnn-small", 1)
    x = torch.rand(16, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (16,))
    torch.manual_seed(3)
    plain = pgd(model, x, y, 0.3, 3, 0.15)
    torch.manual_seed(3)
    folded = pgd(FoldedEval(model), x, y, 0.3, 3, 0.15)
    # sign steps: a gradient component near 0 may flip, so most pixels, not all, agree
    assert (folded == plain).float().mean() > 0.99
    assert model.training  # the mode restored through the wrapper
    assert all(p.requires_grad for p in model.parameters())
    _, a_plain = interpolate(model, x, plain, y, 0.05, 2.0, 3)
    _, a_folded = interpolate(FoldedEval(model), x, plain, y, 0.05, 2.0, 3)
    assert (a_plain == a_folded).float().mean() >= 0.75  # a margin near rho may land on either side


def test_the_plan():
    small, wrn = create_model("cnn-small", 10, 1), create_model("wrn-16-1", 10, 3)
    assert fold_plan("auto", "cpu", "off", small) == (True, "on")
    assert fold_plan("on", "cuda", "off", small) == (True, "on")
    assert fold_plan("auto", "cuda", "off", small) == (False, "off (auto on cuda)")
    assert fold_plan("off", "cpu", "off", small) == (False, "off")
    assert fold_plan("on", "cpu", "default", small) == (False, "off: system.compile='default' (the compiler fuses "
                                                               "them itself)")
    assert fold_plan("auto", "cpu", "off", wrn) == (False, "off: no convolution followed by a BatchNorm in this "
                                                           "model")


def test_the_wrapper_finds_the_pairs_once_and_folds_only_those():
    model = trained_like("cnn-small", 1).eval()
    net = FoldedEval(model)
    assert net.pairs == conv_bn_pairs(model) and len(net.pairs) == 2
    x = torch.rand(2, 1, 28, 28).contiguous(memory_format=torch.channels_last)
    net.pairs = []  # nothing to fold: the model's own forward, bit for bit
    assert torch.equal(net(x), model(x))
    net.pairs = conv_bn_pairs(model)[:1]  # the first pair only
    with folded_batchnorm(model, conv_bn_pairs(model)[:1]):
        assert torch.equal(net(x), model(x))

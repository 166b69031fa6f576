"""Models by name: WideResNet-d-k as in RST/TRADES, ResNet-18 (CIFAR variant) and a small MNIST CNN.

Inputs are images in [0, 1]; like the RST and TRADES WideResNets, no normalisation layer is applied.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class _WideBlock(nn.Module):
    """Pre-activation block of the RST/TRADES WideResNet (shortcut from the activated input)."""

    def __init__(self, cin: int, cout: int, stride: int, dropout: float):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(cin), nn.BatchNorm2d(cout)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.equal = cin == cout
        self.shortcut = None if self.equal else nn.Conv2d(cin, cout, 1, stride, 0, bias=False)
        self.dropout = dropout

    def forward(self, x):
        o = F.relu(self.bn1(x))
        y = self.conv1(o)
        y = F.relu(self.bn2(y))
        if self.dropout > 0:
            y = F.dropout(y, p=self.dropout, training=self.training)
        y = self.conv2(y)
        return (x if self.equal else self.shortcut(o)) + y


class WideResNet(nn.Module):
    def __init__(self, depth: int, widen: int, num_classes: int, in_channels: int = 3, dropout: float = 0.0):
        super().__init__()
        assert (depth - 4) % 6 == 0, "WideResNet depth must be 6n+4"
        n = (depth - 4) // 6
        ch = [16, 16 * widen, 32 * widen, 64 * widen]
        self.conv1 = nn.Conv2d(in_channels, ch[0], 3, 1, 1, bias=False)
        layers = []
        for i, stride in enumerate((1, 2, 2)):
            for j in range(n):
                layers.append(_WideBlock(ch[i] if j == 0 else ch[i + 1], ch[i + 1], stride if j == 0 else 1, dropout))
        self.blocks = nn.Sequential(*layers)
        self.bn = nn.BatchNorm2d(ch[3])
        self.fc = nn.Linear(ch[3], num_classes)
        _init(self)

    def forward(self, x):
        x = self.blocks(self.conv1(x))
        x = F.relu(self.bn(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def conv_bn_pairs(self):
        """The BatchNorm layers applied right after a convolution (ssat/folding.py); the shortcut's is found."""
        return [(self.conv1, self.bn1), (self.conv2, self.bn2)]

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet18(nn.Module):
    """The CIFAR ResNet-18 (3x3 stem, no max-pool) used by TRADES/DAAT comparisons."""

    def __init__(self, num_classes: int, in_channels: int = 3, dropout: float = 0.0):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [_ResBlock(cin, cout, stride), _ResBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)
        _init(self)

    def conv_bn_pairs(self):
        """The stem's BatchNorm, applied right after its convolution (ssat/folding.py)."""
        return [(self.conv1, self.bn1)]

    def forward(self, x):
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SmallCNN(nn.Module):
    """Two conv blocks and an MLP head for 28x28 one-channel images (MNIST-5k); trains in seconds on a CPU.

    Each block is conv, BN, max-pool, ReLU: max-pooling before the ReLU gives the same outputs and gradients
    as after it (both are monotone, and a window without a positive value passes no gradient either way), and
    the ReLU then runs on a quarter of the values.
    """

    def __init__(self, num_classes: int, in_channels: int = 1, dropout: float = 0.0):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.MaxPool2d(2), nn.ReLU(),
            nn.Conv2d(16, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.MaxPool2d(2), nn.ReLU(),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Dropout(dropout),
                                  nn.Linear(64, num_classes))
        _init(self)

    def forward(self, x):
        """x: (B, C, H, W) -> logits (B, classes). 28x28 inputs reach the head as 7x7 maps; other sizes are
        average-pooled to 7x7 (skipped at 7x7, where it is the identity and, on a CPU, 10% of a PGD step)."""
        f = self.features(x)
        return self.head(f if f.shape[-2:] == (7, 7) else F.adaptive_avg_pool2d(f, 7))


def _init(model: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


MODELS = {
    "wrn-28-2": lambda c, i, p: WideResNet(28, 2, c, i, p),
    "wrn-28-5": lambda c, i, p: WideResNet(28, 5, c, i, p),
    "wrn-28-8": lambda c, i, p: WideResNet(28, 8, c, i, p),
    "wrn-34-10": lambda c, i, p: WideResNet(34, 10, c, i, p),
    "wrn-16-1": lambda c, i, p: WideResNet(16, 1, c, i, p),  # tiny WRN for tests and smoke runs
    "resnet18": lambda c, i, p: ResNet18(c, i, p),
    "cnn-small": lambda c, i, p: SmallCNN(c, i, p),
}


def create_model(name: str, num_classes: int, in_channels: int, dropout: float = 0.0) -> nn.Module:
    if name not in MODELS:
        raise KeyError(f"model {name!r} is unknown; valid: {', '.join(sorted(MODELS))}")
    return MODELS[name](num_classes, in_channels, dropout)


def forward_flops(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """FLOPs (2 x multiply-adds) of one forward pass of one image, counting convolutions and linears.

    input_shape: (C, H, W). The basis of the utilisation figure (nanoGPT's estimate_mfu idea).
    """
    total = 0

    def hook(mod, inp, out):
        nonlocal total
        if isinstance(mod, nn.Conv2d):
            k = mod.kernel_size[0] * mod.kernel_size[1] * mod.in_channels // mod.groups
            total += 2 * k * out.numel()
        elif isinstance(mod, nn.Linear):
            total += 2 * mod.in_features * out.numel()

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    was_training = model.training
    model.eval()
    p = next(model.parameters())
    with torch.no_grad():
        model(torch.zeros(1, *input_shape, device=p.device, dtype=p.dtype))
    model.train(was_training)
    for h in handles:
        h.remove()
    return total

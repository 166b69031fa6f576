"""Eval-mode forwards with each BatchNorm folded into the convolution before it: one convolution with scaled
weights and a bias instead of a convolution, then a normalisation pass over its whole output.

In eval mode a BatchNorm layer is the per-channel affine map y = (c - mu) * s + b with s = gamma / sqrt(var + eps)
(its running statistics mu, var). After a convolution c = W * x (+ c0) it is the convolution with weights W * s
(scaled per output channel) and bias (c0 - mu) * s + b: the same function, one pass over the activations fewer
in each forward and in each backward to the input. The attack's forwards and backwards (PGD, the interpolation
search, validation and test) all run in eval mode, so on a CPU this is their cheapest form; the values differ from
the unfolded forward by float rounding only. Train mode (batch statistics) is never folded.

    pairs = conv_bn_pairs(model)          # [(conv, bn)] where a BatchNorm directly follows a convolution
    with folded_batchnorm(model, pairs):  # in eval mode: each pair's conv computes conv+BN, the BN passes through
        logits = model(x)

Pairs are found inside nn.Sequential containers (a Conv2d immediately followed by a BatchNorm2d of its output
channels, as in ssat.models.SmallCNN and ResNet18's shortcuts); a module may name more with a method
`conv_bn_pairs()` returning [(conv, bn)] that its forward applies one right after the other (ResNet18's). WideResNet's
pre-activation blocks (BN, ReLU, then conv) have none: nothing is folded there.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn as nn

from .runtime import patched_forwards

Pair = tuple[nn.Conv2d, nn.BatchNorm2d]


def conv_bn_pairs(model: nn.Module) -> list[Pair]:
    """[(conv, bn)]: each Conv2d directly followed, in an nn.Sequential, by a BatchNorm2d over its out_channels
    (with affine parameters and running statistics), plus those its modules' own `conv_bn_pairs()` name."""
    pairs = []
    for m in model.modules():
        if isinstance(m, nn.Sequential):
            mods = list(m)
            pairs += [(a, b) for a, b in zip(mods, mods[1:]) if _foldable(a, b)]
        own = getattr(m, "conv_bn_pairs", None)
        if callable(own):
            pairs += [(a, b) for a, b in own() if _foldable(a, b)]
    return pairs


def _foldable(conv: nn.Module, bn: nn.Module) -> bool:
    return (isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d) and bn.affine
            and bn.running_mean is not None and bn.num_features == conv.out_channels)


def folded_weights(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """(W * s, (c0 - mu) * s + b): conv's weights (O, I/g, kh, kw) scaled per output channel by
    s = gamma / sqrt(var + eps) (O,), and the bias (O,) that makes one convolution equal conv then eval-mode BN.
    Differentiable in the parameters (their gradients flow where they are wanted)."""
    s = bn.weight * torch.rsqrt(bn.running_var + bn.eps)
    bias = bn.bias - bn.running_mean * s
    if conv.bias is not None:
        bias = bias + conv.bias * s
    return conv.weight * s.view(-1, 1, 1, 1), bias


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


@contextmanager
def folded_batchnorm(model: nn.Module, pairs: list[Pair] | None = None) -> Iterator[nn.Module]:
    """Within the block, if `model` is in eval mode: each pair's convolution runs with folded_weights and its
    BatchNorm passes its input through. The forwards are restored on exit (also when the block raises). In train
    mode, or without pairs, the block runs the model as it is. The weights are folded on entry: a block must not
    span an optimiser step."""
    pairs = conv_bn_pairs(model) if pairs is None else pairs
    if model.training or not pairs:
        yield model
        return
    replacements = []
    for conv, bn in pairs:
        w, b = folded_weights(conv, bn)
        replacements += [(conv, lambda x, conv=conv, w=w, b=b: conv._conv_forward(x, w, b)), (bn, _identity)]
    with patched_forwards(replacements):
        yield model


class FoldedEval(nn.Module):
    """`model` whose eval-mode forwards run with its BatchNorm layers folded (folded_batchnorm), re-folded at every
    call so that they always follow the current weights and statistics; train-mode forwards are the model's own.
    Modes, parameters and buffers are the wrapped model's (its only child), so eval_mode, frozen and
    segmented_forward work through it."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.pairs = conv_bn_pairs(model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.model.training:
            return self.model(x)
        with folded_batchnorm(self.model, self.pairs):
            return self.model(x)


def fold_plan(setting: str, device_type: str, compile_mode: str, model: nn.Module) -> tuple[bool, str]:
    """(fold, status) for system.fold_bn: a run's eval-mode forwards (the attack, the interpolation search,
    validation and test) folded: on, or auto on a CPU; never under torch.compile (it fuses them itself; evaluation
    passes "off") or for a model with no convolution followed by a BatchNorm."""
    if setting == "off" or (setting == "auto" and device_type != "cpu"):
        return False, "off" if setting == "off" else f"off (auto on {device_type})"
    if compile_mode != "off":
        return False, f"off: system.compile={compile_mode!r} (the compiler fuses them itself)"
    if not conv_bn_pairs(model):
        return False, "off: no convolution followed by a BatchNorm in this model"
    return True, "on"

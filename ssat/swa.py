"""Stochastic weight averaging for validation and the last checkpoint (optim.swa_start, optim.swa_bn): from the
epoch after swa_start the averaged weights are the model that is validated, selected as best and saved as last."""
from __future__ import annotations

from typing import Callable, Iterable

import torch
import torch.nn as nn


class WeightAverage:
    """The running average of a model's weights after each epoch past `start`, its BatchNorm statistics either
    averaged with the weights (bn "average") or recomputed before each use (bn "recompute": one cumulative pass
    over `bn_images()`, clean training images in chunks, as the authors' bn_update)."""

    def __init__(self, model: nn.Module, start: int, bn: str, bn_images: Callable[[], Iterable[torch.Tensor]]):
        # avg_fn: one tensor at a time on every device. Without it CUDA takes torch's foreach path, whose
        # addcdiv refuses the integer BN buffer (num_batches_tracked) that "average" carries: every GPU trial
        # with swa_bn average failed at its first averaged epoch (H200, torch 2.11). A CPU already took this path.
        self.avg = torch.optim.swa_utils.AveragedModel(model, use_buffers=bn == "average",
                                                       avg_fn=torch.optim.swa_utils.get_swa_avg_fn())
        self.start, self.bn, self.bn_images = start, bn, bn_images

    def active(self, epoch: int) -> bool:
        return epoch > self.start

    def update(self, model: nn.Module, epoch: int) -> None:
        """Average in `model` after `epoch` (once averaging has begun)."""
        if self.active(epoch):
            self.avg.update_parameters(model)

    def model_for(self, epoch: int, model: nn.Module) -> nn.Module:
        """The model that stands for `epoch`: the average once it has begun (its BN statistics recomputed under
        bn "recompute"), else `model`."""
        if not self.active(epoch):
            return model
        if self.bn == "recompute":
            recompute_bn(self.avg.module, self.bn_images())
        return self.avg.module


def recompute_bn(model: nn.Module, images: Iterable[torch.Tensor]) -> None:
    """BN statistics recomputed in one cumulative pass over `images` (torch's update_bn; the mode is restored)."""
    with torch.no_grad():
        torch.optim.swa_utils.update_bn(images, model)

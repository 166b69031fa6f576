"""The SWA model's BatchNorm pass (AWR): statistics recomputed on the clean training images, one cumulative pass."""
from types import SimpleNamespace

import torch
import torch.nn as nn

from ssat.datasets import to_float
from ssat.train import Trainer


def test_swa_bn_statistics_are_the_cumulative_average_over_chunks_of_500():
    torch.manual_seed(0)
    x = (torch.rand(1234, 2, 3, 3) * 255).to(torch.uint8)
    model = nn.Sequential(nn.BatchNorm2d(2)).eval()
    model[0].running_mean.fill_(7.0)  # stale statistics must be replaced, not averaged in
    fake = SimpleNamespace(cfg=SimpleNamespace(is_awr=False), batches=SimpleNamespace(x=x), _prep=lambda t: t)
    Trainer._recompute_bn(fake, model)
    chunks = [to_float(x[i: i + 500]).double() for i in range(0, 1234, 500)]
    # momentum None: the running mean is the plain average of the three chunk means (not weighted by size)
    want_mean = torch.stack([c.mean(dim=(0, 2, 3)) for c in chunks]).mean(0)
    want_var = torch.stack([c.transpose(0, 1).flatten(1).var(dim=1, unbiased=True) for c in chunks]).mean(0)
    assert torch.allclose(model[0].running_mean.double(), want_mean, atol=1e-6)
    assert torch.allclose(model[0].running_var.double(), want_var, atol=1e-6)
    assert model[0].num_batches_tracked.item() == 3 and model[0].momentum == 0.1  # momentum restored
    assert not model.training  # mode restored
    assert not any(p.grad is not None for p in model.parameters())


def test_awr_recomputes_on_the_unlabeled_images():
    xu = torch.full((10, 1, 2, 2), 51, dtype=torch.uint8)   # 0.2 after scaling
    x = torch.full((10, 1, 2, 2), 255, dtype=torch.uint8)
    model = nn.Sequential(nn.BatchNorm2d(1))
    fake = SimpleNamespace(cfg=SimpleNamespace(is_awr=True), batches=SimpleNamespace(xu=xu, x=x), _prep=lambda t: t)
    Trainer._recompute_bn(fake, model)
    assert model[0].running_mean.item() == torch.tensor(0.2).item()

"""The batchings' builders (ssat/batchings.py): what each hands its batches from the config, the split and the
teacher. The device is "meta" (shapes only): a tensor left on the CPU would show."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ssat.batchings import BATCHING_REGISTRY
from ssat.config import from_dict
from ssat.presets import preset

ARRAYS = SimpleNamespace(x_train=torch.zeros(10, 3, 4, 4, dtype=torch.uint8), y_train=torch.arange(10) % 10)
SPLIT = SimpleNamespace(labeled=np.arange(4), unlabeled=np.arange(4, 10))


class Teacher:
    def probabilities(self):
        return torch.full((6, 10), 0.1)


def test_union_batches_take_the_teachers_soft_labels_the_datasets_flip_and_the_device():
    build = BATCHING_REGISTRY["union"].build
    cifar = from_dict(preset("cifar10-ssat-mbi"))
    b = build(cifar, ARRAYS, SPLIT, Teacher(), 10, "meta")
    assert len(b) == 10 and b.flip is True and b.batch_size == cifar.optim.batch_size
    assert b.x.device.type == b.targets.device.type == "meta"
    assert len(build(cifar, ARRAYS, SPLIT, None, 10, "cpu")) == 4  # no teacher: the labeled images alone
    labeled_only = SimpleNamespace(labeled=np.arange(4), unlabeled=np.arange(0))
    assert len(build(cifar, ARRAYS, labeled_only, Teacher(), 10, "cpu")) == 4  # nothing to pseudo-label
    assert build(from_dict(preset("mnist5k-ssat-mbi")), ARRAYS, SPLIT, None, 10, "cpu").flip is False


@pytest.mark.parametrize("sampling", ["random", "cycle"])
def test_awr_batches_take_the_batch_sizes_the_flip_the_sampling_and_the_device(sampling):
    cfg = from_dict(preset("cifar10-ssat-mbi-awr"), {"data.labeled_sampling": sampling})
    b = BATCHING_REGISTRY["awr"].build(cfg, ARRAYS, SPLIT, Teacher(), 10, "meta")
    assert (b.lb, b.ub, b.flip, b.labeled_sampling) == (min(cfg.optim.labeled_batch, 4), cfg.optim.unlabeled_batch,
                                                        True, sampling)
    assert b.xl.device.type == b.xu.device.type == "meta" and len(b) == 6

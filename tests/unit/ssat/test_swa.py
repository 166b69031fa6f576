"""The SWA model's BatchNorm statistics: recomputed on the clean training images in one cumulative pass (optim.swa_bn
recompute, the AWR presets), or averaged with the weights (average, the demo)."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from ssat import swa
from ssat.batchings import BATCHING_REGISTRY
from ssat.datasets import to_float
from ssat.swa import recompute_bn
from ssat.train import Trainer


def test_swa_bn_statistics_are_the_cumulative_average_over_chunks_of_500():
    torch.manual_seed(0)
    x = (torch.rand(1234, 2, 3, 3) * 255).to(torch.uint8)
    model = nn.Sequential(nn.BatchNorm2d(2)).eval()
    model[0].running_mean.fill_(7.0)  # stale statistics must be replaced, not averaged in
    fake = SimpleNamespace(cfg=SimpleNamespace(batching=BATCHING_REGISTRY["union"]), batches=SimpleNamespace(x=x),
                           engine=SimpleNamespace(prep=lambda b: b))
    recompute_bn(model, Trainer._bn_images(fake))
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
    fake = SimpleNamespace(cfg=SimpleNamespace(batching=BATCHING_REGISTRY["awr"]), batches=SimpleNamespace(xu=xu, x=x),
                           engine=SimpleNamespace(prep=lambda b: b))
    recompute_bn(model, Trainer._bn_images(fake))
    assert model[0].running_mean.item() == torch.tensor(0.2).item()


# ---- optim.swa_bn = "average": the BN statistics are averaged with the weights, nothing is recomputed ----------
def _trainer(tmp_path, swa_bn, monkeypatch):
    from tests.unit.ssat.test_train import fake_teacher, tiny

    cfg = tiny(**{"optim.swa_start": 1, "optim.swa_bn": swa_bn, "eval.val_every": 1})
    calls, orig = [], swa.recompute_bn
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    monkeypatch.setattr(swa, "recompute_bn", lambda m, images: (calls.append(tr.epoch), orig(m, images)))
    return tr, calls


def _bn(model):
    return next(m for m in model.modules() if isinstance(m, nn.BatchNorm2d))


def test_average_mode_averages_running_statistics_and_weights_over_the_epochs_after_swa_start(tmp_path, monkeypatch):
    tr, calls = _trainer(tmp_path, "average", monkeypatch)
    raw = []
    for m in tr.epochs():  # 3 epochs; SWA from the epoch after swa_start=1: epochs 2 and 3
        bn = _bn(tr.model)
        raw.append((bn.running_mean.clone(), bn.running_var.clone(), bn.weight.detach().clone()))
    assert calls == []  # nothing recomputed on clean images
    avg = _bn(tr.swa.avg.module)
    for got, i in ((avg.running_mean, 0), (avg.running_var, 1), (avg.weight, 2)):
        want = (raw[1][i] + raw[2][i]) / 2
        assert torch.allclose(got, want, atol=1e-6) and not torch.allclose(got, raw[2][i], atol=1e-4)
    # the averaged model is what was validated and saved as the last checkpoint
    from ssat.storage import load_verified
    last = load_verified(tmp_path / "last.pt")["model"]
    name = next(k for k in last if k.endswith("running_mean"))
    assert torch.equal(last[name], avg.running_mean.cpu())


def test_recompute_mode_recomputes_each_validated_swa_epoch(tmp_path, monkeypatch):
    tr, calls = _trainer(tmp_path, "recompute", monkeypatch)
    tr.fit()
    assert calls == [1, 2]  # before epochs 2 and 3 are recorded (self.epoch is still the previous one)
    assert not torch.allclose(_bn(tr.swa.avg.module).running_mean, _bn(tr.model).running_mean, atol=1e-4)


def test_swa_bn_is_checked_by_name():
    from ssat.config import ConfigError, from_dict
    from ssat.presets import preset

    with pytest.raises(ConfigError, match=r"^optim\.swa_bn: 'mean' is not allowed.*allowed: recompute, average"):
        from_dict(preset("mnist5k-ssat-mbi"), {"optim.swa_start": 3, "optim.swa_bn": "mean"})
    with pytest.raises(ConfigError, match=r"optim\.swa_bn: 'average' without SWA \(optim\.swa_start is None\); "
                                          r"allowed without SWA: 'recompute'"):
        from_dict(preset("mnist5k-ssat-mbi"), {"optim.swa_bn": "average"})
    cfg = from_dict(preset("mnist5k-ssat-mbi"), {"optim.swa_start": 3})
    assert cfg.replace(**{"optim.swa_bn": "average"}).config_hash() != cfg.config_hash()


def test_the_average_takes_the_per_tensor_path_that_integer_buffers_survive():
    """On CUDA torch's default averaging is a foreach addcdiv, which refuses BN's integer num_batches_tracked: the
    average must go one tensor at a time (the CPU's path) on every device. The values are the running mean."""
    from ssat.swa import WeightAverage

    net = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    wa = WeightAverage(net, 0, "average", lambda: [])
    assert wa.avg.avg_fn is not None and wa.avg.multi_avg_fn is None  # not the foreach path
    steps = []
    for epoch, (w, n) in enumerate(((1.0, 4), (2.0, 6), (6.0, 11)), start=1):
        with torch.no_grad():
            net[0].weight.fill_(w)
        net[1].num_batches_tracked.fill_(n)
        wa.update(net, epoch)
        steps.append((wa.avg.module[0].weight[0, 0].item(), wa.avg.module[1].num_batches_tracked.item()))
    assert steps == [(1.0, 4), (1.5, 5), (3.0, 7)]  # float: mean of 1, 2, 6; integer: truncated running mean
    assert wa.avg.module[1].num_batches_tracked.dtype == torch.long

"""fp16's loss scaling on the device (ssat.engine.DeviceScaler), against torch.amp.GradScaler on the same model and
losses: the same weights, momentum buffers, scale and growth tracker after every step, overflowing steps skipped
(the first one too, before any momentum exists), and no tensor value read on the host (so graph mode captures
it). On the CPU in fp32: the rule is the same on every device."""
import pytest
import torch
import torch.nn as nn

from ssat.engine import DeviceScaler


def model_and_opt(nesterov: bool):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    return m, torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=nesterov)


def losses(model, step: int, bad: set[int]):
    g = torch.Generator().manual_seed(step)
    loss = model(torch.randn(8, 6, generator=g)).logsumexp(1).mean()
    return loss * float("inf") if step in bad else loss


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("bad", [{2, 3}, {0}, set()])
def test_the_device_scaler_steps_and_skips_as_torchs_grad_scaler(nesterov, bad):
    ref, ref_opt = model_and_opt(nesterov)
    ours, opt = model_and_opt(nesterov)
    gs = torch.amp.GradScaler("cpu", growth_interval=3)  # small: growth happens within the test
    ds = DeviceScaler(opt, torch.device("cpu"), growth_interval=3)
    for step in range(9):
        before = [p.clone() for p in ours.parameters()]
        ref_opt.zero_grad(set_to_none=True)
        gs.scale(losses(ref, step, bad)).backward()
        gs.step(ref_opt)
        gs.update()
        opt.zero_grad(set_to_none=True)
        ds.scale(losses(ours, step, bad)).backward()
        ds.step()
        for a, b in zip(ref.parameters(), ours.parameters()):
            assert torch.equal(a, b), step
        for a, b in zip(ref.parameters(), ours.parameters()):
            buf = ref_opt.state[a].get("momentum_buffer")
            got = opt.state[b]["momentum_buffer"]
            assert torch.equal(got, torch.zeros_like(got) if buf is None else buf), step  # skipped first step: zeros
        assert ds.scale_t.item() == gs.get_scale() and ds.tracker.item() == gs._growth_tracker.item(), step
        if step in bad:
            assert all(torch.equal(a, b) for a, b in zip(before, ours.parameters()))  # a skipped step stays skipped
    assert ds.scale_t.item() != 2.0 ** 16  # it moved (backed off, or grew)


def test_a_fresh_scale_every_epoch():
    _, opt = model_and_opt(False)
    ds = DeviceScaler(opt, torch.device("cpu"))
    scale, tracker = ds.scale_t, ds.tracker
    ds.scale_t.fill_(8.0)
    ds.tracker.fill_(5)
    ds.reset()
    assert ds.scale_t.item() == 2.0 ** 16 and ds.tracker.item() == 0
    assert ds.scale_t is scale and ds.tracker is tracker  # in place: a captured graph keeps reading them


def test_a_device_scaler_step_reads_no_tensor_value_on_the_host(monkeypatch):
    model, opt = model_and_opt(False)
    ds = DeviceScaler(opt, torch.device("cpu"))
    ds.scale(losses(model, 0, set())).backward()

    def refuse(*a, **k):
        raise AssertionError("a tensor value was read on the host")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    ds.step()

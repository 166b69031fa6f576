"""The training step without waste (issue 16): batches drawn up front and bit-identical to the batch-by-batch
draws they replace, no parameter gradients during the attack, statistics added in place, no host read inside a
step, performance switches outside config_hash, and graph mode's fallback on a CPU."""
import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn

from ssat.attacks import frozen, pgd
from ssat.config import from_dict
from ssat.batchings import UnionBatches
from ssat.datasets import Split
from ssat.presets import PRESETS, preset
from ssat.engine import StepStats, graph_plan, graph_refusal
from ssat.schedules import at_epoch
from ssat.train import Trainer
from tests.unit.ssat.test_train import fake_teacher, strip, tiny

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))


# ---- UnionBatches: the epoch's draws up front ----------------------------------------------------------------
def union_batches(channels, size, flip, soft, batch, n_lab, n_unl, seed=11):
    g = torch.Generator().manual_seed(seed)
    n = n_lab + n_unl + 3
    x = torch.randint(0, 256, (n, channels, size, size), generator=g, dtype=torch.uint8)
    y = torch.randint(0, 10, (n,), generator=g)
    split = Split("cifar10", labeled=np.arange(3, 3 + n_lab), val=np.arange(3), unlabeled=np.arange(3 + n_lab, n),
                  split_seed=0)
    st = None
    if soft:  # ratios of small integers: exact on every CPU (a softmax's exp is not bit-identical across CPUs)
        w = torch.randint(1, 9, (n_unl, 10), generator=g).double()
        st = (w / w.sum(1, keepdim=True)).float()
    return UnionBatches(x, y, split, st, 10, batch, "cpu", flip)


# Digests of two epochs of batches (images and targets, byte for byte) and of the generator's state after them,
# computed with the batch-by-batch drawing UnionBatches had before issue 16 (commit fb30c0e; the soft targets'
# digests again with that code when they became integer ratios).
BEFORE = {
    # 33 images in batches of 7: a last batch of 5; flips and crops; one-hot and soft targets
    (3, 32, True, True, 7, 10, 23): (10, "ff8b6b0127706b7f"),
    # 9 labeled images in batches of 4: the last single image is left out (and draws nothing); no flip
    (1, 28, False, False, 4, 9, 0): (4, "0646b1b129b4854b"),
    (3, 32, True, True, 64, 40, 160): (8, "1d734d4b23a07a96"),
}


@pytest.mark.parametrize("case", sorted(BEFORE))
def test_union_batches_are_bit_identical_to_the_batch_by_batch_draws(case):
    ub = union_batches(*case)
    h, gen, n = hashlib.sha256(), torch.Generator().manual_seed(12), 0
    for _ in range(2):
        for xb, tb in ub.epoch(gen):
            h.update(xb.contiguous().numpy().tobytes())
            h.update(tb.contiguous().numpy().tobytes())
            n += 1
    h.update(gen.get_state().numpy().tobytes())
    assert (n, h.hexdigest()[:16]) == BEFORE[case]


def test_an_epoch_draws_everything_before_its_first_batch():
    ub = union_batches(3, 32, True, True, 7, 10, 23)
    gen = torch.Generator().manual_seed(0)
    batches = ub.epoch(gen)
    next(batches)
    after_first = gen.get_state()
    rest = list(batches)
    assert len(rest) == 4 and torch.equal(gen.get_state(), after_first)  # no draw between batches


# ---- the attack without parameter gradients --------------------------------------------------------------------
class Probe(nn.Module):
    """A linear model that records whether its weight required a gradient at each forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.bias_free = nn.Parameter(torch.zeros(3), requires_grad=False)  # frozen by its owner: stays so
        self.seen = []

    def forward(self, x):
        self.seen.append(self.lin.weight.requires_grad)
        return self.lin(x.flatten(1)) + self.bias_free


def test_pgd_runs_with_frozen_parameters_and_restores_them():
    model = Probe()
    x, y = torch.rand(5, 1, 2, 2), torch.randint(0, 3, (5,))
    x_pgd = pgd(model, x, y, 0.1, 3, 0.05)
    assert model.seen == [False, False, False]
    assert model.lin.weight.requires_grad and model.lin.bias.requires_grad and not model.bias_free.requires_grad
    assert model.lin.weight.grad is None and not torch.equal(x_pgd, x)


def test_frozen_restores_the_parameters_after_an_error():
    model = Probe()
    with pytest.raises(RuntimeError, match="boom"):
        with frozen(model):
            assert not any(p.requires_grad for p in model.parameters())
            raise RuntimeError("boom")
    assert [p.requires_grad for p in model.parameters()] == [False, True, True]  # bias_free, weight, bias


def test_a_graph_built_before_the_attack_still_reaches_the_weights():
    """AWR's authors' order runs train forwards before the attack: their backward must still give gradients."""
    model = Probe()
    x, y = torch.rand(5, 1, 2, 2), torch.randint(0, 3, (5,))
    loss = model(x).logsumexp(1).sum()
    pgd(model, x, y, 0.1, 2, 0.05)
    loss.backward()
    assert model.lin.weight.grad is not None and model.lin.weight.grad.abs().sum() > 0


# ---- statistics in place ------------------------------------------------------------------------------------------
def test_step_stats_accumulate_in_place_and_summarise():
    acc = StepStats(torch.device("cpu"), K=3)
    buffers = [id(v) for v in acc.stats.values()] + [id(acc.bad)]
    x = torch.zeros(2, 1, 1, 2)
    x_pgd = torch.tensor([0.1, -0.3, 0.2, 0.0]).view(2, 1, 1, 2)
    x_adv = torch.tensor([0.05, -0.1, 0.2, 0.0]).view(2, 1, 1, 2)
    alpha = torch.tensor([0.125, 1.0])  # 2^-K and 1
    acc.add({"loss": torch.tensor(2.0), "ce": torch.tensor(1.0)}, x, x_pgd, x_adv, alpha)
    acc.add({"loss": torch.tensor(4.0), "ce": torch.tensor(0.5)}, x, x_pgd / 3, x_adv, torch.tensor([0.5, 0.5]))
    acc.count(4, 4)
    sums = dict(acc.sums)
    s = acc.summary()
    assert s["train/loss"] == pytest.approx((2 * 2 + 4 * 2) / 4) and s["train/ce"] == pytest.approx(3 / 4)
    assert s["adv/pgd_linf_max"] == pytest.approx(0.3)
    assert s["adv/adv_linf_mean"] == pytest.approx(2 * (0.1 + 0.2) / 4)
    assert s["adv/alpha_mean"] == pytest.approx((0.125 + 1 + 1) / 4)
    assert s["adv/alpha_min_share"] == pytest.approx(1 / 4) and s["adv/alpha_one_share"] == pytest.approx(1 / 4)
    acc.reset()  # zeroed in place: a captured CUDA graph keeps adding into the same buffers
    assert [id(v) for v in acc.stats.values()] + [id(acc.bad)] == buffers
    assert all(acc.sums[k] is v and v.item() == 0 for k, v in sums.items()) and acc.n_att == 0


# ---- the step reads no device value ------------------------------------------------------------------------
def test_a_step_never_reads_a_tensor_value_on_the_host(tmp_path, monkeypatch):
    """On a GPU every such read (.item(), bool(), float(), .tolist()) waits for the device."""
    cfg = tiny()
    tr = Trainer(cfg, tmp_path, teacher=fake_teacher(cfg), log=lambda s: None)
    batch = next(iter(tr.batches.epoch(tr.gen)))
    acc = StepStats(tr.device, cfg.method.K)

    def refuse(*a, **k):
        raise AssertionError("a tensor value was read on the host inside the step")

    for name in ("item", "tolist", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    tr.engine.step(batch, at_epoch(tr.cfg, 1), acc)
    monkeypatch.undo()
    assert acc.n_att == len(batch[0]) and acc.eager_steps == 1 and acc.stats["alpha"].item() > 0


# ---- performance switches and config_hash ---------------------------------------------------------------------
PERF = {"system.compile": "reduce-overhead", "system.graph_mode": True, "system.cudnn_benchmark": False}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_performance_switches_leave_config_hash_alone(name):
    base = from_dict(preset(name))
    assert from_dict(preset(name), PERF).config_hash() == base.config_hash()
    assert from_dict(preset(name), PERF).config_hash(exclude_seed=False) == base.config_hash(exclude_seed=False)
    assert from_dict(preset(name), {"method.tau": 3.0}).config_hash() != base.config_hash()  # the hash still sees


def test_graph_mode_on_a_cpu_trains_eagerly_says_why_and_resumes_a_run_made_without_it(tmp_path):
    cfg = tiny(**{"optim.epochs": 2, "optim.lr_milestones": [2]})
    teacher = fake_teacher(cfg)
    straight = Trainer(cfg, tmp_path / "a", teacher=teacher, log=lambda s: None)
    straight.fit()
    first = Trainer(cfg, tmp_path / "b", teacher=teacher, log=lambda s: None)
    next(first.epochs())  # epoch 1 without graph mode, then resumed with every performance switch set
    del first
    lines = []
    graph_cfg = cfg.replace(**{k: v for k, v in PERF.items() if k != "system.compile"})
    resumed = Trainer(graph_cfg, tmp_path / "b", teacher=teacher, log=lines.append)
    assert resumed.engine.graph is None
    assert resumed.engine.graph_status == "eager: it needs a CUDA device and this run is on cpu"
    assert any("system.graph_mode: eager: it needs a CUDA device" in ln for ln in lines)
    assert resumed.epoch == 1
    resumed.fit()
    assert resumed.history[-1]["perf/graph_steps"] == 0
    assert strip(resumed.history) == strip(straight.history)
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, resumed.model.state_dict()[k]), k


# ---- the benchmarks run the trainer's step -----------------------------------------------------------------
@pytest.mark.parametrize("model", ["cnn-small", "wrn-16-1"])
def test_the_benchmarks_time_the_trainers_step(model, tmp_path):
    from step_time import bench_trainer, fixed_batch, timed_steps

    tr = bench_trainer("ssat-mbi", model, batch=4, threads=1, root=tmp_path)
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    timed_steps(tr, fixed_batch(tr, 4), steps=1, warmup=0)
    assert len(tr.opt.state) == len(list(tr.model.parameters()))  # SGD stepped every parameter
    assert any(not torch.equal(v, tr.model.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize("wanted", [True, False])
def test_each_trial_sets_cudnn_autotuning_afresh(wanted, monkeypatch):
    """Ray reuses actors: a trial must not inherit the setting a trial before it left in the process."""
    from sweeps.trials.trainable import reset_process_state

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", not (wanted and torch.cuda.is_available()))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # leave the test process's threads alone
    reset_process_state(from_dict({"system": {"cudnn_benchmark": wanted}}), {"cpus": 1})
    assert torch.backends.cudnn.benchmark is (wanted and torch.cuda.is_available())


@pytest.mark.parametrize("device, compile_mode, reason", [
    ("cuda", "off", None),
    ("cuda", "default", None),  # compile's kernels are captured with the rest of the step
    ("cuda", "max-autotune-no-cudagraphs", None),
    ("cpu", "off", "it needs a CUDA device and this run is on cpu"),
    ("cuda", "reduce-overhead", "system.compile='reduce-overhead' captures CUDA graphs itself"),
    ("cuda", "max-autotune", "system.compile='max-autotune' captures CUDA graphs itself"),
])
def test_graph_mode_is_refused_only_where_a_capture_cannot_work(device, compile_mode, reason):
    """The AWR step and fp16 (its scaler on the device) are captured too: only the device and a compile mode that
    captures graphs itself refuse it."""
    got = graph_refusal(device, compile_mode)
    assert got == reason if reason is None else got.startswith(reason)


@pytest.mark.parametrize("setting, device, plan", [
    ("off", "cuda", (False, "off")),
    ("auto", "cuda", (True, "pending")),
    ("on", "cuda", (True, "pending")),
    ("auto", "cpu", (False, "eager (auto): it needs a CUDA device and this run is on cpu")),
    ("on", "cpu", (False, "eager: it needs a CUDA device and this run is on cpu")),
])
def test_graph_mode_auto_captures_on_cuda_and_says_why_it_does_not_elsewhere(setting, device, plan):
    assert graph_plan(setting, device, "default" if device == "cuda" else "off") == plan


# ---- fused forwards --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mnist5k-ssat-mbi", "mnist5k-ssat-mbi-awr"])
def test_fused_forwards_train_as_separate_ones(tmp_path, name):
    """system.fused_forward=on: one forward over the step's batches, BatchNorm per batch; the same terms and
    running statistics as separate forwards (float rounding of a larger convolution apart)."""
    from tests.unit.ssat.test_attacks_pgd_forward import awr_case, union_case

    out = {}
    for fused in ("on", "off"):
        cfg = tiny(name, **{"system.fused_forward": fused})
        tr = Trainer(cfg, tmp_path / fused, teacher=teacher_for(cfg), log=lambda s: None)
        assert tr.engine.fused_status == fused
        assert (tr.engine.forward.__name__ == "segmented_forward") == (fused == "on")
        batch, _ = (awr_case if cfg.batching.name == "awr" else union_case)(tr)
        torch.manual_seed(4)
        terms, *_ = tr.engine.terms(batch, 0.2, 0.004)
        out[fused] = terms, {k: v.clone() for k, v in tr.model.state_dict().items() if "running" in k}
    (t_on, bn_on), (t_off, bn_off) = out["on"], out["off"]
    assert t_on.keys() == t_off.keys()
    assert all(torch.allclose(t_on[k], t_off[k], rtol=1e-5, atol=1e-6) for k in t_on)
    assert all(torch.allclose(bn_on[k], bn_off[k], rtol=1e-5, atol=1e-6) for k in bn_on)


def teacher_for(cfg, _cache={}):
    """One fake teacher per method (its weights are random draws: both trainers must share it)."""
    return _cache.setdefault(cfg.method.name, fake_teacher(cfg))


def test_fused_forwards_are_off_on_a_cpu_by_default_and_with_dropout(tmp_path):
    auto = Trainer(tiny(), tmp_path / "auto", teacher=fake_teacher(tiny()), log=lambda s: None)
    assert auto.engine.fused_status == "off (auto on cpu)"
    assert auto.engine.status()["fused_forward"] == auto.engine.fused_status
    cfg = tiny(**{"system.fused_forward": "on", "model.dropout": 0.3})
    drop = Trainer(cfg, tmp_path / "drop", teacher=fake_teacher(cfg), log=lambda s: None)
    assert drop.engine.fused_status.startswith("off: ") and "dropout" in drop.engine.fused_status

"""benchmarks/profile_step.py on a CPU: two profiled steps of a real Trainer (cnn-small, batch 4). The operators it
puts in each phase are counted against what the step must run: PGD-10 (10 forwards and 10 input-gradient
backwards), the K = 3 search forwards, the three outer forwards (x, x_adv, x_pgd) and their backward."""
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.profiler import record_function

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import profile_step  # noqa: E402


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile")
    rc = profile_step.main(["--model", "cnn-small", "--steps", "2", "--warmup", "1", "--batch", "4", "--threads",
                            "1", "--mode", "eager", "--trace", str(d / "trace.json"), "--json", str(d / "out.json")])
    assert rc == 0
    return json.loads((d / "out.json").read_text())["eager"], d / "trace.json"


def test_each_phase_holds_the_passes_of_its_part_of_the_step(profiled):
    r, _ = profiled
    convs = 2  # cnn-small's convolutions: one aten::conv2d each per forward
    ops = r["phase_op_counts_per_step"]
    assert ops["pgd"]["aten::conv2d"] == 10 * convs and ops["pgd"]["aten::convolution_backward"] == 10 * convs
    assert ops["search"]["aten::conv2d"] == 3 * convs and "aten::convolution_backward" not in ops["search"]
    assert ops["outer forward"]["aten::conv2d"] == 3 * convs
    assert ops["backward"]["aten::convolution_backward"] == 3 * convs and "aten::conv2d" not in ops["backward"]
    assert ops["data"]["aten::index"] >= 1 and "aten::randperm" not in ops["data"]  # an epoch's draws are made once
    assert r["accumulate_grad_in_pgd_per_iteration"] == 1.0 and r["weight_grad_in_pgd"] is False
    assert r["graph_status"] == "off" and r["eager_steps"] == 2 and r["steps"] == 2


def test_times_and_the_top_kernels_add_up(profiled):
    r, _ = profiled
    assert 0 < r["busy_ms_per_step"] <= r["wall_ms_per_step"]
    assert sum(r["phase_kernel_ms_per_step"].values()) == pytest.approx(r["busy_ms_per_step"], rel=1e-6)
    top = [k["ms_per_step"] for k in r["top_kernels"]]
    assert len(top) == 20 and top == sorted(top, reverse=True) and sum(top) <= r["busy_ms_per_step"] * (1 + 1e-9)
    assert r["kernels_per_step"] == sum(sum(c.values()) for c in r["phase_op_counts_per_step"].values())


def test_the_chrome_trace_has_every_phase(profiled):
    _, trace = profiled
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert set(profile_step.PHASES) | {"step"} <= names


def _pgd_like(backward_to_weights: bool) -> dict:
    """One "PGD iteration" of a linear model inside the pgd range: the input gradient alone, or a backward that
    also fills the weights' gradients."""
    model = nn.Linear(6, 3)
    x = torch.rand(4, 6, requires_grad=True)
    with torch.profiler.profile() as prof:
        with record_function("pgd"):
            loss = model(x).logsumexp(1).sum()
            if backward_to_weights:
                loss.backward()
            else:
                torch.autograd.grad(loss, x)
    return profile_step.summarize(prof.events(), steps=1, wall_s=1.0, pgd_iterations=1)


def test_a_weight_gradient_inside_pgd_is_flagged():
    assert _pgd_like(False)["weight_grad_in_pgd"] is False
    assert _pgd_like(True)["weight_grad_in_pgd"] is True


@pytest.mark.parametrize("intervals, busy", [
    ([], 0.0),
    ([(0, 10)], 10.0),
    ([(0, 10), (20, 25)], 15.0),  # an idle gap is not busy
    ([(0, 10), (5, 12)], 12.0),  # overlapping kernels (two streams) count once
    ([(5, 12), (0, 10), (1, 3)], 12.0),  # in any order, one inside another
    ([(0, 10), (10, 14)], 14.0),
])
def test_gpu_busy_time_is_the_union_of_the_device_intervals(intervals, busy):
    assert profile_step.busy_union_us(intervals) == busy


def test_a_cpu_profile_reports_no_gpu_busy_share(profiled):
    r, _ = profiled
    assert r["gpu_busy_share"] is None and r["gpu_busy_ms_per_step"] is None and r["device_activities_per_step"] is None


class _Range:
    def __init__(self, start, end):
        self.start, self.end = start, end

    def elapsed_us(self):
        return self.end - self.start


class _Event:  # the FunctionEvent fields summarize reads
    def __init__(self, name, device_type, start, end, annotation=False):
        self.name, self.device_type, self.is_user_annotation = name, device_type, annotation
        self.time_range, self.kernels, self.self_cpu_time_total = _Range(start, end), [], end - start


def test_a_graph_replay_counts_its_device_kernels_that_no_operator_launched():
    from torch.autograd import DeviceType
    cuda = DeviceType.CUDA
    events = [_Event("step", DeviceType.CPU, 0, 1000, annotation=True),
              _Event("step", cuda, 0, 1000, annotation=True),  # the range mirrored on the GPU: not a kernel
              _Event("conv", cuda, 100, 400), _Event("conv", cuda, 350, 500),  # overlapping: 400 us busy
              _Event("bn", cuda, 600, 700)]
    r = profile_step.summarize(events, steps=2, wall_s=1e-3, pgd_iterations=10)
    assert r["device_activities_per_step"] == 1.5
    assert r["gpu_busy_ms_per_step"] == pytest.approx(0.25) and r["gpu_busy_share"] == pytest.approx(0.5)
    assert [(k["name"], k["calls_per_step"], k["ms_per_step"]) for k in r["top_kernels"]] == [
        ("conv", 1.0, pytest.approx(0.225)), ("bn", 0.5, pytest.approx(0.05))]

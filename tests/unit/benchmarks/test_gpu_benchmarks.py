"""The arithmetic of the GPU benchmarks' reports: when a process reached full speed (benchmarks/sweep_cost.py) and
how many trials ran at once (benchmarks/gpu_sweep_report.py), on hand-made timings."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from gpu_sweep_report import max_overlap  # noqa: E402
from sweep_cost import first_full_speed  # noqa: E402


def test_full_speed_is_the_first_step_within_a_quarter_of_the_last_ten():
    # step ends: a 20 s first step (compile), two slow ones (capture, autotuning), then 0.1 s steps
    ends = [20.0, 23.0, 24.0] + [24.0 + 0.1 * i for i in range(1, 15)]
    assert first_full_speed(ends) == pytest.approx(24.1)  # the end of the first 0.1 s step
    slow_then_fast = [10.0 + 0.2 * i for i in range(5)] + [10.8 + 0.1 * i for i in range(1, 15)]
    assert first_full_speed(slow_then_fast) == pytest.approx(10.9)  # 0.2 s steps are 2x the median: not full speed
    assert first_full_speed([1.0, 2.0, 3.0]) is None  # too few steps to say


@pytest.mark.parametrize("intervals, most", [
    ([(0, 10), (1, 11), (2, 12), (3, 13)], 4),   # four packed trials, all at once
    ([(0, 10), (10, 20), (20, 30)], 1),          # one after the other (an end before a start at the same time)
    ([(0, 10), (5, 15), (12, 20), (13, 14)], 3),
    ([], 0),
])
def test_the_most_trials_at_once_comes_from_their_own_starts_and_ends(intervals, most):
    assert max_overlap(intervals) == most

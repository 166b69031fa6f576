"""benchmarks/gpu_throughput.py's arithmetic that a CPU can check: alpha-hat's three bins, whose total-variation
distance bounds graph mode against eager steps (issue 16: at most 0.05)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import gpu_throughput  # noqa: E402


def test_alpha_hat_bins_are_floor_between_and_one():
    assert gpu_throughput.alpha_bins({"adv/alpha_min_share": 0.2, "adv/alpha_one_share": 0.5}) \
        == pytest.approx((0.2, 0.3, 0.5))
    assert gpu_throughput.alpha_bins({"adv/alpha_min_share": 0.0, "adv/alpha_one_share": 1.0}) == (0.0, 0.0, 1.0)

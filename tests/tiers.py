"""Run the test tiers in order and print each one's wall time: python -m tests.tiers [unit|integration|slow ...]

A tier with no tests counts as passed (pytest's exit code 5); any other failure stops the run.
Budgets on 2 cores: unit 5 min, integration 15 min, slow 20 min.
"""
import subprocess
import sys
import time

TIERS = {"unit": ("tests/unit", 300), "integration": ("tests/integration", 900), "slow": ("tests/slow", 1200)}


def main(argv: list[str]) -> int:
    names = argv or list(TIERS)
    times = {}
    for name in names:
        path, budget = TIERS[name]
        t0 = time.perf_counter()
        rc = subprocess.call([sys.executable, "-m", "pytest", path, "-q", "-rs", "--timeout", str(budget)])
        times[name] = time.perf_counter() - t0
        print(f"== tier {name}: {times[name]:.1f} s (budget {budget} s), exit {rc}", flush=True)
        if rc not in (0, 5):
            return rc
    print("== tier times: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run the test tiers in order and print each one's wall time: python -m devtools.tiers [lint|unit|integration|slow ...]

The lint tier is ruff (pinned in the lock, configured in pyproject.toml) over the whole repository. A tier with no
tests counts as passed (pytest's exit code 5); any other failure stops the run. In CI
(CI=true) the slow tier must skip nothing: a missing prerequisite there is a failure, not a skip.
Budgets on 2 cores: unit 5 min, integration 15 min, slow 35 min (its SLURM tests: 11.9 min here, 15.8 to 19.2
min with two other sessions busy).
"""
import os
import re
import subprocess
import sys
import time

PYTEST = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"]
TIERS = {"lint": ([sys.executable, "-m", "ruff", "check", "--no-cache", "."], 60),
         "unit": ([*PYTEST, "tests/unit"], 300), "integration": ([*PYTEST, "tests/integration"], 900),
         "slow": ([*PYTEST, "tests/slow"], 2100)}


def run_tier(name: str) -> tuple[int, str]:
    cmd, _ = TIERS[name]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        out.append(line)
    return proc.wait(), "".join(out)


def main(argv: list[str]) -> int:
    names = argv or list(TIERS)
    times = {}
    for name in names:
        t0 = time.perf_counter()
        rc, out = run_tier(name)
        times[name] = time.perf_counter() - t0
        budget = TIERS[name][1]
        print(f"== tier {name}: {times[name]:.1f} s (budget {budget} s), exit {rc}", flush=True)
        if rc not in (0, 5):
            return rc
        if name == "slow" and os.environ.get("CI") == "true" and re.search(r"\b\d+ skipped\b", out):
            print("== tier slow skipped tests in CI: a prerequisite is missing (see the SKIPPED lines)")
            return 1
        if times[name] > budget:
            print(f"== tier {name} exceeded its budget of {budget} s")
    print("== tier times: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""benchmarks/teacher_steps.py runs on a CPU at its tiny size and prints its one JSON line (the numbers of a CPU
run are no measurement; only that the script works is checked)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
KEYS = {"bench", "device", "torch", "teacher_model", "precision", "steps", "warmup", "steps_per_s",
        "augment_ms_per_step", "cifar10_teacher_gpu_hours"}


def test_teacher_bench_prints_one_json_line_on_a_cpu():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "teacher_steps.py"), "--model", "cnn-small",
                           "--steps", "3", "--warmup", "1", "--device", "cpu"],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    r = json.loads(lines[0])
    assert KEYS <= set(r), KEYS - set(r)
    assert r["bench"] == "teacher" and r["device"] == "cpu" and r["teacher_model"] == "cnn-small"
    assert r["precision"] == "fp32" and (r["steps"], r["warmup"]) == (3, 1)  # auto is fp32 on a CPU
    assert r["steps_per_s"] > 0 and r["augment_ms_per_step"] > 0
    assert r["cifar10_teacher_gpu_hours"] == pytest.approx(195_000 / r["steps_per_s"] / 3600, rel=1e-9)

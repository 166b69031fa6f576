"""`python -m sweeps calibrate --device cpu`: the measuring processes of a real calibration on tiny models (a minute
or more on 2 loaded cores, hence this tier). Each figure the spec's cost needs comes back as a record the dry run
reads; --budget stops it, keeping what was measured and naming the command that measures the rest."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = "tests/data/calibrate-tiny.yaml"
TINY = ["--device", "cpu", "--steps", "2", "--teacher-warmup", "1", "--eval-n", "20", "--aa-n", "4", "--jobs", "2"]


def calibrate(tmp_path, *extra, timeout=900):
    env = {**os.environ, "SSAT_CALIBRATION_DIR": str(tmp_path / "own")}
    return subprocess.run([sys.executable, "-m", "sweeps", "calibrate", SPEC, *TINY, "--workdir", str(tmp_path / "w"),
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_every_figure_of_the_spec_is_measured_and_recorded(tmp_path):
    before = set((ROOT / "benchmarks" / "results").iterdir())
    proc = calibrate(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (f,) = (tmp_path / "own").iterdir()  # the user's calibration folder, named by device and date
    assert f.name.startswith("cpu-") and f.name.endswith("-calibrate.json")
    head, *recs = [json.loads(ln) for ln in f.read_text().splitlines()]
    assert head["device"] == "cpu" and head["calibrate"] == "calibrate-tiny"
    assert all(r["device"] == "cpu" for r in recs)
    trainers = [r for r in recs if r["bench"] == "trainer"]
    assert sorted(r["method"] for r in trainers) == ["rst", "ssat-mbi", "ssat-mbi-awr"]
    assert all(r["steps_timed"] == 2 and r["cifar10_epoch_s"] > 0 and r["mode"] == "eager" for r in trainers)
    (teacher,) = [r for r in recs if r["bench"] == "teacher"]
    assert teacher["steps"] == 2 and teacher["steps_per_s"] > 0 and teacher["compile"] == "off"
    evals = {r["attack"]: r for r in recs if r["bench"] == "eval"}
    assert set(evals) == {"clean", "pgd10", "swa-bn", "apgd-ce", "apgd-t", "fab-t", "square"}
    assert all(r["s_per_1000"] > 0 for r in evals.values())
    assert {a for a, r in evals.items() if r.get("points") == "robust"} == {"apgd-ce", "apgd-t", "fab-t", "square"}
    assert evals["square"]["timed"].startswith("100 passes per image on 4 images")
    assert "calibrate: 11 of 11 figure(s) measured" in proc.stdout
    assert "[calibrate" in proc.stdout and "measured 5/5" in proc.stdout  # progress lines
    assert "Traceback" not in proc.stdout + proc.stderr
    assert set((ROOT / "benchmarks" / "results").iterdir()) == before  # a CPU's figures never enter the repository


def test_the_budget_stops_it_and_keeps_what_was_measured(tmp_path):
    proc = calibrate(tmp_path, "--budget", "0.05")  # 3 s: the processes start, none is timed
    assert proc.returncode == 1
    assert "calibrate: 0 of 11 figure(s) measured" in proc.stdout
    assert "stopped by --budget" in proc.stdout
    assert f"the rest: python -m sweeps calibrate {SPEC} --missing-only" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr

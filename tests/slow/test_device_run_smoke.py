"""benchmarks/device_run.sh --cpu-smoke: the prepared GPU script runs every section at tiny sizes on a CPU (several
minutes on 2 loaded cores, hence this tier), so a GPU session does not find it broken: the sweep-cost sections
write the records sweeps/costs/model.py reads, and the GPU smoke sweeps run through Ray Tune with four trials at a
quarter of one (logical) GPU at once and read back complete from their MLflow store."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_device_script_runs_every_section_on_a_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"), "PY": sys.executable}
    proc = subprocess.run(["bash", "benchmarks/device_run.sh", "--cpu-smoke"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1500)
    out = tmp_path / "out"
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "device.log").read_text() == proc.stdout
    assert "Traceback" not in proc.stdout, proc.stdout[-3000:]
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    trainers = [r for r in rows if r.get("bench") == "trainer"]
    assert [t["method"] for t in trainers] == ["ssat-mbi", "ssat-mbi", "ssat-mbi-awr"]
    assert {t["mode"] for t in trainers} == {"eager"} and all(t["epoch_s"] > 0 for t in trainers)
    # (1) and (4) time a second epoch; (2), the warm start, runs one and times its first steps instead
    assert [t["cifar10_epoch_s"] is not None and t["cifar10_epoch_s"] > 0 for t in trainers] == [True, False, True]
    assert trainers[1]["first_step_s"] > 0
    assert all(t["graph_mode"] == "eager (auto): it needs a CUDA device and this run is on cpu" for t in trainers)
    evals = [r for r in rows if r.get("bench") == "eval"]
    assert {(r["attack"], r["tf32"]) for r in evals} >= {(a, t) for a in ("clean", "pgd10", "apgd-ce")
                                                         for t in (False, True)} | {("autoattack", False)}
    assert all(r["s_per_1000"] > 0 for r in evals)
    (teacher,) = [r for r in rows if r.get("bench") == "teacher"]
    assert teacher["steps_per_s"] > 0
    prof = json.loads((out / "profile.json").read_text())
    assert set(prof) == {"graph-compiled"} and (out / "step_trace.json").exists()
    sweeps = {r["sweep"]: r for r in rows if r.get("bench") == "gpu_sweep"}
    assert json.loads((out / "gpu-smoke.json").read_text())["sweep"] == "gpu-smoke"
    smoke, whole = sweeps["gpu-smoke"], sweeps["gpu-smoke-whole"]
    assert (smoke["n_trials"], smoke["max_trials_at_once"], whole["n_trials"]) == (4, 4, 1)
    for r in (smoke, whole):
        assert r["all_finished"] and r["all_epochs_logged"] and r["all_checkpoints_ok"] and r["all_protocols"]
        for t in r["trials"]:
            assert t["ray_to_first_step_s"] > 0 and len(t["epoch_s"]) == 2
            assert {"gpu", "graph_mode", "compile_cache", "cuda_memory_fraction", "mps", "fused_forward"} <= set(
                t["repro_keys"])

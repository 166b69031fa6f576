"""benchmarks/device_run.sh --cpu-smoke: the prepared GPU script runs every section at tiny sizes on a CPU (a few
minutes on 2 loaded cores, hence this tier), so a GPU session does not find it broken."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_device_script_runs_every_section_on_a_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PY": sys.executable}
    proc = subprocess.run(["bash", "benchmarks/device_run.sh", "--cpu-smoke"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "device.log").read_text() == proc.stdout
    rows = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    trainers = [r for r in rows if "trainer_model" in r]
    refused = "eager: it needs a CUDA device and this run is on cpu"
    assert [t["graph_mode"] for t in trainers] == ["off", refused, refused]
    # the fallback trains exactly as eager steps do
    assert trainers[0]["train_loss"] == trainers[1]["train_loss"] == trainers[2]["train_loss"]
    (eq,) = [r for r in rows if "equivalence_model" in r]
    assert eq["bitwise_equal"] and eq["graph_steps"] == 0 and eq["loss_rel_diff"] == 0 and eq["alpha_tv_distance"] == 0
    assert eq["within_bounds"]
    (pack,) = [r for r in rows if "packed_trials" in r]
    assert pack["finished"] == 1 and pack["total_images_per_s"] > 0
    prof = json.loads((tmp_path / "profile.json").read_text())
    assert set(prof) == {"eager", "graph"} and prof["graph"]["graph_steps"] == 0
    assert (tmp_path / "step_trace-eager.json").exists() and (tmp_path / "step_trace-graph.json").exists()

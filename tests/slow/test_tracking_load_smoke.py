"""benchmarks/tracking_load.py at its smoke size: the real callback and Tracker into a real `mlflow server` on SQLite
and on PostgreSQL, every number reported, the store read back complete."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.servers import postgres_missing, require_postgres

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_runs_at_smoke_size(tmp_path):
    stores = ["sqlite"]
    if postgres_missing() is None:
        stores.append("postgres")
    else:
        require_postgres()  # CI: a failure; elsewhere SQLite only (the skip reason is printed by the script)
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, "benchmarks/tracking_load.py", "--smoke", "--stores", *stores,
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["machine"]["cores"] and report["machine"]["cpu"] and report["machine"]["mlflow"]
    assert [r["store"] for r in report["stores"]] == stores
    for r in report["stores"]:
        e = r["epochs"]
        assert e["results"] == 9 and e["metric_values"] == 9 * 6 and e["results_per_s"] > 0
        assert e["driver_cpu_s"] > 0 and e["driver_cpu_ms_per_result"] > 0 and e["server_cpu_s"] > 0
        assert e["latency_s"]["n"] == 9 and e["latency_unseen"] == 0
        checkpoints = 2 * 1_000_000 + 2 * 2 * 100_000 + 6 * 65  # one trial's 1 MB .pt, two at 0.1 MB, the .sha256
        assert r["start"]["trials"] == 3 and r["complete"]["bytes"] == checkpoints
        assert r["readback"] == {"complete": True, "problems": [], "n_problems": 0, "runs": 4,
                                 "metric_rows": 3 * (3 * 6 + 8), "checkpoints_listed": 12}
        assert r["tracker_outages"] == 0 and r["tracker_left_queued"] == 0 and not r["spooled"]
        assert r["target_check"]["driver_cores_at_target"] > 0
    assert "read back complete" in done.stdout

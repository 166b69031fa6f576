"""Across nodes for real: a Ray head and a Ray worker, each in its own namespaces on this machine, sharing
nothing but storage_path (/srv, like an NFS mount) and the head's ports (the MLflow tracking server, GCS).

The head is 127.0.1.1, the worker 127.0.2.1 with its own host name, HOME, TMPDIR, /tmp, /dev/shm and working folder;
both nodes run clusters/slurm/ray_node.sh (the SLURM path) with token auth. A trial pinned to the worker by
the custom resource `worker_node` must run there and log its run, per-epoch metrics and checkpoints to the
head's MLflow server, where the check reads them back over HTTP (scenario two-nodes of ns_cluster.py).
"""

import pytest

from cluster_harness import explain, run_cluster_scenario

# The job: arguments after the venv's python, run in the job's working dir (a copy of the repository).
# Placeholders: {storage} (/srv/ray_results, on both nodes), {name}, {mlflow_uri}. The head offers the custom
# resource head_node=1 and the worker worker_node=1 (1 CPU each).
PAYLOAD = ["tests/slow/payloads/pinned_trials.py", "--storage-path", "{storage}", "--name", "{name}"]
# The sweep CLI instead (its CHECK must then read what it logs):
# PAYLOAD = ["-m", "sweeps", "run", "sweeps/specs/mnist5k-smoke.yaml", "--address", "auto", "--workdir", "{storage}",
#            "--tracking-uri", "{mlflow_uri}"]
# Run inside the namespace while both nodes are up: "module:function" of tests/slow, given the context.
CHECK = "checks:check_pinned_trials"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]


def test_trial_pinned_to_the_worker_logs_to_the_head(tmp_path, cluster_prerequisites, record_property):
    result = run_cluster_scenario("two-nodes", tmp_path / "scenario", PAYLOAD, CHECK, timeout=500)
    for key, seconds in result["timings"].items():
        record_property(key, round(seconds, 1))
    print(f"timings: { {k: round(v, 1) for k, v in result['timings'].items()} }")
    assert result["ok"], explain(result, tmp_path / "scenario")
    # The nodes were stopped by the PIDs the scenario started; nothing of Ray should be left to kill.
    assert result["leftovers"]["ray"] == [], result["leftovers"]
    assert result["leftovers"]["other"] == [], result["leftovers"]

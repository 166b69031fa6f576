"""Across nodes for real: a Ray head and a Ray worker, each in its own namespaces on this machine, sharing
nothing but storage_path (/srv, like an NFS mount) and the head's ports (the MLflow tracking server, GCS).

The head is 127.0.1.1, the worker 127.0.2.1 with its own host name, HOME, TMPDIR, /tmp, /dev/shm and working folder;
both nodes run clusters/slurm/ray_node.sh (the SLURM path) with token auth. The sweep CLI runs as a Ray job:
its driver (on the head) trains the one FixMatch teacher into the shared storage, then the two trials, each
needing the custom resource `node_slot` that each node offers once, run one per node; the worker's trial reads
the teacher from the shared storage, and the driver logs both runs, their per-epoch metrics and checkpoints to
the head's MLflow server, where the check reads them back over HTTP (scenario two-nodes of ns_cluster.py).
"""

import pytest

from devtools.slow.cluster_harness import assert_scenario_passed, run_cluster_scenario

# The job: arguments after the venv's python, run in the job's working dir (a copy of the repository).
# Placeholders: {storage} (/srv/ray_results, the shared folder on both nodes), {name}, {mlflow_uri}. Each node
# offers the custom resource node_slot=1 (1 CPU each; also head_node=1 / worker_node=1); every trial of
# sweeps/specs/mnist5k-two-nodes.yaml needs node_slot=1, so its 2 trials (one split, 2 seeds) run on 2 nodes.
PAYLOAD = ["-m", "sweeps", "run", "sweeps/specs/mnist5k-two-nodes.yaml", "--address", "auto", "--name", "{name}",
           "--workdir", "{storage}", "--tracking-uri", "{mlflow_uri}"]
# Run inside the namespace while both nodes are up: "module:function" of tests/slow, given the context.
CHECK = "checks:check_sweep_on_two_nodes"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]


def test_sweep_across_two_nodes_shares_one_teacher(tmp_path, cluster_prerequisites, record_property):
    result = run_cluster_scenario("two-nodes", tmp_path / "scenario", PAYLOAD, CHECK, timeout=500)
    # The nodes were stopped by the PIDs the scenario started; nothing of Ray should be left to kill.
    assert_scenario_passed(result, tmp_path / "scenario", record_property)

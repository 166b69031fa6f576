"""`ray up` for real: clusters/local.yaml brings a head up over ssh (sshd on 127.0.0.1 only), the sweep CLI
(sweeps/specs/mnist5k-cluster.yaml: teacher stage, 2 trials x 2 epochs) is submitted with `ray job submit`
and finishes, its runs are read back from the head's MLflow server over HTTP, `ray down` tears it down,
leftovers are killed by PID.

All of it runs in its own PID/network/mount/UTS namespaces (devtools/slow/ns_cluster.py, scenario ray-up):
`ray down` runs `ray stop`, which stops every Ray process it can see.
"""

import pytest

from devtools.slow.cluster_harness import assert_scenario_passed, run_cluster_scenario

# The job: arguments after the venv's python, run in the job's working dir (a copy of the repository).
# Placeholders: {storage} (the shared folder, /mnt/runs/ray_results), {name}, {mlflow_uri}, {data_root}.
# The sweep CLI as docs/clusters.md submits it; --data-root is left to the node's SSAT_DATA_ROOT (setup_node.sh).
PAYLOAD = ["-m", "sweeps", "run", "sweeps/specs/mnist5k-cluster.yaml", "--address", "auto", "--name", "{name}",
           "--workdir", "{storage}", "--tracking-uri", "{mlflow_uri}"]
# Run inside the namespace while the cluster is up: "module:function" of tests/slow, given the context.
CHECK = "checks:check_sweep_on_ray_up"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]


def test_ray_up_job_submit_ray_down(tmp_path, cluster_prerequisites, record_property):
    result = run_cluster_scenario("ray-up", tmp_path / "scenario", PAYLOAD, CHECK, timeout=500)
    # `ray down` ran `ray stop` in the head's login shell: with the venv on the login PATH it stopped every
    # Ray process. Only sshd (ours) and the MLflow server (the local provider has no teardown hook) remain.
    assert_scenario_passed(result, tmp_path / "scenario", record_property)
    assert "ray_down_error" not in result, result["ray_down_error"]

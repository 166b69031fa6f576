"""Every fault of the reliability issue on a real two-node Ray cluster (head + worker, each in its own
namespaces on this machine, sharing only /srv and the head's ports; ns_cluster.py, scenario node-faults) with a
real MLflow server on the head. One sweep of 3 trials (seeds 0, 1, 2), 3 epochs:

- the worker NODE dies mid-epoch (SIGKILL to its whole PID namespace while its trial is paused one optimiser
  step into epoch 2): Tune restarts that trial on the head from its last checkpoint in the shared storage;
- the tracking server is away from that moment on, and the sweep's driver is SIGKILLed while it is away
  (what it queued exists only in its on-disk journal); the server comes back, `sweeps resume` finishes;
- on the head, every trial process that reaches step 1 of epoch 3 dies (exit@3:1, once per run);
- seed 1 raises at the start of epoch 3 (once): retried from its checkpoint;
- seed 2's loss becomes NaN in epoch 2: it stops with the reason, in Ray and in MLflow; the others go on.
Nothing may be lost: seeds 0 and 1 each have exactly one FINISHED run with one value per epoch and no gap,
their per-epoch metrics equal an uninterrupted run of their configuration (threads pinned to 1), seed 2 has
one FAILED run with the reason and its one epoch, and no tracking operation is left unsent.
"""

import pytest

from devtools.slow.cluster_harness import assert_scenario_passed, run_cluster_scenario

# Placeholders: {storage} (/srv/ray_results, shared by both nodes), {name}, {mlflow_uri}. Every trial needs
# node_slot=1, which each node offers once: two trials at a time, one per node (3 epochs: --epochs scales t).
PAYLOAD = ["-m", "sweeps", "run", "sweeps/specs/mnist5k-two-nodes.yaml", "--epochs", "3", "--seeds", "0", "1", "2",
           "--address", "auto", "--name", "{name}", "--workdir", "{storage}", "--tracking-uri", "{mlflow_uri}",
           "--max-failures", "4"]
RESUME = ["-m", "sweeps", "resume", "{name}", "--workdir", "{storage}", "--address", "auto"]
# Each fault but nan fires once per run (markers in the shared SSAT_FAULT_ONCE_DIR, which the scenario watches).
FAULTS = {"SSAT_FAULT": "pause@2:1/node=ssat-worker,exit@3:1/node=ssat-head,raise@3/seed=1,nan@2/seed=2",
          "SSAT_FAULT_ONCE_DIR": "/srv/faults"}
CHECK = "checks:check_sweep_survived_node_faults"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_node_death_driver_kill_and_tracking_outage_lose_nothing(tmp_path, cluster_prerequisites, record_property):
    result = run_cluster_scenario("node-faults", tmp_path / "scenario", PAYLOAD, CHECK, timeout=850,
                                  job_env=FAULTS, resume_payload=RESUME)
    assert_scenario_passed(result, tmp_path / "scenario", record_property)

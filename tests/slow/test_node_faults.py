"""Faults on a real two-node Ray cluster (head + worker, each in its own namespaces on this machine, sharing
only /srv and the head's ports; see ns_cluster.py, scenario node-faults), with a real MLflow server:

- the worker NODE dies mid-epoch (SIGKILL to its whole PID namespace while its trial is paused one optimiser
  step into epoch 2): Tune restarts the trial on the head from its last checkpoint in the shared storage;
- the tracking server is away from that moment on, and the sweep's driver is SIGKILLed while it is away
  (its queued operations exist only in its on-disk journal);
- on the head, a trial process dies mid-epoch 3 (exit@3:1): restarted from its checkpoint;
- the tracking server comes back and `python -m sweeps resume` finishes the sweep.
Nothing may be lost: every (configuration, seed) has exactly one FINISHED run with one value per epoch and
no gap, and its per-epoch metrics equal an uninterrupted run of its configuration (threads pinned to 1).
"""

import pytest

from cluster_harness import explain, run_cluster_scenario

# Placeholders: {storage} (/srv/ray_results, shared by both nodes), {name}, {mlflow_uri}. The spec's 2 trials
# each need node_slot=1, which each node offers once: one trial per node. 3 epochs (--epochs scales t).
PAYLOAD = ["-m", "sweeps", "run", "sweeps/specs/mnist5k-two-nodes.yaml", "--epochs", "3", "--address", "auto",
           "--name", "{name}", "--workdir", "{storage}", "--tracking-uri", "{mlflow_uri}", "--max-failures", "3"]
RESUME = ["-m", "sweeps", "resume", "{name}", "--workdir", "{storage}", "--address", "auto"]
# Each fault fires once per run (markers in the shared SSAT_FAULT_ONCE_DIR, which the scenario watches).
FAULTS = {"SSAT_FAULT": "pause@2:1/node=ssat-worker,exit@3:1/node=ssat-head",
          "SSAT_FAULT_ONCE_DIR": "/srv/faults"}
CHECK = "checks:check_sweep_survived_node_faults"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_node_death_driver_kill_and_tracking_outage_lose_nothing(tmp_path, cluster_prerequisites, record_property):
    result = run_cluster_scenario("node-faults", tmp_path / "scenario", PAYLOAD, CHECK, timeout=850,
                                  job_env=FAULTS, resume_payload=RESUME)
    for key, seconds in result["timings"].items():
        record_property(key, round(seconds, 1))
    print(f"timings: { {k: round(v, 1) for k, v in result['timings'].items()} }")
    assert result["ok"], explain(result, tmp_path / "scenario")
    assert result["leftovers"]["ray"] == [], result["leftovers"]
    assert result["leftovers"]["other"] == [], result["leftovers"]

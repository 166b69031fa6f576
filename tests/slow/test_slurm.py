"""SLURM for real: a controller, two compute nodes in their own network namespaces and munge, all on this machine
(devtools/slow/ns_slurm.py), and sweeps submitted as docs/clusters.md says, `sbatch clusters/slurm/ray_sweep.sbatch
run|resume ...`, with one CPU and one logical GPU per node. The spec (sweeps/specs/mnist5k-slurm.yaml) has 2
trials of 1 CPU: with both running, one runs on each node. Fault injection (SSAT_FAULT, passed on by sbatch to
every step) pauses or holds the trials where a test acts, so what SLURM does lands at the same point of the sweep
on any machine.

- time limit: the job's time limit cuts the sweep in epochs 2 and 3; each time the job stops it (SIGUSR1 from
  the template's --signal), requeues itself, and its next run resumes the sweep; the third run finishes it, and
  the job is not requeued again. Every epoch of every trial once, equal to an uninterrupted run.
- preemption and cancellation: `scontrol requeue` of the running job, then `scancel` (nothing left RUNNING in
  MLflow), then `sbatch ... resume`, during which a node dies: its trial is retried on the other node, the job
  goes on, every epoch of every trial once.
After each, the runs are read and analysed from the login node.
"""

import pytest

from devtools.slow.cluster_harness import assert_scenario_passed, run_cluster_scenario

# The template's arguments (after `sbatch SITE-OPTIONS clusters/slurm/ray_sweep.sbatch`); {name} is the sweep's.
RUN = ["run", "sweeps/specs/mnist5k-slurm.yaml", "--name", "{name}"]
ONCE = "/srv/ssat/faults"

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(1000)
def test_a_sweep_cut_by_its_time_limit_twice_finishes_in_the_third_run(tmp_path, slurm_prerequisites,
                                                                        record_property):
    job_env = {"SSAT_FAULT": "pause@2:1,pause@3:1", "SSAT_FAULT_ONCE_DIR": ONCE}
    result = run_cluster_scenario("slurm-time-limit", tmp_path / "scenario", [*RUN, "--epochs", "3"],
                                  "checks:check_sweep_cut_by_time_limit", timeout=960, job_env=job_env)
    assert_scenario_passed(result, tmp_path / "scenario", record_property)


@pytest.mark.timeout(1000)
def test_a_requeued_then_cancelled_sweep_resumes_and_survives_a_dead_node(tmp_path, slurm_prerequisites,
                                                                          record_property):
    job_env = {"SSAT_FAULT": "pause@2:1,pause@3:1,hold@4:0", "SSAT_FAULT_ONCE_DIR": ONCE}
    result = run_cluster_scenario("slurm-preempt", tmp_path / "scenario", [*RUN, "--epochs", "4"],
                                  "checks:check_sweep_requeued_cancelled_resumed", timeout=960, job_env=job_env,
                                  resume_payload=["resume", "{name}"])
    assert_scenario_passed(result, tmp_path / "scenario", record_property)

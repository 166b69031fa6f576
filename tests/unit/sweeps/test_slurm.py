"""sweeps/slurm.py, what the SLURM template asks before Ray starts and after SLURM ends a job: Ray's share of a
node read from SLURM's variables, the allocation checked against one trial of the spec (both numbers named),
what a job does with its sweep (run, resume after a requeue, nothing when finished), and `settle` after a
SIGTERM: the driver stopped (SIGINT, SIGKILL after the grace), nothing left RUNNING in a real MLflow store, the
sweep incomplete and its lock released. The process-level scenarios are in tests/slow/test_slurm.py."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import sweeps.driver.sweep as D
from sweeps.driver.interrupt import ended_by_slurm
from sweeps.spec import read_yaml
from sweeps import slurm
from sweeps.driver.lock import LOCK_FILE, Host, LockInfo, proc_start_ticks
from sweeps.errors import SweepError
from sweeps.tracking.tracker import Tracker

SPEC = """\
name: s
preset: mnist5k-ssat-mbi
seeds: [0, 1]
resources: {cpu: 2, gpu: 0.5}
grid:
  - {row: a, set: {method.beta: 0.5}}
"""
FITS = {"SLURM_CPUS_PER_TASK": "4", "SLURM_GPUS_PER_TASK": "1"}


# --- Ray's share of each node ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value,count", [("4", 4), ("a100:4", 4), ("gpu:a100:4", 4), ("a100:2,v100:1", 3), ("0", 0)])
def test_a_slurm_count_with_or_without_types(value, count):
    assert slurm.slurm_count("SLURM_GPUS_PER_TASK", value) == count


@pytest.mark.parametrize("value", ["a100:x", "", "four", "a100:-1"])
def test_a_count_that_is_not_one_is_named(value):
    with pytest.raises(SweepError, match=f"SLURM_GPUS_PER_NODE={value!r}"):
        slurm.slurm_count("SLURM_GPUS_PER_NODE", value)


@pytest.mark.parametrize("env,share", [
    ({"SLURM_CPUS_PER_TASK": "16", "SLURM_CPUS_ON_NODE": "32", "SLURM_GPUS_PER_TASK": "4", "SLURM_GPUS_ON_NODE": "8"},
     (16, 4, "SLURM_CPUS_PER_TASK=16", "SLURM_GPUS_PER_TASK=4")),
    ({"SLURM_CPUS_ON_NODE": "8", "SLURM_GPUS_PER_NODE": "a100:2"},
     (8, 2, "SLURM_CPUS_ON_NODE=8", "SLURM_GPUS_PER_NODE=a100:2")),
    ({"SLURM_CPUS_ON_NODE": "8", "SLURM_GPUS_ON_NODE": "2"}, (8, 2, "SLURM_CPUS_ON_NODE=8", "SLURM_GPUS_ON_NODE=2")),
    ({"SLURM_CPUS_PER_TASK": "2", "SLURM_JOB_NODELIST": "n[1-2]"}, (2, 0, "SLURM_CPUS_PER_TASK=2", "no GPU requested")),
])
def test_the_share_of_a_node_follows_what_the_job_asked_for(env, share):
    got = slurm.node_share(env)
    assert (got.cpus, got.gpus, got.cpus_from, got.gpus_from) == share


def test_outside_an_allocation_there_is_no_share():
    with pytest.raises(SweepError, match="none of SLURM_CPUS_PER_TASK, SLURM_CPUS_ON_NODE is set: not inside a SLURM"):
        slurm.node_share({"SLURM_GPUS_PER_TASK": "1"})


# --- one trial against a node --------------------------------------------------------------------------------

def test_a_trial_that_fits_a_node_passes():
    share = slurm.NodeShare(4, 1, "SLURM_CPUS_PER_TASK=4", "SLURM_GPUS_PER_TASK=1")
    assert slurm.misfits({"cpu": 4, "gpu": 1}, share) == []
    assert slurm.misfits({"cpu": 0.5, "gpu": 0}, slurm.NodeShare(1, 0, "c", "no GPU requested")) == []


def test_too_few_cpus_or_gpus_per_node_name_both_numbers():
    share = slurm.NodeShare(1, 0, "SLURM_CPUS_PER_TASK=1", "no GPU requested")
    cpu, gpu = slurm.misfits({"cpu": 2.5, "gpu": 0.25}, share)
    assert cpu == ("resources.cpu = 2.5 per trial, but each node of this allocation gives Ray 1 CPU(s) "
                   "(SLURM_CPUS_PER_TASK=1): ask for at least 3 with `#SBATCH --cpus-per-task` in "
                   "clusters/slurm/ray_sweep.sbatch, or lower resources.cpu in the spec")
    assert gpu == ("resources.gpu = 0.25 per trial, but each node of this allocation gives Ray 0 GPU(s) "
                   "(no GPU requested): ask for GPUs with `#SBATCH --gpus-per-task` in "
                   "clusters/slurm/ray_sweep.sbatch, or add --cpu-only to train on CPUs")


def test_custom_resources_never_fit_the_templates_nodes():
    share = slurm.NodeShare(4, 1, "c", "g")
    assert slurm.misfits({"cpu": 1, "gpu": 0, "custom_resources": {"node_slot": 1}}, share) == [
        "resources.custom = {'node_slot': 1}: the template's Ray nodes offer no custom resources, so no trial could "
        "start; remove resources.custom from the spec"]


# --- what a job does with its sweep ---------------------------------------------------------------------------

@pytest.fixture
def work(tmp_path, monkeypatch):
    (tmp_path / "s.yaml").write_text(SPEC)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def save_state(work: Path, status: str, tracking_uri: str = "sqlite:///x.db") -> D.SweepState:
    state = D.SweepState(name="s", spec_path=str(work / "s.yaml"), source=read_yaml(work / "s.yaml"),
                         tracking_uri=tracking_uri, args=D.RunArgs(), status=status)
    state.save(D.sweep_paths(work, "s"))
    return state


def plan(work: Path, *argv: str, **env: str) -> slurm.Plan:
    return slurm.plan(list(argv), work, {**FITS, **env}, log=lambda line: None)


def test_a_new_sweep_runs_and_its_line_gives_the_template_what_it_reads(work):
    got = plan(work, "run", "s.yaml")
    assert (got.sweep, got.action) == ("s", "run")
    assert got.line() == "s run 4 1"
    assert plan(work, "run", "s.yaml", "--name", "other").line() == "other run 4 1"
    assert list(work.iterdir()) == [work / "s.yaml"]  # planning writes nothing


def test_a_requeued_job_resumes_the_sweep_its_first_run_started(work):
    assert plan(work, "run", "s.yaml", SLURM_RESTART_COUNT="1").action == "run"  # cut before the sweep began
    save_state(work, "incomplete")
    assert plan(work, "run", "s.yaml", SLURM_RESTART_COUNT="2").action == "resume"
    assert plan(work, "run", "s.yaml").action == "run"  # a new submission: the CLI refuses it, saying why
    assert plan(work, "resume", "s").action == "resume"


def test_a_finished_sweep_is_not_run_again(work):
    save_state(work, "done")
    assert plan(work, "run", "s.yaml", SLURM_RESTART_COUNT="1").action == "finished"
    assert plan(work, "resume", "s").action == "finished"
    with pytest.raises(SweepError, match="sweep s is already finished .*nothing was run"):
        plan(work, "run", "s.yaml")  # submitted anew: the CLI's refusal, before any server starts


def test_an_allocation_too_small_for_one_trial_is_refused_before_anything_starts(work):
    with pytest.raises(SweepError) as err:
        plan(work, "run", "s.yaml", SLURM_CPUS_PER_TASK="1", SLURM_GPUS_PER_TASK="0")
    assert str(err.value).startswith("this allocation cannot run sweep s: resources.cpu = 2 per trial, but each node "
                                     "of this allocation gives Ray 1 CPU(s) (SLURM_CPUS_PER_TASK=1)")
    assert "resources.gpu = 0.5 per trial, but each node of this allocation gives Ray 0 GPU(s)" in str(err.value)
    assert plan(work, "run", "s.yaml", "--cpu-only", SLURM_GPUS_PER_TASK="0").action == "run"  # no GPU share left
    save_state(work, "incomplete")
    with pytest.raises(SweepError, match="resources.cpu = 2 per trial"):
        plan(work, "resume", "s", SLURM_CPUS_PER_TASK="1")  # the spec as it was run


def test_spec_and_option_errors_are_the_clis(work, capsys, monkeypatch):
    with pytest.raises(SweepError, match="usage: sbatch clusters/slurm/ray_sweep.sbatch run SPEC"):
        plan(work, "status", "s")
    with pytest.raises(SweepError, match="no sweep named 's'"):
        plan(work, "resume", "s")
    for var, value in FITS.items():
        monkeypatch.setenv(var, value)
    assert slurm.main(["plan", "--workdir", str(work), "--", "run", "s.yaml", "--set", "method.bta=1"]) == 2
    assert "method.bta" in capsys.readouterr().err


# --- settle: after SLURM's SIGTERM ------------------------------------------------------------------------------

def started_sweep(work: Path, uri: str) -> None:
    """A sweep cut mid-stage: its state says a driver runs it, its run and a trial's run are RUNNING in the store,
    and its trial's run has logged epoch 1 (`ensure` and `epoch` in the tracker, as the driver would)."""
    save_state(work, "running", uri)
    t = Tracker(uri, "s", log=lambda line: None)
    t.ensure_run("s-sweep", {"ssat.kind": "sweep"}, name="s")
    t.ensure_run("s-trial", {"ssat.kind": "trial"}, name="a-seed0")
    t.log_epoch("s-trial", {"val/pgd10": 0.5}, 1)
    assert t.drain()


def hold_lock(work: Path, proc: subprocess.Popen) -> None:
    """`proc` holds the sweep's driver.lock as a live driver of this host would."""
    here, path = Host.here(), D.sweep_paths(work, "s").sweep_dir / LOCK_FILE
    for _ in range(50):  # its start time is readable once it runs
        if proc_start_ticks(proc.pid) is not None:
            break
        time.sleep(0.1)
    path.write_bytes(LockInfo(proc.pid, here.name, here.boot_id, proc_start_ticks(proc.pid), time.time(), time.time(),
                              "python -m sweeps run s.yaml", "t").to_json())


def runs_by_key(uri: str) -> dict:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("s")
    return {r.data.tags["ssat.key"]: r for r in client.search_runs([exp.experiment_id])}


@pytest.mark.parametrize("ignores_sigint", [False, True])
def test_settle_stops_the_driver_and_leaves_nothing_running(work, store, capsys, ignores_sigint):  # noqa: F811
    started_sweep(work, store)
    # The stand-in driver copies the cause settle wrote for it (stop_cause) when Ctrl+C comes, then dies of it.
    code = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(300)" if ignores_sigint \
        else ("import os, signal, sys, time\n"
              "def on_int(signum, frame):\n"
              "    open(sys.argv[2], 'w').write(open(sys.argv[1]).read())\n"
              "    signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
              "    os.kill(os.getpid(), signal.SIGINT)\n"
              "signal.signal(signal.SIGINT, on_int)\n"
              "time.sleep(300)\n")
    cause_file, seen = D.sweep_paths(work, "s").stop_cause, work / "seen_cause"
    driver = subprocess.Popen([sys.executable, "-c", code, str(cause_file), str(seen)])
    try:
        time.sleep(0.5)  # its SIGINT handler is in place
        hold_lock(work, driver)
        assert slurm.settle("s", work, "SLURM ended job 7", grace=1.0) == 0
        assert driver.wait(timeout=5) == -(signal.SIGKILL if ignores_sigint else signal.SIGINT)
    finally:
        driver.kill()
    resume = f"python -m sweeps resume s --workdir {work}"
    for key, run in runs_by_key(store).items():
        assert run.info.status == "KILLED", key
        assert run.data.tags["ssat.status"] == f"KILLED: SLURM ended job 7; resume with: {resume}", key
    assert json.loads(D.sweep_paths(work, "s").state.read_text())["status"] == "incomplete"
    assert not (D.sweep_paths(work, "s").sweep_dir / LOCK_FILE).exists()
    out = capsys.readouterr().out
    assert f"sweep s stopped (SLURM ended job 7); no run of it is RUNNING. Resume with:\n  {resume}" in out
    assert ("did not stop within 1 s: killed" in out) == ignores_sigint
    assert not cause_file.exists()  # removed once the driver is gone: a later Ctrl+C is not named SLURM's
    if not ignores_sigint:
        assert seen.read_text() == "SLURM ended job 7\n"


def test_settle_keeps_what_the_driver_ended_and_sends_what_it_left_unsent(work, store):  # noqa: F811
    started_sweep(work, store)
    t = Tracker(store, "s", log=lambda line: None)
    t.kill("s-trial", {"ssat.status": "KILLED: interrupted (Ctrl+C) in epoch 2"})
    assert t.drain()
    # A driver killed before it could send its last epoch: the operation is in its journal only.
    journal = D.sweep_paths(work, "s").sweep_dir / "tracking_spool.gone-host.4242.0.jsonl"
    journal.write_text(json.dumps({"op": "epoch", "key": "s-trial", "metrics": {"val/pgd10": 0.25}, "step": 2,
                                   "ts": 1}) + "\n")
    assert slurm.settle("s", work, "the time limit of SLURM job 7", grace=0) == 0
    got = runs_by_key(store)
    assert got["s-trial"].data.tags["ssat.status"] == "KILLED: interrupted (Ctrl+C) in epoch 2"
    assert got["s-sweep"].info.status == "KILLED"
    history = MlflowClient(store).get_metric_history(got["s-trial"].info.run_id, "val/pgd10")
    assert sorted(m.step for m in history) == [1, 2] and not journal.exists()


def test_settle_of_a_finished_or_unstarted_sweep_changes_nothing(work, store, capsys):  # noqa: F811
    assert slurm.settle("s", work, "x") == 0
    assert "sweep s was not started; nothing to settle" in capsys.readouterr().out
    started_sweep(work, store)
    state = D.SweepState.load(D.sweep_paths(work, "s"))
    state.status = "done"
    state.save(D.sweep_paths(work, "s"))
    assert slurm.settle("s", work, "x") == 0
    assert {k: r.info.status for k, r in runs_by_key(store).items()} == {"s-sweep": "RUNNING", "s-trial": "RUNNING"}


def test_settle_of_a_sweep_stopped_before_it_logged_anything_queues_nothing(work, store, capsys):  # noqa: F811
    save_state(work, "running", store)  # the driver wrote its state, then was stopped before its first run
    assert slurm.settle("s", work, "SLURM ended job 7", grace=0) == 0
    sweep_dir = D.sweep_paths(work, "s").sweep_dir
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["sweep.json"]  # no spool, no journal, no lock
    assert json.loads((sweep_dir / "sweep.json").read_text())["status"] == "incomplete"
    assert "no run of it is RUNNING" in capsys.readouterr().out


def test_settle_never_signals_a_driver_of_another_host(work, store):  # noqa: F811
    started_sweep(work, store)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        here, path = Host.here(), D.sweep_paths(work, "s").sweep_dir / LOCK_FILE
        path.write_bytes(LockInfo(bystander.pid, "another-host", here.boot_id, proc_start_ticks(bystander.pid),
                                  time.time(), time.time(), "python -m sweeps run s.yaml", "t").to_json())
        with pytest.raises(SweepError, match="already has a driver: pid .* on host another-host"):
            slurm.settle("s", work, "SLURM ended job 7", grace=0)
        assert bystander.poll() is None  # the same pid here is another process: left alone
    finally:
        bystander.kill()
    assert {k: r.info.status for k, r in runs_by_key(store).items()} == {"s-sweep": "RUNNING", "s-trial": "RUNNING"}


def test_a_killed_driver_is_waited_for_until_its_lock_is_free(tmp_path, monkeypatch):
    """SIGKILL is not instant: a driver on a loaded node still holds its lock for a moment after it, and settling
    then would find "a driver" and refuse (seen in the slow tier's preemption scenario). _stop_driver returns
    only once the lock has no live holder."""
    from types import SimpleNamespace

    here = Host.here()
    lock = SimpleNamespace(pid=4242, host=here.name, boot_id=here.boot_id, start_ticks=1)
    # live through the grace (2 polls), then 3 more polls after the SIGKILL, then gone
    verdicts = iter([True] * 5 + [False])
    polls, signals = [], []
    monkeypatch.setattr(slurm, "inspect", lambda d: (polls.append(1), (lock, SimpleNamespace(live=next(verdicts))))[1])
    monkeypatch.setattr(slurm, "signal_holder", lambda lk, sig: signals.append(sig) or True)
    monkeypatch.setattr(slurm.time, "sleep", lambda s: None)
    clock = iter(range(100))
    monkeypatch.setattr(slurm.time, "monotonic", lambda: next(clock) * 0.5)
    lines = []
    slurm._stop_driver(tmp_path, 1.0, lines.append)
    assert signals == [signal.SIGINT, signal.SIGKILL]
    assert lines == ["[slurm] the sweep's driver (pid 4242) did not stop within 1 s: killed"]
    assert len(polls) == 6  # the first (live) inspection, then polls until the lock was free


def test_the_template_settles_a_sigterm_with_the_cause_the_driver_names():
    """The driver names a SIGTERM inside a SLURM job with ended_by_slurm before settle's stop_cause exists: the
    template's settle must write the same words, so every run's reason reads alike whoever ended it."""
    template = (Path(__file__).resolve().parents[3] / slurm.TEMPLATE).read_text()
    assert f'--why "{ended_by_slurm("$job")}"' in template

"""Assertions of the slow cluster tests, run INSIDE the test's namespaces while the cluster is still up.

ns_cluster.py calls CHECK(context) after the payload's job finished; the test file names CHECK as
"module:function" (a module of this folder). The context holds:
    kind, name, storage (the sweep CLI's --workdir on shared storage), data_root, mlflow_uri, head_home,
    job_output, payload_result (the payload's `PAYLOAD_RESULT {json}` line, or None)
and, for two-nodes: head_ip, worker_ip, head_hostname, worker_hostname, worker_home (as the worker sees it),
worker_home_seen_from_head, worker_tmp_seen_from_head, head_tmp.
Everything MLflow is read through the tracking server's HTTP API (what a laptop behind a tunnel sees); what
the sweep left in storage is read from the file system the head mounts. The layout of the runs is the
contract of docs/tracking.md.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from analysis.record import HISTORY_PREFIXES

REQUIRED_EPOCH_METRICS = ("train/loss", "train/ce", "val/clean", "val/pgd10", "sched/eps_max", "sched/rho",
                          "sched/lr", "perf/epoch_seconds")
CHECKPOINT_ARTIFACTS = ["checkpoints/best.pt", "checkpoints/best.pt.sha256", "checkpoints/last.pt",
                        "checkpoints/last.pt.sha256"]


# --- the MLflow server's HTTP API ---------------------------------------------------------------------------

def _http(uri: str, endpoint: str, body: dict | None = None, **params) -> bytes:
    url = uri.rstrip("/") + endpoint + ("?" + urllib.parse.urlencode(params) if params else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return reply.read()


def host_header_refused(uri: str, host: str) -> bool:
    """True when the server answers 403 to a request carrying a Host header it does not allow."""
    request = urllib.request.Request(uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1",
                                     headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=15):
            return False
    except urllib.error.HTTPError as err:
        return err.code == 403


def mlflow_runs(uri: str, experiment: str) -> list[dict]:
    found = json.loads(_http(uri, "/api/2.0/mlflow/experiments/get-by-name", experiment_name=experiment))
    exp_id = found["experiment"]["experiment_id"]
    runs, token = [], None
    while True:
        body = {"experiment_ids": [exp_id], "max_results": 100, **({"page_token": token} if token else {})}
        reply = json.loads(_http(uri, "/api/2.0/mlflow/runs/search", body))
        runs += reply.get("runs", [])
        token = reply.get("next_page_token")
        if not token:
            return runs


def tags_of(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def params_of(run: dict) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def metric_keys(run: dict) -> list[str]:
    return sorted(m["key"] for m in run["data"].get("metrics", []))


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    reply = json.loads(_http(uri, "/api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key=key))
    return sorted((int(m["step"]), float(m["value"])) for m in reply.get("metrics", []))


def artifact_files(uri: str, run_id: str, path: str = "") -> list[str]:
    reply = json.loads(_http(uri, "/api/2.0/mlflow/artifacts/list", run_id=run_id,
                             **({"path": path} if path else {})))
    return sorted(f["path"] for f in reply.get("files", []))


def artifact_bytes(uri: str, run_id: str, path: str) -> bytes:
    return _http(uri, "/get-artifact", path=path, run_uuid=run_id)


# --- a sweep as the MLflow server holds it (docs/tracking.md) -------------------------------------------------

def sweep_runs(uri: str, experiment: str, trials: int) -> tuple[dict, dict, list[dict]]:
    """(parent run, teacher run, trial runs) of the sweep's experiment: one of each kind but trials, nothing else."""
    runs = mlflow_runs(uri, experiment)
    by_kind: dict[str, list[dict]] = {}
    for run in runs:
        by_kind.setdefault(tags_of(run).get("ssat.kind", "?"), []).append(run)
    summary = {kind: [r["info"]["run_name"] for r in group] for kind, group in by_kind.items()}
    assert sorted(by_kind) == ["sweep", "teacher", "trial"], summary
    assert len(by_kind["sweep"]) == 1 and len(by_kind["teacher"]) == 1, summary
    assert len(by_kind["trial"]) == trials, summary
    parent, teacher = by_kind["sweep"][0], by_kind["teacher"][0]
    for run in (parent, teacher):
        assert run["info"]["status"] == "FINISHED", run["info"]
    assert tags_of(parent).get("ssat.status") == "FINISHED", tags_of(parent)
    teacher_tags = tags_of(teacher)
    assert teacher_tags.get("ssat.status") == "FINISHED" and teacher_tags.get("ssat.row") == "FixMatch", teacher_tags
    assert any(k.startswith("test/teacher/") for k in metric_keys(teacher)), metric_keys(teacher)
    keys = [tags_of(r).get("ssat.key") for r in by_kind["trial"]]
    assert len(set(keys)) == trials and None not in keys, keys  # one child run per trial, found by its key
    return parent, teacher, by_kind["trial"]


def assert_trial_run(uri: str, run: dict, *, epochs: int, parent_id: str, teacher_id: str) -> str:
    """One trial's child run: FINISHED, every per-epoch metric with exactly one value per epoch (steps
    1..epochs), the final test metrics, the checkpoints, config and log retrievable (checkpoints matching their
    sha256 sidecars). Returns the trial's log (the trial.log artifact)."""
    run_id, tags = run["info"]["run_id"], tags_of(run)
    where = f"run {run['info']['run_name']} ({run_id})"
    assert run["info"]["status"] == "FINISHED", (where, run["info"])
    assert tags.get("ssat.status") == "FINISHED", (where, tags.get("ssat.status"))
    assert tags.get("mlflow.parentRunId") == parent_id, (where, tags.get("mlflow.parentRunId"), parent_id)
    assert tags.get("repro.teacher_run_id") == teacher_id, (where, tags.get("repro.teacher_run_id"), teacher_id)
    assert tags.get("repro.node"), (where, "no repro.node tag")
    assert params_of(run).get("optim.epochs") == str(epochs), (where, params_of(run).get("optim.epochs"))

    keys = metric_keys(run)
    per_epoch = [k for k in keys if k.startswith(HISTORY_PREFIXES)]
    missing = [k for k in REQUIRED_EPOCH_METRICS if k not in per_epoch]
    assert not missing, (where, "per-epoch metrics missing", missing, keys)
    for key in per_epoch:
        steps = [step for step, _ in metric_history(uri, run_id, key)]
        assert steps == list(range(1, epochs + 1)), (where, key, steps)
    for ckpt in ("best", "last"):
        assert f"test/{ckpt}/pgd10" in keys and f"protocol/{ckpt}/pgd10" in tags, (where, ckpt, keys)

    root = artifact_files(uri, run_id)
    assert {"checkpoints", "config.json", "trial.log"} <= set(root), (where, root)
    assert artifact_files(uri, run_id, "checkpoints") == CHECKPOINT_ARTIFACTS, (
        where, artifact_files(uri, run_id, "checkpoints"))
    for name in ("best.pt", "last.pt"):
        blob = artifact_bytes(uri, run_id, f"checkpoints/{name}")
        want = artifact_bytes(uri, run_id, f"checkpoints/{name}.sha256").decode().split()[0]
        assert blob and hashlib.sha256(blob).hexdigest() == want, (where, name, len(blob))
    config = json.loads(artifact_bytes(uri, run_id, "config.json"))
    assert config["optim"]["epochs"] == epochs and config["seed"] == int(tags["ssat.seed"]), (where, config["seed"])
    return artifact_bytes(uri, run_id, "trial.log").decode(errors="replace")


def assert_teacher_made_once_on_the_driver(context: dict, trial_logs: list[str]) -> Path:
    """Exactly one teacher file under the shared storage's runs/teachers/, trained once by the driver (the
    job's output says it stored it, once) and only read by the trials (each trial's log says `cached`)."""
    teachers = sorted((Path(context["storage"]) / "runs" / "teachers").rglob("teacher.pt"))
    assert len(teachers) == 1, teachers
    stored = re.findall(r"^teacher: stored (\S+)$", context["job_output"], flags=re.M)
    assert stored == [str(teachers[0])], ("the driver did not train the teacher exactly once", stored)
    for log in trial_logs:
        assert f"teacher: cached {teachers[0]}" in log and "teacher: stored" not in log, log[:2000]
    return teachers[0]


def assert_sweep_in_storage(context: dict, trials: int, epochs: int) -> dict:
    """The sweep's state says done and points at the tracking server; Tune's storage_path (below the shared
    --workdir) holds every trial with its last checkpoint (best.pt, last.pt)."""
    sweep_dir = Path(context["storage"]) / "runs" / "sweeps" / context["name"]
    state = json.loads((sweep_dir / "sweep.json").read_text())
    assert state["status"] == "done" and state["phases"] == {"grid": "done"}, state
    assert state["tracking_uri"] == context["mlflow_uri"], state["tracking_uri"]
    grid = sweep_dir / "tune" / "grid"
    trial_dirs = [d for d in grid.iterdir() if d.is_dir() and d.name.startswith("train_trial")]
    assert len(trial_dirs) == trials, sorted(p.name for p in grid.iterdir())
    for trial_dir in trial_dirs:
        checkpoints = sorted(trial_dir.glob("checkpoint_*"))
        assert len(checkpoints) == min(2, epochs), (trial_dir, checkpoints)  # CheckpointConfig(num_to_keep=2)
        assert {"best.pt", "last.pt"} <= {p.name for p in checkpoints[-1].iterdir()}, checkpoints[-1]
        lines = (trial_dir / "result.json").read_text().splitlines()
        assert [json.loads(line)["epoch"] for line in lines] == list(range(1, epochs + 1)), trial_dir
    return state


def assert_job_finished(context: dict) -> None:
    # `ray job submit` exited 0 (ns_cluster raises otherwise), i.e. the sweep CLI did: every trial finished.
    assert f"sweep {context['name']} finished; runs in {context['mlflow_uri']}" in context["job_output"], \
        context["job_output"][-3000:]


# --- the checks the test files name ---------------------------------------------------------------------------

def check_sweep_on_ray_up(context: dict) -> None:
    """`ray up` scenario: the sweep CLI, run as a Ray job on the head `ray up` started, finished its 2 trials;
    the head's MLflow server holds the sweep's parent run, its one teacher run and one child run per trial with
    every per-epoch metric once per epoch and both checkpoints; Tune's checkpoints are in storage_path; the
    driver took its data root from the node settings setup_node.sh wrote (SSAT_DATA_ROOT: not on the
    payload's command line)."""
    trials, epochs = 2, 2
    # every file_mounts source is a folder: Ray's "File Mount: ... refers to a file" warning stays away
    assert "refers to a file" not in context["ray_up_output"], context["ray_up_output"][-3000:]
    assert_job_finished(context)
    state = assert_sweep_in_storage(context, trials, epochs)
    assert state["args"]["data_root"] == context["data_root"], state["args"]
    uri = context["mlflow_uri"]
    parent, teacher, runs = sweep_runs(uri, context["name"], trials)
    logs = [assert_trial_run(uri, run, epochs=epochs, parent_id=parent["info"]["run_id"],
                             teacher_id=teacher["info"]["run_id"]) for run in runs]
    assert sorted(tags_of(r)["ssat.row"] for r in runs) == ["const|on", "curious|on"], [tags_of(r) for r in runs]
    assert {tags_of(r)["repro.node"] for r in runs} == {"ssat-head"}, [tags_of(r)["repro.node"] for r in runs]
    assert_teacher_made_once_on_the_driver(context, logs)


def check_sweep_on_two_nodes(context: dict) -> None:
    """Two-node scenario: the sweep's 2 trials (one split, 2 seeds; each needs the custom resource node_slot,
    of which each node offers one) ran at the same time, one on the head and one on the worker, and the
    worker's trial ran in the worker's own namespaces (its host name, its TMPDIR). Both runs are FINISHED on the
    head's MLflow server with their per-epoch metrics and checkpoints retrievable over HTTP, and both carry the
    id of the single teacher run; the teacher was trained once, by the driver on the head, into the shared
    storage (exactly one teacher file), and the worker's trial only read it from there."""
    trials, epochs = 2, 2
    assert_job_finished(context)
    assert_sweep_in_storage(context, trials, epochs)
    uri = context["mlflow_uri"]
    parent, teacher, runs = sweep_runs(uri, context["name"], trials)
    logs = {}
    for run in runs:
        logs[run["info"]["run_id"]] = assert_trial_run(uri, run, epochs=epochs, parent_id=parent["info"]["run_id"],
                                                       teacher_id=teacher["info"]["run_id"])
    tags = {tags_of(r)["repro.node"]: tags_of(r) for r in runs}
    # The custom-resource pinning: the two trials landed on two different nodes, one of them the worker.
    assert sorted(tags) == sorted([context["head_hostname"], context["worker_hostname"]]), sorted(tags)
    assert sorted(t["ssat.seed"] for t in tags.values()) == ["0", "1"], tags
    assert len({t["repro.split_hash"] for t in tags.values()}) == 1, "the two trials do not share their split"
    assert tags[context["worker_hostname"]]["repro.split_hash"] == tags_of(teacher)["ssat.split_hash"]
    teacher_file = assert_teacher_made_once_on_the_driver(context, list(logs.values()))

    worker_run = next(r for r in runs if tags_of(r)["repro.node"] == context["worker_hostname"])
    worker_log = logs[worker_run["info"]["run_id"]]
    assert f" on {context['worker_hostname']} pid " in worker_log, worker_log[:2000]
    # The worker read the teacher from the shared storage (the same path on both nodes), not from a head folder.
    assert str(teacher_file).startswith(context["storage"] + "/"), teacher_file
    # The worker's trial wrote its working files into the worker's own TMPDIR, none into the head's /tmp.
    key = tags_of(worker_run)["ssat.key"]
    in_worker_tmp = [p for p in Path(context["worker_tmp_seen_from_head"]).rglob("trial.log")
                     if f"trial {key} on " in p.read_text(errors="replace")]
    assert in_worker_tmp, f"no trial.log of {key} in the worker's TMPDIR"
    in_head_tmp = [p for p in Path(context["head_tmp"]).rglob("trial.log")
                   if f"trial {key} on " in p.read_text(errors="replace")]
    assert not in_head_tmp, in_head_tmp
    # --allowed-hosts is in force: a Host header outside the list (DNS rebinding) is refused.
    assert host_header_refused(uri, "rebind.example:5000")


def assert_equals_uninterrupted_run(uri: str, run: dict, epochs: int) -> None:
    """Train the run's configuration (its config.json artifact) in this process, uninterrupted, with 1 thread
    as the trial had, and compare every per-epoch metric but wall-clock ones with what MLflow holds."""
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import torch

    from ssat.config import from_dict
    from ssat.train import Trainer

    cfg = from_dict(json.loads(artifact_bytes(uri, run["info"]["run_id"], "config.json")))
    assert cfg.system.threads == 1, cfg.system.threads
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        history = Trainer(cfg, out, log=lambda line: None).fit()
    assert [m["epoch"] for m in history] == list(range(1, epochs + 1))
    where = f"run {run['info']['run_name']}"
    keys = [k for k in metric_keys(run) if k.startswith(("train/", "val/", "adv/", "sched/"))]
    assert keys, (where, metric_keys(run))
    for key in keys:
        logged = metric_history(uri, run["info"]["run_id"], key)
        want = [(m["epoch"], float(m[key])) for m in history]
        assert logged == want, (where, key, logged, want)


def check_sweep_survived_node_faults(context: dict) -> None:
    """node-faults scenario (tests/slow/test_node_faults.py): after the worker node's death, a tracking outage,
    the driver's SIGKILL, killed and raising trial processes and a diverging trial, `resume` ends the sweep
    with nothing lost and nothing duplicated."""
    epochs = 3
    out = context["job_output"]  # the resume job's output
    assert context["killed_driver_job_rc"] != 0, "the first job was not ended by the driver's SIGKILL"
    # The diverged trial is the only one not finished, and the sweep says so (exit 1, resume command).
    assert "sweep slow-node-faults is INCOMPLETE: stage grid finished 2/3 trials. Resume with:" in out, out[-3000:]
    # (`ray job submit` may print a stretch of the job's log twice: count distinct lines.)
    not_finished = sorted(set(re.findall(r"^  not finished: (.*)$", out, flags=re.M)))
    assert len(not_finished) == 1 and "loss became nan or infinite at epoch 2" in not_finished[0], not_finished
    # The faults fired: the pause on the worker (then the node died under it), one exit per finishing run on
    # the head, seed 1's raise, seed 2's NaN.
    once = Path(context["once_dir"])
    markers = sorted(p.name for p in once.iterdir())
    kinds = sorted(m.split("@")[0] for m in markers)
    assert kinds == ["exit", "exit", "nan", "pause", "raise"], markers
    pause = next(m for m in markers if m.startswith("pause@"))
    assert "fired on ssat-worker" in (once / pause).read_text()
    assert all("fired on ssat-head" in (once / m).read_text() for m in markers if m.startswith("exit@"))
    # The moved trial reported epoch 1 from the worker, then its later epochs from the head.
    moved = context["trial_results"][context["moved_trial"]]
    hosts = [(line["epoch"], line["hostname"]) for line in moved]
    assert hosts[0] == (1, "ssat-worker") and all(h == "ssat-head" for _, h in hosts[1:]), hosts
    # What the killed driver queued while the server was away came back from its journal, and all of it was
    # sent: no journal or spool is left.
    assert "[tracking] adopted" in out, out[-3000:]
    left = sorted(p.name for p in Path(context["sweep_dir"]).glob("tracking_spool*"))
    assert left == [], left

    uri = context["mlflow_uri"]
    by_kind: dict[str, list[dict]] = {}
    for run in mlflow_runs(uri, context["name"]):
        by_kind.setdefault(tags_of(run).get("ssat.kind", "?"), []).append(run)
    assert sorted(by_kind) == ["sweep", "teacher", "trial"], sorted(by_kind)
    assert len(by_kind["sweep"]) == 1 and len(by_kind["teacher"]) == 1, {k: len(v) for k, v in by_kind.items()}
    parent, teacher = by_kind["sweep"][0], by_kind["teacher"][0]
    runs = {tags_of(r)["ssat.seed"]: r for r in by_kind["trial"]}
    assert sorted(runs) == ["0", "1", "2"] and len(by_kind["trial"]) == 3, sorted(runs)  # one per (config, seed)
    logs = {seed: assert_trial_run(uri, runs[seed], epochs=epochs, parent_id=parent["info"]["run_id"],
                                   teacher_id=teacher["info"]["run_id"]) for seed in ("0", "1")}
    # The moved trial's log (it travels in the checkpoint) shows both nodes, and a restart from a checkpoint.
    moved_logs = [log for log in logs.values() if " on ssat-worker pid " in log]
    assert len(moved_logs) == 1 and " on ssat-head pid " in moved_logs[0], list(logs.values())
    assert "state.pt after epoch 1" in moved_logs[0], moved_logs[0]  # restarted from epoch 1's checkpoint
    for seed in ("0", "1"):  # killed (exit@3:1) or raising (raise@3) in epoch 3: restarted from epoch 2's
        assert "state.pt after epoch 2" in logs[seed], logs[seed]
    for seed in ("0", "1"):
        assert_equals_uninterrupted_run(uri, runs[seed], epochs)
    # The diverged trial: FAILED with its reason in MLflow, its one finished epoch logged once.
    nan = runs["2"]
    assert nan["info"]["status"] == "FAILED", nan["info"]
    assert "loss became nan or infinite at epoch 2" in tags_of(nan)["ssat.status"], tags_of(nan)["ssat.status"]
    assert [step for step, _ in metric_history(uri, nan["info"]["run_id"], "val/pgd10")] == [1]


# --- SLURM (tests/slow/test_slurm.py, ns_slurm.py) -------------------------------------------------------------
# Extra context: once_dir, sweep_dir, nodes, job_output (the last job's output file), final_job (its scontrol
# fields at the end), trial_results (each trial's Tune results: epoch and host), analysis_output (the login side's
# `python -m analysis.convergence`); mlflow_uri is the login node's server over the sweep's store.
JOB_TRACKING_URI = "http://10.77.0.11:5000"  # the MLflow server of every job: ssat-node1 is always the batch host


def distinct(pattern: str, text: str) -> list[str]:
    """The distinct lines matching `pattern` (`ray job submit` may print a stretch of the job's log twice)."""
    return sorted(set(re.findall(pattern, text, flags=re.M)))


def assert_slurm_sweep_finished(context: dict, trials: int, epochs: int) -> list[dict]:
    """The sweep is done in its state and Tune's storage (every epoch reported once, checkpoints kept); its runs
    on the login side's server: one parent, one teacher, one FINISHED run per trial with every per-epoch metric once
    per epoch; the convergence table, made from the login side, has every seed at its last epoch. Returns the
    trial runs."""
    assert_sweep_in_storage({**context, "mlflow_uri": JOB_TRACKING_URI}, trials, epochs)
    uri = context["mlflow_uri"]
    parent, teacher, runs = sweep_runs(uri, context["name"], trials)
    for run in runs:
        assert_trial_run(uri, run, epochs=epochs, parent_id=parent["info"]["run_id"],
                         teacher_id=teacher["info"]["run_id"])
    table = context["analysis_output"]
    for run in runs:
        row = tags_of(run)["ssat.row"].replace("|", r"\|")
        assert f"| {row} | {tags_of(run)['ssat.seed']} | {epochs} |" in table, table
    return runs


def assert_job_completed(job: dict, restarts: int) -> None:
    assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", str(restarts), "0:0"), job


def check_sweep_cut_by_time_limit(context: dict) -> None:
    """time-limit scenario: a job whose spec cannot fit a node was refused before anything started, naming both
    numbers. A sweep of 2 trials x 3 epochs, cut by its job's time limit in epochs 2 and 3, ran in
    three runs of one job with no command in between: each warning stopped the sweep as Ctrl+C does and requeued
    the job, each next run resumed the sweep, the third finished it and the job was not requeued again. Every epoch
    of every trial was reported and logged once, and trained once: the runs equal an uninterrupted run."""
    refused, said = context["refused"], context["refused_output"]
    assert (refused["JobState"], refused["ExitCode"]) == ("FAILED", "2:0"), refused
    assert ("error: this allocation cannot run sweep gpu-smoke: resources.cpu = 2 per trial, but each node of this "
            "allocation gives Ray 1 CPU(s) (SLURM_CPUS_PER_TASK=1)") in said, said
    assert "ray start" not in said and "MLflow server" not in said and "srun" not in said, said  # nothing started
    name, out, trials, epochs = context["name"], context["job_output"], 2, 3
    job = context["final_job"]["JobId"]
    starts = distinct(rf"^ssat: job {job}, run (\d): (\w+) sweep {name};", out)
    assert starts == [("1", "run"), ("2", "resume"), ("3", "resume")], starts
    assert len(re.findall(rf"^ssat: time limit: job {job} requeued; its next run resumes sweep {name}$", out,
                          flags=re.M)) == 2, out[-3000:]
    assert len(re.findall(rf"^sent SIGINT to the driver of {name} \(pid", out, flags=re.M)) == 2, out[-3000:]
    assert distinct(rf"^sweep {name} is INCOMPLETE: stage grid (interrupted \(Ctrl\+C\))\. Resume with:$", out) == [
        "interrupted (Ctrl+C)"], out[-3000:]
    assert f"sweep {name} finished; runs in {JOB_TRACKING_URI}" in out, out[-3000:]
    assert [c["epoch"] for c in context["cuts"]] == [2, 3], context["cuts"]
    assert_job_completed(context["final_job"], restarts=2)
    assert_job_completed(context["job_after"], restarts=2)  # a finished sweep: not requeued
    # Both nodes trained: in the first run each node held one paused trial (one CPU each).
    first_hosts = sorted(lines[0]["hostname"] for lines in context["trial_results"].values())
    assert first_hosts == context["nodes"], first_hosts
    runs = assert_slurm_sweep_finished(context, trials, epochs)
    for run in runs:
        log = artifact_bytes(context["mlflow_uri"], run["info"]["run_id"], "trial.log").decode(errors="replace")
        assert "state.pt after epoch 1" in log and "state.pt after epoch 2" in log, log[-2000:]  # resumed twice
        assert_equals_uninterrupted_run(context["mlflow_uri"], run, epochs)


def check_sweep_requeued_cancelled_resumed(context: dict) -> None:
    """preempt scenario: `scontrol requeue` of the running job cut the sweep in epoch 2 and its next run resumed
    it; `scancel` cut it in epoch 3 and left no run RUNNING, the sweep incomplete; `sbatch ... resume` went on, a
    node died under one of its trials, SLURM marked it DOWN and the job went on: the trial was retried on the other
    node from its checkpoint, and every epoch of every trial is logged once."""
    name, trials, epochs = context["name"], 2, 4
    first, out = context["first_job"], context["first_output"]
    starts = distinct(rf"^ssat: job {first}, run (\d): (\w+) sweep {name};", out)
    assert starts == [("1", "run"), ("2", "resume")], starts
    stopped = re.findall(rf"^sweep {name} stopped \(SLURM ended job {first} .*\); no run of it is RUNNING\.", out,
                         flags=re.M)
    assert len(stopped) == 2, out[-3000:]  # the requeue's SIGTERM, then scancel's
    cancelled = context["cancelled_job"]
    assert (cancelled["JobState"], cancelled["Restarts"]) == ("CANCELLED", "1"), cancelled
    # After scancel: nothing RUNNING in the store, the trials and the sweep KILLED with the reason; resumable.
    after = context["after_cancel"]
    assert {r["status"] for r in after.values()} == {"FINISHED", "KILLED"}, after  # the teacher FINISHED
    killed = {k: r["ssat.status"] for k, r in after.items() if r["status"] == "KILLED"}
    assert sorted(killed) == sorted([name, "curious|on s0", "curious|on s1"]), after
    # Whoever ended a run (the driver, on settle's Ctrl+C within its grace, or settle after it), its reason names
    # SLURM's job, never "Ctrl+C" (stop 38's CI: a driver that stopped in time said "interrupted (Ctrl+C)").
    for reason in killed.values():
        assert reason.startswith("KILLED: ") and f"SLURM ended job {first} (scancel, a requeue or its time limit)" \
            in reason and "Ctrl+C" not in reason and f"resume with: python -m sweeps resume {name} --workdir " \
            f"{context['storage']}" in reason, reason
    assert context["state_after_cancel"]["status"] == "incomplete", context["state_after_cancel"]

    out = context["job_output"]
    assert distinct(rf"^ssat: job {context['resume_job']}, run (\d): (\w+) sweep {name};", out) == [("1", "resume")]
    assert_job_completed(context["final_job"], restarts=0)
    assert context["node_states"]["ssat-node2"].startswith("down"), context["node_states"]
    # The trial on the node that died: epoch 3 from ssat-node2, then epoch 4 from ssat-node1 (from its checkpoint).
    hosts = {trial: [(line["epoch"], line["hostname"]) for line in lines]
             for trial, lines in context["trial_results"].items()}
    moved = [h for h in hosts.values() if (3, "ssat-node2") in h]
    assert len(moved) == 1 and moved[0][-1] == (4, "ssat-node1"), hosts
    runs = assert_slurm_sweep_finished(context, trials, epochs)
    logs = [artifact_bytes(context["mlflow_uri"], r["info"]["run_id"], "trial.log").decode(errors="replace")
            for r in runs]
    assert sum("state.pt after epoch 3" in log for log in logs) == 1, logs  # the moved trial, from epoch 3
    markers = sorted(p.name.split("-")[0] for p in Path(context["once_dir"]).iterdir())
    assert markers == ["hold@4_0"] * 2 + ["pause@2_1"] * 2 + ["pause@3_1"] * 2 + ["release"], markers

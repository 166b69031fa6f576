"""Assertions of the slow cluster tests, run INSIDE the test's namespaces while the cluster is still up.

ns_cluster.py calls CHECK(context) after the payload's job finished; the test file names CHECK as
"module:function" (a module of this folder). The context holds:
    kind, name, storage (Tune storage_path), data_root, mlflow_uri, head_home, job_output,
    payload_result (the payload's `PAYLOAD_RESULT {json}` line, or None)
and, for two-nodes: head_ip, worker_ip, head_hostname, worker_hostname, worker_home (as the worker sees it),
worker_home_seen_from_head.
Everything MLflow is read through the tracking server's HTTP API (what a laptop behind a tunnel sees).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path


# --- the MLflow server's HTTP API ---------------------------------------------------------------------------

def _http(uri: str, endpoint: str, body: dict | None = None, **params) -> bytes:
    url = uri.rstrip("/") + endpoint + ("?" + urllib.parse.urlencode(params) if params else "")
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15) as reply:
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
    return json.loads(_http(uri, "/api/2.0/mlflow/runs/search",
                            {"experiment_ids": [exp_id], "max_results": 100})).get("runs", [])


def tags_of(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    reply = json.loads(_http(uri, "/api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key=key))
    return sorted((int(m["step"]), float(m["value"])) for m in reply.get("metrics", []))


def artifact_files(uri: str, run_id: str, path: str) -> list[str]:
    reply = json.loads(_http(uri, "/api/2.0/mlflow/artifacts/list", run_id=run_id, path=path))
    return sorted(f["path"] for f in reply.get("files", []))


def artifact_bytes(uri: str, run_id: str, path: str) -> bytes:
    return _http(uri, "/get-artifact", path=path, run_uuid=run_id)


def assert_run_logged(uri: str, run: dict, scores: list[float]) -> dict:
    """The run finished, has one score per epoch (steps 1..n) and a downloadable checkpoint per epoch."""
    run_id = run["info"]["run_id"]
    assert run["info"]["status"] == "FINISHED", run["info"]
    history = metric_history(uri, run_id, "score")
    assert history == list(enumerate(scores, start=1)), history
    assert artifact_files(uri, run_id, "checkpoints") == [f"checkpoints/epoch_{e}" for e in range(1, len(scores) + 1)]
    last = json.loads(artifact_bytes(uri, run_id, f"checkpoints/epoch_{len(scores)}/state.json"))
    assert last["epoch"] == len(scores) and last["score"] == scores[-1], last
    return last


# --- Tune's side --------------------------------------------------------------------------------------------

def assert_payload_ok(context: dict, trials: int) -> dict:
    result = context["payload_result"]
    assert result is not None, "no PAYLOAD_RESULT line in the job's output:\n" + context["job_output"][-3000:]
    assert result["ok"] and len(result["trials"]) == trials, result
    return result


def assert_checkpoints_in_storage(context: dict, trials: int, reports: int) -> None:
    experiment = Path(context["storage"]) / context["name"]
    assert list(experiment.glob("experiment_state-*.json")), f"no Tune experiment state in {experiment}"
    trial_dirs = [d for d in experiment.iterdir() if d.is_dir() and list(d.glob("checkpoint_*"))]
    assert len(trial_dirs) == trials, sorted(p.name for p in experiment.iterdir())
    for trial_dir in trial_dirs:
        assert len(list(trial_dir.glob("checkpoint_*"))) == reports, trial_dir
        assert (trial_dir / "result.json").is_file(), trial_dir


# --- the checks the test files name ---------------------------------------------------------------------------

def check_tiny_tune(context: dict) -> None:
    """`ray up` scenario: the sweep finished, its checkpoints are in storage_path, its runs on the head's MLflow,
    and the job's driver saw the node settings setup_node.sh wrote (the venv first on its PATH)."""
    result = assert_payload_ok(context, trials=2)
    env = result["driver_env"]
    assert env["SSAT_STORAGE_PATH"] == context["storage"] and env["SSAT_DATA_ROOT"] == context["data_root"], env
    assert env["MLFLOW_TRACKING_URI"] == context["mlflow_uri"] and env["RAY_AUTH_MODE"] == "disabled", env
    assert env["python_on_path"] == f"{env['SSAT_VENV']}/bin/python", env
    assert_checkpoints_in_storage(context, trials=2, reports=2)
    runs = mlflow_runs(context["mlflow_uri"], context["name"])
    assert len(runs) == 2, [r["info"]["run_name"] for r in runs]
    scores = sorted(metric_history(context["mlflow_uri"], r["info"]["run_id"], "score")[-1][1] for r in runs)
    assert scores == [2.0, 4.0], scores
    for run in runs:
        final = metric_history(context["mlflow_uri"], run["info"]["run_id"], "score")[-1][1]
        assert_run_logged(context["mlflow_uri"], run, [final / 2, final])


def check_pinned_trials(context: dict) -> None:
    """Two-node scenario: the pinned trial ran on the worker, in the worker's own HOME/TMPDIR, and its run,
    per-epoch metrics and checkpoints are retrievable from the head's MLflow server over HTTP."""
    assert_payload_ok(context, trials=2)
    markers = Path(context["storage"]) / context["name"] / "markers"
    worker = json.loads((markers / "worker_node.json").read_text())
    head = json.loads((markers / "head_node.json").read_text())
    assert worker["node_ip"] == context["worker_ip"] and worker["hostname"] == context["worker_hostname"], worker
    assert head["node_ip"] == context["head_ip"] and head["hostname"] == context["head_hostname"], head
    assert worker["node_id"] != head["node_id"]
    assert worker["home"] == context["worker_home"] and worker["home"] != head["home"], (worker, head)
    assert worker["tmpdir"] == "/tmp" and "/mnt/" not in worker["cwd"], worker
    # The worker's HOME is its own folder: the trial's file landed there, not in the head's HOME.
    seen = Path(context["worker_home_seen_from_head"])
    assert (seen / "ssat-marker-worker_node").read_text() == worker["node_id"]
    assert not (Path(context["head_home"]) / "ssat-marker-worker_node").exists()
    assert (Path(context["head_home"]) / "ssat-marker-head_node").read_text() == head["node_id"]
    assert_checkpoints_in_storage(context, trials=2, reports=2)

    runs = {tags_of(r)["pin"]: r for r in mlflow_runs(context["mlflow_uri"], context["name"])}
    assert sorted(runs) == ["head_node", "worker_node"], sorted(runs)
    assert tags_of(runs["worker_node"])["node_ip"] == context["worker_ip"]
    last = assert_run_logged(context["mlflow_uri"], runs["worker_node"], [2.0, 4.0])
    assert last["node_id"] == worker["node_id"], "the checkpoint in MLflow is not the worker's"
    assert_run_logged(context["mlflow_uri"], runs["head_node"], [1.0, 2.0])
    # --allowed-hosts is in force: a Host header outside the list (DNS rebinding) is refused.
    assert host_header_refused(context["mlflow_uri"], "rebind.example:5000")

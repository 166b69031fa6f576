"""The sweep's experiment in MLflow as the Tracker writes it: runs found by their key (and remembered), and each
queued operation applied so that a replay changes nothing (sweeps.tracking.tracker: the queue that sends them)."""
from __future__ import annotations

from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

# The experiment's kind as MLflow records it (model development, not GenAI). MLflow 3.17.2's UI does not read it
# yet: the view comes from `?workflowType=` in the URL (else the browser's last choice, else GenAI), so the
# links this project prints name the view (`ui_url`).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def flat_str(v) -> str:
    """The text MLflow keeps for a param or tag value (None -> "None")."""
    return str(v)


class RunStore:
    """One experiment's runs by key, and the operations of Tracker applied to them."""

    def __init__(self, uri: str, experiment: str, artifact_root: str | Path | None = None):
        self.experiment = experiment
        self.client = MlflowClient(uri)
        self.artifact_root = (Path(artifact_root).resolve().as_uri() if artifact_root and not uri.startswith("http")
                              else None)
        self.runs: dict[str, str] = {}       # key -> run id
        self.last_step: dict[str, int] = {}  # key -> last logged epoch
        self._exp_id: str | None = None

    @property
    def experiment_id(self) -> str:
        """The sweep's experiment, created or reused, always marked as model development (EXPERIMENT_KIND)."""
        if self._exp_id is None:
            exp = self.client.get_experiment_by_name(self.experiment)
            if exp is None:
                try:
                    self._exp_id = self.client.create_experiment(self.experiment, artifact_location=self.artifact_root,
                                                                 tags=dict([EXPERIMENT_KIND]))
                    return self._exp_id
                except Exception:  # created meanwhile by someone else
                    exp = self.client.get_experiment_by_name(self.experiment)
            self._exp_id = exp.experiment_id
            if exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
                self.client.set_experiment_tag(self._exp_id, *EXPERIMENT_KIND)
        return self._exp_id

    def find_run(self, key: str) -> str | None:
        if key in self.runs:
            return self.runs[key]
        found = self.client.search_runs([self.experiment_id], filter_string=f"tags.`ssat.key` = '{key}'")
        if found:
            self.runs[key] = found[0].info.run_id
            return self.runs[key]
        return None

    def _ensure(self, key: str, tags: dict, params: dict, name: str) -> str:
        rid = self.find_run(key)
        if rid is None:
            run = self.client.create_run(self.experiment_id, run_name=name,
                                         tags={"ssat.key": key, **{k: flat_str(v) for k, v in tags.items()}})
            rid = run.info.run_id
            if params:
                # MLflow's limit; a store may refuse longer values (MLFLOW_TRUNCATE_LONG_VALUES=false)
                self.client.log_batch(rid, params=[Param(k, flat_str(v)[:6000]) for k, v in params.items()])
            self.runs[key] = rid
        return rid

    def _last_step(self, key: str, rid: str) -> int:
        """The last step anything was logged at in the run (-1: none yet), whatever metrics each epoch carried:
        the store keeps every metric's latest value by (step, timestamp), so the largest of their steps."""
        if key not in self.last_step:
            latest = self.client.get_run(rid).data.to_proto().metrics
            self.last_step[key] = max((m.step for m in latest), default=-1)
        return self.last_step[key]

    def apply(self, op: dict) -> None:
        kind, key = op["op"], op["key"]
        if kind == "ensure":
            self._ensure(key, op["tags"], op["params"], op["name"])
            return
        rid = self.find_run(key)
        if rid is None:
            raise LookupError(f"no run for key {key}")
        if kind == "epoch":
            if op["step"] <= self._last_step(key, rid):
                return  # already logged: a resumed or retried trial re-reports nothing twice
            ms = [Metric(k, float(v), op["ts"], op["step"]) for k, v in op["metrics"].items()]
            self.client.log_batch(rid, metrics=ms)  # split into batches of MLflow's limit by the client
            self.last_step[key] = op["step"]
        elif kind == "final":  # first write wins, for the numbers and the protocol records that go with them
            have = self.client.get_run(rid).data
            ms = [Metric(k, float(v), op["ts"], op["step"]) for k, v in op["metrics"].items() if k not in have.metrics]
            tags = [RunTag(k, flat_str(v)) for k, v in op["tags"].items() if k not in have.tags]
            self.client.log_batch(rid, metrics=ms, tags=tags)
        elif kind == "tags":
            self.client.log_batch(rid, tags=[RunTag(k, flat_str(v)) for k, v in op["tags"].items()])
        elif kind == "params":
            have = self.client.get_run(rid).data.params
            new = [Param(k, flat_str(v)[:6000]) for k, v in op["params"].items() if k not in have]
            if new:
                self.client.log_batch(rid, params=new)
        elif kind == "artifact":
            if Path(op["path"]).exists():
                self.client.log_artifact(rid, op["path"], op["artifact_path"])
        elif kind == "end":
            self.client.set_terminated(rid, op["status"])
        elif kind == "kill":
            if self.client.get_run(rid).info.status == "RUNNING":
                self.client.log_batch(rid, tags=[RunTag(k, flat_str(v)) for k, v in op["tags"].items()])
                self.client.set_terminated(rid, "KILLED")
        elif kind == "reopen":
            self.client.update_run(rid, status="RUNNING")
            self.client.set_tag(rid, "ssat.status", "RUNNING")

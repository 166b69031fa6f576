"""The Tune callback that writes MLflow from the driver (the single writer), through `Tracker`."""
from __future__ import annotations

import functools
import json
import os
import shutil
import time
import traceback
from pathlib import Path

from ray.tune import Callback

from .tracking import Tracker, epoch_metrics, final_metrics
from .trial_settings import once_per_trial, resolve_trial

ARTIFACTS = ("best.pt", "best.pt.sha256", "last.pt", "last.pt.sha256", "config.json", "trial.log")


def _guarded(hook):
    """A tracking problem must never stop training: report it and go on (operations stay queued)."""
    @functools.wraps(hook)
    def run(self, *args, **kwargs):
        try:
            return hook(self, *args, **kwargs)
        except Exception:
            print(f"[tracking] {hook.__name__} failed; training goes on:\n{traceback.format_exc(limit=3)}", flush=True)
    return run


def _end_tags(last: dict, meta: dict) -> dict:
    """Tags of a trial Tune completed: FINISHED, or stopped early by the search's scheduler (ASHA) at an epoch
    before its config's last (Tune calls on_trial_complete for neither an error nor a Ctrl+C)."""
    epoch, epochs = int(last.get("epoch") or 0), int(meta.get("epochs") or 0)
    if "time/epochs" in last or not epochs or epoch >= epochs:
        return {"ssat.status": "FINISHED"}
    by = meta.get("scheduler") or "scheduler"
    return {"ssat.status": f"STOPPED_EARLY: {by} at epoch {epoch} of {epochs}", "ssat.stopped_by": by,
            "ssat.stopped_epoch": epoch}


class TrackingCallback(Callback):
    """Per result: find-or-create the trial's run by key, log the epoch; at the end, checkpoints as artifacts.

    Holds only plain settings when pickled (Tune stores its callbacks with the experiment), and makes its
    MLflow client lazily, so `Tuner.restore` brings it back working. Each trial's settings are resolved once (its
    Config and run record), at its first hook, not at every result.
    """

    def __init__(self, uri: str, experiment: str, sweep_dir: str, parent_run_id: str | None,
                 artifact_root: str | None = None):
        self.uri, self.experiment, self.sweep_dir = uri, experiment, sweep_dir
        self.parent_run_id, self.artifact_root = parent_run_id, artifact_root
        self._tracker: Tracker | None = None
        self._seen: set[str] = set()
        self._resolved: set[str] = set()  # runs whose resolved.precision was sent
        self._trials: dict[str, tuple] = {}  # Tune's trial id -> its (Config, meta)

    def __getstate__(self):
        return {**self.__dict__, "_tracker": None, "_seen": set(), "_resolved": set(), "_trials": {}}

    def __setstate__(self, state: dict) -> None:
        # a callback Tune saved before _resolved (or _trials) existed
        self.__dict__.update({"_resolved": set(), "_trials": {}, **state})

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = Tracker(self.uri, self.experiment, self.artifact_root,
                                    spool=Path(self.sweep_dir) / "tracking_spool.jsonl")
        return self._tracker

    def _start(self, trial) -> tuple[str, dict]:
        cfg, meta = once_per_trial(self._trials, trial, resolve_trial)
        rec = meta["record"]  # the record the trainable reports (run_json), from the same config
        key = rec.key
        if key not in self._seen:
            t = self.tracker
            tags = {**rec.tags, "ssat.status": "RUNNING"}
            if self.parent_run_id:
                tags["mlflow.parentRunId"] = self.parent_run_id
            t.ensure_run(key, tags, rec.params, name=rec.name)
            cfile = Path(self.sweep_dir) / "configs" / key / "config.json"
            cfile.parent.mkdir(parents=True, exist_ok=True)
            cfile.write_text(json.dumps(cfg.to_dict(), indent=1))
            t.log_artifact(key, cfile, None)
            t.reopen(key)  # a run that an interrupted driver ended as KILLED continues as this trial
            self._seen.add(key)
        self.tracker.set_tags(key, {"ssat.ray_trial_id": trial.trial_id})
        return key, meta

    @_guarded
    def on_trial_start(self, iteration, trials, trial, **info):
        """The run exists from the moment Tune starts the trial; when it did is a tag (a retry starts it again)."""
        key, _ = self._start(trial)
        self.tracker.set_tags(key, {"ssat.ray_started_at": f"{time.time():.3f}"})

    @_guarded
    def on_trial_result(self, iteration, trials, trial, result, **info):
        key, _ = self._start(trial)
        t = self.tracker
        if "repro_json" in result:
            rec = json.loads(result["repro_json"])
            t.set_tags(key, {f"repro.{k}": json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in rec.items()})
            if key not in self._resolved and rec.get("precision"):  # the precision it trained in (auto: by device)
                t.log_params(key, {"resolved.precision": rec["precision"]})
                self._resolved.add(key)
        if "failed_reason" in result:
            t.set_tags(key, {"ssat.status": f"FAILED: {result['failed_reason'][:480]}"})
            t.end(key, "FAILED")
            return
        t.log_epoch(key, epoch_metrics(result), int(result["epoch"]))
        metrics, tags = final_metrics(result)
        if any(k.startswith("test/") for k in metrics) or tags:
            t.log_final(key, metrics, tags, int(result["epoch"]))

    @_guarded
    def on_trial_complete(self, iteration, trials, trial, **info):
        key, meta = self._start(trial)
        last = trial.last_result or {}
        if "failed_reason" in last:
            return
        ckpt = trial.checkpoint
        if ckpt is not None:
            keep = Path(self.sweep_dir) / "artifacts" / key
            keep.mkdir(parents=True, exist_ok=True)
            with ckpt.as_directory() as d:  # a download for remote storage: copy what we upload
                for name in ARTIFACTS:
                    if (Path(d) / name).exists():
                        shutil.copy2(Path(d) / name, keep / name)
            for name in ARTIFACTS:
                if (keep / name).exists():
                    self.tracker.log_artifact(key, keep / name, "checkpoints" if name.endswith(("pt", "sha256")) else None)
        self.tracker.set_tags(key, _end_tags(last, meta))
        self.tracker.end(key, "FINISHED")

    @_guarded
    def on_trial_error(self, iteration, trials, trial, **info):
        key, _ = self._start(trial)
        reason = "error"
        err = getattr(trial, "error_file", None)
        if err and Path(err).exists():
            lines = [ln for ln in Path(err).read_text().splitlines() if ln.strip()]
            reason = lines[-1] if lines else reason
        self.tracker.set_tags(key, {"ssat.status": f"FAILED: {reason[:480]}"})
        self.tracker.end(key, "FAILED")

    @_guarded
    def on_experiment_end(self, trials, **info):
        self.tracker.flush(timeout=float(os.environ.get("SSAT_TRACKING_FLUSH_S", "60")))

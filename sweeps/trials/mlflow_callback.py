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

from ..paths import CONFIGS, KEPT, SPOOL
from ..sweep_log import LOG
from ..tracking.tracker import Tracker, epoch_metrics, final_metrics
from .ray_private import forget_gone_checkpoints
from .trial_settings import once_per_trial, resolve_trial

ARTIFACTS = ("best.pt", "best.pt.sha256", "last.pt", "last.pt.sha256", "config.json", "trial.log")


def _guarded(hook):
    """A tracking problem must never stop training: report it in one line and go on (operations stay queued); the
    traceback goes to the sweep's log."""
    @functools.wraps(hook)
    def run(self, *args, **kwargs):
        try:
            return hook(self, *args, **kwargs)
        except Exception as exc:
            LOG.write(f"[tracking] {hook.__name__} failed:\n{traceback.format_exc()}")
            print(f"[tracking] {hook.__name__} failed ({type(exc).__name__}: {str(exc)[:200]}); training goes on",
                  flush=True)
    return run


def error_reason(error_file: str | None) -> tuple[str, bool]:
    """The last line of a trial's Ray error file, and whether it is a refused restore (NoIntactCheckpoint: then
    without the exception's module path)."""
    reason = "error"
    if error_file and Path(error_file).exists():
        lines = [ln for ln in Path(error_file).read_text().splitlines() if ln.strip()]
        reason = lines[-1].strip() if lines else reason
    head, sep, rest = reason.partition(": ")
    refused = bool(sep) and head.endswith("NoIntactCheckpoint")
    return (rest if refused else reason), refused


def _end_tags(last: dict, meta: dict) -> tuple[dict, str]:
    """Tags and MLflow status of a trial Tune completed (Tune calls on_trial_complete for neither an error nor a
    Ctrl+C): FINISHED only with its last epoch reported; stopped early by the search's scheduler (ASHA) at an epoch
    before its config's last; any other early completion (a stage without a scheduler: nothing should end a trial
    early) KILLED."""
    epoch, epochs = int(last.get("epoch") or 0), int(meta.get("epochs") or 0)
    if "time/epochs" in last or (epochs and epoch >= epochs):
        return {"ssat.status": "FINISHED"}, "FINISHED"
    by = meta.get("scheduler")
    if by:
        return {"ssat.status": f"STOPPED_EARLY: {by} at epoch {epoch} of {epochs}", "ssat.stopped_by": by,
                "ssat.stopped_epoch": epoch}, "FINISHED"
    return {"ssat.status": f"KILLED: ended at epoch {epoch} of {epochs or '?'} without its last (Tune completed it "
                           "early)"}, "KILLED"


def holds_everything(t: Tracker, key: str, meta: dict) -> bool:
    """Whether the trial's run already holds all its epochs and its final evaluation (False when unsure:
    operations still queued, or the store unreachable)."""
    if t.queue:
        return False
    try:
        rid = t.find_run(key)
        if rid is None:
            return False
        metrics = t.client.get_run(rid).data.metrics
    except Exception:
        return False
    epochs = int(meta.get("epochs") or 0)
    evaluated = meta.get("stage") == "search" or any(k.startswith("test/") for k in metrics)
    return bool(epochs) and metrics.get("time/epochs", 0) >= epochs and evaluated


def kept_files(checkpoint, keep: Path) -> list[tuple[Path, str | None]]:
    """A finished trial's last checkpoint files (ARTIFACTS) copied to `keep`, each with the artifact folder its run
    gets it in: a download for remote storage, so what is uploaded is a copy."""
    keep.mkdir(parents=True, exist_ok=True)
    with checkpoint.as_directory() as d:
        for name in ARTIFACTS:
            if (Path(d) / name).exists():
                shutil.copy2(Path(d) / name, keep / name)
    return [(keep / name, "checkpoints" if name.endswith(("pt", "sha256")) else None)
            for name in ARTIFACTS if (keep / name).exists()]


class TrackingCallback(Callback):
    """Per result: find-or-create the trial's run by key, log the epoch; at the end, checkpoints as artifacts.

    Holds only plain settings when pickled (Tune stores its callbacks with the experiment), and makes its
    MLflow client lazily, so `Tuner.restore` brings it back working. Each trial's settings are resolved once (its
    Config and run record), at its first hook, not at every result.
    """

    def __init__(self, uri: str, experiment: str, sweep_dir: str, parent_run_id: str | None,
                 artifact_root: str | None = None, study: tuple[str, str] | None = None):
        self.uri, self.experiment, self.sweep_dir = uri, experiment, sweep_dir
        self.parent_run_id, self.artifact_root = parent_run_id, artifact_root
        self.study = study  # a search's Optuna study (storage URL, name): its trials learn their MLflow run ids
        self._tracker: Tracker | None = None
        self._seen: set[str] = set()
        self._resolved: set[str] = set()  # runs whose resolved.precision was sent
        self._trials: dict[str, tuple] = {}  # Tune's trial id -> its (Config, meta)
        self._sent: dict[str, dict] = {}  # run key -> the tags last sent by _changed_tags
        self._linked: set[str] = set()  # Tune trial ids whose study trial holds their MLflow run id

    def __getstate__(self):
        return {**self.__dict__, "_tracker": None, "_seen": set(), "_resolved": set(), "_trials": {}, "_sent": {},
                "_linked": set()}

    def __setstate__(self, state: dict) -> None:
        # a callback Tune saved before _resolved (or _trials, study) existed
        self.__dict__.update({"_resolved": set(), "_trials": {}, "_sent": {}, "_linked": set(), "study": None,
                              **state})

    @property
    def tracker(self) -> Tracker:
        if self._tracker is None:
            self._tracker = Tracker(self.uri, self.experiment, self.artifact_root, spool=Path(self.sweep_dir) / SPOOL)
        return self._tracker

    def _start(self, trial) -> tuple[str, dict]:
        cfg, meta = once_per_trial(self._trials, trial, resolve_trial)
        rec = meta["record"]  # the record the trainable reports (run_json), from the same config
        key = rec.key
        if key not in self._seen:
            t = self.tracker
            tags = dict(rec.tags)  # its status: RUNNING by the reopen below
            if self.parent_run_id:
                tags["mlflow.parentRunId"] = self.parent_run_id
            t.ensure_run(key, tags, rec.params, name=rec.name)
            cfile = Path(self.sweep_dir) / CONFIGS / key / "config.json"
            cfile.parent.mkdir(parents=True, exist_ok=True)
            cfile.write_text(json.dumps(cfg.to_dict(), indent=1))
            t.log_artifact(key, cfile)
            t.reopen(key)  # a run that an interrupted driver ended as KILLED continues as this trial
            self._seen.add(key)
        self._changed_tags(key, {"ssat.ray_trial_id": trial.trial_id})
        return key, meta

    def _changed_tags(self, key: str, tags: dict) -> None:
        """Set the tags whose value differs from what this callback last sent for the run: a request per result
        for tags that rarely change (the trial id, the repro record) would cap the results a driver sends."""
        sent = self._sent.setdefault(key, {})
        changed = {k: v for k, v in tags.items() if k not in sent or sent[k] != v}
        if changed:
            self.tracker.set_tags(key, changed)
            sent.update(changed)

    def on_trial_start(self, iteration, trials, trial, **info):
        """Tune is about to restore the trial: it must not trip over checkpoints that are gone. The run exists
        from the moment Tune starts the trial; when it did is a tag (a retry starts it again)."""
        try:
            forget_gone_checkpoints(trial)
        except Exception:
            print(f"[sweep] checking the checkpoints of trial {trial.trial_id} failed:\n"
                  f"{traceback.format_exc(limit=3)}", flush=True)
        self._started(trial)

    @_guarded
    def _started(self, trial):
        key, _ = self._start(trial)
        self.tracker.set_tags(key, {"ssat.ray_started_at": f"{time.time():.3f}"})

    @_guarded
    def on_trial_result(self, iteration, trials, trial, result, **info):
        key, meta = self._start(trial)
        t = self.tracker
        if "repro_json" in result:
            rec = json.loads(result["repro_json"])
            self._changed_tags(key, {f"repro.{k}": json.dumps(v) if isinstance(v, (dict, list)) else v
                                     for k, v in rec.items()})
            if key not in self._resolved and rec.get("precision"):  # the precision it trained in (auto: by device)
                t.log_params(key, {"resolved.precision": rec["precision"]})
                self._resolved.add(key)
        if "recovery" in result:  # its restore used another checkpoint than Tune named, or none
                                  # (sweeps.trials.trainable)
            print(f"[sweep] {meta['record'].name}: "
                  f"{result.get('recovery_console') or result['recovery']}", flush=True)
            t.set_tags(key, {"ssat.recovery": result["recovery"][:5000],
                             "ssat.status": f"RUNNING: {result['recovery']}"[:500]})
        if "failed_reason" in result:
            t.set_tags(key, {"ssat.status": f"FAILED: {result['failed_reason'][:480]}"})
            t.end(key, "FAILED")
            return
        t.log_epoch(key, epoch_metrics(result), int(result["epoch"]))
        metrics, tags = final_metrics(result)
        if any(k.startswith("test/") for k in metrics) or tags:
            t.log_final(key, metrics, tags, int(result["epoch"]))
        self._link_study(trial, key)

    def _link_study(self, trial, key: str) -> None:
        """The search trial's MLflow run id on its Optuna trial, once the run is in the store."""
        if self.study and trial.trial_id not in self._linked and key in self.tracker.runs:
            from .study import link_mlflow_run

            if link_mlflow_run(*self.study, trial.trial_id, self.tracker.runs[key]):
                self._linked.add(trial.trial_id)

    @_guarded
    def on_trial_complete(self, iteration, trials, trial, **info):
        key, meta = self._start(trial)
        last = trial.last_result or {}
        if "failed_reason" in last:
            return
        if trial.checkpoint is not None:
            for path, folder in kept_files(trial.checkpoint, Path(self.sweep_dir) / KEPT / key):
                self.tracker.log_artifact(key, path, folder)
        tags, status = _end_tags(last, meta)
        self.tracker.set_tags(key, tags)
        self.tracker.end(key, status)

    @_guarded
    def on_trial_error(self, iteration, trials, trial, **info):
        key, meta = self._start(trial)
        reason, refused = error_reason(getattr(trial, "error_file", None))
        if refused:  # one line instead of Tune's traceback (sweeps.sweep_log); the tag names
            # the checkpoints as in the trial's folder, the console by their paths in storage
            print(f"[sweep] {meta['record'].name}: FAILED: {reason}", flush=True)
            if getattr(trial, "path", None):
                reason = reason.replace(f"{str(trial.path).rstrip('/')}/", "")
        if holds_everything(self.tracker, key, meta):
            # e.g. a later attempt of a trial whose run a driver before had completed: it stays FINISHED
            self.tracker.set_tags(key, {"ssat.status": "FINISHED", "ssat.last_error": reason[:480]})
            self.tracker.end(key, "FINISHED")
            return
        self.tracker.set_tags(key, {"ssat.status": f"FAILED: {reason[:480]}"})
        self.tracker.end(key, "FAILED")

    @_guarded
    def on_experiment_end(self, trials, **info):
        self.tracker.flush(timeout=float(os.environ.get("SSAT_TRACKING_FLUSH_S", "60")))

"""The Tune callback that prints the sweep's progress on the driver: one line per epoch and per finished trial,
instead of Ray's full status tables; during a trial's final evaluation (PGD on the test set, AutoAttack), its
progress lines from the trial's log."""
from __future__ import annotations

import contextlib
import math
import re
import time
from pathlib import Path

from ray.tune import Callback

from .trial_settings import TrialView, once_per_trial, view


def duration(seconds: float) -> str:
    """12 s, 4 min 05 s, 2 h 03 min: what a person reads at a glance."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class OuterJob:
    """A larger job this driver's sweep is part of (`make paper`): its name and the trial-epochs it still has after
    this sweep, so a progress line's time left covers them too, at the rate this sweep measures."""

    name: str | None = None
    later_epochs: int = 0


@contextlib.contextmanager
def outer_job(name: str, later_epochs: int):
    OuterJob.name, OuterJob.later_epochs = name, later_epochs
    try:
        yield
    finally:
        OuterJob.name, OuterJob.later_epochs = None, 0


# Lines of a trial log that say where its final evaluation is (ssat.train.Trainer.final_evaluation, ssat.evaluate).
EVAL_LINE = re.compile(r"final evaluation|\] pgd\d+: |\] autoattack \(|autoattack: ")
POLL_S = 2.0  # how often the driver looks at the logs of trials in their final evaluation


def failure_reason(exc: BaseException | None) -> str:
    """Why a trial's attempt failed, in a few words: what the trial raised (the first line of its message), or that
    its worker process died (killed, out of memory, a crash of the interpreter)."""
    if exc is None:
        return "an error Ray did not keep"
    names = {c.__name__ for c in type(exc).__mro__}
    if "RayActorError" in names:
        return f"its worker process died ({type(exc).__name__})"
    err = getattr(exc, "cause", None) or exc  # RayTaskError: what the trial raised, without Ray's wrapping
    text = str(err).strip().partition("\n")[0]
    return f"{type(err).__name__}: {text[:160]}" if text else type(err).__name__


def last_error(trial) -> BaseException | None:
    """The error of the trial's last failure, from the driver's copy of Ray's pickle of it (its copy in storage is
    synced later)."""
    from ray import cloudpickle

    path = getattr(trial, "pickled_error_file", None)
    if not path:
        return None
    try:
        return cloudpickle.loads(Path(path).read_bytes())
    except Exception:  # unreadable, or a class this driver cannot import
        return None


def retry_line(name: str, failures: int, max_failures: int, epoch: int, reason: str, error_file: str | None) -> str:
    """The console line of a retried trial: which trial, which attempt (of how many), after which epoch, why."""
    attempts = "" if max_failures < 0 else f" of {max_failures + 1}"
    where = f"after epoch {epoch}" if epoch else "before its first epoch"
    details = f" (details: {error_file})" if error_file else ""
    return (f"[sweep] {name}: attempt {failures + 1}{attempts}, {where}: {reason}; it resumes from its last "
            f"checkpoint{details}")


class ProgressCallback(Callback):
    """Per epoch: the trial, its validation numbers, trials done out of the stage's total and the time left,
    estimated from the epochs this driver has seen finish (evaluation included) at the current concurrency."""

    def __init__(self, total: int, total_epochs: int):
        self.total, self.total_epochs = total, total_epochs  # what the spec asks for, not what Tune made so far
        self.setup()

    def setup(self, **info):
        """At every start, a restored one too (its clock and counts would belong to the earlier driver)."""
        self.t0 = time.perf_counter()
        self.epoch: dict[str, int] = {}   # trial id -> last epoch reported
        self.first: dict[str, int] = {}   # trial id -> epochs it had done before this driver saw it
        self.done: set[str] = set()
        self.logs: dict[str, tuple[Path, int, object]] = {}  # trial id -> (its trial.log, bytes read, trial)
        self.polled = -math.inf  # never: the first step looks
        self.trials: dict[str, TrialView] = {}  # trial id -> what its lines say of it, read once

    def _view(self, trial) -> TrialView:
        return once_per_trial(self.trials, trial, view)

    def eta(self) -> str:
        ran = sum(e - self.first[t] for t, e in self.epoch.items())
        left = self.total_epochs - sum(self.epoch.values())
        if ran <= 0 or left <= 0:
            return ""
        rate = (time.perf_counter() - self.t0) / ran  # seconds of wall time per trial-epoch, at this concurrency
        outer = (f" ({OuterJob.name}: about {duration((left + OuterJob.later_epochs) * rate)})"
                 if OuterJob.name else "")
        return f", about {duration(left * rate)} left{outer}"

    def _name(self, trial) -> str:
        """The trial's one name, as its MLflow run and `status` say it (a trial id alone tells a person nothing)."""
        return self._view(trial).name or f"trial {trial.trial_id}"

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "failed_reason" in result:
            print(f"[sweep] {self._name(trial)}: stopped: {result['failed_reason']}", flush=True)
            return
        epoch = int(result.get("epoch") or 0)
        self.first.setdefault(trial.trial_id, epoch - 1)
        self.epoch[trial.trial_id] = epoch
        if "time/epochs" in result:
            self.done.add(trial.trial_id)
            if trial.trial_id in self.logs:  # what it logged since the last look, then no more
                self._follow(trial.trial_id)
                del self.logs[trial.trial_id]
        elif result.get("work_dir") and epoch + 1 >= self._view(trial).epochs > 0:
            # its last epoch runs now, then the final evaluation: follow its log from here on
            log = Path(result["work_dir"]) / "trial.log"
            self.logs[trial.trial_id] = (log, log.stat().st_size if log.exists() else 0, trial)
        val = f" val clean {result['val/clean']:.1f} pgd10 {result['val/pgd10']:.1f}" if "val/pgd10" in result else ""
        print(f"[sweep {duration(time.perf_counter() - self.t0)}] {self._name(trial)}: epoch {epoch}{val} "
              f"({result.get('perf/epoch_seconds', 0):.1f} s) | {len(self.done)}/{self.total} trials done"
              f"{self.eta()}", flush=True)

    def on_step_begin(self, iteration, trials, **info):
        """Every POLL_S: new final-evaluation lines of the trials in their last epoch. A trial on another node
        has no log here; it shows up at its next report as before."""
        now = time.perf_counter()
        if now - self.polled < POLL_S:
            return
        self.polled = now
        for tid in list(self.logs):
            self._follow(tid)

    def _follow(self, tid: str) -> None:
        """Print the final-evaluation lines a followed trial's log gained since the last look."""
        log, read, trial = self.logs[tid]
        try:
            with open(log, "rb") as f:
                f.seek(read)
                chunk = f.read()
        except OSError:
            return
        whole = chunk[:chunk.rfind(b"\n") + 1]  # a line still being written waits for the next look
        self.logs[tid] = (log, read + len(whole), trial)
        for line in whole.decode(errors="replace").splitlines():
            text = line.split(" ", 1)[1].strip() if line[:2].isdigit() else line.strip()
            if EVAL_LINE.search(text):
                print(f"[sweep {duration(time.perf_counter() - self.t0)}] {self._name(trial)}: {text}", flush=True)

    def on_trial_complete(self, iteration, trials, trial, **info):
        last = trial.last_result or {}
        if "failed_reason" in last:
            return  # on_trial_result said why it stopped
        if "time/epochs" not in last:  # completed before its last epoch
            v = self._view(trial)
            # its remaining epochs will not run in this driver: take them out of what is left
            self.total_epochs -= max(0, v.epochs - int(last.get("epoch") or 0))
            if v.meta.get("scheduler"):
                print(f"[sweep] {self._name(trial)}: stopped early by the scheduler after epoch {last.get('epoch')}",
                      flush=True)
            else:  # nothing should end it early (sweeps.trials.mlflow_callback._end_tags: its run ends KILLED)
                print(f"[sweep] {self._name(trial)}: ended after epoch {last.get('epoch')} of {v.epochs or '?'} "
                      "without its last: Tune completed it early, and the stage is incomplete", flush=True)
            return
        # Counted from the trials' states, so a resumed sweep counts what finished before it too.
        done = len({t.trial_id for t in trials if t.status == "TERMINATED"
                    and "time/epochs" in (t.last_result or {})} | {trial.trial_id})
        print(f"[sweep] {self._name(trial)} finished ({done}/{self.total} trials done{self.eta()})", flush=True)

    def on_trial_recover(self, iteration, trials, trial, **info):
        """Tune retries a failed trial from its last checkpoint: one line (Ray's traceback is in the error file of the
        trial's folder in storage, and in the sweep's log: sweeps.sweep_log)."""
        reason = failure_reason(last_error(trial))
        errors = trial.error_file and getattr(trial, "path", None) and f"{trial.path}/{Path(trial.error_file).name}"
        print(retry_line(self._name(trial), trial.num_failures, trial.max_failures,
                         int((trial.last_result or {}).get("epoch") or 0), reason, errors or trial.error_file),
              flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"[sweep] {self._name(trial)} FAILED ({trial.error_file})", flush=True)

"""One line per epoch and per finished trial, instead of Ray's full status tables."""
from __future__ import annotations

import time

from ray.tune import Callback


def _short(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


class ProgressCallback(Callback):
    def __init__(self, total: int):
        self.t0 = time.perf_counter()
        self.total = total  # Tune's trial list holds only the trials created so far

    def _name(self, trial) -> str:
        """The row and seed; for a search trial, what was sampled (a trial id alone tells a person nothing)."""
        cfg = trial.config.get("trial", trial.config)
        meta = cfg.get("meta", {})
        sampled = ", ".join(f"{k.split('.')[-1]}={_short(v)}" for k, v in cfg.items() if "." in k)
        return f"{meta.get('row') or trial.trial_id}{f' ({sampled})' if sampled else ''} seed {meta.get('seed')}"

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "failed_reason" in result:
            print(f"[sweep] {self._name(trial)}: stopped: {result['failed_reason']}", flush=True)
            return
        val = f" val clean {result['val/clean']:.1f} pgd10 {result['val/pgd10']:.1f}" if "val/pgd10" in result else ""
        print(f"[sweep {time.perf_counter() - self.t0:6.0f}s] {self._name(trial)}: epoch {result.get('epoch')}"
              f"{val} ({result.get('perf/epoch_seconds', 0):.1f}s)", flush=True)

    def on_trial_complete(self, iteration, trials, trial, **info):
        last = trial.last_result or {}
        if "failed_reason" in last:
            return  # on_trial_result said why it stopped
        if "time/epochs" not in last:  # Tune completes a trial early only when the scheduler stops it
            print(f"[sweep] {self._name(trial)}: stopped early by the scheduler after epoch {last.get('epoch')}",
                  flush=True)
            return
        # Counted from the trials' states, so a resumed sweep counts what finished before it too.
        done = len({t.trial_id for t in trials if t.status == "TERMINATED"
                    and "failed_reason" not in (t.last_result or {})} | {trial.trial_id})
        print(f"[sweep] {self._name(trial)} finished ({done}/{self.total} done)", flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"[sweep] {self._name(trial)} FAILED ({trial.error_file})", flush=True)

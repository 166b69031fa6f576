"""One line per epoch and per finished trial, instead of Ray's full status tables."""
from __future__ import annotations

import time

from ray.tune import Callback


class ProgressCallback(Callback):
    def __init__(self, total: int):
        self.t0 = time.perf_counter()
        self.total = total  # Tune's trial list holds only the trials created so far

    def _name(self, trial) -> str:
        cfg = trial.config.get("trial", trial.config)
        meta = cfg.get("meta", {})
        return f"{meta.get('row') or trial.trial_id} seed {meta.get('seed')}"

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "failed_reason" in result:
            print(f"[sweep] {self._name(trial)}: stopped: {result['failed_reason']}", flush=True)
            return
        val = f" val clean {result['val/clean']:.1f} pgd10 {result['val/pgd10']:.1f}" if "val/pgd10" in result else ""
        print(f"[sweep {time.perf_counter() - self.t0:6.0f}s] {self._name(trial)}: epoch {result.get('epoch')}"
              f"{val} ({result.get('perf/epoch_seconds', 0):.1f}s)", flush=True)

    def on_trial_complete(self, iteration, trials, trial, **info):
        if "failed_reason" in (trial.last_result or {}):
            return  # on_trial_result said why it stopped
        # Counted from the trials' states, so a resumed sweep counts what finished before it too.
        done = len({t.trial_id for t in trials if t.status == "TERMINATED"
                    and "failed_reason" not in (t.last_result or {})} | {trial.trial_id})
        print(f"[sweep] {self._name(trial)} finished ({done}/{self.total} done)", flush=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        print(f"[sweep] {self._name(trial)} FAILED ({trial.error_file})", flush=True)

"""Ray Tune for the sweep's stages: build (or restore) a stage's Tuner, and read what its trials reached.

A grid or confirm stage is a grid search over (config, seed) trials; a search stage is Optuna's define-by-run
sampler with optional ASHA early stopping. Results are read through Ray's public ResultGrid / Result API and
judged against the spec: a trial is finished only when it reported its last epoch (with the test protocol), a
search trial may also have been stopped early by the scheduler, and anything else was cut short.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from .spec import Spec, Trial

PHASES_GRID = ("grid",)
PHASES_SEARCH = ("search", "confirm")


def _run_config(spec: Spec, paths, phase: str, uri: str, max_failures: int, parent_run_id: str | None, total: int,
                total_epochs: int):
    from ray import tune

    from .callback import TrackingCallback
    from .progress import ProgressCallback

    cb = TrackingCallback(uri, spec.name, str(paths.sweep_dir), parent_run_id,
                          artifact_root=str(paths.workdir / "mlartifacts"))
    # A killed driver resumes from Tune's last saved experiment state, which may name a trial's previous
    # checkpoint: keep two, and save that state at least every second ("auto" let it lag by several epochs, and
    # a resume then asked for a checkpoint num_to_keep=1 had deleted).
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    return tune.RunConfig(name=phase, storage_path=str(paths.tune_dir), callbacks=[cb, ProgressCallback(total, total_epochs)],
                          checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                          failure_config=tune.FailureConfig(max_failures=max_failures), verbose=0)


def _meta(spec: Spec, extra: dict) -> dict:
    faults = {v: os.environ[v] for v in ("SSAT_FAULT", "SSAT_FAULT_ONCE_DIR") if os.environ.get(v)}
    return {"sweep": spec.name, "table": spec.table, "column_group": spec.column_group,
            "expected_seeds": spec.expected_seeds, "cpus": spec.resources["cpu"], "gpu": spec.resources["gpu"],
            "metrics": spec.metric, **faults, **extra}


def _reuse_actors() -> bool:
    """Reused actors skip a process start and a torch import per trial (benchmarks/sweep_throughput.py
    measures the difference; SSAT_REUSE_ACTORS=0 turns reuse off)."""
    return os.environ.get("SSAT_REUSE_ACTORS", "1") != "0"


def _trainable(spec: Spec):
    from ray import tune

    from .trainable import train_trial

    return tune.with_resources(train_trial, spec.resources)


def grid_tuner(spec: Spec, trials: list[Trial], paths, phase: str, uri: str, extra: dict, max_failures: int,
               parent_run_id: str | None):
    from ray import tune

    meta = _meta(spec, extra)
    space = [{"meta": {**meta, "stage": t.stage, "row": t.row, "seed": t.seed, **t.spec_meta}, "cfg": t.config.to_dict()}
             for t in trials]
    return tune.Tuner(_trainable(spec), param_space={"trial": tune.grid_search(space)},
                      tune_config=tune.TuneConfig(max_concurrent_trials=spec.max_concurrent, reuse_actors=_reuse_actors()),
                      run_config=_run_config(spec, paths, phase, uri, max_failures, parent_run_id, len(trials),
                                             sum(t.config.optim.epochs for t in trials)))


def search_tuner(spec: Spec, paths, uri: str, extra: dict, max_failures: int, parent_run_id: str | None):
    from optuna.samplers import TPESampler
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from .space import space_function

    s = spec.search
    metric = spec.metric if spec.multi_objective else spec.metric[0]
    mode = spec.mode if spec.multi_objective else spec.mode[0]
    searcher = OptunaSearch(space=space_function(s["space"]), metric=metric, mode=mode,
                            sampler=TPESampler(seed=s["sampler_seed"], multivariate=True, group=True))
    scheduler = None
    meta = _meta(spec, extra)
    if s["early_stopping"]:
        es = s["early_stopping"]
        scheduler = ASHAScheduler(time_attr="epoch", metric=metric, mode=mode, max_t=spec.base["optim"]["epochs"],
                                  grace_period=es["grace_period"], reduction_factor=es["reduction_factor"])
        meta["scheduler"] = "asha"
    param_space = {"meta": {**meta, "stage": "search", "row": "", "seed": spec.seeds[0]}, "base": spec.base}
    return tune.Tuner(_trainable(spec), param_space=param_space,
                      tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler, num_samples=s["num_samples"],
                                                  max_concurrent_trials=spec.max_concurrent, reuse_actors=_reuse_actors()),
                      run_config=_run_config(spec, paths, "search", uri, max_failures, parent_run_id,
                                             s["num_samples"], s["num_samples"] * spec.base["optim"]["epochs"]))


def restore_tuner(phase_dir: Path, spec: Spec, rerun_failed: bool):
    """The stage's Tuner from its saved state (unfinished trials resume from their checkpoints), or None."""
    from ray import tune

    if not tune.Tuner.can_restore(str(phase_dir)):
        return None
    return tune.Tuner.restore(str(phase_dir), trainable=_trainable(spec), resume_errored=True,
                              restart_errored=rerun_failed)


# ---- what the trials reached ---------------------------------------------------------------------------
@dataclass
class TrialOutcome:
    key: str             # the trial's run key (docs/tracking.md)
    state: str           # finished | stopped_early | failed | error | interrupted
    last_epoch: int      # the last epoch it reported (0: none)
    epochs: int          # the epochs its config asks for
    sampled: dict        # the searched parameters (search trials)
    metrics: dict        # its last report
    reason: str = ""


@dataclass
class StageOutcome:
    stage: str
    expected: int
    trials: list[TrialOutcome] = field(default_factory=list)

    def _in(self, *states: str) -> list[TrialOutcome]:
        return [t for t in self.trials if t.state in states]

    @property
    def finished(self) -> list[TrialOutcome]:
        return self._in("finished")

    @property
    def interrupted(self) -> list[TrialOutcome]:
        return self._in("interrupted")

    @property
    def done(self) -> int:
        return len(self.finished)

    @property
    def stopped_early(self) -> int:
        return len(self._in("stopped_early"))

    @property
    def complete(self) -> bool:
        """Grid/confirm: every trial the spec asked for finished. Search: every sample ended on its own
        (finished, stopped early, or failed: the search can still rank the others)."""
        if len(self.trials) != self.expected or self.interrupted:
            return False
        return self.stage == "search" or self.done == self.expected

    @property
    def problems(self) -> list[str]:
        out = [f"{t.key}: {t.state}{': ' + t.reason if t.reason else ''} (epoch {t.last_epoch}/{t.epochs})"
               for t in self.trials if t.state not in ("finished", "stopped_early")]
        if len(self.trials) < self.expected:
            out.append(f"{self.expected - len(self.trials)} trial(s) never started")
        return out


def trial_outcome(config: dict, metrics: dict, error, interrupted: bool, stage: str) -> TrialOutcome:
    """Judge one trial by its config and last report, never by Tune's status: Tune marks trials it stopped
    on Ctrl+C as TERMINATED like finished ones."""
    from .trainable import resolve_trial

    cfg, meta = resolve_trial(config)
    last = int(metrics.get("epoch") or 0)
    epochs = cfg.optim.epochs
    if error is not None:
        state, reason = "error", str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    elif "failed_reason" in metrics:
        state, reason = "failed", metrics["failed_reason"]
    elif last >= epochs and "time/epochs" in metrics:
        state, reason = "finished", ""
    elif interrupted:
        state, reason = "interrupted", "Ctrl+C"
    elif stage == "search" and meta.get("scheduler") and last >= 1:
        state, reason = "stopped_early", f"{meta['scheduler']} at epoch {last}"
    else:
        state, reason = "interrupted", "ended before its last epoch"
    return TrialOutcome(meta["trial_key"], state, last, epochs, meta["sampled"], metrics, reason)


def stage_outcome(results, stage: str, expected: int, interrupted: bool) -> StageOutcome:
    """Every trial of a stage's ResultGrid, judged against the spec."""
    out = StageOutcome(stage, expected)
    for r in results:
        out.trials.append(trial_outcome(r.config, r.metrics or {}, r.error, interrupted, stage))
    return out


def top_configs(finished: list[TrialOutcome], spec: Spec) -> list[dict]:
    """Sampled configurations to confirm, from trials that ran their full epochs only (never a partial run):
    top-k by the metric, or Pareto-front members thinned by crowding distance."""
    rows, seen = [], set()
    for t in finished:
        vals = [t.metrics.get(m) for m in spec.metric]
        if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals):
            continue
        key = json.dumps(t.sampled, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        rows.append(([v if mode == "max" else -v for v, mode in zip(vals, spec.mode)], t.sampled))
    k = spec.search["confirm"]["top_k"]
    if not spec.multi_objective:
        rows.sort(key=lambda r: -r[0][0])
        return [s for _, s in rows[:k]]
    from .pareto import crowding_thin, pareto_front

    front = pareto_front([r[0] for r in rows])
    keep = crowding_thin([rows[i][0] for i in front], k)
    return [rows[front[i]][1] for i in keep]


def confirm_trials(spec: Spec, configs: list[dict]) -> list[Trial]:
    seeds = spec.search["confirm"]["seeds"]
    return [Trial(spec.config_for(c, s), f"confirm-{i + 1}", "confirm", s) for i, c in enumerate(configs) for s in seeds]

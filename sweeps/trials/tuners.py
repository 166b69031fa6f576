"""Ray Tune for the sweep's stages: build a stage's Tuner, or restore the one a driver before saved.

A grid or confirm stage is a grid search over (config, seed) trials; a search stage is Optuna's define-by-run
sampler with optional ASHA early stopping. A resumed grid or confirm stage continues, as a stage of its own, the
trials Tune completed before their last epoch (`continue_short`). What each trial is given comes from
`sweeps.trials.trial_settings`; what the trials reached is judged in `sweeps.trials.outcomes`.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..spec import Spec, Trial
from .outcomes import trial_outcome
from .trial_settings import continuation_space, grid_space, resolve_trial, search_space


def _run_config(spec: Spec, paths, phase: str, uri: str, max_failures: int, parent_run_id: str | None, total: int,
                total_epochs: int, study: tuple[str, str] | None = None):
    from ray import tune

    from .mlflow_callback import TrackingCallback
    from .progress_callback import ProgressCallback

    cb = TrackingCallback(uri, spec.name, str(paths.sweep_dir), parent_run_id,
                          artifact_root=str(paths.artifact_root), study=study)
    # A killed driver resumes from Tune's last saved experiment state, which may name a trial's previous
    # checkpoint: keep two, and save that state at least every second ("auto" let it lag by several epochs, and
    # a resume then asked for a checkpoint num_to_keep=1 had deleted).
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    return tune.RunConfig(name=phase, storage_path=str(paths.tune_dir),
                          callbacks=[cb, ProgressCallback(total, total_epochs)],
                          checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                          failure_config=tune.FailureConfig(max_failures=max_failures), verbose=0)


def _reuse_actors() -> bool:
    """Reused actors skip a process start and a torch import per trial (benchmarks/sweep_throughput.py
    measures the difference; SSAT_REUSE_ACTORS=0 turns reuse off)."""
    return os.environ.get("SSAT_REUSE_ACTORS") != "0"


def _tune_config(spec: Spec, **search):
    """Every stage's TuneConfig: the spec's concurrency, actors reused; a search's `search_alg`, `scheduler` and
    `num_samples` in `search`."""
    from ray import tune

    return tune.TuneConfig(max_concurrent_trials=spec.max_concurrent, reuse_actors=_reuse_actors(), **search)


def _trainable(spec: Spec):
    """The trainable of every stage, new or restored: `SweepTrainable` (train_trial with a restore that checks the
    checkpoint in storage first) with the spec's resources."""
    from ray import tune

    from .trainable import SweepTrainable

    return tune.with_resources(SweepTrainable, spec.resources)


def grid_tuner(spec: Spec, trials: list[Trial], paths, phase: str, uri: str, extra: dict, max_failures: int,
               parent_run_id: str | None):
    from ray import tune

    return tune.Tuner(_trainable(spec), param_space=grid_space(spec, trials, extra), tune_config=_tune_config(spec),
                      run_config=_run_config(spec, paths, phase, uri, max_failures, parent_run_id, len(trials),
                                             sum(t.config.optim.epochs for t in trials)))


def continuation_tuner(spec: Spec, short: list[tuple[dict, str]], paths, phase: str, uri: str, max_failures: int,
                       parent_run_id: str | None, epochs_left: int):
    """A stage's trials that Tune completed before their last epoch, continued from their last checkpoints as new
    trials of the same configs (`sweeps.trials.trial_settings.continuation_space`), under `phase` (or restored from
    it)."""
    from ray import tune

    if tune.Tuner.can_restore(str(paths.tune_dir / phase)):
        return tune.Tuner.restore(str(paths.tune_dir / phase), trainable=_trainable(spec), resume_errored=True)
    return tune.Tuner(_trainable(spec), param_space=continuation_space(short), tune_config=_tune_config(spec),
                      run_config=_run_config(spec, paths, phase, uri, max_failures, parent_run_id, len(short),
                                             epochs_left))


def search_tuner(spec: Spec, paths, uri: str, extra: dict, max_failures: int, parent_run_id: str | None,
                 study_url: str):
    """The search stage: Optuna's TPE sampler on the sweep's persisted study (`sweeps.trials.study`), named after the
    sweep, with optional ASHA early stopping."""
    import functools

    from optuna.samplers import TPESampler
    from optuna.storages import RDBStorage
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from ..space import space_function
    from .study import SweepSearch, search_identity, study_attrs

    s = spec.search
    metric = spec.metric if spec.multi_objective else spec.metric[0]
    mode = spec.mode if spec.multi_objective else spec.mode[0]
    searcher = SweepSearch(space=space_function(s["space"]), metric=metric, mode=mode,
                           sampler=TPESampler(seed=s["sampler_seed"], multivariate=True, group=True),
                           storage=RDBStorage(study_url), study_name=spec.name,
                           identify=functools.partial(search_identity, base=spec.base, seed=spec.seeds[0],
                                                      sweep=spec.name),
                           study_attrs=study_attrs(spec, uri))
    scheduler = None
    if s["early_stopping"]:
        es = s["early_stopping"]
        scheduler = ASHAScheduler(time_attr="epoch", metric=metric, mode=mode, max_t=spec.base["optim"]["epochs"],
                                  grace_period=es["grace_period"], reduction_factor=es["reduction_factor"])
    param_space = search_space(spec, extra, scheduler="asha" if scheduler else None)
    # An epoch without validation (eval.val_every > 1) reports no metric: Tune's check would fail the trial. The
    # spec's metric is checked against the trainer's metric names before anything starts (sweeps.metrics).
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    return tune.Tuner(_trainable(spec), param_space=param_space,
                      tune_config=_tune_config(spec, search_alg=searcher, scheduler=scheduler,
                                               num_samples=s["num_samples"]),
                      run_config=_run_config(spec, paths, "search", uri, max_failures, parent_run_id,
                                             s["num_samples"], s["num_samples"] * spec.base["optim"]["epochs"],
                                             study=(study_url, spec.name)))


def restore_tuner(phase_dir: Path, spec: Spec, rerun_failed: bool):
    """The stage's Tuner from its saved state, or None. Unfinished trials resume from their checkpoints, and so
    do failed (errored) ones; with rerun_failed those start over instead (a trial whose checkpoints are all
    damaged fails until then). Tune's resume_errored wins over restart_errored: only one of them is passed."""
    from ray import tune

    if not tune.Tuner.can_restore(str(phase_dir)):
        return None
    return tune.Tuner.restore(str(phase_dir), trainable=_trainable(spec), resume_errored=not rerun_failed,
                              restart_errored=rerun_failed)


def continue_short(results, stage: str, spec: Spec, paths, uri: str, max_failures: int,
                   parent_run_id: str | None, log) -> list:
    """A resumed grid or confirm stage's results, with each trial that Tune completed before its last epoch (and
    would never run again: its run KILLED, the stage incomplete at every resume) continued from its last checkpoint
    in a stage of its own (`<stage>-continued`) and its result replaced by the continuation's."""
    results = list(results)
    short = [(i, trial_outcome(r.config, r.metrics or {}, r.error, False, stage)) for i, r in enumerate(results)]
    short = [(i, t) for i, t in short if t.state == "interrupted"]
    if not short:
        return results
    log(f"[resume] {len(short)} trial(s) of stage {stage} ended before their last epoch without an error or a stop ("
        + ", ".join(f"{t.name} at epoch {t.last_epoch} of {t.epochs}" for _, t in short)
        + "): continuing them from their last checkpoints")
    todo = [(results[i].config, results[i].checkpoint.path if results[i].checkpoint else "") for i, _ in short]
    tuner = continuation_tuner(spec, todo, paths, f"{stage}-continued", uri, max_failures, parent_run_id,
                               sum(t.epochs - t.last_epoch for _, t in short))
    by_key = {resolve_trial(r.config)[1]["trial_key"]: r for r in tuner.fit()}
    for i, t in short:
        results[i] = by_key.get(t.key, results[i])
    return results

"""Small sweep specs and MLflow readers shared by the integration tests."""
from __future__ import annotations

from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

TINY_OVERRIDES = {
    "data.n_unlabeled": 100, "data.n_val": 40, "eval.test_n": 40, "eval.pgd_steps": [10], "eval.autoattack": False,
    "eval.batch_size": 200, "teacher.steps": 20, "teacher.eval_every": 10, "optim.lr_milestones": [],
    "optim.lr_factors": [], "system.threads": 1,
}


def write_spec(path: Path, name: str, *, epochs: int = 2, seeds=(0,), rows=None, resources=None, max_concurrent=2,
               overrides=None, search=None, metric="val/pgd10") -> Path:
    spec = {"name": name, "preset": "mnist5k-ssat-mbi", "table": "ablation", "column_group": "mnist5k/cnn-small",
            "epochs": epochs, "overrides": {**TINY_OVERRIDES, **(overrides or {})}, "seeds": list(seeds),
            "resources": resources or {"cpu": 1, "gpu": 0}, "max_concurrent": max_concurrent, "metric": metric}
    if search:
        spec["search"] = search
    else:
        spec["grid"] = rows or [{"row": "curious|on", "set": {"attack.schedule": "curious", "attack.t": 1}}]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def trial_runs(uri: str, sweep: str, stage: str | None = None):
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name(sweep)
    assert exp is not None, f"no experiment {sweep}"
    flt = "tags.`ssat.kind` = 'trial'" + (f" and tags.`ssat.stage` = '{stage}'" if stage else "")
    return c.search_runs([exp.experiment_id], flt, max_results=1000)


def history(uri: str, run, metric: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run.info.run_id, metric)]


def epoch_histories(uri: str, run) -> dict[str, list[tuple[int, float]]]:
    """Every per-epoch metric but wall-clock ones, step -> value."""
    keys = [k for k in run.data.metrics if k.startswith(("train/", "val/", "adv/", "sched/"))]
    return {k: sorted(history(uri, run, k)) for k in keys}


def study_trials(workdir: Path, sweep: str) -> list:
    """The search's persisted Optuna study (sweeps.trials.study): its trials, as optuna-dashboard reads them."""
    import optuna

    url = f"sqlite:///{Path(workdir).resolve() / 'runs' / 'sweeps' / sweep / 'optuna.db'}"
    return optuna.load_study(study_name=sweep, storage=url).get_trials(deepcopy=False)


def check_study_mirrors_the_store(workdir: Path, uri: str, sweep: str) -> list:
    """Every search run of the store has exactly one study trial, found by its MLflow key and linked to its run id,
    with the run's name and the run's per-epoch metric as intermediate values; a study trial with no run is one
    Tune never ran (FAIL, `never_ran`). Returns the study trials that ran."""
    runs = {r.data.tags["ssat.key"]: r for r in trial_runs(uri, sweep, "search")}
    trials = study_trials(workdir, sweep)
    ran = [t for t in trials if "never_ran" not in t.user_attrs]
    assert all(t.state.name == "FAIL" for t in trials if t not in ran)
    assert sorted(t.user_attrs["ssat_key"] for t in ran) == sorted(runs), (len(ran), len(runs))  # none twice
    for t in ran:
        run = runs[t.user_attrs["ssat_key"]]
        assert t.user_attrs["mlflow_run_id"] == run.info.run_id and t.user_attrs["name"] == run.info.run_name
        assert t.intermediate_values == dict(history(uri, run, "val/pgd10")), (t.number, t.state, t.intermediate_values,
                                                                                history(uri, run, "val/pgd10"))
        assert t.state.name in ("COMPLETE", "PRUNED"), t.state
    return ran

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

"""The link a sweep prints to its trials in MLflow's UI: the runs table in the model-training view, with the
sweep's columns, sorted as its table or ranking reads (a saved view, written as an experiment tag)."""
from __future__ import annotations

import json
import time
import urllib.parse

from mlflow.tracking import MlflowClient

# What MLflow 3.17.2's runs page takes from its URL (its JavaScript bundle): the view (`workflowType`), the search
# (`searchFilter`, `orderByKey`, `orderByAsc`, `startTime`, `lifecycleFilter`, `modelVersionFilter`, `datasetsFilter`),
# the tab (`compareRunsMode`: table, charts, ...) and `viewStateShareKey`; no columns, no expanded rows. Sorted by
# anything but creation time, or filtered, the table lists child runs flat; sorted by creation (the default) it folds
# them under their parent. The columns live in the browser's local storage, or in a saved view: an experiment tag
# `mlflow.sharedViewState.<key>` holding `{"name", "createdAt", "state"}` (what the page's "Save view" writes), that
# `?viewStateShareKey=<key>` opens, unless search parameters are in the URL too. MLflow documents neither; the
# integration test renders the link in a real Chromium (tests/integration/test_mlflow_ui.py) and pins what it
# shows. With `store`, ui_url saves such a view (once per column list, then left as it is: a user may change it)
# and links it; a key that is not there lands on the GenAI overview with an error, so without a saved view the
# link only sorts.
TABLE_METRICS = ("test/best/clean", "test/best/pgd20", "val/pgd10")


def link_columns(spec) -> tuple[list[str], list[str], str | None]:
    """(parameters, metrics, the metric to sort by, best first; None: by name) that a sweep's link shows: for a
    search, its metric(s), the sampled parameters and the confirm trials' test accuracies, by its first metric;
    for a grid, the table's metrics and the grid's factors (the keys its rows set), by name."""
    if spec.search:
        metrics = [*spec.metric, *(m for m in TABLE_METRICS[:2] if m not in spec.metric)]
        return list(spec.search["space"]), metrics, spec.metric[0]
    factors = list(dict.fromkeys(k for row in spec.grid for k in row["set"]))
    return factors, list(TABLE_METRICS), None


def ui_url(experiment_id: str, base: str = "http://127.0.0.1:5000", metrics: tuple[str, ...] = TABLE_METRICS,
           store: str | None = None, spec=None) -> str:
    """The MLflow UI page listing an experiment's runs, in the model-training view (not the GenAI overview), the
    trials flat and sorted by name (a row's seeds side by side). With `store` (the experiment's tracking URI) the
    page also shows `metrics` as columns, first after the names, and all trials in the charts: a view saved in the
    experiment, which the UI also lists under its views menu; if it cannot be saved, the link without it. With
    `spec` (the sweep's), its columns are `link_columns(spec)`: a search's sorted by its metric, best first."""
    runs = f"{base}/#/experiments/{experiment_id}/runs?"
    params, sort_by = [], None
    if spec is not None:
        params, metrics, sort_by = link_columns(spec)
        descending = sort_by is not None and spec.mode[0] == "max"
    order = ({"orderByKey": f"metrics.`{sort_by}`", "orderByAsc": not descending} if sort_by
             else {"orderByKey": "tags.`mlflow.runName`", "orderByAsc": True})
    plain = runs + "workflowType=machine_learning&" + urllib.parse.urlencode(order).replace("True", "true") \
        .replace("False", "false")
    if store is None or not (metrics or params):
        return plain
    import hashlib
    from mlflow.exceptions import MlflowException

    columns = [f"metrics.`{m}`" for m in metrics] + [f"params.`{k}`" for k in params]  # first, next to the names
    widths = {c: max(100, 8 * len(n) + 30) for c, n in zip(columns, [*metrics, *params])}
    state = json.dumps({**order, "selectedColumns": columns, "columnOrder": columns, "runsHiddenMode": "SHOW_ALL",
                        "columnWidths": widths}, separators=(",", ":"))
    key = "ssat-" + hashlib.sha1(state.encode()).hexdigest()[:10]
    tag = f"mlflow.sharedViewState.{key}"
    name = (f"Search: {metrics[0]} (best first), sampled parameters" if sort_by
            else "Trials: " + ", ".join(metrics) + (" and the grid's factors" if params else ""))
    try:
        client = MlflowClient(store)
        if tag not in client.get_experiment(experiment_id).tags:
            view = {"name": name, "createdAt": int(time.time() * 1000), "state": state}
            client.set_experiment_tag(experiment_id, tag, json.dumps(view))
    except (MlflowException, OSError):
        return plain
    return f"{runs}workflowType=machine_learning&viewStateShareKey={key}"

"""Every experiment the project creates or reuses is marked as model development; the UI links name the view,
list the trials flat and, given the store, open a saved view with the table's metric columns (the page itself is
checked in a real browser by tests/integration/test_mlflow_ui.py)."""
import json
import os
import re
import time
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from sweeps.tracking.tracker import Tracker
from sweeps.tracking.ui_link import ui_url

KIND = ("mlflow.experimentKind", "custom_model_development")


def test_created_and_reused_experiments_carry_the_kind(store, tmp_path):
    uri = store
    client = MlflowClient(uri)
    made = Tracker(uri, "made", log=lambda s: None).experiment_id
    assert client.get_experiment(made).tags[KIND[0]] == KIND[1]
    old = client.create_experiment("old", tags={KIND[0]: "genai_development"})  # e.g. a store written before
    assert Tracker(uri, "old", log=lambda s: None).experiment_id == old
    assert client.get_experiment(old).tags[KIND[0]] == KIND[1]


def test_the_ui_link_opens_the_runs_in_the_model_training_view():
    # sorted by name, not by creation: the table then lists the trials flat instead of folded under the parent
    assert ui_url("7") == ("http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
                           "&orderByKey=tags.%60mlflow.runName%60&orderByAsc=true")
    assert ui_url("7", "http://127.0.0.1:5001").startswith("http://127.0.0.1:5001/#/experiments/7/runs?")


def test_with_the_store_the_link_opens_a_saved_view_of_the_metric_columns(store, tmp_path):
    uri = store
    exp = Tracker(uri, "sweep", log=lambda s: None).experiment_id
    url = ui_url(exp, store=uri)
    key = re.fullmatch(rf"http://127\.0\.0\.1:5000/#/experiments/{exp}/runs\?workflowType=machine_learning"
                       r"&viewStateShareKey=(ssat-[0-9a-f]{10})", url).group(1)
    tags = MlflowClient(uri).get_experiment(exp).tags
    view = json.loads(tags[f"mlflow.sharedViewState.{key}"])  # the envelope the UI's "Save view" writes
    assert view["name"] == "Trials: test/best/clean, test/best/pgd20, val/pgd10" and isinstance(view["createdAt"], int)
    assert abs(view["createdAt"] - time.time() * 1000) < 60_000  # milliseconds since the epoch, as the UI writes it
    assert view["state"] == json.dumps(json.loads(view["state"]), separators=(",", ":"))  # compact: JSON.stringify's
    columns = ["metrics.`test/best/clean`", "metrics.`test/best/pgd20`", "metrics.`val/pgd10`"]
    assert json.loads(view["state"]) == {
        "orderByKey": "tags.`mlflow.runName`", "orderByAsc": True, "runsHiddenMode": "SHOW_ALL",
        "selectedColumns": columns, "columnOrder": columns, "columnWidths": dict(zip(columns, [150, 150, 102]))}
    # printed again (a resumed demo): the same link, the view kept as it is (a user may have changed it in the UI)
    MlflowClient(uri).set_experiment_tag(exp, f"mlflow.sharedViewState.{key}", json.dumps({**view, "name": "mine"}))
    assert ui_url(exp, store=uri) == url
    assert json.loads(MlflowClient(uri).get_experiment(exp).tags[f"mlflow.sharedViewState.{key}"])["name"] == "mine"
    # another metric list is another view; a store without the experiment gets the link without a view
    other = ui_url(exp, "http://127.0.0.1:5001", metrics=("test/best/autoattack",), store=uri)
    assert other.startswith("http://127.0.0.1:5001/") and "viewStateShareKey=ssat-" in other and key not in other
    assert ui_url("999", store=uri) == ui_url("999")
    assert ui_url(exp, store=uri, metrics=()) == ui_url(exp)  # no metric columns: no view to save
    short = ui_url(exp, metrics=("acc",), store=uri).split("viewStateShareKey=")[1]
    saved = MlflowClient(uri).get_experiment(exp).tags[f"mlflow.sharedViewState.{short}"]
    state = json.loads(json.loads(saved)["state"])
    assert state["columnWidths"] == {"metrics.`acc`": 100}  # a short name's column is no narrower than 100 px


def test_the_installed_ui_reads_the_view_and_the_facets_the_links_use():
    """The names ui_url relies on are in MLflow's UI bundle (an upgrade that renames them fails here, without a
    browser): the share key parameter and tag prefix, the URL parameters the runs page reads, the keys a view's
    state may set, the sort key of the run name and the charts' show-all mode."""
    js = "".join(p.read_text(errors="replace")
                 for p in sorted((Path(mlflow.__file__).parent / "server/js/build/static/js").glob("*.js")))
    for name in ('"viewStateShareKey"', '"mlflow.sharedViewState."', 'RUN_NAME:"tags.`mlflow.runName`"',
                 'e.SHOWALL="SHOW_ALL"', '["searchFilter","orderByKey","orderByAsc","startTime","lifecycleFilter",'
                 '"modelVersionFilter","datasetsFilter"]'):
        assert name in js, f"{name} is no longer in MLflow's UI bundle"
    state_keys = re.search(r'\["selectedColumns","columnOrder",[^\]]*\]', js).group(0)
    assert '"columnWidths"' in state_keys and '"runsHiddenMode"' in state_keys


def _spec(kind: str):
    from sweeps.spec import parse_spec

    if kind == "search":
        return parse_spec({"name": "s", "preset": "mnist5k-ssat-mbi", "metric": "train/loss", "mode": "min",
                           "search": {"space": {"attack.schedule": {"choice": ["const", "linear"]},
                                                "method.beta": {"float": [0.0, 1.0]}},
                                      "confirm": {"top_k": 1, "seeds": [9]}}})
    return parse_spec({"name": "g", "preset": "mnist5k-ssat-mbi", "grid": [
        {"row": "a", "set": {"attack.schedule": "const", "method.interpolate": False}},
        {"row": "b", "set": {"method.beta": 0.5, "attack.schedule": "linear"}}]})


def test_a_search_link_shows_its_metric_and_sampled_parameters_best_first(store, tmp_path):
    """The MLflow link of a search sorts by the spec's metric in its direction and shows it, the sampled
    parameters and the confirm trials' test accuracies as columns: no column to tick by hand."""
    from sweeps.tracking.ui_link import link_columns

    spec = _spec("search")
    assert link_columns(spec) == (["attack.schedule", "method.beta"],
                                  ["train/loss", "test/best/clean", "test/best/pgd20"], "train/loss")
    assert ui_url("7", spec=spec) == ("http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
                                      "&orderByKey=metrics.%60train%2Floss%60&orderByAsc=true")  # min: ascending
    uri = store
    exp = Tracker(uri, "s", log=lambda s: None).experiment_id
    key = ui_url(exp, store=uri, spec=spec).split("viewStateShareKey=")[1]
    view = json.loads(MlflowClient(uri).get_experiment(exp).tags[f"mlflow.sharedViewState.{key}"])
    state = json.loads(view["state"])
    columns = ["metrics.`train/loss`", "metrics.`test/best/clean`", "metrics.`test/best/pgd20`",
               "params.`attack.schedule`", "params.`method.beta`"]
    assert (state["orderByKey"], state["orderByAsc"], state["selectedColumns"], state["columnOrder"]) == (
        "metrics.`train/loss`", True, columns, columns)
    assert view["name"] == "Search: train/loss (best first), sampled parameters"


def test_a_grid_link_shows_the_table_metrics_and_the_grids_factors_by_name(store, tmp_path):
    from sweeps.tracking.ui_link import link_columns

    spec = _spec("grid")
    assert link_columns(spec) == (["attack.schedule", "method.interpolate", "method.beta"],
                                  ["test/best/clean", "test/best/pgd20", "val/pgd10"], None)
    assert ui_url("7", spec=spec) == ui_url("7")  # by name, as before
    uri = store
    exp = Tracker(uri, "g", log=lambda s: None).experiment_id
    key = ui_url(exp, store=uri, spec=spec).split("viewStateShareKey=")[1]
    view = json.loads(MlflowClient(uri).get_experiment(exp).tags[f"mlflow.sharedViewState.{key}"])
    assert view["name"] == "Trials: test/best/clean, test/best/pgd20, val/pgd10 and the grid's factors"
    state = json.loads(view["state"])
    assert state["selectedColumns"][3:] == ["params.`attack.schedule`", "params.`method.interpolate`",
                                            "params.`method.beta`"]


def test_a_store_wedged_by_a_cut_migration_is_named_with_its_fix(tmp_path):
    from sweeps.tracking.tracker import _wedged

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    said = _wedged(uri, Exception("(sqlite3.OperationalError) table _alembic_tmp_endpoints already exists"))
    assert said == (f". Its tables were left half-made by a stop while MLflow created them: if no sweep wrote to "
                    f"{tmp_path / 'mlflow.db'} (a new store), delete that file and start again; `mlflow db upgrade` "
                    "cannot mend it")
    assert _wedged(uri, Exception("database is locked")) == ""
    assert _wedged("postgresql://h/db", Exception("_alembic_tmp_x")) == ""


def test_a_new_sqlite_store_is_made_beside_it_and_renamed_whole(tmp_path, monkeypatch):
    import sweeps.tracking.tracker as tracking

    db = tmp_path / "mlflow.db"
    seen = []
    real = tracking.MlflowClient

    def client(uri):
        seen.append(uri)
        assert not db.exists() or db.stat().st_size == 0  # the store's own name holds nothing until it is whole
        return real(uri)

    monkeypatch.setattr(tracking, "MlflowClient", client)
    tracking.new_sqlite_store(f"sqlite:///{db}")
    assert seen == [f"sqlite:///{tmp_path / f'.mlflow.db.creating-{os.getpid()}'}"]
    assert db.stat().st_size > 0 and list(tmp_path.iterdir()) == [db]
    real(f"sqlite:///{db}").create_experiment("x")
    tracking.new_sqlite_store(f"sqlite:///{db}")  # a store with its tables: left as it is
    assert len(seen) == 1


def test_a_maximised_search_metric_is_sorted_descending_and_a_view_without_factors_says_so(store):
    from sweeps.spec import parse_spec

    spec = parse_spec({"name": "s", "preset": "mnist5k-ssat-mbi", "metric": "val/pgd10", "mode": "max",
                       "search": {"space": {"method.beta": {"float": [0.0, 1.0]}},
                                  "confirm": {"top_k": 1, "seeds": [9]}}})
    assert ui_url("7", spec=spec) == ("http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
                                      "&orderByKey=metrics.%60val%2Fpgd10%60&orderByAsc=false")  # max: best first
    exp = Tracker(store, "s", log=lambda s: None).experiment_id
    key = ui_url(exp, store=store, metrics=("acc",)).split("viewStateShareKey=")[1]
    view = json.loads(MlflowClient(store).get_experiment(exp).tags[f"mlflow.sharedViewState.{key}"])
    assert view["name"] == "Trials: acc"  # no grid factors: none named

"""analysis.collect: typing of string params, and the Ray results folder reader (no MLflow needed)."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.collect import SourceError, load_ray_history, load_ray_runs, runs_frame, typed
from analysis.collect import legacy_spec_params
from analysis.legacy import LEGACY_PARAM_NAMES, current_param_names
from analysis.export import export
from analysis.run_labels import LabelError, schedule_label

ROOT = Path(__file__).resolve().parents[3]


def test_typed_turns_mlflow_strings_into_numbers_booleans_and_missing():
    assert typed(pd.Series(["70", "None", "60"])).tolist() == [70, pd.NA, 60]
    assert str(typed(pd.Series(["70", "None"])).dtype) == "Int64"
    assert typed(pd.Series(["0.4", "1.0"])).tolist() == [0.4, 1.0]
    assert typed(pd.Series(["True", "False", "None"])).tolist() == [True, False, pd.NA]
    assert typed(pd.Series(["linear", "None"])).tolist() == ["linear", None]
    assert typed(pd.Series(["None", None])).isna().all()
    # the same values as Ray's JSON types give the same column
    assert typed(pd.Series([70, None, 60], dtype=object)).equals(typed(pd.Series(["70", "None", "60"])))
    assert typed(pd.Series([True, False], dtype=object)).equals(typed(pd.Series(["True", "False"])))
    assert typed(pd.Series([1.0, 0.4], dtype=object)).equals(typed(pd.Series(["1.0", "0.4"])))


PROTO = json.dumps({"attack": "pgd20", "eps": 0.3, "norm": "Linf", "step": 0.03, "steps": 20, "restarts": 1,
                    "n": 1000, "subset": "full", "precision": "fp32", "checkpoint": "best"})


def record(key, tags, params):
    """A run record as the trainable reports it (sweeps.schema.RunRecord as JSON)."""
    return json.dumps({"key": key, "tags": {f"ssat.{k}": v for k, v in tags.items()}, "params": params,
                       "name": key})


def write_trial(root, name, lines, run_json=None):
    d = root / name
    d.mkdir(parents=True)
    (d / "params.json").write_text(json.dumps({"meta": {"sweep": "ignored"}, "cfg": {"x": 1}}))
    lines = [{**line, "run_json": run_json} if run_json else line for line in lines]
    (d / "result.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return d


TAGS = {"kind": "trial", "key": "sweep-x-abc123abc123-s1-demo", "sweep": "sweep-x", "stage": "demo",
        "table": "ablation", "row": "Cur.|int", "column_group": "mnist5k/cnn-small", "seed": 1,
        "expected_seeds": 3, "config_hash": "abc123abc123"}
PARAMS = {"method.name": "ssat-mbi", "attack.schedule": "curious", "attack.t": 7, "attack.gamma": 1.25,
          "method.interpolate": True, "method.rho_double_epoch": None, "method.beta": 0.4, "data.dataset": "mnist5k",
          "optim.epochs": 2, "spec.epochs": 10, "spec.t": 7}


@pytest.fixture
def ray_dir(tmp_path):
    root = tmp_path / "sweep-x"
    lines = [{"training_iteration": 1, "val/clean": 50.0, "sched/eps_max": 0.1, "config": {"a": 1}},
             {"training_iteration": 2, "val/clean": 60.0, "sched/eps_max": 0.2, "done": True,
              "test/best/pgd20": 40.5, "protocol/best/pgd20": PROTO, "time/total_hours": 0.01}]
    write_trial(root, "trial_0", lines, record(TAGS["key"], TAGS, PARAMS))
    nested = [{"epoch": 1, "val": {"clean": 55.0}},
              {"epoch": 2, "val": {"clean": 65.0}, "test": {"best": {"pgd20": 41.0}},
               "protocol": {"best": {"pgd20": json.loads(PROTO)}}}]
    key2 = "sweep-x-abc123abc123-s2-demo"
    write_trial(root, "sub/trial_1", nested, record(key2, {**TAGS, "key": key2, "seed": 2}, PARAMS))
    return root


def test_ray_folder_reads_like_the_contract(ray_dir):
    runs = load_ray_runs(ray_dir)
    assert list(runs["run_id"]) == ["sub/trial_1", "trial_0"]
    r = runs.set_index("run_id").loc["trial_0"]
    assert r["experiment"] == "sweep-x" and r["meta.kind"] == "trial" and r["meta.status"] == "FINISHED"
    assert r["source"] == "ray" and r["run_name"] == "trial_0" and pd.isna(r["start_time"])
    assert r["meta.key"] == "sweep-x-abc123abc123-s1-demo" and r["meta.config_hash"] == "abc123abc123"
    assert r["meta.seed"] == 1 and r["param.attack.t"] == 7 and r["param.spec.epochs"] == 10
    assert r["metric.val/clean"] == 60.0 and r["metric.test/best/pgd20"] == 40.5
    assert r["param.method.interpolate"] == True and pd.isna(r["param.method.rho_double_epoch"])  # noqa: E712
    assert json.loads(r["protocol.best/pgd20"])["steps"] == 20
    nested = runs.set_index("run_id").loc["sub/trial_1"]
    assert nested["metric.test/best/pgd20"] == 41.0 and json.loads(nested["protocol.best/pgd20"])["eps"] == 0.3
    assert "metric.config/a" not in runs and "metric.training_iteration" not in runs


def test_analysis_reads_and_renders_without_torch_or_ray(ray_dir):
    """analysis/ is pandas/matplotlib/MLflow client only: importing it and reading a Ray results folder
    must not pull in torch, ray or optuna (nor ssat, whose __init__ imports torch)."""
    code = ("import sys; import analysis.tables, analysis.plots, analysis.export; "
            "from analysis.collect import load_ray_runs; load_ray_runs(sys.argv[1]); "
            "print(sorted(m for m in ('torch', 'ray', 'optuna', 'ssat') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(ray_dir)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_ray_history_is_long_per_epoch(ray_dir):
    hist = load_ray_history(ray_dir)
    one = hist[(hist["run_id"] == "trial_0") & (hist["key"] == "val/clean")]
    assert one["step"].tolist() == [1, 2] and one["value"].tolist() == [50.0, 60.0]
    assert set(hist["key"]) == {"val/clean", "sched/eps_max"}  # test/ and time/ are final, not history


def test_ray_params_type_like_mlflow_strings(ray_dir):
    ray = load_ray_runs(ray_dir).set_index("run_id").loc[["trial_0"]]
    as_strings = {k: (str(v) if k.startswith(("meta.", "param.")) and v is not None and not pd.isna(v) else v)
                  for k, v in ray.reset_index().iloc[0].to_dict().items()}
    as_strings["param.method.rho_double_epoch"] = "None"
    mlflow_like = runs_frame([as_strings]).set_index("run_id")
    for col in [c for c in ray.columns if c.startswith(("meta.", "param."))]:
        assert mlflow_like[col].dtype == ray[col].dtype, col
        assert mlflow_like[col].equals(ray[col]), col


def test_missing_ray_folder_says_so(tmp_path):
    with pytest.raises(SourceError, match="does not exist"):
        load_ray_runs(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no trial folders"):
        load_ray_runs(tmp_path / "empty")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_keeps_numbers_as_numbers(ray_dir, tmp_path, fmt):
    runs, hist = load_ray_runs(ray_dir), load_ray_history(ray_dir)
    paths = export(runs, hist, "sweep-x", tmp_path / "out", fmt)
    read = pd.read_parquet if fmt == "parquet" else pd.read_csv
    back, h = read(paths["runs"]), read(paths["history"])
    assert len(back) == 2 and len(h) == len(hist)
    assert pd.api.types.is_float_dtype(back["metric.test/best/pgd20"])
    assert pd.api.types.is_integer_dtype(back["param.attack.t"])
    assert pd.api.types.is_float_dtype(back["param.method.beta"])
    assert pd.api.types.is_bool_dtype(back["param.method.interpolate"])
    assert pd.api.types.is_integer_dtype(h["step"]) and pd.api.types.is_float_dtype(h["value"])


def test_a_folder_without_the_run_record_is_refused_and_a_trial_that_never_reported_is_skipped(tmp_path):
    root = tmp_path / "old"
    write_trial(root, "trial_0", [{"epoch": 1, "val/clean": 50.0}])  # written before the run record
    with pytest.raises(SourceError, match=r"trial_0'? has no run record \(no 'run_json' in its result.json\).*"
                                          r"--experiment NAME"):
        load_ray_runs(root)
    root = tmp_path / "new"
    write_trial(root, "trial_0", [{"epoch": 1, "val/clean": 50.0}], record(TAGS["key"], TAGS, PARAMS))
    write_trial(root, "trial_1", [])  # cut before its first report: MLflow has no run for it either
    assert load_ray_runs(root)["run_id"].tolist() == ["trial_0"]


def _legacy(method="ssat-mbi", dataset="cifar10", **params):
    """A run recorded before issue 27 (the short parameter names), read under today's names first."""
    rec = {"run_id": "r", "param.method": method, "param.dataset": dataset,
           **{f"param.{k}": v for k, v in params.items()}}
    return legacy_spec_params(current_param_names(rec))


def test_legacy_spec_params_infer_the_paper_run_a_shortened_run_came_from():
    # 10 of 100 epochs: 50, 60, 70 scale to 5, 6, 7, one each
    assert _legacy(t="6", epochs="10") == {"param.spec.epochs": 100, "param.spec.t": 60}
    assert _legacy(t=7, epochs=10) == {"param.spec.epochs": 100, "param.spec.t": 70}
    # 6 of 100: 60 and 70 both scale to 4 (3.6 and 4.2), 50 to 3: ambiguous, and 5 matches none
    assert _legacy(t=4, epochs=6) == {"param.spec.epochs": 6, "param.spec.t": 4}
    assert _legacy(t=5, epochs=6) == {"param.spec.epochs": 6, "param.spec.t": 5}
    # the paper's own length, a missing t, a missing length
    assert _legacy(t=6, epochs=100) == {"param.spec.epochs": 100, "param.spec.t": 6}
    assert _legacy(t="None", epochs=10) == {"param.spec.epochs": 10, "param.spec.t": None}
    assert _legacy(t=60) == {"param.spec.epochs": 100, "param.spec.t": 60}
    # SSAT-MBI-AWR runs 120 epochs on CIFAR-10 (200 on CIFAR-100): 12 of 120 is 10 of 100
    assert _legacy("ssat-mbi-awr", t=6, epochs=12) == {"param.spec.epochs": 120, "param.spec.t": 60}
    assert _legacy("ssat-mbi-awr", "cifar100", t=6, epochs=20) == {"param.spec.epochs": 200, "param.spec.t": 60}


def test_runs_frame_infers_spec_params_only_for_trials_that_lack_them():
    logged = {"run_id": "a", "meta.kind": "trial", "param.method.name": "ssat-mbi", "param.attack.schedule": "linear",
              "param.attack.t": "4", "param.optim.epochs": "6", "param.spec.epochs": "100", "param.spec.t": "60"}
    before = {**{k: v for k, v in logged.items() if not k.startswith("param.spec")}, "run_id": "b"}
    teacher = {"run_id": "c", "meta.kind": "teacher", "param.data.dataset": "cifar10"}
    runs = runs_frame([logged, before, teacher]).set_index("run_id")
    assert runs.loc["a", "param.spec.t"] == 60 and runs.loc["a", "param.spec.epochs"] == 100  # as logged
    assert runs.loc["b", "param.spec.t"] == 4 and runs.loc["b", "param.spec.epochs"] == 6  # ambiguous: as run
    assert pd.isna(runs.loc["c", "param.spec.t"]) and pd.isna(runs.loc["c", "param.spec.epochs"])
    assert [schedule_label(runs.loc[i]) for i in ("a", "b")] == ["Linear-60", "Linear-4/6ep"]


def test_a_schedule_row_format_with_an_unknown_field_is_refused_word_for_word():
    runs = runs_frame([{"run_id": "a", "run_name": "cos-seed0", "meta.kind": "trial", "meta.schedule_row": "Cos-{w}",
                        "param.attack.schedule": "cosine"}]).set_index("run_id", drop=False)
    with pytest.raises(LabelError) as err:
        schedule_label(runs.loc["a"])
    assert str(err.value) == ("run 'cos-seed0' (id a): schedule row format 'Cos-{w}' has {w}; it may hold {t} and "
                              "{gamma} only")


# The parameter names of docs/tracking.md, before issue 27 -> since, typed here from the contract.
OLD_TO_NEW = {"method": "method.name", "schedule": "attack.schedule", "t": "attack.t", "gamma": "attack.gamma",
              "eps": "attack.eps", "rho0": "method.rho0", "rho_double_epoch": "method.rho_double_epoch",
              "beta": "method.beta", "tau": "method.tau", "K": "method.K", "lambda": "method.lam",
              "interpolate": "method.interpolate", "split_seed": "data.split_seed", "dataset": "data.dataset",
              "model": "model.name", "precision": "system.precision", "epochs": "optim.epochs",
              "swa_start": "optim.swa_start"}


def test_runs_recorded_before_issue_27_are_read_under_todays_parameter_names():
    assert dict(LEGACY_PARAM_NAMES) == OLD_TO_NEW
    values = {"method": "rst", "schedule": "linear", "t": "6", "gamma": "1.25", "eps": "0.3", "rho0": "0.05",
              "rho_double_epoch": "None", "beta": "0.0", "tau": "2.0", "K": "3", "lambda": "8.0",
              "interpolate": "False", "split_seed": "1", "dataset": "mnist5k", "model": "cnn-small",
              "precision": "fp32", "epochs": "10", "swa_start": "None"}
    old = {"run_id": "old", "meta.kind": "trial", "param.seed": "2", **{f"param.{k}": v for k, v in values.items()}}
    new = {"run_id": "new", "meta.kind": "trial", "param.seed": "2", "param.spec.epochs": "100", "param.spec.t": "60",
           **{f"param.{OLD_TO_NEW[k]}": v for k, v in values.items()}}
    teacher = {"run_id": "teacher", "meta.kind": "teacher", "param.dataset": "mnist5k", "param.split_seed": "1",
               "param.model": "cnn-small", "param.teacher.steps": "500"}
    runs = runs_frame([old, new, teacher]).set_index("run_id")
    params = sorted(c for c in runs.columns if c.startswith("param."))
    assert params == sorted(["param.seed", "param.spec.epochs", "param.spec.t", "param.teacher.steps",
                             *(f"param.{n}" for n in OLD_TO_NEW.values())])  # no column under an old name
    trial_params = [c for c in params if c != "param.teacher.steps"]
    pd.testing.assert_series_equal(runs.loc["old", trial_params], runs.loc["new", trial_params], check_names=False)
    assert (runs.loc["old", "param.method.name"], runs.loc["old", "param.method.lam"],
            runs.loc["old", "param.attack.t"],
            runs.loc["old", "param.spec.t"]) == ("rst", 8.0, 6, 60)  # spec.t inferred from the renamed t and epochs
    assert runs.loc["old", "param.method.interpolate"] == False  # noqa: E712
    assert (runs.loc["teacher", "param.data.dataset"], runs.loc["teacher", "param.data.split_seed"],
            runs.loc["teacher", "param.model.name"]) == ("mnist5k", 1, "cnn-small")
    # a record of today is left as it is, and a name present under both keeps today's value
    assert current_param_names(new) is new
    both = current_param_names({"param.method": "rst", "param.method.name": "ssat-mbi", "param.beta": "0.4"})
    assert both == {"param.method": "rst", "param.method.name": "ssat-mbi", "param.method.beta": "0.4"}


def test_label_tags_stay_text():
    """ssat.schedule_label of Const is 'none', which `typed` would read as missing; a label '1.0' stays text."""
    runs = runs_frame([{"run_id": "a", "meta.schedule_label": "none", "meta.method_label": "1.0",
                        "meta.schedule_row": "Const", "meta.schedule_title": ""},
                       {"run_id": "b", "meta.schedule_label": "Lin.", "meta.method_label": "2"}]).set_index("run_id")
    assert runs.loc["a", "meta.schedule_label"] == "none" and runs.loc["a", "meta.method_label"] == "1.0"
    assert runs.loc["b", "meta.method_label"] == "2" and pd.isna(runs.loc["a", "meta.schedule_title"])
    assert pd.isna(runs.loc["b", "meta.schedule_row"])


# ---- a command without a store creates none -------------------------------------------------------------------
CLIS = {"analysis.tables": ["--table", "ablation"], "analysis.plots": ["--figure", "ablation"], "analysis.export": [],
        "analysis.autoattack_breakdown": [], "analysis.convergence": [], "analysis.importance": []}


@pytest.fixture
def no_store(tmp_path, monkeypatch):
    """A current folder without a store, and nothing that names one (MLflow's default: ./mlflow.db)."""
    import mlflow.tracking._tracking_service.utils as tracking_utils

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(tracking_utils, "_tracking_uri", None)  # an earlier mlflow.set_tracking_uri in this process
    return tmp_path


@pytest.mark.parametrize("module", CLIS)
def test_no_command_creates_a_store_where_there_is_none(module, no_store, capsys):
    import importlib

    assert importlib.import_module(module).main(["--experiment", "sweep-x", *CLIS[module]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: no MLflow store at '{no_store / 'mlflow.db'}' (tracking URI "
                          f"'sqlite:///{no_store / 'mlflow.db'}', MLflow's default: neither --tracking-uri nor "
                          "$MLFLOW_TRACKING_URI is set); analysis reads a store and never creates one. Make one by "
                          "running a sweep (python -m sweeps run SPEC --workdir DIR writes DIR/mlflow.db), or pass")
    assert "--tracking-uri sqlite:///DIR/mlflow.db" in err
    assert list(no_store.iterdir()) == []  # no mlflow.db, no mlruns/, no importance/ or output folder


def test_a_fresh_interpreter_without_a_store_creates_none(no_store):
    # mutmut's stats run: a trampoline would look for mutmut's config in this empty folder (a subprocess's
    # stats are not collected anyway); a mutant's name is kept, so the mutant runs here too
    env = {k: v for k, v in __import__("os").environ.items()
           if k != "MLFLOW_TRACKING_URI" and (k, v) != ("MUTANT_UNDER_TEST", "stats")}
    out = subprocess.run([sys.executable, "-m", "analysis.tables", "--experiment", "x", "--table", "main"],
                         cwd=no_store, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and out.stderr.startswith(f"error: no MLflow store at '{no_store / 'mlflow.db'}'")
    assert list(no_store.iterdir()) == []


def test_the_tracking_uri_is_resolved_in_one_place(no_store, monkeypatch):
    from analysis.collect import local_store_path, resolve_tracking_uri

    with pytest.raises(SourceError, match=r"no MLflow store at '/nowhere/s\.db' \(tracking URI 'sqlite:////nowhere/s\.db'"
                                          r", given\)"):
        resolve_tracking_uri("sqlite:////nowhere/s.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///nowhere/mlruns")
    with pytest.raises(SourceError, match=r"'/nowhere/mlruns' .*from \$MLFLOW_TRACKING_URI\)"):
        resolve_tracking_uri(None)
    with pytest.raises(SourceError, match=f"'{no_store / 'mlruns'}'"):
        resolve_tracking_uri("mlruns")  # a bare folder is a file store
    assert resolve_tracking_uri("http://127.0.0.1:5000") == "http://127.0.0.1:5000"  # a server: not ours to check
    # a PostgreSQL store through the driver the project pins, as the sweep wrote it
    # (sweeps.tracking.tracker.resolve_uri)
    assert resolve_tracking_uri("postgresql://mlflow@127.0.0.1:5432/mlflow") == \
        "postgresql+psycopg2://mlflow@127.0.0.1:5432/mlflow"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql://u@h/db")
    assert resolve_tracking_uri(None) == "postgresql+psycopg2://u@h/db"
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    (no_store / "here.db").touch()
    assert resolve_tracking_uri("sqlite:///here.db") == "sqlite:///here.db"
    assert local_store_path("sqlite:///:memory:") is None
    assert local_store_path("databricks") is None and local_store_path("databricks-uc") is None
    assert local_store_path("sqlite:///rel/x.db") == Path("rel/x.db")
    assert list(no_store.iterdir()) == [no_store / "here.db"]


def test_the_export_command_writes_the_runs_and_their_mlflow_history(store, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    from analysis import export as export_cli

    client = MlflowClient(store)
    exp = client.create_experiment("e", artifact_location=(tmp_path / "artifacts").as_uri())
    rid = client.create_run(exp, tags={"ssat.kind": "trial", "ssat.stage": "demo", "ssat.row": "a"}).info.run_id
    for step, v in ((1, 50.0), (2, 60.0)):
        client.log_metric(rid, "val/pgd10", v, step=step)
    out = tmp_path / "out"
    assert export_cli.main(["--experiment", "e", "--tracking-uri", store, "--out", str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out / "e.runs.csv"), str(out / "e.history.csv")]
    assert list(pd.read_csv(out / "e.runs.csv")["run_id"]) == [rid]
    hist = pd.read_csv(out / "e.history.csv")
    assert hist.to_dict("list") == {"run_id": [rid, rid], "key": ["val/pgd10"] * 2, "step": [1, 2],
                                    "value": [50.0, 60.0]}

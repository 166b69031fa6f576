"""analysis.collect: typing of string params, and the Ray results folder reader (no MLflow needed)."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from analysis.collect import SourceError, legacy_spec_params, load_ray_history, load_ray_runs, runs_frame, typed
from analysis.export import export
from analysis.specs import schedule_label


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
PARAMS = {"method": "ssat-mbi", "schedule": "curious", "t": 7, "gamma": 1.25, "interpolate": True,
          "rho_double_epoch": None, "beta": 0.4, "dataset": "mnist5k", "epochs": 2, "spec.epochs": 10,
          "spec.t": 7}


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
    assert r["meta.key"] == "sweep-x-abc123abc123-s1-demo" and r["meta.config_hash"] == "abc123abc123"
    assert r["meta.seed"] == 1 and r["param.t"] == 7 and r["param.spec.epochs"] == 10
    assert r["metric.val/clean"] == 60.0 and r["metric.test/best/pgd20"] == 40.5
    assert r["param.interpolate"] == True and pd.isna(r["param.rho_double_epoch"])  # noqa: E712
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
    as_strings["param.rho_double_epoch"] = "None"
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
    assert pd.api.types.is_integer_dtype(back["param.t"]) and pd.api.types.is_float_dtype(back["param.beta"])
    assert pd.api.types.is_bool_dtype(back["param.interpolate"])
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
    rec = {"run_id": "r", "param.method": method, "param.dataset": dataset, **{f"param.{k}": v for k, v in params.items()}}
    return legacy_spec_params(rec)


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
    logged = {"run_id": "a", "meta.kind": "trial", "param.method": "ssat-mbi", "param.schedule": "linear",
              "param.t": "4", "param.epochs": "6", "param.spec.epochs": "100", "param.spec.t": "60"}
    before = {**{k: v for k, v in logged.items() if not k.startswith("param.spec")}, "run_id": "b"}
    teacher = {"run_id": "c", "meta.kind": "teacher", "param.dataset": "cifar10"}
    runs = runs_frame([logged, before, teacher]).set_index("run_id")
    assert runs.loc["a", "param.spec.t"] == 60 and runs.loc["a", "param.spec.epochs"] == 100  # as logged
    assert runs.loc["b", "param.spec.t"] == 4 and runs.loc["b", "param.spec.epochs"] == 6  # ambiguous: as run
    assert pd.isna(runs.loc["c", "param.spec.t"]) and pd.isna(runs.loc["c", "param.spec.epochs"])
    assert [schedule_label(runs.loc[i]) for i in ("a", "b")] == ["Linear-60", "Linear-4/6ep"]

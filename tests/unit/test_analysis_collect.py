"""analysis.collect: typing of string params, and the Ray results folder reader (no MLflow needed)."""
import json
import subprocess
import sys

import pandas as pd
import pytest

import hashlib

from analysis.collect import SourceError, load_ray_history, load_ray_runs, ray_trial_config, runs_frame, typed
from analysis.export import export


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


def write_trial(root, name, meta, params, lines):
    d = root / name
    d.mkdir(parents=True)
    (d / "params.json").write_text(json.dumps({"meta": meta, "params": params, "other": {"x": 1}}))
    (d / "result.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return d


@pytest.fixture
def ray_dir(tmp_path):
    root = tmp_path / "sweep-x"
    meta = {"sweep": "sweep-x", "stage": "demo", "table": "ablation", "row": "Cur.|int",
            "column_group": "mnist5k/cnn-small", "seed": 1, "expected_seeds": 3, "config_hash": "abc123abc123"}
    params = {"method": "ssat-mbi", "schedule": "curious", "t": 7, "gamma": 1.25, "interpolate": True,
              "rho_double_epoch": None, "beta": 0.4, "dataset": "mnist5k", "epochs": 2}
    lines = [{"training_iteration": 1, "val/clean": 50.0, "sched/eps_max": 0.1, "config": {"a": 1}},
             {"training_iteration": 2, "val/clean": 60.0, "sched/eps_max": 0.2, "done": True,
              "test/best/pgd20": 40.5, "protocol/best/pgd20": PROTO, "time/total_hours": 0.01}]
    write_trial(root, "trial_0", meta, params, lines)
    nested = [{"epoch": 1, "val": {"clean": 55.0}},
              {"epoch": 2, "val": {"clean": 65.0}, "test": {"best": {"pgd20": 41.0}},
               "protocol": {"best": {"pgd20": json.loads(PROTO)}}}]
    write_trial(root, "sub/trial_1", {**meta, "seed": 2}, params, nested)
    return root


def test_ray_folder_reads_like_the_contract(ray_dir):
    runs = load_ray_runs(ray_dir)
    assert list(runs["run_id"]) == ["sub/trial_1", "trial_0"]
    r = runs.set_index("run_id").loc["trial_0"]
    assert r["experiment"] == "sweep-x" and r["meta.kind"] == "trial" and r["meta.status"] == "FINISHED"
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


NESTED = {"seed": 1, "data": {"dataset": "mnist5k", "split_seed": 0}, "model": {"name": "cnn-small"},
          "method": {"name": "ssat-mbi", "lam": 8.0, "beta": 0.4, "interpolate": True, "rho0": 0.05,
                     "rho_double_epoch": None, "tau": 2.0, "K": 3},
          "attack": {"eps": None, "schedule": "curious", "t": 4, "gamma": 1.25},
          "optim": {"epochs": 6}, "system": {"precision": "fp32"}}


def test_ray_trial_config_reads_what_the_trainable_is_given():
    meta = {"sweep": "mnist5k-demo", "stage": "demo", "table": "ablation", "row": "curious|on", "seed": 1,
            "metrics": ["val/pgd10"]}
    for spec in ({"trial": {"meta": meta, "cfg": NESTED}}, {"meta": meta, "cfg": NESTED}):
        m, p = ray_trial_config(spec)
        assert p["method"] == "ssat-mbi" and p["lambda"] == 8.0 and p["t"] == 4 and p["epochs"] == 6
        assert p["eps"] == 0.3 and p["seed"] == 1 and p["interpolate"] is True  # eps None: the dataset's
        no_seed = {k: v for k, v in NESTED.items() if k != "seed"}
        assert m["config_hash"] == hashlib.sha256(json.dumps(no_seed, sort_keys=True).encode()).hexdigest()[:12]
        assert m["seed"] == 1
        assert m["metrics"] == '["val/pgd10"]'  # lists kept as JSON text
    base = {k: v for k, v in NESTED.items() if k != "seed"}
    m, p = ray_trial_config({"meta": {**meta, "stage": "search", "seed": 0}, "base": base,
                             "method.beta": 0.7, "attack.t": 3})
    assert p["beta"] == 0.7 and p["t"] == 3 and p["seed"] == 0 and m["seed"] == 0
    m, p = ray_trial_config({"meta": meta, "params": {"beta": 0.5}})
    assert p == {"beta": 0.5}


def test_flat_params_and_config_hash_agree_with_ssat_config():
    """The Ray reader derives params and hash itself (analysis never imports the trainer); they must stay
    what the tracker logs. This test alone imports ssat (its config validation loads torch)."""
    config = pytest.importorskip("ssat.config")
    from analysis.collect import config_hash, flat_params

    for overrides in ({"seed": 3}, {"seed": 0, "attack.schedule": "linear", "attack.t": 4, "data.root": "/x",
                                    "system.threads": 2, "method.interpolate": False}):
        cfg = config.from_dict({}, overrides)
        assert flat_params(cfg.to_dict()) == cfg.model_params()
        assert config_hash(cfg.to_dict()) == cfg.config_hash()

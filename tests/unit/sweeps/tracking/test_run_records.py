"""The tracking schema (sweeps/tracking/run_records.py): run keys, the record a trial reports and logs, read back by
analysis
from a Ray results folder and from a real MLflow SQLite store; runs and journals of the code before it."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from analysis.collect import load_mlflow_runs, load_ray_runs
from analysis.run_labels import schedule_label
from ssat import faults
from ssat.config import from_dict
from ssat.presets import preset
from sweeps.trials.mlflow_callback import TrackingCallback
from sweeps.tracking.run_records import sweep_record, teacher_record, tracked_params, trial_key
from sweeps.spec import parse_spec
from sweeps.trials.trial_settings import resolve_trial

# the store fixture (a fresh real MLflow SQLite store) is in conftest.py

# A 10-epoch Linear-6 row run with --epochs 5: it trains t=3 of 5 epochs
SPEC = {"name": "unit", "preset": "mnist5k-ssat-mbi", "table": "schedules", "column_group": "mnist5k/cnn-small",
        "seeds": [3], "expected_seeds": 2,
        "grid": [{"row": "lin", "set": {"attack.schedule": "linear", "attack.t": 6}}]}
TRAINED = {"method.name": "ssat-mbi", "attack.schedule": "linear", "attack.t": 3, "attack.gamma": 1.25,
           "attack.eps": 0.3, "method.rho0": 0.05, "method.rho_double_epoch": None, "method.beta": 0.4,
           "method.tau": 2.0, "method.K": 3, "method.lam": 8.0, "method.interpolate": True, "seed": 3,
           "data.split_seed": 0, "data.dataset": "mnist5k", "model.name": "cnn-small", "system.precision": "auto",
           "optim.epochs": 5, "optim.swa_start": None}


def grid_config(spec_meta: bool = True) -> dict:
    """The Tune config of the spec's trial as the grid stages before issue 27 wrote it (the old shape
    sweeps.trials.trial_settings still reads; optionally without spec_*, as a stage built by the code before the run
    record)."""
    (t,) = parse_spec(SPEC, epochs=5).trials()
    meta = {"sweep": "unit", "table": "schedules", "column_group": "mnist5k/cnn-small", "expected_seeds": 2,
            "cpus": 1, "gpu": 0, "metrics": ["val/pgd10"], "stage": t.stage, "row": t.row, "seed": t.seed,
            **(t.spec_meta if spec_meta else {})}
    return {"trial": {"meta": meta, "cfg": t.config.to_dict()}}


def test_a_trial_key_wraps_the_fault_key():
    """(Every preset's config_hash is pinned in test_preset_hashes.py.)"""
    assert faults.run_key("17d46df81f4a", 3) == "17d46df81f4a-s3"
    assert trial_key("unit", "17d46df81f4a", 3, "grid") == "unit-17d46df81f4a-s3-grid"


def test_a_grid_trial_records_what_it_trained_and_what_its_spec_said():
    cfg, meta = resolve_trial(grid_config())
    rec = meta["record"]
    h = cfg.config_hash()
    assert rec.key == meta["trial_key"] == f"unit-{h}-s3-grid" and rec.name == "lin s3"
    assert rec.tags == {"ssat.kind": "trial", "ssat.key": rec.key, "ssat.sweep": "unit", "ssat.stage": "grid",
                        "ssat.table": "schedules", "ssat.row": "lin", "ssat.column_group": "mnist5k/cnn-small",
                        "ssat.seed": 3, "ssat.expected_seeds": 2, "ssat.config_hash": h, "ssat.label": "lin",
                        "ssat.method_label": "SSAT-MBI", "ssat.schedule_label": "Lin.", "ssat.schedule_title": "Linear",
                        "ssat.schedule_row": "Linear-{t}"}
    assert rec.params == {**TRAINED, "spec.epochs": 10, "spec.t": 6}
    # a stage built before spec_* were in the meta (a resumed sweep's): no spec.* (analysis infers them)
    assert resolve_trial(grid_config(spec_meta=False))[1]["record"].params == TRAINED


def test_a_trial_whose_meta_lacks_the_spec_entries_records_them_empty():
    """A meta without table, row, column group or expected seeds (a stage saved by older code): empty tags, never
    a missing key or None (analysis groups and filters on them)."""
    config = grid_config()
    meta = config["trial"]["meta"]
    for k in ("table", "row", "column_group", "expected_seeds"):
        meta.pop(k, None)
    tags = resolve_trial(config)[1]["record"].tags
    assert [tags[k] for k in ("ssat.table", "ssat.row", "ssat.column_group", "ssat.expected_seeds")] == ["", "", "", ""]


def test_a_trial_records_the_swa_start_it_trained_with_after_epochs():
    """The curves mark where validation switches to averaged weights from this param (analysis.plots)."""
    spec = parse_spec({**SPEC, "epochs": 70, "overrides": {"optim.swa_start": 60, "optim.lr_milestones": [49],
                                                           "optim.lr_factors": [0.1]}},
                      epochs=140)
    (t,) = spec.trials()
    meta = {"sweep": "unit", "stage": t.stage, "row": t.row, "seed": t.seed, **t.spec_meta}
    _, m = resolve_trial({"trial": {"meta": meta, "cfg": t.config.to_dict()}})
    assert (m["record"].params["optim.swa_start"], m["record"].params["optim.epochs"]) == (120, 140)


def test_search_and_confirm_trials_record_sampled_values_at_the_length_they_run():
    raw = {**{k: v for k, v in SPEC.items() if k != "grid"},
           "search": {"space": {"method.beta": {"float": [0.0, 1.0]}}}}
    spec = parse_spec(raw, epochs=5)
    meta = {"sweep": "unit", "stage": "search", "row": "", "seed": 3}
    cfg, m = resolve_trial({"meta": meta, "base": spec.base, "method.beta": 0.7})
    rec = m["record"]
    p, h = rec.params, cfg.config_hash()
    assert (p["method.beta"], p["seed"]) == (0.7, 3) and not any(k.startswith("sampled.") for k in p)  # once
    # the preset's t=7 of 10, halved
    assert (p["optim.epochs"], p["attack.t"], p["spec.epochs"], p["spec.t"]) == (5, 4, 5, 4)
    assert m["trial_key"] == f"unit-{h}-s3-search" and m["sampled"] == {"method.beta": 0.7}
    assert (rec.name, rec.tags["ssat.label"], rec.tags["ssat.sampled"]) == (f"beta=0.7 #{h[:4]} s3",
                                                                           f"beta=0.7 #{h[:4]}", '["method.beta"]')
    # the confirm trial of that configuration: the same label, led by its rank in the search
    confirm = spec.confirm_trials([{"method.beta": 0.7}])[0]
    cfg, m = resolve_trial({"trial": {"meta": {**meta, "stage": "confirm", "row": "confirm-1", "seed": confirm.seed,
                                               **confirm.spec_meta}, "cfg": confirm.config.to_dict()}})
    rec = m["record"]
    assert (rec.params["method.beta"], rec.params["seed"], rec.params["spec.epochs"]) == (0.7, confirm.seed, 5)
    assert cfg.config_hash() == h and rec.name == f"top1 beta=0.7 #{h[:4]} s{confirm.seed}"
    assert (rec.tags["ssat.label"], rec.tags["ssat.sampled"]) == (f"beta=0.7 #{h[:4]}", '["method.beta"]')


def test_a_sampled_key_the_tracked_params_lack_is_a_parameter_under_its_own_name():
    raw = {**{k: v for k, v in SPEC.items() if k != "grid"},
           "search": {"space": {"optim.lr": {"float": [0.01, 0.1], "log": True}}}}
    spec = parse_spec(raw, epochs=5)
    _, m = resolve_trial({"meta": {"sweep": "unit", "stage": "search", "row": "", "seed": 0}, "base": spec.base,
                          "optim.lr": 0.0344})
    assert m["record"].params["optim.lr"] == 0.0344 and m["record"].name.startswith("lr=0.034 #")


@pytest.mark.parametrize("value,text", [(0.0937, "0.094"), (1.48, "1.5"), (12.34, "12"), (3, "3"), (None, "none"),
                                        (True, "on"), (False, "off"), ("linear", "linear"), (1e-05, "1e-05")])
def test_a_sampled_value_in_a_name_is_rounded_to_two_significant_digits(value, text):
    from sweeps.tracking.run_records import value_text

    assert value_text(value) == text


def test_a_label_says_a_text_value_as_itself_and_a_number_by_its_keys_last_part():
    from sweeps.tracking.run_records import sampled_label, trial_label, trial_name

    sampled = {"attack.schedule": "linear", "attack.t": 3, "method.rho0": 0.1206, "method.rho_double_epoch": None}
    assert sampled_label(sampled, "4e14ab0377cc") == "linear t=3 rho0=0.12 rho_double_epoch=none #4e14"
    assert trial_label({"row": "linear|on"}, {}, "4e14ab0377cc") == "linear|on"
    assert trial_label({"row": ""}, {}, "4e14ab0377cc") == "#4e14"
    assert trial_label({"row": "confirm-2", "confirms": {"rank": 2, "sampled": {"method.beta": 0.5}}}, {},
                       "4e14ab0377cc") == "beta=0.5 #4e14"
    assert (trial_name("a b #4e14", 0), trial_name("a b #4e14", 10, 2)) == ("a b #4e14 s0", "top2 a b #4e14 s10")


def test_sweep_and_teacher_records():
    s = sweep_record("unit", "ablation", "specs/x.yaml", "mnist5k-ssat-mbi", {"git_commit": "abc"})
    assert (s.key, s.name) == ("unit-sweep", "unit")
    assert s.tags == {"ssat.kind": "sweep", "ssat.sweep": "unit", "ssat.table": "ablation"}
    assert s.params == {"spec": "specs/x.yaml", "preset": "mnist5k-ssat-mbi", "git_commit": "abc"}
    searched = sweep_record("unit", "", "specs/s.yaml", "mnist5k-ssat-mbi", {}, study_url="sqlite:///w/optuna.db")
    assert searched.tags == {"ssat.kind": "sweep", "ssat.sweep": "unit", "ssat.table": "",
                             "ssat.optuna_storage": "sqlite:///w/optuna.db", "ssat.optuna_study": "unit"}
    cfg = from_dict(preset("mnist5k-ssat-mbi"), {"data.split_seed": 2})
    t = teacher_record("unit", cfg, "split0123", "tkey42")
    assert (t.key, t.name) == ("unit-teacher-split0123-tkey42", "teacher-mnist5k-split0123")
    assert t.tags == {"ssat.kind": "teacher", "ssat.sweep": "unit", "ssat.table": "main", "ssat.row": "FixMatch",
                      "ssat.dataset": "mnist5k", "ssat.split_hash": "split0123",
                      "ssat.column_group": "mnist5k/cnn-small", "ssat.status": "FINISHED"}
    assert (t.params["data.dataset"], t.params["data.split_seed"], t.params["model.name"]) == ("mnist5k", 2,
                                                                                             "cnn-small")
    assert t.params["teacher.steps"] == cfg.teacher.steps and t.params["teacher.model"] is None


def test_mlflow_and_a_ray_folder_give_analysis_the_same_record(store, tmp_path):
    """The callback logs the record to a real store; the trainable's report (run_json) in a Ray folder; analysis
    reads the same tags and parameters from both, and a label from the spec's t, not the trained one."""
    config = grid_config()
    cb = TrackingCallback(store, "unit", str(tmp_path / "sweep"), None)
    cb._start(SimpleNamespace(config=config, trial_id="t_1"))
    assert cb.tracker.queue == []
    rec = resolve_trial(config)[1]["record"]
    trial = tmp_path / "ray" / "train_trial_1"
    trial.mkdir(parents=True)
    (trial / "params.json").write_text(json.dumps(config))
    (trial / "result.json").write_text(json.dumps({"epoch": 1, "val/clean": 50.0,
                                                   "run_json": json.dumps(rec.as_dict())}) + "\n")
    mlflow = load_mlflow_runs(["unit"], tracking_uri=store).iloc[0]
    ray = load_ray_runs(tmp_path / "ray").iloc[0]
    cols = sorted(c for c in mlflow.index if c.startswith("param.") or (c.startswith("meta.") and c not in
                                                                         ("meta.status", "meta.ray_trial_id")))
    assert cols == sorted(c for c in ray.index if c.startswith(("param.", "meta.")) and c != "meta.status")
    pd.testing.assert_series_equal(mlflow[cols], ray[cols], check_names=False)
    assert (mlflow["meta.key"], mlflow["param.attack.t"], mlflow["param.spec.t"], mlflow["param.spec.epochs"]) == \
        (rec.key, 3, 6, 10)
    # its spec's Linear-6 of 10 epochs is the paper's Linear-60 scaled (analysis.run_labels.paper_t)
    assert mlflow["meta.status"] == "RUNNING" and schedule_label(mlflow) == schedule_label(ray) == "Linear-60"


def test_a_journal_of_the_code_before_replays_and_its_run_is_found_again(store, tmp_path):
    """A driver of the code before the run record died with its trial's `ensure` unsent; the new callback adopts
    the journal, sends it, and finds that run by the same key: one run, with the parameters first written,
    which analysis completes with the inferred spec.*."""
    config = grid_config(spec_meta=False)
    cfg, meta = resolve_trial(config)
    old_tags = {"ssat.kind": "trial", "ssat.sweep": "unit", "ssat.stage": "grid", "ssat.table": "schedules",
                "ssat.row": "lin", "ssat.column_group": "mnist5k/cnn-small", "ssat.seed": 3,
                "ssat.expected_seeds": 2, "ssat.config_hash": cfg.config_hash(), "ssat.status": "RUNNING"}
    old_key = f"unit-{cfg.config_hash()}-s{cfg.seed}-grid"  # the key as the code before built it
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    dead = sweep / "tracking_spool.otherhost.1.0.jsonl"  # another host's driver: adopted
    dead.write_text(json.dumps({"op": "ensure", "key": old_key, "tags": old_tags, "params": tracked_params(cfg),
                                "name": "lin-seed3"}) + "\n")
    cb = TrackingCallback(store, "unit", str(sweep), None)
    cb._start(SimpleNamespace(config=config, trial_id="t_2"))
    assert cb.tracker.queue == [] and not dead.exists()
    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("unit").experiment_id])
    assert len(runs) == 1 and runs[0].data.tags["ssat.key"] == old_key == meta["trial_key"]
    assert "spec.t" not in runs[0].data.params and runs[0].data.tags["ssat.ray_trial_id"] == "t_2"
    run = load_mlflow_runs(["unit"], tracking_uri=store).iloc[0]
    # t=3 of 5 epochs: 50 and 60 of 100 both scale to it (2.5 and 3.0 round to 3), so it is its own spec
    assert (run["param.spec.epochs"], run["param.spec.t"], schedule_label(run)) == (5, 3, "Linear-3/5ep")

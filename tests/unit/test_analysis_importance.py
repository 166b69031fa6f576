"""analysis.importance against a real MLflow SQLite store of a synthetic search.

40 search trials of the mnist5k-search space; val/pgd10 depends strongly on beta, on gamma within the curious
trials (centred, so not on the schedule), and on nothing else. 12 trials ran 4 epochs, 28 were stopped by ASHA
at epoch 2, one failed before its first epoch; a confirm trial and a teacher run share the experiment.
"""
from __future__ import annotations

import math
import struct
import subprocess
import sys

import numpy as np
import optuna
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from analysis.importance import importance, main

NAME = "mnist5k-search"
SPACE = {
    "attack.schedule": {"choice": ["const", "linear", "curious"]},
    "attack.t": {"int": [2, 5], "when": {"attack.schedule": ["linear", "curious"]}},
    "attack.gamma": {"float": [1.0, 1.5], "when": {"attack.schedule": ["curious"]}},
    "method.rho0": {"float": [0.02, 0.2], "log": True},
    "method.rho_double_epoch": {"choice": [None, 4, 5]},
    "method.beta": {"float": [0.0, 1.0]},
    "method.tau": {"float": [0.5, 4.0], "log": True},
}
SPEC = {"name": NAME, "metric": "val/pgd10", "mode": "max", "epochs": 4, "search": {"space": SPACE}}
N_FULL, N_STOPPED = 12, 28


def sample(rng) -> dict:
    s = {"attack.schedule": str(rng.choice(["const", "linear", "curious"]))}
    if s["attack.schedule"] != "const":
        s["attack.t"] = int(rng.integers(2, 6))
    if s["attack.schedule"] == "curious":
        s["attack.gamma"] = float(rng.uniform(1.0, 1.5))
    s["method.rho0"] = float(np.exp(rng.uniform(np.log(0.02), np.log(0.2))))
    s["method.rho_double_epoch"] = [None, 4, 5][int(rng.integers(3))]
    s["method.beta"] = float(rng.uniform(0, 1))
    s["method.tau"] = float(np.exp(rng.uniform(np.log(0.5), np.log(4.0))))
    return s


def pgd10(s: dict, epoch: int, noise: float) -> float:
    gamma_effect = 120 * (s["attack.gamma"] - 1.25) if "attack.gamma" in s else 0.0
    return 20 + 40 * s["method.beta"] + gamma_effect + 2 * epoch + noise


def flat(s: dict) -> dict:
    return {"method": "ssat-mbi", "schedule": s["attack.schedule"], "t": s.get("attack.t", 5),
            "gamma": s.get("attack.gamma", 1.25), "eps": 0.3, "rho0": s["method.rho0"],
            "rho_double_epoch": s["method.rho_double_epoch"], "beta": s["method.beta"], "tau": s["method.tau"],
            "K": 10, "lambda": 6.0, "epochs": 4, **{f"sampled.{k}": v for k, v in s.items()}}


def log_run(client, exp, tags, params, metrics, parent=None) -> str:
    tags = {**tags, **({"mlflow.parentRunId": parent} if parent else {})}
    run_id = client.create_run(exp, tags=tags).info.run_id
    client.log_batch(run_id, metrics=[Metric(k, v, 0, step) for k, step, v in metrics],
                     params=[Param(k, str(v)) for k, v in params.items()])
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(tracking URI, {run_id: (sampled, {epoch: val/pgd10})}, failed run id, confirm run id)."""
    root = tmp_path_factory.mktemp("importance")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment(NAME, artifact_location=(root / "artifacts").as_uri())
    parent = log_run(client, exp, {"ssat.kind": "sweep", "ssat.sweep": NAME}, {"spec": "x.yaml"}, [])
    client.log_dict(parent, SPEC, "spec.json")
    trial = {"ssat.kind": "trial", "ssat.sweep": NAME, "ssat.stage": "search"}
    rng, truth = np.random.default_rng(0), {}
    for i in range(N_FULL + N_STOPPED):
        s, epochs = sample(rng), 4 if i < N_FULL else 2
        curve = {e: pgd10(s, e, float(rng.normal(0, 0.5))) for e in range(1, epochs + 1)}
        tags = {**trial, "ssat.status": "FINISHED"} if epochs == 4 else {
            **trial, "ssat.status": "STOPPED_EARLY: asha at epoch 2 of 4", "ssat.stopped_by": "asha",
            "ssat.stopped_epoch": "2"}
        metrics = [("val/pgd10", e, v) for e, v in curve.items()] + [("val/clean", e, 99.0) for e in curve]
        truth[log_run(client, exp, tags, flat(s), metrics, parent)] = (s, curve)
    failed = log_run(client, exp, {**trial, "ssat.status": "FAILED: CUDA OOM"}, flat(sample(rng)), [], parent)
    confirm = log_run(client, exp, {**trial, "ssat.stage": "confirm"}, flat(sample(rng)),
                      [("val/pgd10", e, 1000.0) for e in (1, 2, 3, 4)], parent)
    log_run(client, exp, {"ssat.kind": "teacher"}, {"dataset": "mnist5k"}, [("val/pgd10", 2, 1000.0)])
    return uri, truth, failed, confirm


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_ranks_beta_first_on_all_trials_at_the_common_epoch_and_stores_the_study(store, tmp_path):
    uri, truth, failed, confirm = store
    r = importance(NAME, uri, out_dir=tmp_path, log=lambda line: None)
    # the common epoch is the ASHA rung every trial reached; the failed run has nothing, the confirm run is no search
    assert r.epoch == 2 and sorted(r.trial_run_ids) == sorted(truth) and r.left_out == {failed: "no value at any epoch"}
    assert confirm not in r.trial_run_ids and r.warnings == []
    t = r.table.set_index("parameter")
    assert r.table["parameter"][0] == "method.beta" and t.loc["method.beta", "importance"] > 0.6
    unconditional = ["attack.schedule", "method.rho0", "method.rho_double_epoch", "method.beta", "method.tau"]
    assert t.loc[unconditional, "importance"].sum() == pytest.approx(1.0)
    # conditional parameters: ranked only within the trials where they are active
    n_t = sum("attack.t" in s for s, _ in truth.values())
    n_gamma = sum("attack.gamma" in s for s, _ in truth.values())
    assert t.loc[["attack.t", "attack.gamma", "method.beta"], "active"].tolist() == [n_t, n_gamma, 40]
    assert math.isnan(t.loc["attack.t", "importance"]) and math.isnan(t.loc["attack.gamma", "importance"])
    assert t.loc["attack.gamma", "where_active"] > 0.4 > 0.1 > t.loc["attack.t", "where_active"]
    assert math.isnan(t.loc["method.beta", "where_active"])

    study = optuna.load_study(study_name=NAME, storage=r.storage)
    assert r.storage == f"sqlite:///{(tmp_path / 'importance.db').resolve()}"
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE and len(study.trials) == 40
    for trial in study.trials:
        s, curve = truth[trial.user_attrs["mlflow_run_id"]]
        assert trial.value == curve[2] and trial.user_attrs["epoch"] == 2
        assert trial.params == s  # const trials carry no t, None stays None
    assert isinstance(study.trials[0].distributions["method.rho0"], optuna.distributions.FloatDistribution)
    assert study.trials[0].distributions["method.rho0"].log
    w, h = png_size(r.png)
    assert r.png == tmp_path / "importance.png" and w >= 800 and h >= 300


def test_epoch_leaves_out_stopped_trials_and_warns_below_30_without_torch_or_ray(store, tmp_path):
    """The CLI in a fresh interpreter: --epoch 4 keeps the 12 trials that got there. A study of the same name
    already in the storage is replaced, not added to."""
    uri, truth, _, _ = store
    storage = f"sqlite:///{tmp_path / 'importance.db'}"
    optuna.create_study(storage=storage, study_name=NAME).add_trial(optuna.trial.create_trial(value=-1.0))
    code = ("import sys; from analysis.importance import main; assert main(sys.argv[1:]) == 0; "
            "print('modules', sorted(m for m in ('torch', 'ray', 'ssat', 'sweeps') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, "--experiment", NAME, "--tracking-uri", uri, "--epoch", "4",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "modules []"
    assert "warning: the importance rests on 12 trials (fewer than 30)" in out.stdout
    stopped = [rid for rid, (_, curve) in truth.items() if max(curve) == 2]
    assert len(stopped) == N_STOPPED and all(f"left out {rid}: stopped at epoch 2" in out.stdout for rid in stopped)
    study = optuna.load_study(study_name=NAME, storage=storage)
    assert sorted(t.value for t in study.trials) == sorted(c[4] for _, c in truth.values() if 4 in c)
    assert len(study.trials) == N_FULL and png_size(tmp_path / "importance.png")[0] >= 800


def test_bad_input_names_what_exists(store, tmp_path, capsys):
    uri = store[0]
    assert main(["--experiment", NAME, "--tracking-uri", uri, "--epoch", "7", "--out", str(tmp_path)]) == 2
    assert "--epoch 7: no trial has a value there; the trials reached epochs 2 to 4" in capsys.readouterr().err
    assert main(["--experiment", NAME, "--tracking-uri", uri, "--metric", "val/pgd20", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "metric 'val/pgd20' is not logged by the search trials; logged: val/clean, val/pgd10" in err
    assert not (tmp_path / "importance.db").exists()


def test_parents_with_different_search_spaces_are_refused(tmp_path):
    from analysis.collect import load_mlflow_runs
    from analysis.importance import ImportanceError, search_trials, sweep_spec

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("two", artifact_location=(tmp_path / "artifacts").as_uri())
    spaces = {}
    for space in (SPACE, {**SPACE, "method.tau": {"float": [1.0, 4.0]}}):  # a second sweep widened the space
        parent = log_run(client, exp, {"ssat.kind": "sweep"}, {}, [])
        client.log_dict(parent, {**SPEC, "search": {"space": space}}, "spec.json")
        log_run(client, exp, {"ssat.kind": "trial", "ssat.stage": "search"}, {}, [("val/pgd10", 1, 50.0)], parent)
        spaces[parent] = space
    runs = load_mlflow_runs(["two"], uri)
    trials = search_trials(runs, "two")
    with pytest.raises(ImportanceError) as err:
        sweep_spec(runs, trials, uri)
    ids = list(runs[runs["meta.kind"] == "sweep"]["run_id"])
    assert sorted(ids) == sorted(spaces)
    assert str(err.value) == (f"the parent runs {', '.join(ids)} hold different search spaces; rebuild one sweep at "
                              "a time")
    one = runs[runs["run_id"] != ids[0]]  # the other parent alone: its own spec
    assert sweep_spec(one, search_trials(one, "two"), uri)["search"]["space"] == spaces[ids[1]]

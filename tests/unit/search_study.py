"""A search's persisted Optuna study as the sweep driver keeps it (sweeps/trials/study.py), built here from that
contract:
SQLite storage, the study named after the sweep, its `space`/`metric`/`mode` attributes; per trial the sampled
(active) parameters with their distributions, the metric at each validated epoch as intermediate values, the value
of its last report, and its `name`, `label`, `ssat_key`, `tune_trial_id`, `val/clean`, `val/pgd10`, `epoch`
attributes. The MLflow side: the sweep's parent run with the study's tags.

The synthetic search: 40 trials of the mnist5k-search space; val/pgd10 depends strongly on beta, on gamma within
the curious trials (centred, so not on the schedule), and on nothing else. 12 trials ran 4 epochs; 28 were stopped
by ASHA at epoch 2 (half told COMPLETE with their epoch-2 value, half PRUNED); one failed before its first epoch, one
was handed out but never ran.
"""
from __future__ import annotations

import json

import numpy as np
import optuna
from mlflow.tracking import MlflowClient

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
N_FULL, N_STOPPED = 12, 28
D = optuna.distributions
DISTRIBUTIONS = {"attack.schedule": D.CategoricalDistribution(["const", "linear", "curious"]),
                 "attack.t": D.IntDistribution(2, 5), "attack.gamma": D.FloatDistribution(1.0, 1.5),
                 "method.rho0": D.FloatDistribution(0.02, 0.2, log=True),
                 "method.rho_double_epoch": D.CategoricalDistribution([None, 4, 5]),
                 "method.beta": D.FloatDistribution(0.0, 1.0), "method.tau": D.FloatDistribution(0.5, 4.0, log=True)}


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


def label(s: dict, number: int) -> str:
    """As the sweep labels a configuration: text values as themselves, others key=value (2 digits), a hash."""
    def text(v):
        return "none" if v is None else f"{v:.2g}" if isinstance(v, float) else str(v)
    return " ".join([v if isinstance(v, str) else f"{k.rsplit('.', 1)[-1]}={text(v)}" for k, v in s.items()]
                    + [f"#{number:04x}"])


def clean(s: dict, noise: float) -> float:
    """val/clean falls with beta, as robust accuracy rises with it: a front of a few trials."""
    return 88 - 6 * s["method.beta"] + noise


def add_trial(study, number: int, s: dict, curve: dict, state, **attrs):
    """One trial of the contract: params, intermediate values, value (the last report's) and attributes."""
    last = max(curve) if curve else None
    final = {"val/clean": clean(s, (number * 7919 % 100) / 50 - 1), "val/pgd10": curve[last],
             "epoch": last} if curve else {}
    user = {"name": f"{label(s, number)} s0", "label": label(s, number), "ssat_key": f"{NAME}-{number:012x}-s0-search",
            "tune_trial_id": f"t{number:05d}", **final, **attrs}
    done = state == optuna.trial.TrialState.COMPLETE
    study.add_trial(optuna.trial.create_trial(
        params=s, distributions={k: DISTRIBUTIONS[k] for k in s}, intermediate_values=curve, state=state,
        value=curve[last] if done else None, user_attrs=user))


def search_study(url: str, name: str = NAME) -> dict:
    """The synthetic search in `url`: {trial number: (sampled, {epoch: val/pgd10})} of the trials that ran."""
    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    for key, value in {"space": json.dumps(SPACE), "metric": "val/pgd10", "mode": "max", "sweep": name,
                       "tracking_uri": "sqlite:///mlflow.db"}.items():
        study.set_user_attr(key, value)
    rng, truth = np.random.default_rng(0), {}
    states = optuna.trial.TrialState
    for i in range(N_FULL + N_STOPPED):
        s, epochs = sample(rng), 4 if i < N_FULL else 2
        curve = {e: pgd10(s, e, float(rng.normal(0, 0.5))) for e in range(1, epochs + 1)}
        add_trial(study, i, s, curve, states.PRUNED if i >= N_FULL and i % 2 else states.COMPLETE)
        truth[i] = (s, curve)
    add_trial(study, N_FULL + N_STOPPED, sample(rng), {}, states.FAIL)
    add_trial(study, N_FULL + N_STOPPED + 1, sample(rng), {}, states.FAIL,
              never_ran="handed out just before the driver stopped")
    return truth


def sweep_run(uri: str, name: str = NAME, **tags) -> str:
    """The sweep's parent run in the MLflow store `uri` (tag ssat.kind=sweep and `tags`, '_' for '.' after ssat)."""
    client = MlflowClient(uri)
    exp = client.create_experiment(name)
    return client.create_run(exp, tags={"ssat.kind": "sweep", "ssat.sweep": name,
                                        **{f"ssat.{k}": v for k, v in tags.items()}}).info.run_id

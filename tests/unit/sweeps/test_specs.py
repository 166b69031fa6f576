"""Sweep specs, the conditional search space, Pareto thinning, GPU checks and the paper's specs."""
from pathlib import Path

import optuna
import pytest

from sweeps.errors import SweepError
from sweeps.trials.outcomes import crowding_thin, pareto_front
from sweeps.driver.cluster import autoscaler_gpu_types, check_gpu
from sweeps.space import define_by_run
from sweeps.spec import SpecError, load_spec, parse_spec

SPECS = Path(__file__).resolve().parents[3] / "sweeps" / "specs"


def test_conditional_space_never_samples_gamma_for_linear_nor_t_for_const():
    space = {"attack.schedule": {"choice": ["const", "linear", "curious"]},
             "attack.t": {"int": [2, 8], "when": {"attack.schedule": ["linear", "curious"]}},
             "attack.gamma": {"float": [1.0, 1.5], "when": {"attack.schedule": ["curious"]}},
             "method.beta": {"float": [0.0, 1.0]}}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0, multivariate=True, group=True))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        define_by_run(trial, space)
        p = trial.params
        seen.add(p["attack.schedule"])
        assert ("attack.t" in p) == (p["attack.schedule"] != "const")
        assert ("attack.gamma" in p) == (p["attack.schedule"] == "curious")
        study.tell(trial, p["method.beta"])
    assert seen == {"const", "linear", "curious"}


def test_pareto_front_and_crowding():
    pts = [[1, 5], [2, 4], [3, 3], [4, 2], [5, 1], [2, 2], [1, 1]]
    front = pareto_front(pts)
    assert sorted(front) == [0, 1, 2, 3, 4]
    keep = crowding_thin([pts[i] for i in front], 3)
    assert sorted(front[i] for i in keep) in ([0, 2, 4], [0, 1, 4], [0, 3, 4])
    assert {0, 4} <= {front[i] for i in keep}  # the extremes always stay


def test_gpu_share_without_a_gpu_is_refused_unless_cpu_only(tmp_path, monkeypatch):
    spec = parse_spec({"name": "g", "preset": "mnist5k-ssat-mbi", "resources": {"cpu": 1, "gpu": 0.5},
                       "grid": [{"row": "a", "set": {}}]})
    monkeypatch.setenv("SSAT_AUTOSCALER_CONFIG", str(tmp_path / "none.yaml"))
    with pytest.raises(SweepError, match="--cpu-only"):
        check_gpu(spec, gpus_now=0)
    check_gpu(spec, gpus_now=1)
    f = tmp_path / "b.yaml"
    f.write_text("available_node_types:\n  head: {resources: {CPU: 4}}\n  gpu_worker: {resources: {CPU: 8, GPU: 1}}\n")
    monkeypatch.setenv("SSAT_AUTOSCALER_CONFIG", str(f))
    assert autoscaler_gpu_types() == ["gpu_worker"]
    check_gpu(spec, gpus_now=0)  # the autoscaler can add a GPU node
    cpu = parse_spec({"name": "g", "preset": "mnist5k-ssat-mbi", "resources": {"cpu": 1, "gpu": 0.5},
                      "grid": [{"row": "a", "set": {}}]}, cpu_only=True)
    assert cpu.resources["gpu"] == 0 and cpu.trials()[0].config.system.device == "cpu"


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_spec_validates(path):
    spec = load_spec(path)
    assert spec.grid or spec.search


def test_epochs_flag_rescales_and_checks():
    raw = {"name": "e", "preset": "cifar10-ssat-mbi", "grid": [{"row": "a", "set": {}}]}
    spec = parse_spec(raw, epochs=20)
    cfg = spec.trials()[0].config
    assert cfg.optim.epochs == 20 and cfg.attack.t == 14 and cfg.optim.lr_milestones == [12, 14, 18]
    with pytest.raises(SpecError, match="collide"):
        parse_spec(raw, epochs=3)

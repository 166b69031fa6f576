"""The command lines of ssat: `ssat.cli` (preset + --epochs + --set + paths -> one Config, in that order of
precedence) and `python -m ssat.train`'s main on a tiny run (its outputs, its flags, its errors)."""
import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ssat import teacher as T
from ssat import train as TR
from ssat.cli import add_config_args, config_from_args
from ssat.config import ConfigError, from_dict
from ssat.epoch_scaling import scale_epochs
from ssat.datasets import split_for
from ssat.presets import preset

TINY = {"data.n_unlabeled": 120, "data.n_val": 60, "attack.t": 1, "eval.autoattack": False, "eval.test_n": 40,
        "eval.pgd_steps": [2], "system.threads": 1}


def parse(argv):
    ap = argparse.ArgumentParser()
    add_config_args(ap, "method.beta=0.5")
    return ap.parse_args(argv)


def test_no_arguments_give_the_mnist5k_ssat_mbi_preset():
    args = parse([])
    assert args.set == [] and args.data_root is None
    assert config_from_args(args).config_hash() == from_dict(preset("mnist5k-ssat-mbi")).config_hash()


def test_set_then_paths_override_the_preset_and_an_absent_path_overrides_nothing():
    args = parse(["--preset", "mnist5k-trades", "--set", "method.beta=0.5", "data.teacher_dir=/from-set",
                  "data.root=/from-set", "--data-root", "/data"])
    cfg = config_from_args(args, **{"data.teacher_dir": None})
    assert cfg.method.name == from_dict(preset("mnist5k-trades")).method.name
    assert (cfg.method.beta, cfg.data.root, cfg.data.teacher_dir) == (0.5, "/data", "/from-set")
    cfg = config_from_args(args, **{"data.teacher_dir": "/given"})
    assert cfg.data.teacher_dir == "/given"


def test_each_set_flag_adds_its_overrides_none_is_dropped():
    """`--set a=1 --set b=2` (as a README line and a user's edit of it read) keeps both: a repeated flag used to
    replace the first one's values silently."""
    cfg = config_from_args(parse(["--set", "method.beta=0.5", "--set", "eval.autoattack=false", "attack.t=3"]))
    assert (cfg.method.beta, cfg.eval.autoattack, cfg.attack.t) == (0.5, False, 3)
    from sweeps.cli import build_parser

    for cmd in (["run", "x.yaml"], ["calibrate", "x.yaml"]):
        args = build_parser().parse_args([*cmd, "--set", "method.beta=0.5", "--set", "attack.t=3"])
        assert args.set == ["method.beta=0.5", "attack.t=3"], cmd


def test_epochs_rescale_the_preset_before_the_overrides():
    base = preset("mnist5k-ssat-mbi")
    cfg = config_from_args(parse([]), epochs=20)
    assert cfg.config_hash() == from_dict(scale_epochs(base, 20)).config_hash()
    assert cfg.optim.epochs == 20 and cfg.optim.lr_milestones != from_dict(base).optim.lr_milestones
    cfg = config_from_args(parse(["--set", "attack.t=3"]), epochs=20)
    assert (cfg.optim.epochs, cfg.attack.t) == (20, 3)  # --set wins over the rescaled preset


def test_a_bad_preset_or_override_is_named():
    with pytest.raises(ConfigError, match="--preset: preset 'mnist5k-ssat-mbx' is unknown"):
        config_from_args(parse(["--preset", "mnist5k-ssat-mbx"]))
    with pytest.raises(ConfigError, match="method.bta"):
        config_from_args(parse(["--set", "method.bta=1"]))
    with pytest.raises(ConfigError, match="--epochs"):
        config_from_args(parse([]), epochs=-1)


def test_train_cli_trains_writes_its_config_and_evaluates(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sets = [f"{k}={json.dumps(v)}" for k, v in TINY.items()]
    _, split = split_for(from_dict(preset("mnist5k-ssat-mbi"), TINY))
    logits = torch.randn(len(split.unlabeled), 10, generator=torch.Generator().manual_seed(0))
    torch.save({"logits": logits, "split_hash": split.hash}, tmp_path / "pl.pt")
    sets.append(f"data.pseudo_labels={tmp_path / 'pl.pt'}")

    assert TR.main(["--epochs", "4", "--set", *sets]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "runs" / "mnist5k-ssat-mbi-seed0"
    written = json.loads((folder / "config.json").read_text())
    assert written == config_from_args(parse(["--set", *sets]), epochs=4).to_dict()
    assert written["optim"]["epochs"] == 4 and written["optim"]["lr_milestones"] == [2, 3, 4]
    assert "test [best] " in out and "test [last] " in out and "outputs in runs/mnist5k-ssat-mbi-seed0" in out
    assert set(json.loads((folder / "results.json").read_text())["metrics"]) >= {"test/best/clean", "test/last/pgd2"}

    fetched = []
    monkeypatch.setattr("ssat.datasets.download", lambda dataset, root: fetched.append((dataset, root)))
    assert TR.main(["--no-final-eval", "--download", "--data-root", str(tmp_path / "d"), "--out", "other", "--set",
                    *sets, "optim.epochs=1", "optim.lr_milestones=[]", "optim.lr_factors=[]"]) == 0
    assert fetched == [("mnist5k", str(tmp_path / "d"))]  # --download fetches the configured dataset into --data-root
    out = capsys.readouterr().out
    assert "test [" not in out and "outputs in other" in out
    assert json.loads((tmp_path / "other" / "config.json").read_text())["optim"]["epochs"] == 1
    assert not (tmp_path / "other" / "results.json").exists()

    assert TR.main(["--set", "method.bta=1"]) == 2
    assert "method.bta" in capsys.readouterr().err


def _readme_commands(module):
    """The README's `python -m MODULE ...` lines, as argument lists (comments and the prefix removed)."""
    text = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    lines = [ln.split("#", 1)[0] for ln in text.splitlines() if f"python -m {module} " in ln]
    return [shlex.split(ln.split(f"python -m {module}", 1)[1]) for ln in lines if not ln.lstrip().startswith("`")]


@pytest.mark.parametrize("module", ["ssat.train", "ssat.teacher"])
def test_the_readmes_commands_make_a_valid_config(module):
    """What a new user pastes first: each README line parses and makes a Config (nothing is trained)."""
    mod = {"ssat.train": TR, "ssat.teacher": T}[module]
    commands = _readme_commands(module)
    assert commands
    for argv in commands:
        args = mod.parser().parse_args(argv)
        config_from_args(args, epochs=getattr(args, "epochs", None))


def test_an_ssat_module_runs_without_runpys_warning():
    """`python -m ssat.evaluate` (train, teacher, datasets too) must not find its module already imported by the
    package (runpy's RuntimeWarning "found in sys.modules", and two copies of the module): the package imports
    its public names when first used."""
    root = Path(__file__).resolve().parents[3]
    code = "import sys, ssat; print(sorted(m for m in sys.modules if m.startswith('ssat.')))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
    res = subprocess.run([sys.executable, "-m", "ssat.evaluate", "--help"], cwd=root, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and "usage: python -m ssat.evaluate" in res.stdout, res.stderr
    assert "found in sys.modules" not in res.stderr and "RuntimeWarning" not in res.stderr, res.stderr
    import ssat
    from ssat import Trainer, evaluate_model

    assert Trainer is TR.Trainer and evaluate_model.__module__ == "ssat.evaluate" and "Trainer" in dir(ssat)
    with pytest.raises(AttributeError, match="no attribute 'Trainerr'"):
        ssat.Trainerr

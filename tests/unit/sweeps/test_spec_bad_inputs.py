"""Every way a user can get a config, spec, command, data folder or stored file wrong: one table.

Each case is (id, trigger, expected exception type, regex fragments the message must contain). The fragments
name the field, the value given and what is allowed. Nothing here starts Ray or trains anything; CLI cases run
`sweeps.cli.main` in-process (they fail before Ray would start) and turn exit code 2 + stderr into `CliExit`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from ssat.config import ConfigError, from_dict, parse_overrides
from ssat.epoch_scaling import scale_epochs
from ssat.datasets import DataError, check_root, import_labeled_idx, load_arrays, make_split
from ssat.evaluate import load_checkpoint_model
from ssat.presets import preset
from ssat.pseudo_labels import PseudoLabelError, load_teacher_outputs
from ssat.storage import CorruptFileError, ForeignFileError, save_verified
from sweeps.errors import SweepError
from sweeps.spec import SpecError, load_spec, parse_spec
from ssat.synthetic import write_cifar10


class CliExit(Exception):
    """`python -m sweeps` exited with code 2; the message is what it printed on stderr."""


@dataclass
class Env:
    tmp: Path
    capsys: pytest.CaptureFixture
    monkeypatch: pytest.MonkeyPatch
    must_not_exist: list


# ---- builders --------------------------------------------------------------------------------------------
GRID = {"name": "bad-inputs", "preset": "mnist5k-ssat-mbi", "grid": [{"row": "a", "set": {}}]}
SEARCH = {"name": "bad-inputs", "preset": "mnist5k-ssat-mbi",
          "search": {"num_samples": 2, "space": {"method.beta": {"float": [0.0, 1.0]}}}}

GOOD_YAML = """\
name: bad-inputs-cli
preset: mnist5k-ssat-mbi
seeds: [0]
resources: {cpu: 1, gpu: 0}
grid:
  - {row: a, set: {method.beta: 0.5}}
"""


def spec(**kw) -> dict:
    return {**GRID, **kw}


def search(**kw) -> dict:
    return {**SEARCH, "search": {**SEARCH["search"], **kw}}


def cfg(**dotted):
    return from_dict({}, dotted)


def write(env: Env, name: str, text: str) -> Path:
    p = env.tmp / name
    p.write_text(text)
    return p


def cli(env: Env, *argv: str) -> None:
    """Run the CLI in-process; exit code 2 -> CliExit(stderr). Ray must not be started on the way."""
    import os

    import sweeps.cli as cli_mod

    for var in ("RAY_AUTH_MODE", "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S"):
        if var in os.environ:  # main() setdefaults these: keep the test process's environment as it was
            env.monkeypatch.setenv(var, os.environ[var])
        else:
            env.monkeypatch.delenv(var, raising=False)

    def no_ray(*a, **k):
        raise AssertionError("Ray/the sweep was started for a bad input")

    import sweeps.driver.sweep as driver_mod

    env.monkeypatch.setattr(driver_mod, "init_ray", no_ray)
    env.monkeypatch.setattr(driver_mod, "execute", no_ray)
    env.capsys.readouterr()
    rc = cli_mod.main(list(argv))
    err = env.capsys.readouterr().err
    if rc == 2:
        assert err.startswith("error: "), err
        raise CliExit(err)
    raise AssertionError(f"expected exit code 2, got {rc}; stderr: {err!r}")


def run_cli(env: Env, *extra: str) -> None:
    cli(env, "run", str(write(env, "good.yaml", GOOD_YAML)), "--workdir", str(env.tmp), "--dry-run", *extra)


def checkpoint(env: Env, **config_over) -> Path:
    """A cnn-small checkpoint in the Trainer's format (ssat/train.py Trainer._weights)."""
    from ssat.models import create_model

    c = from_dict(preset("mnist5k-ssat-mbi"))
    model = create_model("cnn-small", 10, 1)
    d = c.to_dict()
    for k, v in config_over.items():
        section, key = k.split(".")
        d[section][key] = v
    ck = {"model": {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, "config": d,
          "kind": "best", "epoch": 1, "metrics": {}, "split_hash": "0" * 16, "model_name": "cnn-small"}
    path = env.tmp / "best.pt"
    save_verified(ck, path)
    return path


def flip_byte(env: Env) -> Path:
    path = checkpoint(env)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def truncated(env: Env) -> Path:
    path = checkpoint(env)
    path.write_bytes(path.read_bytes()[:200])
    Path(f"{path}.sha256").unlink()
    return path


def teacher_file(env: Env, obj: dict) -> Path:
    path = env.tmp / "teacher.pt"
    save_verified(obj, path)
    return path


def load_teacher(env: Env, obj: dict, split_hash: str = "b" * 16):
    return load_teacher_outputs(teacher_file(env, obj), split_hash=split_hash, n_unlabeled=5, num_classes=10)


def cifar_missing(env: Env, drop: str) -> None:
    root = write_cifar10(env.tmp / "cifar", n_train=50, n_test=10)
    (root / "cifar-10-batches-py" / drop).unlink()
    check_root("cifar10", str(root))


def gpu_share(env: Env, share: float) -> None:
    from sweeps.driver.cluster import check_gpu

    env.monkeypatch.setenv("SSAT_AUTOSCALER_CONFIG", str(env.tmp / "no-autoscaler.yaml"))
    check_gpu(parse_spec(spec(resources={"cpu": 1, "gpu": share})), gpus_now=0)


def unsafe_yaml(env: Env) -> None:
    marker = env.tmp / "pwned"
    env.must_not_exist.append(marker)
    load_spec(write(env, "evil.yaml", f'!!python/object/apply:os.system ["touch {marker}"]\n'))


def fault_spec(env: Env, value: str) -> None:
    env.monkeypatch.setenv("SSAT_FAULT", value)
    run_cli(env)


def sweep_dir(env: Env, name: str) -> None:
    from sweeps.paths import sweep_paths

    sweep_paths(env.tmp, name)


# ---- the table -------------------------------------------------------------------------------------------
CE, SE = ConfigError, SpecError
CASES = [
    # config: unknown keys (with the nearest valid key), wrong types, ranges, unknown names
    ("cfg-unknown-dotted-key", lambda e: cfg(**{"method.betta": 0.5}), CE,
     [r"unknown key 'method\.betta'", r"did you mean 'beta'"]),
    ("cfg-unknown-section-key", lambda e: from_dict({"method": {"tua": 1.0}}), CE,
     [r"unknown key 'method\.tua'", r"did you mean 'tau'", r"Valid keys: .*\bK\b"]),
    ("cfg-unknown-top-key", lambda e: from_dict({"metod": {}}), CE,
     [r"unknown key 'metod'", r"did you mean 'method'"]),
    ("cfg-override-key-not-string", lambda e: from_dict({}, {5: 1}), CE, [r"override key 5", r"dotted key"]),
    ("cfg-non-plain-value", lambda e: from_dict({"method": {"beta": {0.1, 0.2}}}), CE,
     [r"method\.beta", r"set", r"allowed: numbers, strings"]),
    ("cfg-type-beta-string", lambda e: cfg(**{"method.beta": "high"}), CE,
     [r"method\.beta", r"'high'", r"expected a number"]),
    ("cfg-type-K-fraction", lambda e: cfg(**{"method.K": 2.5}), CE, [r"method\.K", r"2\.5", r"expected an integer"]),
    ("cfg-type-bool", lambda e: cfg(**{"method.interpolate": "maybe"}), CE,
     [r"method\.interpolate", r"'maybe'", r"true or false"]),
    ("cfg-type-list", lambda e: cfg(**{"optim.lr_milestones": 5}), CE,
     [r"optim\.lr_milestones", r"5", r"expected a list"]),
    ("cfg-beta-nan", lambda e: cfg(**{"method.beta": "nan"}), CE, [r"method\.beta", r"'nan'", r"finite number"]),
    ("cfg-beta-huge-int", lambda e: cfg(**{"method.beta": 10**400}), CE, [r"method\.beta", r"10000", r"number"]),
    ("cfg-rho-zero", lambda e: cfg(**{"method.rho0": 0}), CE, [r"method\.rho0", r"\b0\.0\b", r"0 < rho0 < 1"]),
    ("cfg-rho-one", lambda e: cfg(**{"method.rho0": 1}), CE, [r"method\.rho0", r"\b1\.0\b", r"0 < rho0 < 1"]),
    ("cfg-rho-doubled", lambda e: cfg(**{"method.rho0": 0.6, "method.rho_double_epoch": 5}), CE,
     [r"method\.rho0", r"0\.6", r"2\*rho0 < 1"]),
    ("cfg-beta-above-1", lambda e: cfg(**{"method.beta": 1.5}), CE, [r"method\.beta", r"1\.5", r"0 <= beta <= 1"]),
    ("cfg-beta-negative", lambda e: cfg(**{"method.beta": -0.1}), CE,
     [r"method\.beta", r"-0\.1", r"0 <= beta <= 1"]),
    ("cfg-tau-zero", lambda e: cfg(**{"method.tau": 0}), CE, [r"method\.tau", r"0\.0", r"tau > 0"]),
    ("cfg-K-zero", lambda e: cfg(**{"method.K": 0}), CE, [r"method\.K", r": 0\b", r"K >= 1"]),
    ("cfg-gamma-below-1", lambda e: cfg(**{"attack.gamma": 0.9}), CE,
     [r"attack\.gamma", r"0\.9", r"gamma >= 1"]),
    ("cfg-t-beyond-epochs", lambda e: cfg(**{"attack.t": 150}), CE,
     [r"attack\.t", r"150", r"1\.\.optim\.epochs \(100\)"]),
    ("cfg-t-none-curious", lambda e: cfg(**{"attack.t": None}), CE, [r"attack\.t", r"None", r"curious"]),
    ("cfg-rho-double-beyond-epochs", lambda e: cfg(**{"method.rho_double_epoch": 120}), CE,
     [r"method\.rho_double_epoch", r"120", r"optim\.epochs \(100\)"]),
    ("cfg-unknown-method", lambda e: cfg(**{"method.name": "ssat"}), CE,
     [r"method\.name", r"'ssat'", r"allowed: .*ssat-mbi"]),
    ("cfg-unknown-schedule", lambda e: cfg(**{"attack.schedule": "cosine"}), CE,
     [r"attack\.schedule", r"'cosine'", r"const, linear, curious"]),
    ("cfg-unknown-dataset", lambda e: cfg(**{"data.dataset": "cifar11"}), CE,
     [r"data\.dataset", r"'cifar11'", r"did you mean 'cifar10'", r"svhn"]),
    ("cfg-unknown-model", lambda e: cfg(**{"model.name": "wrn-28-3"}), CE,
     [r"model\.name", r"'wrn-28-3'", r"cnn-small"]),
    ("cfg-interpolate-with-rst", lambda e: cfg(**{"method.name": "rst"}), CE,
     [r"method\.interpolate", r"'rst'", r"interpolate=false"]),
    ("cfg-gpu-memory-fraction", lambda e: cfg(**{"system.cuda_memory_fraction": 1.5}), CE,
     [r"system\.cuda_memory_fraction", r"1\.5", r"0 < x <= 1"]),
    ("cfg-split-seed-negative", lambda e: cfg(**{"data.split_seed": -1}), CE,
     [r"data\.split_seed", r"-1", r">= 0"]),
    ("cfg-milestones-unordered", lambda e: cfg(**{"optim.lr_milestones": [70, 60, 90]}), CE,
     [r"optim\.lr_milestones", r"\[70, 60, 90\]", r"strictly increasing"]),
    ("cfg-set-without-equals", lambda e: parse_overrides(["method.beta"]), CE,
     [r"--set 'method\.beta'", r"key=value"]),
    ("cfg-set-bad-yaml", lambda e: parse_overrides(["method.beta=[0.1,"]), CE,
     [r"--set 'method\.beta=\[0\.1,'", r"not a valid YAML"]),
    # --epochs scaling: t / milestones after rescaling
    ("epochs-milestones-collide", lambda e: scale_epochs(preset("mnist5k-ssat-mbi"), 2), CE,
     [r"--epochs 2", r"\[6, 7, 9\]", r"collide", r"optim\.lr_milestones"]),
    ("epochs-t-beyond-after-scaling", lambda e: from_dict(scale_epochs(preset("mnist5k-ssat-mbi"), 5),
                                                          {"attack.t": 7}), CE,
     [r"attack\.t", r"\b7\b", r"optim\.epochs \(5\)"]),
    ("epochs-zero", lambda e: scale_epochs(preset("mnist5k-ssat-mbi"), 0), CE,
     [r"--epochs", r"\b0\b", r"positive integer up to 10,000"]),
    ("epochs-absurd", lambda e: scale_epochs(preset("mnist5k-ssat-mbi"), 10**400), CE,
     [r"--epochs: 10000", r"\.\.\. \(401 characters\)", r"positive integer up to 10,000"]),
    ("epochs-past-python-int-text", lambda e: scale_epochs(preset("mnist5k-ssat-mbi"), 10**5000), CE,
     [r"--epochs: an integer of 16,610 bits", r"up to 10,000"]),
    ("cfg-epochs-huge", lambda e: cfg(**{"optim.epochs": 20_000}), CE,
     [r"optim\.epochs: 20000", r"allowed: 1\.\.10,000"]),
    ("cfg-string-huge", lambda e: cfg(**{"data.root": "/d" * 3000}), CE,
     [r"data\.root: 6,000 characters \('/d/d", r"\.\.\. \(6,002 characters\)\)", r"at most 4,096"]),
    # spec: keys, names (no escaping the folder), presets, resources, grid, search
    ("spec-not-a-mapping", lambda e: parse_spec([GRID]), SE, [r"expected a mapping", r"list"]),
    ("spec-unknown-key", lambda e: parse_spec(spec(seed=[0])), SE,
     [r"unknown key 'seed'", r"did you mean 'seeds'"]),
    ("spec-name-dotdot-slash", lambda e: parse_spec(spec(name="../x")), SE,
     [r"name: '\.\./x'", r"letters, digits", r"no '/' or '\.\.'"]),
    ("spec-name-slash", lambda e: parse_spec(spec(name="a/b")), SE, [r"name: 'a/b'", r"no '/'"]),
    ("spec-name-dotdot", lambda e: parse_spec(spec(name="..")), SE, [r"name: '\.\.'", r"letters, digits"]),
    ("spec-name-inner-dotdot", lambda e: parse_spec(spec(name="a..b")), SE, [r"name: 'a\.\.b'", r"contains '\.\.'"]),
    ("spec-name-absolute", lambda e: parse_spec(spec(name="/etc/passwd")), SE,
     [r"name: '/etc/passwd'", r"letters, digits"]),
    ("spec-name-too-long", lambda e: parse_spec(spec(name="a" * 101)), SE, [r"name: 'a{101}'", r"1-100"]),
    ("spec-name-newline", lambda e: parse_spec(spec(name="ok\n")), SE, [r"name: 'ok\\n'", r"letters, digits"]),
    ("spec-name-not-string", lambda e: parse_spec(spec(name=7)), SE, [r"name: 7", r"letters, digits"]),
    ("spec-unknown-preset", lambda e: parse_spec(spec(preset="mnist5k-ssat")), SE,
     [r"preset", r"'mnist5k-ssat'", r"did you mean", r"valid: .*mnist5k-ssat-mbi"]),
    ("spec-gpu-share-above-1", lambda e: parse_spec(spec(resources={"cpu": 1, "gpu": 1.5})), SE,
     [r"resources\.gpu", r"1\.5", r"0 <= gpu <= 1"]),
    ("spec-cpu-nan", lambda e: parse_spec(spec(resources={"cpu": float("nan")})), SE,
     [r"resources\.cpu", r"nan", r"> 0"]),
    ("spec-unknown-resource", lambda e: parse_spec(spec(resources={"gpus": 1})), SE,
     [r"unknown key 'resources\.gpus'", r"did you mean 'gpu'"]),
    ("spec-seeds-repeat", lambda e: parse_spec(spec(seeds=[1, 1])), SE, [r"seeds", r"\[1, 1\]", r"repeat"]),
    ("spec-seeds-type", lambda e: parse_spec(spec(seeds="0,1")), SE,
     [r"seeds", r"'0,1'", r"non-empty list of integers"]),
    ("spec-expected-seeds", lambda e: parse_spec(spec(expected_seeds="three")), SE,
     [r"expected_seeds", r"'three'", r"positive integer"]),
    ("spec-max-concurrent", lambda e: parse_spec(spec(max_concurrent=0)), SE,
     [r"max_concurrent", r": 0\b", r"positive integer"]),
    ("spec-metric-unknown", lambda e: parse_spec(spec(metric="accuracy")), SE,
     [r"metric", r"'accuracy'", r"val/pgd10"]),
    ("spec-overrides-range", lambda e: parse_spec(spec(overrides={"method.beta": 2})), SE,
     [r"method\.beta", r"2\.0", r"0 <= beta <= 1"]),
    ("spec-overrides-typo", lambda e: parse_spec(spec(overrides={"attack.schedul": "const"})), SE,
     [r"'attack\.schedul'", r"did you mean 'schedule'"]),
    ("spec-grid-row-bad", lambda e: parse_spec(spec(grid=[{"row": "r1", "set": {"method.tau": -1}}])), SE,
     [r"grid row 'r1'", r"method\.tau", r"-1", r"tau > 0"]),
    ("spec-grid-row-preset-type", lambda e: parse_spec(spec(grid=[{"row": "a", "preset": ["x"]}])), SE,
     [r"grid\[0\]\.preset", r"\['x'\]", r"name of an ssat preset"]),
    ("spec-epochs-t-beyond", lambda e: parse_spec(spec(epochs=5, grid=[{"row": "a", "set": {"attack.t": 7}}])),
     SE, [r"grid row 'a'", r"attack\.t", r"\b7\b", r"optim\.epochs \(5\)"]),
    ("spec-epochs-kwarg-collide", lambda e: parse_spec(spec(), epochs=2), SE,
     [r"--epochs", r"collide"]),
    ("spec-grid-and-search", lambda e: parse_spec({**GRID, "search": SEARCH["search"]}), SE,
     [r"exactly one of 'grid'", r"'search'"]),
    ("spec-space-range", lambda e: parse_spec(search(space={"method.beta": {"float": [1, 0]}})), SE,
     [r"search\.space\.method\.beta\.float", r"\[1, 0\]", r"low < high"]),
    ("spec-space-float-on-int", lambda e: parse_spec(search(space={"attack.t": {"float": [2, 8]}})), SE,
     [r"search\.space\.attack\.t\.float", r"\[2, 8\]", r"\{int: \[low, high\]\}"]),
    ("spec-space-choice-invalid", lambda e: parse_spec(search(space={"attack.schedule": {"choice": ["const", "cos"]}})),
     SE, [r"sampled configuration", r"attack\.schedule", r"'cos'", r"const, linear, curious"]),
    ("spec-space-when-type", lambda e: parse_spec(search(space={"method.beta": {"float": [0, 1], "when": ["x"]}})),
     SE, [r"search\.space\.method\.beta\.when", r"\['x'\]", r"earlier\.key"]),
    ("spec-space-unknown-dist-key", lambda e: parse_spec(search(space={"method.beta": {"flaot": [0, 1]}})), SE,
     [r"unknown key 'search\.space\.method\.beta\.flaot'", r"did you mean 'float'"]),
    ("spec-grace-period", lambda e: parse_spec(search(early_stopping={"grace_period": 1})), SE,
     [r"search\.early_stopping\.grace_period", r": 1\b", r">= 7"]),
    ("spec-reduction-factor", lambda e: parse_spec(search(early_stopping={"grace_period": 9, "reduction_factor": 1})),
     SE, [r"search\.early_stopping\.reduction_factor", r": 1\b", r"> 1"]),
    ("spec-confirm-seeds", lambda e: parse_spec(search(confirm={"seeds": [0, 5]})), SE,
     [r"search\.confirm\.seeds", r"\[0, 5\]", r"fresh seeds"]),
    ("spec-sampler-seed", lambda e: parse_spec(search(sampler_seed="x")), SE,
     [r"search\.sampler_seed", r"'x'", r"integer"]),
    # sizes: bounds no real sweep reaches, named in the error (issue 32)
    ("spec-num-samples-huge", lambda e: parse_spec(search(num_samples=10**9)), SE,
     [r"search\.num_samples: 1000000000", r"positive integer up to 10,000", r"split a larger one"]),
    ("spec-grid-too-many-trials", lambda e: parse_spec(spec(seeds=list(range(101)),
                                                            grid=[{"row": str(i)} for i in range(100)])), SE,
     [r"grid: 100 rows x 101 seeds = 10,100 trials", r"at most 10,000"]),
    ("spec-product-huge", lambda e: parse_spec(spec(grid={"product": {
        "method.beta": [0.5] * 1000, "method.tau": [1.0] * 1000, "attack.t": [1] * 1000}})), SE,
     [r"grid\.product: 1,000,000,000 combinations", r"at most 10,000 rows"]),
    ("spec-seeds-too-many", lambda e: parse_spec(spec(seeds=list(range(1001)))), SE,
     [r"seeds: 1,001 of them", r"at most 1,000"]),
    ("spec-epochs-huge", lambda e: parse_spec(spec(epochs=10**6)), SE,
     [r"preset 'mnist5k-ssat-mbi': epochs: 1000000", r"positive integer up to 10,000"]),
    ("spec-confirm-too-many", lambda e: parse_spec(search(confirm={"top_k": 100, "seeds": list(range(100, 201))})),
     SE, [r"search\.confirm: top_k 100 x 101 seeds = 10,100 trials", r"at most 10,000"]),
    ("spec-max-concurrent-huge", lambda e: parse_spec(spec(max_concurrent=10**6)), SE,
     [r"max_concurrent: 1000000", r"up to 10,000"]),
    ("spec-column-group-long", lambda e: parse_spec(spec(column_group="c" * 201)), SE,
     [r"column_group: 201 characters", r"at most 200"]),
    ("spec-table-not-text", lambda e: parse_spec(spec(table=["x"])), SE, [r"table: expected a string, got \['x'\]"]),
    ("spec-row-label-long", lambda e: parse_spec(spec(grid=[{"row": "r" * 300}])), SE,
     [r"grid\[0\]\.row: 300 characters", r"at most 200"]),
    ("spec-metric-long", lambda e: parse_spec(spec(metric="val/" + "m" * 300)), SE,
     [r"metric: 304 characters", r"at most 200"]),
    ("spec-description-long", lambda e: parse_spec(spec(description="d" * 5001)), SE,
     [r"description: 5,001 characters", r"at most 5,000"]),
    ("spec-custom-resource-long", lambda e: parse_spec(spec(resources={"custom": {"n" * 201: 1}})), SE,
     [r"resources\.custom: 201 characters", r"at most 200"]),
    ("spec-space-key-long", lambda e: parse_spec(search(space={"k" * 201: {"float": [0, 1]}})), SE,
     [r"search\.space: a key of 201 characters", r"at most 200 characters", r"'k{119}\.\.\. \(203 characters\)"]),
    ("spec-space-choices-many", lambda e: parse_spec(search(space={"method.beta": {"choice": [0.5] * 1001}})), SE,
     [r"search\.space\.method\.beta\.choice: 1,001 values", r"at most 1,000"]),
    ("yaml-file-huge", lambda e: load_spec(write(e, "huge.yaml", GOOD_YAML + "#" * 2**20)), SE,
     [r"huge\.yaml: 1,048,\d+ bytes", r"at most 1,048,576 bytes"]),
    ("yaml-int-past-python-text",
     lambda e: load_spec(write(e, "int.yaml", GOOD_YAML + "max_concurrent: " + "9" * 5000)),
     SE, [r"int\.yaml: malformed YAML", r"4300 digits"]),
    ("cli-epochs-huge", lambda e: run_cli(e, "--epochs", "100000"), CliExit,
     [r"--epochs: 100000", r"positive integer up to 10,000"]),
    # YAML files: line numbers, safe loader, unreadable files
    ("yaml-malformed-line", lambda e: load_spec(write(e, "bad.yaml", "name: x\npreset: p\ngrid:\n  - {row: a\n")), SE,
     [r"bad\.yaml", r"malformed YAML", r"line 5"]),
    ("yaml-bad-indent-line", lambda e: load_spec(write(e, "ind.yaml", "name: x\n  preset: p\nseeds: [0]\n")), SE,
     [r"ind\.yaml", r"malformed YAML at line 2"]),
    ("yaml-python-tag-refused", unsafe_yaml, SE,
     [r"evil\.yaml", r"tag not allowed", r"safe loader", r"line 1", r"python/object/apply:os\.system"]),
    ("yaml-top-level-list", lambda e: load_spec(write(e, "list.yaml", "- a\n- b\n")), SE,
     [r"list\.yaml", r"expected a mapping", r"list"]),
    ("yaml-missing-file", lambda e: load_spec(e.tmp / "nope.yaml"), SE, [r"nope\.yaml", r"no such spec file"]),
    ("yaml-directory", lambda e: load_spec(e.tmp), SE, [r"cannot be read as a YAML spec file"]),
    ("yaml-unknown-key-in-file", lambda e: load_spec(write(e, "k.yaml", GOOD_YAML + "max_concurent: 2\n")), SE,
     [r"k\.yaml", r"unknown key 'max_concurent'", r"did you mean 'max_concurrent'"]),
    # CLI (in-process, --dry-run): exit code 2 and an `error:` line naming the problem
    ("cli-set-range", lambda e: run_cli(e, "--set", "method.beta=2"), CliExit,
     [r"^error: ", r"method\.beta", r"2\.0", r"0 <= beta <= 1"]),
    ("cli-set-typo", lambda e: run_cli(e, "--set", "method.bta=0.3"), CliExit,
     [r"'method\.bta'", r"did you mean 'beta'"]),
    ("cli-set-bad-yaml", lambda e: run_cli(e, "--set", "optim.lr_milestones=[2,"), CliExit,
     [r"--set 'optim\.lr_milestones=\[2,'", r"not a valid YAML"]),
    ("cli-set-t-beyond", lambda e: run_cli(e, "--set", "attack.schedule=curious", "attack.t=50"), CliExit,
     [r"attack\.t", r"50", r"optim\.epochs \(10\)"]),
    ("cli-name-escapes", lambda e: run_cli(e, "--name", "../escape"), CliExit,
     [r"name: '\.\./escape'", r"no '/' or '\.\.'"]),
    ("cli-epochs-zero", lambda e: run_cli(e, "--epochs", "0"), CliExit, [r"epochs: 0", r"positive integer"]),
    ("cli-epochs-collide", lambda e: run_cli(e, "--epochs", "2"), CliExit, [r"--epochs", r"collide"]),
    ("cli-seeds-repeat", lambda e: run_cli(e, "--seeds", "3", "3"), CliExit, [r"seeds", r"\[3, 3\]", r"repeat"]),
    ("cli-max-concurrent", lambda e: run_cli(e, "--max-concurrent", "0"), CliExit,
     [r"max_concurrent: 0", r"positive integer"]),
    ("cli-missing-spec", lambda e: cli(e, "run", str(e.tmp / "missing.yaml"), "--dry-run"), CliExit,
     [r"missing\.yaml", r"no such spec file"]),
    ("cli-malformed-spec", lambda e: cli(e, "run", str(write(e, "m.yaml", "name: [x\n")), "--dry-run"), CliExit,
     [r"m\.yaml", r"malformed YAML at line 2"]),
    ("cli-data-root-empty", lambda e: cli(e, "run", str(write(e, "c.yaml", GOOD_YAML.replace(
        "mnist5k-ssat-mbi", "cifar10-ssat-mbi").replace("{method.beta: 0.5}", "{model.name: wrn-16-1}"))),
        "--workdir", str(e.tmp), "--data-root", str(e.tmp / "empty")), CliExit,
     [r"data\.root", r"empty", r"missing cifar-10-batches-py/data_batch_1", r"--download cifar10"]),
    ("cli-resume-unknown", lambda e: cli(e, "resume", "nosuch", "--workdir", str(e.tmp)), CliExit,
     [r"no sweep named 'nosuch'"]),
    # CLI options the spec does not check: named as the option, never as the spec file's mistake
    ("cli-workdir-is-a-file", lambda e: cli(e, "run", str(write(e, "good.yaml", GOOD_YAML)), "--workdir",
                                            str(write(e, "afile", "x"))), CliExit,
     [r"^error: --workdir \S*afile: is a file, not a folder", r"runs/, mlflow\.db and mlartifacts/"]),
    ("cli-workdir-below-a-file", lambda e: cli(e, "status", "s", "--workdir", str(write(e, "afile", "x")) + "/sub"),
     CliExit, [r"^error: --workdir \S*afile/sub: is below \S*afile, which is a file, not a folder"]),
    ("cli-max-failures-below-minus-1", lambda e: run_cli(e, "--max-failures", "-2"), CliExit,
     [r"^error: --max-failures: -2; allowed: -1 \(retry a crashed trial forever", r"0 \(never retry\)"]),
    ("cli-name-not-the-spec-file", lambda e: run_cli(e, "--name", "a/b"), CliExit,
     [r"^error: --name: 'a/b'; allowed: 1-100 letters[^\n]*, so no '/' or '\.\.'\)$"]),
    ("cli-set-names-the-option", lambda e: run_cli(e, "--set", "method.beta=2"), CliExit,
     [r"^error: --set method\.beta=2: ", r"0 <= beta <= 1", r"\(spec \S*good\.yaml\)$"]),
    ("cli-set-names-the-item", lambda e: run_cli(e, "--set", "attack.t=1", "method.tau=-1"), CliExit,
     [r"^error: --set method\.tau=-1: ", r"tau > 0"]),
    ("cli-seeds-names-the-option", lambda e: run_cli(e, "--seeds", "3", "3"), CliExit,
     [r"^error: --seeds 3 3: seeds: \[3, 3\] repeat"]),
    ("cli-max-concurrent-names-the-option", lambda e: run_cli(e, "--max-concurrent", "0"), CliExit,
     [r"^error: --max-concurrent 0: max_concurrent: 0"]),
    ("cli-sync-timeout", lambda e: cli(e, "sync", "s", "--workdir", str(e.tmp), "--timeout", "-1"), CliExit,
     [r"^error: --timeout: -1\.0; allowed: seconds >= 0"]),
    # data: a root without the dataset (which files, how to get them), labeled index files of another split
    ("data-root-missing-files", lambda e: check_root("cifar10", str(e.tmp / "empty")), DataError,
     [r"data\.root", r"does not hold cifar10", r"data_batch_1", r"test_batch", r"--download cifar10"]),
    ("data-root-one-missing", lambda e: cifar_missing(e, "test_batch"), DataError,
     [r"missing cifar-10-batches-py/test_batch\.", r"--download cifar10"]),
    ("data-root-not-set", lambda e: check_root("svhn", None), DataError,
     [r"data\.root: not set", r"train_32x32\.mat", r"--data-root", r"--download"]),
    ("data-unknown-dataset", lambda e: load_arrays("imagenet"), DataError,
     [r"data\.dataset", r"'imagenet'", r"cifar10"]),
    ("data-labeled-idx-out-of-range", lambda e: make_split("cifar10", np.arange(600) % 10, split_seed=0,
                                                           labeled_idx=np.array([0, 1, 5000])), DataError,
     [r"data\.labeled_idx_file", r"\[0, 600\)", r"0\.\.5000", r"another dataset"]),
    ("data-labeled-idx-repeat", lambda e: make_split("cifar10", np.arange(600) % 10, split_seed=0,
                                                     labeled_idx=np.array([3, 3])), DataError,
     [r"data\.labeled_idx_file", r"repeat"]),
    ("data-labeled-idx-2d", lambda e: make_split("cifar10", np.arange(600) % 10, split_seed=0,
                                                 labeled_idx=np.zeros((2, 2))), DataError,
     [r"data\.labeled_idx_file", r"1-D", r"\(2, 2\)"]),
    ("data-labeled-idx-not-npy", lambda e: import_labeled_idx(str(write(e, "idx.npy", "not numpy"))), DataError,
     [r"data\.labeled_idx_file", r"idx\.npy", r"not a readable \.npy"]),
    ("data-too-many-labels", lambda e: make_split("cifar10", np.arange(600) % 10, split_seed=0, n_labeled=4000),
     DataError, [r"data\.n_val \+ data\.n_labeled", r"5000", r"600 training images"]),
    # pseudo-labels: another split, wrong shape, rows that are not probabilities
    ("pseudo-other-split", lambda e: load_teacher(e, {"logits": torch.zeros(5, 10), "split_hash": "a" * 16}),
     PseudoLabelError, [r"data\.pseudo_labels", r"split 'a{16}'", r"this run's split is 'b{16}'"]),
    ("pseudo-wrong-shape", lambda e: load_teacher(e, {"logits": torch.zeros(4, 10), "split_hash": "b" * 16}),
     PseudoLabelError, [r"data\.pseudo_labels", r"shape \(4, 10\)", r"expected \(5, 10\)"]),
    ("pseudo-wrong-classes", lambda e: load_teacher(e, {"probs": torch.full((5, 100), 0.01), "split_hash": "b" * 16}),
     PseudoLabelError, [r"shape \(5, 100\)", r"expected \(5, 10\)"]),
    ("pseudo-rows-not-summing", lambda e: load_teacher(e, {"probs": torch.full((5, 10), 0.2), "split_hash": "b" * 16}),
     PseudoLabelError, [r"data\.pseudo_labels", r"summing to 1", r"2\.0000"]),
    ("pseudo-nan", lambda e: load_teacher(e, {"logits": torch.full((5, 10), float("nan")), "split_hash": "b" * 16}),
     PseudoLabelError, [r"data\.pseudo_labels", r"NaN"]),
    ("pseudo-no-tensor", lambda e: load_teacher(e, {"labels": torch.zeros(5)}), PseudoLabelError,
     [r"data\.pseudo_labels", r"no 'logits' or 'probs'"]),
    # checkpoints: another model, corrupt, truncated, foreign
    ("ckpt-other-model", lambda e: load_checkpoint_model(checkpoint(e, **{"model.name": "wrn-16-1"})), ForeignFileError,
     [r"best\.pt", r"weights do not fit model 'wrn-16-1'"]),
    ("ckpt-flipped-byte", lambda e: load_checkpoint_model(flip_byte(e)), CorruptFileError,
     [r"best\.pt", r"checksum mismatch"]),
    ("ckpt-truncated-no-sidecar", lambda e: load_checkpoint_model(truncated(e)), CorruptFileError,
     [r"best\.pt", r"best\.pt\.sha256 is missing"]),
    ("ckpt-truncated-unverified", lambda e: load_checkpoint_model(truncated(e), unverified=True), CorruptFileError,
     [r"best\.pt", r"cannot be read as a checkpoint"]),
    ("ckpt-not-ssat", lambda e: load_checkpoint_model(teacher_file(e, {"weights": torch.zeros(2)})), ForeignFileError,
     [r"teacher\.pt", r"not an ssat checkpoint", r"'model' and 'config'"]),
    ("ckpt-bad-config", lambda e: load_checkpoint_model(checkpoint(e, **{"method.beta": 3.0})), ConfigError,
     [r"method\.beta", r"3\.0", r"0 <= beta <= 1"]),
    # runner: a GPU share with no GPU anywhere, names escaping the working folder
    ("gpu-share-without-gpu", lambda e: gpu_share(e, 0.5), SweepError,
     [r"resources\.gpu = 0\.5", r"no GPU", r"--cpu-only"]),
    ("sweep-dir-escapes", lambda e: sweep_dir(e, "../../../outside"), SweepError,
     [r"'\.\./\.\./\.\./outside'", r"escapes the working folder"]),
    # fault injection (tests): a typo in SSAT_FAULT fails at the CLI, not silently in a trial
    ("fault-unknown-kind", lambda e: fault_spec(e, "explode@2"), CliExit,
     [r"SSAT_FAULT", r"'explode@2'", r"raise, exit, pause"]),
    ("fault-bad-step", lambda e: fault_spec(e, "exit@2:x"), CliExit, [r"SSAT_FAULT", r"'exit@2:x'", r"EPOCH\[:STEP\]"]),
    ("fault-bad-selector", lambda e: fault_spec(e, "raise@2/host=a"), CliExit,
     [r"SSAT_FAULT", r"'host=a'", r"seed=N, node=HOST"]),
]


@pytest.mark.parametrize("trigger,exc_type,fragments", [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_bad_input_gets_a_clear_error(trigger, exc_type, fragments, tmp_path, capsys, monkeypatch):
    env = Env(tmp_path, capsys, monkeypatch, [])
    with pytest.raises(Exception) as info:
        trigger(env)
    exc = info.value
    assert type(exc) is exc_type, (
        f"expected {exc_type.__name__}, got {type(exc).__name__}: {exc}")
    msg = str(exc)
    assert "Traceback" not in msg and msg.strip(), msg
    for frag in fragments:
        assert re.search(frag, msg, re.M), f"{frag!r} not in message: {msg}"
    for path in env.must_not_exist:
        assert not path.exists(), f"{path} was created: the YAML was executed"


def test_table_size():
    assert len(CASES) >= 35
    assert len({c[0] for c in CASES}) == len(CASES)


HUGE = "x" * 1_000_000  # a user once gave a 10 MB --name, and the error printed all of it


@pytest.mark.parametrize("trigger, field", [
    (lambda e: run_cli(e, "--name", HUGE), "--name"),
    (lambda e: run_cli(e, "--set", f"data.root={HUGE}"), "data.root"),
    (lambda e: run_cli(e, "--set", f"attack.schedule={HUGE}"), "attack.schedule"),
    (lambda e: run_cli(e, "--set", f"{HUGE}=1"), "unknown key"),
    (lambda e: run_cli(e, "--rows", HUGE), "--rows"),
    (lambda e: parse_spec(spec(preset=HUGE)), "preset"),
    (lambda e: parse_spec(spec(column_group=HUGE)), "column_group"),
    (lambda e: parse_spec(spec(seeds=[HUGE])), "seeds"),
    (lambda e: parse_spec(spec(grid=[{"row": "a", "set": {HUGE: 1}}])), "unknown key"),
    (lambda e: parse_spec(search(space={"method.beta": {"choice": [HUGE]}})), "method.beta"),
    (lambda e: parse_spec(spec(**{HUGE: 1})), "unknown key"),
], ids=["cli-name", "cli-set-path", "cli-set-choice", "cli-set-key", "cli-rows", "preset", "column-group", "seeds",
        "grid-key", "space-choice", "spec-key"])
def test_an_error_quotes_only_an_excerpt_of_a_huge_value(trigger, field, tmp_path, capsys, monkeypatch):
    with pytest.raises((CliExit, ConfigError)) as info:
        trigger(Env(tmp_path, capsys, monkeypatch, []))
    msg = str(info.value)
    assert field in msg and "1,000,0" in msg and "x" * 121 not in msg, msg[:2000]  # a 120-character excerpt

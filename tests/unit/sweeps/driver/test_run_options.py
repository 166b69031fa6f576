"""The options of `run` as the spec sees them (sweeps/driver/run_options.py): which options shape the spec, a
mistake only an option makes said as that option's (the first option that fails alone, the --set items that do,
else all of them together), each flag written as a user types it, and --name's rules."""
from __future__ import annotations

from pathlib import Path

import pytest

from sweeps.driver.run_options import RunArgs, _flag_text, check_name_flag, load_run_spec
from sweeps.errors import UsageError
from sweeps.spec import SpecError

DEMO = Path(__file__).resolve().parents[4] / "sweeps" / "specs" / "mnist5k-demo.yaml"


def refused(args: RunArgs, spec: Path = DEMO) -> str:
    with pytest.raises(SpecError) as info:
        load_run_spec(spec, args)
    return str(info.value)


def test_only_the_options_given_shape_the_spec():
    assert RunArgs().spec_options() == {}  # cpu_only False, sets {} and None are not given
    assert RunArgs(address="a", max_failures=5, name="n", reuse=True, optuna_storage="x").spec_options() == {}
    given = RunArgs(epochs=2, seeds=[1], sets={"a": 1}, cpu_only=True, max_concurrent=3, data_root="d", rows=["r"],
                    gpu_share=0.5, samples=4, top_k=2)
    assert given.spec_options() == {"epochs": 2, "seeds": [1], "sets": {"a": 1}, "cpu_only": True,
                                     "max_concurrent": 3, "data_root": "d", "rows": ["r"], "gpu_share": 0.5,
                                     "samples": 4, "top_k": 2}
    assert RunArgs(epochs=0, seeds=[], max_concurrent=0).spec_options() == {"epochs": 0, "seeds": [],
                                                                           "max_concurrent": 0}


def test_each_flag_is_written_as_a_user_types_it():
    assert _flag_text("sets", {"a.b": "x", "c": True, "d": [1, 2], "e": 0.5}) == '--set a.b=x c=true d=[1, 2] e=0.5'
    assert _flag_text("cpu_only", True) == "--cpu-only"
    assert _flag_text("seeds", [1, 2]) == "--seeds 1 2"
    assert _flag_text("epochs", 3) == "--epochs 3"


def test_an_options_mistake_is_said_as_that_options():
    f = f"(spec {DEMO})"
    # two options, each valid alone, failing together: both named
    assert refused(RunArgs(cpu_only=True, sets={"system.precision": "fp16"})) == (
        "--set system.precision=fp16 with --cpu-only: preset 'mnist5k-ssat-mbi': system.precision: 'fp16' with "
        "system.device='cpu'; fp16 is float16 autocast with a gradient scaler, for CUDA; on a CPU use fp32 (or "
        f"auto) {f}")
    # of several --set items, those that fail alone; if none does, all of them
    assert refused(RunArgs(sets={"optim.lr": 0.1, "method.beta": 2})).startswith(
        "--set method.beta=2: preset 'mnist5k-ssat-mbi': method.beta: 2")
    assert refused(RunArgs(sets={"method.rho0": 0.6, "method.rho_double_epoch": 2})) == (
        "--set method.rho0=0.6 method.rho_double_epoch=2: preset 'mnist5k-ssat-mbi': method.rho0: 0.6 doubled is "
        f"1.2; allowed: 2*rho0 < 1 {f}")
    # one --set item alone
    assert refused(RunArgs(sets={"method.beta": 2})).startswith("--set method.beta=2: ")


def test_the_files_own_mistake_stays_the_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: s\npreset: mnist5k-ssat-mbi\nset: {method.beta: 3}\n")
    expected = refused(RunArgs(), bad)
    assert expected.startswith(f"{bad}: unknown key 'set'")
    assert refused(RunArgs(epochs=2, sets={"method.beta": 0.5}), bad) == expected  # the options are not blamed


def test_a_name_flag_follows_the_spec_names_rules():
    check_name_flag("a.b_c-1")
    for bad in ("a..b", "a/b", "", "x" * 101):
        with pytest.raises(UsageError) as info:
            check_name_flag(bad)
        assert str(info.value).endswith("allowed: 1-100 letters, digits, '.', '_' or '-' (it names folders and "
                                        "the MLflow experiment, so no '/' or '..')")

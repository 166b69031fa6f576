"""`python -m sweeps` as a person meets it first: --help at once (no torch, mlflow or Ray imported), help on every
option and an example per command, `status` listing the sweeps, a misspelt or never-started sweep named as such,
and an unknown `--gpu` refused with the known names before anything else runs."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sweeps import cli
from sweeps.driver.state import SweepState
from sweeps.driver.lock import LOCK_FILE, Host, LockInfo, hold
from sweeps.errors import SweepError
from sweeps.driver.state import missing_sweep
from sweeps.paths import list_sweeps, sweep_paths, sweeps_table

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "mlflow", "ray", "optuna")
COMMANDS = ("run", "resume", "status", "stop", "sync", "demo", "calibrate")
# every option of every command, as before this change (and --no-measure, new): none lost (others may come)
OPTIONS = {
    "run": {"--epochs", "--seeds", "--rows", "--set", "--name", "--address", "--data-root", "--tracking-uri",
            "--cpu-only", "--gpu-share", "--max-concurrent", "--max-failures", "--samples", "--top-k",
            "--optuna-storage", "--dry-run", "--verbose", "--gpu", "--no-measure", "--json", "--workdir"},
    "resume": {"--rerun-failed", "--address", "--tracking-uri", "--workdir"},
    "status": {"--workdir"}, "stop": {"--workdir"}, "sync": {"--timeout", "--workdir"},
    "demo": {"--epochs", "--seeds", "--rows", "--set", "--name", "--max-concurrent", "--workdir"},
    "calibrate": {"--budget", "--out", "--missing-only", "--only", "--set", "--jobs", "--steps", "--teacher-warmup",
                  "--eval-n", "--aa-n", "--device", "--workdir"},
}


@pytest.fixture
def env(monkeypatch, capsys):
    """main() setdefaults two variables: restored after the test; no user calibration is read."""
    for var in ("RAY_AUTH_MODE", "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S"):
        monkeypatch.setenv(var, os.environ.get(var, "x"))
    capsys.readouterr()
    return capsys


def fails(capsys, *argv: str) -> str:
    """The one-line error of a command that exits with code 2."""
    assert cli.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err[len("error: "):].strip()


def test_help_imports_no_torch_mlflow_or_ray():
    code = ("import sys\nfrom sweeps.cli import build_parser, main\n"
            "names = next(a for a in build_parser()._actions if a.dest == 'cmd').choices\n"
            f"assert set({COMMANDS!r}) <= set(names), names\n"
            "for argv in [['--help'], *[[c, '--help'] for c in names]]:\n"
            "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code == 0, (argv, e.code)\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "usage: python -m sweeps calibrate" in out.stdout and "--no-measure" in out.stdout


def _subparsers():
    ap = cli.build_parser()
    return next(a for a in ap._actions if a.dest == "cmd").choices


def test_every_option_of_every_command_has_help_and_each_command_an_example():
    subs = _subparsers()
    assert set(COMMANDS) <= set(subs)
    for name, p in subs.items():
        opts = {s for a in p._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
        assert OPTIONS.get(name, set()) <= opts, name
        for a in p._actions:
            assert a.help and len(a.help) > 10, (name, a.dest)
        assert p.epilog.startswith("example:\n  python -m sweeps ") and f"python -m sweeps {name}" in p.epilog
        assert "example:\n  python -m sweeps" in p.format_help()  # shown as written (RawDescriptionHelpFormatter)


def test_options_parse_as_before():
    ap = cli.build_parser()
    a = ap.parse_args(["run", "s.yaml", "--epochs", "3", "--seeds", "1", "2", "--rows", "x|y", "--set", "a.b=1",
                       "--samples", "4", "--top-k", "2", "--optuna-storage", "sqlite:///o.db", "--gpu-share", "0.5",
                       "--max-failures", "-1", "--dry-run", "--gpu", "H200", "--json", "e.json", "--workdir", "w"])
    assert (a.cmd, a.spec, a.epochs, a.seeds, a.rows, a.set, a.samples, a.top_k, a.optuna_storage, a.gpu_share,
            a.max_failures, a.dry_run, a.gpu, a.json, a.workdir, a.no_measure) == (
        "run", "s.yaml", 3, [1, 2], ["x|y"], ["a.b=1"], 4, 2, "sqlite:///o.db", 0.5, -1, True, "H200", "e.json", "w",
        False)
    d = ap.parse_args(["run", "s.yaml"])
    assert (d.max_failures, d.set, d.cpu_only, d.name, d.address) == (2, [], False, None, None)
    assert ap.parse_args(["status"]).name is None and ap.parse_args(["status", "s"]).name == "s"
    r = ap.parse_args(["resume", "s", "--rerun-failed", "--address", "auto", "--tracking-uri", "http://h:5000"])
    assert (r.name, r.rerun_failed, r.address, r.tracking_uri) == ("s", True, "auto", "http://h:5000")
    assert ap.parse_args(["sync", "s"]).timeout == 30.0
    c = ap.parse_args(["calibrate", "a.yaml", "b.yaml", "--only", "eval"])
    assert (c.specs, c.only, c.steps, c.teacher_warmup, c.device) == (["a.yaml", "b.yaml"], ["eval"], 40, 20, "cuda")
    with pytest.raises(SystemExit):
        ap.parse_args(["stop"])  # stop, resume and sync still need a name


# ---- status, and a sweep that is not there ----------------------------------------------------------------------
def state(work: Path, name: str, status: str, created: str = "2026-12-01 10:00:00") -> None:
    folder = work / "runs" / "sweeps" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep.json").write_text(json.dumps({"name": name, "spec_path": f"specs/{name}.yaml", "status": status,
                                                   "created": created}))


def test_status_without_a_name_lists_the_sweeps(tmp_path, env):
    assert cli.main(["status", "--workdir", str(tmp_path)]) == 0
    assert env.readouterr().out == (f"no sweeps in {tmp_path / 'runs' / 'sweeps'}; start one with `python -m sweeps "
                                    f"run SPEC --workdir {tmp_path}`\n")
    state(tmp_path, "mnist5k-search", "done")
    state(tmp_path, "mnist5k-demo", "incomplete", "2026-12-02 11:00:00")
    (tmp_path / "runs" / "sweeps" / "half").mkdir()
    (tmp_path / "runs" / "sweeps" / "notes.txt").write_text("not a sweep")
    (tmp_path / "runs" / "sweeps" / "torn").mkdir()
    (tmp_path / "runs" / "sweeps" / "torn" / "sweep.json").write_text("{")
    assert cli.main(["status", "--workdir", str(tmp_path)]) == 0
    out = env.readouterr().out.splitlines()
    assert out[0] == f"4 sweep(s) in {tmp_path / 'runs' / 'sweeps'}:"
    assert [re.split(r"  +", ln) for ln in out[1:-1]] == [
        ["name", "status", "created", "spec"], ["half", "never started", "-", "-"],
        ["mnist5k-demo", "incomplete", "2026-12-02 11:00:00", "specs/mnist5k-demo.yaml"],
        ["mnist5k-search", "done", "2026-12-01 10:00:00", "specs/mnist5k-search.yaml"],
        ["torn", "unreadable sweep.json (JSONDecodeError)", "-", "-"]]
    assert out[-1] == "(`python -m sweeps status NAME` for one sweep's stages, driver and trials)"


def test_list_sweeps_reads_each_state(tmp_path):
    assert list_sweeps(tmp_path) == []
    state(tmp_path, "b", "done")
    (tmp_path / "runs" / "sweeps" / "a").mkdir()
    (tmp_path / "runs" / "sweeps" / "c").mkdir()
    (tmp_path / "runs" / "sweeps" / "c" / "sweep.json").write_text("[1]")
    assert list_sweeps(tmp_path) == [
        {"name": "a", "status": "never started", "created": "-", "spec": "-"},
        {"name": "b", "status": "done", "created": "2026-12-01 10:00:00", "spec": "specs/b.yaml"},
        {"name": "c", "status": "unreadable sweep.json (not an object)", "created": "-", "spec": "-"}]
    table = sweeps_table(tmp_path).splitlines()
    assert table[0] == f"3 sweep(s) in {tmp_path / 'runs' / 'sweeps'}:"
    assert table[1].split() == ["name", "status", "created", "spec"]
    assert table[3].split() == ["b", "done", "2026-12-01", "10:00:00", "specs/b.yaml"]
    assert table[1].index("status") == table[3].index("done") and table[1].index("spec") == table[3].index("specs/")


def test_a_misspelt_name_gets_the_nearest_and_the_list(tmp_path, env):
    for name in ("mnist5k-search", "mnist5k-demo", "cifar10-table1"):
        state(tmp_path, name, "done")
    root = tmp_path / "runs" / "sweeps"
    for cmd in ("status", "resume", "stop", "sync"):
        assert fails(env, cmd, "mnist5k-serch", "--workdir", str(tmp_path)) == (
            f"no sweep named 'mnist5k-serch' in {root}; nearest: mnist5k-search, mnist5k-demo; all: cifar10-table1, "
            "mnist5k-demo, mnist5k-search")
    assert fails(env, "status", "zzz", "--workdir", str(tmp_path)) == (
        f"no sweep named 'zzz' in {root}; all: cifar10-table1, mnist5k-demo, mnist5k-search")
    assert fails(env, "resume", "zzz", "--workdir", str(tmp_path / "empty")) == (
        f"no sweep named 'zzz' in {tmp_path / 'empty' / 'runs' / 'sweeps'}; it has none (`python -m sweeps run SPEC` "
        "starts one)")
    for i in range(25):
        state(tmp_path, f"x{i:02d}", "done")
    assert missing_sweep(sweep_paths(tmp_path, "q")).endswith(", x16 and 8 more")


def test_a_sweep_that_never_wrote_its_state_says_so(tmp_path, env):
    p = sweep_paths(tmp_path, "half")
    p.sweep_dir.mkdir(parents=True)
    assert fails(env, "resume", "half", "--workdir", str(tmp_path)) == (
        f"sweep half never started (stopped before its state was written: no sweep.json in {p.sweep_dir}); run it "
        f"again with `python -m sweeps run SPEC --name half --workdir {p.workdir}`")
    here = Host.here()  # a driver killed before it wrote the state left its lock: its command is the one to rerun
    dead = LockInfo(pid=2 ** 22 + 17, host=here.name, boot_id=here.boot_id, start_ticks=1, started=time.time(),
                    heartbeat=time.time(), command="python -m sweeps run s.yaml --name half", token="t")
    (p.sweep_dir / LOCK_FILE).write_bytes(dead.to_json())
    with pytest.raises(SweepError, match=r"never started .*; run it again with `python -m sweeps run s\.yaml --name "
                                         r"half`$"):
        SweepState.load(p)
    (p.sweep_dir / LOCK_FILE).unlink()
    with hold(p.sweep_dir, "python -m sweeps run s.yaml", name="half", workdir=p.workdir, log=lambda s: None):
        with pytest.raises(SweepError, match=rf"^sweep half is starting \(driver pid {os.getpid()}: `python -m sweeps "
                                             r"run s\.yaml`\) and has not written its state yet; try again"):
            SweepState.load(p)


# ---- --gpu ------------------------------------------------------------------------------------------------------
def test_an_unknown_gpu_is_refused_with_the_known_names_before_anything_else(tmp_path, env, monkeypatch):
    import sweeps.driver.run_options as O

    def loaded(*a, **k):
        raise AssertionError("the spec was built into trials before --gpu was checked")

    monkeypatch.setenv("SSAT_CALIBRATION_DIR", str(tmp_path / "none"))
    monkeypatch.setattr(O, "load_run_spec", loaded)
    spec = str(ROOT / "sweeps" / "specs" / "mnist5k-demo.yaml")
    known = "NVIDIA H100 80GB HBM3, NVIDIA H200"
    assert fails(env, "run", spec, "--dry-run", "--gpu", "foo", "--workdir", str(tmp_path)) == (
        f"--gpu 'foo': no measured GPU has that name; allowed: one of {known} (or a part of one name, any case)")
    assert fails(env, "run", spec, "--dry-run", "--gpu", "nvidia", "--workdir", str(tmp_path)) == (
        f"--gpu 'nvidia': names several measured GPUs ({known}); allowed: one of {known} (or a part of one name, "
        "any case)")
    with pytest.raises(AssertionError, match="built into trials"):  # a known name: on to the spec
        cli.main(["run", spec, "--dry-run", "--gpu", "h200", "--workdir", str(tmp_path)])


def test_the_dry_run_gets_the_resolved_gpu_and_the_measure_choice(tmp_path, env, monkeypatch):
    import sweeps.costs.dryrun as DR

    seen = []
    monkeypatch.setenv("SSAT_CALIBRATION_DIR", str(tmp_path / "none"))
    monkeypatch.setattr(DR, "dry_run", lambda spec, **kw: seen.append((spec.name, kw["gpu"], kw["measure"])))
    spec = str(ROOT / "sweeps" / "specs" / "mnist5k-demo.yaml")
    assert cli.main(["run", spec, "--dry-run", "--gpu", "h200", "--workdir", str(tmp_path)]) == 0
    assert cli.main(["run", spec, "--dry-run", "--no-measure", "--workdir", str(tmp_path)]) == 0
    assert seen == [("mnist5k-demo", "NVIDIA H200", True), ("mnist5k-demo", None, False)]

"""benchmarks/device_env.sh: the packages the GPU machine lacks, built for this machine's Python 3.11 with the same
closure and strip as the 3.12 set, then used the way a GPU command uses it (`. unpack.sh`, then a real sweep).

"The GPU machine" is emulated by a fresh virtual environment whose site-packages holds only the packages that
benchmarks/device_env.present names (symlinked from .venv: torch, numpy, pandas, ...): whatever the packed set lacks
and the machine does not have fails here, in the driver and in every Ray worker (they run that interpreter).
Downloads go to the script's wheel cache (~/.cache/ssat-devenv, or $SSAT_DEVENV_CACHE): the first run needs PyPI
(several minutes), later ones are offline. Skipped, saying why, when the package index cannot be reached.
"""
from __future__ import annotations

import fnmatch
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PRESENT = ROOT / "benchmarks" / "device_env.present"


def _present_patterns() -> list[str]:
    lines = (ln.split("#")[0].strip() for ln in PRESENT.read_text().splitlines())
    return [p.lower() if "*" in p else canonicalize_name(p) for p in lines if p]


def _is_present(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(canonicalize_name(name), p) for p in patterns)


def _index_reachable() -> str | None:
    """None when the package index answers, else why not."""
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/") + "/ray/"
    try:
        with urllib.request.urlopen(url, timeout=15) as r:
            return None if r.status == 200 else f"{url} answered {r.status}"
    except OSError as exc:
        return f"{url} cannot be reached ({exc})"


def _fake_gpu_python(dest: Path) -> Path:
    """A venv of this interpreter's base Python whose site-packages holds only the 'present' distributions of
    .venv, symlinked at the highest folder no other distribution shares (google/ holds protobuf and
    google-auth; only protobuf's part is linked)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    src = Path(sysconfig.get_paths()["purelib"])
    site = Path(subprocess.run([str(dest / "bin" / "python"), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    patterns = _present_patterns()
    mine, others = set(), set()
    for dist in md.distributions(path=[str(src)]):
        files = {Path(str(f)) for f in dist.files or [] if not str(f).startswith("..")}
        (mine if _is_present(dist.metadata["Name"], patterns) else others).update(files)
    shared_dirs = {p for f in others for p in f.parents if p != Path(".")}
    links = set()
    for f in mine:
        parts = f.parts
        for i in range(1, len(parts) + 1):
            prefix = Path(*parts[:i])
            if prefix not in shared_dirs:
                links.add(prefix)
                break
    for rel in sorted(links, key=lambda p: len(p.parts)):
        if any(a in links for a in rel.parents):
            continue
        target, link = src / rel, site / rel
        if target.exists() and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
    return dest / "bin" / "python"


@pytest.mark.timeout(1800)
def test_the_packed_set_runs_a_sweep_on_a_machine_with_only_the_present_packages(tmp_path):
    why = _index_reachable()
    if why:
        pytest.skip(f"the package index is needed to build the set: {why}")
    out, site = tmp_path / "out", tmp_path / "site"
    t0 = time.monotonic()
    build = subprocess.run(["bash", "benchmarks/device_env.sh", "--python-version", "3.11", "--out", str(out),
                            "--site", str(site), "--format", "gz", "--no-budget"],
                           cwd=ROOT, capture_output=True, text=True, timeout=1500)
    t_build = time.monotonic() - t0
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    print(build.stdout[-2500:])

    # the strip: no Java jar, no dashboard client, no test or example folders, no bytecode of this machine
    assert (site / "ray" / "_raylet.so").exists() and not (site / "ray" / "jars").exists()
    assert not (site / "ray" / "dashboard" / "client" / "build").exists()
    assert not (site / "mlflow" / "server" / "js" / "build").exists()
    assert not (site / "bin").exists()
    for dirpath, dirnames, _ in os.walk(site):
        bad = [d for d in dirnames if d in ("tests", "test", "testing", "examples", "__pycache__")]
        assert not bad, f"{dirpath}: {bad}"
    # nothing the machine has is packed (a packed copy would shadow its own)
    patterns = _present_patterns()
    packed = {canonicalize_name(d.metadata["Name"]) for d in md.distributions(path=[str(site)])}
    assert {"ray", "mlflow", "optuna", "pyautoattack", "mlxtend", "sqlalchemy", "alembic"} <= packed
    assert not [n for n in packed if _is_present(n, patterns)]
    archive = out / "ssat-site-py311.tar.gz"
    assert archive.exists() and (out / "unpack.sh").exists() and (out / "VERSIONS.txt").exists()

    # the machine: a Python with only the present packages; the command starts as a GPU command does
    py = _fake_gpu_python(tmp_path / "gpu")
    assert subprocess.run([str(py), "-c", "import ray"], capture_output=True).returncode != 0  # it really lacks ray
    unpacked = tmp_path / "ssat-site"
    ray_tmp = Path(tempfile.mkdtemp(prefix="rde", dir="/tmp"))  # Ray's socket paths must stay short
    work = tmp_path / "work"
    spec = tmp_path / "tiny.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "devenv-tiny", "preset": "mnist5k-ssat-mbi", "table": "ablation", "column_group": "mnist5k/cnn-small",
        "epochs": 1, "seeds": [0], "resources": {"cpu": 1, "gpu": 0}, "max_concurrent": 1, "metric": "val/pgd10",
        "overrides": {"data.n_unlabeled": 100, "data.n_val": 40, "eval.test_n": 40, "eval.pgd_steps": [10],
                      "eval.autoattack": False, "eval.batch_size": 200, "teacher.steps": 20, "teacher.eval_every": 10,
                      "optim.lr_milestones": [], "optim.lr_factors": [], "system.threads": 1},
        "grid": [{"row": "curious|on", "set": {"attack.schedule": "curious", "attack.t": 1}}]}, sort_keys=False))
    check = f"""
import sys, pathlib
site = pathlib.Path({str(unpacked)!r}).resolve()
import ray, mlflow, optuna, pyautoattack, sqlalchemy, alembic, mlxtend
for m in (ray, mlflow, optuna, pyautoattack, sqlalchemy, alembic, mlxtend):
    assert site in pathlib.Path(m.__file__).resolve().parents, (m.__name__, m.__file__)
import torch, numpy
assert site not in pathlib.Path(torch.__file__).resolve().parents
from ray.tune.search.optuna import OptunaSearch
from ray.tune.schedulers import ASHAScheduler
from pyautoattack import AutoAttack
AutoAttack(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2)), norm="Linf", eps=0.03, device="cpu")
print("imports ok from", site)
"""
    env = {"PATH": f"{py.parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path)), "PYTHON": str(py),
           "SSAT_SITE": str(unpacked), "SSAT_RAY_TMPDIR": str(ray_tmp), "SSAT_TEACHER_DIR": str(tmp_path / "teachers"),
           "TMPDIR": str(ray_tmp), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = (f". {out}/unpack.sh || exit 1; python -c {_q(check)} || exit 1; "
           f"python -m sweeps run {spec} --workdir {work} --cpu-only")
    t1 = time.monotonic()
    try:
        run = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    t_run = time.monotonic() - t1
    print(run.stdout[-2500:])
    print(f"build {t_build:.0f} s, unpack + imports + sweep {t_run:.0f} s")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert "devenv: ray " in run.stdout and "imports ok from" in run.stdout
    assert f"{unpacked}" in run.stdout  # unpack.sh said where it unpacked
    assert "sweep devenv-tiny finished" in run.stdout, run.stdout[-3000:]
    assert (work / "mlflow.db").exists()
    # a second source of unpack.sh finds the same archive already unpacked
    again = subprocess.run(["bash", "-c", f". {out}/unpack.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0 and "already holds this archive" in again.stdout, again.stdout + again.stderr


def _q(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"

"""Where a sweep lives on disk and which code ran it.

    <workdir>/runs/sweeps/<name>/sweep.json     the driver's state (sweeps.driver.SweepState)
    <workdir>/runs/sweeps/<name>/tune/<stage>   Ray Tune's experiment folders
    <workdir>/runs/teachers                     the teacher cache (or $SSAT_TEACHER_DIR)
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class SweepError(RuntimeError):
    """A sweep that cannot start or did not finish; the message says what to do."""


@dataclass
class Paths:
    workdir: Path
    name: str

    @property
    def sweep_dir(self) -> Path:
        return self.workdir / "runs" / "sweeps" / self.name

    @property
    def tune_dir(self) -> Path:
        return self.sweep_dir / "tune"

    @property
    def state(self) -> Path:
        return self.sweep_dir / "sweep.json"

    @property
    def teacher_dir(self) -> Path:
        return Path(os.environ.get("SSAT_TEACHER_DIR") or self.workdir / "runs" / "teachers").resolve()

    @property
    def compile_cache(self) -> Path:
        """torch.compile bundles shared by the trials of every sweep below this working folder (ssat.compile_cache)."""
        return self.workdir / "runs" / "compile_cache"


def sweep_paths(workdir: str | Path, name: str) -> Paths:
    """Paths of a sweep; the name was validated (no '/', no '..'), and the result must stay inside workdir."""
    from .spec import NAME_RE

    p = Paths(Path(workdir).resolve(), name)
    root = p.workdir / "runs" / "sweeps"
    if not NAME_RE.fullmatch(name) or ".." in name or p.sweep_dir.resolve().parent != root:
        raise SweepError(f"sweep name {name!r} escapes the working folder; allowed: 1-100 letters, digits, '.', "
                         f"'_' or '-' (it must stay inside {root})")
    return p


def code_version() -> dict:
    def git(*args):
        try:
            r = subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, timeout=10)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None

    import hashlib

    lock = PROJECT_ROOT / "lock" / "requirements.lock"
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": git("rev-parse", "HEAD"), "git_dirty": None if status is None else bool(status),
            "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock.exists() else None}

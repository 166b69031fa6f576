"""Where a sweep lives on disk.

    <workdir>/runs/sweeps/<name>/sweep.json     the driver's state (sweeps.driver.SweepState)
    <workdir>/runs/sweeps/<name>/tune/<stage>   Ray Tune's experiment folders
    <workdir>/runs/teachers                     the teacher cache (or $SSAT_TEACHER_DIR)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ssat.config import brief

from .errors import SweepError


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
    def stop_cause(self) -> Path:
        """One line a stopper (`python -m sweeps.slurm settle`) writes before its Ctrl+C: the driver's name for it."""
        return self.sweep_dir / "stop_cause"

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
        raise SweepError(f"sweep name {brief(name)} escapes the working folder; allowed: 1-100 letters, digits, '.', "
                         f"'_' or '-' (it must stay inside {root})")
    return p


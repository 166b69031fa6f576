"""Where a sweep lives on disk: the one module that spells a sweep folder's files (docs/architecture.md lists them
with their writers), and builds the sweep's Tracker from them.

    <workdir>/runs/sweeps/<name>/sweep.json     the driver's state (sweeps.driver.sweep.SweepState)
    <workdir>/runs/sweeps/<name>/tune/<stage>   Ray Tune's experiment folders
    <workdir>/runs/teachers                     the teacher cache (or $SSAT_TEACHER_DIR)
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ssat.messages import brief

from .errors import SweepError


# The files of a sweep folder that the tracking callback, given only the folder, writes too
SPOOL, CONFIGS, KEPT = "tracking_spool.jsonl", "configs", "artifacts"


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
    def spool(self) -> Path:
        """The tracking operations a store did not take yet (sweeps.tracking.tracker; `sync` replays them)."""
        return self.sweep_dir / SPOOL

    @property
    def log_file(self) -> Path:
        """What Ray and MLflow said (sweeps.sweep_log)."""
        return self.sweep_dir / "sweep.log"

    @property
    def disk_reserve(self) -> Path:
        """The ballast that keeps room for a stop (sweeps.driver.disk)."""
        return self.sweep_dir / "disk_reserve"

    @property
    def spec_file(self) -> Path:
        """The spec as given, logged to the sweep's parent run."""
        return self.sweep_dir / "spec.json"

    @property
    def configs(self) -> Path:
        """Each trial's resolved config.json, in a folder named by its run key, logged to its run."""
        return self.sweep_dir / CONFIGS

    @property
    def kept(self) -> Path:
        """Each trial's checkpoints as logged to its run, in a folder named by its run key."""
        return self.sweep_dir / KEPT

    @property
    def artifact_root(self) -> Path:
        """The artifact store of a local tracking store: the work folder's, shared by its sweeps."""
        return self.workdir / "mlartifacts"

    def tracker(self, uri: str, log=print):
        """The sweep's writer of `uri`: its experiment, the work folder's artifact root, its spool (a new Tracker
        adopts a dead driver's journal and spool)."""
        from .tracking.tracker import Tracker

        return Tracker(uri, self.name, artifact_root=self.artifact_root, spool=self.spool, log=log)

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



def list_sweeps(workdir: str | Path) -> list[dict]:
    """The sweeps of a working folder, by name: each folder of runs/sweeps/ with its sweep.json's status, created and
    spec; "never started" where the folder has no sweep.json (the run stopped before its state was written)."""
    root = Path(workdir).resolve() / "runs" / "sweeps"
    out = []
    for folder in sorted(p for p in root.glob("*") if p.is_dir()):
        try:
            state = json.loads((folder / "sweep.json").read_text())
        except FileNotFoundError:
            state = {"status": "never started"}
        except (OSError, ValueError) as exc:
            state = {"status": f"unreadable sweep.json ({type(exc).__name__})"}
        state = state if isinstance(state, dict) else {"status": "unreadable sweep.json (not an object)"}
        out.append({"name": folder.name, "status": str(state.get("status", "?")),
                    "created": str(state.get("created") or "-"), "spec": str(state.get("spec_path") or "-")})
    return out


def sweeps_table(workdir: str | Path) -> str:
    """`python -m sweeps status` without a name: the sweeps of the working folder, one line each."""
    root, found = Path(workdir).resolve() / "runs" / "sweeps", list_sweeps(workdir)
    if not found:
        return f"no sweeps in {root}; start one with `python -m sweeps run SPEC --workdir {workdir}`"
    rows = [("name", "status", "created", "spec")] + [(s["name"], s["status"], s["created"], s["spec"]) for s in found]
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, width)) + "  " + r[3] for r in rows]
    return "\n".join([f"{len(found)} sweep(s) in {root}:", *lines,
                      "(`python -m sweeps status NAME` for one sweep's stages, driver and trials)"])

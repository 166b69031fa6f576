"""A sweep's state on disk, <sweep dir>/sweep.json (`SweepState`), and what a missing one means (`missing_sweep`)."""
from __future__ import annotations

import dataclasses
import difflib
import json
from dataclasses import dataclass, field

from ssat.messages import brief

from ..errors import SweepError
from ..paths import Paths, list_sweeps
from ..spec import Spec, parse_spec
from .lock import inspect
from .run_options import RunArgs


@dataclass
class SweepState:
    """<sweep dir>/sweep.json: the spec as given, the tracking store, and how far each stage got."""
    name: str
    spec_path: str
    source: dict
    tracking_uri: str
    args: RunArgs
    phases: dict[str, str] = field(default_factory=dict)   # stage -> "running" (started) | "done"
    status: str = "running"            # "running" (a driver holds it) | "incomplete" (resume it) | "done"
    driver_pid: int | None = None      # the last driver (who holds the sweep now: driver.lock)
    code: dict = field(default_factory=dict)
    created: str = ""
    confirm_configs: list[dict] | None = None
    study_url: str | None = None       # a search's Optuna study (sweeps.trials.study), named after the sweep
    reused: dict[str, dict] = field(default_factory=dict)  # stage -> trial key -> the run it reuses
                                                           # (sweeps.driver.reuse)

    def spec(self) -> Spec:
        return parse_spec(self.source, self.spec_path, **self.args.spec_options())

    def save(self, paths: Paths) -> None:
        from ssat.storage import atomic_write_bytes

        atomic_write_bytes(paths.state, json.dumps(dataclasses.asdict(self), indent=1).encode())

    @classmethod
    def load(cls, paths: Paths) -> "SweepState":
        if not paths.state.exists():
            raise SweepError(missing_sweep(paths))  # "no sweep named ...": the nearest names and the list
        d = json.loads(paths.state.read_text())
        known = {f.name for f in dataclasses.fields(RunArgs)}
        d["args"] = RunArgs(**{k: v for k, v in d.get("args", {}).items() if k in known})
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})


def missing_sweep(p: Paths) -> str:
    """Why a sweep has no state (SweepState.load): a folder without sweep.json is a run that stopped before writing
    it (or is writing it now); else no such sweep, with the nearest names and the list."""
    if p.sweep_dir.is_dir():
        lock, verdict = inspect(p.sweep_dir)
        if lock is not None and verdict.live:
            return (f"sweep {p.name} is starting (driver pid {lock.pid}: `{lock.command}`) and has not written its "
                    "state yet; try again in a moment")
        again = lock.command if lock is not None else f"python -m sweeps run SPEC --name {p.name} --workdir {p.workdir}"
        return (f"sweep {p.name} never started (stopped before its state was written: no sweep.json in "
                f"{p.sweep_dir}); run it again with `{again}`")
    root, names = p.workdir / "runs" / "sweeps", [s["name"] for s in list_sweeps(p.workdir)]
    near = difflib.get_close_matches(p.name, names)  # the 3 nearest above 0.6 similarity
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    return (f"no sweep named {brief(p.name)} in {root}" + (f"; nearest: {', '.join(near)}" if near else "")
            + (f"; all: {shown}" if names else "; it has none (`python -m sweeps run SPEC` starts one)"))

"""The GPU measurements the cost model reads (sweeps/costs/model.py): the JSON lines of benchmarks/results/*.json|*.log
and of the user's own calibrations (the user's first), each a figure of one GPU keyed by what its cost depends
on. No torch: `calibrate`'s command line and the dry run's GPU names read them without it."""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
# engine_mode's answers, a training record's "mode": the step engine, "+fused" with fused forwards
MODES = tuple(m + f for f in ("+fused", "") for m in ("graph+compile", "graph", "compile", "eager"))
AA_ATTACKS = ("apgd-ce", "apgd-t", "fab-t", "square")  # standard AutoAttack, in order (ssat.evaluate.AA_ATTACKS)

def calibration_dir() -> Path:
    """Where `python -m sweeps calibrate` keeps this user's figures: $SSAT_CALIBRATION_DIR, else
    $XDG_CACHE_HOME/ssat-sweeps/calibration (~/.cache/... without it)."""
    if os.environ.get("SSAT_CALIBRATION_DIR"):
        return Path(os.environ["SSAT_CALIBRATION_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ssat-sweeps" / "calibration"


def read_records(results: Path = RESULTS, own: Path | None = None) -> list[dict]:
    """Every JSON object line of the user's calibrations (`own`, e.g. calibration_dir(); "_own": True) and of
    results/*.json|*.log, with "_device" (its own "device" key, else the nearest device line before it in the same
    file) and "_file" added (a user's file by its whole path). Other lines are skipped."""
    out = []
    for folder, mine in ((own, True), (results, False)):
        if folder is None or mine and folder.resolve() == results.resolve():
            continue  # --out benchmarks/results: the repository's figures, read once
        for f in sorted(folder.glob("*.json")) + sorted(folder.glob("*.log")):
            device = None
            for line in f.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict):
                    device = rec.get("device", device)
                    out.append({**rec, "_device": device, "_file": str(f) if mine else f.name, "_own": mine})
    return out


def record_mode(rec: dict) -> str:
    """The step engine of a training record: its "mode", else from the old keys compile and graph_mode."""
    if rec.get("mode") in MODES:
        return rec["mode"]
    compiled = rec.get("compile", "off") not in ("off", None, False)
    captured = rec.get("graph_mode") == "captured"
    return {(True, True): "graph+compile", (False, True): "graph", (True, False): "compile"}.get(
        (compiled, captured), "eager")


def _training(rec: dict):
    """((model, method, mode, precision), seconds per 49,000-image epoch) of a Trainer epoch record."""
    model, secs = rec.get("trainer_model"), rec.get("cifar10_epoch_s")
    if not model or not secs or rec.get("baseline") or rec.get("bench", "trainer") != "trainer":
        return None
    return (model, rec.get("method") or "ssat-mbi", record_mode(rec), rec.get("precision")), float(secs)


def _eval(rec: dict):
    """((model, attack, tf32), seconds per 1,000 images) of an evaluation record; an AutoAttack attack's only where
    every image stayed robust ("points": "robust", per 1,000 robust images at the standard budget)."""
    if rec.get("bench") != "eval" or (rec.get("attack") in AA_ATTACKS and rec.get("points") != "robust"):
        return None
    s = rec.get("s_per_1000") or (rec["seconds"] * 1000 / rec["n"] if rec.get("seconds") and rec.get("n") else None)
    return ((rec.get("eval_model"), rec.get("attack"), bool(rec.get("tf32"))), float(s)) if s else None


def _teacher(rec: dict):
    """((model, precision), FixMatch steps per second) of a teacher record; one that does not say how its step ran
    ("compile") timed the eager teacher of before, not the one a GPU runs now (ssat.fixmatch.TeacherSteps)."""
    if rec.get("bench") != "teacher" or not rec.get("steps_per_s") or "compile" not in rec:
        return None
    return (rec.get("teacher_model"), rec.get("precision")), float(rec["steps_per_s"])


def _packing(rec: dict):
    """((model, mps, graphed, n), total images/s of n packed trials); a run where not all finished is no figure."""
    n, total = rec.get("packed_trials"), rec.get("total_images_per_s")
    if not n or not total or rec.get("finished", n) < n:
        return None
    modes = rec.get("graph_mode") or ["off"]
    graphed = all(g == "captured" for g in ([modes] if isinstance(modes, str) else modes))
    return (rec.get("model"), bool(rec.get("mps")), graphed, int(n)), float(total)


KINDS = {"training": _training, "eval": _eval, "teacher": _teacher, "packing": _packing}


def measured_devices(records: list[dict]) -> list[str]:
    """The GPUs with at least one usable measurement (training, evaluation, teacher or packing); a CPU run of a
    benchmark (device "cpu", "CPU (not a GPU figure)") is none."""
    return sorted({r["_device"] for r in records if r["_device"] and not str(r["_device"]).lower().startswith("cpu")
                   and any(k(r) for k in KINDS.values())})


def resolve_gpu(name: str, records: list[dict]) -> tuple[str | None, list[str]]:
    """The measured GPU that `name` names (the same name, else the one whose name contains it, any case), and
    the candidates when it names none or several."""
    found = measured_devices(records)
    exact = [d for d in found if d.lower() == name.lower()]
    hits = exact or [d for d in found if name.lower() in d.lower()]
    return (hits[0] if len(hits) == 1 else None), hits


@dataclass(frozen=True)
class Figure:
    """A measured figure: the median of its runs, how many, and the files they are in."""
    value: float
    runs: int
    files: tuple[str, ...]

    def cite(self) -> str:
        return f"{'median of %d' % self.runs if self.runs > 1 else '1 run'}: {', '.join(self.files)}"


class Measurements:
    """The measured figures of one GPU type (records whose device is exactly `device`); the median where several
    records share a key, the user's own calibrations alone where they have the key. Nothing of another GPU is
    ever looked at."""

    def __init__(self, device: str, records: list[dict]):
        self.device = device
        self.table: dict[tuple, list[tuple[float, str, dict]]] = {}
        for rec in records:
            if rec["_device"] != device:
                continue
            for kind, parse in KINDS.items():
                got = parse(rec)
                if got:
                    self.table.setdefault((kind, *got[0]), []).append((got[1], rec["_file"], rec))
        for key, runs in self.table.items():
            mine = [r for r in runs if r[2].get("_own")]
            self.table[key] = mine or runs

    def figure(self, kind: str, *key) -> Figure | None:
        runs = self.table.get((kind, *key))
        if not runs:
            return None
        return Figure(statistics.median(v for v, _, _ in runs), len(runs), tuple(sorted({f for _, f, _ in runs})))

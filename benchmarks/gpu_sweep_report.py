"""Read a finished sweep back from its MLflow store and say how it ran on the GPU (issue 26): one JSON line.

    python benchmarks/gpu_sweep_report.py NAME --tracking-uri URI

Per trial (from its run: status, start and end, the ssat.ray_started_at tag, the repro.* record): seconds from Ray
starting it and from its own process's start to the end of its first step, its epoch times, whether its compile
cache was warm, its graph mode, GPU, MPS, memory cap and peak.
For the sweep: how many trials ran at once (from each trial's own start and end), its wall time against the sum of
its trials' epoch times, and the store read back: every trial run FINISHED, a metric value at every epoch, both
checkpoints with a checksum that matches, a protocol record for every test metric, and the repro keys present.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

PER_EPOCH = ("val/pgd10", "train/loss", "perf/epoch_seconds")
REPRO = ("gpu", "precision", "compile", "graph_mode", "fused_forward", "compile_cache", "cuda_memory_fraction",
         "cuda_peak_mib", "mps", "eval_tf32", "start_to_first_step_s", "started_at", "torch")


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals (start, end) open at one time (an end before a start at the same instant)."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda t: (t[0], t[1]))
    most = now = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def _checkpoints(client, run_id: str) -> dict:
    """best.pt / last.pt of a run: present, and matching their .sha256."""
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name in ("best.pt", "last.pt"):
            try:
                f = Path(client.download_artifacts(run_id, f"checkpoints/{name}", d))
                want = Path(client.download_artifacts(run_id, f"checkpoints/{name}.sha256", d)).read_text().strip()
            except Exception as exc:  # noqa: BLE001 - a missing artifact is what the report is for
                out[name] = f"missing ({type(exc).__name__})"
                continue
            got = hashlib.sha256(f.read_bytes()).hexdigest()
            out[name] = "checksum ok" if got == want else "checksum MISMATCH"
    return out


def trial_report(client, run) -> dict:
    tags, epochs = run.data.tags, int(run.data.params.get("optim.epochs", 0))
    repro = {k: tags.get(f"repro.{k}") for k in REPRO}
    history = {k: [m.step for m in client.get_metric_history(run.info.run_id, k)] for k in PER_EPOCH}
    secs = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "perf/epoch_seconds"),
                                    key=lambda m: m.step)]
    test = [k for k in run.data.metrics if k.startswith("test/") and k.count("/") == 2]
    ray = _float(tags.get("ssat.ray_started_at")) or run.info.start_time / 1000
    started = _float(repro["started_at"]) or ray
    first = _float(repro["start_to_first_step_s"])
    return {"run": run.info.run_name, "status": run.info.status, "ssat_status": tags.get("ssat.status"),
            "ray_start": ray, "process_start": started, "end": (run.info.end_time or 0) / 1000,
            "ray_to_process_s": started - ray, "ray_to_first_step_s": None if first is None else started + first - ray,
            "process_to_first_step_s": first, "epoch_s": secs,
            "every_epoch_logged": all(steps == list(range(1, epochs + 1)) for steps in history.values()),
            "checkpoints": _checkpoints(client, run.info.run_id),
            "protocols_complete": bool(test) and all(f"protocol/{k[5:]}" in tags for k in test), "test": {
                k: run.data.metrics[k] for k in sorted(test)},
            "repro": repro, "repro_keys": sorted(k[6:] for k in tags if k.startswith("repro."))}


def _float(x):
    return None if x in (None, "None", "") else float(x)


def sweep_report(name: str, uri: str) -> dict:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        raise SystemExit(f"no experiment {name!r} in {uri}")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    trials = [trial_report(client, r) for r in runs if r.data.tags.get("ssat.kind") == "trial"]
    parent = next((r for r in runs if r.data.tags.get("ssat.kind") == "sweep"), None)
    wall = (parent.info.end_time - parent.info.start_time) / 1000 if parent and parent.info.end_time else None
    return {"sweep": name, "trials": trials, "n_trials": len(trials),
            "max_trials_at_once": max_overlap([(t["process_start"], t["end"]) for t in trials if t["end"]]),
            "sweep_wall_s": wall, "sum_epoch_s": sum(sum(t["epoch_s"]) for t in trials),
            "all_finished": bool(trials) and all(t["status"] == "FINISHED" for t in trials),
            "all_epochs_logged": all(t["every_epoch_logged"] for t in trials),
            "all_checkpoints_ok": all(set(t["checkpoints"].values()) == {"checksum ok"} for t in trials),
            "all_protocols": all(t["protocols_complete"] for t in trials)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name")
    ap.add_argument("--tracking-uri", required=True)
    args = ap.parse_args(argv)
    print(json.dumps({"bench": "gpu_sweep", **sweep_report(args.name, args.tracking_uri)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

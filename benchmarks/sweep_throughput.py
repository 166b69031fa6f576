"""Sweep throughput on this machine: trials finished per hour and epochs per second summed over trials, for
1, 2 and 4 concurrent trials sharing it, the speed-up over running them one after another, and the
per-trial start-up cost with and without reused actors.

    python benchmarks/sweep_throughput.py [--trials 4] [--epochs 2] [--concurrency 1 2 4]

Each configuration runs the real `python -m sweeps run` path (teacher cached first, local Ray, MLflow store)
on a small MNIST-5k slice; a fractional-GPU layout on a GPU node is the same code with `resources.gpu`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def spec(path: Path, name: str, trials: int, epochs: int, concurrency: int, cpus: float) -> Path:
    raw = yaml.safe_load((ROOT / "sweeps" / "specs" / "mnist5k-smoke.yaml").read_text())
    raw.update(name=name, epochs=epochs, seeds=list(range(trials)), max_concurrent=concurrency,
               resources={"cpu": cpus, "gpu": 0}, grid=[{"row": "curious|on", "set": {"attack.schedule": "curious",
                                                                                       "attack.t": 1}}])
    raw["overrides"].update({"data.n_unlabeled": 400, "system.threads": 1, "optim.lr_milestones": [],
                             "optim.lr_factors": []})
    path.write_text(yaml.safe_dump(raw))
    return path


def run(workdir: Path, name: str, trials: int, epochs: int, concurrency: int, reuse: bool) -> dict:
    import ray

    from sweeps.cli import main as sweeps_main
    from devtools.sweep_helpers import trial_runs

    os.environ["SSAT_REUSE_ACTORS"] = "1" if reuse else "0"
    s = spec(workdir / f"{name}.yaml", name, trials, epochs, concurrency, cpus=max(0.5, os.cpu_count() / concurrency))
    t0 = time.perf_counter()
    rc = sweeps_main(["run", str(s), "--workdir", str(workdir)])
    wall = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"the sweep {name} failed (exit {rc}); see its output above")
    runs = trial_runs(f"sqlite:///{workdir / 'mlflow.db'}", name)
    train_s = sum(r.data.metrics.get("time/total_hours", 0) * 3600 for r in runs)
    # start-up: trial wall (first result to end, from MLflow) minus its training time is evaluation + overheads;
    # the Ray-level start-up is what the whole wall adds beyond the trials' own work.
    ray.shutdown()
    return {"trials": trials, "concurrency": concurrency, "reuse_actors": reuse, "exit": rc, "wall_s": round(wall, 1),
            "trials_per_hour": round(trials / wall * 3600, 1), "epochs_per_s": round(trials * epochs / wall, 3),
            "train_s_sum": round(train_s, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    work = Path(tempfile.mkdtemp(prefix="sweepbench-"))
    os.environ["SSAT_TEACHER_DIR"] = str(work / "teachers")
    from sweeps.cli import main as sweeps_main

    warm = spec(work / "warm.yaml", "warm", 1, 1, 1, 1)  # makes the shared teacher once, outside the timings
    sweeps_main(["run", str(warm), "--workdir", str(work)])
    import ray

    ray.shutdown()
    rows = []
    for c in args.concurrency:
        rows.append(run(work, f"c{c}", args.trials, args.epochs, c, reuse=True))
        print(json.dumps(rows[-1]), flush=True)
    seq = next((r for r in rows if r["concurrency"] == 1), None)
    for r in rows:
        if seq:
            r["speedup_vs_sequential"] = round(seq["wall_s"] / r["wall_s"], 2)
    cold = run(work, "cold", args.trials, args.epochs, 1, reuse=False)
    if seq:
        cold["startup_cost_per_trial_s"] = round((cold["wall_s"] - seq["wall_s"]) / args.trials, 1)
    print(json.dumps(cold), flush=True)
    print("\nconcurrency  wall s  trials/h  epochs/s  speed-up")
    for r in rows:
        print(f"{r['concurrency']:11d}  {r['wall_s']:6.1f}  {r['trials_per_hour']:8.1f}  {r['epochs_per_s']:8.3f}  "
              f"{r.get('speedup_vs_sequential', float('nan')):8.2f}")
    print(f"without reused actors (1 at a time): {cold['wall_s']} s, i.e. "
          f"{cold.get('startup_cost_per_trial_s', 'n/a')} s more per trial than with reused actors")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

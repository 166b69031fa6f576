"""The main job (`make demo`): on MNIST-5k with 100 labels, make (or find) the FixMatch teacher, run the
paper's Table 2 ablation in small form on a local Ray cluster (two trials at a time), log everything to the
embedded MLflow store, then regenerate the ablation table (mean (std) over seeds) and its plot.

The AutoAttack column runs on the first 200 test images; those results are tagged `first200` and shown
labelled as such, never as a paper cell.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from ssat.config import parse_overrides

from .driver import RunArgs, SweepState, resume_sweep, run_sweep
from .paths import sweep_paths
from .tracking import Tracker, ui_url

SPEC = Path(__file__).parent / "specs" / "mnist5k-demo.yaml"


def _sweep(args, name: str) -> int:
    paths = sweep_paths(args.workdir, name)
    if paths.state.exists():
        if SweepState.load(paths).status == "done":
            print(f"[demo] found the finished sweep {name} in {paths.sweep_dir}; regenerating its table")
            return 0
        print(f"[demo] resuming the unfinished sweep {name}")
        return resume_sweep(name, workdir=args.workdir, rerun_failed=True)
    run = RunArgs(epochs=args.epochs, seeds=args.seeds, sets=parse_overrides(args.set or []), cpu_only=True,
                  max_concurrent=args.max_concurrent, name=name)
    return run_sweep(args.spec, run, workdir=args.workdir)


def analyse(name: str, uri: str, out: Path) -> dict[str, Path]:
    """The ablation table (md, LaTeX, csv, provenance), its bar plot and the learning curves."""
    from analysis.collect import load_mlflow_history, load_mlflow_runs
    from analysis.plots import plot_figure
    from analysis.tables import render_table, write_table

    runs = load_mlflow_runs([name], uri)
    files = write_table(runs, "ablation", out, allow_subset=True, stages=("demo",),
                        command=["python", "-m", "sweeps", "demo"])
    print(render_table(runs, "ablation", "md", allow_subset=True, stages=("demo",)))
    files["plot"] = plot_figure(runs, None, "ablation", out / "ablation.png", allow_subset=True, stages=("demo",))
    files["curves"] = plot_figure(runs, load_mlflow_history(runs, uri), "curves", out / "curves.png", stages=("demo",))
    return files


def run_demo(args) -> int:
    t0 = time.perf_counter()
    args.workdir = str(Path(args.workdir).resolve())
    args.spec = getattr(args, "spec", None) or SPEC
    name = args.name or "mnist5k-demo"
    rc = _sweep(args, name)
    if rc != 0:
        print(f"[demo] the sweep did not finish (exit {rc}); run `make demo` again to resume it")
        return rc
    t1 = time.perf_counter()
    paths = sweep_paths(args.workdir, name)
    uri = SweepState.load(paths).tracking_uri
    files = analyse(name, uri, Path(args.workdir) / "outputs" / name)
    print(f"[stage] analysis: {time.perf_counter() - t1:.1f} s")
    for kind in ("md", "latex", "csv", "provenance", "plot", "curves"):
        print(f"  {kind:10s} {files[kind]}")
    print(f"[demo] total {time.perf_counter() - t0:.1f} s. Browse the runs with:\n"
          f"  {Path(sys.executable).parent / 'mlflow'} ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000\n"
          f"  then open {ui_url(Tracker(uri, name, log=lambda s: None).experiment_id)}")
    return 0

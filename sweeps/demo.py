"""The main job (`make demo`): on MNIST-5k with 100 labels, make (or find) the FixMatch teacher, run the
paper's Table 2 ablation in small form on a local Ray cluster (two trials at a time), log everything to the
embedded MLflow store, then regenerate the ablation table (mean (std) over seeds) and its plot.

AutoAttack runs once, after the trials, on the best row's seed 0 and the first 100 test images
(`autoattack_best`); those results are tagged `first100` and shown labelled as such, never as a paper cell.

On a machine with a CUDA GPU the same spec trains there (`gpu_plan`): GPU_SHARE of a GPU per trial under MPS where
clusters/mps.sh can start it, the teacher on the GPU too, and eager kernels in captured CUDA graphs
(system.compile off: compiling the 0.1 M-parameter model would take longer than training it). The spec, its
seeds and its table are the CPU's; only the hardware and the step engine differ.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from analysis.record import search_all
from ssat.config import Config, parse_overrides
from ssat.datasets import DATASET_INFO

from .driver.sweep import RunArgs, SweepState, resume_sweep, run_sweep
from .errors import SweepError
from .paths import sweep_paths
from .tracking.tracker import Tracker
from .tracking.ui_link import ui_url

SPEC = Path(__file__).parent / "specs" / "mnist5k-demo.yaml"
TRIALS = "tags.`ssat.kind` = 'trial' and tags.`ssat.stage` = '{stage}'"


def best_row(runs: list, stage: str = "demo", metric: str = "test/best/pgd20") -> tuple[str, float]:
    """The row with the highest mean `metric` over its seeds among `runs` (the MLflow runs of the stage's trials:
    the table's best row by PGD-20) and that mean; a run without the result is left out of its row's mean, and of
    rows with the same mean the first by name wins."""
    values: dict[str, list[float]] = {}
    for r in runs:
        if metric in r.data.metrics:
            values.setdefault(r.data.tags.get("ssat.row", ""), []).append(r.data.metrics[metric])
    if not values:
        raise SweepError(f"no trial of stage {stage!r} has {metric}: nothing to rank the rows by")
    means = {row: sum(v) / len(v) for row, v in sorted(values.items())}
    row = max(means, key=means.get)
    return row, means[row]


def autoattack_best(name: str, paths, uri: str, cfg: Config, log=print) -> None:
    """AutoAttack once, on the best row (by test PGD-20 mean over seeds) instead of in every trial: for its seeds
    in eval.autoattack_seeds, their eval.autoattack_checkpoints, the first eval.autoattack_n test images, from the
    checkpoints the sweep kept. The runs are read and written through the sweep's Tracker; the results join each
    trial's run as its own final evaluation would have logged them (first write wins: a run that has them already
    is skipped, so a rerun adds nothing)."""
    from .subset_autoattack import autoattack_checkpoint

    e = cfg.eval
    tracker = paths.tracker(uri, log)
    runs = search_all(tracker.client, [tracker.experiment_id], TRIALS.format(stage="demo"))
    row, mean = best_row(runs)
    trials = sorted((r for r in runs if r.data.tags.get("ssat.row") == row and
                     (e.autoattack_seeds is None or int(r.data.tags["ssat.seed"]) in e.autoattack_seeds)),
                    key=lambda r: int(r.data.tags["ssat.seed"]))
    t0 = time.perf_counter()
    log(f"[stage] autoattack: the best row {row} (test PGD-20 {mean:.2f}, mean over seeds), seed "
        f"{', '.join(r.data.tags['ssat.seed'] for r in trials)}, {'/'.join(e.autoattack_checkpoints)} checkpoint, "
        f"first {e.autoattack_n or 'all'} test images")
    for r in trials:
        name_, key = r.info.run_name, r.data.tags["ssat.key"]
        for ckpt in e.autoattack_checkpoints:
            if f"test/{ckpt}/autoattack" in r.data.metrics:
                log(f"  {name_}: {ckpt} checkpoint has AutoAttack already")
                continue
            metrics, tags = autoattack_checkpoint(paths.kept / key / f"{ckpt}.pt", ckpt, cfg,
                                                  log=lambda s, n=name_: log(f"  {n}: {s.strip()}"))
            tracker.log_final(key, metrics, tags, int(r.data.metrics["time/epochs"]))
    if not tracker.flush(timeout=60):
        raise SweepError(f"the AutoAttack results of {row} could not be written to {uri}; they wait in "
                         f"{paths.spool}")
    log(f"[stage] autoattack: {time.perf_counter() - t0:.1f} s")
MPS = Path(__file__).resolve().parents[1] / "clusters" / "mps.sh"
GPU_SHARE = 0.125  # 8 trials per GPU: the 14 trials in two rounds
GPU_SETS = {"system.compile": "off"}  # hash-neutral: graph mode over eager kernels


def gpu_plan(gpus: int, cpus: int, max_concurrent: int | None) -> dict:
    """How the demo runs here: CPU trials two at a time without a GPU; with `gpus` GPUs, GPU_SHARE of one per
    trial and as many at once as the GPUs and CPUs hold (one CPU a trial)."""
    if not gpus:
        return {"cpu_only": True, "gpu_share": None, "max_concurrent": max_concurrent or 2, "sets": {}}
    fit = min(round(gpus / GPU_SHARE), max(1, cpus - 1))  # a CPU left for the driver
    return {"cpu_only": False, "gpu_share": GPU_SHARE, "max_concurrent": max_concurrent or fit, "sets": GPU_SETS}


@contextlib.contextmanager
def mps_daemon(on: bool):
    """NVIDIA MPS for the packed GPU trials (clusters/mps.sh), its client variables in this process's environment
    (Ray's workers inherit them), stopped afterwards unless it ran before; without it (no GPU, no MPS on this
    driver) trials share the GPU by time slicing."""
    def mps(action: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(MPS), action], capture_output=True, text=True)

    ran = on and mps("status").returncode == 0
    env = mps("env") if on and mps("start").returncode == 0 else None
    if env is None or env.returncode:
        yield False
        return
    added = dict(line.removeprefix("export ").split("=", 1) for line in env.stdout.splitlines() if "=" in line)
    os.environ.update(added)
    try:
        yield True
    finally:
        for k in added:
            os.environ.pop(k, None)
        if not ran:
            mps("stop")


def _sweep(args, name: str) -> int:
    paths = sweep_paths(args.workdir, name)
    if paths.state.exists():
        if SweepState.load(paths).status == "done":
            print(f"[demo] found the finished sweep {name} in {paths.sweep_dir}; regenerating its table")
            return 0
        print(f"[demo] resuming the unfinished sweep {name}")
        return resume_sweep(name, workdir=args.workdir, rerun_failed=True)
    import torch

    plan = gpu_plan(torch.cuda.device_count(), os.cpu_count() or 1, args.max_concurrent)
    where = (f"{torch.cuda.device_count()} GPU(s), {plan['gpu_share']:g} of one per trial, "
             f"{plan['max_concurrent']} at once" if plan["gpu_share"]
             else f"CPU, {plan['max_concurrent']} trials at once")
    print(f"[demo] training on {where}")
    run = RunArgs(epochs=args.epochs, seeds=args.seeds, sets={**plan["sets"], **parse_overrides(args.set or [])},
                  cpu_only=plan["cpu_only"], gpu_share=plan["gpu_share"], max_concurrent=plan["max_concurrent"],
                  name=name, rows=args.rows)
    with mps_daemon(not plan["cpu_only"]) as mps:
        if plan["gpu_share"]:
            print(f"[demo] MPS {'on' if mps else 'off (time slicing)'}")
        return run_sweep(args.spec, run, workdir=args.workdir)


def setup_text(cfg: Config) -> str:
    """The choices that size the demo for 2 CPU cores, read from a trial's config: the table's caption says them."""
    o, a, d, e = cfg.optim, cfg.attack, cfg.data, cfg.eval
    info = DATASET_INFO[d.dataset]
    start = 1 if o.lr_decay_after_milestone else 0
    decay = "".join(f", x{f:g} from epoch {m + start}" for m, f in zip(o.lr_milestones, o.lr_factors))
    unlabeled = f"{d.n_unlabeled:,}" if d.n_unlabeled else "all other"
    test = f"the first {e.test_n:,}" if e.test_n else "all"
    aa_images = f"the first {e.autoattack_n:,}" if e.autoattack_n else "the same"
    aa_seeds = "every seed" if e.autoattack_seeds is None else \
        ("seed " if len(e.autoattack_seeds) == 1 else "seeds ") + ", ".join(map(str, e.autoattack_seeds))
    bn = "batch-norm statistics averaged with them" if o.swa_bn == "average" else \
        "batch-norm statistics recomputed on clean images"
    parts = [f"model {cfg.model.name}",
             f"{o.epochs} epochs of SGD (lr {o.lr:g}{decay}; batch {o.batch_size})"
             + ("" if o.swa_start is None else f", weights averaged (SWA) from epoch {o.swa_start + 1}, {bn}"),
             f"training PGD-{a.steps} (step {a.step_ratio:g} eps_max)",
             f"{d.n_labeled or info.n_labeled} labeled + {unlabeled} pseudo-labeled images",
             f"validation {d.n_val or info.n_val} images" + (f" every {e.val_every} epochs and in the last two"
                                                            if e.val_every > 1 else ""),
             f"test: {test} test images ({'/'.join(e.checkpoints)} checkpoint)"]
    parts.append(f"AutoAttack: {aa_images} test images, {aa_seeds}'s {'/'.join(e.autoattack_checkpoints)} "
                 "checkpoint" + ("" if e.autoattack else " of the best row by PGD-20"))
    return "CPU-sized setup: " + "; ".join(parts)


def analyse(name: str, uri: str, out: Path, setup: str = "") -> dict[str, Path]:
    """The ablation table (md, LaTeX, csv, provenance) with `setup` in its caption, its bar plot, the learning
    curves and the convergence report (a row that does not converge is reported, with its curve)."""
    from analysis.collect import load_mlflow_history, load_mlflow_runs
    from analysis.convergence import convergence_frame, to_markdown, verdicts
    from analysis.plots import plot_figure
    from analysis.tables import render_table, write_table

    runs = load_mlflow_runs([name], uri)
    options = {"allow_subset": True, "stages": ("demo",), "setup": setup}
    files = write_table(runs, "ablation", out, command=["python", "-m", "sweeps", "demo"], **options)
    print(render_table(runs, "ablation", "md", **options))
    files["plot"] = plot_figure(runs, None, "ablation", out / "ablation.png", allow_subset=True, stages=("demo",))
    history = load_mlflow_history(runs, uri)
    files["curves"] = plot_figure(runs, history, "curves", out / "curves.png", stages=("demo",))
    frame = convergence_frame(runs, history, stages=("demo",))
    files["convergence"] = out / "convergence.md"
    files["convergence"].write_text(to_markdown(frame))
    for v in verdicts(frame).itertuples():
        print(f"[convergence] {v.row}: {v.verdict}" + (f" ({v.why})" if v.why else ""))
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
    paths = sweep_paths(args.workdir, name)
    state = SweepState.load(paths)
    uri, cfg = state.tracking_uri, state.spec().trials()[0].config
    autoattack_best(name, paths, uri, cfg)
    t1 = time.perf_counter()
    files = analyse(name, uri, Path(args.workdir) / "outputs" / name, setup_text(cfg))
    print(f"[stage] analysis: {time.perf_counter() - t1:.1f} s")
    for kind in ("md", "latex", "csv", "provenance", "plot", "curves", "convergence"):
        print(f"  {kind:10s} {files[kind]}")
    print(f"[demo] total {time.perf_counter() - t0:.1f} s. Browse the runs with:\n"
          f"  {Path(sys.executable).parent / 'mlflow'} ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000\n"
          f"  then open {ui_url(Tracker(uri, name, log=lambda s: None).experiment_id, store=uri)}")
    return 0

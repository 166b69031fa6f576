"""AutoAttack after a sweep's trials, on the first N test images of chosen runs' best checkpoints, written into those
runs as their own final evaluation would have logged it (protocol subset `first<N>`: never a paper cell). The
attack of one checkpoint (`autoattack_checkpoint`) is `ssat.evaluate`'s, shared with the demo's AutoAttack step.

The runs are read through the tracking store (MlflowClient), a reference run (a reused trial, sweeps.driver.reuse) as
the run it names, and each checkpoint comes from the run's artifacts with its SHA-256 checked before it is loaded.
A run that has the result already is skipped (first write wins), so a rerun adds nothing and a stage cut by Ctrl+C
goes on where it stopped. The runs are attacked in worker processes, one per core with one torch thread each (on 2
cores 24 s a run against 30 s for one process on both), and each result is written as soon as it arrives.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from analysis.record import search_all
from ssat.config import Config, from_dict

from .trials.progress_callback import duration
from .tracking.tracker import Tracker


@dataclass(frozen=True)
class Target:
    """One run to attack: where it lives (its experiment = its sweep, its key), what it trained, which seed."""
    run_id: str
    sweep: str
    key: str
    name: str
    seed: int
    step: int  # its last epoch: the step its final metrics are logged at


def targets(client, experiment: str, seeds: tuple[int, ...]) -> list[Target]:
    """The FINISHED trial runs of `experiment` with one of `seeds` (a reference run as the run it reuses), each once,
    those still without `test/best/autoattack`."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    out = []
    for r in search_all(client, [exp.experiment_id], "tags.`ssat.kind` = 'trial' and attributes.status = 'FINISHED'"):
        original = client.get_run(r.data.tags["ssat.reuses"]) if "ssat.reuses" in r.data.tags else r
        tags, metrics = original.data.tags, original.data.metrics
        seed = int(tags["ssat.seed"]) if "ssat.seed" in tags else None  # a run with no seed is no row's
        if seed in seeds and "test/best/autoattack" not in metrics and "time/epochs" in metrics:
            out.append(Target(original.info.run_id, tags.get("ssat.sweep", experiment), tags["ssat.key"],
                              original.info.run_name, seed, int(metrics["time/epochs"])))
    return out


def autoattack_checkpoint(checkpoint_file, ckpt: str, cfg: Config, log,
                          n_threads: int | None = None) -> tuple[dict, dict]:
    """AutoAttack on one checkpoint's first eval.autoattack_n test images, on the CPU with `n_threads` torch threads
    (None: every core): its flat metrics and protocol tags (`ssat.evaluate.flatten_results`)."""
    import torch

    from ssat.evaluate import evaluate_model, first_test_images, flatten_results, load_checkpoint_model
    from ssat.runtime import threads

    e = cfg.eval
    model, ck_cfg, _ = load_checkpoint_model(checkpoint_file)
    x, y, _ = first_test_images(ck_cfg, e.autoattack_n, torch.device("cpu"))
    # channels_last as in training (1.8x for the CNN's attacks on a CPU); every core: the trials are done
    model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    with threads(n_threads or os.cpu_count()):
        res = evaluate_model(model, x, y, eps=ck_cfg.eps, checkpoint=ckpt, pgd_steps=(), autoattack=True,
                             batch_size=e.batch_size, subset=f"first{len(x)}", fold_bn=ck_cfg.system.fold_bn,
                             log=log)
    return flatten_results({ckpt: {"autoattack": res["autoattack"]}})


def _config(client, run_id: str, images: int, tmp: str) -> Config:
    """The run's resolved config (its config.json artifact) with AutoAttack on its first `images` test images."""
    import json

    import mlflow.artifacts

    path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="config.json", dst_path=tmp,
                                               tracking_uri=client.tracking_uri)
    return from_dict(json.loads(Path(path).read_text()), {"eval.autoattack_n": images})


def attack(client, target: Target, images: int, log=print, n_threads: int | None = None) -> tuple[dict, dict]:
    """AutoAttack on the target's best checkpoint (downloaded, checksum verified), first `images` test images, with
    `n_threads` torch threads (None: every core)."""
    import mlflow.artifacts

    with tempfile.TemporaryDirectory(prefix="ssat-aa-") as tmp:
        cfg = _config(client, target.run_id, images, tmp)
        ckpt = Path(mlflow.artifacts.download_artifacts(run_id=target.run_id, artifact_path="checkpoints",
                                                        dst_path=tmp, tracking_uri=client.tracking_uri)) / "best.pt"
        return autoattack_checkpoint(ckpt, "best", cfg, log=log, n_threads=n_threads)


def _attack_in_worker(uri: str, target: Target, images: int, n_threads: int | None = 1) -> tuple[dict, dict, list[str]]:
    """attack() as a worker process runs it (one thread): its metrics, tags and the lines it would have logged."""
    from mlflow.tracking import MlflowClient

    lines: list[str] = []
    return (*attack(MlflowClient(uri), target, images, log=lines.append, n_threads=n_threads), lines)


def _results(uri: str, todo: list[Target], images: int, workers: int):
    """(target, metrics, tags, log lines) of each target as its attack ends: in this process on every core when one
    worker is asked for, else in `workers` spawned processes (a worker's failure is raised here, the rest
    cancelled)."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    if workers <= 1:
        for t in todo:
            yield (t, *_attack_in_worker(uri, t, images, n_threads=None))
        return
    pool = ProcessPoolExecutor(workers, mp_context=get_context("spawn"))
    try:
        futures = {pool.submit(_attack_in_worker, uri, t, images): t for t in todo}
        for f in as_completed(futures):
            yield (futures[f], *f.result())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def run_autoattack(uri: str, experiments: list[str], seeds: tuple[int, ...], images: int, log=print,
                   workers: int | None = None) -> int:
    """AutoAttack on every target of `experiments` (each run once, whichever experiment reaches it) in `workers`
    processes (None: one per core); the number of runs attacked. Progress with the time left after each."""
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no download bars between the lines
    client = MlflowClient(uri)
    todo = list({t.run_id: t for e in experiments for t in targets(client, e, seeds)}.values())
    workers = min(workers or os.cpu_count() or 1, len(todo))
    log(f"[autoattack] {len(todo)} run(s) without AutoAttack: seeds {', '.join(map(str, seeds))}, best checkpoint, "
        f"the first {images} test images" + (f", {workers} at a time" if todo else ""))
    t0 = time.perf_counter()
    for i, (t, metrics, tags, lines) in enumerate(_results(uri, todo, images, workers), 1):
        for s in lines:
            log(f"  {t.name}: {s.strip()}")
        # the run's experiment exists (the target is its run); no spool: a result that cannot be written fails here,
        # and the command run again makes it anew
        tracker = Tracker(uri, t.sweep, log=log)
        tracker.log_final(t.key, metrics, tags, t.step)
        if not tracker.flush(timeout=float(os.environ.get("SSAT_TRACKING_FLUSH_S", "60"))):
            raise RuntimeError(f"the AutoAttack result of {t.name} could not be written to {uri}")
        spent = time.perf_counter() - t0
        left = f", about {duration(spent / i * (len(todo) - i))} left" if i < len(todo) else ""
        log(f"[autoattack] {t.name}: {metrics['test/best/autoattack']:.2f}% ({i}/{len(todo)}{left})")
    return len(todo)

"""Evaluation after a sweep's trials, written to their MLflow runs: AutoAttack once, on the best row's
checkpoints, instead of in every trial (the demo's last training-side step). The attacks are `ssat.evaluate`'s;
this module picks the runs, loads their checkpoints and logs the results (ssat/ knows nothing of MLflow).
"""
from __future__ import annotations

import os
import time

from ssat.config import Config

from .errors import SweepError


def _trials(runs, stage: str = "demo"):
    return runs[(runs["meta.kind"] == "trial") & (runs["meta.stage"] == stage)]


def best_row(runs, stage: str = "demo", metric: str = "test/best/pgd20") -> tuple[str, float]:
    """The row with the highest mean `metric` over its seeds among the stage's finished trials (the table's
    best row by PGD-20) and that mean."""
    col = f"metric.{metric}"
    trials = _trials(runs, stage)
    if col not in trials or trials[col].isna().all():
        raise SweepError(f"no trial of stage {stage!r} has {metric}: nothing to rank the rows by")
    means = trials.groupby("meta.row")[col].mean().dropna()
    return str(means.idxmax()), float(means.max())


def _autoattack(checkpoint_file, ckpt: str, cfg: Config, log, n_threads: int | None = None) -> tuple[dict, dict]:
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


def autoattack_best(name: str, paths, uri: str, cfg: Config, log=print) -> None:
    """AutoAttack once, on the best row (by test PGD-20 mean over seeds) instead of in every trial: for its seeds
    in eval.autoattack_seeds, their eval.autoattack_checkpoints, the first eval.autoattack_n test images. The
    results join the trial's MLflow run as its own final evaluation would have logged them (first write wins:
    a run that has them already is skipped, so a rerun adds nothing)."""
    import pandas as pd

    from analysis.collect import load_mlflow_runs

    e = cfg.eval
    runs = load_mlflow_runs([name], uri)
    row, mean = best_row(runs)
    trials = _trials(runs)[lambda t: t["meta.row"] == row]
    seeds = sorted(int(s) for s in trials["meta.seed"] if e.autoattack_seeds is None or int(s) in e.autoattack_seeds)
    tracker = paths.tracker(uri, log)
    t0 = time.perf_counter()
    log(f"[stage] autoattack: the best row {row} (test PGD-20 {mean:.2f}, mean over seeds), seed "
        f"{', '.join(map(str, seeds))}, {'/'.join(e.autoattack_checkpoints)} checkpoint, first "
        f"{e.autoattack_n or 'all'} test images")
    for _, run in trials[trials["meta.seed"].astype(int).isin(seeds)].iterrows():
        for ckpt in e.autoattack_checkpoints:
            if pd.notna(run.get(f"metric.test/{ckpt}/autoattack")):
                log(f"  {run['run_name']}: {ckpt} checkpoint has AutoAttack already")
                continue
            metrics, tags = _autoattack(paths.kept / run["meta.key"] / f"{ckpt}.pt", ckpt, cfg,
                                        log=lambda s, r=run: log(f"  {r['run_name']}: {s.strip()}"))
            tracker.log_final(run["meta.key"], metrics, tags, int(run["metric.time/epochs"]))
    if not tracker.flush(timeout=60):
        raise SweepError(f"the AutoAttack results of {row} could not be written to {uri}; they wait in "
                         f"{paths.spool}")
    log(f"[stage] autoattack: {time.perf_counter() - t0:.1f} s")

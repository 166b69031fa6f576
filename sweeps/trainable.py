"""The Ray Tune function trainable: one `ssat` Trainer per trial, one report (with a checkpoint) per epoch.

A trial's Tune config (its settings: `sweeps.trial_settings`) becomes its validated Config and meta through
`resolve_trial`.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from ray import tune

from ssat.config import Config
from ssat.evaluate import flatten_results
from ssat.train import Trainer, TrainingDiverged

from .trial_settings import FAULT_VARS, resolve_trial

CHECKPOINT_FILES = ("state.pt", "best.pt", "last.pt", "trial.log", "config.json")


def reset_process_state(cfg: Config, meta: dict) -> int:
    """Per-trial global state, reset at the start of every trial (actors are reused across trials)."""
    for var in FAULT_VARS:  # fault injection travels with the trial, never leaks
        if meta.get(var):
            os.environ[var] = meta[var]
        else:
            os.environ.pop(var, None)
    threads = cfg.system.threads or max(1, int(meta.get("cpus", 1)))
    torch.set_num_threads(threads)
    # cuDNN autotuning is process-wide: this trial's setting, not the one a trial before it left on this actor
    torch.backends.cudnn.benchmark = bool(cfg.system.cudnn_benchmark and torch.cuda.is_available())
    cap = memory_cap(cfg, meta)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()  # this trial's peak, not a trial's before it on this actor
        if cap:
            torch.cuda.empty_cache()
            torch.cuda.set_per_process_memory_fraction(cap)
    return threads


def memory_cap(cfg: Config, meta: dict) -> float | None:
    """The share of the GPU's memory a trial may allocate: system.cuda_memory_fraction, else its GPU share (Ray
    shares the GPU's time, not its memory); None for a trial without a GPU share."""
    share = meta.get("gpu", 0) or 0
    return cfg.system.cuda_memory_fraction or (min(1.0, share) if share else None)


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def repro_record(cfg: Config, trainer: Trainer, meta: dict) -> dict:
    from ssat.datasets import dataset_checksums

    ctx = tune.get_context()
    cuda = torch.cuda.is_available()
    return {
        "git_commit": meta.get("git_commit"), "git_dirty": meta.get("git_dirty"), "lock_sha256": meta.get("lock_sha256"),
        "torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": cuda,
        "driver": _driver_version() if cuda else None, "gpu": torch.cuda.get_device_name() if cuda else None,
        "gpu_share": meta.get("gpu", 0), "threads": torch.get_num_threads(), "split_hash": trainer.split.hash,
        **trainer.engine.status(), "cudnn_benchmark": cfg.system.cudnn_benchmark,
        "cuda_memory_fraction": memory_cap(cfg, meta) if cuda else None,
        "mps": os.environ.get("CUDA_MPS_PIPE_DIRECTORY") if cuda else None, "eval_tf32": cfg.eval.tf32,
        "teacher_run_id": meta.get("teacher_run_id"), "teacher_split_hash": getattr(trainer.teacher, "split_hash", None),
        # a user's data.pseudo_labels file without its .sha256 sidecar was loaded unverified: say so
        "teacher_verified": getattr(trainer.teacher, "verified", None),
        "dataset_checksums": dataset_checksums(cfg.data.dataset, cfg.data.root),
        "ray_trial_id": ctx.get_trial_id(), "node": socket.gethostname(), "pid": os.getpid(),
    }


def _report(result: dict, work: Path) -> None:
    """Report with a checkpoint of the trainer's files; Tune copies it to storage, then the copy here goes."""
    tmp = Path(tempfile.mkdtemp(prefix="ssat-ckpt-"))
    try:
        for name in CHECKPOINT_FILES:
            for f in (work / name, work / f"{name}.sha256"):
                if f.exists():
                    shutil.copy2(f, tmp / f.name)
        tune.report(result, checkpoint=tune.Checkpoint.from_directory(str(tmp)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _restore(work: Path) -> None:
    """The work folder as of the trial's last checkpoint that Tune registered. Without one the trial starts
    over: files of an epoch whose report Tune never processed (a driver stopped by Ctrl+C or killed right
    after the trial reported it) must not be resumed from, or that epoch would never reach the tracking store."""
    ckpt = tune.get_checkpoint()
    log = (work / "trial.log").read_bytes() if (work / "trial.log").exists() else b""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if ckpt is None:
        (work / "trial.log").write_bytes(log)
        return
    with ckpt.as_directory() as d:
        for f in Path(d).iterdir():
            shutil.copy2(f, work / f.name)


def _final(trainer: Trainer, stage: str) -> dict:
    out = {"time/total_hours": trainer.train_seconds / 3600, "time/epochs": trainer.epoch}
    if stage != "search":
        metrics, tags = flatten_results(trainer.final_evaluation())
        out.update(metrics)
        out.update(tags)
    return out


def _progress_record(trainer: Trainer, started: float) -> dict:
    """What the repro record learns once epochs ran: the engine's outcome (graph capture, compile cache), seconds
    from the trial's start to the end of its first step, and the GPU memory it peaked at."""
    first = trainer.engine.first_step_at
    peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    return {**trainer.engine.status(), "start_to_first_step_s": None if first is None else first - started,
            "cuda_peak_mib": peak}


def train_trial(config: dict) -> None:
    """Ray Tune function trainable (module-level so it pickles and restores)."""
    started = time.time()
    cfg, meta = resolve_trial(config)
    reset_process_state(cfg, meta)
    work = Path(tune.get_context().get_trial_dir()) / "work"
    work.mkdir(parents=True, exist_ok=True)
    _restore(work)
    logf = open(work / "trial.log", "a", buffering=1)

    def log(line: str) -> None:
        logf.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    (work / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
    trainer = Trainer(cfg, work, log=log)
    log(f"trial {meta['trial_key']} on {socket.gethostname()} pid {os.getpid()}, threads {torch.get_num_threads()}")
    # every report carries the run record (docs/tracking.md), so a Ray results folder is read like MLflow
    repro = {**repro_record(cfg, trainer, meta), "started_at": started}  # once: it hashes the data files
    record = {"run_json": json.dumps(meta["record"].as_dict()), "repro_json": json.dumps(repro, default=str),
              "work_dir": str(work)}  # where the driver's progress lines follow the final evaluation
    last = cfg.optim.epochs
    try:
        if trainer.epoch >= last:  # resumed after the last epoch: only the final report is missing
            _report({**trainer.history[-1], **_final(trainer, meta["stage"]), **record}, work)
            return
        for m in trainer.epochs():
            record["repro_json"] = json.dumps({**repro, **_progress_record(trainer, started)}, default=str)
            result = {**m, **record}
            if m["epoch"] == last:
                result.update(_final(trainer, meta["stage"]))
            _report(result, work)
    except TrainingDiverged as exc:
        # Deterministic: a retry would diverge again. End the trial with its reason; NaN tells Optuna it failed.
        log(f"stopped: {exc}")
        tune.report({"epoch": trainer.epoch + 1, "failed_reason": str(exc), "run_json": record["run_json"],
                     **{k: float("nan") for k in meta.get("metrics", [])}})
    finally:
        logf.close()

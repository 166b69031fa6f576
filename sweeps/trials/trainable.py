"""The Ray Tune trainable: one `ssat` Trainer per trial, one report (with a checkpoint) per epoch.

A trial's Tune config (its settings: `sweeps.trials.trial_settings`) becomes its validated Config and meta through
`resolve_trial`. `SweepTrainable` is the function trainable `train_trial` with a restore that checks the
checkpoint Tune hands it where it lies in the sweep's storage: one that is gone or damaged is replaced by the
trial's newest intact checkpoint (`choose_checkpoint`), the trial starts over when nothing is left, and it fails
(`NoIntactCheckpoint`) when what is left is damaged. What was done reaches the driver with the trial's first
report (`recovery`), and the trial's log (work/trial.log) holds the details.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow.fs
import torch
from ray import tune
from ray.tune.trainable.function_trainable import wrap_function

from ssat import faults
from ssat.config import Config
from ssat.evaluate import flatten_results
from ssat.storage import CorruptFileError, load_verified, sidecar, verify_file
from ssat.train import Trainer, TrainingDiverged

from .ray_private import training_result, trial_storage
from .trial_settings import FAULT_VARS, resolve_trial

CHECKPOINT_FILES = ("state.pt", "best.pt", "last.pt", "trial.log", "config.json")
VERIFIED_FILES = ("state.pt", "best.pt", "last.pt")  # a checkpoint is intact when each is there and matches its sidecar


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
    share = meta.get("gpu") or 0
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
        "git_commit": meta.get("git_commit"), "git_dirty": meta.get("git_dirty"),
        "lock_sha256": meta.get("lock_sha256"),
        "torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": cuda,
        "driver": _driver_version() if cuda else None, "gpu": torch.cuda.get_device_name() if cuda else None,
        "gpu_share": meta.get("gpu", 0), "threads": torch.get_num_threads(), "split_hash": trainer.split.hash,
        **trainer.engine.status(), "cudnn_benchmark": cfg.system.cudnn_benchmark,
        "cuda_memory_fraction": memory_cap(cfg, meta) if cuda else None,
        "mps": os.environ.get("CUDA_MPS_PIPE_DIRECTORY") if cuda else None, "eval_tf32": cfg.eval.tf32,
        "teacher_run_id": meta.get("teacher_run_id"),
        "teacher_split_hash": getattr(trainer.teacher, "split_hash", None),
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


def _restore(work: Path, continue_from: str | None = None) -> str | None:
    """The work folder as of the checkpoint the trial restored (the one Tune registered, or the newest intact one
    before it: `SweepTrainable.restore`). Without one the trial starts over: files of an epoch whose report Tune
    never processed (a driver stopped by Ctrl+C or killed right after the trial reported it) must not be resumed
    from, or that epoch would never reach the tracking store.

    continue_from: the checkpoint a trial Tune completed before its last epoch registered last (a new trial that
    continues it: `sweeps.trials.trial_settings.continuation_space`); its newest intact checkpoint up to that one is
    used
    when Tune has none for this trial. Returns what was done then, for the trial's log and run."""
    ckpt = tune.get_checkpoint()
    log = (work / "trial.log").read_bytes() if (work / "trial.log").exists() else b""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if ckpt is None and continue_from:
        return _continue(work, Path(continue_from), log)
    if ckpt is None:
        (work / "trial.log").write_bytes(log)
        return None
    with ckpt.as_directory() as d:
        for f in Path(d).iterdir():
            shutil.copy2(f, work / f.name)
    return None


def lines(notes: list[str]) -> str:
    """Notes (tracebacks, each with or without its last newline) as lines of a trial's log."""
    return "".join(n if n.endswith("\n") else n + "\n" for n in notes)


def _continue(work: Path, registered: Path, log: bytes) -> str:
    """Fill `work` from the newest intact checkpoint of the trial that registered `registered`, or leave it empty
    (the trial starts over) when none is left; damaged ones without an intact one fail it (NoIntactCheckpoint)."""
    plan, notes = plan_restore(registered, None)
    (work / "trial.log").write_bytes(log + lines(notes).encode())
    if plan.fails:
        raise NoIntactCheckpoint(recovery_record(plan, str(registered.parent)))
    if plan.use is not None:
        for f in (registered.parent / plan.use).iterdir():
            shutil.copy2(f, work / f.name)
    ended = "Tune ended this trial before its last epoch; "
    if plan.unusable or plan.use is None:
        return ended + recovery_record(plan)
    return f"{ended}continued from {plan.use} (epoch {plan.use_epoch})"


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
    work = work_dir(trial_storage())
    work.mkdir(parents=True, exist_ok=True)
    continued = _restore(work, meta.get("continue_from"))
    logf = open(work / "trial.log", "a", buffering=1)

    def log(line: str) -> None:
        logf.write(f"{time.strftime('%H:%M:%S')} {line}\n")

    recovery = RECOVERIES.pop(tune.get_context().get_trial_id(), None)
    if continued:
        recovery = Recovery(continued, continued, [])
    if recovery is not None:  # what the restore did instead of the checkpoint Tune named; details here only
        logf.write(lines(recovery.notes))
        log(f"recovery: {recovery.record}")

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
            _report({**trainer.history[-1], **_final(trainer, meta["stage"]), **record, **_recovery_keys(recovery)},
                    work)
            return
        for m in trainer.epochs():
            record["repro_json"] = json.dumps({**repro, **_progress_record(trainer, started)}, default=str)
            result = {**m, **record, **_recovery_keys(recovery)}
            recovery = None  # said once, with the first report after the restore
            if m["epoch"] == last:
                result.update(_final(trainer, meta["stage"]))
            _report(result, work)
            if faults.active("end", m["epoch"]):
                return  # as if Tune had completed the trial here (a test of resume continuing it)
    except TrainingDiverged as exc:
        # Deterministic: a retry would diverge again. End the trial with its reason (its study trial FAILs:
        # sweeps.trials.study).
        log(f"stopped: {exc}")
        tune.report({"epoch": trainer.epoch + 1, "failed_reason": str(exc), "run_json": record["run_json"],
                     **{k: float("nan") for k in meta.get("metrics", [])}, **_recovery_keys(recovery)})
    finally:
        logf.close()


def work_dir(storage) -> Path:
    """The trial's work folder: in Ray's trial working directory on the node that runs it, which nothing syncs
    (`SyncConfig.sync_artifacts` is off). Not in the trial's driver staging folder (`get_trial_dir()` of a fresh
    actor): the driver copies that folder to storage while it saves the experiment state, and met the trainer's
    atomic writes there half done (`.last.pt.<random>.tmp` gone by the time it was copied). Every file a resume
    needs travels in the checkpoints."""
    return Path(storage.trial_working_directory) / "work"


# ---- restoring from what exists ------------------------------------------------------------------------
class NoIntactCheckpoint(RuntimeError):
    """The checkpoint Tune named and every older one of the trial are gone or damaged, and one of them is
    damaged: the trial fails with the reason instead of starting over unasked (`resume --rerun-failed` does)."""


@dataclass(frozen=True)
class Unusable:
    """A checkpoint a trial could not resume from: gone as a whole (file None), or one of its files damaged."""
    checkpoint: str        # its folder's name: checkpoint_000003
    file: str | None       # the file at fault; None: the folder is gone
    why: str               # "is gone from storage", "failed its checksum", "is missing", ...

    @property
    def damaged(self) -> bool:
        return self.file is not None

    def text(self, root: str = "") -> str:
        where = f"{root.rstrip('/')}/" if root else ""
        return f"{where}{self.checkpoint}{'/' + self.file if self.file else ''} {self.why}"


@dataclass
class RestorePlan:
    """What a trial resumes from: `use` (a checkpoint folder's name; None: nothing), and why the checkpoints
    newer than it, the one Tune registered first, were not used."""
    registered: str
    registered_epoch: int | None
    unusable: list[Unusable] = field(default_factory=list)
    use: str | None = None
    use_epoch: int | None = None

    @property
    def fails(self) -> bool:
        """Nothing to resume from, and something damaged: a person decides (a gone folder alone starts over)."""
        return self.use is None and any(u.damaged for u in self.unusable)


def checkpoint_index(name: str) -> int | None:
    """checkpoint_000003 -> 3 (Tune's checkpoint folders of a trial, numbered in the order they were made)."""
    m = re.fullmatch(r"checkpoint_(\d+)", name)
    return int(m.group(1)) if m else None


def choose_checkpoint(registered: str, registered_epoch: int | None, present: list[str],
                      check: Callable[[str], tuple[Unusable | None, int | None]]) -> RestorePlan:
    """The newest intact checkpoint among the one Tune registered and the older ones of the trial's folder.

    present: the folder names in the trial's folder; check(name) -> (why it is unusable or None, its epoch).
    A checkpoint newer than the registered one is never used: Tune may not have processed its report, so its
    epoch may be missing from the tracking store. Checked newest first, each once, until one is intact."""
    top = checkpoint_index(registered)
    older = [n for n in present if top is not None and checkpoint_index(n) is not None and checkpoint_index(n) < top]
    plan = RestorePlan(registered, registered_epoch)
    for name in [registered] + sorted(older, key=checkpoint_index, reverse=True):
        if name not in present:
            plan.unusable.append(Unusable(name, None, "is gone from storage"))
            continue
        problem, epoch = check(name)
        if problem is None:
            plan.use, plan.use_epoch = name, epoch
            break
        plan.unusable.append(problem)
    return plan


def _retrained(start: int | None, end: int | None) -> str:
    """The epochs after `start` up to `end` that run again ("" when none or unknown)."""
    if start is None or end is None or end <= start:
        return ""
    return f", epoch {end} retrained" if end == start + 1 else f", epochs {start + 1}-{end} retrained"


def recovery_record(plan: RestorePlan, root: str = "") -> str:
    """One line: what was wrong and what the trial did instead, e.g. "checkpoint_000003/state.pt failed its
    checksum; resumed from checkpoint_000002 (epoch 3), epoch 4 retrained". root: the trial's folder in storage,
    to name the checkpoints by their full paths (the console line); "" names them as in the trial's folder."""
    what = ", ".join(u.text(root) for u in plan.unusable)
    if plan.use is not None:
        lost = _retrained(plan.use_epoch, plan.registered_epoch)
        return f"{what}; resumed from {plan.use} (epoch {plan.use_epoch}){lost}"
    if plan.fails:
        return (f"{what}; no intact checkpoint is left, so the trial fails (resume the sweep with --rerun-failed to "
                "start it over)")
    return f"{what}; no older checkpoint is left: started over{_retrained(0, plan.registered_epoch)}"


def check_checkpoint(folder: Path, epoch: int | None, notes: list[str]) -> tuple[Unusable | None, int | None]:
    """Whether a checkpoint folder in storage is intact (VERIFIED_FILES there, each matching its sidecar), and its
    epoch (`epoch` when known, else read from its last.pt). Tracebacks of what failed go to `notes`."""
    name = folder.name
    for f in VERIFIED_FILES:
        try:
            verify_file(folder / f)
        except FileNotFoundError:
            return Unusable(name, f, "is missing"), None
        except CorruptFileError:
            notes.append(traceback.format_exc())
            why = "failed its checksum" if sidecar(folder / f).exists() else "has no checksum file"
            return Unusable(name, f, why), None
    if epoch is None:
        try:
            epoch = int(load_verified(folder / "last.pt")["epoch"])
        except Exception:  # verified, yet not a checkpoint of ours
            notes.append(traceback.format_exc())
            return Unusable(name, "last.pt", "cannot be read"), None
    return None, epoch


def plan_restore(registered: Path, registered_epoch: int | None) -> tuple[RestorePlan, list[str]]:
    """`choose_checkpoint` on the trial's folder in storage (a local or shared file system), and the tracebacks
    of the damaged files it met."""
    trial_dir, notes = registered.parent, []
    present = sorted(p.name for p in trial_dir.iterdir() if p.is_dir()) if trial_dir.is_dir() else []
    known = {registered.name: registered_epoch}
    plan = choose_checkpoint(registered.name, registered_epoch, present,
                             lambda name: check_checkpoint(trial_dir / name, known.get(name), notes))
    return plan, notes


@dataclass
class Recovery:
    record: str            # for the run's ssat.recovery tag: checkpoints named as in the trial's folder
    console: str           # the driver's console line: the same with their paths in storage
    notes: list[str]       # tracebacks, for the trial's log only


RECOVERIES: dict[str, Recovery] = {}  # trial id -> what its restore did, for train_trial on the same actor


def _recovery_keys(recovery: Recovery | None) -> dict:
    return {} if recovery is None else {"recovery": recovery.record, "recovery_console": recovery.console}


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class SweepTrainable(wrap_function(train_trial)):
    """`train_trial` as Tune's function trainable (named train_trial, as before: a saved stage restores with it),
    with a restore that looks at the checkpoint where it lies in storage before the trial uses it.

    Ray's own restore fails a trial whose registered checkpoint is gone (and so every retry and every later resume
    of it); a damaged one was found only by the trainer, in Ray's copy of it. Here each checkpoint's files are
    verified in storage, and the trial resumes from the newest intact one no newer than the registered one, or
    starts over when none is left; when what is left is damaged it fails (NoIntactCheckpoint) with the reason.
    Storage that is not a file system (a URI) is left to Ray's restore and the trainer's checks.
    """

    def restore(self, checkpoint_path):
        ckpt = getattr(checkpoint_path, "checkpoint", None)
        if ckpt is None or not isinstance(ckpt.filesystem, pyarrow.fs.LocalFileSystem):
            return super().restore(checkpoint_path)
        metrics = dict(checkpoint_path.metrics or {})
        plan, notes = plan_restore(Path(ckpt.path), _int(metrics.get("epoch")))
        if not plan.unusable:
            return super().restore(checkpoint_path)
        trial_dir = str(Path(ckpt.path).parent)
        recovery = Recovery(recovery_record(plan), recovery_record(plan, trial_dir), notes)
        if plan.fails:
            work = work_dir(self._storage)
            work.mkdir(parents=True, exist_ok=True)
            with open(work / "trial.log", "a") as f:
                f.write(lines(notes))
                f.write(f"{time.strftime('%H:%M:%S')} restore refused: {recovery.record}\n")
            raise NoIntactCheckpoint(recovery.console)
        RECOVERIES[self.trial_id] = recovery
        if plan.use is None:  # nothing left to resume from: the trial starts over
            self.load_checkpoint(training_result(None, {}))
            return None
        # Tune's iteration count as of the checkpoint used (one report per epoch since the registered one's)
        lost = (plan.registered_epoch or plan.use_epoch or 0) - (plan.use_epoch or 0)
        metrics["training_iteration"] = max(0, (_int(metrics.get("training_iteration")) or 0) - lost)
        used = type(ckpt)(path=str(Path(trial_dir) / plan.use), filesystem=ckpt.filesystem)
        return super().restore(training_result(used, metrics))

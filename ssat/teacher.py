"""The teacher of Algorithm 1, lines 1-3, as a cache: trained once per split (`ssat.fixmatch`), stored, found again.

A teacher trained with FixMatch on the labeled and unlabeled images gives every unlabeled image of the
student's split a soft pseudo-label y~ = softmax(f_T(x)). Its logits (not only probabilities, so that a
temperature can be applied later without underflow) and weights are stored with their provenance in

    <teacher_dir>/<dataset>-<split hash>-<key>/teacher.pt      (+ .sha256 sidecar, + .lock)

where key = teacher_key(cfg, split) hashes the dataset, the split and the resolved teacher config.
teacher_dir is cfg.data.teacher_dir, else $SSAT_TEACHER_DIR, else ./runs/teachers. Making the teacher is a
stage of its own (`ensure_teacher`, run by a sweep's driver before any trial); trials only read it
(`resolve_teacher`). The file is written atomically (`TeacherOutputs.save`) under an exclusive
`fcntl.flock` on the `.lock` file beside it, so concurrent callers train it once: the others wait, then read.
On a cluster the teacher_dir must be storage every node reads (and whose flock works across nodes, e.g. a
local or NFSv4 file system); the sweep's driver-side stage makes the cross-node case a read-only one.

The training itself is FixMatch (`ssat.fixmatch`).

CLI: python -m ssat.teacher --preset PRESET [--set k=v ...] [--teacher-dir DIR] [--data-root DIR] [--force]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

from .datasets import Arrays, Split, split_for
from .fixmatch import percent, teacher_key, train_teacher
from .models import create_model
from .pseudo_labels import PseudoLabelError, TeacherOutputs, load_teacher_outputs
from .storage import CorruptFileError
from .entry import entry_point

DEFAULT_TEACHER_DIR = "runs/teachers"

Log = Callable[[str], None]


# ---- identity and location -------------------------------------------------------------------
def teacher_root(cfg) -> Path:
    root = cfg.data.teacher_dir or os.environ.get("SSAT_TEACHER_DIR") or DEFAULT_TEACHER_DIR
    return Path(root).expanduser().resolve()


def teacher_path(cfg, split: Split) -> Path:
    return teacher_root(cfg) / f"{cfg.data.dataset}-{split.hash}-{teacher_key(cfg, split)}" / "teacher.pt"


# ---- the cache -------------------------------------------------------------------------------
@contextlib.contextmanager
def _file_lock(lock_path: Path, log: Log):
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"teacher: another process is making {lock_path.parent.name}; waiting for it")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def load_cached_teacher(cfg, split: Split, num_classes: int, log: Log = print) -> TeacherOutputs | None:
    """The cached teacher of this split and teacher config, or None if absent or unusable (reported)."""
    path = teacher_path(cfg, split)
    if not path.exists():
        return None
    try:
        out = load_teacher_outputs(path, split_hash=split.hash, n_unlabeled=len(split.unlabeled),
                                   num_classes=num_classes)
    except (CorruptFileError, PseudoLabelError, FileNotFoundError) as exc:
        log(f"teacher: cached file unusable ({exc})")
        return None
    key = teacher_key(cfg, split)
    if out.provenance.get("key") != key or out.model_state is None:
        log(f"teacher: cached file {path} does not carry key {key} and weights; ignoring it")
        return None
    return out


def _obtain(cfg, arrays: Arrays, split: Split, log: Log, force: bool = False) -> TeacherOutputs:
    """Read the cached teacher, or train and store it under the lock (one writer)."""
    path = teacher_path(cfg, split)
    if not force:
        out = load_cached_teacher(cfg, split, arrays.num_classes, log=lambda s: None)
        if out is not None:
            log(f"teacher: cached {path}")
            return out
    with _file_lock(path.with_name(path.name + ".lock"), log):
        if not force:
            out = load_cached_teacher(cfg, split, arrays.num_classes, log=log)  # made while we waited?
            if out is not None:
                log(f"teacher: cached {path}")
                return out
        out = train_teacher(cfg, arrays, split, log=log)
        out.save(path)
        log(f"teacher: stored {path}")
    return out


@dataclasses.dataclass(frozen=True)
class TeacherFile:
    """What `ensure_teacher` made or found: the cache file, its key and split, and its provenance."""
    path: Path
    key: str           # teacher_key(cfg, split)
    split_hash: str
    provenance: dict   # as the file stores it (plain JSON values)


def ensure_teacher(cfg, log: Log = print, *, force: bool = False) -> TeacherFile:
    """The driver-side stage: make this config's teacher unless it is cached; return what it made or found."""
    arrays, split = split_for(cfg)
    out = _obtain(cfg, arrays, split, log, force=force)
    # as TeacherOutputs.save writes it; without the 'verified' flag a load adds (a cache file always is)
    prov = json.loads(json.dumps({k: v for k, v in out.provenance.items() if k != "verified"}, default=str))
    return TeacherFile(teacher_path(cfg, split), teacher_key(cfg, split), split.hash, prov)


def resolve_teacher(cfg, arrays: Arrays, split: Split, log: Log = print) -> TeacherOutputs:
    """A trial's teacher: the user's file (data.pseudo_labels, checked), else the split's cached teacher
    (trained here, under the same lock, only if the sweep did not run `ensure_teacher` first)."""
    user = cfg.data.pseudo_labels
    if user:
        if not Path(user).exists():
            raise PseudoLabelError(f"data.pseudo_labels: {user}: no such file")
        out = load_teacher_outputs(user, split_hash=split.hash, n_unlabeled=len(split.unlabeled),
                                   num_classes=arrays.num_classes, user_file=True)
        log(f"teacher: user-provided pseudo-labels {user} ({tuple(out.logits.shape)}, "
            f"{'with' if out.model_state is not None else 'without'} weights, "
            f"{'verified' if out.verified else 'UNVERIFIED: no .sha256 sidecar'})")
        return out
    return _obtain(cfg, arrays, split, log)


def load_teacher_model(outputs: TeacherOutputs | None, num_classes: int, in_channels: int,
                       device: str | torch.device = "cpu") -> nn.Module:
    """The frozen teacher network (eval mode, no gradients) for the AWR teacher-KL term."""
    if outputs is None or outputs.model_state is None or outputs.model_name is None:
        raise ValueError("teacher: these outputs carry no weights (a pseudo-label file without them, or no teacher); "
                         "the AWR methods need the teacher's weights: its KL term is computed on every augmented "
                         "image")
    model = create_model(outputs.model_name, num_classes, in_channels).to(device)
    model.load_state_dict(outputs.model_state)
    return model.eval().requires_grad_(False)


# ---- CLI -------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    from .cli import add_config_args

    ap = argparse.ArgumentParser(prog="python -m ssat.teacher",  # pragma: no mutate
                                 description="Train (or find in the cache) the FixMatch teacher "  # pragma: no mutate
                                             "of a split and store its pseudo-labels: the logits "  # pragma: no mutate
                                             "of every unlabeled image, which the student runs "  # pragma: no mutate
                                             "of that split read (Algorithm 1, lines 1-3).")  # pragma: no mutate
    add_config_args(ap, "teacher.steps=500")
    ap.add_argument("--teacher-dir", default=None,
                    help="cache root (default $SSAT_TEACHER_DIR or ./runs/teachers)")  # pragma: no mutate
    ap.add_argument("--force", action="store_true",
                    help="train again even if the teacher is cached")  # pragma: no mutate
    return ap


@entry_point
def main(argv=None) -> int:
    from .cli import config_from_args

    args = parser().parse_args(argv)
    cfg = config_from_args(args, **{"data.teacher_dir": args.teacher_dir})
    made = ensure_teacher(cfg, force=args.force)
    prov = made.provenance
    print(f"teacher val acc {percent(prov['val_acc'])} (step {prov['selected_step']}/{prov['steps']}), "
          f"pseudo-label acc {percent(prov['pseudo_label_acc'])} on {prov['n_unlabeled_student']} unlabeled "
          f"images, training {prov['train_seconds']:.1f}s")
    print("teacher test: " + "  ".join(f"{a} {v:.2f}%" for a, v in prov["test_metrics"].items()))
    print(f"teacher: {made.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Atomic, verified files: checkpoints, split files and teacher outputs.

A file is written to a temporary name, flushed, fsynced and renamed, so a reader never sees half of it;
its SHA-256 goes into a sidecar `<file>.sha256` written the same way. Reading checks the checksum and
loads tensors with `weights_only=True` (no pickled code runs, a pickled custom object is refused), so a
torn or tampered file is reported, never loaded silently. Files of a run folder and of the teacher cache
must have their sidecar (`load_verified`); a file a user names may lack one (`load_user_file`), and is
then reported as unverified.
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Any

import torch


class CorruptFileError(RuntimeError):
    """A stored file is missing its checksum, fails it, or cannot be decoded."""


class ForeignFileError(ValueError):
    """A sound file that is not the one a command needs: not a checkpoint, another model's weights, another
    configuration's state."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, hashlib.sha256).hexdigest()  # read in blocks: dataset files are large


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sidecar(path: str | os.PathLike) -> Path:
    """The checksum file `<file>.sha256` of `path`."""
    return Path(f"{path}.sha256")


def save_verified(obj: Any, path: str | os.PathLike) -> str:
    """torch.save `obj` atomically with a checksum sidecar; returns the checksum."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    digest = sha256_bytes(data)
    atomic_write_bytes(path, data)
    atomic_write_bytes(sidecar(path), (digest + "\n").encode())
    return digest


def load_verified(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> Any:
    """Load a file written by `save_verified` (a run folder's, the teacher cache's): its sidecar must exist
    and match before anything is decoded (weights_only=True)."""
    path = Path(path)
    data = _read(path)
    if not sidecar(path).exists():
        raise CorruptFileError(f"{path}: its checksum file {sidecar(path).name} is missing (files of a run folder "
                               "and of the teacher cache are always written with one: this one was not written by "
                               "ssat, or was altered)")
    _check(path, data)
    return _decode(path, data, map_location)


def load_user_file(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> tuple[Any, bool]:
    """Load a file a user names (data.pseudo_labels, `python -m ssat.evaluate --unverified`): checked when it
    has a sidecar, else decoded as it is. Either way weights_only=True. Returns (object, verified)."""
    path = Path(path)
    data = _read(path)
    verified = sidecar(path).exists()
    if verified:
        _check(path, data)
    return _decode(path, data, map_location), verified


def _read(path: Path) -> bytes:
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    return path.read_bytes()


def _check(path: Path, data: bytes) -> None:
    want = sidecar(path).read_text().strip()
    if sha256_bytes(data) != want:
        raise CorruptFileError(f"{path}: checksum mismatch with {sidecar(path).name} (file torn or modified)")


def _decode(path: Path, data: bytes, map_location) -> Any:
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:  # weights_only refuses any global or opcode it does not know: no code runs
        found = re.search(r"unsupported GLOBAL (\S+)", str(exc))
        what = f" ({found.group(1)})" if found else ""
        raise CorruptFileError(f"{path}: refused: its pickle holds more than weights-only loading allows{what}; "
                               "only tensors, numbers, strings and lists/tuples/dicts of them are loaded") from None
    except Exception as exc:  # torch raises several types for a truncated or foreign file
        raise CorruptFileError(f"{path}: cannot be read as a checkpoint ({type(exc).__name__}: {exc})") from None


def verify_file(path: str | os.PathLike) -> str:
    """Check a file written by `save_verified` where it lies, without decoding it: its sidecar exists and the
    file's SHA-256 (read in blocks) matches it. Returns the checksum; FileNotFoundError for a missing file,
    CorruptFileError for a missing sidecar or a mismatch."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if not sidecar(path).exists():
        raise CorruptFileError(f"{path}: its checksum file {sidecar(path).name} is missing")
    got = sha256_file(path)
    if got != sidecar(path).read_text().strip():
        raise CorruptFileError(f"{path}: checksum mismatch with {sidecar(path).name} (file torn or modified)")
    return got

"""Atomic, verified files: checkpoints, split files and teacher outputs.

A file is written to a temporary name, flushed, fsynced and renamed, so a reader never sees half of it;
its SHA-256 goes into a sidecar `<file>.sha256` written the same way. Reading checks the checksum and
loads tensors with `weights_only=True` (no pickled code runs), so a torn or tampered file is reported,
never loaded silently.
"""
from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


class CorruptFileError(RuntimeError):
    """A stored file is missing its checksum, fails it, or cannot be decoded."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


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


def save_verified(obj: Any, path: str | os.PathLike) -> str:
    """torch.save `obj` atomically with a checksum sidecar; returns the checksum."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    digest = sha256_bytes(data)
    atomic_write_bytes(path, data)
    atomic_write_bytes(f"{path}.sha256", (digest + "\n").encode())
    return digest


def load_verified(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> Any:
    """Load a file written by `save_verified`, checking its checksum first (weights_only=True)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    side = Path(f"{path}.sha256")
    data = path.read_bytes()
    if side.exists():
        want = side.read_text().strip()
        if sha256_bytes(data) != want:
            raise CorruptFileError(f"{path}: checksum mismatch (file torn or modified); expected {want[:12]}..")
    try:
        return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises several types for a truncated or foreign file
        raise CorruptFileError(f"{path}: cannot be read as a checkpoint ({type(exc).__name__}: {exc})") from None

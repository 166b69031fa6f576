"""torch.compile's caches shared by a sweep's trials: compile once per sweep, not once per trial.

A process compiles into inductor's cache folder (TORCHINDUCTOR_CACHE_DIR: FX graphs, AOTAutograd entries, the
Triton kernels or C++ libraries it built, autotuning results), here one folder per key on this machine. The first
process of a key to finish an epoch packs that folder into one bundle in the sweep's shared folder (system.
compile_cache), a tar named by its SHA-256 with a `.sha256` sidecar, and points `<key>.json` at it (the one atomic
write that publishes it). A later process with the same key, on any node, checks the bundle against its checksum
and unpacks it before its first compile, so it finds its kernels built. The key covers what makes an entry wrong
elsewhere (torch, CUDA, Triton, Python, the GPU or CPU type, model, method, precision, memory format, compile and
graph modes, batch sizes): another stack never reads it. A bundle that fails its check is ignored with a warning and
never unpacked, since it holds pickled code and shared libraries.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import torch

from .storage import atomic_write_bytes, sha256_file, sidecar

LOCAL_ROOT = Path(tempfile.gettempdir()) / "ssat-inductor"
MARKER = ".ssat-bundle"  # in a local folder: the checksum of the bundle unpacked into it


def stack_parts(device: torch.device) -> dict:
    """What the compiled code depends on beyond the run's settings: software versions and the device type."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    on_gpu = device.type == "cuda"
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version,
            "python": sys.version.split()[0], "device": torch.cuda.get_device_name(device) if on_gpu else "cpu",
            "capability": list(torch.cuda.get_device_capability(device)) if on_gpu else platform.machine()}


def bundle_key(parts: dict) -> str:
    """16 hex characters of the SHA-256 of `parts` (JSON, sorted keys)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


class CompileCache:
    """One key's cache: `activate()` before the first compile, `publish()` once this process has compiled.

    root: the shared folder (None: no sharing; the process still compiles into its key's local folder).
    Activating points this process's inductor at that local folder (TORCHINDUCTOR_CACHE_DIR).
    local_root: where keys' local folders live on this machine.
    """

    def __init__(self, root: str | os.PathLike | None, parts: dict, log: Callable[[str], None] = print,
                 local_root: Path = LOCAL_ROOT):
        self.root = Path(root) if root else None
        self.key, self.parts, self.log = bundle_key(parts), parts, log
        self.local = Path(local_root) / self.key
        self.status, self.cold = "not active", False

    @property
    def pointer(self) -> Path:
        return self.root / f"{self.key}.json"

    def activate(self) -> str:
        """Point inductor at this key's local folder, unpacking the shared bundle into it first when there is a
        valid one not unpacked yet. Returns (and keeps in .status) what happened."""
        self.local.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self.local)
        bundle = self._bundle()
        if self.root is None:
            self.status = f"local: {self.local} (no shared folder)"
        elif bundle is None:
            self.cold, self.status = True, f"cold: no bundle for key {self.key} yet; this trial publishes one"
        else:
            self.status = self._unpack(bundle)
        self.log(f"compile cache: {self.status}")
        return self.status

    def _bundle(self) -> Path | None:
        if self.root is None or not self.pointer.exists():
            return None
        try:
            name = json.loads(self.pointer.read_text())["bundle"]
        except (ValueError, KeyError, TypeError):
            return None
        return self.root / Path(name).name  # a name, never a path out of the folder

    def _unpack(self, bundle: Path) -> str:
        want = sidecar(bundle).read_text().strip() if sidecar(bundle).exists() else None
        got = sha256_file(bundle) if bundle.exists() else None
        if got is None or got != want or not bundle.name.endswith(f"-{got[:16]}.tar"):
            msg = (f"compile cache: {bundle} fails its SHA-256 check (or its sidecar is missing): ignored, not "
                   "unpacked; this trial compiles from scratch")
            warnings.warn(msg)
            return f"ignored: {bundle.name} fails its checksum; compiling"
        marker = self.local / MARKER
        if marker.exists() and marker.read_text().strip() == got:
            return f"warm: {bundle.name} already unpacked in {self.local}"
        staging = Path(tempfile.mkdtemp(prefix=f".{self.key}.", dir=self.local.parent))
        with tarfile.open(bundle) as tar:
            tar.extractall(staging, filter="data")
        n = 0
        for src in sorted(staging.rglob("*")):  # file by file, atomically: other processes may read the folder
            if src.is_file():
                dst = self.local / src.relative_to(staging)
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
                n += 1
        shutil.rmtree(staging, ignore_errors=True)
        atomic_write_bytes(marker, (got + "\n").encode())
        return f"warm: unpacked {bundle.name} ({n} files) into {self.local}"

    def publish(self) -> str | None:
        """Pack the local folder into the shared folder if no bundle of this key is there yet (this process was
        the cold one). Returns what was published, or None."""
        if self.root is None or not self.cold or self.pointer.exists():
            return None
        self.cold = False
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.key}.", suffix=".tar", dir=self.root)
        os.close(fd)
        try:
            with tarfile.open(tmp, "w") as tar:
                for f in sorted(self.local.rglob("*")):
                    rel = f.relative_to(self.local)
                    if f.is_file() and rel.parts[0] not in ("locks", MARKER):
                        tar.add(f, arcname=str(rel))
            digest = sha256_file(tmp)
            bundle = self.root / f"{self.key}-{digest[:16]}.tar"
            os.replace(tmp, bundle)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        atomic_write_bytes(sidecar(bundle), (digest + "\n").encode())
        atomic_write_bytes(self.pointer, json.dumps({"bundle": bundle.name, "parts": self.parts}, indent=1).encode())
        self.status = f"published: {bundle.name} ({bundle.stat().st_size / 2**20:.1f} MiB)"
        self.log(f"compile cache: {self.status}")
        return self.status


"""Which code ran a sweep: the git commit (and whether the work tree had uncommitted changes) and the hash of
the lock file, recorded on the sweep's parent run and with every trial (docs/tracking.md)."""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
GIT_TIMEOUT_S = 10  # a git that hangs (a stalled network file system) leaves the version unknown, not the sweep stuck


def code_version() -> dict:
    def git(*args):
        try:
            r = subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True,
                               timeout=GIT_TIMEOUT_S)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None

    lock = PROJECT_ROOT / "lock" / "requirements.lock"
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": git("rev-parse", "HEAD"), "git_dirty": None if status is None else bool(status),
            "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock.exists() else None}

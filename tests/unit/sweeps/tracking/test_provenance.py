"""Which code ran a sweep (sweeps/tracking/provenance.py), in a git repository of the test's own: the commit, a
work tree with uncommitted changes to tracked files (untracked files do not count), the lock file's hash, and
None for what cannot be known (no repository, no git, no lock file)."""
from __future__ import annotations

import subprocess

from sweeps.tracking import provenance

LOCK = b"torch==2.14.1\n"
LOCK_SHA256 = "cb4c768c4b63fc20b154157c1985323973f5d1a5fc45a134beec628e0d803b97"  # sha256sum of LOCK


def git(root, *args) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_the_commit_the_dirty_flag_and_the_locks_hash(tmp_path, monkeypatch):
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "requirements.lock").write_bytes(LOCK)
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "add", "lock")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "lock")
    monkeypatch.setattr(provenance, "PROJECT_ROOT", tmp_path)
    head = git(tmp_path, "rev-parse", "HEAD")
    assert provenance.code_version() == {"git_commit": head, "git_dirty": False,
                                         "lock_sha256": LOCK_SHA256}
    (tmp_path / "notes.txt").write_text("untracked")
    assert provenance.code_version()["git_dirty"] is False  # an untracked file is not a change to the code
    (tmp_path / "lock" / "requirements.lock").write_bytes(LOCK + b"numpy==2\n")
    assert provenance.code_version()["git_dirty"] is True


def test_what_cannot_be_known_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "PROJECT_ROOT", tmp_path)  # no repository, no lock file
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # git must not find one further up
    assert provenance.code_version() == {"git_commit": None, "git_dirty": None, "lock_sha256": None}
    monkeypatch.setenv("PATH", str(tmp_path))  # no git at all
    assert provenance.code_version() == {"git_commit": None, "git_dirty": None, "lock_sha256": None}


def test_a_git_that_hangs_leaves_the_version_unknown(tmp_path, monkeypatch):
    git = tmp_path / "bin" / "git"
    git.parent.mkdir()
    git.write_text("#!/bin/sh\nsleep 2\n")  # past the timeout; a git waited for would then say nothing: ""
    git.chmod(0o755)
    monkeypatch.setenv("PATH", f"{git.parent}:/usr/bin:/bin")
    monkeypatch.setattr(provenance, "GIT_TIMEOUT_S", 0.3)
    got = provenance.code_version()
    assert (got["git_commit"], got["git_dirty"]) == (None, None)

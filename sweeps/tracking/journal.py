"""The Tracker's journal: each operation on disk before it is sent (`<sweep dir>/tracking_spool.<host>.<pid>.<n>.jsonl`,
removed whenever the queue is empty), so a driver killed while the store is away loses nothing; the next driver of
the sweep adopts the journals of drivers that are gone, and the spool (`tracking_spool.jsonl`) that a driver that
stopped left unsent."""
from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
from pathlib import Path

_JOURNALS = itertools.count()


def _owner_gone(journal: Path, stem: str) -> bool:
    """A journal `<stem>.<host>.<pid>.<n>.jsonl` belongs to a driver that is gone: another host's (one
    driver per sweep at a time), or a process of this host that no longer exists. This process's own
    journals (other Trackers alive in it) are never taken."""
    parts = journal.name[len(stem) + 1: -len(".jsonl")].rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid = parts[0], int(parts[1])
    if host != socket.gethostname():
        return True
    return pid != os.getpid() and not Path(f"/proc/{pid}").exists()


class Journal:
    """One Tracker's journal beside the sweep's spool, and what it adopts."""

    def __init__(self, spool: Path, log=print):
        self.spool, self.log = spool, log
        self.path = spool.with_name(f"{spool.stem}.{socket.gethostname()}.{os.getpid()}.{next(_JOURNALS)}.jsonl")
        self._failing = False

    def adopt(self) -> list[dict]:
        """What drivers that are gone left unsent (the spool and their journals), journaled as ours first."""
        stem = self.spool.stem
        found = [self.spool] if self.spool.exists() else []
        found += [j for j in sorted(self.spool.parent.glob(f"{stem}.*.jsonl")) if _owner_gone(j, stem)]
        ops: list[dict] = []
        for f in found:
            for line in filter(str.strip, f.read_text().splitlines()):
                try:
                    ops.append(json.loads(line))
                except json.JSONDecodeError:  # the last line of a driver that died mid-write (power loss)
                    self.log(f"[tracking] skipped a torn line of {f.name}: {line[:80]}")
        if found:
            if self.write(ops):  # ours first, then theirs go: a kill in between only duplicates
                for f in found:
                    f.unlink(missing_ok=True)
            self.log(f"[tracking] adopted {len(ops)} operation(s) left unsent by an earlier driver "
                     f"({', '.join(f.name for f in found)})")
        return ops

    def write(self, ops: list[dict]) -> bool:
        """Append to the journal; a journal that cannot be written (a full disk) is said once, and the operations
        stay queued in memory: a driver killed now would lose them, one that stops sends or spools them."""
        if not ops:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write("".join(json.dumps(op) + "\n" for op in ops))
        except OSError as exc:
            if not self._failing:
                self.log(f"[tracking] cannot write the journal {self.path} ({exc.strerror or exc}); operations "
                         "are kept in memory")
            self._failing = True
            return False
        self._failing = False
        return True

    def remove(self) -> None:
        with contextlib.suppress(OSError):  # never there when it could not be written
            self.path.unlink()

    def spool_ops(self, ops: list[dict]) -> None:
        """What is still unsent as the driver lets go: appended to the spool, for the next driver or `sync`."""
        with open(self.spool, "a") as f:
            f.write("".join(json.dumps(op) + "\n" for op in ops))
        self.path.unlink(missing_ok=True)

"""Deterministic fault injection, for testing that nothing is lost when a trial dies.

SSAT_FAULT holds comma-separated specs `KIND@EPOCH[/seed=N]`:
  raise@3                   raise an exception at the first step of epoch 3 (a crashing trial)
  exit@3                    kill the process (os._exit) at the first step of epoch 3 (a dead worker)
  exit_after_checkpoint@2   kill the process right after epoch 2's checkpoint is written
  nan@2                     make epoch 2's loss NaN (a diverging trial)
With SSAT_FAULT_ONCE_DIR set, each fault fires once per run (a marker file there records it), so the
retried trial goes on. `/seed=N` restricts a fault to the run with that seed. Unset: no cost, no effect.
"""
from __future__ import annotations

import os
from pathlib import Path

_context = {"seed": None, "key": "run"}


class InjectedFault(RuntimeError):
    pass


def set_context(seed: int, key: str) -> None:
    _context.update(seed=seed, key=key)


def _specs():
    for raw in filter(None, (s.strip() for s in os.environ.get("SSAT_FAULT", "").split(","))):
        kind, _, rest = raw.partition("@")
        epoch, _, sel = rest.partition("/")
        seed = int(sel.split("=", 1)[1]) if sel.startswith("seed=") else None
        yield raw, kind, int(epoch), seed


def _fires(raw: str, seed: int | None) -> bool:
    if seed is not None and seed != _context["seed"]:
        return False
    once = os.environ.get("SSAT_FAULT_ONCE_DIR")
    if not once:
        return True
    marker = Path(once) / f"{raw.replace('/', '_')}-{_context['key']}"
    if marker.exists():
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("fired\n")
    return True


def active(kind: str, epoch: int) -> bool:
    """True when a fault of `kind` is due at `epoch` (and, with SSAT_FAULT_ONCE_DIR, has not fired yet)."""
    return any(k == kind and e == epoch and _fires(raw, s) for raw, k, e, s in _specs())


def maybe(point: str, epoch: int, step: int = 0) -> None:
    """Fire the faults due at this point: point 'epoch' (at step 0) or 'after_checkpoint'."""
    if not os.environ.get("SSAT_FAULT"):
        return
    if point == "epoch" and step == 0:
        if active("raise", epoch):
            raise InjectedFault(f"injected fault: raise@{epoch}")
        if active("exit", epoch):
            os._exit(99)
    if point == "after_checkpoint" and active("exit_after_checkpoint", epoch):
        os._exit(99)

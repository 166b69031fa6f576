"""Deterministic fault injection, for testing that nothing is lost when a trial, a worker or a node dies.

SSAT_FAULT holds comma-separated specs `KIND@EPOCH[:STEP][/seed=N][/node=HOST]`:
  raise@3                   raise an exception at the first step of epoch 3 (a crashing trial)
  exit@3                    kill the process (os._exit) at the first step of epoch 3 (a dead worker)
  exit@3:1                  the same at step 1 of epoch 3: mid-epoch, one optimiser step past the checkpoint
  pause@2:1                 stop at step 1 of epoch 2 and wait forever (the test then kills the node under it)
  hold@2:1                  stop at step 1 of epoch 2 until the file `release` appears in SSAT_FAULT_ONCE_DIR (a
                            test lets every held trial go at once: trials held together run side by side)
  exit_after_checkpoint@2   kill the process right after epoch 2's checkpoint is written
  nan@2                     make epoch 2's loss NaN (a diverging trial)
  end@2                     a sweep's trial returns right after reporting epoch 2, as if Tune had completed it
                            before its last epoch (sweeps.trials.trainable; a resume continues it)
`/seed=N` restricts a fault to the run with that seed, `/node=HOST` to runs on the host named HOST.
With SSAT_FAULT_ONCE_DIR set, each fault fires once per run: a marker file there (`<spec>-<run key>`, '/'
and ':' replaced by '_', run key as `run_key` makes it) records it, so a retried trial goes on, and a test can wait for
the marker. `nan` is the exception: a diverging configuration diverges every time it runs, so it fires every time (the
marker still records that it did).
Unset: no cost, no effect.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

_context = {"seed": None, "key": "run"}
KINDS = ("raise", "exit", "pause", "hold", "exit_after_checkpoint", "nan", "end")


class InjectedFault(RuntimeError):
    pass


def run_key(config_hash: str, seed: int) -> str:
    """A run's key, `<config hash>-s<seed>`: the fault markers name runs by it, and a sweep's trial key
    (sweeps/tracking/run_records.py) is it with the sweep in front and the stage behind."""
    return f"{config_hash}-s{seed}"


def set_context(seed: int, key: str) -> None:
    _context.update(seed=seed, key=key)


def parse(text: str) -> list[dict]:
    """The specs of an SSAT_FAULT value, each {raw, kind, epoch, step, seed, node}; a bad spec is an error."""
    specs = []
    for raw in filter(None, (s.strip() for s in text.split(","))):
        head, *selectors = raw.split("/")
        kind, _, when = head.partition("@")
        epoch, colon, step = when.partition(":")
        if kind not in KINDS or not epoch.isdigit() or (colon and not step.isdigit()):
            raise ValueError(f"SSAT_FAULT: bad spec {raw!r}; expected KIND@EPOCH[:STEP][/seed=N][/node=HOST] "
                             f"with KIND one of {', '.join(KINDS)}")
        spec = {"raw": raw, "kind": kind, "epoch": int(epoch), "step": int(step or 0), "seed": None, "node": None}
        for sel in selectors:
            name, _, value = sel.partition("=")
            if name not in ("seed", "node") or not value or (name == "seed" and not value.lstrip("-").isdigit()):
                raise ValueError(f"SSAT_FAULT: bad selector {sel!r} in {raw!r}; allowed: seed=N, node=HOST")
            spec[name] = int(value) if name == "seed" else value
        specs.append(spec)
    return specs


def marker(raw: str, key: str) -> str:
    return f"{raw.replace('/', '_').replace(':', '_')}-{key}"


def _fires(spec: dict) -> bool:
    if spec["seed"] is not None and spec["seed"] != _context["seed"]:
        return False
    if spec["node"] is not None and spec["node"] != socket.gethostname():
        return False
    once = os.environ.get("SSAT_FAULT_ONCE_DIR")
    if not once:
        return True
    path = Path(once) / marker(spec["raw"], _context["key"])
    if path.exists():
        return spec["kind"] == "nan"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"fired on {socket.gethostname()} pid {os.getpid()}\n")
    return True


def active(kind: str, epoch: int, step: int | None = None) -> bool:
    """True when a fault of `kind` is due at `epoch` (and `step`, when given), and fires now."""
    return any(s["kind"] == kind and s["epoch"] == epoch and (step is None or s["step"] == step) and _fires(s)
               for s in parse(os.environ.get("SSAT_FAULT", "")))


def maybe(point: str, epoch: int, step: int = 0) -> None:
    """Fire the faults due at this point: point 'epoch' (before the step `step`) or 'after_checkpoint'."""
    if not os.environ.get("SSAT_FAULT"):
        return
    if point == "epoch":
        if active("raise", epoch, step):
            raise InjectedFault(f"injected fault: raise@{epoch}:{step}")
        if active("exit", epoch, step):
            os._exit(99)
        if active("pause", epoch, step):
            while True:  # until the node under this process is killed
                time.sleep(60)
        if active("hold", epoch, step):
            release = Path(os.environ.get("SSAT_FAULT_ONCE_DIR", ".")) / "release"
            while not release.exists():
                time.sleep(0.5)
    if point == "after_checkpoint" and active("exit_after_checkpoint", epoch):
        os._exit(99)

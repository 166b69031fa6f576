"""The one way an entry joins a registry (methods, schedules, batchings): by its name, never twice."""
from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def add_entry(registry: dict[str, T], kind: str, entry: T) -> T:
    """Add `entry` under `entry.name`; a taken name is refused, naming the kind ("method 'rst' is registered
    already")."""
    if entry.name in registry:
        raise ValueError(f"{kind} {entry.name!r} is registered already")
    registry[entry.name] = entry
    return entry

"""What an error message may echo of what a person gave: a text cut to a length with its length said, and a value's
repr bounded (a YAML alias bomb is never expanded to build a message). Every package's errors use these."""
from __future__ import annotations

import reprlib
from typing import Any


def shorten(text: str, limit: int = 120) -> str:
    """`text` cut to `limit` characters, its length said: a message never echoes megabytes of what was given."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


_BOUNDED = reprlib.Repr()  # Python 3.11's takes no keywords
for _name, _n in (("maxlevel", 4), ("maxtuple", 8), ("maxlist", 8), ("maxdict", 8), ("maxset", 8), ("maxfrozenset", 8),
                  ("maxstring", 120), ("maxlong", 40), ("maxother", 120)):
    setattr(_BOUNDED, _name, _n)


def _larger_than(value: Any, budget: int) -> bool:
    """Whether a container holds more than `budget` values, nested ones counted each time they are reached (a
    YAML alias repeats one list many times): found without walking past the budget."""
    stack, seen = [value], 0
    while stack:
        v = stack.pop()
        seen += 1
        if seen > budget:
            return True
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple, set, frozenset)):
            stack.extend(v)
    return False


def brief(value: Any, limit: int = 120) -> str:
    """The repr of a value an error names, `shorten`ed; a container of more than 1,000 values is written by a
    bounded repr (its first items, '...'), never built whole (a billion-laughs spec expands to gigabytes)."""
    try:
        if isinstance(value, (dict, list, tuple, set, frozenset)) and _larger_than(value, 1_000):
            return shorten(_BOUNDED.repr(value), limit) + " (a container of more than 1,000 values)"
        return shorten(repr(value), limit)
    except ValueError:  # an integer past Python's 4,300 digits to text
        return f"an integer of {value.bit_length():,} bits"

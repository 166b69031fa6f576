"""The errors sweeps/ raises, and the spec's key check shared by the spec and search-space parsers."""
from __future__ import annotations

import difflib

from ssat.config import ConfigError
from ssat.messages import brief


MAX_MESSAGE = 2_000  # characters of an error message the console gets, whatever it quotes


def cut(message: str, limit: int = MAX_MESSAGE) -> str:
    """An error message cut to `limit` characters (and the rest counted): the last guard against a message that
    quotes megabytes of what was given (each message quotes values through ssat.config.brief already)."""
    return message if len(message) <= limit else f"{message[:limit]}... ({len(message) - limit:,} more characters)"


class SweepError(RuntimeError):
    """A sweep that cannot start or did not finish; the message says what to do."""


class UsageError(SweepError):
    """A command-line option with a value it cannot take; the message names the option."""


class SpecError(ConfigError):
    """A sweep spec mistake; the message names the spec file, the field, the value and what is allowed."""


def check_keys(d: dict, allowed: set, path: str, where: str) -> None:
    """Refuse the first key of `d` not in `allowed`, naming it, the nearest allowed key and all of them."""
    for k in d:
        if k not in allowed:
            near = difflib.get_close_matches(str(k), allowed, n=1, cutoff=0.5)
            hint = f"; did you mean '{near[0]}'?" if near else ""
            raise SpecError(f"{path}: unknown key {brief(where + str(k))}{hint} Valid keys: "
                            f"{', '.join(sorted(allowed))}")

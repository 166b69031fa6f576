"""The checks every part of a spec uses: limits no real sweep comes near, and the errors that name the key, the value
and what is allowed (sweeps.spec for the spec, sweeps.search_spec for its search block)."""
from __future__ import annotations

from typing import Any

from ssat.messages import brief

from .errors import SpecError

# Limits no real sweep comes near (the paper's largest spec runs a few hundred trials of at most 200 epochs), each
# named in its error: past them a value is a mistake that would otherwise start a billion trials, or store megabytes
# in every run's tags.
MAX_TRIALS = 10_000        # trials of one stage: grid rows x seeds, search.num_samples, confirm top_k x seeds
MAX_SEEDS = 1_000          # seeds of a list (seeds, search.confirm.seeds); epochs: ssat.config.MAX_EPOCHS
MAX_TEXT = 200             # table, column_group, a row's label, a metric, a custom resource's name
MAX_DESCRIPTION = 5_000
MAX_SPEC_BYTES = 2**20     # a spec file
MAX_EXPANDED = 100_000     # values a spec's YAML aliases may expand to


def spec_error(path: str, msg: str) -> SpecError:
    return SpecError(f"{path}: {msg}")


def is_integer(value: Any) -> bool:
    """An int, and not a bool (YAML's true/false are ints to isinstance)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float, and not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def int_in(value: Any, path: str, key: str, lo: int = 1, hi: int | None = None, *, allowed: str) -> int:
    """`value` when it is an integer in lo..hi; else the spec error naming the key, the value and what is allowed."""
    if not is_integer(value) or value < lo or (hi is not None and value > hi):
        raise spec_error(path, f"{key}: {brief(value)}; allowed: {allowed}")
    return value


def up_to(limit: int) -> str:
    return f"a positive integer up to {limit:,}"


def text_of(value: Any, path: str, key: str, limit: int = MAX_TEXT) -> str:
    """`value` when it is a string of at most `limit` characters; else the spec error naming the key and the limit
    (and only an excerpt of the value)."""
    if not isinstance(value, str):
        raise spec_error(path, f"{key}: expected a string, got {brief(value)}")
    if len(value) > limit:
        raise spec_error(path, f"{key}: {len(value):,} characters ({brief(value)}); allowed: at most {limit:,} (a "
                         "limit no real sweep comes near)")
    return value

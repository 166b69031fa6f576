"""How every command of the project (`python -m ssat.*`, `python -m sweeps`) ends: a person's mistake as one line
`error: <message>` on stderr with exit code 2, Ctrl+C as `interrupted` with 130, a bug with its traceback. Imports
nothing of the package, so any module (ssat.datasets too, which ssat.config imports) can wrap its command with it."""
from __future__ import annotations

import argparse
import functools
import sys
from typing import Callable

# Errors a person can fix, as (module, class): `error: <message>` on one line and exit code 2 (sweeps/cli.py does
# the same for its own). Matched only in modules already imported: an error of a module never imported cannot have
# been raised, and importing one would cost its import.
USER_ERRORS = (("ssat.config", "ConfigError"), ("ssat.cifar_files", "DataError"), ("ssat.storage", "CorruptFileError"),
               ("ssat.storage", "ForeignFileError"), ("ssat.pseudo_labels", "PseudoLabelError"),
               ("builtins", "FileNotFoundError"))


def positive_int(text: str) -> int:
    """argparse's type of a count (images, a batch): an integer >= 1, else argparse's one-line usage error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}; allowed: an integer >= 1")
    return value


def is_user_error(exc: BaseException, errors=USER_ERRORS) -> bool:
    """Whether `exc` is one of `errors` (a mistake in what a person gave, not in the code)."""
    return any(isinstance(exc, getattr(sys.modules[m], c)) for m, c in errors if m in sys.modules)


def one_line(message: str) -> str:
    return " ".join(message.split("\n"))


def run_command(main: Callable[..., int], *args, errors=USER_ERRORS, said: Callable[[str], str] = one_line) -> int:
    """`main(*args) -> exit code`, ended as every command of the project ends: a user error (is_user_error of
    `errors`) as `error: <said(message)>` on stderr with exit code 2, Ctrl+C as `interrupted` with 130; any other
    exception is a bug and keeps its traceback."""
    try:
        return main(*args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if not is_user_error(exc, errors):
            raise
        print(f"error: {said(str(exc))}", file=sys.stderr)
        return 2


def entry_point(main: Callable[..., int]) -> Callable[..., int]:
    """`main(argv)` of a `python -m ssat.*` command, run by run_command (its errors on one line)."""
    @functools.wraps(main)
    def run(*args) -> int:
        return run_command(main, *args)
    return run

"""What the `python -m ssat.train` and `python -m ssat.teacher` command lines share: a preset, its dotted
overrides and the paths given on the command line make one Config."""
from __future__ import annotations

import argparse

from .config import Config, ConfigError, from_dict, parse_overrides
from .epoch_scaling import scale_epochs
from .presets import PRESETS, preset

DEFAULT_PRESET = "mnist5k-ssat-mbi"


def add_config_args(ap: argparse.ArgumentParser, example: str) -> None:
    """--preset, --set KEY=VALUE ... (`example`: one override, for the help) and --data-root."""
    ap.add_argument("--preset", default=DEFAULT_PRESET,
                    help=f"one of: {', '.join(sorted(PRESETS))}")  # pragma: no mutate
    ap.add_argument("--set", nargs="*", default=[], action="extend",
                    metavar="KEY=VALUE", help=f"dotted overrides, e.g. {example}")  # pragma: no mutate
    ap.add_argument("--data-root", default=None,
                    help="where the dataset's files are")  # pragma: no mutate


def config_from_args(args: argparse.Namespace, epochs: int | None = None, **paths: str | None) -> Config:
    """The preset, rescaled to `epochs` epochs if given (`scale_epochs`), then the --set overrides, then the
    paths given on the command line (--data-root as data.root; `paths`: dotted key -> value, None = not given).
    Raises ConfigError naming what is wrong (an unknown preset: --preset and the valid names)."""
    try:
        d = preset(args.preset)
    except KeyError as exc:
        raise ConfigError(f"--preset: {exc.args[0]}") from None
    if epochs:
        d = scale_epochs(d, epochs)
    over = parse_overrides(args.set)
    for key, value in {"data.root": args.data_root, **paths}.items():
        if value:
            over[key] = value
    return from_dict(d, over)

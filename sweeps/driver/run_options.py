"""The options of `run` as the spec sees them: what `run` was given besides the spec (`RunArgs`, kept in the sweep's
state for a resume), the spec file read with them applied, and a mistake that only an option makes said as that
option's (`--set KEY=VALUE: ...`), not the file's."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ssat.config import ConfigError
from ssat.messages import brief, shorten

from ..errors import UsageError
from ..spec import NAME_RE, Spec, parse_spec, read_yaml


@dataclass
class RunArgs:
    """What `run` was given besides the spec; a resume rebuilds the same spec from them."""
    epochs: int | None = None
    seeds: list[int] | None = None
    sets: dict = field(default_factory=dict)
    cpu_only: bool = False
    max_concurrent: int | None = None
    data_root: str | None = None
    address: str | None = None
    max_failures: int = 2
    name: str | None = None
    rows: list[str] | None = None  # --rows: only these grid rows
    gpu_share: float | None = None  # --gpu-share: each trial's share of a GPU, instead of resources.gpu
    samples: int | None = None  # --samples: a search's num_samples
    top_k: int | None = None  # --top-k: a search's confirm.top_k
    optuna_storage: str | None = None  # --optuna-storage: an RDB URL for the search's study (default: the sweep folder)
    reuse: bool = False  # --reuse: a trial with a finished run in the store references it (sweeps.driver.reuse)

    def spec_options(self) -> dict:
        """The options that shape the spec (sweeps.spec.parse_spec's keywords), those given only."""
        given = {"epochs": self.epochs, "seeds": self.seeds, "sets": self.sets, "cpu_only": self.cpu_only,
                 "max_concurrent": self.max_concurrent, "data_root": self.data_root, "rows": self.rows,
                 "gpu_share": self.gpu_share, "samples": self.samples, "top_k": self.top_k}
        return {k: v for k, v in given.items() if v is not None and v is not False and v != {}}


FLAGS = (("sets", "--set"), ("epochs", "--epochs"), ("seeds", "--seeds"), ("max_concurrent", "--max-concurrent"),
         ("rows", "--rows"), ("data_root", "--data-root"), ("cpu_only", "--cpu-only"), ("gpu_share", "--gpu-share"),
         ("samples", "--samples"), ("top_k", "--top-k"))


def check_name_flag(name: str) -> None:
    """--name follows the spec's rules for a name (it names folders and the MLflow experiment)."""
    if not NAME_RE.fullmatch(name) or ".." in name:
        raise UsageError(f"--name: {brief(name)}; allowed: 1-100 letters, digits, '.', '_' or '-' (it names folders "
                         "and the MLflow experiment, so no '/' or '..')")


def load_run_spec(spec_path: str | Path, args: RunArgs) -> Spec:
    """The spec file with the run's options applied (and renamed by `args.name`), fully validated. A mistake that
    only a command-line option makes is reported as that option's (`--set KEY=VALUE: ...`), not the file's."""
    raw = read_yaml(spec_path)
    if args.name:
        check_name_flag(args.name)
        raw["name"] = args.name
    given = args.spec_options()
    try:
        return parse_spec(raw, str(spec_path), **given)
    except ConfigError as exc:
        raise _blame_options(raw, str(spec_path), given, exc) from None


def _blame_options(raw: dict, path: str, given: dict, exc: ConfigError) -> ConfigError:
    """The spec error `exc` said as the options' when the spec alone is valid: the first option that fails on its
    own (for --set: the items that do), else all of them together."""
    def fails(**opts) -> bool:
        try:
            parse_spec(raw, **opts)  # only whether it fails: the path is for messages
        except ConfigError:
            return True
        return False

    if not given or fails():
        return exc  # the file's own mistake (or no option at all)
    blamed = next(({k: v} for k, v in given.items() if fails(**{k: v})), given)
    if set(blamed) == {"sets"}:
        blamed = {"sets": {k: v for k, v in given["sets"].items() if fails(sets={k: v})} or given["sets"]}
    flags = " with ".join(_flag_text(k, v) for k, v in blamed.items())
    msg = str(exc).removeprefix(f"{path}: ")
    if all(dict(FLAGS)[k] in msg for k in blamed):  # it names its option already (--epochs, --rows)
        return type(exc)(f"{msg} (spec {path})")
    return type(exc)(f"{flags}: {msg} (spec {path})")


def _flag_text(key: str, value) -> str:
    flag = dict(FLAGS)[key]
    if key == "sets":
        return flag + " " + " ".join(shorten(f"{k}={v if isinstance(v, str) else json.dumps(v)}")
                                     for k, v in value.items())
    if key == "cpu_only":
        return flag
    return f"{flag} {shorten(' '.join(map(str, value)) if isinstance(value, list) else str(value))}"

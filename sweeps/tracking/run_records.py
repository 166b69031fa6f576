"""Run records: the tracking schema (docs/tracking.md) in one place. How a run is keyed, and the tags and
parameters it is created with, for the sweep's parent run, its teacher runs and its trial runs.

A run record is what `Tracker.ensure_run(key, tags, params, name)` takes. The trainable computes its trial's
record (`trial_record`) and reports it with every result (`run_json`), so a Ray results folder carries
the same record as the MLflow run the driver's callback makes from it; `analysis/` reads the record and
derives nothing. Tags say which run it is and where it belongs (identity, table, row, status: they can
change); parameters say what was trained (they never change once logged).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from ssat.config import Config
from ssat.faults import run_key
from ssat.methods import METHOD_REGISTRY
from ssat.schedules import SCHEDULE_REGISTRY

UNSCALED_STAGES = ("search", "confirm")  # sampled at the length they run: nothing was rescaled after


@dataclasses.dataclass(frozen=True)
class RunRecord:
    key: str
    tags: dict[str, Any]
    params: dict[str, Any]
    name: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def trial_key(sweep: str, config_hash: str, seed: int, stage: str) -> str:
    """`<sweep>-<config_hash>-s<seed>-<stage>`: how a resumed or retried trial finds its run again."""
    return f"{sweep}-{run_key(config_hash, seed)}-{stage}"


def sweep_key(sweep: str) -> str:
    return f"{sweep}-sweep"


def sweep_record(sweep: str, table: str, spec_path: str, preset: str, code: dict,
                 study_url: str | None = None) -> RunRecord:
    """The sweep's parent run: the spec file, its preset and the code version (git commit, lock hash); a search's
    Optuna study (`ssat.optuna_storage`, its URL without a password, and `ssat.optuna_study`: sweeps.trials.study)."""
    tags = {"ssat.kind": "sweep", "ssat.sweep": sweep, "ssat.table": table}
    if study_url:
        tags.update({"ssat.optuna_storage": study_url, "ssat.optuna_study": sweep})
    return RunRecord(sweep_key(sweep), tags, {"spec": spec_path, "preset": preset, **code}, sweep)


def teacher_record(sweep: str, cfg: Config, split_hash: str, teacher_key: str) -> RunRecord:
    """A split's FixMatch teacher: the FixMatch row of the main table, made complete (FINISHED)."""
    ds, model = cfg.data.dataset, cfg.teacher.model or cfg.model.name
    tags = {"ssat.kind": "teacher", "ssat.sweep": sweep, "ssat.table": "main", "ssat.row": "FixMatch",
            "ssat.dataset": ds, "ssat.split_hash": split_hash, "ssat.column_group": f"{ds}/{model}",
            "ssat.status": "FINISHED"}
    params = {**{f"teacher.{k}": v for k, v in cfg.to_dict()["teacher"].items()},
              "data.dataset": ds, "data.split_seed": cfg.data.split_seed, "model.name": model}
    return RunRecord(f"{sweep}-teacher-{split_hash}-{teacher_key}", tags, params, f"teacher-{ds}-{split_hash}")


def spec_meta(unscaled: Config) -> dict:
    """A grid trial's meta entries from its config before `--epochs` rescaled it (sweeps.spec.Spec.trials)."""
    return {"spec_epochs": unscaled.optim.epochs, "spec_t": unscaled.attack.t}


def spec_params(cfg: Config, meta: dict) -> dict:
    """`spec.epochs`, `spec.t`: the trial's epoch length and t before `--epochs` rescaled them (what a paper
    table's row names, e.g. Linear-60 of 100 epochs for a run shortened to 10). A grid trial's stage gives
    them in its meta (`spec_meta`); search and confirm trials sample at the length they run, so theirs are
    the trained ones. Nothing for a grid trial of a stage built before they were logged (a resumed sweep's):
    its run has no `spec.*`, and analysis infers them as for runs logged before (legacy_spec_params)."""
    if "spec_epochs" in meta:
        return {"spec.epochs": meta["spec_epochs"], "spec.t": meta["spec_t"]}
    if meta["stage"] in UNSCALED_STAGES:
        return {"spec.epochs": cfg.optim.epochs, "spec.t": cfg.attack.t}
    return {}


def labels(cfg: Config) -> dict[str, str]:
    """How the tables show the trial's method and schedule: their registry entries' labels (analysis reads these
    tags and keeps no list of methods or schedules of its own)."""
    method, schedule = METHOD_REGISTRY[cfg.method.name], SCHEDULE_REGISTRY[cfg.attack.schedule]
    return {"ssat.method_label": method.label, "ssat.schedule_label": schedule.label,
            "ssat.schedule_title": schedule.title, "ssat.schedule_row": schedule.row_format}


# The settings every trial run carries as parameters, under the dotted names a spec and `--set` use
# (docs/tracking.md), attack.eps resolved: what analysis reads.
TRACKED_PARAMS = ("method.name", "attack.schedule", "attack.t", "attack.gamma", "method.rho0",
                  "method.rho_double_epoch", "method.beta", "method.tau", "method.K", "method.lam",
                  "method.interpolate", "seed", "data.split_seed", "data.dataset", "model.name", "system.precision",
                  "optim.epochs", "optim.swa_start")


def tracked_params(cfg: Config) -> dict:
    """TRACKED_PARAMS of a config, and its resolved attack.eps."""
    flat = cfg.to_flat()
    return {**{k: flat[k] for k in TRACKED_PARAMS}, "attack.eps": cfg.eps}


# ---- one name per trial: console, MLflow run name, `status`, tables and figures ----------------------------
def value_text(value: Any) -> str:
    """A value as a trial's name shows it: floats to 2 significant digits (0.0937 -> 0.094), None as none,
    booleans as on/off."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:.2g}"
    return str(value)


def sampled_label(sampled: dict, config_hash: str) -> str:
    """A sampled configuration, in the space's order: a text value as itself (`linear`), any other by its key's
    last part (`t=3 rho0=0.12`), then `#` and the config hash's first 4 characters, since rounded values may
    coincide: `linear t=3 rho0=0.12 beta=0.94 tau=1.5 #4e14`."""
    parts = [v if isinstance(v, str) else f"{k.rsplit('.', 1)[-1]}={value_text(v)}" for k, v in sampled.items()]
    return " ".join([*parts, f"#{config_hash[:4]}"])


def trial_label(meta: dict, sampled: dict, config_hash: str) -> str:
    """What a trial's configuration is, without its seed: its grid row, the values a search sampled, or for a
    confirm trial the values of the search trial it confirms (the same text, hash included)."""
    confirms = meta.get("confirms")
    if confirms:
        return sampled_label(confirms["sampled"], config_hash)
    if sampled:
        return sampled_label(sampled, config_hash)
    return str(meta.get("row") or f"#{config_hash[:4]}")


def trial_name(label: str, seed: int, rank: int | None = None) -> str:
    """The trial's one name: its label and `s<seed>`, a confirm trial's led by its search rank (`top1 ...`)."""
    return f"{f'top{rank} ' if rank else ''}{label} s{seed}"


def trial_record(cfg: Config, meta: dict, sampled: dict) -> RunRecord:
    """A trial's run: tags from its meta (sweep, stage, table, row, ...), its label (`ssat.label`, the configuration
    without the seed), the keys a search sampled (`ssat.sampled`, JSON, in the space's order) and the registry
    labels; the flat parameters of its config (`tracked_params`), `spec.*` and any sampled key the tracked ones
    lack, each parameter once."""
    config_hash = cfg.config_hash()
    key = trial_key(meta["sweep"], config_hash, cfg.seed, meta["stage"])
    confirms = meta.get("confirms") or {}
    searched = sampled or confirms.get("sampled") or {}
    label = trial_label(meta, sampled, config_hash)
    tags = {"ssat.kind": "trial", "ssat.key": key, "ssat.sweep": meta["sweep"], "ssat.stage": meta["stage"],
            "ssat.table": meta.get("table", ""), "ssat.row": meta.get("row", ""),
            "ssat.column_group": meta.get("column_group", ""), "ssat.seed": cfg.seed,
            "ssat.expected_seeds": meta.get("expected_seeds", ""), "ssat.config_hash": config_hash,
            "ssat.label": label, **labels(cfg)}
    if searched:
        tags["ssat.sampled"] = json.dumps(list(searched))
    flat = cfg.to_flat()
    params = {**tracked_params(cfg), **spec_params(cfg, meta)}
    params.update({k: flat[k] for k in searched if k not in params})
    return RunRecord(key, tags, params, trial_name(label, cfg.seed, confirms.get("rank")))

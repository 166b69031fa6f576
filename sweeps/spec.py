"""Sweep specs: YAML files that name a base preset, fixed overrides, seeds, resources, metric(s), and either a
grid of rows or an Optuna search space with its confirm stage. Validated completely before Ray starts.

    name: mnist5k-ablation          # experiment name (letters, digits, '.', '_', '-')
    preset: mnist5k-ssat-mbi        # base ssat preset
    table: ablation                 # tags for analysis: table, column_group, row per grid entry
    column_group: mnist5k/cnn-small
    overrides: {optim.epochs: 6}    # dotted keys, applied to every trial
    epochs: 6                       # optional: rescale every epoch number (ssat.config.scale_epochs)
    seeds: [0, 1]
    resources: {cpu: 1, gpu: 0}     # per trial; gpu 0.25 = four trials per GPU
    max_concurrent: 2
    metric: val/pgd10               # or a list of two metrics (multi-objective)
    mode: max                       # or a list
    grid:                           # rows: a label and its overrides
      - {row: "none|off", set: {attack.schedule: const, method.interpolate: false}}
    search:                         # instead of grid
      num_samples: 20
      space: {method.beta: {float: [0, 1]}, attack.t: {int: [2, 8], when: {attack.schedule: [linear, curious]}}}
      early_stopping: {grace_period: 8}
      confirm: {top_k: 3, seeds: [10, 11, 12]}
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssat.config import Config, ConfigError, from_dict
from ssat.config_checks import MAX_EPOCHS
from ssat.messages import brief
from ssat.epoch_scaling import scale_epochs
from ssat.presets import preset

from .errors import SpecError, check_keys
from .spec_file import read_yaml
from .spec_checks import (MAX_DESCRIPTION, MAX_SEEDS, MAX_TRIALS, int_in, is_integer, is_number,
                          spec_error, text_of, up_to)
from .tracking.run_records import spec_meta

SPEC_KEYS = {"name", "preset", "table", "column_group", "overrides", "epochs", "seeds", "resources", "max_concurrent",
             "metric", "mode", "grid", "search", "stage", "description", "expected_seeds"}
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
STAGES = ("grid", "search", "confirm", "demo")
@dataclass
class Trial:
    """One (configuration, seed) to run: a validated config plus the tags analysis reads."""
    config: Config
    row: str
    stage: str
    seed: int
    # meta entries of its own: a grid trial's epochs and t before --epochs (sweeps.tracking.run_records.spec_meta), a
    # confirm
    # trial's search rank and sampled values (`confirms`: its name and label say which configuration it confirms)
    spec_meta: dict = field(default_factory=dict)


@dataclass
class Spec:
    name: str
    preset: str
    base: dict                       # nested config dict after preset + epochs + overrides
    seeds: list[int]
    resources: dict
    max_concurrent: int
    metric: list[str]
    mode: list[str]
    table: str = ""
    column_group: str = ""
    stage: str = "grid"
    grid: list[dict] = field(default_factory=list)
    search: dict | None = None
    source: dict = field(default_factory=dict)
    expected_seeds: int = 0
    bases: dict = field(default_factory=dict)  # per-row presets -> their nested config dicts
    rescale: int | None = None       # --epochs: every trial's epoch numbers scaled from the spec's run

    @property
    def multi_objective(self) -> bool:
        return len(self.metric) > 1

    def trials(self) -> list[Trial]:
        """Every grid trial (rows x seeds), validated. A row may name its own preset (Table 1's methods)."""
        out = []
        for row in self.grid:
            where = f"grid row {brief(row['row'])}"
            base = self.base if not row.get("preset") else self.bases[row["preset"]]
            for seed in self.seeds:
                try:
                    cfg = from_dict(base, {**row["set"], "seed": seed})
                    unscaled = spec_meta(cfg)
                    if self.rescale:
                        cfg = from_dict(scale_epochs(cfg.to_dict(), self.rescale))
                except ConfigError as exc:
                    raise SpecError(f"spec {brief(self.name)}, {where}: {exc}") from None
                out.append(Trial(cfg, row["row"], self.stage, seed, unscaled))
        return out

    def config_for(self, sampled: dict, seed: int) -> Config:
        return _config(self, sampled, seed, where="sampled configuration")

    def confirm_trials(self, configs: list[dict]) -> list[Trial]:
        """The confirm stage: each sampled configuration the search passed on (`sweeps.trials.outcomes.top_configs`),
        once per confirm seed."""
        seeds = self.search["confirm"]["seeds"]
        return [Trial(self.config_for(c, s), f"confirm-{i + 1}", "confirm", s,
                      {"confirms": {"rank": i + 1, "sampled": c}}) for i, c in enumerate(configs) for s in seeds]

    def base_config(self) -> Config:
        """The config a search samples around (its first seed)."""
        return self.config_for({}, self.seeds[0])

    def configs(self) -> list[Config]:
        """Every grid trial's config, or a search's base config: what the data and teacher checks need."""
        return [t.config for t in self.trials()] if self.grid else [self.base_config()]

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.source, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _config(spec: Spec, overrides: dict, seed: int, where: str) -> Config:
    try:
        return from_dict(spec.base, {**overrides, "seed": seed})
    except ConfigError as exc:
        raise SpecError(f"spec {brief(spec.name)}, {where}: {exc}") from None


def load_spec(path: str | Path, **options) -> Spec:
    """Read and fully validate a spec (every grid trial and the search space's corners are built); `options` as
    parse_spec takes them."""
    return parse_spec(read_yaml(path), str(path), **options)


def parse_spec(raw: dict, path: str = "<spec>", *, epochs: int | None = None, seeds: list[int] | None = None,
               sets: dict | None = None, cpu_only: bool = False, max_concurrent: int | None = None,
               data_root: str | None = None, rows: list[str] | None = None, gpu_share: float | None = None,
               samples: int | None = None, top_k: int | None = None) -> Spec:
    """A validated Spec; `rows` (--rows) keeps only those grid rows, in the spec's order; `gpu_share`
    (--gpu-share) replaces resources.gpu; `samples` and `top_k` (--samples, --top-k) a search's num_samples and
    confirm.top_k (sweeps.search_spec)."""
    if not isinstance(raw, dict):
        raise spec_error(path, f"expected a mapping of spec keys at the top, got {type(raw).__name__}")
    raw = copy.deepcopy(raw)
    seeds_option = seeds is not None  # --seeds, not the spec's own list
    check_keys(raw, SPEC_KEYS, path, "")
    name = _name(raw.get("name"), path)
    pname = raw.get("preset")
    ep = raw.get("epochs")  # the spec describes runs of this length; --epochs rescales each trial after
    overrides = _overrides(raw, path, sets, data_root, cpu_only)
    base = _base(pname, ep, overrides, path, "preset")
    seeds = _seeds(seeds if seeds is not None else raw.get("seeds", [0]), path)
    res = _resources(raw.get("resources") or {}, path, cpu_only, gpu_share)
    mc = int_in(max_concurrent if max_concurrent is not None else raw.get("max_concurrent", 1), path, "max_concurrent",
              hi=MAX_TRIALS, allowed=up_to(MAX_TRIALS))
    metric, mode = _metrics(raw, path)
    stage = raw.get("stage", "search" if "search" in raw else "grid")
    if stage not in STAGES:
        raise spec_error(path, f"stage: {brief(stage)}; allowed: {', '.join(STAGES)}")
    for key in ("table", "column_group"):
        text_of(raw.get(key, ""), path, key)
    description = raw.get("description", "")
    if isinstance(description, (dict, list)):
        raise spec_error(path, f"description: expected text, got {brief(description)}")
    text_of(str(description), path, "description", MAX_DESCRIPTION)  # YAML may give a date
    int_in(raw.get("expected_seeds", len(seeds)), path, "expected_seeds", hi=MAX_SEEDS, allowed=up_to(MAX_SEEDS))
    spec = Spec(name=name, preset=pname, base=base, seeds=seeds, resources=res, max_concurrent=mc, metric=metric,
                mode=mode, table=raw.get("table", ""), column_group=raw.get("column_group", ""), stage=stage,
                source=raw, expected_seeds=int(raw.get("expected_seeds", len(seeds))))
    if ("grid" in raw) == ("search" in raw):
        raise spec_error(path, "expected exactly one of 'grid' (rows to run) or 'search' (an Optuna space)")
    before = spec.base["optim"]["epochs"]
    if epochs is not None:
        _rescale(spec, "search" in raw, epochs, path)
    if rows is not None and "grid" not in raw:
        raise spec_error(path, "--rows: this spec has a search, not grid rows; --rows picks rows of a grid spec")
    for flag, value in (("--samples", samples), ("--top-k", top_k)):
        if value is not None and "grid" in raw:
            raise spec_error(path, f"{flag}: this spec has grid rows, not a search; {flag} sets a search's "
                                   f"{'num_samples' if flag == '--samples' else 'confirm.top_k'}")
    if "grid" in raw:
        _grid_rows(spec, raw["grid"], rows, ep, overrides, path)
    else:
        from .search_spec import parse_search

        spec.search = parse_search(raw["search"], path, spec, samples=samples, top_k=top_k,
                                   seeds_option=seeds_option, sets=sets, overrides=raw.get("overrides") or {},
                                   rescaled_from=before if epochs is not None else None)
    return spec


def _name(name: Any, path: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise spec_error(path, f"name: {brief(name)}; allowed: 1-100 letters, digits, '.', '_' or '-' (it names "
                         "folders and the MLflow experiment, so no '/' or '..')")
    if ".." in name:
        raise spec_error(path, f"name: {brief(name)} contains '..'")
    return name


def _overrides(raw: dict, path: str, sets: dict | None, data_root: str | None, cpu_only: bool) -> dict:
    """The spec's overrides, then --set, --data-root and --cpu-only: dotted keys applied to every trial."""
    overrides = raw.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise spec_error(path, f"overrides: expected a mapping of dotted keys, got {brief(overrides)}")
    for key, value in (sets or {}).items():
        if isinstance(key, str) and key.startswith("search."):
            raise spec_error(path, f"--set {key}={brief(value)}: the search's settings are keys of the spec, not of "
                                   "the config: use --samples N or --top-k K, or edit the spec's search block")
    overrides = {**overrides, **(sets or {})}
    if data_root:
        overrides["data.root"] = data_root
    if cpu_only:
        overrides["system.device"] = "cpu"
    return overrides


def _seeds(seeds: Any, path: str) -> list[int]:
    if not isinstance(seeds, list) or not seeds or not all(is_integer(s) for s in seeds):
        raise spec_error(path, f"seeds: {brief(seeds)}; allowed: a non-empty list of integers")
    if len(seeds) > MAX_SEEDS:
        raise spec_error(path, f"seeds: {len(seeds):,} of them; allowed: at most {MAX_SEEDS:,}")
    if len(set(seeds)) != len(seeds):
        raise spec_error(path, f"seeds: {brief(seeds)} repeat")
    return seeds


def _rescale(spec: Spec, search: bool, epochs: Any, path: str) -> None:
    """--epochs: every trial's epoch numbers scaled from the spec's run (a search's base now: its samples apply
    to the rescaled base; grid trials are rescaled one by one in Spec.trials)."""
    spec.rescale = int_in(epochs, path, "--epochs", hi=MAX_EPOCHS, allowed=up_to(MAX_EPOCHS))
    if search:
        try:
            spec.base = from_dict(scale_epochs(spec.base, epochs)).to_dict()
        except ConfigError as exc:
            raise spec_error(path, f"--epochs {epochs}: {exc}") from None


def _grid_rows(spec: Spec, grid: Any, rows: list[str] | None, epochs: Any, overrides: dict, path: str) -> None:
    """The grid's rows (those --rows names), their presets, and every row x seed validated before any compute."""
    spec.grid = _pick_rows(_grid(grid, path), rows, path)
    n = len(spec.grid) * len(spec.seeds)
    if n > MAX_TRIALS:
        raise spec_error(path, f"grid: {len(spec.grid):,} rows x {len(spec.seeds):,} seeds = {n:,} trials; allowed: "
                         f"at most {MAX_TRIALS:,} (a limit no real sweep comes near: split it into several sweeps)")
    for i, row in enumerate(spec.grid):
        if row.get("preset") and row["preset"] not in spec.bases:
            spec.bases[row["preset"]] = _base(row["preset"], epochs, overrides, path, f"grid[{i}].preset")
    spec.trials()


def _pick_rows(grid: list[dict], rows: list[str] | None, path: str) -> list[dict]:
    """The grid's rows named in `rows` (all when None); a name not in the grid is refused, listing the rows."""
    if rows is None:
        return grid
    names = [r["row"] for r in grid]
    unknown = [r for r in rows if r not in names]
    if not rows or unknown:
        raise spec_error(path, f"--rows: {brief(unknown or rows)} not rows of this grid; allowed: {', '.join(names)}")
    return [r for r in grid if r["row"] in rows]


def _base(pname: Any, epochs: Any, overrides: dict, path: str, where: str) -> dict:
    """preset -> epoch scaling -> overrides, validated: the nested config dict trials start from."""
    if not isinstance(pname, str):
        raise spec_error(path, f"{where}: {brief(pname)}; expected the name of an ssat preset")
    try:
        base = preset(pname)
    except KeyError as exc:
        raise spec_error(path, f"{where}: {exc.args[0]}") from None
    if epochs is not None:
        int_in(epochs, path, f"{where} {brief(pname)}: epochs", hi=MAX_EPOCHS, allowed=up_to(MAX_EPOCHS))
    try:
        if epochs is not None:
            if "optim.lr_milestones" in overrides:  # set explicitly: nothing to scale (or to collide)
                base["optim"]["lr_milestones"], base["optim"]["lr_factors"] = [], []
            base = scale_epochs(base, epochs)
        return from_dict(base, overrides).to_dict()
    except ConfigError as exc:
        raise spec_error(path, f"{where} {brief(pname)}: {exc}") from None


def _resources(res: Any, path: str, cpu_only: bool, gpu_share: float | None = None) -> dict:
    """resources, with --gpu-share (`gpu_share`) in place of resources.gpu when given."""
    if not isinstance(res, dict):
        raise spec_error(path, f"resources: expected a mapping like {{cpu: 1, gpu: 0.25}}, got {brief(res)}")
    check_keys(res, {"cpu", "gpu", "custom"}, path, "resources.")
    cpu, gpu = res.get("cpu", 1), res.get("gpu", 0) if gpu_share is None else gpu_share
    gpu_field = "resources.gpu" if gpu_share is None else "--gpu-share"
    custom = res.get("custom") or {}
    for name in custom if isinstance(custom, dict) else ():
        if isinstance(name, str):  # other keys are refused below
            text_of(name, path, "resources.custom")
    if not isinstance(custom, dict) or not all(
            isinstance(k, str) and k and is_number(v) and 0 < v < float("inf")
            for k, v in custom.items()):
        raise spec_error(path, f"resources.custom: {brief(custom)}; allowed: a mapping of Ray custom resource names to "
                         "amounts > 0 (e.g. {worker_node: 1} pins trials to nodes started with that resource)")
    if not is_number(cpu) or not 0 < cpu < float("inf"):
        raise spec_error(path, f"resources.cpu: {brief(cpu)}; allowed: a number > 0")
    if not is_number(gpu) or not 0 <= gpu <= 1:
        raise spec_error(path, f"{gpu_field}: {brief(gpu)}; allowed: a share of one GPU, 0 <= gpu <= 1 (0.25 = four "
                         "trials per GPU); a trial never spans several GPUs")
    return {"cpu": cpu, "gpu": 0 if cpu_only else gpu, **({"custom_resources": dict(custom)} if custom else {})}


def _metrics(raw: dict, path: str) -> tuple[list[str], list[str]]:
    metric, mode = raw.get("metric", "val/pgd10"), raw.get("mode", "max")
    metric = [metric] if isinstance(metric, str) else metric
    mode = [mode] if isinstance(mode, str) else mode
    if not isinstance(metric, list) or not 1 <= len(metric) <= 2 or not all(isinstance(m, str) for m in metric):
        raise spec_error(path, f"metric: {brief(raw.get('metric'))}; allowed: a metric name or a list of two")
    if not isinstance(mode, list) or len(mode) != len(metric) or any(m not in ("max", "min") for m in mode):
        raise spec_error(path, f"mode: {brief(raw.get('mode'))}; allowed: 'max' or 'min', one per metric")
    from .metrics import check_metric

    for m in metric:
        text_of(m, path, "metric")
        try:
            check_metric(m, "metric")
        except ValueError as exc:
            raise spec_error(path, str(exc)) from None
    return metric, mode


def _grid(grid: Any, path: str) -> list[dict]:
    if isinstance(grid, dict) and set(grid) == {"product"}:
        return _product(grid["product"], path)
    if not isinstance(grid, list) or not grid:
        raise spec_error(path, "grid: expected a non-empty list of rows ({row: LABEL, set: {dotted.key: value}}) "
                         "or {product: {dotted.key: [values]}}")
    rows, labels = [], set()
    for i, row in enumerate(grid):
        if not isinstance(row, dict):
            raise spec_error(path, f"grid[{i}]: expected a mapping with 'row' and 'set', got {brief(row)}")
        check_keys(row, {"row", "set", "preset"}, path, f"grid[{i}].")
        if row.get("preset") is not None and not isinstance(row["preset"], str):
            raise spec_error(path, f"grid[{i}].preset: {brief(row['preset'])}; expected the name of an ssat preset")
        label = text_of(str(row.get("row", i)), path, f"grid[{i}].row")
        if label in labels:
            raise spec_error(path, f"grid[{i}].row: {brief(label)} repeats")
        labels.add(label)
        sets = row.get("set") or {}
        if not isinstance(sets, dict):
            raise spec_error(path, f"grid[{i}].set: expected a mapping of dotted keys, got {brief(sets)}")
        rows.append({"row": label, "set": sets, "preset": row.get("preset")})
    return rows


def _product(prod: Any, path: str) -> list[dict]:
    import itertools

    if (not isinstance(prod, dict) or not prod or not all(isinstance(v, list) and v for v in prod.values())
            or not all(isinstance(k, str) for k in prod)):
        raise spec_error(path, f"grid.product: {brief(prod)}; expected {{dotted.key: [values, ...]}}")
    n = math.prod(len(v) for v in prod.values())
    if n > MAX_TRIALS:  # before the rows are made
        raise spec_error(path, f"grid.product: {n:,} combinations; allowed: at most {MAX_TRIALS:,} rows (a limit no "
                         "real sweep comes near)")
    keys = list(prod)
    rows = []
    for combo in itertools.product(*(prod[k] for k in keys)):
        sets = dict(zip(keys, combo))
        rows.append({"row": ",".join(f"{k.split('.')[-1]}={v}" for k, v in sets.items()), "set": sets})
    return rows

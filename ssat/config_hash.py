"""config_hash: the 12 hex characters that name what a config trains, and the tables that keep old keys valid.

A run's key (tracking, teachers, checkpoints' resume checks) is this hash. What does not change what is trained is
left out: where things are and what runs them (LOCATION_FIELDS), how fast (PERF_FIELDS), and fields added after runs
were tracked while they hold the value that reproduces the code before them (HASH_NEUTRAL, HASHED_ONLY_WHERE), so
that every key made before them stays (tests/unit/ssat/test_presets_hashes.py).
"""
from __future__ import annotations

import hashlib
import json

LOCATION_FIELDS = (("data", "root"), ("data", "teacher_dir"), ("system", "device"), ("system", "threads"),
                   ("system", "cuda_memory_fraction"), ("system", "compile_cache"))
# Fields added after runs were tracked, left out of config_hash while they hold the value that reproduces the
# code before them: every run tracked so far keeps its key (tests/unit/ssat/test_presets_hashes.py).
HASH_NEUTRAL = {("data", "labeled_sampling"): "random", ("method", "awr_forwards"): "single",
                ("attack", "inner_target"): "soft", ("optim", "lr_decay_after_milestone"): False,
                ("optim", "swa_bn"): "recompute", ("method", "pgd_forward"): "always", ("eval", "tf32"): False,
                ("eval", "select_by"): "pgd10"}
# Hash-neutral fields that change what is trained only under a condition: left out of the hash elsewhere, so the
# keys of the configurations they cannot change stay (pgd_forward acts only where x_pgd's KL term has weight 0).
HASHED_ONLY_WHERE = {("method", "pgd_forward"): lambda cfg: cfg.method.interpolate and cfg.method.beta == 1}
# Performance switches and evaluation-only choices, hashed as the value given here whatever they hold (they were
# hashed with that value before they were declared so: every key made then stays); None: not hashed at all.
PERF_FIELDS = {("system", "compile"): "off", ("system", "graph_mode"): None, ("system", "cudnn_benchmark"): None,
               ("system", "fused_forward"): None, ("system", "fold_bn"): None,
               ("eval", "autoattack_checkpoints"): ["best", "last"]}


def config_hash(cfg, exclude_seed: bool = True) -> str:
    """12 hex chars identifying what `cfg` (an ssat.config.Config) trains. Locations and resources (data.root,
    data.teacher_dir, system.device/threads/cuda_memory_fraction/compile_cache) and performance switches
    (PERF_FIELDS: compile, graph mode, cuDNN autotuning, fused forwards, folded BatchNorm) are left out: moving the
    data, changing a GPU share or speeding the step up does not make another experiment."""
    d = cfg.to_dict()
    if exclude_seed:
        d.pop("seed")
    for section, key in LOCATION_FIELDS:
        d[section].pop(key)
    for (section, key), neutral in HASH_NEUTRAL.items():
        if d[section][key] == neutral or not HASHED_ONLY_WHERE.get((section, key), lambda c: True)(cfg):
            d[section].pop(key)
    for (section, key), hashed_as in PERF_FIELDS.items():  # how fast, not what is trained
        if hashed_as is None:
            d[section].pop(key)
        else:
            d[section][key] = hashed_as
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

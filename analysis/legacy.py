"""What older stores recorded otherwise, read as today's run record: the one module of analysis that knows them.

Each entry says which runs it keeps readable and since when; it describes stores that exist, so it is frozen and
never follows the code of today (tests/data/store-before-issue27 is such a store). analysis.collect.current_record
applies it to every run it reads (with `legacy_spec_params` there, which needs the reader's own helpers), the label
maps back analysis.table_specs' labels; nothing else reads an old record.
"""
from __future__ import annotations

from types import MappingProxyType

# Runs recorded before issue 27 name their parameters briefly; since then they carry the config's dotted names (the
# names a spec and --set use). Old name -> new name, frozen: it describes stores that exist, never the code of today.
# Teacher runs had dataset, split_seed and model too (now data.dataset, data.split_seed, model.name).
LEGACY_PARAM_NAMES = MappingProxyType({
    "method": "method.name", "schedule": "attack.schedule", "t": "attack.t", "gamma": "attack.gamma",
    "eps": "attack.eps", "rho0": "method.rho0", "rho_double_epoch": "method.rho_double_epoch",
    "beta": "method.beta", "tau": "method.tau", "K": "method.K", "lambda": "method.lam",
    "interpolate": "method.interpolate", "split_seed": "data.split_seed", "dataset": "data.dataset",
    "model": "model.name", "precision": "system.precision", "epochs": "optim.epochs",
    "swa_start": "optim.swa_start",
})  # `seed` kept its name


# The labels of runs recorded before issue 27, which carry no label tags: the methods' and schedules' labels
# as the tables printed them then (the registry entries' labels since). Frozen: never extend it for a new method
# or schedule - give its registry entry a label, and its runs record it.
LEGACY_METHOD_LABELS = MappingProxyType({
    "ssat-mbi": "SSAT-MBI", "rst": "RST", "uat++": "UAT++", "trades": "TRADES", "srst-awr": "SRST-AWR",
    "ssat-mbi-awr": "SSAT-MBI-AWR"})
LEGACY_SCHEDULE_LABELS = MappingProxyType({   # name -> {tag field: label}
    "const": MappingProxyType({"label": "none", "title": "Const", "row": "Const"}),
    "linear": MappingProxyType({"label": "Lin.", "title": "Linear", "row": "Linear-{t}"}),
    "curious": MappingProxyType({"label": "Cur.", "title": "Curious", "row": "Curious-({gamma},{t})"})})


def current_param_names(rec: dict) -> dict:
    """A run record with every parameter under today's name: a ``param.<old>`` of `LEGACY_PARAM_NAMES` becomes
    ``param.<new>`` unless the record has the new one already (a record of today is returned as it is)."""
    old = [k for k in LEGACY_PARAM_NAMES if f"param.{k}" in rec and f"param.{LEGACY_PARAM_NAMES[k]}" not in rec]
    if not old:
        return rec
    out = {k: v for k, v in rec.items() if not (k.startswith("param.") and k[6:] in old)}
    out.update({f"param.{LEGACY_PARAM_NAMES[k]}": rec[f"param.{k}"] for k in old})
    return out


# Trial runs logged before the run record carried spec.epochs and spec.t (analysis.collect.legacy_spec_params infers
# them): the paper's schedule lengths t, of its training length.
PAPER_T = (50, 60, 70)

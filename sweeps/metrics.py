"""The names of the metrics a trial reports (docs/tracking.md), as a closed list: what a spec's `metric` may name.

A search ranks its trials by the metric of their last report, and early stopping compares them by it at each rung:
a name the trainer never reports would fail the search only after its first epoch. So a spec's metric is checked
against this list before anything starts, with the nearest name when it is a typo.
"""
from __future__ import annotations

import difflib

from ssat.messages import brief

# Per epoch (step = epoch): the method's objective and its terms (ssat/losses.py: every method's), validation
# (on the epochs that validate), the schedules, the adversarial examples' statistics and the step's speed.
TRAIN_TERMS = ("loss", "ce", "kl_adv", "kl_pgd", "kd", "w_adv", "w_pgd")
EPOCH = (*(f"train/{t}" for t in TRAIN_TERMS), "val/clean", "val/pgd10", "val/best_pgd10", "sched/eps_max",
         "sched/rho", "sched/lr", "adv/pgd_linf_max", "adv/adv_linf_mean", "adv/alpha_mean", "adv/alpha_min_share",
         "adv/alpha_one_share", "perf/epoch_seconds", "perf/images_per_s", "perf/graph_steps")
# Once, with the last epoch's report: the test set on the best and last checkpoints, and the training time.
FINAL = (*(f"test/{ckpt}/{attack}" for ckpt in ("best", "last")
           for attack in ("clean", "pgd10", "pgd20", "pgd40", "autoattack")), "time/total_hours", "time/epochs")
METRICS = EPOCH + FINAL


def check_metric(name: str, where: str) -> str:
    """`name` when the trainer reports it; else a ValueError naming `where`, the nearest name and a few others."""
    if name in METRICS:
        return name
    near = difflib.get_close_matches(name, METRICS)  # best first
    hint = f"; did you mean {near[0]!r}?" if near else "."
    raise ValueError(f"{where}: {brief(name)} is not a metric the trainer reports{hint} Allowed: the per-epoch "
                     "val/clean, val/pgd10, val/best_pgd10, train/loss (and the other train/, sched/, adv/, perf/ "
                     "names of docs/tracking.md), or test/<best|last>/<clean|pgd10|pgd20|pgd40|autoattack> of the "
                     "last epoch")

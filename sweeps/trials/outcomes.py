"""What a stage's trials reached, judged against the spec, and what a search passes on to its confirm stage.

Results are read through Ray's public ResultGrid / Result API: a trial is finished only when it reported its last
epoch (with the test protocol), a search trial may also have been stopped early by the scheduler, and anything
else was cut short. The confirm stage re-runs the search's best configurations that ran their full epochs: top-k
by the metric, or with two metrics the Pareto front thinned by crowding distance (NSGA-II's).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..spec import Spec
from .trial_settings import resolve_trial


@dataclass
class TrialOutcome:
    key: str             # the trial's run key (docs/tracking.md)
    state: str           # finished | stopped_early | failed | error | interrupted
    last_epoch: int      # the last epoch it reported (0: none)
    epochs: int          # the epochs its config asks for
    sampled: dict        # the searched parameters (search trials)
    metrics: dict        # its last report
    reason: str = ""
    name: str = ""       # its one name (sweeps.tracking.run_records.trial_name)
    label: str = ""      # its configuration's label, the same for every seed
    rank: int | None = None  # a confirm trial's rank in the search


@dataclass
class StageOutcome:
    stage: str
    expected: int
    trials: list[TrialOutcome] = field(default_factory=list)

    def _in(self, *states: str) -> list[TrialOutcome]:
        return [t for t in self.trials if t.state in states]

    @property
    def finished(self) -> list[TrialOutcome]:
        return self._in("finished")

    @property
    def interrupted(self) -> list[TrialOutcome]:
        return self._in("interrupted")

    @property
    def done(self) -> int:
        return len(self.finished)

    @property
    def stopped_early(self) -> int:
        return len(self._in("stopped_early"))

    @property
    def complete(self) -> bool:
        """Grid/confirm: every trial the spec asked for finished. Search: every sample ended on its own
        (finished, stopped early, or failed: the search can still rank the others)."""
        if len(self.trials) != self.expected or self.interrupted:
            return False
        return self.stage == "search" or self.done == self.expected

    @property
    def problems(self) -> list[str]:
        out = [f"{t.key}: {t.state}{': ' + t.reason if t.reason else ''} (epoch {t.last_epoch}/{t.epochs})"
               for t in self.trials if t.state not in ("finished", "stopped_early")]
        if len(self.trials) < self.expected:
            out.append(f"{self.expected - len(self.trials)} trial(s) never started")
        return out


def trial_outcome(config: dict, metrics: dict, error, interrupted: bool, stage: str) -> TrialOutcome:
    """Judge one trial by its config and last report, never by Tune's status: Tune marks trials it stopped
    on Ctrl+C as TERMINATED like finished ones."""
    cfg, meta = resolve_trial(config)
    last = int(metrics.get("epoch") or 0)
    epochs = cfg.optim.epochs
    if error is not None:
        state, reason = "error", str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
    elif "failed_reason" in metrics:
        state, reason = "failed", metrics["failed_reason"]
    elif last >= epochs and "time/epochs" in metrics:
        state, reason = "finished", ""
    elif interrupted:
        state, reason = "interrupted", "Ctrl+C"
    elif stage == "search" and meta.get("scheduler") and last >= 1:
        state, reason = "stopped_early", f"{meta['scheduler']} at epoch {last}"
    else:
        state, reason = "interrupted", "ended before its last epoch"
    rec = meta["record"]
    return TrialOutcome(meta["trial_key"], state, last, epochs, meta["sampled"], metrics, reason, rec.name,
                        rec.tags["ssat.label"], (meta.get("confirms") or {}).get("rank"))


def stage_outcome(results, stage: str, expected: int, interrupted: bool) -> StageOutcome:
    """Every trial of a stage's ResultGrid, judged against the spec."""
    out = StageOutcome(stage, expected)
    for r in results:
        out.trials.append(trial_outcome(r.config, r.metrics or {}, r.error, interrupted, stage))
    return out


def top_configs(finished: list[TrialOutcome], spec: Spec) -> list[dict]:
    """Sampled configurations to confirm, from trials that ran their full epochs only (never a partial run):
    top-k by the metric, or Pareto-front members thinned by crowding distance."""
    rows, seen = [], set()
    for t in finished:
        vals = [t.metrics.get(m) for m in spec.metric]
        if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in vals):
            continue
        key = json.dumps(t.sampled, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        rows.append(([v if mode == "max" else -v for v, mode in zip(vals, spec.mode)], t.sampled, t.name))
    k = spec.search["confirm"]["top_k"]
    if not spec.multi_objective:
        rows.sort(key=lambda r: (-r[0][0], r[2]))  # ties by name, as the printed ranking (sweeps.trials.ranking)
        return [s for _, s, _ in rows[:k]]
    front = pareto_front([r[0] for r in rows])
    keep = crowding_thin([rows[i][0] for i in front], k)
    return [rows[front[i]][1] for i in keep]


# ---- the Pareto front (every objective maximised) -------------------------------------------------------
def pareto_front(points: list[list[float]]) -> list[int]:
    """Indices of the non-dominated points (every objective maximised)."""
    def dominates(a, b):
        return all(x >= y for x, y in zip(a, b)) and any(x > y for x, y in zip(a, b))

    return [i for i, p in enumerate(points) if not any(dominates(q, p) for j, q in enumerate(points) if j != i)]


def crowding_distance(points: list[list[float]]) -> list[float]:
    n = len(points)
    dist = [0.0] * n
    if n <= 2:
        return [float("inf")] * n
    for m in range(len(points[0])):
        order = sorted(range(n), key=lambda i: points[i][m])
        lo, hi = points[order[0]][m], points[order[-1]][m]
        dist[order[0]] = dist[order[-1]] = float("inf")
        if hi == lo:
            continue
        for a, i, b in zip(order, order[1:], order[2:]):
            dist[i] += (points[b][m] - points[a][m]) / (hi - lo)
    return dist


def crowding_thin(points: list[list[float]], k: int) -> list[int]:
    """Keep the k points of a front that spread it best: repeatedly drop the most crowded one."""
    keep = list(range(len(points)))
    while len(keep) > k:
        d = crowding_distance([points[i] for i in keep])
        keep.pop(min(range(len(keep)), key=lambda j: d[j]))
    return keep

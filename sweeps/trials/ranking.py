"""Which settings won, said on the console: the search's ranking, the confirm stage's means over seeds, the winner.

    [search] the top 5 of 12 trials by val/pgd10 (max, at their last epoch):
      rank  val/pgd10  trial
         1      71.20  linear t=3 rho0=0.12 beta=0.94 tau=1.5 s0 #4e14   -> confirmed
    [confirm] 2 configurations, each over seeds 10, 11 (mean ± sample std); test: the best checkpoint
      val/pgd10       test clean      test pgd20      configuration
      70.10 ± 0.50    88.20 ± 0.30    66.10 ± 0.40    top1 linear t=3 rho0=0.12 beta=0.94 tau=1.5 #4e14
    [winner] top1 linear t=3 ... #4e14: val/pgd10 70.10 ± 0.50 over 2 seeds, ahead of top2 by 1.20 points
             (Welch's t-test p = 0.21: not significant at 0.05)

Every value is a trial's last report, which is what its MLflow run holds as the metric's latest value: the
console and the store agree. A search trial stopped early by ASHA ran fewer epochs and is not ranked (its value
does not compare).
"""
from __future__ import annotations

import math

from .outcomes import StageOutcome, TrialOutcome, pareto_front

TOP = 5
ALPHA = 0.05
TEST = ("test/best/clean", "test/best/pgd20")


def _num(t: TrialOutcome, metric: str) -> float | None:
    v = t.metrics.get(metric)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def fmt(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.2f}"


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; NaN for one value)."""
    n = len(values)
    if not n:
        return math.nan, math.nan
    m = sum(values) / n
    return m, (math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan)


def _ms(values: list[float]) -> str:
    m, s = mean_std(values)
    return "-" if math.isnan(m) else f"{m:.2f}" + ("" if math.isnan(s) else f" ± {s:.2f}")


def ranked(trials: list[TrialOutcome], metric: str, mode: str) -> list[TrialOutcome]:
    """Trials with a value of `metric`, best first, ties by name (as `status` orders them)."""
    have = [t for t in trials if _num(t, metric) is not None]
    return sorted(have, key=lambda t: (-_num(t, metric) if mode == "max" else _num(t, metric), t.name))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Aligned columns: every one right-aligned (numbers) but the last, left as it is (a name)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    def line(r):
        return "  " + "  ".join([*(c.rjust(w) for c, w in zip(r, widths)), r[-1]]).rstrip()
    return [line(header), *map(line, rows)]


def search_ranking(out: StageOutcome, spec, confirmed: list[dict] | None = None, top: int = TOP) -> list[str]:
    """The search's best trials by the spec's metric (two metrics: its Pareto front), those the confirm stage
    re-runs marked."""
    chosen = confirmed or []
    finished, early = out.finished, out.stopped_early
    note = f"; {early} stopped early by the scheduler are not ranked" if early else ""
    if not finished:
        return [f"[search] no trial ran its full epochs: nothing to rank{note}"]
    mark = lambda t: "-> confirmed" if t.sampled in chosen else ""  # noqa: E731
    if not spec.multi_objective:
        metric, mode = spec.metric[0], spec.mode[0]
        best = ranked(finished, metric, mode)[:top]
        head = (f"[search] the top {len(best)} of {len(out.trials)} trials by {metric} ({mode}, at their last "
                f"epoch){note}:")
        rows = [[str(i), fmt(_num(t, metric)), f"{t.name}  {mark(t)}"] for i, t in enumerate(best, 1)]
        return [head, *_table(["rank", metric, "trial"], rows)]
    points = [[_num(t, m) if mo == "max" else -_num(t, m) for m, mo in zip(spec.metric, spec.mode)]
              for t in finished if all(_num(t, m) is not None for m in spec.metric)]
    valued = [t for t in finished if all(_num(t, m) is not None for m in spec.metric)]
    front = ranked([valued[i] for i in pareto_front(points)], spec.metric[0], spec.mode[0])
    head = (f"[search] the Pareto front of {' and '.join(f'{m} ({mo})' for m, mo in zip(spec.metric, spec.mode))}: "
            f"{len(front)} of {len(out.trials)} trials{note}:")
    rows = [[*(fmt(_num(t, m)) for m in spec.metric), f"{t.name}  {mark(t)}"] for t in front]
    return [head, *_table([*spec.metric, "trial"], rows)]


def confirmed_configs(out: StageOutcome, spec) -> list[tuple[int, str, list[TrialOutcome]]]:
    """(rank in the search, label, its finished trials) per confirmed configuration, best confirmed mean first."""
    groups: dict[int, list[TrialOutcome]] = {}
    labels: dict[int, str] = {}
    for t in out.trials:
        labels.setdefault(t.rank or 0, t.label)
        if t.state == "finished":
            groups.setdefault(t.rank or 0, []).append(t)
    metric, mode = spec.metric[0], spec.mode[0]

    def key(rank):
        m, _ = mean_std([v for v in (_num(t, metric) for t in groups.get(rank, [])) if v is not None])
        return (math.isnan(m), -m if mode == "max" else m, rank)
    return [(r, labels[r], groups.get(r, [])) for r in sorted(labels, key=key)]


def confirm_summary(out: StageOutcome, spec) -> list[str]:
    """Each confirmed configuration's mean ± std over its seeds, then the winner and how sure that is."""
    seeds = spec.search["confirm"]["seeds"]
    configs = confirmed_configs(out, spec)
    cols = [*spec.metric, *(m for m in TEST if m not in spec.metric)]
    rows = []
    for rank, label, trials in configs:
        vals = [_ms([v for v in (_num(t, m) for t in trials) if v is not None]) for m in cols]
        rows.append([*vals, f"top{rank} {label}" + (f"  ({len(trials)} of {len(seeds)} seeds finished)"
                                                    if len(trials) < len(seeds) else "")])
    lines = [f"[confirm] {len(configs)} configuration(s), each over seeds {', '.join(map(str, seeds))} (mean ± "
             "sample std); test: the best checkpoint",
             *_table([*(m.replace("test/best/", "test ") for m in cols), "configuration"], rows)]
    return lines + winner_lines(configs, spec)


def winner_lines(configs: list[tuple[int, str, list[TrialOutcome]]], spec) -> list[str]:
    metric = spec.metric[0]
    values = [[v for v in (_num(t, metric) for t in trials) if v is not None] for _, _, trials in configs]
    if not configs or not values[0]:
        return ["[winner] none: no confirm trial finished"]
    rank, label, _ = configs[0]
    m, s = mean_std(values[0])
    text = f"[winner] top{rank} {label}: {metric} {_ms(values[0])} over {len(values[0])} seed(s)"
    if spec.multi_objective:
        text += f" (ranked by the first of {', '.join(spec.metric)}; the others are in the table above)"
    if len(configs) > 1 and values[1]:
        gap = abs(m - mean_std(values[1])[0])
        p = welch_p(values[0], values[1])
        verdict = (f"Welch's t-test p = {p:.2g}: {'' if p < ALPHA else 'not '}significant at {ALPHA}" if p is not None
                   else "Welch's t-test undefined: " + ("fewer than 2 seeds on a side" if min(map(len, values[:2])) < 2
                                                         else "no spread over seeds"))
        text += f", ahead of top{configs[1][0]} by {gap:.2f} points ({verdict})"
    return [text]


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided p of Welch's t-test (unequal variances), as the tables test a row against its baseline; None when
    it is undefined (fewer than two values on a side, or no spread)."""
    import warnings

    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "precision loss" for seeds that agree to the last digit: p is still read
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return None if math.isnan(p) else p

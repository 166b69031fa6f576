"""What the paper says of each of its tables and figures, checked against a table regenerated from our runs.

A claim is data (`Claim`: its table, the claim in our words, a check and its arguments); `evaluate(result)` turns
the claims about a built table (`analysis.cells.TableResult`) into one `Verdict` per column group: HOLDS, FAILS
("does not hold") or UNMEASURABLE ("not measurable"), with the evidence: each comparison's means, sample stds
(ddof 1), seeds and Welch's p. `unmeasured(table, why)`: the claims of a table that was not built.

The checks, each stated in the verdict it gives:
* compare: each listed difference (row A above or below row B in a column) has the claimed sign and Welch's t-test
  (`analysis.cells.welch_p`, two-sided, the tables' ‡) gives p < alpha (0.05); the right sign with p >= alpha fails
  ("not significant"): a claim holds when the numbers show it.
* trend: Spearman's rank correlation of the means with the swept values >= TREND_MIN (<= -TREND_MIN for a fall),
  and the largest value's cell above (below) the smallest one's, as a compare.
* best: the row's mean above every other row's, and above the runner-up as a compare.
* overhead: the ratio of the rows' mean times at most the limit (the paper's ratios: 1.05-1.09); Welch's p of the
  row against the limit times the other is given as evidence.
* across: each cell of a column group above the same cell of its counterpart group (Fig. 5: Curious over Const).
Not measurable: a row, column or counterpart group without results, fewer than two seeds on a side of a Welch test
(AutoAttack run on one seed), fewer than three values for a trend. A claim fails when any measurable comparison
fails, else it is not measurable when any comparison is, else it holds.
"""
from __future__ import annotations

import math
import re
import warnings
from dataclasses import asdict, dataclass, field

from scipy import stats

from .cells import TableResult, welch_p
from .markdown import md_align, md_row
from .paper import group_title

TREND_MIN = 0.8
OVERHEAD_LIMIT = 1.10
HOLDS, FAILS, UNMEASURABLE = "holds", "does not hold", "not measurable"
# a comparison's status
AS_CLAIMED, NOT_SIGNIFICANT, AGAINST, MISSING = "as claimed", "not significant", "against the claim", "not measurable"


@dataclass(frozen=True)
class Claim:
    key: str
    about: str          # where the paper says it: 'Table 2', 'Fig. 5'
    table: str          # the analysis.table_specs table it is checked on
    text: str           # the claim, in our words
    check: str          # a key of CHECKS
    args: tuple         # the check's arguments (see each check)
    groups: str = ""    # a regular expression the column groups it speaks of match ('': every group)


def _pairs(pairs, columns, claimed="above") -> tuple:
    """compare's arguments: (row, other row, column key, 'above' | 'below') for each pair and column."""
    return tuple((row, other, col, claimed) for row, other in pairs for col in columns)


PGD = ("pgd10", "pgd20", "pgd40")
SCHEDULES = ("none", "Lin.", "Cur.")
LINEAR = ("Linear-50", "Linear-60", "Linear-70")
CURIOUS = ("Curious-(1.25,50)", "Curious-(1.25,60)", "Curious-(1.25,70)")
CURIOUS15 = ("Curious-(1.5,50)", "Curious-(1.5,60)", "Curious-(1.5,70)")
INTERPOLATION = tuple((f"{s}|int", f"{s}|no-int") for s in SCHEDULES)

CLAIMS = (
    Claim("table1-pgd-rst", "Table 1", "main", "SSAT-MBI is more robust than RST under PGD-10, PGD-20 and PGD-40",
          "compare", _pairs([("SSAT-MBI", "RST")], PGD)),
    Claim("table1-autoattack-rst", "Table 1", "main", "SSAT-MBI is more robust than RST under AutoAttack",
          "compare", _pairs([("SSAT-MBI", "RST")], ["autoattack"])),
    Claim("table1-pgd-uat", "Table 1", "main", "SSAT-MBI is more robust than UAT++ under PGD-10, PGD-20 and PGD-40",
          "compare", _pairs([("SSAT-MBI", "UAT++")], PGD)),
    Claim("table1-autoattack-uat", "Table 1", "main", "SSAT-MBI is more robust than UAT++ under AutoAttack",
          "compare", _pairs([("SSAT-MBI", "UAT++")], ["autoattack"])),
    Claim("table1-awr-pgd", "Table 1", "main", "SSAT-MBI-AWR is more robust than SRST-AWR under PGD-10, PGD-20 and "
          "PGD-40", "compare", _pairs([("SSAT-MBI-AWR", "SRST-AWR")], PGD)),
    Claim("table1-awr-autoattack", "Table 1", "main", "SSAT-MBI-AWR is more robust than SRST-AWR under AutoAttack",
          "compare", _pairs([("SSAT-MBI-AWR", "SRST-AWR")], ["autoattack"])),
    Claim("table2-interpolation", "Table 2", "ablation", "Interpolated adversarial examples raise PGD-20 accuracy "
          "under every global schedule (none, Linear, Curious)", "compare", _pairs(INTERPOLATION, ["pgd20"])),
    Claim("table2-linear", "Table 2", "ablation", "With interpolation, Linear raises clean and PGD-20 accuracy over "
          "no schedule", "compare", _pairs([("Lin.|int", "none|int")], ["clean", "pgd20"])),
    Claim("table2-linear-autoattack", "Table 2", "ablation", "With interpolation, Linear lowers AutoAttack accuracy "
          "below no schedule's", "compare", _pairs([("Lin.|int", "none|int")], ["autoattack"], "below")),
    Claim("table2-curious", "Table 2", "ablation", "With interpolation, Curious raises clean, PGD-20 and AutoAttack "
          "accuracy over no schedule", "compare", _pairs([("Cur.|int", "none|int")], ["clean", "pgd20", "autoattack"])),
    Claim("table3-linear", "Table 3", "schedules", "Each Linear-t (t = 50, 60, 70) raises clean and PGD-20 accuracy "
          "over Const", "compare", _pairs([(r, "Const") for r in LINEAR], ["clean", "pgd20"])),
    Claim("table3-linear-autoattack", "Table 3", "schedules", "Each Linear-t lowers AutoAttack accuracy below Const's",
          "compare", _pairs([(r, "Const") for r in LINEAR], ["autoattack"], "below")),
    Claim("table3-curious", "Table 3", "schedules", "Each Curious-(1.25,t) raises PGD-20 and AutoAttack accuracy over "
          "Const", "compare", _pairs([(r, "Const") for r in CURIOUS], ["pgd20", "autoattack"])),
    Claim("table3-curious-70", "Table 3", "schedules", "Of the Curious-(1.25,t), t = 70 has the highest PGD-20 and "
          "AutoAttack accuracy", "best", ("Curious-(1.25,70)", ("pgd20", "autoattack"), CURIOUS)),
    Claim("table3-curious-clean", "Table 3", "schedules", "Curious-(1.25,t) has lower clean accuracy than Linear-t "
          "but higher than Const", "compare", _pairs(zip(CURIOUS, LINEAR), ["clean"], "below")
          + _pairs([(r, "Const") for r in CURIOUS], ["clean"])),
    Claim("table3-gamma", "Table 3", "schedules", "Raising gamma to 1.5 lowers clean accuracy: Curious-(1.5,t) below "
          "Curious-(1.25,t)", "compare", _pairs(zip(CURIOUS15, CURIOUS), ["clean"], "below")),
    Claim("table4-interpolation", "Table 4", "awr-ablation", "In SSAT-MBI-AWR, interpolated adversarial examples raise "
          "clean, PGD-20 and AutoAttack accuracy under every global schedule", "compare",
          _pairs(INTERPOLATION, ["clean", "pgd20", "autoattack"])),
    Claim("table4-linear", "Table 4", "awr-ablation", "In SSAT-MBI-AWR with interpolation, Linear raises clean, PGD-20 "
          "and AutoAttack accuracy over no schedule", "compare",
          _pairs([("Lin.|int", "none|int")], ["clean", "pgd20", "autoattack"])),
    Claim("table4-curious-autoattack", "Table 4", "awr-ablation", "In SSAT-MBI-AWR with interpolation, Curious raises "
          "AutoAttack accuracy over Linear", "compare", _pairs([("Cur.|int", "Lin.|int")], ["autoattack"])),
    Claim("table4-curious-tradeoff", "Table 4", "awr-ablation", "In SSAT-MBI-AWR with interpolation, Curious has lower "
          "clean and PGD-20 accuracy than Linear", "compare",
          _pairs([("Cur.|int", "Lin.|int")], ["clean", "pgd20"], "below")),
    Claim("table5-overhead", "Table 5", "training-time", "Interpolation costs little: SSAT-MBI's training time per "
          f"epoch is at most {OVERHEAD_LIMIT:g} x RST's (the paper: 1.06 on CIFAR-10)", "overhead",
          ("SSAT-MBI", "RST", "min_per_epoch", OVERHEAD_LIMIT)),
    Claim("table5-awr-overhead", "Table 5", "training-time", "SSAT-MBI-AWR's training time per epoch is at most "
          f"{OVERHEAD_LIMIT:g} x SRST-AWR's (the paper: 1.08 on CIFAR-10)", "overhead",
          ("SSAT-MBI-AWR", "SRST-AWR", "min_per_epoch", OVERHEAD_LIMIT)),
    Claim("tables6-7-robustness", "Tables 6-7", "supervised", "With full labels, TRADES+Ours is more robust than "
          "TRADES under PGD-20 and AutoAttack", "compare",
          _pairs([("TRADES+Ours", "TRADES")], ["pgd20", "autoattack"])),
    Claim("tables6-7-clean", "Tables 6-7", "supervised", "With full labels, TRADES+Ours has higher clean accuracy than "
          "TRADES", "compare", _pairs([("TRADES+Ours", "TRADES")], ["clean"])),
    Claim("fig4-clean", "Fig. 4", "beta-sensitivity", "A larger beta raises clean accuracy", "trend",
          (("clean", "up"),)),
    Claim("fig4-pgd20", "Fig. 4", "beta-sensitivity", "A larger beta raises PGD-20 accuracy", "trend",
          (("pgd20", "up"),)),
    Claim("fig4-autoattack", "Fig. 4", "beta-sensitivity", "AutoAttack accuracy is highest at beta = 0.4", "best",
          ("beta=0.4", ("autoattack",), ())),
    Claim("fig5-autoattack", "Fig. 5", "rho-sensitivity", "At beta = 1 a larger initial rho raises AutoAttack accuracy",
          "trend", (("autoattack", "up"),), groups=r" beta=1,"),
    Claim("fig5-clean-pgd20", "Fig. 5", "rho-sensitivity", "At beta = 1 a larger initial rho lowers clean and PGD-20 "
          "accuracy", "trend", (("clean", "down"), ("pgd20", "down")), groups=r" beta=1,"),
    Claim("fig5-beta04", "Fig. 5", "rho-sensitivity", "At beta = 0.4, PGD-20 and AutoAttack accuracy are highest at "
          "initial rho 0.05", "best", ("rho0=0.05", ("pgd20", "autoattack"), ()), groups=r" beta=0\.4,"),
    Claim("fig5-curious", "Fig. 5", "rho-sensitivity", "At the same beta and initial rho, Curious-(1.25,70) gives "
          "higher clean, PGD-20 and AutoAttack accuracy than Const", "across",
          (", Curious", ", Const", ("clean", "pgd20", "autoattack")), groups=r", Curious$"),
)


# ---- evidence --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stats:
    """One cell: the row it is, its mean, sample std (ddof 1), values and whether any is on a test subset."""
    row: str
    mean: float
    std: float
    n: int
    values: tuple
    subset: bool = False


@dataclass(frozen=True)
class Comparison:
    """One difference a claim asserts: `a` (row) `claimed` ('above' / 'below' / 'at most L x') `b` (other)."""
    column: str
    row: str
    other: str
    claimed: str
    a: Stats | None
    b: Stats | None
    p: float = math.nan
    status: str = MISSING
    why: str = ""


@dataclass
class Verdict:
    claim: Claim
    group: str | None
    verdict: str
    text: str
    comparisons: list = field(default_factory=list)


def cell_stats(result: TableResult, group: str, row: str, column: str) -> Stats | None:
    """The cell of (group, row, column) with at least one result, else None."""
    c = result.cells
    hit = c[(c["group"] == group) & (c["row"] == row) & (c["column"] == column) & (c["n"] > 0)]
    if hit.empty:
        return None
    line = hit.iloc[0]
    values = tuple(map(float, line["values"]))
    return Stats(line["row"], float(line["mean"]), float(line["std"]), len(values), values, bool(line["subset"]))


def _label(result: TableResult, column: str) -> str | None:
    """The column's label when the table shows it (a column no run fills is left out of it), else None."""
    return next((c.label for c in result.columns if c.key == column), None)


def _spec_label(result: TableResult, column: str) -> str:
    return next((c.label for c in result.spec.columns if c.key == column), column)


def _missing_column(result: TableResult, column: str, row: str, other: str, claimed: str) -> Comparison:
    label = _spec_label(result, column)
    return Comparison(label, row, other, claimed, None, None, why=f"no {label} column: no run reports it")


def compare_stats(label: str, a: Stats | None, b: Stats | None, claimed: str, alpha: float, row: str,
                  other: str) -> Comparison:
    """`a` (named `row`) claimed above (below) `b` (named `other`): as claimed when the sign is right and Welch's
    p < alpha; not measurable when either is missing or has fewer than two seeds."""
    absent = [name for name, s in ((row, a), (other, b)) if s is None]
    if absent:
        return Comparison(label, row, other, claimed, a, b, why=f"no {label} result for {' and '.join(absent)}")
    few = [s for s in (a, b) if s.n < 2]
    if few:
        return Comparison(label, row, other, claimed, a, b, why=f"{label} of {few[0].row} on {few[0].n} seed: "
                          "Welch's test needs 2 a side")
    p = welch_p(a.values, b.values)
    ahead = a.mean - b.mean if claimed == "above" else b.mean - a.mean
    if not ahead > 0:
        return Comparison(label, row, other, claimed, a, b, p, AGAINST)
    return Comparison(label, row, other, claimed, a, b, p, AS_CLAIMED if p < alpha else NOT_SIGNIFICANT)


# ---- the checks: (result, group, args, alpha) -> comparisons ---------------------------------
def check_compare(result: TableResult, group: str, args, alpha: float) -> list[Comparison]:
    """args: (row, other row, column key, 'above' | 'below') per difference."""
    out = []
    for row, other, column, claimed in args:
        label = _label(result, column)
        if label is None:
            out.append(_missing_column(result, column, row, other, claimed))
            continue
        a, b = cell_stats(result, group, row, column), cell_stats(result, group, other, column)
        out.append(compare_stats(label, a, b, claimed, alpha, row, other))
    return out


def _swept(result: TableResult, group: str, column: str) -> list[tuple[float, Stats]]:
    """(value, cell) of each 'name=value' row with a result, by value."""
    points = []
    for row in (r for block in result.blocks for r in block):
        s = cell_stats(result, group, row, column)
        try:
            x = float(row.split("=", 1)[1])
        except (IndexError, ValueError):
            continue
        if s is not None:
            points.append((x, s))
    return sorted(points, key=lambda p: p[0])


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (ties ranked by their mean rank); 0 where it is undefined (constant means)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = float(stats.spearmanr(xs, ys).statistic)
    return 0.0 if math.isnan(r) else r


def check_trend(result: TableResult, group: str, args, alpha: float) -> list[Comparison]:
    """args: (column key, 'up' | 'down') per trend."""
    out = []
    for column, direction in args:
        claimed = "above" if direction == "up" else "below"
        label = _label(result, column)
        if label is None:
            out.append(_missing_column(result, column, "largest value", "smallest value", claimed))
            continue
        points = _swept(result, group, column)
        means = ", ".join(f"{s.row.split('=', 1)[0]} {x:g}: {s.mean:.2f}" for x, s in points)
        if len(points) < 3:
            out.append(Comparison(label, "largest value", "smallest value", claimed, None, None,
                                  why=f"{label} at {len(points)} values ({means or 'none'}): a trend needs 3"))
            continue
        r = spearman([x for x, _ in points], [s.mean for _, s in points])
        hi, lo = points[-1][1], points[0][1]
        ends = compare_stats(label, hi, lo, claimed, alpha, hi.row, lo.row)
        sign = 1 if direction == "up" else -1
        why = f"means {means}; Spearman's rank correlation {r:+.2f} (needs {sign * TREND_MIN:+.1f} or beyond)"
        status = AGAINST if ends.status != MISSING and sign * r < TREND_MIN else ends.status
        out.append(Comparison(label, ends.row, ends.other, claimed, ends.a, ends.b, ends.p, status,
                              why + (f"; {ends.why}" if ends.why else "")))
    return out


def check_best(result: TableResult, group: str, args, alpha: float) -> list[Comparison]:
    """args: (row, column keys, the rows it is ranked among (empty: every row of the group))."""
    row, columns, among = args
    out = []
    for column in columns:
        label = _label(result, column)
        if label is None:
            out.append(_missing_column(result, column, row, "the runner-up", "above"))
            continue
        rows = among or [r for block in result.blocks for r in block]
        others = [s for s in (cell_stats(result, group, r, column) for r in rows) if s is not None]
        a = cell_stats(result, group, row, column)
        others = [s for s in others if a is None or s.row != a.row]
        b = max(others, key=lambda s: s.mean, default=None)
        out.append(compare_stats(label, a, b, "above", alpha, row, b.row if b else "the runner-up"))
    return out


def check_overhead(result: TableResult, group: str, args, alpha: float) -> list[Comparison]:
    """args: (row, other row, column key, limit): the ratio of the mean times at most `limit`."""
    row, other, column, limit = args
    label = _label(result, column)
    claimed = f"at most {limit:g} x"
    if label is None:
        return [_missing_column(result, column, row, other, claimed)]
    a, b = cell_stats(result, group, row, column), cell_stats(result, group, other, column)
    if a is None or b is None:
        absent = " and ".join(name for name, s in ((row, a), (other, b)) if s is None)
        return [Comparison(label, row, other, claimed, a, b, why=f"no {label} result for {absent}")]
    ratio = a.mean / b.mean
    p = welch_p(a.values, [limit * v for v in b.values])
    excess = "" if math.isnan(p) else f"; Welch's p of {a.row} against {limit:g} x {b.row}: {p:.3g}"
    status = AS_CLAIMED if ratio <= limit else AGAINST
    return [Comparison(label, a.row, b.row, claimed, a, b, math.nan, status, f"ratio {ratio:.3f}{excess}")]


def check_across(result: TableResult, group: str, args, alpha: float) -> list[Comparison]:
    """args: (the group's text, its counterpart's text, column keys): each row of `group` above the same row of the
    group named with the counterpart text in its place."""
    mine, theirs, columns = args
    counterpart = group.replace(mine, theirs)
    if counterpart not in result.groups:
        return [Comparison(_spec_label(result, column), group, counterpart, "above", None, None,
                           why=f"no column group {counterpart!r}") for column in columns]
    rows = [r for block in result.blocks for r in block]
    out = []
    for column in columns:
        label = _label(result, column)
        if label is None:
            out.append(_missing_column(result, column, group, counterpart, "above"))
            continue
        for row in rows:
            a, b = cell_stats(result, group, row, column), cell_stats(result, counterpart, row, column)
            if a is not None or b is not None:
                out.append(compare_stats(label, a, b, "above", alpha, f"{mine.strip(', ')} {row}",
                                         f"{theirs.strip(', ')} {row}"))
    return out


CHECKS = {"compare": check_compare, "trend": check_trend, "best": check_best, "overhead": check_overhead,
          "across": check_across}
DEFINITIONS = {
    "compare": "each difference in the claimed direction with Welch's t-test p < {alpha:g}",
    "trend": "Spearman's rank correlation of the means with the parameter at least {trend:g} in the claimed "
             "direction, and the largest value's cell beyond the smallest's with Welch's t-test p < {alpha:g}",
    "best": "the row's mean above every other row's, and above the runner-up with Welch's t-test p < {alpha:g}",
    "overhead": "the ratio of the mean times at most the limit",
    "across": "each cell above its counterpart's with Welch's t-test p < {alpha:g}",
}


# ---- verdicts --------------------------------------------------------------------------------
def combine(comparisons: list[Comparison]) -> str:
    """FAILS when a measurable comparison fails, else UNMEASURABLE when one is not measurable (or there is none),
    else HOLDS."""
    statuses = {c.status for c in comparisons}
    if statuses & {AGAINST, NOT_SIGNIFICANT}:
        return FAILS
    return UNMEASURABLE if MISSING in statuses or not statuses else HOLDS


def _stats_text(s: Stats) -> str:
    """'71.20 (0.28, 2 seeds)': two decimals, more for a mean below 1 (0.0905 minutes an epoch), § for a subset."""
    decimals = max(2, 2 - math.floor(math.log10(abs(s.mean)))) if s.mean else 2
    spread = f"{s.std:.{decimals}f}, " if s.n >= 2 else ""
    return f"{s.mean:.{decimals}f} ({spread}{s.n} seed{'s' if s.n != 1 else ''}){'§' if s.subset else ''}"


def comparison_text(c: Comparison) -> str:
    """'PGD-20, SSAT-MBI above RST: 71.20 (0.30, 2 seeds) vs 69.00 (0.40, 2 seeds), p = 0.012: as claimed'."""
    nums = " vs ".join(_stats_text(s) if s else "none" for s in (c.a, c.b)) if c.a or c.b else ""
    p = "" if math.isnan(c.p) else f", p = {c.p:.3g}"
    return (f"{c.column}, {c.row} {c.claimed} {c.other}: {nums}{p}{': ' if nums else ''}{c.status}"
            + (f" ({c.why})" if c.why else ""))


def _verdict(claim: Claim, group: str | None, comparisons: list[Comparison], alpha: float) -> Verdict:
    verdict = combine(comparisons)
    how = DEFINITIONS[claim.check].format(alpha=alpha, trend=TREND_MIN)
    subset = any(s is not None and s.subset for c in comparisons for s in (c.a, c.b))
    text = f"Check: {how}{' (§: on a test subset)' if subset else ''}. " + "; ".join(map(comparison_text, comparisons))
    return Verdict(claim, group, verdict, text, comparisons)


def evaluate(result: TableResult, claims=CLAIMS, alpha: float | None = None) -> list[Verdict]:
    """The verdicts of the claims about `result`'s table: one per claim and column group it speaks of (a claim whose
    groups the table lacks: one, not measurable). `alpha`: the table's (0.05) unless given."""
    alpha = result.options.alpha if alpha is None else alpha
    out = []
    for claim in (c for c in claims if c.table == result.spec.name):
        groups = [g for g in result.groups if re.search(claim.groups, g)]
        if not groups:
            out.append(Verdict(claim, None, UNMEASURABLE, f"No column group of the table matches {claim.groups!r} "
                               f"(groups: {', '.join(result.groups)})."))
        for group in groups:
            out.append(_verdict(claim, group, CHECKS[claim.check](result, group, claim.args, alpha), alpha))
    return out


def unmeasured(table: str, why: str, claims=CLAIMS) -> list[Verdict]:
    """The claims about a `table` that could not be built (not run, no finished run), each not measurable for `why`."""
    return [Verdict(c, None, UNMEASURABLE, why) for c in claims if c.table == table]


def verdict_label(v: Verdict) -> str:
    """'holds', 'does not hold', or 'not measurable on MNIST-5k' (the group's dataset)."""
    if v.verdict != UNMEASURABLE or not v.group:
        return v.verdict
    return f"{v.verdict} on {group_title(v.group).split(' (')[0]}"


def to_markdown(verdicts: list[Verdict]) -> str:
    """One line per verdict: where, the claim, the group, the verdict and its evidence."""
    lines = [md_row(["paper", "claim", "group", "verdict", "evidence"]), md_align([":-", ":-", ":-", ":-", ":-"])]
    lines += [md_row([v.claim.about, v.claim.text, group_title(v.group) if v.group else "-", f"**{verdict_label(v)}**",
                      v.text]) for v in verdicts]
    return "\n".join(lines) + "\n"


def _plain(x):
    """JSON-safe: NaN as None, tuples as lists."""
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return None if isinstance(x, float) and math.isnan(x) else x


def to_records(verdicts: list[Verdict]) -> list[dict]:
    """The verdicts as JSON-safe records: the claim, the verdict and every comparison's numbers."""
    return [_plain({"claim": v.claim.key, "about": v.claim.about, "table": v.claim.table, "text": v.claim.text,
                    "check": v.claim.check, "group": v.group, "verdict": v.verdict, "evidence": v.text,
                    "comparisons": [asdict(c) for c in v.comparisons]}) for v in verdicts]

"""`python -m sweeps run SPEC --dry-run [--gpu NAME]`: every trial, its schedules and its cost, before anything starts.

One line per trial (row, seed, the settings that differ from the spec's base, GPU-hours), each distinct schedule
once as its breakpoints (`eps 0.14/255 -> 10/255 by epoch 70, then 8/255 from 71; rho 0.05, 0.1 from 75; lr 0.1,
x0.1 from 60, ...`), and the totals. `--verbose` adds every trial's full config and per-epoch values.

Without `--gpu` the cost is the paper's training figure (Table 8 per-epoch minutes, one GPU). With `--gpu NAME`
it is the whole sweep on that GPU type, per stage, from sweeps/costs/model.py's model and that GPU's measurements; a
figure not measured there is printed as "not measured on <GPU>" with the `calibrate` command that measures it; a
name no measurement has is refused (`gpu_choice`). The last line puts the measured total before the paper's figure.
A spec of CPU trials (resources.gpu 0, or --cpu-only) gets its wall time on this machine instead, timed there and
then (sweeps/costs/wall_time.py; `--no-measure` skips it).
`python -m sweeps.costs.dryrun --table` writes docs/costs.md.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ssat.config import Config
from ssat.messages import brief
from ssat.schedules import schedule_table

from . import wall_time as W
from .model import STAGES, Unit, estimate, units
from .measurements import ROOT, calibration_dir, measured_devices, read_records, resolve_gpu
from ..errors import UsageError
from ..spec import Spec, load_spec

SPECS = ROOT / "sweeps" / "specs"
COSTS_PAGE = ROOT / "docs" / "costs.md"
NOTHING = {"teachers": "no teacher to train: fully labeled data or data.pseudo_labels files",
           "training": "no training", "validation": "no validation images",
           "SWA": "no trial recomputes SWA BN statistics", "evaluation": "no final evaluation"}


# ---- how the numbers read ---------------------------------------------------------------------------------
def grouped(missing: list[str]) -> list[str]:
    """`wrn-28-5 evaluation: clean` and `wrn-28-5 evaluation: pgd10` as `wrn-28-5 evaluation: clean, pgd10`."""
    out: dict[str, list[str]] = {}
    for item in missing:
        head, _, tail = item.partition(": ")
        out.setdefault(head, []).extend([tail] if tail else [])
    return [f"{h}: {', '.join(dict.fromkeys(t))}" if t else h for h, t in out.items()]


def gh(x: float) -> str:
    """GPU-hours to read: one decimal from 10 on, two from 0.1, two significant digits below."""
    return "0.0" if not x else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"


def stage_text(st: dict, stage: str, gpu: str) -> str:
    """One stage's total with where its figures come from, or what is not measured on the GPU."""
    unit = "teacher(s)" if stage == "teachers" else "trial(s)"
    if not st["of"]:
        return f"0.0 GPU-h ({NOTHING[stage]})"
    src, miss = "; ".join(st["sources"]), f"not measured on {gpu}: " + "; ".join(grouped(st["missing"]))
    if not st["not_measured"]:
        return f"{gh(st['gpu_hours'])} GPU-h, {st['of']} {unit} ({src})"
    if st["not_measured"] == st["of"]:
        return f"{miss} ({st['of']} {unit})"
    return (f"{gh(st['gpu_hours'])} GPU-h for {st['of'] - st['not_measured']} of {st['of']} {unit} ({src}); "
            f"{miss} (the other {st['not_measured']})")


def total_text(est: dict) -> str:
    t, missing = est["total"], [s for s in STAGES if est["stages"][s]["not_measured"]]
    if t["complete"]:
        return f"{gh(t['gpu_hours'])} GPU-h"
    if not t["gpu_hours"]:
        return f"not measured on {est['gpu']} ({', '.join(missing)})"
    return f"at least {gh(t['gpu_hours'])} GPU-h (not measured on {est['gpu']}: {', '.join(missing)})"


def gpu_choice(name: str, records: list[dict] | None = None) -> str:
    """The measured GPU that `--gpu NAME` names (sweeps.costs.model.resolve_gpu: the name, or a part of one, any case);
    a
    name that fits none or several is refused (UsageError: exit code 2) with the GPUs that have measurements."""
    records = read_records(own=calibration_dir()) if records is None else records
    device, hits = resolve_gpu(name, records)
    if device is not None:
        return device
    known = ", ".join(measured_devices(records))
    why = f"names several measured GPUs ({', '.join(hits)})" if hits else "no measured GPU has that name"
    raise UsageError(f"--gpu {brief(name)}: {why}; allowed: one of {known} (or a part of one name, any case)"
                     if known else f"--gpu {brief(name)}: {why}; none has measurements: measure yours with "
                     "`python -m sweeps calibrate SPEC` on it")


def _measured_line(est: dict) -> str:
    found = "; ".join(f"{d} ({', '.join(k)})" for d, k in est["measured"].items()) or "none"
    return (f"measurements in benchmarks/results/: {found}; `--gpu NAME` estimates every stage of the sweep on "
            "one of them")
# ---- schedules as breakpoints ---------------------------------------------------------------------
def _segments(v: list[float]) -> list[tuple[int, int]]:
    """Maximal runs of epochs (0-based, inclusive) over which the series changes by a constant step. Two points
    followed by a constant run (or the end) are a jump, not a ramp."""
    out, start = [], 0
    while start < len(v):
        end = start
        if start + 1 < len(v):
            d, end = v[start + 1] - v[start], start + 1
            while end + 1 < len(v) and math.isclose(v[end + 1] - v[end], d, rel_tol=1e-6, abs_tol=1e-12):
                end += 1
            jump = end == start + 1 and not math.isclose(d, 0.0, abs_tol=1e-12) and (
                end + 1 == len(v) or math.isclose(v[end + 1], v[end], abs_tol=1e-12))
            end = start if jump else end
        out.append((start, end))
        start = end + 1
    return out


def describe(v: list[float], fmt) -> str:
    """A per-epoch series (epoch 1 first) as breakpoints: `a -> b by epoch 70, then c from 71`."""
    parts = []
    for s, e in _segments(v):
        if e == s or math.isclose(v[s], v[e], abs_tol=1e-12):
            parts.append(fmt(v[s]) if not parts else f"{fmt(v[s])} from {s + 1}")
        elif not parts:
            parts.append(f"{fmt(v[s])} -> {fmt(v[e])} by epoch {e + 1}")
        else:
            parts.append(f"{fmt(v[s])} -> {fmt(v[e])} over epochs {s + 1}-{e + 1}")
    return ", then ".join(parts)


def _eps_fmt(cfg: Config):
    unit = round(cfg.eps * 255)
    if math.isclose(cfg.eps * 255, unit, abs_tol=1e-9):  # k/255: say it so
        return lambda x: f"{x * 255:.2f}".rstrip("0").rstrip(".") + "/255"
    return lambda x: f"{x:.4g}"


def schedule_lines(cfg: Config) -> str:
    """`eps ...; rho ...; lr ...` for one config (the trainer's per-epoch values, `ssat.schedules.schedule_table`)."""
    table = schedule_table(cfg)
    lr0 = table["lr"][0]
    lr = describe(table["lr"], lambda x: f"{x:g}" if x == lr0 else f"x{x / lr0:g}")
    return (f"eps {describe(table['eps_max'], _eps_fmt(cfg))}; rho {describe(table['rho'], lambda x: f'{x:g}')}; "
            f"lr {lr}")



# ---- the dry run ------------------------------------------------------------------------------------
SHORT = {"training": "train", "validation": "val", "SWA": "SWA", "evaluation": "eval"}


def _differs(cfg: Config, base: dict) -> str:
    flat = {k: v for k, v in cfg.to_flat().items() if k != "seed"}
    diff = [f"{k}={json.dumps(v)}" for k, v in sorted(flat.items()) if base.get(k) != v]
    return ", ".join(diff) or "the base"


def _unit_label(u: Unit) -> str:
    if u.stage == "search":
        return f"{u.row} seed {u.seed} (x{u.count}, at most: ASHA may stop them early; no final evaluation)"
    if u.count > 1:
        return f"{u.row} seed {u.seed} (x{u.count}, full budget, final evaluation)"
    return f"{u.row} seed {u.seed}"


def _unit_cost(row: dict, gpu: str | None, cpu: bool) -> str:
    """A trial's cost: the paper's GPU-hours (none for CPU trials without a figure), with `gpu` that GPU's per stage,
    for CPU trials their seconds on this machine (`cpu_seconds`, measured now)."""
    h = row["paper_gpu_hours"]
    cost = ("CPU trial" if cpu else "GPU-hours n/a (no per-epoch figure for this dataset and model)") if h is None \
        else f"GPU-hours {h:.2f} (paper)"
    if cpu:
        cost += " | " + (W.unit_text(row["cpu_seconds"]) if "cpu_seconds" in row else "this machine: not timed "
                         "(--no-measure)")
    if "gpu_hours" in row:
        parts = (f"{SHORT[s]} {'not measured' if v is None else f'{v:.2f}' if v else '-'}"
                 for s, v in row["gpu_hours"].items())
        cost += f" | {gpu}, {row['mode']}: " + ", ".join(parts)
    return cost + (" per trial" if row["count"] > 1 else "")


def _gpu_header(est: dict, gpu: str) -> list[str]:
    if est.get("gpu_ambiguous"):
        return [f"  (--gpu {gpu!r} names several measured GPUs: {', '.join(est['gpu_ambiguous'])}; name one. "
                "The paper's figures only)"]
    modes: dict[str, int] = {}
    for row in est["units"]:
        modes[row["mode"]] = modes.get(row["mode"], 0) + row["count"]
    lines = [f"  GPU-hours on {est['gpu']}: figures measured on it only (benchmarks/results/), never scaled from "
             "another GPU; step engine there: " + ", ".join(f"{k} for {v} trial(s)" for k, v in modes.items())]
    return lines + [f"  packing: {note}" + ("; the gain of training steps applied to the whole trial"
                                           if "gain " in note else "") for note in est["packing"]]


def _totals(est: dict, spec_path: str) -> list[str]:
    lines = [f"GPU-hours on {est['gpu']} per stage:"]
    lines += [f"  {s:<11}{stage_text(est['stages'][s], s, est['gpu'])}" for s in STAGES]
    lines.append(f"  {'total':<11}{total_text(est)}")
    if not est["total"]["complete"]:
        lines.append(f"  what is not measured, measured on a {est['gpu']}: python -m sweeps calibrate {spec_path} "
                     "--missing-only (minutes; the dry run then reads your figures first)")
    if est["search"]:
        lines.append("  (search trials counted at full length: at most, as ASHA may stop them early; confirm "
                     "trials at full budget with final evaluation)")
    return lines


def _last_line(est: dict) -> str:
    """The totals: the measured one first (on the GPU, or for CPU trials on this machine), then the paper's figure."""
    p, n = est["paper_training"], est["paper_training"]["trials_without_figure"]
    why = "whole-GPU trials at the paper's Table 8 per-epoch times, training only" + (
        f"; {n} trial(s) without a figure" if n else "")
    paper = f"; the paper's: {p['gpu_hours']:.1f} GPU-h ({why})"
    if est["cpu_trials"]:
        here = f"on this machine: {W.total_text(est['cpu'])} (measured now)" if est.get("cpu") else \
            "wall time on this machine not measured (--no-measure)"
        return f"total: {est['trials']} CPU trial(s); {here}{paper if p['gpu_hours'] else ''}; nothing was started"
    if est.get("stages"):
        return f"total: {est['trials']} trial(s); on {est['gpu']}: {total_text(est)}{paper}; nothing was started"
    return f"total: {est['trials']} trial(s), estimated GPU-hours {p['gpu_hours']:.1f} ({why}); nothing was started"


def reuse_text(est: dict, reused: dict) -> str:
    """`reused`: (row, seed) -> the sweep whose finished run a trial would reference (run --reuse, sweeps.driver.reuse).
    What that saves: the trials' paper GPU-hours, their GPU-hours on --gpu, their seconds on this machine."""
    rows = [r for r in est["units"] if (r["row"], r["seed"]) in reused]
    saved = {"trials": len(rows), "paper_gpu_hours": sum(r["paper_gpu_hours"] or 0 for r in rows),
             "gpu_hours": sum(v or 0 for r in rows for v in r.get("gpu_hours", {}).values()),
             "cpu_seconds": sum(r.get("cpu_seconds") or 0 for r in rows)}
    est["reuse"] = saved
    by: dict[str, int] = {}
    for r in rows:  # the trials of this spec only
        sweep = reused[(r["row"], r["seed"])]
        by[sweep] = by.get(sweep, 0) + 1
    parts = [f"{gh(saved['paper_gpu_hours'])} GPU-h of the paper's"] if saved["paper_gpu_hours"] else []
    if est.get("gpu"):
        parts.append(f"{gh(saved['gpu_hours'])} GPU-h on {est['gpu']}")
    if saved["cpu_seconds"]:
        parts.append(f"{saved['cpu_seconds'] / 60:.1f} trial-minutes here")
    return (f"reuse: {len(rows)} of {est['trials']} trials have a finished run in the store ("
            + ", ".join(f"{n} from {s}" for s, n in sorted(by.items())) + ") and would not train"
            + (f": saves {', '.join(parts)}" if parts else ""))


def dry_run(spec: Spec, out=print, *, verbose: bool = False, gpu: str | None = None, json_path: str | None = None,
            records: list[dict] | None = None, spec_path: str = "SPEC", measure: bool = False,
            reused: dict | None = None) -> dict:
    """Print the dry run; return `estimate`'s numbers (also written to json_path as JSON when given). CPU trials
    with `measure`: their wall time on this machine, timed now (sweeps.costs.wall_time), under "cpu". With `reused`
    ((row, seed) -> sweep: run --reuse), those trials are marked and what they save is said."""
    est = {**estimate(spec, gpu, records), "cpu_trials": W.cpu_trials(spec)}
    us = units(spec)
    n = est["trials"] if spec.grid else f"{us[0].count} search + {est['trials'] - us[0].count} confirm"
    out(f"sweep {spec.name}: preset {spec.preset}, stage {spec.stage}, {n} trial(s), resources per trial "
        f"{spec.resources}, max concurrent {spec.max_concurrent}")
    if est["cpu_trials"] and measure:
        est["cpu"] = W.wall_time(spec, W.measure(spec))
        for row, secs in zip(est["units"], est["cpu"]["units"]):
            row["cpu_seconds"] = secs
    if gpu:
        for line in _gpu_header(est, gpu):
            out(line)
    base = spec.base_config().to_flat()  # _differs leaves the seed out
    schedules: dict[str, list[str]] = {}
    for u, row in zip(us, est["units"]):
        mark = f" | reused from {reused[(u.row, u.seed)]}" if reused and (u.row, u.seed) in reused else ""
        out(f"- {_unit_label(u)}: {_differs(u.cfg, base)} | {_unit_cost(row, est['gpu'], est['cpu_trials'])}{mark}")
        schedules.setdefault(schedule_lines(u.cfg), []).append(u.row)
        if verbose:
            out("  config " + json.dumps(u.cfg.to_flat(), sort_keys=True))
            for k, v in schedule_table(u.cfg).items():
                out(f"  {k:8s} " + " ".join(f"{round(x, 6):g}" for x in v))
    out("schedules:")
    for text, users in schedules.items():
        out(f"  {text}  [{', '.join(sorted(set(users)))}]")
    if spec.search:
        out(f"search space {json.dumps(spec.search['space'])}; confirm {spec.search['confirm']}")
    lines = W.lines(spec, est["cpu"]) if est.get("cpu") else []
    if reused is not None:
        lines.append(reuse_text(est, reused))
    lines += _totals(est, spec_path) if est.get("stages") else [] if est["cpu_trials"] else [_measured_line(est)]
    for line in lines + [_last_line(est)]:
        out(line)
    if json_path:
        Path(json_path).write_text(json.dumps(est, indent=1, sort_keys=True) + "\n")
    return est


# ---- docs/costs.md -----------------------------------------------------------------------------------------
def _cell(st: dict) -> str:
    if not st["not_measured"]:
        return gh(st["gpu_hours"])
    if st["not_measured"] == st["of"]:
        return "not measured"
    return f"{gh(st['gpu_hours'])} + not measured ({st['not_measured']} of {st['of']})"


def _total_cell(est: dict) -> str:
    t = est["total"]
    return gh(t["gpu_hours"]) if t["complete"] else f"at least {gh(t['gpu_hours'])}" if t["gpu_hours"] \
        else "not measured"


def _paper_cell(est: dict) -> str:
    p = est["paper_training"]
    return f"{p['gpu_hours']:.1f}" + (f" ({p['trials_without_figure']} trials without a figure)"
                                      if p["trials_without_figure"] else "")


def _gpu_section(device: str, ests: list[dict]) -> list[str]:
    head = ["spec", "trials", *STAGES, "total", "paper Table 8, training"]
    lines = [f"## {device}", "", "GPU-hours per stage.", "", "| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for e in ests:
        cells = [e["spec"], str(e["trials"]), *(_cell(e["stages"][s]) for s in STAGES), _total_cell(e),
                 _paper_cell(e)]
        lines.append("| " + " | ".join(cells) + " |")
    used = sorted({s for e in ests for st in e["stages"].values() for s in st["sources"]} |
                  {n for e in ests for n in e["packing"]})
    missing = grouped(sorted({s for e in ests for st in e["stages"].values() for s in st["missing"]}))
    lines += ["", "Figures used:", ""] + [f"- {s}" for s in used or ["none"]]
    lines += ["", f"Not measured on {device}:", ""] + [f"- {s}" for s in missing or ["nothing"]]
    return lines + [""]


ABOUT = """\
## What the figures rest on

Every cell is GPU-hours of one GPU type, from the JSON lines that `python -m sweeps calibrate` and benchmarks/
wrote into benchmarks/results/ for that GPU alone (the median where several runs measured the same figure); a
figure missing there reads "not measured", never scaled from another GPU. Training is epochs x the measured
seconds per CIFAR-10 epoch of the real Trainer with the trial's model, method, precision and step engine as it
will run on a GPU (`engine_mode`), scaled to the dataset's training images; an epoch is one schedule change (a
new CUDA-graph capture) and the rest of its steps at the steady rate. Validation is clean + PGD-10 on the
validation images every `eval.val_every` epochs and the last two; the SWA statistics pass (SWA with
`optim.swa_bn: recompute`) is one train-mode forward over the training images per epoch after `optim.swa_start`;
the final evaluation is clean and PGD-k on each checkpoint in `eval.checkpoints` and AutoAttack on
`eval.autoattack_checkpoints` for `eval.autoattack_seeds`, in fp32 (TF32 as `eval.tf32` says). AutoAttack's
attacks run on the images still robust when each starts: their figures are seconds per 1,000 images that stay
robust through the attack's whole standard budget (timed on a stand-in that no attack moves), and the share of
images each runs on is the paper's Table 1 SSAT-MBI accuracy of the dataset (clean for APGD-CE, PGD-40 for
APGD-T, AutoAttack for FAB-T and Square; every image for a dataset the paper does not report).
Teachers are trained once per split: `teacher.steps` / the measured FixMatch steps per second. Trials packed on
a GPU (`resources.gpu` < 1) cost 1/gain of their time alone, from the packing records of the GPU and model (MPS
first); without such a record, no gain. Searches count their trials at full length (at most). The paper's
Table 8 column is training alone at the paper's per-epoch minutes. "at least" totals leave out what is not
measured.

Regenerate after new measurements, spec or default changes: `.venv/bin/python -m sweeps.costs.dryrun --table`
(tests/unit/sweeps/costs/test_dryrun.py fails while this page differs from what that writes). One sweep, trial by trial:
`.venv/bin/python -m sweeps run SPEC --dry-run --gpu NAME`. Your own GPU: `python -m sweeps calibrate SPEC`
measures what that needs, and the dry run reads your figures first.
"""


def _paper_specs(specs: Path) -> list[Path]:
    return sorted(specs.glob("paper-*.yaml"), key=lambda p: (p.name.startswith("paper-fig"), p.name))


def costs_page(records: list[dict] | None = None, specs: Path = SPECS) -> str:
    """docs/costs.md: every paper spec's trials and GPU-hours per stage on each GPU type with measurements."""
    records = read_records() if records is None else records
    loaded = [load_spec(p) for p in _paper_specs(specs)]
    lines = ["# GPU cost of the paper's sweeps", "",
             "Generated by `python -m sweeps.costs.dryrun --table` from sweeps/specs/paper-*.yaml "
             "(Tables 1-6, Figs. 4-5) and benchmarks/results/; do not edit by hand.", ""]
    for device in measured_devices(records):
        lines += _gpu_section(device, [estimate(s, device, records) for s in loaded])
    return "\n".join(lines) + "\n" + ABOUT


def main(argv: list[str] | None = None) -> int:
    """python -m sweeps.costs.dryrun --table [--check] | SPEC [--gpu NAME] [--json PATH]"""
    from ssat.config import ConfigError

    from ..errors import SpecError

    ap = argparse.ArgumentParser(prog="python -m sweeps.costs.dryrun", description="A sweep's cost, or docs/costs.md.")
    ap.add_argument("spec", nargs="?", help="a sweep spec: its dry run (as `python -m sweeps run SPEC --dry-run`)")
    ap.add_argument("--gpu", default=None, metavar="NAME", help="estimate every stage on this measured GPU type")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the numbers as JSON")
    ap.add_argument("--no-measure", action="store_true", help="CPU trials: do not time them on this machine")
    ap.add_argument("--table", action="store_true", help=f"write {COSTS_PAGE.relative_to(ROOT)}")
    ap.add_argument("--check", action="store_true", help="with --table: exit 1 if the page is out of date")
    args = ap.parse_args(argv)
    try:
        if args.table:
            page = costs_page()
            if args.check:
                same = COSTS_PAGE.exists() and COSTS_PAGE.read_text() == page
                stale = "out of date; run python -m sweeps.costs.dryrun --table"
                print(f"{COSTS_PAGE}: {'up to date' if same else stale}")
                return 0 if same else 1
            COSTS_PAGE.write_text(page)
            print(f"wrote {COSTS_PAGE}")
            return 0
        if not args.spec:
            ap.error("name a SPEC, or --table")
        gpu = None if args.gpu is None else gpu_choice(args.gpu)
        dry_run(load_spec(args.spec), gpu=gpu, json_path=args.json, spec_path=args.spec, measure=not args.no_measure)
        return 0
    except (SpecError, ConfigError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

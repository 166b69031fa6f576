"""`make paper` / `python -m sweeps paper [--only NAME ...]`: every table and figure of the paper from real tracked
runs, in miniature on MNIST-5k, in one command.

    table1     Table 1, the five methods            sweeps/specs/mnist5k-paper-table1.yaml
    table2     Table 2, the ablation of SSAT-MBI    sweeps/specs/mnist5k-demo.yaml (the demo's sweep)
    table3     Table 3, the schedules               sweeps/specs/mnist5k-paper-table3.yaml
    table4     Table 4, the AWR ablation            sweeps/specs/mnist5k-paper-table4.yaml
    table5     Table 5, training time               the runs of table1
    tables6-7  Tables 6-7, fully labeled data       sweeps/specs/mnist5k-paper-tables6-7.yaml
    fig4       Fig. 4, beta                         sweeps/specs/mnist5k-paper-fig4.yaml
    fig5       Fig. 5, initial rho                  sweeps/specs/mnist5k-paper-fig5.yaml

Each part is a sweep of its own in one working folder and store, run with `--reuse` (sweeps.driver.reuse): a trial of
the same config hash and seed as a finished one (SSAT-MBI's defaults are five parts' rows) is trained once, and
the teachers are made once (one split, one teacher cache). Then AutoAttack on the first 50 test images of every
trial of seeds 0 and 1 (sweeps.subset_autoattack; --autoattack-images, --autoattack-seeds), and the report: every table
(md, tex, csv, provenance), figure (PNG), convergence verdict and claim under outputs/paper/, with index.md in the
paper's order (analysis.paper_report). A part finished before is not run again; a cut one resumes; Ctrl+C stops the
command, and running it again goes on. The time each part took is kept in runs/paper/timings.json for the index.
"""
from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

SPECS = Path(__file__).parent / "specs"


@dataclass(frozen=True)
class PaperPart:
    name: str
    title: str
    spec: str | None               # its sweep's spec file in sweeps/specs, None: it reads `reads`' runs
    tables: tuple[str, ...]
    figures: tuple[str, ...] = ()
    stages: tuple[str, ...] | None = None
    reads: str | None = None


PARTS = (
    PaperPart("table1", "Table 1: the five methods", "mnist5k-paper-table1.yaml", ("main",)),
    PaperPart("table2", "Table 2: the ablation of SSAT-MBI", "mnist5k-demo.yaml", ("ablation",), ("ablation",),
              ("demo",)),
    PaperPart("table3", "Table 3: the global epsilon schedules", "mnist5k-paper-table3.yaml", ("schedules",)),
    PaperPart("table4", "Table 4: the ablation of SSAT-MBI-AWR", "mnist5k-paper-table4.yaml", ("awr-ablation",)),
    PaperPart("table5", "Table 5: training time", None, ("training-time",), reads="table1"),
    PaperPart("tables6-7", "Tables 6-7: fully labeled data", "mnist5k-paper-tables6-7.yaml", ("supervised",)),
    PaperPart("fig4", "Fig. 4: SSAT-MBI with varying beta", "mnist5k-paper-fig4.yaml", ("beta-sensitivity",),
              ("beta",)),
    PaperPart("fig5", "Fig. 5: SSAT-MBI with varying initial rho", "mnist5k-paper-fig5.yaml", ("rho-sensitivity",),
              ("rho",)),
)


def chosen(only: list[str] | None) -> list[PaperPart]:
    """The parts `--only` names (all without it), in the paper's order; a part that reads another's runs brings
    that one along. An unknown name is refused with the names."""
    from .errors import UsageError

    names = [p.name for p in PARTS]
    unknown = [n for n in only or [] if n not in names]
    if unknown:
        raise UsageError(f"--only: {', '.join(unknown)}; allowed: {', '.join(names)}")
    want = set(only or names)
    want |= {p.reads for p in PARTS if p.name in want and p.reads}
    return [p for p in PARTS if p.name in want]


def plan(parts: list[PaperPart], specs: Path = SPECS) -> dict:
    """Every part's spec (in `specs`) validated before anything runs, and the work: per part its trials, those an
    earlier part trains (reused here), and the trial-epochs left to train."""
    from .spec import load_spec

    seen, out = set(), {}
    for p in parts:
        if p.spec is None:
            continue
        spec = load_spec(specs / p.spec)
        trials = spec.trials()
        keys = [(t.config.config_hash(), t.seed) for t in trials]
        fresh = [t for t, k in zip(trials, keys) if k not in seen]
        seen |= set(keys)
        out[p.name] = {"spec": spec, "file": specs / p.spec, "trials": len(trials), "reused": len(trials) - len(fresh),
                       "epochs": sum(t.config.optim.epochs for t in fresh)}
    return out


def machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU and cores this ran on, as the report's header says it (the CPU's name from `cpuinfo` on Linux)."""
    import os

    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.processor())
    return (f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def _timings(workdir: Path) -> tuple[Path, dict]:
    path = workdir / "runs" / "paper" / "timings.json"
    return path, (json.loads(path.read_text()) if path.exists() else {})


def run_part(part: PaperPart, work: dict, workdir: Path, later_epochs: int, log=print) -> int | None:
    """One part's sweep: None when it finished before (nothing run), else the exit code of resuming it (cut
    before) or running it with --reuse, on the hardware the demo would use (sweeps.demo.gpu_plan)."""
    import os

    import torch

    from .demo import gpu_plan
    from .driver.sweep import RunArgs, SweepState, resume_sweep, run_sweep
    from .paths import sweep_paths
    from .trials.progress_callback import outer_job

    spec = work["spec"]
    paths = sweep_paths(workdir, spec.name)
    if paths.state.exists() and SweepState.load(paths).status == "done":
        log(f"[paper] {part.name}: its sweep {spec.name} finished before; nothing to run")
        return None
    with outer_job("the paper", later_epochs):
        if paths.state.exists():
            log(f"[paper] {part.name}: resuming its sweep {spec.name}")
            return resume_sweep(spec.name, workdir=workdir, rerun_failed=True, log=log)
        log(f"[paper] {part.name}: sweep {spec.name}, {work['trials']} trials ({work['reused']} of them another "
            "part's)")
        hw = gpu_plan(torch.cuda.device_count(), os.cpu_count() or 1, None)
        args = RunArgs(reuse=True, cpu_only=hw["cpu_only"], gpu_share=hw["gpu_share"], sets=hw["sets"],
                       max_concurrent=hw["max_concurrent"])
        return run_sweep(work["file"], args, workdir=workdir, log=log)


def run_paper(args, log=print) -> int:
    from .trials.progress_callback import duration

    workdir = Path(args.workdir).resolve()
    parts = chosen(args.only)
    work = plan(parts, Path(args.specs) if args.specs else SPECS)
    total = sum(w["epochs"] for w in work.values())
    log(f"[paper] {len(parts)} part(s), {sum(w['trials'] for w in work.values())} trials, "
        f"{sum(w['reused'] for w in work.values())} of them shared between parts (trained once), {total:,} "
        "trial-epochs to train at most")
    t0 = time.perf_counter()
    path, timings = _timings(workdir)
    left = total
    for part in parts:
        if part.name not in work:
            continue
        left -= work[part.name]["epochs"]
        t1 = time.perf_counter()
        rc = run_part(part, work[part.name], workdir, left, log)
        if rc:
            log(f"[paper] stopped in {part.name} (exit {rc}); run `make paper` again to go on (nothing finished "
                "is trained again)")
            return rc
        if rc == 0:  # ran here (a resumed part's time is this driver's share of it)
            timings[part.name] = {"wall_s": round(time.perf_counter() - t1, 1)}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(timings, indent=1))
        log(f"[paper] {part.name} done ({duration(time.perf_counter() - t0)} so far)")
    return finish(parts, work, workdir, timings, t0, (tuple(args.autoattack_seeds), args.autoattack_images), log)


def finish(parts: list[PaperPart], work: dict, workdir: Path, timings: dict, t0: float, autoattack: tuple,
           log=print) -> int:
    """AutoAttack on the subset, then the report (analysis.paper_report) under outputs/paper."""
    from analysis.paper_report import Part, write_report

    from .driver.sweep import SweepState
    from .paths import sweep_paths
    from .trials.progress_callback import duration
    from .subset_autoattack import run_autoattack

    names = {p.name: work[p.name]["spec"].name for p in parts if p.name in work}
    states = {p: SweepState.load(sweep_paths(workdir, n)) for p, n in names.items()}
    uri = next(iter(states.values())).tracking_uri
    t1 = time.perf_counter()
    if run_autoattack(uri, list(names.values()), *autoattack, log):  # a rerun that attacks nothing keeps
        timings["autoattack"] = {"wall_s": round(time.perf_counter() - t1, 1)}  # the time of the one that did
        path, _ = _timings(workdir)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(timings, indent=1))
    report = [_report_part(p, work, names, states, timings, Part, autoattack) for p in parts]
    steps = {"AutoAttack": timings["autoattack"]["wall_s"]} if "autoattack" in timings else {}
    index = write_report(report, workdir / "outputs" / "paper", uri, machine(), time.strftime("%Y-%m-%d"), steps)
    log(f"[paper] done in {duration(time.perf_counter() - t0)}: {index}")
    return 0


def attacked(cfg, seeds: tuple[int, ...], images: int):
    """`cfg` as the caption should read it after the AutoAttack step: every row's `seeds`, the first `images`."""
    from dataclasses import replace

    return replace(cfg, eval=replace(cfg.eval, autoattack=True, autoattack_n=images, autoattack_seeds=list(seeds)))


def _report_part(p: PaperPart, work: dict, names: dict, states: dict, timings: dict, Part, autoattack: tuple):
    from .demo import setup_text

    source = p.reads or p.name
    state = states[source]
    spec = work[source]["spec"]
    reused = sum(len(r) for r in state.reused.values())
    return Part(name=p.name, title=p.title, experiments=[names[source]], tables=list(p.tables),
                figures=list(p.figures), stages=p.stages,
                setup=setup_text(attacked(spec.trials()[0].config, *autoattack)),
                wall_seconds=None if p.reads else timings.get(p.name, {}).get("wall_s"),
                trained=0 if p.reads else work[source]["trials"] - reused, reused=0 if p.reads else reused,
                reads=p.reads or "")

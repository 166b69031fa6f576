"""`python -m sweeps calibrate SPEC... [--budget MINUTES] [--out DIR]`: what these sweeps cost on this GPU.

Measures, on the GPU it runs on, exactly the figures the dry run's cost model needs for the specs
(`sweeps.costs.model.needed_figures`) and nothing else: each distinct training epoch (model, method, step engine,
precision, as the trial will run), each FixMatch teacher's steps per second, and per model the evaluation passes
(clean, the SWA BN pass, PGD-k, each AutoAttack attack). Then `python -m sweeps run SPEC --dry-run --gpu NAME`
prices every stage from them.

How: (1) the training figures whose step engine compiles are compiled first, in parallel processes that publish
their kernels to the sweep's compile cache (`<workdir>/runs/compile_cache`, as a trial does; so calibrating also
warms the sweep that follows) and report their peak GPU memory; (2) the figures are then measured in groups that
fit the GPU's memory: a group's processes warm up side by side (the cache makes that fast), then each is timed
alone on the otherwise idle GPU (sweeps/costs/measure.py says how each figure is timed). A figure whose process fails is
reported and left out; `--budget` stops the run after that many minutes, keeping what was measured.

Results: JSON lines named by GPU and date, in `--out` (default: this user's calibration folder, which the dry run
reads first, sweeps.costs.model.calibration_dir) and in benchmarks/results/ when run from a checkout of the repository.
On a machine without a CUDA GPU it refuses; `--device cpu` runs the same code on the CPU (the tests do, with
tiny models), its records marked "cpu": never a GPU figure.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ssat.config import Config, parse_overrides

from ..errors import UsageError
from .measurements import RESULTS, ROOT, Measurements, calibration_dir, read_records
from ..paths import sweep_paths

GIB = 2 ** 30
COMPILE_GIB = 6  # GPU memory assumed for one compiling process, before any measured peak (a WRN-28-8 step's is ~5)
MEMORY_USE = 0.8  # share of the GPU's memory a group of resident processes may take
COMPILE_SHARE = 0.7  # of --budget, the most the compile phase may take: the rest measures what compiled


@dataclass
class Item:
    """One process's work: a training or teacher figure, or every evaluation figure of one model."""
    kind: str
    keys: list[tuple]
    cfg: Config
    peak_gib: float | None = None
    records: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def label(self) -> str:
        if self.kind == "eval":
            model, _, tf32 = self.keys[0][1:]
            return f"eval {model}{' TF32' if tf32 else ''} ({', '.join(k[2] for k in self.keys)})"
        return f"{self.kind} " + " ".join(str(p) for p in self.keys[0][1:])


KINDS = ("training", "teacher", "eval")


def plan(specs, measured: Measurements | None = None, kinds=KINDS) -> list[Item]:
    """The figures of the specs of these kinds as work items (evaluation figures grouped per model and TF32); with
    `measured`, only the figures it lacks."""
    from .model import needed_figures

    need: dict[tuple, Config] = {}
    for spec in specs:
        for key, cfg in needed_figures(spec).items():
            if key[0] in kinds:
                need.setdefault(key, cfg)
    if measured is not None:
        need = {k: c for k, c in need.items() if measured.figure(*k) is None}
    items: dict[tuple, Item] = {}
    for key, cfg in need.items():
        group = ("eval", key[1], key[3]) if key[0] == "eval" else key
        items.setdefault(group, Item(key[0], [], cfg)).keys.append(key)
    return sorted(items.values(), key=lambda i: (KINDS.index(i.kind), i.label))


def compiles(item: Item, device: str) -> bool:
    """Training figures whose step engine compiles on a GPU: their kernels are built in the parallel first phase."""
    return device == "cuda" and item.kind == "training" and "compile" in item.keys[0][3]


def job(item: Item, args, cache: Path) -> dict:
    """The JSON job of sweeps.costs.measure for an item."""
    out = {"kind": item.kind, "config": item.cfg.to_dict(), "device": args.device}
    if item.kind == "training":
        out.update(steps=args.steps, compile_cache=str(cache))
    elif item.kind == "teacher":
        out.update(steps=args.steps, warmup=args.teacher_warmup)
    else:
        out.update(attacks=[k[2] for k in item.keys], n=args.eval_n, aa_n=args.aa_n)
    return out


# ---- the measuring processes ---------------------------------------------------------------------------------
class Worker:
    """A `python -m sweeps.costs.measure` process; its stdout lines (JSON events) go to a shared queue."""

    def __init__(self, item: Item, spec: dict, events: queue.Queue, log: Path, env: dict | None = None):
        self.item, self.started = item, time.perf_counter()
        self.log = log.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "sweeps.costs.measure", json.dumps(spec)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, **(env or {})})
        threading.Thread(target=self._read, args=(events,), daemon=True).start()

    def _read(self, events: queue.Queue) -> None:
        for line in self.proc.stdout:
            try:
                events.put((self, json.loads(line)))
            except json.JSONDecodeError:
                self.log.write(line)
        self.proc.wait()
        events.put((self, {"event": "exit", "code": self.proc.returncode}))

    def go(self) -> bool:
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.log.close()


class Calibration:
    def __init__(self, items: list[Item], args, cache: Path, logs: Path, write):
        self.items, self.args, self.cache, self.logs, self.write = items, args, cache, logs, write
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + args.budget * 60 if args.budget else None
        self.compile_deadline = self.t0 + COMPILE_SHARE * args.budget * 60 if args.budget else None
        self.events: queue.Queue = queue.Queue()
        self.stash: dict[Worker, list[dict]] = {}
        self.done_s: list[float] = []
        self.gpu_gib = args.gpu_gib

    def next(self, w: Worker | None = None, deadline: float | None = None) -> tuple[Worker, dict] | None:
        """The next event (of worker `w` alone when given; others' are kept for later); None once the budget (or
        `deadline`) is spent."""
        if w is not None and self.stash.get(w):
            return w, self.stash[w].pop(0)
        while not self.over(deadline):
            try:
                who, ev = self.events.get(timeout=2)
            except queue.Empty:
                continue
            if w is None or who is w:
                return who, ev
            self.stash.setdefault(who, []).append(ev)
        return None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def over(self, deadline: float | None = None) -> bool:
        deadline = deadline or self.deadline
        return deadline is not None and time.perf_counter() > deadline

    def progress(self, what: str, left_items: int, per_item: float | None) -> None:
        eta = f" | about {fmt_s(left_items * per_item)} left" if per_item and left_items else ""
        print(f"[calibrate {self.elapsed():.0f} s] {what}{eta}", flush=True)

    def _spawn(self, item: Item, i: int, compile_only: bool) -> Worker:
        spec = {**job(item, self.args, self.cache), "compile_only": compile_only}
        env = {"TORCHINDUCTOR_COMPILE_THREADS": str(max(2, (os.cpu_count() or 2) // self.args.jobs))}
        name = re.sub(r"[^A-Za-z0-9.+-]+", "_", item.label)[:80]
        return Worker(item, spec, self.events, self.logs / f"{'compile' if compile_only else 'measure'}-{i}-{name}.log",
                      env)

    def _fail(self, w: Worker, why: str) -> None:
        w.item.error = why
        print(f"[calibrate] {w.item.label}: failed ({why}); its log: {w.log.name}", flush=True)

    def compile_phase(self) -> None:
        """Compile every compiling training figure, `jobs` processes at a time (fewer where the GPU's memory
        would not hold them); each reports its peak memory and exits."""
        todo = [it for it in self.items if compiles(it, self.args.device)]
        if not todo:
            return
        limit = max(1, min(self.args.jobs, int(self.gpu_gib * MEMORY_USE / COMPILE_GIB) if self.gpu_gib else 99))
        print(f"[calibrate] compiling {len(todo)} training step(s), {limit} process(es) at a time, into {self.cache}")
        running, pending, finished = [], list(todo), 0
        while pending or running:
            while pending and len(running) < limit and not self.over(self.compile_deadline):
                running.append(self._spawn(pending.pop(0), len(todo) - len(pending), True))
            got = self.next(deadline=self.compile_deadline) if running else None
            if got is None:
                break
            w, ev = got
            if ev["event"] == "ready":
                w.item.peak_gib = (ev.get("peak_mib") or 0) / 1024
                self.done_s.append(time.perf_counter() - w.started)
                finished += 1
                per = sum(self.done_s) / len(self.done_s) / limit
                self.progress(f"compiled {finished}/{len(todo)}: {w.item.label} ({ev.get('compile_cache')}, "
                              f"peak {w.item.peak_gib:.1f} GiB)", len(todo) - finished, per)
            elif ev["event"] == "error":
                self._fail(w, ev["error"])
            elif ev["event"] == "exit":
                running.remove(w)
                w.stop()
                if w.item.peak_gib is None and w.item.error is None:
                    self._fail(w, f"exit {ev['code']}")
        for w in running:
            w.stop()
        for it in pending + [w.item for w in running if w.item.peak_gib is None]:
            it.error = it.error or f"not compiled within {COMPILE_SHARE:.0%} of --budget"

    def groups(self) -> list[list[Item]]:
        """Items still to measure, in groups whose peak GPU memory fits together (at most `jobs` a group)."""
        todo = [it for it in self.items if it.error is None]
        out, cur, used = [], [], 0.0
        cap = self.gpu_gib * MEMORY_USE if self.gpu_gib else None
        for it in todo:
            need = it.peak_gib if it.peak_gib is not None else (COMPILE_GIB if self.gpu_gib else 0.0)
            if cur and (len(cur) >= self.args.jobs or (cap is not None and used + need > cap)):
                out.append(cur)
                cur, used = [], 0.0
            cur.append(it)
            used += need
        return out + ([cur] if cur else [])

    def measure_phase(self) -> None:
        groups, done = self.groups(), 0
        total = sum(len(g) for g in groups)
        times: list[float] = []
        for g in groups:
            if self.over():
                break
            workers = [self._spawn(it, done + i + 1, False) for i, it in enumerate(g)]
            ready: list[Worker] = []
            while len(ready) + sum(1 for w in workers if w.item.error) < len(workers):  # all warmed up or failed
                got = self.next()
                if got is None:
                    break
                w, ev = got
                if ev["event"] == "ready":
                    ready.append(w)
                elif ev["event"] == "error":
                    self._fail(w, ev["error"])
                elif ev["event"] == "exit" and w not in ready and not w.item.error:
                    self._fail(w, f"exit {ev['code']}")
            for w in ready:  # one at a time: the GPU is otherwise idle
                if self.over():
                    break
                t = time.perf_counter()
                if w.item.error:
                    continue
                if not w.go():
                    self._fail(w, "its process ended before its turn")
                    continue
                while (got := self.next(w)) is not None:
                    ev = got[1]
                    if ev["event"] == "result":
                        w.item.records = ev["records"]
                        self.write(w.item.records)
                    elif ev["event"] == "error":
                        self._fail(w, ev["error"])
                    elif ev["event"] == "exit":
                        if not w.item.records and not w.item.error:
                            self._fail(w, f"exit {ev['code']}")
                        break
                times.append(time.perf_counter() - t)
                done += 1
                self.progress(f"measured {done}/{total}: {w.item.label}", total - done,
                              sum(times) / len(times))
            for w in workers:
                w.stop()


def fmt_s(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


# ---- results ----------------------------------------------------------------------------------------------
def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def summary(items: list[Item]) -> list[str]:
    """The table printed at the end: one line per figure."""
    rows = [("figure", "measured", "what was timed")]
    for it in items:
        if it.error or not it.records:
            rows.append((it.label, "not measured", it.error or "stopped by --budget"))
            continue
        for r in it.records:
            if r["bench"] == "trainer":
                rows.append((f"training {r['trainer_model']} {r['method']} {r['mode']} {r['precision']}",
                             f"{r['cifar10_epoch_s']:.1f} s/CIFAR-10 epoch",
                             f"{r['steps_timed']} steps at {r['step_ms']:.1f} ms + a schedule change "
                             f"({r['schedule_change_s']:.2f} s)"))
            elif r["bench"] == "teacher":
                rows.append((f"teacher {r['teacher_model']} {r['precision']}", f"{r['steps_per_s']:.1f} steps/s",
                             f"{r['steps']} steps after {r['warmup']}"))
            else:
                unit = "robust images" if r.get("points") == "robust" else "images"
                rows.append((f"eval {r['eval_model']} {r['attack']}{' TF32' if r['tf32'] else ''}",
                             f"{r['s_per_1000']:.2f} s/1000 {unit}", r.get("timed") or f"{r['n']} images"))
    width = [max(len(r[i]) for r in rows) for i in range(3)]
    return [" | ".join(c.ljust(w) for c, w in zip(r, width)).rstrip() for r in rows]


def out_files(args, device: str) -> list[Path]:

    name = f"{slug(device)}-{datetime.date.today().isoformat()}-calibrate.json"
    folders = [Path(args.out) if args.out else calibration_dir()]
    if device != "cpu" and (ROOT / ".git").exists() and RESULTS.is_dir() and os.access(RESULTS, os.W_OK):
        folders.append(RESULTS)  # a GPU's figures, run from a checkout: the repository keeps them too
    uniq = list(dict.fromkeys(f.resolve() for f in folders))
    return [f / name for f in uniq]


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


# ---- the command ----------------------------------------------------------------------------------------------
def add_parser(sub) -> None:
    what = "measure on this GPU the figures the dry run needs for these specs"
    c = sub.add_parser("calibrate", help=what, description=what[0].upper() + what[1:] + ".",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  python -m sweeps calibrate sweeps/specs/paper-table1-main.yaml "
                              "--missing-only\n"
                              "  python -m sweeps run sweeps/specs/paper-table1-main.yaml --dry-run --gpu H200")
    c.add_argument("specs", nargs="+", metavar="SPEC", help="the sweep specs whose GPU figures to measure")
    c.add_argument("--budget", type=float, default=None, metavar="MINUTES",
                   help="stop after this many minutes, keeping what was measured (run again with --missing-only)")
    c.add_argument("--out", default=None, metavar="DIR", help="where the figures go (default: this user's "
                                                              "calibration folder, which --dry-run reads first)")
    c.add_argument("--missing-only", action="store_true",
                   help="only the figures this GPU has no measurement of yet (yours or the repository's)")
    c.add_argument("--only", nargs="+", default=list(KINDS), choices=KINDS, metavar="KIND",
                   help=f"only these kinds of figure: {', '.join(KINDS)} (default: all)")
    c.add_argument("--set", nargs="*", default=[], action="extend", metavar="KEY=VALUE",
                   help="overrides applied to every trial, as for run (e.g. eval.tf32=true)")
    c.add_argument("--jobs", type=int, default=None,
                   help="processes at once (default: the CPU count, at most 16; fewer where GPU memory is short)")
    c.add_argument("--steps", type=int, default=40, help="steady training (teacher) steps timed per figure")
    c.add_argument("--teacher-warmup", type=int, default=20, metavar="N",
                   help="FixMatch teacher steps run before its steps are timed (default 20)")
    c.add_argument("--eval-n", type=int, default=1000, help="images per evaluation figure")
    c.add_argument("--aa-n", type=int, default=250, help="images per AutoAttack attack figure")
    c.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: the same code on the CPU (tests); its records are never GPU figures")


def check(args) -> None:
    """Options and the device, before anything is measured; each error names its option."""
    for name, low in (("jobs", 1), ("steps", 1), ("teacher_warmup", 0), ("eval_n", 2), ("aa_n", 1)):
        v = getattr(args, name)
        if v is not None and v < low:
            raise UsageError(f"--{name.replace('_', '-')}: {v}; allowed: an integer >= {low}")
    if args.budget is not None and not args.budget > 0:
        raise UsageError(f"--budget: {args.budget}; allowed: minutes > 0")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("calibrate measures this machine's GPU, and no CUDA GPU is visible here (torch "
                             f"{torch.__version__}, CUDA {torch.version.cuda or 'none'}). Run it on the GPU machine "
                             "the sweep will use; --device cpu only tries the code path")


def run_calibrate(args) -> int:
    from ..spec import load_spec

    check(args)
    specs = [load_spec(s, sets=parse_overrides(args.set or [])) for s in args.specs]
    device = device_name(args.device)
    args.jobs = args.jobs or min(os.cpu_count() or 1, 16)
    args.gpu_gib = None
    if args.device == "cuda":
        import torch

        args.gpu_gib = torch.cuda.get_device_properties(0).total_memory / GIB
    measured = Measurements(device, read_records(own=calibration_dir())) if args.missing_only else None
    items = plan(specs, measured, args.only)
    names = ", ".join(s.name for s in specs)
    if not items:
        print(f"calibrate: nothing to measure for {names} on {device}"
              + (" (every figure is measured already)" if args.missing_only else " (CPU trials need no GPU figure)"))
        return 0
    files = out_files(args, device)
    cache = sweep_paths(args.workdir, specs[0].name).compile_cache
    logs = Path(args.workdir) / "runs" / "calibrate" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    logs.mkdir(parents=True, exist_ok=True)
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        with f.open("a") as fh:
            fh.write(json.dumps({"device": device, "calibrate": names, "started": datetime.datetime.now().isoformat(
                timespec="seconds")}) + "\n")

    def write(records: list[dict]) -> None:
        for f in files:
            with f.open("a") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in records)

    n = sum(len(i.keys) for i in items)
    print(f"calibrate {names} on {device}: {n} figure(s) in {len(items)} process(es); logs in {logs}")
    run = Calibration(items, args, cache, logs, write)
    try:
        run.compile_phase()
        run.measure_phase()
    except KeyboardInterrupt:
        print("[calibrate] interrupted: what was measured is kept", file=sys.stderr)
    for line in summary(items):
        print(line)
    missing = [i for i in items if not i.records]
    print(f"calibrate: {n - sum(len(i.keys) for i in missing)} of {n} figure(s) measured in "
          f"{fmt_s(run.elapsed())}; written to {', '.join(map(str, files))}")
    spec_args = " ".join(args.specs)
    if missing:
        print(f"  the rest: python -m sweeps calibrate {spec_args} --missing-only")
    if device != "cpu":
        print(f"  the sweep's cost: python -m sweeps run {args.specs[0]} --dry-run --gpu '{device}'")
    return 0 if not missing else 1

"""How many trial results a second the driver's tracking sustains, and what it costs the driver, on PostgreSQL and
on SQLite.

A sweep's results go through the real Tune callback (sweeps.trials.mlflow_callback.TrackingCallback) and the real
Tracker
into a real `mlflow server --workers 1` on 127.0.0.1 (devtools/servers.py), whose store is a PostgreSQL database (a
throwaway cluster, devtools/servers.PostgresServer) or a SQLite file. The trials are stand-ins for Tune's Trial objects
carrying the real trial settings (sweeps/trials/trial_settings.py: Table 1's grid, seeds added until there are enough
trials), and every result is shaped like the trainable's (`sweeps/trials/trainable.py`: the epoch's metrics, `run_json`,
`repro_json`, the final evaluation and its protocol tags at the last epoch). Three phases per store:

  start      Tune starts every trial (on_trial_start): the run is made, its params, tags and config.json
  epochs     one result per trial per epoch, the trials interleaved (all of them running at once), as fast as
             the tracking takes them (--rate 0: the ceiling) or paced at --rate results a second
  complete   on_trial_complete with two checkpoints per trial (best.pt, last.pt and their .sha256), copied into
             the sweep folder and uploaded through the server's artifact proxy; --big-trials of them at --big-mb
             (WRN-28-5: 146 MB), the rest at --small-mb

Measured: results (and metric values) a second, overall and per tenth of the stream; the driver's CPU seconds (this
process: utime + stime from /proc) and resident memory, per result and per trial; the MLflow server's and the
database's CPU; the time from a result's emission to its row in the store (another process polls the store's
latest_metrics every --poll-ms); artifact bytes a second apart; then the store read back directly: one run per
trial, every epoch metric at every step exactly once, the final metrics once, FINISHED, the checkpoints listed at
their sizes. A tracker that found the server away (and queued) is counted.

    python benchmarks/tracking_load.py                          # full size: 200 trials x 100 epochs x 30 metrics
    python benchmarks/tracking_load.py --trials 500 --epochs 3 --rate 8.33 --big-trials 0 --label paced
    python benchmarks/tracking_load.py --smoke                  # seconds: 3 trials x 3 epochs x 6 metrics

It prints the numbers and writes benchmarks/results/tracking-load-<date>[-label].json (--out), the machine named.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import multiprocessing as mp
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from sweeps.trials.mlflow_callback import TrackingCallback  # noqa: E402
from sweeps.spec import load_spec  # noqa: E402
from sweeps.trials.trial_settings import grid_space  # noqa: E402
from devtools.servers import MlflowServer, PostgresServer, postgres_missing  # noqa: E402

SPEC = ROOT / "sweeps" / "specs" / "paper-table1-main.yaml"
# What the trainer reports every epoch (names from a real sweep's store), padded with more of the same kinds.
REAL_EPOCH_METRICS = ["train/loss", "train/ce", "train/kl_adv", "train/kl_pgd", "val/clean", "val/pgd10",
                      "val/best_pgd10", "sched/eps_max", "sched/lr", "sched/rho", "adv/pgd_linf_max",
                      "adv/adv_linf_mean", "adv/alpha_mean", "adv/alpha_min_share", "adv/alpha_one_share",
                      "perf/epoch_seconds", "perf/images_per_s", "perf/graph_steps"]
FINAL_METRICS = ["test/best/clean", "test/best/pgd10", "test/best/pgd20", "test/last/clean", "test/last/pgd10",
                 "test/last/pgd20", "time/epochs", "time/total_hours"]
PROBE = "train/loss"  # the metric whose latest step the poller watches
EXTRA = {"git_commit": "0" * 40, "git_dirty": False, "lock_sha256": "f" * 64, "teacher_dir": "/shared/teachers",
         "compile_cache": "/shared/compile_cache", "teacher_run_id": "0" * 32}


def epoch_metric_names(n: int) -> list[str]:
    names = REAL_EPOCH_METRICS[:n]
    kinds = ("train/", "val/", "adv/", "perf/")
    i = 0
    while len(names) < n:
        names.append(f"{kinds[i % len(kinds)]}extra_{i}")
        i += 1
    return names


# ---- the trials: stand-ins for Tune's Trial, with the real settings ---------------------------------------------
class BenchTrial:
    """What the callback reads of a Tune Trial: its id, its config (the real shape), its last result, checkpoint."""

    def __init__(self, trial_id: str, config: dict):
        self.trial_id, self.config = trial_id, config
        self.last_result: dict = {}
        self.checkpoint = None
        self.error_file = None


class BenchCheckpoint:
    """ray.tune.Checkpoint's one method the callback uses: a local folder holding the files."""

    def __init__(self, folder: Path):
        self.folder = folder

    @contextlib.contextmanager
    def as_directory(self):
        yield str(self.folder)


def trial_configs(n: int, epochs: int) -> list[dict]:
    """n trial configs as Tune makes them of Table 1's grid stage (15 rows, seeds added until there are n)."""
    from ray.tune.search.variant_generator import generate_variants

    rows = 15
    # a few epochs: the spec's lr milestones would collide when rescaled (a smoke run), so none
    sets = {"optim.lr_milestones": [], "optim.lr_factors": []} if epochs < 10 else None
    spec = load_spec(SPEC, epochs=epochs, seeds=list(range(max(1, -(-n // rows)))), sets=sets)
    configs = [v["config"] for _, v in generate_variants({"config": grid_space(spec, spec.trials(), EXTRA)})]
    return configs[:n]


def checkpoint_folder(root: Path, mb: float) -> Path:
    """best.pt and last.pt of `mb` MB each (random bytes: nothing compresses them), with their .sha256."""
    folder = root / f"ckpt-{mb:g}MB"
    folder.mkdir(parents=True, exist_ok=True)
    size = int(mb * 1e6)
    for name in ("best.pt", "last.pt"):
        with open(folder / name, "wb") as f:
            left = size
            while left:
                block = os.urandom(min(left, 1 << 24))
                f.write(block)
                left -= len(block)
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        (folder / f"{name}.sha256").write_text(digest + "\n")
    (folder / "trial.log").write_text("epoch 1 ...\n")
    return folder


def result_of(trial: BenchTrial, epoch: int, epochs: int, names: list[str], t0: float) -> dict:
    """One report as the trainable makes it (sweeps/trials/trainable.py), with Tune's own keys."""
    rnd = (hash((trial.trial_id, epoch)) % 10_000) / 10_000
    result = {name: rnd + i + epoch / 1000 for i, name in enumerate(names)}
    repro = {"git_commit": EXTRA["git_commit"], "git_dirty": False, "lock_sha256": EXTRA["lock_sha256"],
             "torch": "2.14.1+cu130", "cuda": "13.0", "cuda_available": True, "driver": "580.65.06",
             "gpu": "NVIDIA A10G", "gpu_share": 1, "threads": 4, "split_hash": "70ac399c428ff4ff",
             "precision": "bf16", "channels_last": True, "compile": "max-autotune-no-cudagraphs",
             "cudnn_benchmark": True, "graph_mode": "on", "teacher_run_id": EXTRA["teacher_run_id"],
             "teacher_split_hash": "70ac399c428ff4ff", "teacher_verified": True,
             "dataset_checksums": {"cifar10": "ab" * 8}, "node": "ip-10-0-0-12", "pid": 4242,
             "started_at": t0, "start_to_first_step_s": 21.0, "cuda_peak_mib": 9000.0}
    result.update({"epoch": epoch, "training_iteration": epoch, "time_this_iter_s": 60.0, "trial_id": trial.trial_id,
                   "run_json": json.dumps({"key": trial.trial_id}), "repro_json": json.dumps(repro),
                   "work_dir": f"/shared/tune/{trial.trial_id}/work"})
    if epoch == epochs:
        result.update({name: 50.0 + i for i, name in enumerate(FINAL_METRICS)})
        for ckpt in ("best", "last"):
            for steps in (10, 20):
                result[f"protocol/{ckpt}/pgd{steps}"] = json.dumps({"checkpoint": ckpt, "steps": steps, "eps": 8 / 255})
    return result


# ---- measuring ----------------------------------------------------------------------------------------------------
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        except (OSError, IndexError):
            pass
    return total


def descendants(root_pid: int) -> list[int]:
    """root_pid and every process below it (e.g. the MLflow server's workers, PostgreSQL's backends)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            rest = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(rest[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    out, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


class ProcessGroup:
    """CPU seconds of a process tree as it is when sampled: a process that ended in between is missed (PostgreSQL's
    backends live as long as the server's pooled connections; the poller's own backend counts as the database's)."""

    def __init__(self, root_pid: int | None):
        self.root_pid = root_pid

    def cpu(self) -> float:
        return cpu_seconds(descendants(self.root_pid)) if self.root_pid else 0.0


def rss_mb(pid: int | str = "self") -> tuple[float, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    get = lambda key: int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith(key))) / 1024  # noqa: E731
    return get("VmRSS:"), get("VmHWM:")


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    mem = int(next(ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines()
                   if ln.startswith("MemTotal:"))) / 2**20
    import mlflow
    import sqlalchemy

    pg = None
    from devtools.servers import postgres_bin_dir

    if postgres_bin_dir():
        import subprocess

        pg = subprocess.run([str(postgres_bin_dir() / "postgres"), "--version"], capture_output=True,
                            text=True).stdout.strip()
    return {"host": socket.gethostname(), "cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem, 1),
            "os": platform.platform(), "python": platform.python_version(), "mlflow": mlflow.__version__,
            "sqlalchemy": sqlalchemy.__version__, "sqlite": sqlite3.sqlite_version, "postgres": pg,
            "loadavg_at_start": os.getloadavg()}


def poll_store(store: dict, out, stop, interval: float) -> None:
    """Another process: every `interval` s, each run's latest step of PROBE; sends {(run, step): first seen}."""
    seen: dict[tuple[str, int], float] = {}
    latest: dict[str, int] = {}
    query = "SELECT run_uuid, step FROM latest_metrics WHERE key = %s" if store["kind"] == "postgres" else \
        "SELECT run_uuid, step FROM latest_metrics WHERE key = ?"
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                if store["kind"] == "postgres":
                    import psycopg2

                    conn = psycopg2.connect(store["dsn"])
                    conn.autocommit = True
                else:
                    conn = sqlite3.connect(f"file:{store['path']}?mode=ro", uri=True, timeout=5)
            cur = conn.cursor()
            cur.execute(query, (PROBE,))
            now = time.monotonic()
            for run, step in cur.fetchall():
                for s in range(latest.get(run, 0) + 1, int(step) + 1):
                    seen[(run, s)] = now
                latest[run] = max(latest.get(run, 0), int(step))
        except Exception:  # the table may not exist yet; a locked SQLite: try again
            conn = None
        time.sleep(interval)
    out.send(seen)


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {"n": len(values), "p50": pick(0.5), "p95": pick(0.95), "p99": pick(0.99), "max": values[-1],
            "mean": statistics.fmean(values)}


# ---- the store read back --------------------------------------------------------------------------------------------
def read_back(store: dict, server_url: str, runs: dict[str, str], names: list[str], epochs: int,
              sizes: dict[str, int]) -> dict:
    """The store itself: one run per key, every epoch metric at steps 1..epochs once, final metrics once, status."""
    from mlflow.tracking import MlflowClient

    q_runs = ("SELECT t.value, r.run_uuid, r.status FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
              "WHERE t.key = 'ssat.key'")
    q_metrics = ("SELECT run_uuid, key, count(*), count(DISTINCT step), min(step), max(step) FROM metrics "
                 "GROUP BY run_uuid, key")
    if store["kind"] == "postgres":
        import psycopg2

        conn = psycopg2.connect(store["dsn"])
    else:
        conn = sqlite3.connect(store["path"])
    cur = conn.cursor()
    cur.execute(q_runs)
    by_key: dict[str, list[tuple[str, str]]] = {}
    for key, rid, status in cur.fetchall():
        by_key.setdefault(key, []).append((rid, status))
    cur.execute(q_metrics)
    counts = {(r, k): (n, d, lo, hi) for r, k, n, d, lo, hi in cur.fetchall()}
    conn.close()
    problems = []
    for key, rid in runs.items():
        found = by_key.get(key, [])
        if len(found) != 1:
            problems.append(f"{key}: {len(found)} runs")
            continue
        if found[0][1] != "FINISHED":
            problems.append(f"{key}: {found[0][1]}")
        for name in names:
            got = counts.get((rid, name))
            if got != (epochs, epochs, 1, epochs):
                problems.append(f"{key} {name}: (rows, steps, first, last) {got}, want {(epochs, epochs, 1, epochs)}")
        for name in FINAL_METRICS:
            if counts.get((rid, name), (0,))[0] != 1:
                problems.append(f"{key} {name}: {counts.get((rid, name))} rows, want 1")
    client = MlflowClient(server_url)
    listed = 0
    for key, rid in runs.items():
        have = {f.path: f.file_size for f in client.list_artifacts(rid, "checkpoints")}
        want = {f"checkpoints/{n}": s for n, s in sizes[key].items()}
        listed += len(have)
        if have != want:
            problems.append(f"{key} checkpoints: {have} != {want}")
    return {"complete": not problems, "problems": problems[:20], "n_problems": len(problems),
            "runs": len(by_key), "metric_rows": sum(v[0] for v in counts.values()), "checkpoints_listed": listed}


# ---- one store ------------------------------------------------------------------------------------------------------
def run_store(kind: str, args, work: Path, configs: list[dict], names: list[str]) -> dict:
    print(f"\n== {kind}: {len(configs)} trials x {args.epochs} epochs x {len(names)} metrics", flush=True)
    root = work / kind
    pg = None
    if kind == "postgres":
        pg = PostgresServer().start()
        backend = pg.create_database("mlflow")
        store = {"kind": kind, "dsn": f"host=127.0.0.1 port={pg.port} user={pg.user} dbname=mlflow"}
    else:
        backend = f"sqlite:///{root / 'mlflow.db'}"
        store = {"kind": kind, "path": str(root / "mlflow.db")}
    srv = MlflowServer(root / "server", backend_uri=backend).start()
    sweep_dir = root / "sweep"
    outages = []
    try:
        cb = TrackingCallback(srv.url, "tracking-load", str(sweep_dir), None)
        t = cb.tracker
        t.log = lambda line: (outages.append(line), print(line, flush=True))
        t.ensure_run("tracking-load-sweep", {"ssat.kind": "sweep"}, {"spec": SPEC.name}, name="tracking-load")
        cb.parent_run_id = t.find_run("tracking-load-sweep")
        trials = [BenchTrial(f"{i:05d}_{i:05d}", c) for i, c in enumerate(configs)]
        server, db = ProcessGroup(srv.proc.pid), ProcessGroup(pg.pid if pg else None)

        def sample() -> dict:
            rss, hwm = rss_mb()
            return {"t": time.monotonic(), "driver_cpu": cpu_seconds([os.getpid()]), "server_cpu": server.cpu(),
                    "db_cpu": db.cpu(), "rss_mb": rss, "hwm_mb": hwm}

        def phase(a: dict, b: dict, n: int, unit: str) -> dict:
            wall = b["t"] - a["t"]
            out = {"wall_s": wall, unit: n, f"{unit}_per_s": n / wall if wall else None}
            for who in ("driver", "server", "db"):
                cpu = b[f"{who}_cpu"] - a[f"{who}_cpu"]
                out[f"{who}_cpu_s"] = cpu
                out[f"{who}_cores"] = cpu / wall if wall else None
                out[f"{who}_cpu_ms_per_{unit[:-1]}"] = 1000 * cpu / n if n else None
            out["rss_mb_start"], out["rss_mb_end"] = a["rss_mb"], b["rss_mb"]
            return out

        # the poller: another process, so its reads cost the driver nothing
        recv, send = mp.Pipe(duplex=False)
        stop = mp.Event()
        poller = mp.Process(target=poll_store, args=(store, send, stop, args.poll_ms / 1000), daemon=True)
        poller.start()

        s0 = sample()
        for trial in trials:
            cb.on_trial_start(0, trials, trial)
        s1 = sample()
        emitted: dict[tuple[str, int], float] = {}
        deciles, n_results, t_begin = [], 0, time.monotonic()
        total = len(trials) * args.epochs
        gap = 1.0 / args.rate if args.rate else 0.0
        next_at = time.monotonic()
        for epoch in range(1, args.epochs + 1):
            for trial in trials:
                if gap:
                    next_at += gap
                    if (wait := next_at - time.monotonic()) > 0:
                        time.sleep(wait)
                result = result_of(trial, epoch, args.epochs, names, t_begin)
                emitted[(trial.trial_id, epoch)] = time.monotonic()
                cb.on_trial_result(0, trials, trial, result)
                trial.last_result = result
                n_results += 1
                if n_results % max(1, total // 10) == 0 or n_results == total:
                    deciles.append((n_results, time.monotonic()))
        s2 = sample()
        big_dir = checkpoint_folder(work / "ckpts", args.big_mb) if args.big_trials else None
        small_dir = checkpoint_folder(work / "ckpts", args.small_mb)
        sizes, up_bytes = {}, 0
        s2b = sample()
        for i, trial in enumerate(trials):
            folder = big_dir if i < args.big_trials else small_dir
            trial.checkpoint = BenchCheckpoint(folder)
            cb.on_trial_complete(0, trials, trial)
            key = cb._trials[trial.trial_id][1]["record"].key
            sizes[key] = {n: (folder / n).stat().st_size for n in ("best.pt", "best.pt.sha256", "last.pt",
                                                                       "last.pt.sha256")}
            up_bytes += sum(sizes[key].values())
        cb.on_experiment_end(trials)
        s3 = sample()
        time.sleep(max(0.5, 3 * args.poll_ms / 1000))
        stop.set()
        seen = recv.recv()
        poller.join(10)

        keys = {trial.trial_id: cb._trials[trial.trial_id][1]["record"].key for trial in trials}
        runs = {keys[tid]: t.runs[keys[tid]] for tid in keys}
        rid_of = {tid: runs[keys[tid]] for tid in keys}
        latency = [seen[(rid_of[tid], ep)] - at for (tid, ep), at in emitted.items() if (rid_of[tid], ep) in seen]
        rates, prev = [], (0, t_begin)
        for n, at in deciles:
            rates.append((n - prev[0]) / (at - prev[1]) if at > prev[1] else None)
            prev = (n, at)
        epochs_phase = phase(s1, s2, n_results, "results")
        epochs_phase.update({"metric_values": n_results * len(names),
                             "metric_values_per_s": n_results * len(names) / epochs_phase["wall_s"],
                             "results_per_s_by_tenth": rates, "paced_at_results_per_s": args.rate or None,
                             "latency_s": percentiles(latency), "latency_unseen": len(emitted) - len(latency)})
        complete = phase(s2b, s3, len(trials), "trials")
        complete.update({"bytes": up_bytes, "MB_per_s": up_bytes / 1e6 / complete["wall_s"],
                         "big_trials": args.big_trials, "big_mb": args.big_mb, "small_mb": args.small_mb})
        start = phase(s0, s1, len(trials), "trials")
        readback = read_back(store, srv.url, runs, names, args.epochs, sizes)
        out = {"store": kind, "backend": backend.split("@")[-1] if pg else "sqlite (file on the local disk)",
               "start": start, "epochs": epochs_phase, "complete": complete, "readback": readback,
               "driver_rss_mb_per_trial": (s2["rss_mb"] - s0["rss_mb"]) / len(trials), "driver_hwm_mb": s3["hwm_mb"],
               "tracker_outages": sum("unavailable" in line for line in outages),
               "tracker_left_queued": len(t.queue), "spooled": (sweep_dir / "tracking_spool.jsonl").exists()}
        report(out)
        return out
    finally:
        srv.stop()
        if pg:
            pg.cleanup()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def report(r: dict) -> None:
    e, c, s = r["epochs"], r["complete"], r["start"]
    lat = e["latency_s"]
    print(f"  start     {s['trials']} trials in {s['wall_s']:.1f} s: {s['trials_per_s']:.1f}/s, "
          f"driver {s['driver_cpu_ms_per_trial']:.1f} ms CPU per trial")
    print(f"  epochs    {e['results']} results in {e['wall_s']:.1f} s: {e['results_per_s']:.1f} results/s "
          f"({e['metric_values_per_s']:.0f} metric values/s); by tenth: "
          + " ".join(f"{x:.1f}" for x in e["results_per_s_by_tenth"] if x))
    print(f"            driver {e['driver_cores']:.2f} cores ({e['driver_cpu_ms_per_result']:.2f} ms CPU per result), "
          f"server {e['server_cores']:.2f} cores, database {e['db_cores']:.2f} cores")
    if lat:
        print(f"            result -> row in the store: p50 {lat['p50'] * 1000:.0f} ms, "
              f"p95 {lat['p95'] * 1000:.0f} ms, max {lat['max'] * 1000:.0f} ms ({lat['n']} seen, "
              f"{e['latency_unseen']} not)")
    print(f"  complete  {c['trials']} trials, {c['bytes'] / 1e6:.0f} MB of checkpoints in {c['wall_s']:.1f} s: "
          f"{c['MB_per_s']:.1f} MB/s")
    print(f"  driver    RSS {e['rss_mb_end']:.0f} MB ({r['driver_rss_mb_per_trial'] * 1000:.0f} kB per trial), "
          f"peak {r['driver_hwm_mb']:.0f} MB; tracker outages {r['tracker_outages']}, left queued "
          f"{r['tracker_left_queued']}")
    rb = r["readback"]
    print(f"  read back {'complete' if rb['complete'] else 'INCOMPLETE'}: {rb['runs']} runs, "
          f"{rb['metric_rows']} metric rows, {rb['checkpoints_listed']} checkpoint files"
          + ("" if rb["complete"] else f"; {rb['problems'][:3]}"),
          flush=True)


def run_concurrently(args, argv: list[str]) -> int:
    """One process per store, started together; their JSON merged into one (noting that they ran together)."""
    import subprocess

    rest = [a for a in argv if a != "--concurrently"]
    drop = {"--stores", "--out", "--label"}
    cleaned, skip = [], False
    for a in rest:
        if skip and not a.startswith("--"):
            continue
        skip = a in drop
        if not skip:
            cleaned.append(a)
    tmp = Path(tempfile.mkdtemp(prefix="ssat-load-json-"))
    procs = {s: subprocess.Popen([sys.executable, __file__, *cleaned, "--stores", s, "--out", str(tmp / f"{s}.json")])
             for s in args.stores}
    rcs = {s: p.wait() for s, p in procs.items()}
    parts = [json.loads((tmp / f"{s}.json").read_text()) for s in args.stores if (tmp / f"{s}.json").exists()]
    if not parts:
        return 1
    merged = parts[0]
    merged["stores"] = [r for part in parts for r in part["stores"]]
    merged["machine"]["loadavg_at_end"] = max((p["machine"]["loadavg_at_end"] for p in parts), key=lambda x: x[0])
    merged["args"]["stores"], merged["concurrently"] = args.stores, True
    merged["note"] = ("the stores were measured at the same time, one driver process each, on one machine: each also "
                      "carried the other's load")
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / \
        f"tracking-load-{merged['date']}{'-' + args.label if args.label else ''}.json"
    out.write_text(json.dumps(merged, indent=1, default=str) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nwrote {out} (stores measured concurrently)")
    return max(rcs.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stores", nargs="+", default=["postgres", "sqlite"], choices=["postgres", "sqlite"])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--metrics", type=int, default=30, help="epoch metrics per result")
    p.add_argument("--big-trials", type=int, default=10, help="trials whose checkpoints are --big-mb each")
    p.add_argument("--big-mb", type=float, default=146.0, help="WRN-28-5's fp32 weights: 146 MB")
    p.add_argument("--small-mb", type=float, default=1.0)
    p.add_argument("--rate", type=float, default=0.0, help="results a second to pace at (0: as fast as it goes)")
    p.add_argument("--poll-ms", type=float, default=100.0)
    p.add_argument("--smoke", action="store_true", help="3 trials x 3 epochs x 6 metrics, 1 MB and 0.1 MB checkpoints")
    p.add_argument("--label", default="", help="a suffix of the JSON's name (e.g. paced)")
    p.add_argument("--out", default=None, help="default: benchmarks/results/tracking-load-<date>[-label].json")
    p.add_argument("--keep", action="store_true", help="keep the stores (in a temporary folder)")
    p.add_argument("--concurrently", action="store_true",
                   help="measure the stores at the same time, one process each (the same background load for both; "
                        "each also loads the other), and merge their JSON")
    args = p.parse_args(argv)
    if args.concurrently and len(args.stores) > 1:
        return run_concurrently(args, argv if argv is not None else sys.argv[1:])
    if args.smoke:
        args.trials, args.epochs, args.metrics, args.big_trials, args.big_mb, args.small_mb = 3, 3, 6, 1, 1.0, 0.1
    if "postgres" in args.stores and (why := postgres_missing()):
        print(f"postgres left out: {why}")
        args.stores = [s for s in args.stores if s != "postgres"]
    names = epoch_metric_names(args.metrics)
    configs = trial_configs(args.trials, args.epochs)
    info = {"machine": machine(), "date": dt.date.today().isoformat(),
            "args": {k: v for k, v in vars(args).items() if k not in ("out", "keep")},
            "target": {"trials": 500, "epoch_every_s": 60, "results_per_s": 500 / 60,
                       "metric_values_per_s": 500 / 60 * args.metrics, "driver_cores": 1.0}, "stores": []}
    print(f"machine: {info['machine']['cpu']}, {info['machine']['cores']} cores, {info['machine']['memory_gib']} GiB; "
          f"load {info['machine']['loadavg_at_start']}")
    with tempfile.TemporaryDirectory(prefix="ssat-load-", dir="/tmp") as tmp:
        for kind in args.stores:
            r = run_store(kind, args, Path(tmp), configs, names)
            e = r["epochs"]
            r["target_check"] = {
                "ceiling_results_per_s": None if args.rate else e["results_per_s"],
                "driver_cores_at_target": e["driver_cpu_ms_per_result"] / 1000 * info["target"]["results_per_s"],
                "sustains_target": (e["results_per_s"] >= 0.98 * info["target"]["results_per_s"]
                                    and r["readback"]["complete"])}
            info["stores"].append(r)
    info["machine"]["loadavg_at_end"] = os.getloadavg()
    out = Path(args.out) if args.out else \
        ROOT / "benchmarks" / "results" / f"tracking-load-{info['date']}{'-' + args.label if args.label else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(info, indent=1, default=str) + "\n")
    print(f"\nwrote {out}")
    for r in info["stores"]:
        tc = r["target_check"]
        print(f"  {r['store']:<9} {r['epochs']['results_per_s']:.1f} results/s "
              f"({'ceiling' if not args.rate else f'paced at {args.rate:g}'}); driver at the target "
              f"({info['target']['results_per_s']:.2f} results/s): {tc['driver_cores_at_target']:.3f} cores; "
              f"read back {'complete' if r['readback']['complete'] else 'INCOMPLETE'}")
    return 0 if all(r["readback"]["complete"] for r in info["stores"]) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The sweep driver: validate, make the teacher, run the grid (or search then confirm) on Ray, track, report.

Stages of `run`: spec validation -> tracking check -> teacher per split (on the driver, one writer) ->
Ray Tune phase(s) -> completeness check. Everything a later `resume` needs is in <sweep dir>/sweep.json.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ssat.config import Config
from ssat.schedules import epsilon_schedule, lr_at, rho_schedule

from .spec import Spec

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class SweepError(RuntimeError):
    """A sweep that cannot start or did not finish; the message says what to do."""


@dataclass
class Paths:
    workdir: Path
    name: str

    @property
    def sweep_dir(self) -> Path:
        return self.workdir / "runs" / "sweeps" / self.name

    @property
    def tune_dir(self) -> Path:
        return self.sweep_dir / "tune"

    @property
    def state(self) -> Path:
        return self.sweep_dir / "sweep.json"

    @property
    def teacher_dir(self) -> Path:
        return Path(os.environ.get("SSAT_TEACHER_DIR") or self.workdir / "runs" / "teachers").resolve()


def sweep_paths(workdir: str | Path, name: str) -> Paths:
    """Paths of a sweep; the name was validated (no '/', no '..'), and the result must stay inside workdir."""
    from .spec import NAME_RE

    p = Paths(Path(workdir).resolve(), name)
    root = p.workdir / "runs" / "sweeps"
    if not NAME_RE.fullmatch(name) or ".." in name or p.sweep_dir.resolve().parent != root:
        raise SweepError(f"sweep name {name!r} escapes the working folder; allowed: 1-100 letters, digits, '.', "
                         f"'_' or '-' (it must stay inside {root})")
    return p


def code_version() -> dict:
    def git(*args):
        try:
            r = subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, timeout=10)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None

    import hashlib

    lock = PROJECT_ROOT / "requirements.lock"
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": git("rev-parse", "HEAD"), "git_dirty": None if status is None else bool(status),
            "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock.exists() else None}


# ---- dry run ------------------------------------------------------------------------------------
# Minutes per epoch measured by the paper (Table 8, one GPU) for the union methods / AWR, per (dataset, model).
PAPER_MIN_PER_EPOCH = {("cifar10", "wrn-28-5"): (3.06, 3.87), ("svhn", "wrn-28-2"): (2.00, 4.45),
                       ("cifar100", "wrn-28-8"): (5.64, 4.45)}


def gpu_hours(cfg: Config) -> float | None:
    """Estimated GPU-hours of one trial with a whole GPU, from the paper's per-epoch times (None: no figure)."""
    fig = PAPER_MIN_PER_EPOCH.get((cfg.data.dataset, cfg.model.name))
    if fig is None:
        return None
    return cfg.optim.epochs * fig[1 if cfg.is_awr else 0] / 60


def schedule_table(cfg: Config) -> dict:
    e = range(1, cfg.optim.epochs + 1)
    a, m, o = cfg.attack, cfg.method, cfg.optim
    return {"eps_max": [round(epsilon_schedule(a.schedule, i, eps=cfg.eps, t=a.t, gamma=a.gamma), 6) for i in e],
            "rho": [rho_schedule(i, m.rho0, m.rho_double_epoch) for i in e],
            "lr": [lr_at(i, o.lr, o.lr_milestones, o.lr_factors) for i in e]}


def dry_run(spec: Spec, out=print) -> None:
    trials = spec.trials() if spec.grid else []
    out(f"sweep {spec.name}: preset {spec.preset}, stage {spec.stage}, {len(trials) or spec.search['num_samples']} "
        f"trial(s), resources per trial {spec.resources}, max concurrent {spec.max_concurrent}")
    total = 0.0
    configs = [(t.row, t.seed, t.config) for t in trials] or [("search base", spec.seeds[0], base_config(spec))]
    for row, seed, cfg in configs:
        h = gpu_hours(cfg)
        total += h or 0.0
        out(f"- row {row!r} seed {seed} key {cfg.config_hash()}: "
            f"GPU-hours {'n/a (no benchmark figure for this model)' if h is None else f'{h:.2f}'}")
        out("  config " + json.dumps(cfg.to_flat(), sort_keys=True))
        for k, v in schedule_table(cfg).items():
            out(f"  {k:8s} " + " ".join(f"{x:g}" for x in v))
    if spec.search:
        out(f"search space {json.dumps(spec.search['space'])}; confirm {spec.search['confirm']}")
        per = gpu_hours(base_config(spec)) or 0.0
        total = per * (spec.search["num_samples"] + spec.search["confirm"]["top_k"] * len(spec.search["confirm"]["seeds"]))
    out(f"estimated GPU-hours (whole-GPU trials, the paper's per-epoch times): {total:.1f}; nothing was started")


def base_config(spec: Spec) -> Config:
    return spec.config_for({}, spec.seeds[0])


def spec_configs(spec: Spec) -> list[Config]:
    """Every grid trial's config, or a search's base config: what the data and teacher checks need."""
    return [t.config for t in spec.trials()] if spec.grid else [base_config(spec)]


# ---- resources ------------------------------------------------------------------------------------
def autoscaler_gpu_types() -> list[str]:
    """Node types of a `ray up` cluster's autoscaler config that provide GPUs (the head keeps it at home)."""
    import yaml

    path = Path(os.environ.get("SSAT_AUTOSCALER_CONFIG", Path.home() / "ray_bootstrap_config.yaml"))
    if not path.exists():
        return []
    cfg = yaml.safe_load(path.read_text()) or {}
    return [n for n, t in (cfg.get("available_node_types") or {}).items() if (t.get("resources") or {}).get("GPU", 0) > 0]


def check_gpu(spec: Spec, gpus_now: float | None = None) -> None:
    """A GPU share where no node can ever provide a GPU would leave trials PENDING forever: refuse early.

    gpus_now: the cluster's GPUs (default: asked from Ray); the autoscaler's node types count too.
    """
    if not spec.resources["gpu"]:
        return
    if gpus_now is None:
        import ray

        gpus_now = ray.cluster_resources().get("GPU", 0)
    if gpus_now > 0 or autoscaler_gpu_types():
        return
    raise SweepError(f"resources.gpu = {spec.resources['gpu']} but this Ray cluster has no GPU and no autoscaler node "
                     "type that provides one, so trials would wait forever. Add --cpu-only to train on CPUs, or "
                     "start a cluster with GPU workers (ray up ray_cluster.yaml).")


def init_ray(address: str | None) -> None:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        import torch

        ray.init(address="local", num_cpus=os.cpu_count(), num_gpus=torch.cuda.device_count(),
                 include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                 _temp_dir=os.environ.get("SSAT_RAY_TMPDIR"))


# ---- teacher stage ---------------------------------------------------------------------------------
def teacher_stage(configs: list[Config], tracker, sweep: str, teacher_dir: Path, log=print) -> dict[str, str]:
    """Make (or find) one teacher per split on the driver before any trial starts; log its run."""
    from ssat.datasets import split_for
    from ssat.teacher import ensure_teacher, teacher_key
    from ssat.train import needs_teacher

    runs, done, seen = {}, set(), set()
    for cfg in configs:
        # configs that share data, teacher and architecture share a split and a teacher: load the data once
        same = json.dumps([cfg.to_dict()["data"], cfg.to_dict()["teacher"], cfg.model.name], sort_keys=True)
        if not needs_teacher(cfg) or same in seen:
            continue
        seen.add(same)
        cfg = cfg.replace(**{"data.teacher_dir": str(teacher_dir)})
        _, split = split_for(cfg)
        tkey = teacher_key(cfg, split)
        if tkey in done:
            continue
        done.add(tkey)
        t0 = time.perf_counter()
        path = ensure_teacher(cfg, log=log)
        log(f"[teacher] {cfg.data.dataset} split {split.hash}: {path} ({time.perf_counter() - t0:.1f} s)")
        runs[split.hash] = log_teacher_run(tracker, sweep, cfg, split, path, tkey)
    return runs


def log_teacher_run(tracker, sweep: str, cfg: Config, split, path: Path, tkey: str) -> str:
    from ssat.storage import load_verified

    prov = load_verified(path).get("provenance", {})
    key = f"{sweep}-teacher-{split.hash}-{tkey}"
    tracker.ensure_run(key, {"ssat.kind": "teacher", "ssat.sweep": sweep, "ssat.table": "main", "ssat.row": "FixMatch",
                             "ssat.dataset": cfg.data.dataset, "ssat.split_hash": split.hash,
                             "ssat.column_group": f"{cfg.data.dataset}/{cfg.teacher.model or cfg.model.name}",
                             "ssat.status": "FINISHED"},
                       {f"teacher.{k}": v for k, v in cfg.to_dict()["teacher"].items()} |
                       {"dataset": cfg.data.dataset, "split_seed": cfg.data.split_seed, "model": cfg.teacher.model or cfg.model.name},
                       name=f"teacher-{cfg.data.dataset}-{split.hash}")
    metrics = {k: v for k, v in prov.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    test = prov.get("test") or {}
    tm, tt = {}, {}
    if test:
        from ssat.evaluate import flatten_results

        tm, tt = flatten_results({"teacher": test})
    tracker.log_final(key, {**{f"teacher/{k}": v for k, v in metrics.items()}, **tm}, tt, 0)
    side = path.parent / "provenance.json"
    side.write_text(json.dumps(prov, indent=1, default=str))
    tracker.log_artifact(key, side, None)
    tracker.end(key, "FINISHED")
    tracker.drain()
    return tracker.find_run(key) or ""

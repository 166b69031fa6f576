"""The Ray cluster a sweep runs on: start or join it, and refuse GPU shares that no node can ever provide."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import SweepError
from ..spec import Spec
from ..trials.ray_private import keep_sigterm_handler, loopback_node, own_sessions


def autoscaler_gpu_types() -> list[str]:
    """Node types of a `ray up` cluster's autoscaler config that provide GPUs (the head keeps it at home)."""
    import yaml

    path = Path(os.environ.get("SSAT_AUTOSCALER_CONFIG", Path.home() / "ray_bootstrap_config.yaml"))
    if not path.exists():
        return []
    cfg = yaml.safe_load(path.read_text()) or {}
    return [n for n, t in (cfg.get("available_node_types") or {}).items()
            if (t.get("resources") or {}).get("GPU", 0) > 0]


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
    """Join the cluster at `address`, or start a local Ray whose every process listens on 127.0.0.1 only (the
    dashboard, off by default, too: SSAT_RAY_DASHBOARD=1 turns it on, on 127.0.0.1:8265). The caller's SIGTERM
    handler stays in place all along (`keep_sigterm_handler`), and a local Ray's processes run in sessions of their
    own (`own_sessions`)."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        return
    with keep_sigterm_handler():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            _init_local(ray)


def dashboard_wanted() -> bool:
    return os.environ.get("SSAT_RAY_DASHBOARD", "0").strip().lower() in ("1", "true", "yes", "on")


def _init_local(ray) -> None:
    import torch

    # SSAT_LOGICAL_CPUS/GPUS: what this local Ray declares instead of the machine's own (a CPU machine then
    # schedules GPU shares as a GPU machine would: the CPU smoke of benchmarks/device_run.sh, tests)
    cpus = int(os.environ.get("SSAT_LOGICAL_CPUS") or os.cpu_count())
    gpus = float(os.environ.get("SSAT_LOGICAL_GPUS") or torch.cuda.device_count())
    with loopback_node(), own_sessions():
        ctx = ray.init(address="local", num_cpus=cpus, num_gpus=gpus, include_dashboard=dashboard_wanted(),
                 dashboard_host="127.0.0.1", _node_ip_address="127.0.0.1", log_to_driver=False,
                 _temp_dir=os.environ.get("SSAT_RAY_TMPDIR"))
    if ctx.dashboard_url:
        print(f"[ray] dashboard: http://{ctx.dashboard_url} (this machine only; from another one: "
              "ssh -L 8265:127.0.0.1:8265 THIS_HOST, then http://127.0.0.1:8265)", flush=True)

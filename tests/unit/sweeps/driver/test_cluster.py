"""How the sweep starts its local Ray: every process on 127.0.0.1 (the slow tier measures the sockets of a real
one), the dashboard only when asked for, and the driver's own SIGTERM handler kept."""
import os
import signal

import pytest
import ray
from ray._private import services

from sweeps.driver import cluster as resources
def test_inside_loopback_node_127_0_0_1_stays_the_node_address():
    resolve = services.resolve_ip_for_localhost  # the name Ray 2.60's init resolves the node address with
    with resources.loopback_node():
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert services.resolve_ip_for_localhost is resolve
    with pytest.raises(RuntimeError), resources.loopback_node():
        raise RuntimeError("ray.init failed")
    assert services.resolve_ip_for_localhost is resolve


@pytest.mark.parametrize("value, on", [(None, False), ("0", False), ("", False), ("1", True), ("yes", True),
                                       ("On", True)])
def test_the_dashboard_is_off_unless_asked_for(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("SSAT_RAY_DASHBOARD", raising=False)
    else:
        monkeypatch.setenv("SSAT_RAY_DASHBOARD", value)
    assert resources.dashboard_wanted() is on


def test_a_local_ray_is_started_on_loopback_and_the_drivers_sigterm_handler_stays(monkeypatch):
    seen = {}

    def init(**kwargs):  # what ray.init does to SIGTERM, and what it was asked
        seen.update(kwargs, node=services.resolve_ip_for_localhost("127.0.0.1"))
        signal.signal(signal.SIGTERM, lambda s, f: None)
        return type("Context", (), {"dashboard_url": None})()

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.delenv("SSAT_RAY_DASHBOARD", raising=False)
    ours = signal.signal(signal.SIGTERM, lambda s, f: None)
    try:
        mine = signal.getsignal(signal.SIGTERM)
        resources.init_ray(None)
        assert signal.getsignal(signal.SIGTERM) is mine
        assert (seen["address"], seen["_node_ip_address"], seen["node"]) == ("local", "127.0.0.1", "127.0.0.1")
        assert seen["include_dashboard"] is False and seen["dashboard_host"] == "127.0.0.1"
        resources.init_ray("10.0.0.1:6379")
        assert seen["address"] == "10.0.0.1:6379" and signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, ours)


def test_a_local_ray_declares_the_logical_resources_and_temp_dir_asked_for(monkeypatch, tmp_path, capsys):
    import io
    import sys

    seen = {}

    def init(**kwargs):
        seen.clear()
        seen.update(kwargs)
        return type("Context", (), {"dashboard_url": "127.0.0.1:8265" if kwargs.get("include_dashboard") else None})()

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setenv("SSAT_LOGICAL_CPUS", "3")
    monkeypatch.setenv("SSAT_LOGICAL_GPUS", "0.5")
    monkeypatch.setenv("SSAT_RAY_TMPDIR", str(tmp_path))
    monkeypatch.setenv("SSAT_RAY_DASHBOARD", "true")
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)

    class Console(io.StringIO):  # shows a line only once flushed, as a pipe to a log does
        shown = ""

        def flush(self):
            self.shown = self.getvalue()

    console = Console()
    monkeypatch.setattr(sys, "stdout", console)
    resources.init_ray(None)
    assert seen == {"address": "local", "num_cpus": 3, "num_gpus": 0.5, "include_dashboard": True,
                    "dashboard_host": "127.0.0.1", "_node_ip_address": "127.0.0.1", "log_to_driver": False,
                    "_temp_dir": str(tmp_path)}
    assert console.shown == ("[ray] dashboard: http://127.0.0.1:8265 (this machine only; from another one: ssh -L "
                             "8265:127.0.0.1:8265 THIS_HOST, then http://127.0.0.1:8265)\n")
    assert os.environ["RAY_AUTH_MODE"] == "disabled"  # a local Ray needs no token (it listens on loopback only)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # the user's choice stays
    for var in ("SSAT_LOGICAL_CPUS", "SSAT_LOGICAL_GPUS", "SSAT_RAY_TMPDIR"):
        monkeypatch.delenv(var)
    resources.init_ray("10.0.0.1:6379")
    assert seen == {"address": "10.0.0.1:6379", "log_to_driver": False} and os.environ["RAY_AUTH_MODE"] == "token"
    resources.init_ray(None)
    import torch

    assert (seen["num_cpus"], seen["num_gpus"], seen["_temp_dir"]) == (  # this machine's own
        os.cpu_count(), float(torch.cuda.device_count()), None)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    seen.clear()
    resources.init_ray(None)
    assert seen == {}  # already started: joined as it is


def test_a_gpu_share_where_no_node_can_have_a_gpu_is_refused(monkeypatch, tmp_path):
    from sweeps.errors import SweepError
    from sweeps.spec import parse_spec

    spec = parse_spec({"name": "s", "preset": "mnist5k-ssat-mbi", "resources": {"cpu": 1, "gpu": 0.25},
                       "grid": [{"row": "a"}]})
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSAT_AUTOSCALER_CONFIG", raising=False)
    with pytest.raises(SweepError) as info:
        resources.check_gpu(spec, gpus_now=0)
    assert str(info.value) == (
        "resources.gpu = 0.25 but this Ray cluster has no GPU and no autoscaler node type that provides one, so "
        "trials would wait forever. Add --cpu-only to train on CPUs, or start a cluster with GPU workers (ray up "
        "ray_cluster.yaml).")
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0})  # asked of the running cluster
    with pytest.raises(SweepError):
        resources.check_gpu(spec)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 1.0})
    resources.check_gpu(spec)
    resources.check_gpu(parse_spec({"name": "s", "preset": "mnist5k-ssat-mbi", "resources": {"cpu": 1, "gpu": 0},
                                    "grid": [{"row": "a"}]}), gpus_now=0)  # a CPU sweep: nothing to check
    # `ray up`'s head keeps the autoscaler's config at home: a GPU node type there can still come
    (tmp_path / "ray_bootstrap_config.yaml").write_text(
        "available_node_types:\n  head: {resources: {CPU: 4}}\n  gpu_worker: {resources: {CPU: 8, GPU: 1}}\n"
        "  cpu_worker: {resources: {}}\n")
    assert resources.autoscaler_gpu_types() == ["gpu_worker"]
    resources.check_gpu(spec, gpus_now=0)
    elsewhere = tmp_path / "other.yaml"
    elsewhere.write_text("")
    monkeypatch.setenv("SSAT_AUTOSCALER_CONFIG", str(elsewhere))  # the path it names instead, empty
    assert resources.autoscaler_gpu_types() == []

"""How the sweep starts its local Ray: every process on 127.0.0.1 (the slow tier measures the sockets of a real
one), the dashboard only when asked for, and the driver's own SIGTERM handler kept."""
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

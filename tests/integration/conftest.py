"""Integration fixtures: one local Ray per test session (with one fake logical GPU), a real MLflow server,
and a shared tiny teacher cache so the FixMatch teacher of the test split is trained once."""
import os

import pytest

from devtools.servers import MlflowServer

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")


@pytest.fixture(scope="session")
def ray_local():
    import ray

    from sweeps.trials.ray_private import loopback_node

    with loopback_node():  # every Ray process on 127.0.0.1, as a sweep's own local Ray
        ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, _node_ip_address="127.0.0.1",
                 log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def teacher_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("teachers")
    os.environ["SSAT_TEACHER_DIR"] = str(d)
    yield d
    os.environ.pop("SSAT_TEACHER_DIR", None)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    srv = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    yield srv
    srv.stop()

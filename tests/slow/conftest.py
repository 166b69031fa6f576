"""Slow tier: the cluster launcher and multi-node tests (see devtools/slow/cluster_harness.py), and real sweep
drivers (devtools/slow/real_driver.py)."""
import tempfile

import pytest

from devtools.slow.cluster_harness import missing_slurm_prerequisites, require_prerequisites
from devtools.slow.real_driver import kill_ray_leftovers, sweep_env


@pytest.fixture
def cluster_prerequisites():
    """Fail in CI, skip elsewhere (saying why), when the machine cannot run the namespaced cluster tests."""
    require_prerequisites()


@pytest.fixture
def slurm_prerequisites():
    """The same, for the SLURM scenarios (SLURM, munge, a network bridge)."""
    require_prerequisites(missing_slurm_prerequisites())


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    return tmp_path_factory.mktemp("teachers")  # the smoke split's teacher, trained by the module's first driver


@pytest.fixture
def sweep(tmp_path, teachers):
    """(work folder, environment) of one real driver's sweep (real_driver.sweep_env: every trial pauses once in
    epoch 2); afterwards every process its Ray sessions left is ended by pid."""
    ray_tmp = tempfile.mkdtemp(prefix="rl", dir="/tmp")
    yield tmp_path, sweep_env(tmp_path, ray_tmp, teachers)
    kill_ray_leftovers(ray_tmp)

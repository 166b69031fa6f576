"""Slow tier: the cluster launcher and multi-node tests (see cluster_harness.py)."""

import pytest

from cluster_harness import missing_slurm_prerequisites, require_prerequisites


@pytest.fixture
def cluster_prerequisites():
    """Fail in CI, skip elsewhere (saying why), when the machine cannot run the namespaced cluster tests."""
    require_prerequisites()


@pytest.fixture
def slurm_prerequisites():
    """The same, for the SLURM scenarios (SLURM, munge, a network bridge)."""
    require_prerequisites(missing_slurm_prerequisites())

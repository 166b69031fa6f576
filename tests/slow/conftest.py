"""Slow tier: the cluster launcher and multi-node tests (see cluster_harness.py)."""

import pytest

from cluster_harness import require_prerequisites


@pytest.fixture
def cluster_prerequisites():
    """Fail in CI, skip elsewhere (saying why), when the machine cannot run the namespaced cluster tests."""
    require_prerequisites()

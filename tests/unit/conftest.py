"""Fixtures shared by the unit tests."""
import pytest

from devtools.servers import sqlite_store


@pytest.fixture
def store(tmp_path) -> str:
    """The URI of a fresh, real MLflow SQLite store of this test's own (devtools.servers.sqlite_store)."""
    return sqlite_store(tmp_path)

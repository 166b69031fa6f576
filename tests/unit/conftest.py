"""Fixtures shared by the unit tests."""
import os
import shutil
from pathlib import Path

import mlflow
import pytest
from mlflow.tracking import MlflowClient


@pytest.fixture
def store(tmp_path) -> str:
    """The URI of a fresh, real MLflow SQLite store of this test's own: a copy of an empty store kept per MLflow
    version in the user's cache (creating the tables takes seconds, copying the file does not)."""
    empty = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ssat-sweeps" / \
        f"mlflow{mlflow.__version__}-empty-store.db"
    if not empty.exists():
        making = tmp_path / "empty.db"
        MlflowClient(f"sqlite:///{making}").search_experiments(max_results=1)
        empty.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(making, f"{empty}.{os.getpid()}")
        os.replace(f"{empty}.{os.getpid()}", empty)  # whole or absent, for a test running beside this one
    shutil.copy(empty, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"

"""The run record's shared names (docs/tracking.md), defined once for its writer (sweeps/tracking/tracker.py), its
readers
(analysis/collect.py, the slow tier's checks) and the store tools (clusters/migrate_store.py); no torch, no Ray,
no pandas, so any of them imports it for nothing.

    HISTORY_PREFIXES  a run's per-epoch metrics (logged at the epoch as step)
    FINAL_PREFIXES    its final results (test protocol, AutoAttack, times), logged once at its last epoch
    with_pg_driver    a PostgreSQL store's URI with the driver the project pins
    search_all        every run a search matches, page by page (a single search stops at its max_results)
"""
from __future__ import annotations

HISTORY_PREFIXES = ("train/", "val/", "adv/", "sched/", "perf/")
FINAL_PREFIXES = ("test/", "time/")


def with_pg_driver(uri: str) -> str:
    """A PostgreSQL store through psycopg2, the driver the project pins: for a bare `postgresql://` SQLAlchemy 2.1
    loads psycopg 3, which is not installed. Any other URI is returned as it is."""
    return "postgresql+psycopg2://" + uri[len("postgresql://"):] if uri.startswith("postgresql://") else uri


def search_all(client, experiment_ids: list[str], filter_string: str = "", page_size: int = 1000) -> list:
    """Every run of `experiment_ids` that `filter_string` matches (MlflowClient.search_runs), read `page_size` at a
    time: one search returns at most its max_results, and a sweep or a store can hold more runs than that."""
    runs, token = [], None
    while True:
        page = client.search_runs(experiment_ids, filter_string, max_results=page_size, page_token=token)
        runs += page
        token = page.token
        if not token:
            return runs

"""analysis/record.py: the run record's shared names, and every run of a search read page by page from a real
SQLite MLflow store (a search stops at its max_results; the sweeps' status, end-of-sweep guard, reuse, demo and
subset AutoAttack all read through it)."""
from mlflow.tracking import MlflowClient

from analysis.record import search_all, with_pg_driver
from devtools.servers import sqlite_store


def test_every_run_a_search_matches_is_read_page_by_page(tmp_path):
    client = MlflowClient(sqlite_store(tmp_path))
    a, b = (client.create_experiment(n, artifact_location=(tmp_path / n).as_uri()) for n in ("a", "b"))
    made = {}
    for i in range(7):
        run = client.create_run(a if i < 5 else b, tags={"ssat.kind": "trial" if i != 3 else "sweep"})
        made[run.info.run_id] = i
    pages = []
    real = client.search_runs

    def search_runs(*args, **kw):
        pages.append(kw["max_results"])
        return real(*args, **kw)

    client.search_runs = search_runs
    trials = search_all(client, [a, b], "tags.`ssat.kind` = 'trial'", page_size=2)
    assert sorted(made[r.info.run_id] for r in trials) == [0, 1, 2, 4, 5, 6]
    assert pages == [2, 2, 2]  # 6 runs: the last page carries no token
    pages.clear()
    assert sorted(made[r.info.run_id] for r in search_all(client, [a])) == [0, 1, 2, 3, 4]
    assert pages == [1000]
    assert search_all(client, [b], "tags.`ssat.kind` = 'sweep'") == []


def test_a_postgresql_uri_gets_the_pinned_driver():
    assert with_pg_driver("postgresql://u@h/db") == "postgresql+psycopg2://u@h/db"
    assert with_pg_driver("sqlite:///x.db") == "sqlite:///x.db"

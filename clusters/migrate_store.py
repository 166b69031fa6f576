"""Copy an MLflow SQLite store into PostgreSQL, whole: every experiment, run, param, tag and metric value (every
step of every history), with their ids, times and artifact locations unchanged.

    python -m clusters.migrate_store sqlite:////mnt/efs/ssat/mlflow/mlflow.db postgresql://mlflow@127.0.0.1:5432/mlflow

Stop the MLflow server that writes the SQLite file first. The source is never written: it is snapshotted with
SQLite's backup API into a temporary file, and a snapshot made by an older MLflow is brought to this MLflow's
schema there (what `mlflow db upgrade` would do to the file). The target database must exist and hold no MLflow
data yet: empty, or only what `mlflow server` writes into a new database (its schema and the Default experiment,
without runs). Its schema is made by MLflow's own migrations, then every table is copied row for row in one
transaction (all or nothing), in foreign-key order, and PostgreSQL's id sequences are moved past the copied
ids. Then every table's row count is compared; any difference is an error (exit 1).

Ids are kept, so run links, `mlflow.parentRunId` tags and `repro.teacher_run_id` stay valid, and so are
artifact locations: a server started with `--artifacts-destination` records `mlflow-artifacts:/<experiment id>`,
so start the PostgreSQL-backed server with the same `--artifacts-destination` and the artifacts are where they
were. A password is best given through libpq's ~/.pgpass (or PGPASSFILE), not in the URI on a command line.
"""
from __future__ import annotations

import argparse
import math
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from analysis.record import with_pg_driver

BATCH = 5000


def _masked(uri: str) -> str:
    return sa.engine.make_url(uri).render_as_string(hide_password=True)


def snapshot_sqlite(uri: str, into: Path) -> Path:
    """A consistent copy of the SQLite store at `uri` (its writer may not have stopped cleanly: the backup API
    copies a committed state, WAL included). The source is opened read-only."""
    url = sa.engine.make_url(uri)
    if url.get_backend_name() != "sqlite" or not url.database:
        raise SystemExit(f"the source must be a SQLite file URI (sqlite:////abs/path/mlflow.db), not {uri}")
    path = Path(url.database)
    if not path.is_file():
        raise SystemExit(f"no SQLite store at {path}")
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    dst = sqlite3.connect(into)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    return into


def _schema_ready(engine: sa.Engine) -> None:
    """Bring `engine`'s database to this MLflow's schema (create it when empty; upgrade an older one)."""
    from mlflow.store.db.utils import (_get_latest_schema_revision, _get_schema_version, _initialize_tables,
                                       _is_empty_database, _upgrade_db)

    if _is_empty_database(engine):
        _initialize_tables(engine)
    elif _get_schema_version(engine) != _get_latest_schema_revision():
        _upgrade_db(engine)


def _mlflow_data(engine: sa.Engine) -> list[str]:
    """What MLflow data a database holds beyond a new server's own (its schema, the Default experiment)."""
    insp = sa.inspect(engine)
    if "experiments" not in insp.get_table_names():
        return []
    with engine.connect() as conn:
        found = []
        runs = conn.execute(sa.text("SELECT count(*) FROM runs")).scalar()
        if runs:
            found.append(f"{runs} run(s)")
        exps = conn.execute(sa.text("SELECT count(*) FROM experiments WHERE experiment_id <> 0")).scalar()
        if exps:
            found.append(f"{exps} experiment(s) besides Default")
    return found


def _tables(engine: sa.Engine) -> list[sa.Table]:
    """The database's tables in foreign-key order (parents first), alembic's bookkeeping left out."""
    meta = sa.MetaData()
    meta.reflect(engine)
    return [t for t in meta.sorted_tables if not t.name.startswith("alembic_")]


def _adapt(target: sa.Table) -> sa.Table:
    """JSON columns: a SQL NULL stays NULL (SQLAlchemy would write Python None as the JSON text 'null')."""
    for col in target.columns:
        if isinstance(col.type, sa.JSON):
            col.type.none_as_null = True
    return target


def _fix_sequences(conn: sa.Connection, tables: list[sa.Table]) -> None:
    """PostgreSQL's serial/identity sequences past the ids copied in (else the next experiment collides)."""
    if conn.dialect.name != "postgresql":
        return
    for table in tables:
        for col in table.primary_key.columns:
            seq = conn.execute(sa.text("SELECT pg_get_serial_sequence(:t, :c)"),
                               {"t": table.name, "c": col.name}).scalar()
            if seq:
                top = conn.execute(sa.select(sa.func.max(col))).scalar()
                if top is not None:
                    conn.execute(sa.text("SELECT setval(:s, :v, true)"), {"s": seq, "v": int(top)})


def _rows(src: sa.Connection, table: sa.Table, bools: set[str]):
    """The source table's rows as dicts, BATCH at a time; booleans as bool (SQLite keeps 0/1)."""
    result = src.execution_options(stream_results=True).execute(sa.select(table))
    while chunk := result.mappings().fetchmany(BATCH):
        yield [{k: (bool(v) if k in bools and v is not None else v) for k, v in row.items()} for row in chunk]


def migrate(source_uri: str, target_uri: str, log=print) -> dict[str, int]:
    """Copy the store at `source_uri` (SQLite) into `target_uri` (PostgreSQL); returns rows copied per table."""
    target_uri = with_pg_driver(target_uri)
    if sa.engine.make_url(target_uri).get_backend_name() != "postgresql":
        raise SystemExit(f"the target must be a PostgreSQL URI (postgresql://USER@HOST:PORT/DB), "
                         f"not {_masked(target_uri)}")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ssat-migrate-") as tmp:
        snap = snapshot_sqlite(source_uri, Path(tmp) / "snapshot.db")
        src_engine = sa.create_engine(f"sqlite:///{snap}")
        _schema_ready(src_engine)  # the snapshot, never the source
        dst_engine = sa.create_engine(target_uri)
        try:
            dst_engine.connect().close()
        except sa.exc.OperationalError as exc:
            raise SystemExit(f"cannot connect to {_masked(target_uri)}: {str(exc).splitlines()[0]}") from None
        if found := _mlflow_data(dst_engine):
            raise SystemExit(f"{_masked(target_uri)} already holds MLflow data ({', '.join(found)}); migrate into a "
                             "new, empty database")
        _schema_ready(dst_engine)
        from mlflow.store.db.utils import _get_schema_version

        if _get_schema_version(src_engine) != _get_schema_version(dst_engine):
            raise SystemExit("source and target schemas differ after the upgrade: "
                             f"{_get_schema_version(src_engine)} vs {_get_schema_version(dst_engine)}")
        src_tables = {t.name: t for t in _tables(src_engine)}
        dst_tables = _tables(dst_engine)
        missing = sorted(set(src_tables) - {t.name for t in dst_tables})
        if missing:
            raise SystemExit(f"tables of the source missing in the target: {missing}")
        copied: dict[str, int] = {}
        with src_engine.connect() as src, dst_engine.begin() as dst:
            for table in reversed(dst_tables):  # what a new server wrote (Default experiment, ...) goes
                dst.execute(table.delete())
            for table in dst_tables:
                if table.name not in src_tables:
                    continue
                target = _adapt(table)
                bools = {c.name for c in target.columns if isinstance(c.type, sa.Boolean)}
                n = 0
                for batch in _rows(src, src_tables[table.name], bools):
                    dst.execute(target.insert(), batch)
                    n += len(batch)
                copied[table.name] = n
            _fix_sequences(dst, dst_tables)
            for name, n in copied.items():  # inside the transaction: a mismatch commits nothing
                got = dst.execute(sa.select(sa.func.count()).select_from(src_tables[name])).scalar()
                want = src.execute(sa.select(sa.func.count()).select_from(src_tables[name])).scalar()
                if got != want or n != want:
                    raise SystemExit(f"table {name}: {want} row(s) in the source, {n} copied, {got} in the target")
        src_engine.dispose()
        dst_engine.dispose()
    for name in ("experiments", "runs", "params", "tags", "metrics", "latest_metrics"):
        log(f"  {name:<15} {copied.get(name, 0):>10,}")
    others = sum(n for k, n in copied.items() if k not in ("experiments", "runs", "params", "tags", "metrics",
                                                            "latest_metrics"))
    log(f"  {'other tables':<15} {others:>10,}")
    log(f"migrated {_masked(source_uri)} -> {_masked(target_uri)} in {time.monotonic() - t0:.1f} s "
        f"({math.fsum(copied.values()):,.0f} rows; ids and artifact locations kept)")
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clusters.migrate_store", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="the SQLite store: sqlite:////abs/path/mlflow.db")
    parser.add_argument("target", help="an empty PostgreSQL database: postgresql://USER@HOST:PORT/DB")
    args = parser.parse_args(argv)
    migrate(args.source, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())

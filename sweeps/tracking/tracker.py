"""MLflow tracking: one experiment per sweep, a parent run, one child run per (config hash, seed, stage).

Written by the driver only (a Tune callback): one writer per SQLite file, and the same code path for a
tracking server. Every write is an operation kept in a queue until it succeeds, so a tracking server that
goes away mid-sweep does not stop training: operations wait and are retried after each result.
The queue is also journaled on disk before anything is sent (`<sweep dir>/tracking_spool.<host>.<pid>.<n>.jsonl`,
removed whenever the queue is empty), so a driver killed while the server is away loses nothing: the next
driver of the sweep (`resume`) or `python -m sweeps sync NAME` adopts the journals of drivers that are gone
and sends them. What is still unsent when a sweep ends is moved to `<sweep dir>/tracking_spool.jsonl`.
Writes are idempotent, so replaying an operation that was already sent changes nothing, even with new
timestamps and values (first write wins): a run is found again by its key, epochs at or below the run's last
logged step are skipped, final metrics and their protocol tags are logged once.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from mlflow.tracking import MlflowClient

from analysis.record import FINAL_PREFIXES, HISTORY_PREFIXES, with_pg_driver

from .journal import Journal
from .run_store import RunStore

RETRY_AFTER_S = 15.0


# The driver's client must fail fast when a server is away (MLflow's defaults retry for minutes and would
# hold up Tune's loop, and with it every trial's reports).
for _var, _val in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1"), ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
                   ("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")):
    os.environ.setdefault(_var, _val)

class TrackingUnavailable(RuntimeError):
    """The tracking store cannot be reached or written."""


def default_uri(workdir: str | Path) -> str:
    return f"sqlite:///{Path(workdir).resolve() / 'mlflow.db'}"


def resolve_uri(uri: str | None, workdir: str | Path) -> str:
    return with_pg_driver(uri or os.environ.get("MLFLOW_TRACKING_URI") or default_uri(workdir))


def uri_source(uri: str | None) -> str:
    """Where resolve_uri(uri, ...) took the store from, as an error names it."""
    if uri:
        return "--tracking-uri"
    return "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "the default store (--workdir)"


def check_reachable(uri: str, timeout: float = 10.0, source: str | None = None) -> None:
    """Fail fast, before any training, when the store cannot be used; the error starts with `source` (the option or
    variable the URI came from: uri_source), when given."""
    said = f"{source}: " if source else ""
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as r:
                if r.status != 200:
                    raise TrackingUnavailable(f"{said}MLflow server at {uri} answered {r.status} on /health")
        except (urllib.error.URLError, OSError) as exc:
            raise TrackingUnavailable(f"{said}MLflow tracking server at {uri} cannot be reached ({exc}); start it, or "
                                      "pass --tracking-uri / MLFLOW_TRACKING_URI of a running one") from None
        return
    try:  # a SQLite file's folders are made by MLflow
        with creating_store(uri):
            new_sqlite_store(uri)
            MlflowClient(uri).search_experiments()
    except Exception as exc:
        raise TrackingUnavailable(f"{said}MLflow store {uri} cannot be used: {str(exc)[:500]}{_wedged(uri, exc)}") \
            from None


def new_sqlite_store(uri: str) -> None:
    """A new SQLite store (its file missing or empty) is made whole before it takes the store's name: MLflow creates
    and migrates its tables in a file of its own beside it, renamed over the store's when done. A stop at any
    instant (SIGTERM, Ctrl+C, a hang-up) then leaves either no tables (an empty file: made anew next time) or all
    of them; a migration cut short used to leave `_alembic_tmp_*` tables that no later start could get past."""
    db = sqlite_path(uri)
    if db is None or (db.exists() and db.stat().st_size > 0):
        return
    for left in db.parent.glob(f".{db.name}.creating-*"):  # a creator killed before it could clean up (it held the
        left.unlink(missing_ok=True)                        # creation lock, which is this caller's now)
    tmp = db.with_name(f".{db.name}.creating-{os.getpid()}")
    try:
        MlflowClient(f"sqlite:///{tmp}").search_experiments()
        os.replace(tmp, db)
    finally:
        tmp.unlink(missing_ok=True)


def _wedged(uri: str, exc: Exception) -> str:
    """The fix, when a SQLite store was left half-migrated by a stop during its creation (before the creation was
    made whole, new_sqlite_store)."""
    if "_alembic_tmp_" not in str(exc) or sqlite_path(uri) is None:
        return ""
    return (f". Its tables were left half-made by a stop while MLflow created them: if no sweep wrote to "
            f"{sqlite_path(uri)} (a new store), delete that file and start again; `mlflow db upgrade` cannot mend it")


PG_LOCK_KEY = 3_200_320_032  # the PostgreSQL advisory lock a new store is created under (any number this project owns)


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///` store (None: another store, or SQLite in memory)."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///"):].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


@contextlib.contextmanager
def creating_store(uri: str):
    """Held while a driver first opens the store: MLflow creates and migrates a new store's tables with no guard
    against another process doing the same at that moment, and two sweeps started together on a new store then
    fail (`duplicate column name: step`, `Online migration expected to match one row`). A SQLite store is created
    under an flock on its own file (made empty if missing, as SQLite would; flock and SQLite's fcntl locks do not
    meet on a local disk, and no transaction is open when it is released); a PostgreSQL one under a PostgreSQL
    advisory lock (which also holds between drivers on different hosts). The second opener finds the tables made."""
    db = sqlite_path(uri)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        with open(db, "ab") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
            yield
    elif uri.startswith("postgresql"):
        import sqlalchemy

        engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool)
        try:
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": PG_LOCK_KEY})
                try:
                    yield
                finally:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": PG_LOCK_KEY})
        finally:
            engine.dispose()
    else:
        yield


class Tracker:
    """Find-or-create runs by key and write to them through a retrying operation queue, journaled on disk."""

    def __init__(self, uri: str, experiment: str, artifact_root: str | Path | None = None,
                 spool: str | Path | None = None, log=print):
        self.uri, self.experiment, self.log = uri, experiment, log
        self.store = RunStore(uri, experiment, artifact_root)
        self.artifact_root = self.store.artifact_root
        self.runs, self.last_step = self.store.runs, self.store.last_step
        self.spool = Path(spool) if spool else None
        self._journal = Journal(self.spool, log) if self.spool else None
        self.queue: list[dict] = self._journal.adopt() if self._journal else []
        self._warned = False
        self._next_try = 0.0

    @property
    def client(self):
        return self.store.client

    @client.setter
    def client(self, client) -> None:  # another client for the same store (a test's, or one after a reconnect)
        self.store.client = client

    @property
    def journal(self) -> Path | None:
        return self._journal.path if self._journal else None

    @property
    def experiment_id(self) -> str:
        return self.store.experiment_id

    def find_run(self, key: str) -> str | None:
        return self.store.find_run(key)

    def _write(self, ops: list[dict]) -> None:
        if self._journal:
            self._journal.write(ops)

    # ---- operations (queued) ---------------------------------------------------------------------
    def ensure_run(self, key: str, tags: dict, params: dict | None = None, name: str | None = None) -> None:
        self._push({"op": "ensure", "key": key, "tags": tags, "params": params or {}, "name": name or key})

    def log_epoch(self, key: str, metrics: dict, step: int) -> None:
        self._push({"op": "epoch", "key": key, "metrics": metrics, "step": step, "ts": int(time.time() * 1000)})

    def log_final(self, key: str, metrics: dict, tags: dict, step: int) -> None:
        self._push({"op": "final", "key": key, "metrics": metrics, "tags": tags, "step": step,
                    "ts": int(time.time() * 1000)})

    def set_tags(self, key: str, tags: dict) -> None:
        self._push({"op": "tags", "key": key, "tags": tags})

    def log_params(self, key: str, params: dict) -> None:
        """Parameters learnt after the run was made (first write wins: a logged one is never changed)."""
        self._push({"op": "params", "key": key, "params": params})

    def log_artifact(self, key: str, path: str | Path, artifact_path: str | None = None) -> None:
        self._push({"op": "artifact", "key": key, "path": str(path), "artifact_path": artifact_path})

    def end(self, key: str, status: str = "FINISHED") -> None:
        self._push({"op": "end", "key": key, "status": status})

    def kill(self, key: str, tags: dict) -> None:
        """End the run as KILLED with `tags`, if it is still RUNNING: Ctrl+C can land after a trial's last report
        but before Tune completed it, and a run that was ended (FINISHED, FAILED, stopped early) keeps its end."""
        self._push({"op": "kill", "key": key, "tags": tags})

    def reopen(self, key: str) -> None:
        """The run goes on (RUNNING again): a trial or sweep that an interrupted driver ended as KILLED resumes."""
        self._push({"op": "reopen", "key": key})

    def _push(self, op: dict) -> None:
        self._write([op])  # on disk before it is sent: a driver killed now loses nothing
        self.queue.append(op)
        self.drain()

    def drain(self, force: bool = False) -> bool:
        """Send queued operations in order; stop at the first failure and keep the rest. True when empty.

        After a failure the store is left alone for RETRY_AFTER_S (unless `force`), so a dead server costs
        the training loop one failed request now and then, not one per result.
        """
        if self.queue and not force and time.monotonic() < self._next_try:
            return False
        while self.queue:
            try:
                self.store.apply(self.queue[0])
            except Exception as exc:
                self._next_try = time.monotonic() + RETRY_AFTER_S
                if not self._warned:
                    self.log(f"[tracking] {self.uri} unavailable ({type(exc).__name__}: {str(exc)[:120]}); "
                             f"{len(self.queue)} operation(s) kept and retried; training goes on")
                    self._warned = True
                return False
            self.queue.pop(0)
            if self._warned:
                self.log("[tracking] store reachable again; queued operations sent")
                self._warned = False
        if self._journal:
            self._journal.remove()
        return True

    def flush(self, timeout: float, interval: float = 2.0) -> bool:
        """Retry until the queue is empty or `timeout` passes; then spool what is left to disk."""
        deadline = time.monotonic() + timeout
        while not self.drain(force=True) and time.monotonic() < deadline:
            time.sleep(interval)
        if self.queue and self._journal:
            self._journal.spool_ops(self.queue)
            self.log(f"[tracking] {len(self.queue)} operation(s) spooled to {self.spool}; "
                     "replay them with `python -m sweeps sync NAME` once the store is back")
            self.queue = []
            return False
        return not self.queue


def epoch_metrics(result: dict) -> dict:
    return {k: v for k, v in result.items() if k.startswith(HISTORY_PREFIXES) and isinstance(v, (int, float))
            and not isinstance(v, bool)}


def final_metrics(result: dict) -> tuple[dict, dict]:
    metrics = {k: v for k, v in result.items() if k.startswith(FINAL_PREFIXES) and isinstance(v, (int, float))}
    tags = {k: v for k, v in result.items() if k.startswith("protocol/")}
    return metrics, tags

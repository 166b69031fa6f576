"""The cluster configs pass Ray's own schema and the project's rules; broken variants are caught.

Ray's validation is the autoscaler's private prepare_config/validate_config (pinned Ray); the project's rules
live in clusters/cluster_check.py. Each negative case mutates a shipped config in one way and must fail.
"""

from __future__ import annotations

import copy
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clusters import cluster_check
from clusters.cluster_check import default_targets, validate_cluster_yaml, validate_script

REPO = Path(__file__).resolve().parents[3]
AWS = REPO / "ray_cluster.yaml"
LOCAL = REPO / "clusters" / "local.yaml"
SBATCH = REPO / "clusters" / "slurm" / "ray_sweep.sbatch"
SPECS = REPO / "sweeps" / "specs"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def problems_of(config: dict, tmp_path: Path) -> list[str]:
    """Validate a (mutated) config as if it sat at the repository root."""
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return validate_cluster_yaml(path, repo_root=REPO)


def assert_caught(problems: list[str], *needles: str) -> None:
    text = "\n".join(problems)
    assert all(n in text for n in needles), f"expected {needles} among problems:\n{text or '(none)'}"


def replace_in_commands(config: dict, key: str, old: str, new: str) -> dict:
    config = copy.deepcopy(config)
    config[key] = [c.replace(old, new) for c in config[key]]
    return config


# --- what ships passes -------------------------------------------------------------------------------------

def test_the_repository_ships_the_cluster_files():
    names = {p.relative_to(REPO).as_posix() for p in default_targets(REPO)}
    assert {"ray_cluster.yaml", "clusters/local.yaml", "clusters/slurm/ray_sweep.sbatch",
            "clusters/setup_node.sh", "clusters/start_mlflow.sh", "clusters/check_node.sh"} <= names


@pytest.mark.parametrize("path", [p for p in default_targets(REPO)], ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_cluster_file_passes(path):
    assert cluster_check.validate_path(path) == []


def test_ray_itself_accepts_the_yamls_and_rejects_a_fractional_node_gpu():
    from ray.autoscaler._private.util import prepare_config, validate_config

    for path in (AWS, LOCAL):
        validate_config(prepare_config(load(path)))
    bad = load(AWS)
    bad["available_node_types"]["worker.gpu"]["resources"]["GPU"] = 0.5
    with pytest.raises(Exception, match="not of type 'integer'"):
        validate_config(prepare_config(bad))


def test_the_lock_pins_the_ray_whose_private_api_validates():
    import ray

    assert f"ray=={ray.__version__}" in (REPO / "lock" / "requirements.lock").read_text().split()


def test_the_aws_config_says_what_the_issue_asks():
    cfg = load(AWS)
    assert cfg["provider"]["type"] == "aws"
    head, worker = cfg["available_node_types"]["head.cpu"], cfg["available_node_types"]["worker.gpu"]
    assert head["resources"]["GPU"] == 0 and worker["resources"]["GPU"] == 1
    assert worker["min_workers"] == 0 and 0 < worker["max_workers"] <= cfg["max_workers"]
    assert "IpPermissions" not in cfg["provider"]["security_group"]  # only SSH + intra-group
    text = AWS.read_text()
    assert "580.65.06" in text and "--nfs-mount /mnt/efs" in text and "--dashboard-host=127.0.0.1" in text


# --- negative cases: each must fail ------------------------------------------------------------------------

def test_fractional_gpu_node_resource_fails(tmp_path):
    cfg = load(AWS)
    cfg["available_node_types"]["worker.gpu"]["resources"]["GPU"] = 0.5
    assert_caught(problems_of(cfg, tmp_path), "ray schema", "GPU", "integer")


def test_fractional_gpu_in_ray_start_fails(tmp_path):
    cfg = replace_in_commands(load(LOCAL), "head_start_ray_commands", "--port=6379", "--port=6379 --num-gpus=0.5")
    assert_caught(problems_of(cfg, tmp_path), "'0.5' is not an integer")


def test_fractional_custom_resource_fails(tmp_path):
    cfg = replace_in_commands(load(LOCAL), "head_start_ray_commands", "--port=6379",
                              """--port=6379 --resources='{"worker_node": 0.5}'""")
    assert_caught(problems_of(cfg, tmp_path), "worker_node=0.5")


def test_mlflow_on_all_interfaces_without_allowed_hosts_fails(tmp_path):
    cfg = load(AWS)
    cfg["head_start_ray_commands"][0] = ("export RAY_AUTH_MODE=disabled; mlflow server --host 0.0.0.0 --port 5000 "
                                         "--backend-store-uri sqlite:////home/ubuntu/mlflow.db")
    assert_caught(problems_of(cfg, tmp_path), "--host 0.0.0.0` without --allowed-hosts")


def test_mlflow_on_all_interfaces_with_allowed_hosts_passes(tmp_path):
    cfg = load(AWS)
    cfg["head_start_ray_commands"][0] = ("export RAY_AUTH_MODE=disabled; mlflow server --host 0.0.0.0 --port 5000 "
                                         "--allowed-hosts 10.0.0.5:5000,localhost:5000")
    assert [p for p in problems_of(cfg, tmp_path) if "mlflow" in p.lower()] == []


def test_mlflow_allowing_any_host_fails(tmp_path):
    cfg = load(AWS)
    cfg["head_start_ray_commands"][0] = ("export RAY_AUTH_MODE=disabled; mlflow server --host 0.0.0.0 "
                                         "--allowed-hosts '*'")
    assert_caught(problems_of(cfg, tmp_path), "accepts any Host header")


def test_start_mlflow_script_on_all_interfaces_fails(tmp_path):
    cfg = replace_in_commands(load(AWS), "head_start_ray_commands", "--host private", "--host 0.0.0.0")
    assert_caught(problems_of(cfg, tmp_path), "start_mlflow.sh --host 0.0.0.0")


def test_no_mlflow_server_on_the_head_fails(tmp_path):
    cfg = load(AWS)
    cfg["head_start_ray_commands"] = cfg["head_start_ray_commands"][1:]
    assert_caught(problems_of(cfg, tmp_path), "starts no MLflow tracking server")


@pytest.mark.parametrize("key", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_missing_ray_auth_mode_fails(tmp_path, key):
    cfg = replace_in_commands(load(AWS), key, "export RAY_AUTH_MODE=token;", "")
    assert_caught(problems_of(cfg, tmp_path), key, "without RAY_AUTH_MODE")


def test_default_start_commands_lack_ray_auth_mode(tmp_path):
    cfg = load(LOCAL)
    del cfg["head_start_ray_commands"], cfg["worker_start_ray_commands"]  # Ray's defaults fill them in
    assert_caught(problems_of(cfg, tmp_path), "without RAY_AUTH_MODE")


@pytest.mark.parametrize("token_file", ["", "--auth-token-file /mnt/efs/ssat/other_token"])
def test_token_auth_needs_one_token_file_on_every_node(tmp_path, token_file):
    cfg = replace_in_commands(load(AWS), "worker_setup_commands", "--auth-token-file /mnt/efs/ssat/ray/auth_token",
                              token_file)
    assert_caught(problems_of(cfg, tmp_path), "every setup_node.sh needs the same --auth-token-file")


def test_the_cloud_cluster_runs_with_token_auth():
    cfg = load(AWS)
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert all("RAY_AUTH_MODE=token" in c for c in cfg[key] if re.search(r"\bray (start|stop)\b", c)), key
    for key in ("head_setup_commands", "worker_setup_commands"):
        assert "--auth-mode token --auth-token-file /mnt/efs/ssat/ray/auth_token" in " ".join(cfg[key]), key


def test_bad_or_mixed_ray_auth_modes_fail(tmp_path):
    cfg = replace_in_commands(load(AWS), "worker_start_ray_commands", "RAY_AUTH_MODE=token", "RAY_AUTH_MODE=disabled")
    assert_caught(problems_of(cfg, tmp_path), "different RAY_AUTH_MODE values")
    cfg = replace_in_commands(load(AWS), "head_start_ray_commands", "RAY_AUTH_MODE=token", "RAY_AUTH_MODE=off")
    assert_caught(problems_of(cfg, tmp_path), "RAY_AUTH_MODE='off'")


@pytest.mark.parametrize("command", [
    "pip install 'ray[default]'",
    "pip install -e ~/ssat-sweeps",
    "python -m pip install --upgrade pip",
    "~/ssat-venv/bin/pip install mlflow>=3",
    "pip install -r requirements.txt -e .",
])
def test_unpinned_install_fails(tmp_path, command):
    cfg = load(AWS)
    cfg["setup_commands"] = [command]
    assert_caught(problems_of(cfg, tmp_path), "not pinned")


@pytest.mark.parametrize("command", [
    "pip install -c ~/ssat-sweeps/lock/requirements.lock -e ~/ssat-sweeps",
    "pip install boto3==1.44.8",
    "pip install -c ~/ssat-sweeps/lock/requirements.lock mlflow",
])
def test_pinned_install_passes(tmp_path, command):
    cfg = load(AWS)
    cfg["setup_commands"] = [command]
    assert problems_of(cfg, tmp_path) == []


def test_unpinned_docker_image_fails(tmp_path):
    cfg = load(AWS)
    cfg["docker"] = {"image": "rayproject/ray-ml:latest", "container_name": "ray"}
    assert_caught(problems_of(cfg, tmp_path), "docker.image", "not pinned")


def test_default_dlami_fails(tmp_path):
    cfg = load(AWS)
    cfg["available_node_types"]["worker.gpu"]["node_config"]["ImageId"] = "latest_dlami"
    assert_caught(problems_of(cfg, tmp_path), "ImageId", "580.65.06")


def test_dashboard_on_all_interfaces_fails(tmp_path):
    cfg = replace_in_commands(load(AWS), "head_start_ray_commands", "--dashboard-host=127.0.0.1",
                              "--dashboard-host=0.0.0.0")
    assert_caught(problems_of(cfg, tmp_path), "dashboard bound to 0.0.0.0")


def test_node_local_storage_path_on_the_cloud_fails(tmp_path):
    cfg = load(AWS)
    for key in ("head_setup_commands", "worker_setup_commands"):
        cfg = replace_in_commands(cfg, key, "--storage-path /mnt/efs/ssat", "--storage-path /home/ubuntu/ssat")
    assert_caught(problems_of(cfg, tmp_path), "storage path /home/ubuntu/ssat is node-local")


def test_object_storage_path_on_the_cloud_passes(tmp_path):
    cfg = load(AWS)
    for key in ("head_setup_commands", "worker_setup_commands"):
        cfg = replace_in_commands(cfg, key, "--storage-path /mnt/efs/ssat", "--storage-path s3://bucket/ssat")
    assert [p for p in problems_of(cfg, tmp_path) if "storage" in p] == []


def test_different_storage_paths_fail(tmp_path):
    cfg = replace_in_commands(load(AWS), "worker_setup_commands", "--storage-path /mnt/efs/ssat",
                              "--storage-path /mnt/efs/other")
    assert_caught(problems_of(cfg, tmp_path), "different storage paths")


def test_missing_paths_fail(tmp_path):
    cfg = load(AWS)
    cfg["file_mounts"]["~/extra"] = "does/not/exist"
    cfg["head_setup_commands"].append("bash ~/ssat-sweeps/clusters/no_such_script.sh")
    assert_caught(problems_of(cfg, tmp_path), "does/not/exist", "no_such_script.sh")


@pytest.mark.parametrize("config", [AWS, LOCAL])
def test_mounts_are_folders_and_a_single_file_fails(tmp_path, config):
    cfg = load(config)
    assert all((REPO / local).is_dir() for local in cfg["file_mounts"].values())  # the shipped ones: folders
    assert "~/ssat-sweeps/lock" in cfg["file_mounts"]  # what setup_node.sh installs from
    cfg["file_mounts"]["~/ssat-sweeps/pyproject.toml"] = "./pyproject.toml"
    assert_caught(problems_of(cfg, tmp_path), "~/ssat-sweeps/pyproject.toml: source ./pyproject.toml is a file")


def test_worker_type_must_scale_from_zero(tmp_path):
    cfg = load(AWS)
    cfg["available_node_types"]["worker.gpu"]["min_workers"] = 2
    assert_caught(problems_of(cfg, tmp_path), "min_workers must be 0")


# --- the head's MLflow store (issue 28 item 6) ------------------------------------------------------------------

def test_the_aws_head_keeps_mlflow_in_postgres_dumped_to_efs():
    cfg = load(AWS)
    start = " ".join(cfg["head_start_ray_commands"][0].split())
    assert "clusters/postgres.sh start --systemd --data-dir ~/ssat-postgres" in start
    assert "--dump /mnt/efs/ssat/mlflow/mlflow.pgdump --shared-mount /mnt/efs" in start
    assert "--backend-store-uri postgresql://mlflow@127.0.0.1:5432/mlflow --pgpass ~/.ssat/postgres/pgpass" in start
    assert start.index("postgres.sh start") < start.index("&& bash ~/ssat-sweeps/clusters/start_mlflow.sh")
    assert "--postgres" in cfg["head_setup_commands"][0] and "--postgres" not in cfg["worker_setup_commands"][0]
    assert "sqlite:" not in AWS.read_text().split("head_start_ray_commands:")[1]


def test_one_machine_keeps_sqlite():
    assert "--backend-store-uri sqlite:////" in LOCAL.read_text() and "postgres.sh" not in LOCAL.read_text()


def test_sqlite_store_on_nfs_fails(tmp_path):
    cfg = replace_in_commands(load(AWS), "head_start_ray_commands", "postgresql://mlflow@127.0.0.1:5432/mlflow",
                              "sqlite:////mnt/efs/ssat/mlflow/mlflow.db")
    assert_caught(problems_of(cfg, tmp_path), "sqlite:////mnt/efs/ssat/mlflow/mlflow.db is a SQLite file on NFS")


def test_sqlite_store_on_the_heads_disk_passes(tmp_path):
    cfg = replace_in_commands(load(AWS), "head_start_ray_commands", "postgresql://mlflow@127.0.0.1:5432/mlflow",
                              "sqlite:////home/ubuntu/mlflow.db")
    assert [p for p in problems_of(cfg, tmp_path) if "SQLite" in p] == []


def test_postgres_data_on_nfs_fails(tmp_path):
    cfg = replace_in_commands(load(AWS), "head_start_ray_commands", "--data-dir ~/ssat-postgres",
                              "--data-dir /mnt/efs/ssat/pgdata")
    assert_caught(problems_of(cfg, tmp_path), "--data-dir /mnt/efs/ssat/pgdata is on NFS")


def test_postgres_dump_off_the_shared_storage_fails(tmp_path):
    cfg = replace_in_commands(load(AWS), "head_start_ray_commands", "--dump /mnt/efs/ssat/mlflow/mlflow.pgdump",
                              "--dump /home/ubuntu/mlflow.pgdump")
    assert_caught(problems_of(cfg, tmp_path), "--dump /home/ubuntu/mlflow.pgdump is node-local")
    cfg = replace_in_commands(load(AWS), "head_start_ray_commands", "--dump /mnt/efs/ssat/mlflow/mlflow.pgdump", "")
    assert_caught(problems_of(cfg, tmp_path), "postgres.sh start without --dump")


def test_slurm_takes_a_site_postgres_uri_else_sqlite():
    text = SBATCH.read_text()
    assert 'backend=${SSAT_MLFLOW_DB_URI:-sqlite:///$shared/mlflow/mlflow.db}' in text
    assert '--backend-store-uri "$backend"' in text


def test_the_postgres_driver_is_pinned_everywhere():
    pin = "psycopg2-binary==2.9.13"
    assert pin in (REPO / "lock" / "requirements.lock").read_text().split()
    assert pin in (REPO / "clusters" / "head-requirements.lock").read_text().split()
    assert f'"{pin}"' in (REPO / "pyproject.toml").read_text()
    assert "postgresql" in (REPO / "clusters" / "ci_prereqs.sh").read_text().split("required=(")[1].split(")")[0]


def test_unreadable_yaml_fails(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("cluster_name: [unclosed\n")
    assert_caught(validate_cluster_yaml(path, repo_root=REPO), "cannot read")


# --- the sbatch template ------------------------------------------------------------------------------------

def test_sbatch_template_is_valid_bash():
    result = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed (optional lint)")
def test_sbatch_template_and_scripts_pass_shellcheck():
    scripts = [SBATCH, *sorted((REPO / "clusters").rglob("*.sh"))]
    result = subprocess.run(["shellcheck", "-x", "-S", "warning", *map(str, scripts)],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout


def test_sbatch_sets_auth_and_shared_storage():
    text = SBATCH.read_text()
    assert "export RAY_AUTH_MODE=token" in text and "export SSAT_STORAGE_PATH=" in text
    assert "ray job submit" in text and "#SBATCH --nodes=" in text


def test_sbatch_asks_for_the_warning_the_requeue_and_checks_the_allocation_first():
    """What the time-limit, preemption and node-failure behaviour rests on (tests/slow/test_slurm.py runs it):
    SIGUSR1 to the batch shell before the limit, the right to requeue, a failed node not ending the job, the
    output appended by a requeued run; and the allocation checked before any server or Ray node starts."""
    text = SBATCH.read_text()
    directives = re.findall(r"^#SBATCH (--[\w-]+)(?:=(\S+))?$", text, flags=re.M)
    options = dict(directives)
    assert re.fullmatch(r"B:USR1@\d+", options["--signal"]) and int(options["--signal"].split("@")[1]) >= 120
    assert {"--requeue", "--no-kill", "--exclusive"} <= set(options) and options["--open-mode"] == "append"
    plan = text.index("plan=$(python -m sweeps.slurm plan")
    assert plan < text.index('bash "$repo/clusters/start_mlflow.sh" --host')
    assert plan < text.index('bash "$repo/clusters/slurm/ray_node.sh"')
    assert "trap 'stop_reason=\"time limit\"' USR1" in text and 'scontrol requeue "$job"' in text


def test_sbatch_syntax_error_fails(tmp_path):
    bad = tmp_path / "bad.sbatch"
    bad.write_text(SBATCH.read_text().replace("done\n", "", 1))
    assert_caught(validate_script(bad, repo_root=REPO), "bash -n")


def test_sbatch_without_auth_mode_fails(tmp_path):
    bad = tmp_path / "noauth.sbatch"
    bad.write_text(SBATCH.read_text().replace("export RAY_AUTH_MODE=token", "true"))
    assert_caught(validate_script(bad, repo_root=REPO), "RAY_AUTH_MODE is not exported")


def test_sbatch_naming_a_missing_script_fails(tmp_path):
    bad = tmp_path / "missing.sbatch"
    bad.write_text(SBATCH.read_text().replace("clusters/start_mlflow.sh", "clusters/gone.sh"))
    assert_caught(validate_script(bad, repo_root=REPO), "clusters/gone.sh")


# --- GPU shares of the sweep specs against the nodes that run them ---------------------------------------------

def cpus_per_gpu_of_gpu_nodes() -> dict[str, float]:
    """CPUs per GPU of every node that runs GPU trials: ray_cluster.yaml's GPU node types, and a node of the
    SLURM template (its #SBATCH --cpus-per-task and --gpus-per-task)."""
    shapes = {f"ray_cluster.yaml {name}": node["resources"]["CPU"] / node["resources"]["GPU"]
              for name, node in load(AWS)["available_node_types"].items() if node["resources"].get("GPU", 0) >= 1}
    sbatch = dict(re.findall(r"^#SBATCH --(cpus-per-task|gpus-per-task)=(\d+)", SBATCH.read_text(), flags=re.M))
    shapes["ray_sweep.sbatch"] = int(sbatch["cpus-per-task"]) / int(sbatch["gpus-per-task"])
    return shapes


def packing_problems(resources: dict, cpus_per_gpu: dict[str, float]) -> list[str]:
    """Ray packs floor(1/gpu) trials on a GPU only if their CPUs fit too; where they do not, GPU shares stay idle."""
    if not resources["gpu"]:
        return []
    per_gpu = math.floor(1 / resources["gpu"] + 1e-9)
    return [f"{where}: {per_gpu} trials per GPU x cpu {resources['cpu']} > its {cpus:g} CPUs per GPU"
            for where, cpus in cpus_per_gpu.items() if per_gpu * resources["cpu"] > cpus + 1e-9]


def test_gpu_nodes_are_read_from_the_cluster_files():
    # g5.2xlarge: 1 A10G, 8 vCPUs; the SLURM template: 16 CPUs and 4 GPUs per node
    assert cpus_per_gpu_of_gpu_nodes() == {"ray_cluster.yaml worker.gpu": 8.0, "ray_sweep.sbatch": 4.0}


def test_packing_rule_catches_trials_whose_cpus_do_not_fit():
    nodes = {"aws": 8.0, "slurm": 4.0}
    assert packing_problems({"cpu": 4, "gpu": 0.25}, nodes) == [
        "aws: 4 trials per GPU x cpu 4 > its 8 CPUs per GPU", "slurm: 4 trials per GPU x cpu 4 > its 4 CPUs per GPU"]
    assert packing_problems({"cpu": 2, "gpu": 0.25}, nodes) == ["slurm: 4 trials per GPU x cpu 2 > its 4 CPUs per GPU"]
    assert packing_problems({"cpu": 1, "gpu": 0.25}, nodes) == []
    # 0.3 packs 3 trials (not 3.33): 7.5 CPUs fit the 8 of aws
    assert (packing_problems({"cpu": 2.5, "gpu": 0.3}, nodes)
            == ["slurm: 3 trials per GPU x cpu 2.5 > its 4 CPUs per GPU"])
    assert packing_problems({"cpu": 8, "gpu": 1}, nodes) == ["slurm: 1 trials per GPU x cpu 8 > its 4 CPUs per GPU"]
    assert packing_problems({"cpu": 64, "gpu": 0}, nodes) == []  # CPU trials: no GPU share to leave idle


# Specs for one GPU machine, not a cluster: gpu-smoke packs 4 trials at 2 CPUs on the 16-core GPU machine (issue 26)
ONE_MACHINE = {"gpu-smoke.yaml": ["ray_sweep.sbatch: 4 trials per GPU x cpu 2 > its 4 CPUs per GPU"]}


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_spec_packs_trials_that_fit_the_gpu_nodes(path):
    from sweeps.spec import load_spec

    assert packing_problems(load_spec(path).resources, cpus_per_gpu_of_gpu_nodes()) == ONE_MACHINE.get(path.name, [])


# --- the module and its CLI -----------------------------------------------------------------------------------

def test_cluster_check_does_not_import_torch():
    code = "import sys, clusters.cluster_check as c; c.validate_path(sys.argv[1]); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code, str(AWS)], check=True, cwd=REPO)


def test_cli_exit_codes(tmp_path):
    module = "clusters.cluster_check"
    ok = subprocess.run([sys.executable, "-m", module, str(AWS), str(SBATCH)],
                        capture_output=True, text=True, cwd=REPO)
    assert ok.returncode == 0, ok.stdout
    bad_cfg = load(AWS)
    bad_cfg["available_node_types"]["worker.gpu"]["resources"]["GPU"] = 0.25
    (tmp_path / "pyproject.toml").write_text("")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(bad_cfg))
    failed = subprocess.run([sys.executable, "-m", module, str(bad)],
                            capture_output=True, text=True, cwd=REPO)
    assert failed.returncode == 1 and "FAIL" in failed.stdout and "integer" in failed.stdout


def test_stage_data_manifest_round_trip(tmp_path):
    root = tmp_path / "data"
    (root / "cifar10").mkdir(parents=True)
    (root / "cifar10" / "train.bin").write_bytes(b"\x01" * 1000)
    script = [sys.executable, str(REPO / "clusters" / "stage_data.py")]
    subprocess.run([*script, "manifest", str(root)], check=True, capture_output=True)
    assert subprocess.run([*script, "verify", str(root)], capture_output=True).returncode == 0
    copy_root = tmp_path / "copy"
    subprocess.run([*script, "pull", str(root), str(copy_root)], check=True, capture_output=True)
    (root / "cifar10" / "train.bin").write_bytes(b"\x02" * 1000)
    broken = subprocess.run([*script, "verify", str(root)], capture_output=True, text=True)
    assert broken.returncode == 1 and "sha256 differs" in broken.stderr
    assert subprocess.run([*script, "verify", str(copy_root)], capture_output=True).returncode == 0
    assert subprocess.run([*script, "verify", str(tmp_path / "nowhere")], capture_output=True).returncode == 1

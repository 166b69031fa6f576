#!/usr/bin/env bash
# Check one node before Ray starts on it (so before any trial can be placed there). Run by setup_node.sh at
# the end of every node's setup, and by the SLURM template on every allocated node. Any problem fails the
# setup: `ray up` then reports the node as failed and never starts Ray on it.
#
#   check_node.sh --python PY --lock FILE --data-root DIR --storage-path PATH_OR_URI
#                 [--gpu auto|required|none] [--mlflow-uri URI]
#
# Checks: RAY_AUTH_MODE is set explicitly; PY is CPython 3.11 and every package of the lock file is installed
# at the locked version; the data root exists and matches its MANIFEST.sha256 (if any); the Tune
# storage_path accepts a write and a read from this node; on a GPU node the NVIDIA driver is new enough for
# the CUDA build of the pinned torch (2.14.1+cu130: CUDA 13.0 needs driver >= 580.65.06) and torch sees a
# GPU; the MLflow tracking server answers (workers: it runs on the head).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=clusters/lib.sh
source "$here/lib.sh"

MIN_DRIVER=580.65.06
python="" lock="" data_root="" storage="" gpu=auto mlflow_uri=""
while (($#)); do
    case "$1" in
        --python) python=$2; shift 2 ;;
        --lock) lock=$2; shift 2 ;;
        --data-root) data_root=$2; shift 2 ;;
        --storage-path) storage=$2; shift 2 ;;
        --gpu) gpu=$2; shift 2 ;;
        --mlflow-uri) mlflow_uri=$2; shift 2 ;;
        *) ssat_die "check_node.sh: unknown argument $1" ;;
    esac
done
[[ -n "$python" && -n "$lock" && -n "$data_root" && -n "$storage" ]] ||
    ssat_die "check_node.sh needs --python, --lock, --data-root and --storage-path"

problems=()
case "${RAY_AUTH_MODE:-}" in
    disabled | token) ;;
    *) problems+=("RAY_AUTH_MODE is '${RAY_AUTH_MODE:-unset}': set it explicitly to disabled or token") ;;
esac
if [[ "${RAY_AUTH_MODE:-}" == token && -z "${RAY_AUTH_TOKEN:-}" && ! -r "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]]; then
    problems+=("RAY_AUTH_MODE=token but no token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)")
fi

# The environment against the lock file, package by package (names compared the way pip normalises them).
if ! env_report=$("$python" - "$lock" 2>&1 <<'PY'
import re, sys
from importlib import metadata
if sys.version_info[:2] != (3, 11):
    print(f"python is {sys.version.split()[0]}, the project needs 3.11")
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
installed = {norm(d.metadata["Name"]): d.version for d in metadata.distributions()}
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if "==" not in line:
        continue
    name, version = (part.strip() for part in line.split("=="))
    got = installed.get(norm(name.split("[")[0]))
    if got is None:
        print(f"{name}=={version} from the lock is not installed")
    elif got.split("+")[0] != version.split("+")[0]:
        print(f"{name} is {got}, the lock pins {version}")
PY
); then
    problems+=("cannot run $python: $env_report")
elif [[ -n "$env_report" ]]; then
    while IFS= read -r line; do problems+=("env: $line"); done <<<"$env_report"
fi

if ! data_report=$("$python" "$here/stage_data.py" verify "$data_root" 2>&1); then
    while IFS= read -r line; do problems+=("$line"); done <<<"$data_report"
fi

# Tune no longer syncs trial folders to the head: every node must reach storage_path itself.
if ! storage_report=$("$python" - "$storage" "$(hostname)" 2>&1 <<'PY'
import os, sys, uuid
from pyarrow import fs
uri = sys.argv[1]
if "://" not in uri:
    os.makedirs(uri, exist_ok=True)
    uri = os.path.abspath(uri)
filesystem, root = fs.FileSystem.from_uri(uri)
probe = f"{root.rstrip('/')}/.node-probes/{sys.argv[2]}-{uuid.uuid4().hex[:8]}"
filesystem.create_dir(probe.rsplit("/", 1)[0], recursive=True)
with filesystem.open_output_stream(probe) as out:
    out.write(b"ok")
with filesystem.open_input_stream(probe) as inp:
    assert inp.read() == b"ok", "read back something else"
filesystem.delete_file(probe)
PY
); then
    problems+=("storage_path $storage is not writable from this node: $(tail -n 1 <<<"$storage_report")")
fi

if [[ "$gpu" != none ]]; then
    if command -v nvidia-smi >/dev/null 2>&1; then
        driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1 | tr -d ' ')
        if [[ "$(printf '%s\n%s\n' "$MIN_DRIVER" "$driver" | sort -V | head -n 1)" != "$MIN_DRIVER" ]]; then
            problems+=("NVIDIA driver $driver is older than $MIN_DRIVER, the minimum for torch's CUDA 13.0 build")
        elif ! cuda_report=$("$python" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"; print(torch.version.cuda)' 2>&1); then
            problems+=("torch cannot use the GPU: $(tail -n 1 <<<"$cuda_report")")
        fi
    elif [[ "$gpu" == required ]]; then
        problems+=("no nvidia-smi on a node that must have a GPU (driver >= $MIN_DRIVER)")
    fi
fi

if [[ -n "$mlflow_uri" ]]; then
    if ! "$python" - "$mlflow_uri" <<'PY'
import sys, time, urllib.request
deadline = time.time() + 90
while True:
    try:
        with urllib.request.urlopen(sys.argv[1].rstrip("/") + "/health", timeout=5) as reply:
            if reply.status == 200:
                break
    except OSError:
        pass
    if time.time() > deadline:
        sys.exit(1)
    time.sleep(2)
PY
    then
        problems+=("the MLflow tracking server at $mlflow_uri does not answer from this node")
    fi
fi

if ((${#problems[@]})); then
    for problem in "${problems[@]}"; do ssat_log "node check: $problem"; done
    ssat_die "node $(hostname) failed ${#problems[@]} check(s); no trial will run here"
fi
ssat_log "node $(hostname) passed: env = lock, data root $data_root, storage $storage, RAY_AUTH_MODE=$RAY_AUTH_MODE"

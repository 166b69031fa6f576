#!/usr/bin/env bash
# Start (or find running) the MLflow tracking server of a cluster, on the head node. Every worker logs to it
# over the private network; people reach its UI through an SSH tunnel.
#
#   start_mlflow.sh --host IP|private [--port 5000] --backend-store-uri URI --artifacts-destination URI
#                   [--state-dir DIR] [--pgpass FILE]
#   start_mlflow.sh --stop [--state-dir DIR]
#
# Store: on the cloud the head's PostgreSQL (clusters/postgres.sh; postgresql://mlflow@127.0.0.1:5432/mlflow with
# --pgpass, libpq's password file that postgres.sh wrote, handed to the server as PGPASSFILE so that no password is
# on a command line); on SLURM a site PostgreSQL (SSAT_MLFLOW_DB_URI) or a SQLite file (sqlite:////abs/path.db).
# A bare postgresql:// is given to the server as postgresql+psycopg2:// (the driver the lock pins; SQLAlchemy 2.1
# would look for psycopg 3).
#
# Network: bound to the head's PRIVATE address (never 0.0.0.0: the script refuses it), with --allowed-hosts
# listing exactly the Host headers we use: the private address (workers) and localhost / 127.0.0.1 (an SSH
# tunnel from a laptop). The port is closed to the internet by the network, not by MLflow: on AWS the
# cluster's security group admits only SSH from outside; on SLURM the compute nodes' network is internal.
# Artifacts are proxied (--serve-artifacts is MLflow's default): workers upload checkpoints through the
# server, so they need no credentials for the artifact store.
# Size: one gunicorn worker and no job runner (2 processes, ~0.5 GB) instead of MLflow's default 4 workers
# plus job runner (15 processes, ~3 GB); the sweep sends a few requests per epoch per trial.
# Idempotent: a healthy server recorded in the state folder is left running (ray up runs this again on
# every restart of the head). Stopped with SIGINT (SIGTERM was seen not to stop it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=clusters/lib.sh
source "$here/lib.sh"

host="" port=5000 backend="" artifacts="" state_dir="$HOME/.ssat/mlflow" stop=0 pgpass=""
while (($#)); do
    case "$1" in
        --host) host=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --backend-store-uri) backend=$2; shift 2 ;;
        --artifacts-destination) artifacts=$2; shift 2 ;;
        --state-dir) state_dir=$2; shift 2 ;;
        --pgpass) pgpass=$2; shift 2 ;;
        --stop) stop=1; shift ;;
        *) ssat_die "start_mlflow.sh: unknown argument $1" ;;
    esac
done
pid_file="$state_dir/server.pid"

running_pid() {
    local pid
    [[ -f "$pid_file" ]] || return 1
    pid=$(cat "$pid_file")
    kill -0 "$pid" 2>/dev/null || return 1
    printf '%s\n' "$pid"
}

if ((stop)); then
    if pid=$(running_pid); then
        # The server leads its own session (setsid below): signal the whole group, gunicorn included.
        kill -INT -- "-$pid" 2>/dev/null || kill -INT "$pid"
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$pid" 2>/dev/null; then kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"; fi
        ssat_log "stopped MLflow server $pid"
    fi
    rm -f "$pid_file"
    exit 0
fi

[[ -n "$host" && -n "$backend" && -n "$artifacts" ]] ||
    ssat_die "start_mlflow.sh needs --host, --backend-store-uri and --artifacts-destination"
[[ "$host" == private ]] && host=$(ssat_private_ip)
backend=${backend/#postgresql:\/\//postgresql+psycopg2:\/\/}
if [[ -n "$pgpass" ]]; then
    pgpass=${pgpass/#\~/$HOME}
    [[ -r "$pgpass" ]] || ssat_die "--pgpass $pgpass: no such file (clusters/postgres.sh start writes it)"
    export PGPASSFILE="$pgpass"
fi
ssat_refuse_wildcard "$host" "the MLflow server"
command -v mlflow >/dev/null || ssat_die "mlflow is not on the PATH (is the project's venv on the login PATH?)"
url="http://$host:$port"

healthy() { python - "$url/health" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=3) as reply:
        sys.exit(0 if reply.status == 200 else 1)
except OSError:
    sys.exit(1)
PY
}

if running_pid >/dev/null && healthy; then
    ssat_log "MLflow server already running at $url"
    exit 0
fi

mkdir -p "$state_dir"
for uri in "$backend" "$artifacts"; do
    # Local stores: create their folders (sqlite:////abs/path.db or a plain path).
    case "$uri" in
        sqlite:///*) mkdir -p "$(dirname "${uri#sqlite:///}")" ;;
        *://*) ;;
        *) mkdir -p "$uri" ;;
    esac
done

allowed="$host:$port,$host"
for local_name in localhost 127.0.0.1; do  # the Host header a browser sends through an SSH tunnel
    [[ "$host" == "$local_name" ]] || allowed+=",$local_name:$port,$local_name"
done
# setsid + nohup + closed fds: the server must outlive the ssh session of `ray up` that started it.
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid nohup mlflow server \
    --host "$host" --port "$port" --workers 1 \
    --backend-store-uri "$backend" --artifacts-destination "$artifacts" \
    --allowed-hosts "$allowed" \
    </dev/null >"$state_dir/server.log" 2>&1 &
echo $! >"$pid_file"
for _ in $(seq 1 60); do
    if healthy; then
        ssat_log "MLflow server $(cat "$pid_file") at $url (allowed hosts: $allowed)"
        exit 0
    fi
    kill -0 "$(cat "$pid_file")" 2>/dev/null || break
    sleep 1
done
tail -n 20 "$state_dir/server.log" >&2 || true
ssat_die "the MLflow server did not answer at $url"

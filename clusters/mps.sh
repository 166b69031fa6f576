#!/usr/bin/env bash
# The NVIDIA MPS (Multi-Process Service) control daemon of one GPU node, so that the trials packed on a GPU
# (a spec's resources.gpu < 1) run their kernels side by side instead of taking turns.
#
#   mps.sh start|stop|status|env [--dir DIR]
#
# Why: packed trials are separate processes, and without MPS a GPU runs one process's kernels at a time
# (time-slicing). With MPS every CUDA process of this user that finds CUDA_MPS_PIPE_DIRECTORY in its
# environment becomes a client of one MPS server, whose GPU work overlaps. Price: a fatal GPU fault in one
# client (e.g. an illegal memory access) ends every client on that GPU (README.md, Reliability).
#
# DIR (default $SSAT_MPS_DIR, else /tmp/ssat-mps-UID, or /tmp/ssat-mps-UID-JOBID inside a SLURM job) is
# private to this user (mode 700) and node-local: DIR/pipe is CUDA_MPS_PIPE_DIRECTORY (the daemon's sockets
# and its own pid file, nvidia-cuda-mps-control.pid), DIR/log is CUDA_MPS_LOG_DIRECTORY. Private folders keep
# this daemon apart from a site's system-wide one (/tmp/nvidia-mps) and from other users'.
#   start   start the daemon (idempotent). With SSAT_MPS=off, or without nvidia-cuda-mps-control on the
#           PATH (a CPU node, a driver without MPS), say so and exit 0: the node runs without MPS.
#   stop    `quit` to the daemon, wait for its PID to exit (SSAT_MPS_STOP_TIMEOUT seconds, default 30),
#           then SIGTERM that PID, and SIGKILL it 5 s later. Only that PID is ever signalled.
#   status  exit 0 if the daemon of DIR runs (prints its PID), 1 otherwise.
#   env     the exports a client needs (sourced into ~/.ssat/env.sh or eval'd before `ray start`); exit 1
#           and print nothing when the daemon does not run or SSAT_MPS=off.
# The GPUs' compute mode is left as it is: MPS works in the default mode, and EXCLUSIVE_PROCESS would need
# root and would change the node for every other user.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=clusters/lib.sh
source "$here/lib.sh"

usage="usage: mps.sh start|stop|status|env [--dir DIR]"
action=${1:-}
shift || true
dir=${SSAT_MPS_DIR:-/tmp/ssat-mps-$(id -u)${SLURM_JOB_ID:+-$SLURM_JOB_ID}}
while (($#)); do
    case "$1" in
        --dir) dir=$2; shift 2 ;;
        *) ssat_die "mps.sh: unknown argument $1 ($usage)" ;;
    esac
done
[[ "$dir" == /* ]] || ssat_die "mps.sh --dir $dir: give an absolute path"
# The daemon's sockets live in DIR/pipe, and a Unix socket path holds at most 107 bytes.
((${#dir} <= 80)) || ssat_die "mps.sh --dir $dir: longer than 80 characters (Unix socket paths are short)"
case "${SSAT_MPS:-auto}" in
    auto | off) ;;
    *) ssat_die "SSAT_MPS=${SSAT_MPS}; allowed: auto (MPS on GPU nodes that have it) or off" ;;
esac
pipe="$dir/pipe" logs="$dir/log"
daemon_pid_file="$pipe/nvidia-cuda-mps-control.pid"
stop_timeout=${SSAT_MPS_STOP_TIMEOUT:-30}

# True while PID is a live nvidia-cuda-mps-control (not a recycled PID, not a zombie: its command line is
# empty).
is_daemon() {
    [[ -r "/proc/$1/cmdline" && "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" == *nvidia-cuda-mps-control* ]]
}

# The PID of this folder's daemon if it runs, from the daemon's own pid file.
daemon_pid() {
    local pid
    [[ -f "$daemon_pid_file" ]] || return 1
    pid=$(tr -dc 0-9 <"$daemon_pid_file")
    [[ -n "$pid" ]] && is_daemon "$pid" || return 1
    printf '%s\n' "$pid"
}

# A folder only this user can enter. In a shared /tmp another user could have made it first, or put a
# link there: refuse rather than talk to someone else's daemon.
private_dir() {
    if [[ -L "$1" || (-e "$1" && ! -d "$1") ]]; then
        ssat_die "$1 exists and is not a directory; remove it or give another --dir"
    fi
    [[ -d "$1" ]] || mkdir -m 700 "$1"
    [[ -O "$1" ]] || ssat_die "$1 belongs to another user; give another --dir"
    chmod 700 "$1"
}

# Send one command to the daemon through its pipe folder.
control() {
    printf '%s\n' "$1" | CUDA_MPS_PIPE_DIRECTORY="$pipe" timeout 10 nvidia-cuda-mps-control
}

gone_within() {  # PID SECONDS: true once the daemon PID has exited, false if it still runs after SECONDS
    local polls=$(($2 * 5))
    while is_daemon "$1"; do
        ((polls-- > 0)) || return 1
        sleep 0.2
    done
}

case "$action" in
    start)
        if [[ "${SSAT_MPS:-auto}" == off ]]; then
            ssat_log "MPS off (SSAT_MPS=off): trials packed on a GPU take turns on it"
            exit 0
        fi
        if ! command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
            ssat_log "MPS unavailable (no nvidia-cuda-mps-control on the PATH): going on without it"
            exit 0
        fi
        if pid=$(daemon_pid); then
            ssat_log "MPS control daemon already running (PID $pid, $pipe)"
            exit 0
        fi
        private_dir "$dir"
        private_dir "$pipe"
        private_dir "$logs"
        rm -f "$daemon_pid_file"  # a dead daemon's (the check above found no live one)
        # -d forks the daemon and returns; its output goes to the log folder so that no caller's terminal
        # (an ssh session of `ray up`) stays open on it.
        CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$logs" \
            nvidia-cuda-mps-control -d </dev/null >>"$logs/start.out" 2>&1 ||
            ssat_die "nvidia-cuda-mps-control -d failed (see $logs/start.out)"
        for _ in $(seq 1 50); do
            if pid=$(daemon_pid); then
                ssat_log "MPS control daemon started (PID $pid, pipes $pipe, logs $logs)"
                exit 0
            fi
            sleep 0.2
        done
        control quit >/dev/null 2>&1 || true
        ssat_die "the MPS control daemon wrote no pid file in $pipe within 10 s (see $logs)"
        ;;
    stop)
        if ! pid=$(daemon_pid); then
            ssat_log "no MPS control daemon runs for $pipe"
            exit 0
        fi
        control quit >/dev/null 2>&1 || ssat_log "the MPS control daemon (PID $pid) did not take 'quit'"
        if ! gone_within "$pid" "$stop_timeout"; then
            ssat_log "the MPS control daemon (PID $pid) still runs after ${stop_timeout}s: SIGTERM to it"
            kill -TERM "$pid" 2>/dev/null || true
            gone_within "$pid" 5 || kill -KILL "$pid" 2>/dev/null || true
        fi
        ssat_log "MPS control daemon stopped (PID $pid)"
        ;;
    status)
        if pid=$(daemon_pid); then
            printf 'MPS control daemon running: PID %s, pipes %s\n' "$pid" "$pipe"
        else
            printf 'no MPS control daemon for %s\n' "$pipe"
            exit 1
        fi
        ;;
    env)
        [[ "${SSAT_MPS:-auto}" != off ]] && daemon_pid >/dev/null || exit 1
        printf 'export SSAT_MPS_DIR=%q\n' "$dir"
        printf 'export CUDA_MPS_PIPE_DIRECTORY=%q\n' "$pipe"
        printf 'export CUDA_MPS_LOG_DIRECTORY=%q\n' "$logs"
        ;;
    *) ssat_die "$usage" ;;
esac

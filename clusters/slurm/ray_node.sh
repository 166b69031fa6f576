#!/usr/bin/env bash
# Start one Ray node in the foreground (`ray start --block`), so that the srun step (or the test harness)
# that runs it owns every Ray process of the node and ends them by ending this one.
#
#   ray_node.sh head   --node-ip IP|auto [--port 6379] [--dashboard-port 8265] --num-cpus N --num-gpus G [--resources JSON]
#   ray_node.sh worker --address HEAD_IP:PORT --node-ip IP|auto --num-cpus N --num-gpus G [--resources JSON]
#   (both)             [--object-store-bytes B] [--temp-dir DIR]
#
# RAY_AUTH_MODE must be set by the caller (disabled or token); the script refuses to guess, because with
# it unset Ray switches token auth on by itself as soon as a token file exists. With token, give the token
# through RAY_AUTH_TOKEN_PATH (a file only you can read) or RAY_AUTH_TOKEN.
# --node-ip auto: the head takes its private address (clusters/lib.sh), a worker the address it uses to
# reach the head (right on nodes with several networks, e.g. ethernet and InfiniBand).
# Node resources must be integers (fractions belong to the trials' requests).
# The dashboard (and with it the job API, which runs arbitrary code) listens on 127.0.0.1 only: submit
# from the head node itself, or through an SSH tunnel.
# GPU packing: with --num-gpus > 0 the node's MPS control daemon (clusters/mps.sh; SSAT_MPS=off: none) starts
# before Ray, so every Ray worker (every trial) inherits CUDA_MPS_PIPE_DIRECTORY, and is stopped by its PID
# once Ray has exited. The MPS server numbers the GPUs it was started with 0..n-1, so Ray then gets
# CUDA_VISIBLE_DEVICES=0..n-1 (a trial asking for GPU 2 of a step's "2,3" would be refused).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=clusters/lib.sh
source "$here/lib.sh"

role=${1:-}
shift || true
node_ip="" port=6379 dash_port=8265 address="" cpus="" gpus="" resources="{}" store="" temp_dir=""
while (($#)); do
    case "$1" in
        --node-ip) node_ip=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --dashboard-port) dash_port=$2; shift 2 ;;
        --address) address=$2; shift 2 ;;
        --num-cpus) cpus=$2; shift 2 ;;
        --num-gpus) gpus=$2; shift 2 ;;
        --resources) resources=$2; shift 2 ;;
        --object-store-bytes) store=$2; shift 2 ;;
        --temp-dir) temp_dir=$2; shift 2 ;;
        *) ssat_die "ray_node.sh: unknown argument $1" ;;
    esac
done

case "${RAY_AUTH_MODE:-}" in
    disabled) ;;
    token)
        [[ -n "${RAY_AUTH_TOKEN:-}" || -r "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]] ||
            ssat_die "RAY_AUTH_MODE=token but no RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token" ;;
    *) ssat_die "set RAY_AUTH_MODE explicitly (disabled or token) before starting a Ray node" ;;
esac
[[ -n "$node_ip" ]] || ssat_die "--node-ip is required (the node's address on the cluster network, or auto)"
if [[ "$node_ip" == auto ]]; then
    if [[ "$role" == worker ]]; then node_ip=$(ssat_ip_towards "${address%:*}"); else node_ip=$(ssat_private_ip); fi
fi
ssat_refuse_wildcard "$node_ip" "the Ray node"
for n in "$cpus" "$gpus"; do
    [[ "$n" =~ ^[0-9]+$ ]] || ssat_die "--num-cpus and --num-gpus must be integers (got '$cpus', '$gpus')"
done

args=(--node-ip-address "$node_ip" --num-cpus "$cpus" --num-gpus "$gpus" --resources "$resources"
      --disable-usage-stats --block)
[[ -n "$store" ]] && args+=(--object-store-memory "$store")
case "$role" in
    head)
        args=(--head --port "$port" --dashboard-host 127.0.0.1 --dashboard-port "$dash_port" "${args[@]}")
        [[ -n "$temp_dir" ]] && args+=(--temp-dir "$temp_dir")
        ;;
    worker)
        [[ -n "$address" ]] || ssat_die "worker needs --address HEAD_IP:PORT"
        args=(--address "$address" "${args[@]}")
        ;;
    *) ssat_die "usage: ray_node.sh head|worker ..." ;;
esac
if ((gpus > 0)) && bash "$here/mps.sh" start && mps_exports=$(bash "$here/mps.sh" env); then
    eval "$mps_exports"
    if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
        IFS=, read -ra visible <<<"$CUDA_VISIBLE_DEVICES"
        CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((${#visible[@]} - 1)))
        export CUDA_VISIBLE_DEVICES
    fi
    ssat_log "ray start ${args[*]} (RAY_AUTH_MODE=$RAY_AUTH_MODE, host $(hostname), MPS $CUDA_MPS_PIPE_DIRECTORY)"
    # Ray runs as a child here (not exec'd) so that the daemon is stopped after it; a signal to this script
    # (srun ending the step) is passed on to Ray.
    ray start "${args[@]}" &
    ray_pid=$!
    trap 'kill -TERM "$ray_pid" 2>/dev/null || true' TERM INT
    rc=0
    wait "$ray_pid" || rc=$?
    while kill -0 "$ray_pid" 2>/dev/null; do rc=0; wait "$ray_pid" || rc=$?; done  # woken by a signal
    bash "$here/mps.sh" stop
    exit "$rc"
fi
ssat_log "ray start ${args[*]} (RAY_AUTH_MODE=$RAY_AUTH_MODE, host $(hostname))"
exec ray start "${args[@]}"

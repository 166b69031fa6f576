# shellcheck shell=bash
# Helpers shared by the node scripts in this folder (sourced, not run).

ssat_log() { printf '[ssat %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
ssat_die() { ssat_log "ERROR: $*"; exit 1; }

# The node's private address: the source address of its route to the outside (the primary interface on
# EC2 and on SLURM nodes, never docker0); falls back to the first of `hostname -I`, then to 127.0.0.1 on a
# machine with no route at all (the namespaced tests).
ssat_private_ip() {
    local ip=""
    if command -v ip >/dev/null 2>&1; then
        ip=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')
    fi
    if [[ -z "$ip" ]]; then
        ip=$(hostname -I 2>/dev/null | awk '{print $1}')
    fi
    printf '%s\n' "${ip:-127.0.0.1}"
}

# The address this node uses to reach TARGET (a worker's address on the network its head is on).
ssat_ip_towards() {
    local ip=""
    if command -v ip >/dev/null 2>&1; then
        ip=$(ip -4 route get "$1" 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')
    fi
    printf '%s\n' "${ip:-$(ssat_private_ip)}"
}

# Refuse to bind a service to every interface: the tracking server and the dashboard are reached through
# the private network or an SSH tunnel only.
ssat_refuse_wildcard() {
    case "$1" in
        0.0.0.0 | :: | "[::]" | "*") ssat_die "refusing to bind $2 to all interfaces ($1); give the private address" ;;
    esac
}

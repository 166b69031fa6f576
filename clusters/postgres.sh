#!/usr/bin/env bash
# The head's PostgreSQL for its MLflow server: Debian's (Ubuntu's) PostgreSQL, one private cluster listening on
# 127.0.0.1 only, its data on the head's own disk, dumped (pg_dump) to the shared storage at every stop (and every
# --dump-every minutes) and restored from that dump when a head starts without data, so a replaced head finds its
# runs as before.
#
#   postgres.sh start  --data-dir DIR --dump FILE [--port 5432] [--state-dir DIR] [--dump-every MIN]
#                      [--shared-mount DIR] [--systemd]
#   postgres.sh stop   --data-dir DIR --dump FILE [--state-dir DIR] [--shared-mount DIR]
#   postgres.sh dump   --data-dir DIR --dump FILE [--state-dir DIR] [--shared-mount DIR]
#   postgres.sh status --data-dir DIR [--state-dir DIR]
#   postgres.sh uri    [--port 5432]          prints the store URI for `mlflow server --backend-store-uri`
#
# start: a cluster already running in DIR is left as it is (ray up runs this again at every restart of the head).
# A DIR without a cluster is made with initdb; then, if FILE exists, the database is restored from it, else it
# starts empty (MLflow makes its tables). Role and database: `mlflow`, password authentication (scram-sha-256) from
# 127.0.0.1 only, no Unix socket; the password is made at initdb and kept in STATE/pgpass (mode 600), libpq's
# password file: give it to the server as PGPASSFILE (start_mlflow.sh --pgpass), never in a command line.
# stop: the dump first (FILE.tmp, then renamed over FILE, the previous one kept as FILE.prev), then PostgreSQL's
# fast shutdown of the postmaster by its PID (pg_ctl stop -m fast). A failed dump is reported (exit 1) after the
# stop: the data stay on the local disk.
# FILE.json records which cluster wrote the dump (PostgreSQL's system identifier). A cluster that finds a dump
# written by another cluster since (a second head, or a replaced head whose dump this one never restored) refuses
# to start or dump, rather than overwrite those runs: move one of the two away (the messages say which).
# --shared-mount DIR: refuse everything unless DIR is a mount point (a node restarted without its NFS mount
# would otherwise restore nothing and later dump an empty store). --dump-every MIN (default 10, 0: only at stop):
# a loop (its PID in STATE) dumps while the cluster runs, so a head that dies without a stop loses at most that.
# --systemd: start and stop through a systemd unit (ssat-postgres.service, made with sudo -n): PostgreSQL then
# belongs to the unit, which systemd stops, dump included, before it unmounts the shared storage when the
# instance is stopped or terminated (`ray down`: the cluster launcher has no teardown hook of its own).
# Run as root, PostgreSQL runs as Debian's `postgres` user (it refuses root) and DIR belongs to that user.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=clusters/lib.sh
source "$here/lib.sh"

action=${1:-}
shift || true
data_dir="" dump="" port=5432 state_dir="$HOME/.ssat/postgres" dump_every=10 shared_mount="" systemd=0
args=("$@")
while (($#)); do
    case "$1" in
        --data-dir) data_dir=$2; shift 2 ;;
        --dump) dump=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --state-dir) state_dir=$2; shift 2 ;;
        --dump-every) dump_every=$2; shift 2 ;;
        --shared-mount) shared_mount=$2; shift 2 ;;
        --systemd) systemd=1; shift ;;
        *) ssat_die "postgres.sh: unknown argument $1" ;;
    esac
done
[[ "$port" =~ ^[0-9]+$ && "$dump_every" =~ ^[0-9]+$ ]] || ssat_die "--port and --dump-every must be integers"
data_dir=${data_dir/#\~/$HOME}
dump=${dump/#\~/$HOME}
db=mlflow user=mlflow
pgpass="$state_dir/pgpass"
uri="postgresql+psycopg2://$user@127.0.0.1:$port/$db"

bindir() {
    local found
    found=$(find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' 2>/dev/null | sort -V | tail -n 1)
    if [[ -n "$found" ]]; then dirname "$found"; return; fi
    command -v pg_config >/dev/null && [[ -x "$(pg_config --bindir)/postgres" ]] && { pg_config --bindir; return; }
    ssat_die "PostgreSQL's server programs are missing (Debian/Ubuntu: apt-get install postgresql; setup_node.sh --postgres)"
}

# PostgreSQL refuses to run as root: as root, its programs run as Debian's postgres user.
as_pg() {
    if ((EUID == 0)); then runuser -u postgres -- "$@"; else "$@"; fi
}

client() {  # a client program (pg_dump, pg_restore, psql, pg_isready) against the cluster, by TCP, with the password
    local program=$1
    shift
    PGPASSFILE="$pgpass" "$(bindir)/$program" -h 127.0.0.1 -p "$port" -U "$user" "$@"
}

need_mount() {
    if [[ -n "$shared_mount" ]] && ! mountpoint -q "$shared_mount"; then
        ssat_die "$shared_mount is not mounted: refusing to $1 (a dump there would not reach the shared storage)"
    fi
}

running() { [[ -f "$data_dir/postmaster.pid" ]] && as_pg "$(bindir)/pg_ctl" -D "$data_dir" status >/dev/null 2>&1; }

system_id() { as_pg "$(bindir)/pg_controldata" "$data_dir" | awk -F: '/Database system identifier/ {gsub(/ /, "", $2); print $2}'; }

dump_owner() { [[ -f "$dump.json" ]] && python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["system_identifier"])' "$dump.json"; }

# The dump on the shared storage is this cluster's, or the one it was restored from; else someone else's.
check_dump_owner() {
    local owner mine restored=""
    owner=$(dump_owner) || return 0
    mine=$(system_id)
    [[ -f "$data_dir/ssat_restored_from" ]] && restored=$(cat "$data_dir/ssat_restored_from")
    [[ -z "$owner" || "$owner" == "$mine" || "$owner" == "$restored" ]] && return 0
    ssat_die "$dump was written by another PostgreSQL cluster (system $owner; this one, in $data_dir, is $mine): a head \
replaced meanwhile? To keep the runs in the dump, move $data_dir away (the next start restores the dump); to keep \
the local ones, move $dump away"
}

do_dump() {
    need_mount dump
    [[ -n "$dump" ]] || ssat_die "--dump FILE is required"
    running || ssat_die "no PostgreSQL running in $data_dir: nothing to dump"
    check_dump_owner
    mkdir -p "$(dirname "$dump")"
    local tmp="$dump.tmp.$$" t0=$SECONDS
    if ! client pg_dump -Fc -f "$tmp" "$db"; then
        rm -f "$tmp"
        return 1
    fi
    sync "$tmp" 2>/dev/null || sync
    [[ -f "$dump" ]] && mv -f "$dump" "$dump.prev"
    mv -f "$tmp" "$dump"
    printf '{"system_identifier": "%s", "host": "%s", "written_at": "%s", "bytes": %s}\n' "$(system_id)" \
        "$(hostname)" "$(date -u +%FT%TZ)" "$(stat -c %s "$dump")" >"$dump.json.tmp"
    mv -f "$dump.json.tmp" "$dump.json"
    ssat_log "dumped $db to $dump ($(stat -c %s "$dump") bytes, $((SECONDS - t0)) s)"
}

stop_loop() {
    local pid
    [[ -f "$state_dir/dump-loop.pid" ]] || return 0
    pid=$(cat "$state_dir/dump-loop.pid")
    kill "$pid" 2>/dev/null || true
    rm -f "$state_dir/dump-loop.pid"
}

initialise() {
    local pw
    mkdir -p "$state_dir"
    chmod 700 "$state_dir"
    pw=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
    (umask 077; printf '127.0.0.1:%s:*:%s:%s\n' "$port" "$user" "$pw" >"$pgpass")
    mkdir -p "$data_dir"
    chmod 700 "$data_dir"
    ((EUID == 0)) && chown postgres:postgres "$data_dir"
    local pwfile
    pwfile=$(mktemp)
    printf '%s\n' "$pw" >"$pwfile"
    ((EUID == 0)) && chown postgres "$pwfile"
    as_pg "$(bindir)/initdb" -D "$data_dir" -U "$user" --pwfile="$pwfile" --auth-host=scram-sha-256 \
        --auth-local=reject -E UTF8 --locale=C.UTF-8 >"$state_dir/initdb.log" 2>&1 ||
        { rm -f "$pwfile"; tail -n 20 "$state_dir/initdb.log" >&2; ssat_die "initdb failed"; }
    rm -f "$pwfile"
    # Loopback only, no Unix socket; logs in the data folder.
    as_pg tee -a "$data_dir/postgresql.conf" >/dev/null <<EOF
# clusters/postgres.sh: the head's MLflow store, reached from this machine only
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = ''
logging_collector = on
log_directory = 'log'
EOF
    # reject everything but scram-sha-256 from 127.0.0.1 (initdb also allowed ::1)
    printf 'host all %s 127.0.0.1/32 scram-sha-256\n' "$user" | as_pg tee "$data_dir/pg_hba.conf" >/dev/null
}

start_cluster() {
    as_pg "$(bindir)/pg_ctl" -D "$data_dir" -l "$data_dir/startup.log" -w -t 120 start >/dev/null ||
        { tail -n 20 "$data_dir/startup.log" >&2 || true; ssat_die "PostgreSQL did not start in $data_dir"; }
}

do_start() {
    need_mount start
    [[ -n "$data_dir" && -n "$dump" ]] || ssat_die "start needs --data-dir and --dump"
    [[ -f "$pgpass" || ! -f "$data_dir/PG_VERSION" ]] ||
        ssat_die "$data_dir holds a cluster but $pgpass (its password) is gone: give the --state-dir it was made with"
    if running; then
        ssat_log "PostgreSQL already running in $data_dir ($uri)"
    else
        local fresh=0
        [[ -f "$data_dir/PG_VERSION" ]] || { initialise; fresh=1; }
        ((fresh)) || check_dump_owner
        start_cluster
        if ((fresh)); then
            client psql -q -d postgres -c "CREATE DATABASE $db OWNER $user" >/dev/null
            if [[ -f "$dump" ]]; then
                local t0=$SECONDS
                client pg_restore --no-owner --exit-on-error --single-transaction -d "$db" "$dump" ||
                    ssat_die "restoring $dump failed (the cluster in $data_dir is left as it is; remove it to retry)"
                dump_owner >"$data_dir/ssat_restored_from.tmp" 2>/dev/null || true
                as_pg tee "$data_dir/ssat_restored_from" <"$data_dir/ssat_restored_from.tmp" >/dev/null
                rm -f "$data_dir/ssat_restored_from.tmp"
                ssat_log "restored $db from $dump ($((SECONDS - t0)) s)"
            else
                ssat_log "no dump at $dump: a new, empty store"
            fi
        fi
        ssat_log "PostgreSQL running in $data_dir on 127.0.0.1:$port ($uri; password in $pgpass)"
    fi
    if ((dump_every > 0)); then
        local pid=""
        [[ -f "$state_dir/dump-loop.pid" ]] && pid=$(cat "$state_dir/dump-loop.pid")
        if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
            setsid nohup bash "$here/postgres.sh" dump-loop "${args[@]}" </dev/null >>"$state_dir/dump-loop.log" 2>&1 &
            echo $! >"$state_dir/dump-loop.pid"
        fi
    fi
}

do_stop() {
    stop_loop
    running || { ssat_log "no PostgreSQL running in $data_dir"; return 0; }
    local rc=0
    if [[ -n "$dump" ]]; then do_dump || { rc=1; ssat_log "ERROR: the dump to $dump failed; stopping anyway (the data stay in $data_dir)"; }; fi
    as_pg "$(bindir)/pg_ctl" -D "$data_dir" -m fast -w -t 120 stop >/dev/null
    ssat_log "stopped PostgreSQL in $data_dir"
    return "$rc"
}

# --systemd: the unit owns PostgreSQL; its ExecStop (this script's stop: the dump) runs before the shared storage
# is unmounted at shutdown (RequiresMountsFor).
systemd_start() {
    command -v systemctl >/dev/null && [[ -d /run/systemd/system ]] || ssat_die "--systemd: this machine has no systemd"
    local sudo="" plain=() unit=/etc/systemd/system/ssat-postgres.service a
    [[ $EUID -eq 0 ]] || sudo="sudo -n"
    for a in "${args[@]}"; do [[ "$a" == --systemd ]] || plain+=("$(printf %q "$a")"); done
    $sudo tee "$unit.new" >/dev/null <<EOF
# Written by clusters/postgres.sh --systemd: the head's MLflow PostgreSQL, dumped to the shared storage at stop.
[Unit]
Description=ssat-sweeps: the MLflow store's PostgreSQL (dumped to $dump at stop)
Wants=network-online.target
After=network-online.target remote-fs.target
RequiresMountsFor=$(dirname "$dump")

[Service]
Type=oneshot
RemainAfterExit=yes
User=$(id -un)
Environment=HOME=$HOME
ExecStart=/bin/bash $here/postgres.sh start ${plain[*]}
ExecStop=/bin/bash $here/postgres.sh stop ${plain[*]}
TimeoutStartSec=900
TimeoutStopSec=900

[Install]
WantedBy=multi-user.target
EOF
    if ! cmp -s "$unit.new" "$unit" 2>/dev/null; then
        $sudo mv "$unit.new" "$unit"
        $sudo systemctl daemon-reload
    else
        $sudo rm -f "$unit.new"
    fi
    $sudo systemctl enable --quiet ssat-postgres.service
    $sudo systemctl start ssat-postgres.service
    # an "active" unit whose PostgreSQL died meanwhile: restart it (its stop dumps nothing, its start recovers)
    running || $sudo systemctl restart ssat-postgres.service
    running || ssat_die "ssat-postgres.service did not start PostgreSQL (journalctl -u ssat-postgres)"
    ssat_log "PostgreSQL under ssat-postgres.service ($uri)"
}

case "$action" in
    start) if ((systemd)); then systemd_start; else do_start; fi ;;
    stop) [[ -n "$data_dir" ]] || ssat_die "stop needs --data-dir"; do_stop ;;
    dump) [[ -n "$data_dir" ]] || ssat_die "dump needs --data-dir"; do_dump ;;
    dump-loop)
        sleeper=""
        trap 'kill "$sleeper" 2>/dev/null || true; exit 0' TERM
        while :; do
            sleep $((dump_every * 60)) &
            sleeper=$!
            wait "$sleeper"
            running || exit 0
            (do_dump) || ssat_log "ERROR: the periodic dump to $dump failed; the next try in $dump_every min"
        done ;;
    status)
        if running; then echo "running: $uri (data $data_dir)"; else echo "stopped (data $data_dir)"; exit 3; fi ;;
    uri) echo "$uri" ;;
    *) ssat_die "usage: postgres.sh start|stop|dump|status|uri --data-dir DIR --dump FILE [...]" ;;
esac

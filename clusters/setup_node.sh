#!/usr/bin/env bash
# Prepare one Ray node for ssat-sweeps: the project's environment on the login PATH, the node's settings in
# one env file, the data root staged, and the node checked (clusters/check_node.sh) before Ray starts on it.
# Run by `ray up` as a head_setup/worker_setup command, from the repository copy that file_mounts put at
# ~/ssat-sweeps (so this script and the lock file always come from the same commit as the cluster YAML).
#
#   setup_node.sh --role head|worker (--install --venv DIR | --use-venv DIR)
#                 --auth-mode disabled|token [--auth-token-file FILE] --data-root DIR [--data-src SRC]
#                 --storage-path PATH_OR_URI
#                 [--nfs SERVER:/EXPORT --nfs-mount DIR] [--mlflow-host IP] [--mlflow-port 5000]
#                 [--gpu auto|required|none] [--mps auto|off] [--extra-lock FILE] [--postgres]
#
# --postgres (the head of ray_cluster.yaml): Debian's/Ubuntu's PostgreSQL server programs for the MLflow store
# (clusters/postgres.sh runs one private cluster of them). postgresql-common goes first, told not to make the
# distribution's own "main" cluster, so no PostgreSQL service of the system runs or listens anywhere.
#
# --auth-mode token --auth-token-file FILE (ray_cluster.yaml: a file on the shared storage, which only the
# cluster's nodes mount): Ray's token, the one shared secret of every node and client. The head makes it
# (32 random bytes, hex, mode 600) unless it exists; a worker needs it there. ~/.ssat/env.sh exports
# RAY_AUTH_TOKEN_PATH=FILE, so `ray start`, `ray stop` and every Ray process of the node use it.
#
# --storage-path is the folder every node reaches (the sweep CLI's --workdir: Tune's storage_path, the
# teacher cache and the tracking spool live under it); with --nfs it is on that NFS export (e.g. EFS),
# mounted at the same path on every node before the checks, and entered in /etc/fstab (_netdev, nofail): a
# stopped node that `ray up` restarts skips setup, and must find the shared storage mounted again at boot.
#
# --mps auto (the default): on a GPU node (--gpu auto|required) the MPS control daemon starts (clusters/mps.sh;
# private folders under /tmp, mode 700) so that trials packed on a GPU overlap their kernels, and
# ~/.ssat/env.sh exports its CUDA_MPS_PIPE_DIRECTORY, which every Ray worker inherits. It starts before the
# node check, so check_node.sh's CUDA test already goes through it. Without nvidia-cuda-mps-control (or with
# --mps off, or if it fails to start) the node runs without MPS (a daemon an earlier setup started is
# stopped) and env.sh says SSAT_MPS=off.
# worker_start_ray_commands run `mps.sh start` again (a no-op while it runs): a stopped node that is
# restarted skips setup, and its /tmp is empty.
#
# Why an install at setup time rather than a prepared image: lock/requirements.lock is the one description of
# the environment, tested in CI; installing from it on a stock GPU image (about 2 minutes and 6.5 GB per
# node, once: a stamp of the lock's sha256 skips it when a stopped node is reused) cannot drift from it. A
# prepared image is the optimisation for fast autoscaling: bake it by running this script once on the
# base image, then point ImageId at the result; nothing else changes.
#
# Why one venv on the login PATH: `ray up` runs every command (including `ray stop`, `ray start`) in a
# login shell, and Ray workers inherit the environment `ray start` had; an environment that is only
# activated in some shells leaves `ray stop` unable to find Ray (ray down then leaves Ray running).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=clusters/lib.sh
source "$here/lib.sh"

lock="$repo/lock/requirements.lock"
role="" venv="" install=0 auth_mode="" token_file="" data_root="" data_src="" storage="" gpu=auto
mlflow_host="" mlflow_port=5000 extra_lock="" nfs="" nfs_mount="" mps=auto postgres=0
while (($#)); do
    case "$1" in
        --role) role=$2; shift 2 ;;
        --install) install=1; shift ;;
        --venv) venv=$2; shift 2 ;;
        --use-venv) venv=$2; install=0; shift 2 ;;
        --auth-mode) auth_mode=$2; shift 2 ;;
        --auth-token-file) token_file=$2; shift 2 ;;
        --data-root) data_root=$2; shift 2 ;;
        --data-src) data_src=$2; shift 2 ;;
        --storage-path) storage=$2; shift 2 ;;
        --mlflow-host) mlflow_host=$2; shift 2 ;;
        --mlflow-port) mlflow_port=$2; shift 2 ;;
        --gpu) gpu=$2; shift 2 ;;
        --mps) mps=$2; shift 2 ;;
        --extra-lock) extra_lock=$2; shift 2 ;;
        --nfs) nfs=$2; shift 2 ;;
        --nfs-mount) nfs_mount=$2; shift 2 ;;
        --postgres) postgres=1; shift ;;
        *) ssat_die "setup_node.sh: unknown argument $1" ;;
    esac
done
[[ "$role" == head || "$role" == worker ]] || ssat_die "--role head|worker is required"
[[ -n "$venv" ]] || ssat_die "--venv DIR (with --install) or --use-venv DIR is required"
[[ "$auth_mode" == disabled || "$auth_mode" == token ]] || ssat_die "--auth-mode disabled|token is required"
[[ "$auth_mode" == token || -z "$token_file" ]] || ssat_die "--auth-token-file goes with --auth-mode token"
[[ -n "$data_root" && -n "$storage" ]] || ssat_die "--data-root and --storage-path are required"
[[ "$mps" == auto || "$mps" == off ]] || ssat_die "--mps $mps; allowed: auto (MPS on GPU nodes that have it) or off"
venv=${venv/#\~/$HOME}
data_root=${data_root/#\~/$HOME}
token_file=${token_file/#\~/$HOME}

# The tracking server runs on the head, bound to the head's private address. Ray exports RAY_HEAD_IP to
# the setup commands of worker nodes; the head uses its own private address.
if [[ -z "$mlflow_host" ]]; then
    if [[ "$role" == worker ]]; then
        mlflow_host=${RAY_HEAD_IP:?worker setup needs RAY_HEAD_IP (set by ray up) or --mlflow-host}
    else
        mlflow_host=$(ssat_private_ip)
    fi
fi

install_env() {
    local sudo="" py
    [[ $EUID -eq 0 ]] || sudo="sudo -n"
    if ! py=$(command -v python3.11); then
        # Ubuntu 22.04 (the AWS image) ships 3.10; 3.11 is in its universe archive. The dpkg lock timeout
        # waits for the unattended upgrades a fresh instance runs at boot instead of failing on them.
        command -v apt-get >/dev/null || ssat_die "python3.11 not found and no apt-get to install it"
        $sudo apt-get -o DPkg::Lock::Timeout=600 update -q
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
            python3.11 python3.11-venv
        py=$(command -v python3.11)
    fi
    [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
    local stamp want
    stamp="$venv/.ssat-lock.sha256"
    want=$(cat "$lock" ${extra_lock:+"$extra_lock"} | sha256sum | cut -d' ' -f1)
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        ssat_log "environment $venv already matches the lock; not reinstalling"
        return
    fi
    ssat_log "installing the project into $venv from $lock"
    # The lock is the whole environment (`pip freeze` of `pip install -e .[dev]`: pytest & co. too), and
    # check_node.sh verifies that every package of it is installed at its version.
    "$venv/bin/python" -m pip install --quiet --no-input -c "$lock" pip setuptools wheel
    "$venv/bin/python" -m pip install --quiet --no-input -r "$lock"
    # The project itself as `pip install -e` would put it: its folders under $repo on the import path (ray up
    # mounts folders only, so no pyproject.toml reaches the node).
    local site
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    printf '%s\n' "$repo" >"$site/ssat-sweeps.pth"
    if [[ -n "$extra_lock" ]]; then
        "$venv/bin/python" -m pip install --quiet --no-input -c "$lock" -r "$extra_lock"
    fi
    printf '%s\n' "$want" >"$stamp"
}

mount_nfs() {
    local sudo=""
    [[ $EUID -eq 0 ]] || sudo="sudo -n"
    # The options AWS recommends for EFS (NFS 4.1, 1 MiB transfers, hard mounts, new port on reconnect).
    local opts=nfsvers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport
    if ! mountpoint -q "$nfs_mount"; then
        if ! command -v mount.nfs4 >/dev/null; then
            $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q nfs-common
        fi
        $sudo mkdir -p "$nfs_mount"
        $sudo mount -t nfs4 -o "$opts" "$nfs" "$nfs_mount"
    fi
    # Mounted again at boot: a stopped node that ray up restarts skips this setup.
    if ! awk -v m="$nfs_mount" '$2 == m {found = 1} END {exit !found}' /etc/fstab 2>/dev/null; then
        printf '%s %s nfs4 %s,_netdev,nofail 0 0\n' "$nfs" "$nfs_mount" "$opts" | $sudo tee -a /etc/fstab >/dev/null
    fi
    # The export's root belongs to root: give the ssh user the storage folder.
    $sudo install -d -o "$(id -u)" -g "$(id -g)" "$storage"
}

if [[ -n "$nfs" || -n "$nfs_mount" ]]; then
    [[ -n "$nfs" && -n "$nfs_mount" && "$storage" == "$nfs_mount"/* ]] ||
        ssat_die "--nfs and --nfs-mount go together, and --storage-path must be below --nfs-mount"
    mount_nfs
fi

# Debian's PostgreSQL server programs, without the distribution's own cluster (postgres.sh runs ours).
install_postgres() {
    local sudo=""
    [[ $EUID -eq 0 ]] || sudo="sudo -n"
    if find /usr/lib/postgresql -mindepth 3 -maxdepth 3 -path '*/bin/postgres' 2>/dev/null | grep -q .; then
        return
    fi
    ssat_log "installing PostgreSQL (the distribution's) for the MLflow store"
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
    $sudo "${apt[@]}" update -q
    $sudo "${apt[@]}" install -y -q --no-install-recommends postgresql-common
    $sudo sed -i -E 's/^#?[[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' \
        /etc/postgresql-common/createcluster.conf
    $sudo "${apt[@]}" install -y -q --no-install-recommends postgresql
}

if ((postgres)); then
    install_postgres
fi

# Ray's token (--auth-token-file): made once by the head, on the shared storage mounted above.
if [[ -n "$token_file" ]]; then
    if [[ "$role" == head && ! -s "$token_file" ]]; then
        mkdir -p "$(dirname "$token_file")"
        (umask 077 && od -An -vtx1 -N32 /dev/urandom | tr -d ' \n' >"$token_file.tmp.$$" &&
            mv "$token_file.tmp.$$" "$token_file")
        ssat_log "made Ray's token $token_file (mode 600)"
    fi
    [[ -s "$token_file" ]] || ssat_die "--auth-token-file $token_file: no token there (the head's setup makes it)"
fi

if ((install)); then
    install_env
else
    [[ -x "$venv/bin/python" ]] || ssat_die "--use-venv $venv: no $venv/bin/python (make it with: pip install -c lock/requirements.lock -e .)"
fi

# One env file holds the node's settings; ~/.bashrc and ~/.profile source it FIRST (before Ubuntu's
# "not interactive: return"), so ray start, ray stop, ray job and every Ray worker see the same values.
mkdir -p "$HOME/.ssat"
env_file="$HOME/.ssat/env.sh"
cat >"$env_file" <<EOF
# Written by clusters/setup_node.sh (role $role). Sourced by ~/.bashrc and ~/.profile.
export SSAT_VENV=$(printf %q "$venv")
case ":\$PATH:" in *":\$SSAT_VENV/bin:"*) ;; *) export PATH="\$SSAT_VENV/bin:\$PATH" ;; esac
# Set explicitly on every node: unset, Ray turns token auth on by itself whenever ~/.ray/auth_token
# exists, and the CLI clients then fail against a cluster started without it (or the reverse).
export RAY_AUTH_MODE=$auth_mode
${token_file:+export RAY_AUTH_TOKEN_PATH=$(printf %q "$token_file")}
export SSAT_DATA_ROOT=$(printf %q "$data_root")
export SSAT_STORAGE_PATH=$(printf %q "$storage")
export MLFLOW_TRACKING_URI=http://$mlflow_host:$mlflow_port
EOF
# SSAT_MPS is passed explicitly: this login shell may carry SSAT_MPS=off from the env.sh of an earlier setup.
if [[ "$gpu" != none && "$mps" == auto ]] && SSAT_MPS=auto bash "$here/mps.sh" start &&
    mps_exports=$(SSAT_MPS=auto bash "$here/mps.sh" env); then
    printf '%s\n' "$mps_exports" >>"$env_file"
else
    bash "$here/mps.sh" stop  # one an earlier setup of this node started, if any
    printf 'export SSAT_MPS=off\n' >>"$env_file"
fi
# shellcheck disable=SC2016  # expanded when the rc file runs, not now
hook='[ -f "$HOME/.ssat/env.sh" ] && . "$HOME/.ssat/env.sh"  # ssat-sweeps node env'
for rc in "$HOME/.bashrc" "$HOME/.profile"; do
    touch "$rc"
    if ! grep -qF '# ssat-sweeps node env' "$rc"; then
        printf '%s\n%s' "$hook" "$(cat "$rc")" >"$rc.ssat-new" && mv "$rc.ssat-new" "$rc"
    fi
done
# shellcheck source=/dev/null
source "$env_file"

if [[ -n "$data_src" ]]; then
    ssat_log "staging $data_src -> $data_root"
    "$venv/bin/python" "$here/stage_data.py" pull "$data_src" "$data_root"
fi

check=(--python "$venv/bin/python" --lock "$lock" --data-root "$data_root" --storage-path "$storage" --gpu "$gpu")
# Workers also need the head's tracking server (started by head_start_ray_commands before any worker).
if [[ "$role" == worker ]]; then check+=(--mlflow-uri "$MLFLOW_TRACKING_URI"); fi
bash "$here/check_node.sh" "${check[@]}"

#!/usr/bin/env bash
# Install, idempotently, the system packages the slow cluster tests, the LaTeX and the MLflow UI tests need (called by
# .ci/run; Debian/Ubuntu, as root). Installs nothing that is already there, and never leaves an sshd, a SLURM
# daemon or munged running: the tests start their own, inside their own network namespaces.
#   openssh-server, openssh-client  ray up reaches the "remote" head over ssh
#   rsync                           ray up's file_mounts
#   iproute2                        `ip link set lo up` inside the test's network namespace
#   util-linux, mount               unshare, mount (namespaces, private /tmp; the small tmpfs of test_disk_full.py)
#   procps                          ps/pkill-free inspection of leftovers (the tests kill by PID)
#   texlive-latex-recommended       pdflatex and booktabs: tests/integration/test_latex_compiles.py builds every
#                                   generated table (~150 MB with texlive-base and texlive-binaries)
#   texlive-fonts-recommended       the ZapfDingbats metrics behind pifont's \ding (the tables' check marks)
#   chromium-headless-shell         a headless Chromium: tests/integration/test_mlflow_ui.py renders MLflow's UI
#                                   (~280 MB with chromium-common; Debian only, Ubuntu ships Chromium as a snap)
#   postgresql                      Debian's PostgreSQL server programs (initdb, postgres, pg_dump; ~50 MB): the
#                                   tests start throwaway clusters of their own (devtools/servers.py PostgresServer,
#                                   clusters/postgres.sh) as the `postgres` user, on loopback ports. postgresql-common
#                                   is installed first and told not to make the distribution's "main" cluster, and
#                                   the policy-rc.d guard keeps the package from starting any service.
#   slurm-wlm, munge                SLURM 22.05 (slurmctld, slurmd, sbatch, ...) and its authentication daemon:
#                                   tests/slow/test_slurm.py starts a controller and two nodes of its own, inside its
#                                   namespaces, with its own munge key; the policy-rc.d guard keeps the packages
#                                   from starting the system's slurmctld, slurmd or munged
#   the shellcheck package          optional lint of the sbatch template and node scripts
set -euo pipefail
[[ $EUID -eq 0 ]] || { echo "ci_prereqs.sh must run as root" >&2; exit 1; }

required=(openssh-server openssh-client rsync iproute2 util-linux mount procps
          texlive-latex-recommended texlive-fonts-recommended chromium-headless-shell postgresql slurm-wlm munge)
optional=(shellcheck)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=() missing_optional=()
for pkg in "${required[@]}"; do installed "$pkg" || missing+=("$pkg"); done
for pkg in "${optional[@]}"; do installed "$pkg" || missing_optional+=("$pkg"); done
if ((${#missing[@]} + ${#missing_optional[@]} == 0)); then
    echo "ci_prereqs: all present"
    exit 0
fi

# Keep the package scripts from starting the ssh, SLURM and munge services on the CI host (the Docker
# policy-rc.d convention); remove the guard afterwards only if we created it.
guard=/usr/sbin/policy-rc.d
created_guard=0
if [[ ! -e "$guard" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$guard"
    chmod +x "$guard"
    created_guard=1
fi
drop_guard() { if ((created_guard)); then rm -f "$guard"; fi; }
trap drop_guard EXIT

export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=300 update -qq
if [[ " ${missing[*]} " == *" postgresql "* ]]; then
    # no cluster of the distribution's own: the tests make theirs
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends postgresql-common
    sed -i -E 's/^#?[[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' \
        /etc/postgresql-common/createcluster.conf
fi
if ((${#missing[@]})); then
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}"
fi
if ((${#missing_optional[@]})); then
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing_optional[@]}" ||
        echo "ci_prereqs: optional ${missing_optional[*]} not installed"
fi
for tool in sshd ssh ssh-keygen rsync ip unshare mount pdflatex chromium-headless-shell runuser slurmctld slurmd \
    munged sbatch; do
    command -v "$tool" >/dev/null || [[ -x "/usr/sbin/$tool" ]] || { echo "ci_prereqs: $tool still missing" >&2; exit 1; }
done
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || { echo "ci_prereqs: PostgreSQL's initdb still missing" >&2; exit 1; }
echo "ci_prereqs: installed ${missing[*]} ${missing_optional[*]}"

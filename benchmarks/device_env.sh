#!/usr/bin/env bash
# The line a command on the GPU machine starts with (after `carry: [".devenv"]`), from the repository root:
#   . .devenv/unpack.sh || exit 1; python3 -m sweeps run SPEC ...
#
# The packages a sweep (`python -m sweeps run SPEC`) needs that the GPU machine lacks, packed for it. That machine
# (x86-64, Python 3.12.3 at /opt/torch/.venv, torch 2.11.0, no network) has the packages named in
# benchmarks/device_env.present and nothing of ray, mlflow, optuna, pyautoattack; a command there gets at most 64 MiB
# of this checkout, ignored paths included. Run here (it needs PyPI the first time; wheels are cached):
#   bash benchmarks/device_env.sh                  Python 3.12 set -> .devenv/ (archive, unpack.sh, VERSIONS.txt)
#   bash benchmarks/device_env.sh --python-version 3.11 --out DIR [--site DIR] [--format gz]   (tests/slow)
# Options: --site DIR      where the stripped set is built and left (default: under the cache, rebuilt each run)
#          --cache DIR     wheel cache (default $SSAT_DEVENV_CACHE or ~/.cache/ssat-devenv); a second run is offline
#          --format xz|gz  archive compression (default xz: smallest; gz: fast, for tests); both open with tarfile
#          --keep-mlflow-ui  keep MLflow's web UI bundle (a sweep never serves it; `mlflow server`'s REST API works
#                            without it, only its pages are gone)
#          --no-budget     do not fail when the archive is over the budget (tests of other Python versions)
#          --lock FILE     pinned versions (default lock/requirements.lock)
# Steps: (1) the closure of ROOTS over the wheels' own Requires-Dist (markers evaluated for the target Python on
# x86-64 Linux), at lock/requirements.lock's versions, minus the machine's packages; each missing wheel is fetched with
# `pip download --no-deps --only-binary=:all: --python-version V --platform manylinux...` (a version the lock pins
# with no wheel for the target is replaced by the nearest one that has one: printed and in VERSIONS.txt);
# (2) one `pip install --no-index --no-deps --no-compile --target` of all of them (one call: mlflow, mlflow-skinny and
# mlflow-tracing share files); (3) the strip: what a sweep never loads (STRIP below), sizes per package before/after;
# (4) one tar archive, its size against the budget: 64 MiB - the checkout's files that travel - 4 MiB headroom.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
# What a sweep imports at run time (ssat/, sweeps/, analysis/): the machine has the last eight already.
ROOTS="ray[tune,default] optuna mlflow pyautoattack mlxtend pyyaml pandas matplotlib scipy pyarrow numpy torch torchvision"
PLATFORMS="manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64"
# Tried only for a package with no wheel for the platforms above (the machine's Python 3.12.3 is Ubuntu 24.04's:
# glibc 2.39); such a wheel is listed in VERSIONS.txt.
LATE_PLATFORMS="manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64"
BUDGET_MIB=64
HEADROOM_MIB=4
SITE_DIR=/tmp/ssat-site  # where unpack.sh puts the set on the GPU machine

PYVER=3.12 OUT= SITE= LOCK=$ROOT/lock/requirements.lock CACHE=${SSAT_DEVENV_CACHE:-$HOME/.cache/ssat-devenv} FORMAT=xz KEEP_UI=0 CHECK_BUDGET=1
while [[ $# -gt 0 ]]; do
    case $1 in
        --python-version) PYVER=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --site) SITE=$2; shift 2 ;;
        --cache) CACHE=$2; shift 2 ;;
        --format) FORMAT=$2; shift 2 ;;
        --keep-mlflow-ui) KEEP_UI=1; shift ;;
        --no-budget) CHECK_BUDGET=0; shift ;;
        --lock) LOCK=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ {print} /^set -euo/ {exit}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "device_env.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $PYVER =~ ^3\.[0-9]+$ ]] || { echo "device_env.sh: --python-version wants 3.N, got $PYVER" >&2; exit 2; }
[[ $FORMAT == xz || $FORMAT == gz ]] || { echo "device_env.sh: --format is xz or gz" >&2; exit 2; }
[[ -x $PY ]] || { echo "device_env.sh: no interpreter at $PY (make venv, or PY=...)" >&2; exit 2; }
TAG=py${PYVER/./}
OUT=$(mkdir -p "${OUT:-$ROOT/.devenv}" && cd "${OUT:-$ROOT/.devenv}" && pwd)
SITE=${SITE:-$CACHE/site-$TAG}
mkdir -p "$CACHE/wheels" "$(dirname "$SITE")"
ARCHIVE=$OUT/ssat-site-$TAG.tar.$FORMAT
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
T0=$SECONDS
target_opts=(--only-binary=:all: --python-version "$PYVER" --implementation cp)
for p in $PLATFORMS $LATE_PLATFORMS; do target_opts+=(--platform "$p"); done

# ---- the Python half: closure + downloads, sizes per package ----------------------------------------------------
helper() {
    "$PY" - "$@" <<'PYEOF'
import email.parser, fnmatch, json, os, re, subprocess, sys, zipfile
from pathlib import Path
from packaging import tags
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

def norm(n): return canonicalize_name(n)

def resolve(a):
    lock = {}
    for ln in Path(a["lock"]).read_text().splitlines():
        ln = ln.split("#")[0].strip()
        if "==" in ln:
            n, v = ln.split("==", 1)
            lock[norm(n.split("[")[0])] = v.strip().split(";")[0].strip()
    present = [norm(p) if "*" not in p else p.lower() for p in
               (ln.split("#")[0].strip() for ln in Path(a["present"]).read_text().splitlines()) if p]
    is_present = lambda n: any(fnmatch.fnmatchcase(n, p) for p in present)
    major, minor = (int(x) for x in a["pyver"].split("."))
    def tagset(plats):
        interp = f"cp{major}{minor}"
        return list(tags.cpython_tags((major, minor), abis=[interp], platforms=plats)) + \
               list(tags.compatible_tags((major, minor), interp, plats))
    early, late = a["platforms"].split(), a["late_platforms"].split()
    rank_early = {t: i for i, t in enumerate(tagset(early))}
    rank_all = {t: i for i, t in enumerate(tagset(early + late))}
    env = {"python_version": a["pyver"], "python_full_version": a["pyver"] + ".3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython",
           "implementation_version": a["pyver"] + ".3", "platform_release": "", "platform_version": ""}
    cache = Path(a["cache"]) / "wheels"
    memo_path = Path(a["cache"]) / f"fallback-py{major}{minor}.json"
    memo = json.loads(memo_path.read_text()) if memo_path.exists() else {}
    target = a["target_opts"].split("\x1f")

    def cached(name, version):
        best = None
        for f in cache.glob("*.whl"):
            try:
                wn, wv, _, wtags = parse_wheel_filename(f.name)
            except Exception:
                continue
            if wn != name or wv != Version(version):
                continue
            for rank in (rank_early, rank_all):
                r = min((rank[t] for t in wtags if t in rank), default=None)
                if r is not None:
                    key = (rank is rank_all, r)
                    if best is None or key < best[0]:
                        best = (key, f)
                    break
        return best[1] if best else None

    def pip_download(spec):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *target, "-d", str(cache), "--quiet",
               "--disable-pip-version-check", spec]
        p = subprocess.run(cmd, capture_output=True, text=True)
        return p.returncode == 0, (p.stderr or p.stdout).strip().splitlines()[-1:] 

    def available(name):
        p = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check",
                            *target, name], capture_output=True, text=True)
        m = re.search(r"Available versions: (.*)", p.stdout)
        return [Version(v.strip()) for v in m.group(1).split(",")] if m else []

    def fetch(name, version, spec):
        """The wheel of name==version for the target, else of the nearest version that has one and fits spec."""
        f = cached(name, version)
        if f:
            return f, version
        if name in memo and memo[name]["lock"] == version and cached(name, memo[name]["used"]):
            return cached(name, memo[name]["used"]), memo[name]["used"]
        ok, err = pip_download(f"{name}=={version}")
        if ok and cached(name, version):
            return cached(name, version), version
        lockv = Version(version)
        cands = [v for v in available(name) if v in spec and not v.is_prerelease]
        if not cands:
            sys.exit(f"device_env: no wheel of {name} for Python {a['pyver']} on x86-64 manylinux "
                     f"(lock {version}; pip: {' '.join(err)})")
        above = sorted(v for v in cands if v > lockv)
        below = sorted((v for v in cands if v < lockv), reverse=True)
        # nearest: the next release after the lock's (a newer one is the usual way to get a new Python's wheel),
        # else the newest before it
        pick = above[0] if above else below[0]
        ok, err = pip_download(f"{name}=={pick}")
        if not (ok and cached(name, str(pick))):
            sys.exit(f"device_env: {name}=={pick} (for lock {version}) did not download: {' '.join(err)}")
        memo[name] = {"lock": version, "used": str(pick)}
        memo_path.write_text(json.dumps(memo, indent=1))
        return cached(name, str(pick)), str(pick)

    def requires(whl):
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
            msg = email.parser.Parser().parsestr(z.read(meta).decode("utf-8"))
        return [Requirement(r) for r in msg.get_all("Requires-Dist") or []]

    todo = [Requirement(r) for r in a["roots"].split()]
    chosen = {}      # name -> {"version", "wheel", "extras", "why"}
    specs = {}       # name -> SpecifierSet collected from requirers
    assumed = {}     # present name -> [requirement strings]
    notes = []
    while todo:
        req = todo.pop(0)
        name = norm(req.name)
        specs.setdefault(name, SpecifierSet())
        specs[name] &= req.specifier
        if is_present(name):
            assumed.setdefault(name, set()).add(str(req))
            if req.extras:
                notes.append(f"{req} asks extras of a package the machine has: not checked")
            continue
        done = chosen.get(name)
        extras = set(req.extras)
        if done and extras <= done["extras"]:
            continue
        if not done:
            if name in lock:
                version = lock[name]
            else:
                cands = [v for v in available(name) if v in specs[name] and not v.is_prerelease]
                if not cands:
                    sys.exit(f"device_env: {name} is needed ({req}) but is not in the lock and has no wheel")
                version = str(max(cands))
                notes.append(f"{name} is not in the lock: took {version}")
            whl, used = fetch(name, version, specs[name])
            done = chosen[name] = {"version": used, "lock": lock.get(name), "wheel": str(whl), "extras": set()}
        new = extras - done["extras"]
        first = not done.get("seen")
        done["seen"] = True
        done["extras"] |= extras
        for r in requires(done["wheel"]):
            if r.marker is None:
                if first:
                    todo.append(r)
                continue
            wanted = ([""] if first else []) + sorted(new)
            if any(r.marker.evaluate({**env, "extra": e}) for e in wanted):
                todo.append(r)
    bad = []
    for n, c in sorted(chosen.items()):
        if Version(c["version"]) not in specs[n]:
            bad.append(f"{n}=={c['version']} does not satisfy {specs[n]}")
        wt = parse_wheel_filename(Path(c["wheel"]).name)[3]
        if not any(t in rank_early for t in wt):
            notes.append(f"{n}: only a wheel for a newer glibc: {Path(c['wheel']).name}")
    if bad:
        sys.exit("device_env: " + "; ".join(bad))
    out = {"packages": {n: {k: (sorted(v) if isinstance(v, set) else v) for k, v in c.items() if k != "seen"}
                        for n, c in sorted(chosen.items())},
           "assumed": {n: sorted(v) for n, v in sorted(assumed.items())}, "notes": notes}
    Path(a["manifest"]).write_text(json.dumps(out, indent=1))

def sizes(site, out):
    """Bytes on disk per distribution (files of its RECORD that still exist; a file two distributions record,
    as mlflow and mlflow-skinny do, counts once, for the first name in sorted order), and per top-level entry."""
    site = Path(site)
    owner = {}
    for rec in sorted(site.glob("*.dist-info/RECORD")):
        meta = email.parser.Parser().parsestr((rec.parent / "METADATA").read_text(encoding="utf-8"))
        dist = norm(meta["Name"])
        for ln in rec.read_text(encoding="utf-8").splitlines():
            p = ln.rsplit(",", 2)[0]
            if p and not p.startswith(".."):
                owner.setdefault(os.path.normpath(p), dist)
    per = {}
    for dp, dns, fns in os.walk(site):
        for fn in fns:
            full = os.path.join(dp, fn)
            if os.path.islink(full):
                continue
            rel = os.path.relpath(full, site)
            d = owner.get(rel, "(not in any RECORD)")
            per[d] = per.get(d, 0) + os.path.getsize(full)
    Path(out).write_text(json.dumps(per))

def report(before, after):
    b, a = json.loads(Path(before).read_text()), json.loads(Path(after).read_text())
    rows = sorted(set(b) | set(a), key=lambda d: -b.get(d, 0))
    mib = lambda x: f"{x / 2**20:8.2f}"
    print(f"{'package':32s} {'before MiB':>10s} {'after MiB':>10s}")
    for d in rows:
        print(f"{d:32s} {mib(b.get(d, 0)):>10s} {mib(a.get(d, 0)):>10s}")
    print(f"{'total':32s} {mib(sum(b.values())):>10s} {mib(sum(a.values())):>10s}")

cmd, rest = sys.argv[1], sys.argv[2:]
if cmd == "resolve":
    resolve(dict(zip(rest[0::2], rest[1::2])))
elif cmd == "sizes":
    sizes(*rest)
elif cmd == "report":
    report(*rest)
elif cmd == "field":  # field MANIFEST KEY: lines of the manifest for bash
    m = json.loads(Path(rest[0]).read_text())
    if rest[1] == "wheels":
        print("\n".join(c["wheel"] for c in m["packages"].values()))
    elif rest[1] == "versions":
        for n, c in m["packages"].items():
            print(f"{n}=={c['version']}" + ("" if c["version"] == c["lock"] else
                  f"    # lock: {c['lock'] or '(not in the lock)'}"))
    elif rest[1] == "differ":
        for n, c in m["packages"].items():
            if c["version"] != c["lock"]:
                print(f"{n}: {c['version']} (lock {c['lock'] or 'has none'})")
    elif rest[1] == "assumed":
        for n, reqs in m["assumed"].items():
            print(f"{n}: {', '.join(reqs)}")
    elif rest[1] == "notes":
        print("\n".join(m["notes"]))
PYEOF
}

# ---- (1) closure and downloads ---------------------------------------------------------------------------------
echo "== (1) closure of: $ROOTS (Python $PYVER, x86-64 manylinux), minus benchmarks/device_env.present"
helper resolve lock "$LOCK" present "$ROOT/benchmarks/device_env.present" pyver "$PYVER" \
    cache "$CACHE" platforms "$PLATFORMS" late_platforms "$LATE_PLATFORMS" roots "$ROOTS" manifest "$WORK/manifest.json" \
    target_opts "$(IFS=$'\x1f'; echo "${target_opts[*]}")"
mapfile -t WHEELS < <(helper field "$WORK/manifest.json" wheels)
echo "${#WHEELS[@]} packages to pack:"
helper field "$WORK/manifest.json" versions | sed 's/^/  /'
DIFFER=$(helper field "$WORK/manifest.json" differ)
NOTES=$(helper field "$WORK/manifest.json" notes)
echo "versions that differ from the lock: ${DIFFER:-none}"
[[ -z $NOTES ]] || { echo "notes:"; echo "$NOTES" | sed 's/^/  /'; }
echo "assumed satisfied by the GPU machine's own packages (its versions are unknown):"
helper field "$WORK/manifest.json" assumed | sed 's/^/  /'
echo "-- $((SECONDS - T0)) s"

# ---- (2) install ------------------------------------------------------------------------------------------------
echo "== (2) pip install --target $SITE"
rm -rf "$SITE"
"$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile --no-warn-script-location \
    --target "$SITE" "${target_opts[@]}" "${WHEELS[@]}"
helper sizes "$SITE" "$WORK/before.json"
echo "-- $((SECONDS - T0)) s"

# ---- (3) strip ----------------------------------------------------------------------------------------------------
echo "== (3) strip what a sweep never loads"
BEFORE_KB=$(du -sk "$SITE" | cut -f1)
STRIPPED=$OUT/STRIPPED.txt  # every path removed, with its size
: > "$STRIPPED"
strip_path() {  # strip_path REL WHY: remove SITE/REL (a file or folder; globs allowed), print what it freed
    local why=$2 p kb
    for p in $SITE/$1; do
        [[ -e $p ]] || continue
        kb=$(du -sk "$p" | cut -f1)
        rm -rf "$p"
        echo "${p#"$SITE"/}  ${kb} KiB" >> "$STRIPPED"
        printf '  %-52s %8.2f MiB  %s\n' "${p#"$SITE"/}" "$(awk "BEGIN {print $kb / 1024}")" "$why"
    done
}
strip_found() {  # strip_found WHY FIND-ARGS...: remove every match, print the total it freed
    local why=$1 kb=0 n=0 p k
    shift
    while IFS= read -r -d '' p; do
        [[ -e $p ]] || continue
        k=$(du -sk "$p" | cut -f1); kb=$((kb + k)); n=$((n + 1))
        echo "${p#"$SITE"/}  ${k} KiB" >> "$STRIPPED"
        rm -rf "$p"
    done < <(find "$SITE" "$@" -print0)
    printf '  %-52s %8.2f MiB  %s\n' "$n x $why" "$(awk "BEGIN {print $kb / 1024}")" "(find $*)"
}
# STRIP: each line says why nothing of a sweep reaches it (Tune imports ray.rllib only to look up a trainable given by
# name, inside try/except ImportError; Serve only from the dashboard head's handlers; neither happens in a sweep).
strip_path bin "console scripts: their shebang is this machine's interpreter; sweeps run python -m"
strip_path ray/jars "Ray's Java worker (ray_dist.jar): Python-only cluster"
strip_path ray/dashboard/client/build "the dashboard's web client: include_dashboard=False"
strip_path ray/rllib "RLlib: a sweep's trainable is a function, never an RLlib name"
strip_path ray/serve "Ray Serve: not part of Tune; a sweep starts no Serve app"
strip_path ray/llm "Ray LLM: not part of Tune"
if [[ $KEEP_UI == 0 ]]; then
    strip_path mlflow/server/js/build "MLflow's web UI bundle: a sweep writes to SQLite; \`mlflow server\` keeps its REST API"
fi
strip_found "test folders" -depth -type d \( -name tests -o -name test -o -name testing -o -name _tests \)
strip_found "example folders" -depth -type d \( -name examples -o -name example \)
strip_found "doc folders" -depth -type d \( -name docs -o -name doc \)
strip_found "SBOM folders of dist-info" -depth -type d -path '*.dist-info/sboms'
strip_found "virtualenv seed wheels (Ray's pip/uv runtime_env: none in a sweep, no network there)" \
    -type f -path '*/virtualenv/seed/wheels/embed/*.whl'
strip_found "__pycache__" -depth -type d -name __pycache__
strip_found "*.pyi stubs" -type f -name '*.pyi'
AFTER_KB=$(du -sk "$SITE" | cut -f1)
helper sizes "$SITE" "$WORK/after.json"
echo "per package, MiB on disk (before -> after the strip):"
helper report "$WORK/before.json" "$WORK/after.json" | sed 's/^/  /'
echo "installed set: $((BEFORE_KB / 1024)) MiB -> $((AFTER_KB / 1024)) MiB; -- $((SECONDS - T0)) s"

# ---- (4) archive, budget, unpack.sh, VERSIONS.txt ----------------------------------------------------------------
echo "== (4) archive $ARCHIVE"
rm -f "$OUT"/ssat-site-"$TAG".tar.*
compress=(xz "-T${XZ_THREADS:-1}" -9)  # -9: a 64 MiB window (the set is ~240 MiB); -9e saves only 0.6% more
[[ $FORMAT == gz ]] && compress=(gzip -6)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$SITE" -cf - . | "${compress[@]}" > "$ARCHIVE"
{
    echo "# Packed for Python $PYVER (x86-64 manylinux) by benchmarks/device_env.sh from ${LOCK#"$ROOT"/}."
    echo "# Versions that differ from the lock (none if empty):"
    [[ -n $DIFFER ]] && echo "$DIFFER" | sed 's/^/#   /'
    [[ -n $NOTES ]] && { echo "# Notes:"; echo "$NOTES" | sed 's/^/#   /'; }
    echo "# Assumed satisfied by the GPU machine's own packages:"
    helper field "$WORK/manifest.json" assumed | sed 's/^/#   /'
    helper field "$WORK/manifest.json" versions
} > "$OUT/VERSIONS.txt"

cat > "$OUT/unpack.sh" <<EOF
# Source it from the repository root on the GPU machine, first thing:  . .devenv/unpack.sh || exit 1
# Unpacks $(basename "$ARCHIVE") (Python's tarfile only: no zstd/xz binary needed) to \${SSAT_SITE:-$SITE_DIR}
# (skipped when that copy is of this archive), exports PYTHONPATH=<it>:\$PWD, and checks that ray.tune, mlflow,
# optuna and pyautoattack import from it. Returns non-zero, saying why, otherwise. Written by benchmarks/device_env.sh.
_ssat_devenv() {
    local here site py archive
    here=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
    site=\${SSAT_SITE:-$SITE_DIR}
    py=\${PYTHON:-python3}
    archive=\$here/$(basename "$ARCHIVE")
    [[ -f \$archive ]] || { echo "unpack.sh: \$archive is missing (carry .devenv)" >&2; return 1; }
    "\$py" - "\$archive" "\$site" "$PYVER" <<'PY' || return 1
import hashlib, shutil, sys, tarfile, time
from pathlib import Path
archive, site, want = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
have = "%d.%d" % sys.version_info[:2]
if have != want:
    sys.exit(f"unpack.sh: this set is for Python {want}, {sys.executable} is {have}")
h = hashlib.sha256(Path(archive).read_bytes()).hexdigest()
stamp = site / ".ssat-devenv-sha256"
if stamp.exists() and stamp.read_text() == h:
    print(f"unpack.sh: {site} already holds this archive")
else:
    t0 = time.time()
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    with tarfile.open(archive) as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(site, filter="data")
        else:
            tf.extractall(site)
    stamp.write_text(h)
    print(f"unpack.sh: unpacked {archive} to {site} in {time.time() - t0:.1f} s")
PY
    export PYTHONPATH=\$site:\$PWD
    "\$py" - "\$site" <<'PY' || { echo "unpack.sh: the import check failed" >&2; return 1; }
import sys, importlib.metadata as md
from pathlib import Path
site = Path(sys.argv[1]).resolve()
import ray, ray.tune, mlflow, optuna, pyautoattack, yaml, torch
for m in (ray, mlflow, optuna, pyautoattack):
    if site not in Path(m.__file__).resolve().parents:
        sys.exit(f"unpack.sh: {m.__name__} comes from {m.__file__}, not from {site}")
print("devenv:", ", ".join(f"{d} {md.version(d)}" for d in ("ray", "mlflow", "optuna", "pyautoattack", "torch", "numpy")))
PY
}
_ssat_devenv
EOF

ARCH_BYTES=$(stat -c %s "$ARCHIVE")
OUT_BYTES=$(du -sb "$OUT" | cut -f1)
# What travels with a command besides the carried paths: the tracked files and the untracked ones git does not
# ignore (other engineers' work in progress travels too).
TREE_BYTES=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
             xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')
BUDGET=$((BUDGET_MIB * 1048576 - TREE_BYTES - HEADROOM_MIB * 1048576))
mib() { echo "$1" | awk '{printf "%.2f MiB", $1 / 1048576}'; }
echo "archive: $(mib "$ARCH_BYTES") ($ARCH_BYTES bytes); $OUT in all: $(mib "$OUT_BYTES")"
echo "budget: ${BUDGET_MIB} MiB - checkout files that travel $(mib "$TREE_BYTES") - ${HEADROOM_MIB} MiB headroom = $(mib "$BUDGET")"
echo "versions that differ from the lock: ${DIFFER:-none} (also in $OUT/VERSIONS.txt)"
echo "took $((SECONDS - T0)) s"
if (( OUT_BYTES > BUDGET )); then
    msg="device_env: OVER BUDGET by $(mib $((OUT_BYTES - BUDGET))): $OUT is $(mib "$OUT_BYTES"), the budget $(mib "$BUDGET")"
    if [[ $CHECK_BUDGET == 1 ]]; then echo "$msg" >&2; exit 1; fi
    echo "$msg (not checked: --no-budget)"
else
    echo "within budget: $(mib $((BUDGET - OUT_BYTES))) to spare"
fi
echo "A GPU command (carry: [\".devenv\"]) starts with:"
echo "  . ${OUT#"$ROOT"/}/unpack.sh || exit 1; python3 -m sweeps run SPEC ..."

#!/usr/bin/env bash
# The measurements behind docs/paper/ and the shipped search, one after the other on a quiet machine, each in a
# fresh clone of HEAD run with the checkout's .venv (what `make demo` and `make paper` run after `make venv`):
#   1. `python -m sweeps demo` in one clone, `python -m sweeps paper` in another (make paper's target: at most 6 times
#      the demo's wall time on the same machine);
#   0. (part `one`) the README's "One run": ssat.train --epochs 4 with a fresh teacher cache, then the README's short
#      variant, then ssat.evaluate of the first run's best.pt (issue 44, item 11);
#   2. mnist5k-search under sampler seeds 0 and 1, its teacher made first apart (the target is the search's time after
#      the teacher), with each run's convergence report and search table.
# Logs and a summary of the wall times go to benchmarks/results/<date>-paper-and-search/ (or OUT_DIR).
#   bash benchmarks/paper_and_search.sh [OUT_DIR] [one|demo|paper|search ...]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/benchmarks/results/$(date +%Y-%m-%d)-paper-and-search}"
shift || true
parts=("${@:-demo paper search}")
parts=(${parts[@]})
mkdir -p "$out"
work="$(mktemp -d /tmp/ssat-bench-XXXX)"
py="$here/.venv/bin/python"
{ echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
  echo "commit: $(git -C "$here" rev-parse --short HEAD)"; echo "start: $(date -Is)"; echo "load: $(cat /proc/loadavg)"; } \
  >> "$out/summary.txt"

clone() {  # a fresh clone of HEAD in $work/$1; `python -m` from its root imports its own packages
    git clone -q "$here" "$work/$1"
    echo "$work/$1"
}

timed() {  # name, folder, command...: run it there, its console to $out/name.log, its wall time to the summary
    local name=$1 dir=$2; shift 2
    local t0 rc; t0=$(date +%s.%N)
    (cd "$dir" && "$@") > "$out/$name.log" 2>&1 && rc=0 || rc=$?
    printf '%s: %.1f s (exit %s; load after: %s)\n' "$name" "$(echo "$(date +%s.%N) - $t0" | bc)" "$rc" \
        "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/summary.txt"
}

for part in "${parts[@]}"; do
    case $part in
    one)   d=$(clone one)  # each command with a teacher cache of its own: as from a fresh clone
           SSAT_TEACHER_DIR="$d/teachers-a" timed one-run "$d" "$py" -m ssat.train --preset mnist5k-ssat-mbi \
               --set method.beta=0.5 --epochs 4 --out runs/one
           SSAT_TEACHER_DIR="$d/teachers-b" timed one-run-short "$d" "$py" -m ssat.train --preset mnist5k-ssat-mbi \
               --set method.beta=0.5 --epochs 4 --out runs/short --set eval.autoattack=false
           SSAT_TEACHER_DIR="$d/teachers-a" timed one-evaluate "$d" "$py" -m ssat.evaluate runs/one/best.pt \
               --autoattack-n 200
           cp "$d/runs/one/config.json" "$out/one-run-config.json" ;;
    demo)  d=$(clone demo);  timed demo "$d" "$py" -m sweeps demo ;;
    paper) d=$(clone paper); timed paper "$d" "$py" -m sweeps paper
           rm -rf "$out/outputs-paper"; cp -r "$d/outputs/paper" "$out/outputs-paper" ;;
    search)
        d=$(clone search)
        export SSAT_TEACHER_DIR="$d/teachers"
        timed search-teacher "$d" "$py" -m sweeps run sweeps/specs/mnist5k-search.yaml --workdir "$d/teacher-only" \
            --samples 1 --top-k 1 --epochs 1 --name teacher-only
        for seed in 0 1; do
            sed "s/^  sampler_seed: 0$/  sampler_seed: $seed/" "$d/sweeps/specs/mnist5k-search.yaml" > "$d/search$seed.yaml"
            timed "search-seed$seed" "$d" "$py" -m sweeps run "search$seed.yaml" --workdir "$d/s$seed"
            uri="sqlite:///$d/s$seed/mlflow.db"
            (cd "$d" && "$py" -m analysis.convergence --experiment mnist5k-search --tracking-uri "$uri" \
                ) > "$out/search-seed$seed-convergence.md" 2>&1 || true
            (cd "$d" && "$py" -m analysis.tables --experiment mnist5k-search --table search --format md \
                --tracking-uri "$uri") > "$out/search-seed$seed-table.md" 2>&1 || true
        done ;;
    esac
done
{ echo "end: $(date -Is)"; echo "work folder: $work"; } >> "$out/summary.txt"
cat "$out/summary.txt"

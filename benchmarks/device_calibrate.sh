#!/usr/bin/env bash
# Issue 31 on a GPU machine, in two parts that each fit one device command (from the repository root):
#   bash benchmarks/device_env.sh                         here first: ray, mlflow, optuna, pyautoattack -> .devenv/
#   bash benchmarks/device_calibrate.sh calibrate         on the GPU (carry .devenv): `sweeps calibrate` of the
#                                                         specs in CAL_SPECS (default Table 1), --budget CAL_MIN
#   bash benchmarks/device_calibrate.sh demo              on the GPU: `make demo`'s command, timed, then the TF32
#                                                         decision on its checkpoints (benchmarks/tf32_decision.py)
#                                                         and, if TF32 passes, the TF32 evaluation figures of CAL_SPECS
#   bash benchmarks/device_calibrate.sh all               on the GPU: demo, then calibrate --missing-only (CAL_ARGS)
#                                                         in what is left of ALL_S seconds (default 500): one call
#   bash benchmarks/device_calibrate.sh --cpu-smoke PART  the same commands on this machine's CPU at tiny sizes
#                                                         (run it here before a device call); no measurement
# What comes back ($OUT, at most 8 files): the calibration records, the logs, the demo's table and the TF32 rows.
set -uo pipefail
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled
PY=${PY:-python3}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$OUT" "$WORK"
smoke=0
if [[ "${1:-}" == "--cpu-smoke" ]]; then
    smoke=1
    shift
fi
part=${1:-}
[[ $part == calibrate || $part == demo || $part == all ]] ||
    { echo "usage: device_calibrate.sh [--cpu-smoke] calibrate|demo|all" >&2; exit 2; }
if ((smoke)); then
    SPECS=(tests/data/calibrate-tiny.yaml) CAL=(--device cpu --steps 2 --teacher-warmup 1 --eval-n 20 --aa-n 4)
    CAL_MIN=5 DEMO=(--epochs 2 --seeds 0 --rows 'linear|on' standard) TF32=(--n 50 --autoattack 1)
else
    read -r -a SPECS <<< "${CAL_SPECS:-sweeps/specs/paper-table1-main.yaml}"
    CAL=(--jobs 16) CAL_MIN=${CAL_MIN:-6} DEMO=() TF32=(--n 1000 --autoattack 1)
fi
read -r -a EXTRA <<< "${CAL_ARGS:-}"  # e.g. "--missing-only --only training"
ALL_S=${ALL_S:-500}
export SSAT_CALIBRATION_DIR=$OUT/calibration

{
if ((!smoke)); then
    [[ -f .devenv/unpack.sh ]] && { source .devenv/unpack.sh || { echo "device env: unpack failed"; exit 1; }; }
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())"
t0=$SECONDS
calibrate() {  # calibrate MINUTES
    echo "== calibrate ${SPECS[*]} ${EXTRA[*]} (budget $1 min)"
    timeout $((${1%.*} * 60 + 90)) "$PY" -m sweeps calibrate "${SPECS[@]}" "${CAL[@]}" "${EXTRA[@]}" --budget "$1" \
        --workdir "$WORK"
    echo "== calibrate: exit $? after $((SECONDS - t0)) s"
}
demo() {
    echo "== make demo's command on this machine"
    timeout 220 "$PY" -m sweeps demo "${DEMO[@]}" --workdir "$WORK"
    echo "== demo: exit $? after $((SECONDS - t0)) s"
    cp "$WORK"/outputs/mnist5k-demo/ablation.md "$OUT"/demo-ablation.md 2>/dev/null
    cp "$WORK"/outputs/mnist5k-demo/convergence.md "$OUT"/demo-convergence.md 2>/dev/null
    echo "== strict fp32 against TF32 on the demo's checkpoints"
    timeout 120 "$PY" benchmarks/tf32_decision.py "$WORK" "${TF32[@]}" --budget-s 60 --json "$OUT"/tf32.json
    echo "== TF32: exit $? after $((SECONDS - t0)) s"
}
tf32_figures() {  # the TF32 evaluation figures, when TF32 passed
    grep -q '"verdict": "tf32"' "$OUT"/tf32.json 2>/dev/null || return 0
    echo "== TF32 passed: the TF32 evaluation figures of ${SPECS[*]}"
    timeout 100 "$PY" -m sweeps calibrate "${SPECS[@]}" "${CAL[@]}" --set eval.tf32=true --only eval \
        --budget 1.2 --workdir "$WORK"
    echo "== TF32 figures: exit $? after $((SECONDS - t0)) s"
}
case $part in
    calibrate) calibrate "$CAL_MIN" ;;
    demo) demo; tf32_figures ;;
    all)
        demo
        left=$(( (ALL_S - (SECONDS - t0) - 100) / 60 ))  # whole minutes; calibrate's own timeout adds 90 s
        if ((smoke)); then left=$CAL_MIN; fi
        if ((left >= 1)); then calibrate "$left"; else echo "== calibrate: no time left of ALL_S=$ALL_S"; fi
        ((smoke || ALL_S - (SECONDS - t0) >= 110)) && tf32_figures ;;
esac
echo "== done"
} 2>&1 | grep --line-buffered -v -e '^USDT:' -e 'gpuGetDeviceCount failed' | tee "$OUT/$part.log"

#!/usr/bin/env bash
# Issue 16's GPU measurements in one prepared run (about 4.5 min on one H100/H200), from the repository root:
#   bash benchmarks/device_run.sh               the GPU run
#   bash benchmarks/device_run.sh --cpu-smoke   every section at tiny sizes on the CPU (tests/unit/test_profile_step.py);
#                                               its numbers are no measurement
# Sections: (1) two epochs of the real Trainer (WRN-28-5, bf16, 4096 synthetic CIFAR images; the second is timed) at
# the baseline commit, eager and in graph mode; (2) graph mode against eager steps over 50 steps (WRN-16-1, fp32,
# cuDNN autotuning off); (3) 10 profiled steps of WRN-28-5 per mode (eager, compiled, graph; Chrome traces in $OUT);
# (4) WRN-28-2 trials packed on the GPU, without and with MPS (clusters/mps.sh).
# The baseline needs the commit before issue 16 (BASE_REF, default fb30c0e) in a git history here, or a checkout of
# it in BASE_DIR; without either the section says so and goes on. Each section has its own time limit, so one that
# hangs costs its limit only. JSON lines on stdout, all of it also in $OUT/device.log.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PY:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if [[ "${1:-}" == "--cpu-smoke" ]]; then
    DEV=cpu TRAIN_MODEL=wrn-16-1 TRAIN_PREC=fp32 IMAGES=8 EQ_MODEL=cnn-small EQ_STEPS=2 EQ_BATCH=4 PROF_MODEL=cnn-small
    PROF_STEPS=1 PROF_WARMUP=1 PROF_BATCH=4 PROF_MODES="eager graph" PROF_PREC=fp32 PACK_MODEL=cnn-small
    PACK_N="1" PACK_SECONDS=1 PACK_STARTUP=25 PACK_PREC=fp32 PACK_BATCH=4 LIMIT=120
elif [[ $# -gt 0 ]]; then
    echo "usage: bash benchmarks/device_run.sh [--cpu-smoke]" >&2
    exit 2
else
    DEV=cuda TRAIN_MODEL=wrn-28-5 TRAIN_PREC=bf16 IMAGES=4096 EQ_MODEL=wrn-16-1 EQ_STEPS=50 EQ_BATCH=128 PROF_MODEL=wrn-28-5
    PROF_STEPS=10 PROF_WARMUP=5 PROF_BATCH=128 PROF_MODES="eager compiled graph" PROF_PREC=bf16 PACK_MODEL=wrn-28-2
    PACK_N="1 8" PACK_SECONDS=8 PACK_STARTUP=25 PACK_PREC=bf16 PACK_BATCH=128 LIMIT=
fi
lim() { echo "${LIMIT:-$1}"; }  # a section's time limit: the GPU run's own, or the smoke's common one

{
if [[ $DEV == cuda ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())"

echo "== (1) the real Trainer: baseline, eager, graph mode (second epoch of two)"
base=${BASE_DIR:-}
if [[ $DEV != cuda ]]; then  # the baseline's own script knows no --device: a GPU run only
    echo "baseline: skipped on the CPU"
elif [[ -z $base ]] && git rev-parse -q --verify "${BASE_REF:-fb30c0e}^{commit}" >/dev/null 2>&1; then
    base=$(mktemp -d)
    git archive "${BASE_REF:-fb30c0e}" | tar -x -C "$base"
fi
if [[ -n $base ]]; then
    (cd "$base" && PYTHONPATH=$base timeout "$(lim 75)" "$PY" benchmarks/gpu_throughput.py trainer --model "$TRAIN_MODEL" \
        --images "$IMAGES" --precision bf16) | sed 's/^{"trainer_model"/{"baseline": true, "trainer_model"/'
elif [[ $DEV == cuda ]]; then
    echo "baseline: no checkout of ${BASE_REF:-fb30c0e} (set BASE_DIR, or run where the git history is); skipped"
fi
timeout "$(lim 60)" "$PY" benchmarks/gpu_throughput.py trainer --device "$DEV" --model "$TRAIN_MODEL" --images "$IMAGES" \
    --precision "$TRAIN_PREC"
timeout "$(lim 60)" "$PY" benchmarks/gpu_throughput.py trainer --device "$DEV" --model "$TRAIN_MODEL" --images "$IMAGES" \
    --precision "$TRAIN_PREC" --graph-mode

echo "== (2) graph mode against eager steps"
timeout "$(lim 40)" "$PY" benchmarks/gpu_throughput.py equivalence --device "$DEV" --model "$EQ_MODEL" --steps "$EQ_STEPS" \
    --batch "$EQ_BATCH"

echo "== (3) profiled steps per mode"
# shellcheck disable=SC2086  # PROF_MODES is a list of words
timeout "$(lim 100)" "$PY" benchmarks/profile_step.py --device "$DEV" --model "$PROF_MODEL" --mode $PROF_MODES \
    --steps "$PROF_STEPS" --warmup "$PROF_WARMUP" --batch "$PROF_BATCH" --precision "$PROF_PREC" --channels-last \
    --trace "$OUT/step_trace.json" --json "$OUT/profile.json"

echo "== (4) packed trials, without and with MPS"
# shellcheck disable=SC2086  # PACK_N is a list of numbers
timeout "$(lim 90)" "$PY" benchmarks/gpu_throughput.py pack --device "$DEV" --n $PACK_N --model "$PACK_MODEL" \
    --batch "$PACK_BATCH" --precision "$PACK_PREC" --seconds "$PACK_SECONDS" --startup "$PACK_STARTUP"
if [[ $DEV == cuda ]] && bash clusters/mps.sh start; then
    mps_env=$(bash clusters/mps.sh env)
    if [[ -n $mps_env ]]; then
        eval "$mps_env"
        timeout "$(lim 50)" "$PY" benchmarks/gpu_throughput.py pack --device "$DEV" --n 8 --model "$PACK_MODEL" \
            --batch "$PACK_BATCH" --precision "$PACK_PREC" --seconds "$PACK_SECONDS" --startup "$PACK_STARTUP"
    fi
    bash clusters/mps.sh stop
else
    echo "MPS: not on this machine; the packed run above is the only one"
fi
echo "== done"
} 2>&1 | grep -v -e '^USDT:' -e 'gpuGetDeviceCount failed' | tee "$OUT/device.log"

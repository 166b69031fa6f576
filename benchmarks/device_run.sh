#!/usr/bin/env bash
# Issue 16's GPU measurements in one prepared run (about 6 min on one H100/H200), from the repository root:
#   bash benchmarks/device_run.sh               the GPU run
#   bash benchmarks/device_run.sh --cpu-smoke   every section at tiny sizes on the CPU (tests/slow/test_device_run_smoke.py);
#                                               its numbers are no measurement
# Sections: (1) two epochs of the real Trainer (WRN-28-5, bf16, 4096 synthetic CIFAR images; the second is timed):
# the baseline commit if a checkout of it is named (BASE_DIR), eager, graph mode, and graph mode over the compiled
# step (system.compile default); (2) graph mode over the compiled step against eager steps over 50 steps (WRN-16-1,
# fp32, cuDNN autotuning off); (3) 10 profiled steps of WRN-28-5 per mode (PROF_MODES; Chrome traces in $OUT);
# (4) WRN-28-2 trials packed on the GPU: 4 without MPS, then with MPS (clusters/mps.sh) 1 and 4 eager and 4 in
# graph mode. Each section has its own time limit, so one that hangs costs its limit only. JSON lines on stdout,
# all of it also in $OUT/device.log.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PY:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if [[ "${1:-}" == "--cpu-smoke" ]]; then
    DEV=cpu TRAIN_MODEL=wrn-16-1 TRAIN_PREC=fp32 IMAGES=8 GC_COMPILE=off EQ_MODEL=cnn-small EQ_STEPS=2 EQ_BATCH=4
    PROF_MODEL=cnn-small PROF_STEPS=1 PROF_WARMUP=1 PROF_BATCH=4 PROF_MODES="eager graph" PROF_PREC=fp32
    PACK_MODEL=cnn-small PACK_N=1 PACK_SECONDS=1 PACK_STARTUP=25 PACK_PREC=fp32 PACK_BATCH=4 LIMIT=120
elif [[ $# -gt 0 ]]; then
    echo "usage: bash benchmarks/device_run.sh [--cpu-smoke]" >&2
    exit 2
else
    DEV=cuda TRAIN_MODEL=wrn-28-5 TRAIN_PREC=bf16 IMAGES=4096 GC_COMPILE=default EQ_MODEL=wrn-16-1 EQ_STEPS=50
    EQ_BATCH=128 PROF_MODEL=wrn-28-5 PROF_STEPS=10 PROF_WARMUP=5 PROF_BATCH=128 PROF_MODES="graph graph-compiled"
    PROF_PREC=bf16 PACK_MODEL=wrn-28-2 PACK_N=4 PACK_SECONDS=8 PACK_STARTUP=20 PACK_PREC=bf16 PACK_BATCH=128 LIMIT=
fi
lim() { echo "${LIMIT:-$1}"; }  # a section's time limit: the GPU run's own, or the smoke's common one

{
if [[ $DEV == cuda ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())"

echo "== (1) the real Trainer: baseline (BASE_DIR), eager, graph mode, graph mode over the compiled step"
if [[ -n ${BASE_DIR:-} && $DEV == cuda ]]; then  # the baseline's own script knows no --device: a GPU run only
    (cd "$BASE_DIR" && PYTHONPATH=$BASE_DIR timeout "$(lim 75)" "$PY" benchmarks/gpu_throughput.py trainer \
        --model "$TRAIN_MODEL" --images "$IMAGES" --precision bf16) | sed 's/^{"trainer_model"/{"baseline": true, "trainer_model"/'
else
    echo "baseline: not run (BASE_DIR names no checkout of the baseline commit, or this is the CPU)"
fi
trainer=("$PY" benchmarks/gpu_throughput.py trainer --device "$DEV" --model "$TRAIN_MODEL" --images "$IMAGES"
         --precision "$TRAIN_PREC")
timeout "$(lim 50)" "${trainer[@]}"
timeout "$(lim 50)" "${trainer[@]}" --graph-mode
timeout "$(lim 120)" "${trainer[@]}" --graph-mode --compile "$GC_COMPILE"

echo "== (2) graph mode over the compiled step against eager steps"
timeout "$(lim 60)" "$PY" benchmarks/gpu_throughput.py equivalence --device "$DEV" --model "$EQ_MODEL" --steps "$EQ_STEPS" \
    --batch "$EQ_BATCH" --compile "$GC_COMPILE"

echo "== (3) profiled steps per mode"
# shellcheck disable=SC2086  # PROF_MODES is a list of words
timeout "$(lim 100)" "$PY" benchmarks/profile_step.py --device "$DEV" --model "$PROF_MODEL" --mode $PROF_MODES \
    --steps "$PROF_STEPS" --warmup "$PROF_WARMUP" --batch "$PROF_BATCH" --precision "$PROF_PREC" --channels-last \
    --trace "$OUT/step_trace.json" --json "$OUT/profile.json"

echo "== (4) packed trials, without and with MPS"
pack=("$PY" benchmarks/gpu_throughput.py pack --device "$DEV" --model "$PACK_MODEL" --batch "$PACK_BATCH"
      --precision "$PACK_PREC" --seconds "$PACK_SECONDS" --startup "$PACK_STARTUP")
timeout "$(lim 45)" "${pack[@]}" --n "$PACK_N"
if [[ $DEV == cuda ]] && bash clusters/mps.sh start; then
    mps_env=$(bash clusters/mps.sh env)
    if [[ -n $mps_env ]]; then
        eval "$mps_env"
        timeout "$(lim 80)" "${pack[@]}" --n 1 4
        timeout "$(lim 45)" "${pack[@]}" --n 4 --graph-mode
    fi
    bash clusters/mps.sh stop
else
    echo "MPS: not on this machine; the packed run above is the only one"
fi
echo "== done"
} 2>&1 | grep -v -e '^USDT:' -e 'gpuGetDeviceCount failed' | tee "$OUT/device.log"

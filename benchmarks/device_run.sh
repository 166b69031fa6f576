#!/usr/bin/env bash
# The GPU measurements of a whole sweep's cost (issue 25) and a real Ray sweep on the GPU (issue 26), in one
# prepared run from the repository root (about 8 minutes on one H100/H200):
#   bash benchmarks/device_env.sh               here first: the packages the GPU machine lacks, into .devenv/
#   bash benchmarks/device_run.sh               on the GPU machine (the device tool: carry .devenv)
#   bash benchmarks/device_run.sh --cpu-smoke   every section at tiny sizes on this machine's CPU
#                                               (tests/slow/test_device_run_smoke.py); its numbers are no measurement
# Sections, in priority order, each under its own time limit (one that hangs costs its limit only):
#  (1) one full 49,000-image epoch of SSAT-MBI (WRN-28-5) in the default mode, in a fresh process whose compiled
#      kernels go to the sweep's compile cache (two epochs: the second is the timed one);
#  (2) a second process on that warm cache: seconds from its start to its first full-speed step;
#  (3) the profile of the default step (graph mode over the compiled step, fused forwards): kernel ms per step, top
#      kernels;
#  (4) SSAT-MBI-AWR (its preset's fp16) in the default mode on 8,192 images;
#  (5) evaluation costs on 1,000 test images of section (1)'s model at batch 500 and 1,000, strict fp32 and TF32,
#      and standard AutoAttack by attack on 200;
#  (6) FixMatch teacher steps/s, WRN-28-2 and WRN-28-5, 200 steps;
#  (7) the GPU smoke sweeps through Ray Tune exactly as a user runs them (MPS on, a local SQLite MLflow store), one
#      after the other, each read back from the store (benchmarks/gpu_sweep_report.py); nvidia-smi's process list
#      sampled meanwhile.
# SECTIONS="1 2 5 6 7" runs only those (a short device session); TEACHERS, SMOKE_SPECS and EVAL_ARGS narrow (6),
# (7) and (5). JSON lines on stdout (the formats sweeps/costs/dryrun.py reads), all of it also in $OUT/device.log; copy the
# files of $OUT into benchmarks/results/ (named <gpu>-<date>-...).
set -uo pipefail
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled
PY=${PY:-python3}
OUT=${OUT:-$(mktemp -d)}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$OUT" "$WORK"
if [[ "${1:-}" == "--cpu-smoke" ]]; then
    DEV=cpu EPOCH=(--model wrn-16-1 --images 96 --n-labeled 20 --n-val 10 --test-n 40 --step-times 4)
    AWR=(--model wrn-16-1 --images 64 --n-labeled 20 --n-val 10 --test-n 40 --precision fp32) WARM_IMAGES=64
    PROF=(--model cnn-small --steps 1 --warmup 1 --batch 4 --precision fp32)
    EVAL=(--n 8 --batches 8 --aa-n 4 --attacks clean pgd10 apgd-ce) TEACHERS="cnn-small" TEACHER=(--steps 3 --warmup 1)
    SWEEP_SET=(model.name=cnn-small data.n_labeled=20 data.n_unlabeled=60 data.n_val=20 eval.test_n=20
               eval.autoattack_n=4 attack.steps=2 optim.batch_size=40)
    export SSAT_LOGICAL_CPUS=8 SSAT_LOGICAL_GPUS=1  # 4 trials at {cpu: 2, gpu: 0.25} scheduled as on a GPU
    LIMIT=600
elif [[ $# -gt 0 ]]; then
    echo "usage: bash benchmarks/device_run.sh [--cpu-smoke]" >&2
    exit 2
else
    DEV=cuda EPOCH=(--model wrn-28-5 --images 49000) AWR=(--model wrn-28-5 --images 8192) WARM_IMAGES=8192
    PROF=(--model wrn-28-5 --steps 10 --warmup 5 --batch 128 --precision bf16)
    EVAL=(--n 1000 --batches 500 1000 --aa-n 200) TEACHERS=${TEACHERS:-"wrn-28-2 wrn-28-5"} TEACHER=(--steps 200)
    SWEEP_SET=()
    if [[ -n ${EVAL_ARGS:-} ]]; then read -r -a EVAL <<< "$EVAL_ARGS"; fi
    LIMIT=
fi
lim() { echo "${LIMIT:-$1}"; }  # a section's time limit: the GPU run's own, or the smoke's common one
want() { [[ " ${SECTIONS:-1 2 3 4 5 6 7} " == *" $1 "* ]]; }  # SECTIONS="1 2 5": a short device session's choice
CACHE=$WORK/runs/compile_cache  # the sweeps below use the same folder: their trials find these kernels
DATA=$WORK/data

{
if [[ $DEV == cuda && -f .devenv/unpack.sh ]]; then  # ray, mlflow, optuna, pyautoattack for the GPU's Python 3.12
    source .devenv/unpack.sh || { echo "device env: unpack or import check failed"; exit 1; }
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if [[ $DEV == cuda ]]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available())"
cost=("$PY" benchmarks/sweep_cost.py)

if want 1; then
echo "== (1) one full epoch of SSAT-MBI in the default mode, cold: compiles and publishes its kernels"
timeout "$(lim 200)" "${cost[@]}" epoch --method ssat-mbi "${EPOCH[@]}" --epochs 2 --device "$DEV" \
    --data-root "$DATA/c10" --cache "$CACHE" --out "$WORK/ssat-mbi"
fi

if want 2; then
echo "== (2) a second process on the warm cache: seconds to its first full-speed step"
timeout "$(lim 60)" "${cost[@]}" epoch --method ssat-mbi "${EPOCH[@]}" --images "$WARM_IMAGES" --epochs 1 \
    --device "$DEV" --data-root "$DATA/c10-warm" --cache "$CACHE" --out "$WORK/warm"
fi

if want 3; then
echo "== (3) the profile of the step (graph mode over the compiled step)"
timeout "$(lim 60)" "$PY" benchmarks/profile_step.py "${PROF[@]}" --device "$DEV" --mode graph-compiled \
    --channels-last --fused-forward auto --cache "$CACHE" --trace "$OUT/step_trace.json" --json "$OUT/profile.json"
fi

if want 4; then
echo "== (4) SSAT-MBI-AWR (its preset's fp16) in the default mode"
timeout "$(lim 180)" "${cost[@]}" epoch --method ssat-mbi-awr "${AWR[@]}" --epochs 2 --device "$DEV" \
    --data-root "$DATA/c10-awr" --cache "$CACHE" --out "$WORK/awr"
fi

if want 5; then
echo "== (5) evaluation costs: clean, PGD-k, APGD-CE (strict fp32 and TF32), AutoAttack by attack"
timeout "$(lim 150)" "${cost[@]}" eval --checkpoint "$WORK/ssat-mbi/last.pt" --data-root "$DATA/c10" "${EVAL[@]}" \
    --device "$DEV"
fi

if want 6; then
echo "== (6) FixMatch teacher steps/s"
for m in $TEACHERS; do
    timeout "$(lim 60)" "$PY" benchmarks/teacher_steps.py --model "$m" "${TEACHER[@]}" --device "$DEV"
done
fi

if want 7; then
echo "== (7) the GPU smoke sweeps through Ray Tune, as the README runs them"
if $PY -c "import ray.tune, mlflow, optuna" 2>/dev/null; then
    "$PY" benchmarks/gpu_smoke_data.py "$DATA/smoke" ${SWEEP_SET[@]:+--set "${SWEEP_SET[@]}"}
    mps=off
    if [[ $DEV == cuda ]] && bash clusters/mps.sh start; then
        eval "$(bash clusters/mps.sh env)"
        mps=on
        (nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader -l 1 \
            > "$OUT/nvidia_smi_apps.csv" 2>&1 &)
    fi
    echo "MPS: $mps"
    uri="sqlite:///$WORK/mlflow.db"
    for spec in ${SMOKE_SPECS:-gpu-smoke gpu-smoke-whole}; do
        timeout "$(lim 150)" "$PY" -m sweeps run "sweeps/specs/$spec.yaml" --workdir "$WORK" --data-root "$DATA/smoke" \
            --tracking-uri "$uri" --set data.pseudo_labels="$DATA/smoke/pseudo-labels.pt" "${SWEEP_SET[@]}"
        echo "sweep $spec: exit $?"
        timeout "$(lim 60)" "$PY" benchmarks/gpu_sweep_report.py "$spec" --tracking-uri "$uri" | tee "$OUT/$spec.json"
    done
    pkill -f "nvidia-smi --query-compute-apps" 2>/dev/null
    [[ $mps == on ]] && bash clusters/mps.sh stop
else
    echo "sweeps: not run (ray, mlflow or optuna missing: carry .devenv from benchmarks/device_env.sh)"
fi
fi
echo "== done"
} 2>&1 | grep --line-buffered -v -e '^USDT:' -e 'gpuGetDeviceCount failed' | tee "$OUT/device.log"

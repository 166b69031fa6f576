#!/usr/bin/env bash
# The GPU measurements of issue 8 in one go (run on the lent GPU machine from the repository root).
# Prints JSON lines; everything also goes to $OUT/gpu.log when OUT is set.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
PY=${PY:-python3}
log=${OUT:-/tmp}/gpu.log
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
echo "== step benchmark: SSAT-MBI vs RST (fp32, then bf16 + channels_last)"
timeout 120 $PY benchmarks/step_time.py --models wrn-28-5 wrn-28-2 --steps 20 --warmup 3
timeout 120 $PY benchmarks/step_time.py --models wrn-28-5 wrn-28-2 --steps 20 --warmup 3 --precision bf16 --channels-last
echo "== WRN-28-5 SSAT-MBI variants"
timeout 300 $PY benchmarks/gpu_throughput.py variants --model wrn-28-5 --steps 20
echo "== the real Trainer, GPU-resident data and augmentation"
timeout 120 $PY benchmarks/gpu_throughput.py trainer --model wrn-28-5 --images 8192 --precision bf16
echo "== WRN-28-2 trials packed on one GPU"
timeout 300 $PY benchmarks/gpu_throughput.py pack --n 1 2 4 8 --model wrn-28-2 --seconds 10 --startup 30
} 2>&1 | tee "$log"

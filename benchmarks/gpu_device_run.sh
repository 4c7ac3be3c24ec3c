#!/bin/bash
# The whole GPU check as one command on a GPU machine (no MLIR there):
#     bash benchmarks/gpu_device_run.sh [FOLDER] [SECONDS]
# FOLDER holds the rows `./dev gpu-check --prepare FOLDER` exported (default
# build/gpu-check); SECONDS bounds the rows' run (default 250: with the
# warpgroup rows before it, the whole script fits one 10-minute call). Logs and JSON
# go to $OUT (default /tmp/gpu-check-out): the device, the ceilings torch
# measures (copy bandwidth, cuBLAS bf16), then every row checked and timed
# beside jax.jit and torch, with our kernel time from CUDA events. Where
# build/wgmma-probe and build/gpu-check-90a exist (./dev gpu-check --prepare-device),
# the warpgroup tiles are probed and their rows run first (about 3 minutes at most).
set -u
DIR=${1:-build/gpu-check}
SECONDS_FOR_ROWS=${2:-250}
OUT=${OUT:-/tmp/gpu-check-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.4
PY=$(command -v python3)
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  "$PY" -c "import sys, numpy; print(sys.version.split()[0], 'numpy', numpy.__version__)"
  "$PY" -c "import ml_dtypes; print('ml_dtypes', ml_dtypes.__version__)"
  grep -m1 "model name" /proc/cpuinfo
} 2>&1 | tee "$OUT/env.txt"
if [ -d build/wgmma-probe ]; then
  timeout 60 "$PY" benchmarks/gpu_wgmma_probe.py --run build/wgmma-probe \
    --json "$OUT/wgmma_probe.json" 2>&1 | tee "$OUT/wgmma_probe.log"
fi
if [ -d build/gpu-check-90a ]; then
  timeout 150 "$PY" benchmarks/gpu_check.py --run build/gpu-check-90a --json "$OUT/rows_90a.json" \
    --profile --row-timeout 45 --deadline 110 2>&1 | tee "$OUT/run_90a.log"
fi
timeout 90 "$PY" benchmarks/gpu_check.py --baselines --json "$OUT/baselines.json" 2>&1 \
  | tee "$OUT/baselines.log"
AUTODIFF_GPU_CHECK_TORCH_COMPILE=${AUTODIFF_GPU_CHECK_TORCH_COMPILE:-0} \
  timeout $((SECONDS_FOR_ROWS + 90)) "$PY" benchmarks/gpu_check.py --run "$DIR" \
  --json "$OUT/rows.json" --profile --row-timeout 60 --deadline "$SECONDS_FOR_ROWS" 2>&1 \
  | tee "$OUT/run.log"

#!/usr/bin/env bash
# The controller benchmark suite on an accelerator, as one short call (see docs/performance.md).
# Usage: OUT=dir bash scripts/gpu-bench.sh   -> $OUT/gpu_results.tgz and $OUT/log.txt
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
RES=/tmp/gpu-results; rm -rf "$RES"; mkdir -p "$RES"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
pack() { tar czf "$OUT/gpu_results.tgz" -C /tmp gpu-results; }
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
  timeout 330 python3 -m tokenworth_bench.controller.suite --out "$RES"; echo "quick suite rc=$?"; pack
  timeout 150 python3 -m tokenworth_bench.controller.suite --full --only sweep --out "$RES/full"; echo "full sweep rc=$?"; pack
} 2>&1 | tee "$OUT/log.txt"
pack

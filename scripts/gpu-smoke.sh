#!/usr/bin/env bash
# One prepared check for a lent GPU machine (JAX on Python 3.12; no vLLM, no weights), < 5 minutes:
# the CLI's co-location settings, JAX on the GPU with its allocator capped at the requested share,
# the controller and a 256-configuration vmap sweep, and what the process holds outside XLA's pool
# against the split's one-context budget (bench/tokenworth_bench/gpu_smoke.py). Leaves ONE archive:
#   OUT=dir bash scripts/gpu-smoke.sh   -> $OUT/gpu_smoke.tgz (gpu_smoke.json, gpu_smoke.md, log.txt)
# Extra arguments go to bench/tokenworth_bench/gpu_smoke.py (e.g. --jax-mem-fraction 0.05, or --cpu to test it here).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-smoke-out}; mkdir -p "$OUT"
RES=$(mktemp -d /tmp/gpu-smoke.XXXXXX)
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
unset XLA_CLIENT_MEM_FRACTION XLA_PYTHON_CLIENT_MEM_FRACTION XLA_PYTHON_CLIENT_PREALLOCATE  # the check sets them
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || echo "nvidia-smi: not available"
  "$PY" --version
  timeout 270 "$PY" -m tokenworth_bench.gpu_smoke --out "$RES" "$@"
  echo "gpu_smoke rc=$?"
} 2>&1 | tee "$RES/log.txt"
rc=$(grep -o 'gpu_smoke rc=[0-9]*' "$RES/log.txt" | tail -1 | cut -d= -f2)
tar czf "$OUT/gpu_smoke.tgz" -C "$RES" .
echo "archive: $OUT/gpu_smoke.tgz"
exit "${rc:-1}"

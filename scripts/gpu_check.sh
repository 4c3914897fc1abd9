#!/usr/bin/env bash
# Everything that needs a GPU, in one call on the device machine:
#   the GPU tests, every example, and the benchmarks; logs under $OUT.
# Packages missing there travel as wheels in .whl/ (scripts/fetch_device_wheels.sh);
# NVRTC and the CUDA headers come from the machine's CUDA toolkit.
set -uo pipefail
OUT=${OUT:-/tmp/moye-gpu-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export MOYE_CACHE_DIR=${MOYE_CACHE_DIR:-/tmp/moye-cache}
export PYTHONUNBUFFERED=1
what=${1:-all}
status=0
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 --version; } \
  2>&1 | tee "$OUT/device.log"
if [[ $what == all || $what == tests ]]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" || status=1
fi
if [[ $what == all || $what == examples ]]; then
  for ex in copy_kernel transpose matmul_smem tiled_matmul; do
    python3 -m moye.examples.$ex 2>&1 | tee -a "$OUT/examples.log" || status=1
  done
  python3 -m moye.examples.transpose 8192 8192 2>&1 | tee -a "$OUT/examples.log" || status=1
fi
if [[ $what == all || $what == bench ]]; then
  python3 benchmarks/kernels.py ${BENCH_ARGS:-} --json "$OUT/kernels.json" 2>&1 \
    | tee "$OUT/bench.log" || status=1
fi
exit $status

#!/usr/bin/env bash
# Everything that needs a GPU, in one call on the device machine; logs under $OUT.
#   scripts/gpu_check.sh [all|backend|tests|examples|bench|gemm|sgemm|matmuls|attention|compile|
#                         hopper|cutlass|cutedsl|rowwise|shapes|calltiming|kerneltimes|
#                         attnops|rowwise_ab]...
#                         (default: all)
#     backend   the driver/NVRTC GPU tests (pytest -m gpu tests/backend)
#     tests     every GPU test (pytest -m gpu tests)
#     examples  every example kernel
#     bench     benchmarks/kernels.py and benchmarks/launch_overhead.py
#     gemm      benchmarks/gemm.py (the production GEMM against cuBLAS, with clock and
#               power at 8192^3) and benchmarks/mma_peak.py (mma.sync's own ceiling)
#     sgemm     benchmarks/sgemm.py (the SIMT SGEMM against cuBLAS float32; SGEMM_ARGS)
#     matmuls   benchmarks/matmuls.py (every issue-7 matmul against cuBLAS; MATMULS_ARGS)
#     attention benchmarks/attention.py (the attention examples against their CUDA twins
#               and torch's sdpa; ATTENTION_ARGS)
#     compile   benchmarks/compile_time.py: cold and warm compiles of the example kernels
#               beside NVRTC on their hand-written twins (benchmarks/twins; COMPILE_ARGS)
#     hopper    benchmarks/hopper_gemm.py (the warp-specialized Hopper GEMM; HOPPER_ARGS)
#     cutlass   benchmarks/cutlass_sm80_gemm.cu: NVIDIA CUTLASS's own Ampere-style GEMM
#               (mma.sync) against cuBLAS; not part of 'all'. Needs .cutlass carried
#               (made by scripts/fetch_cutlass.sh) and the machine's nvcc; CUTLASS_ARGS
#               "M N K" (default 8192^3)
#     cutedsl   benchmarks/cute_dsl_gemm.py: CuTe DSL's own Hopper persistent GEMM example
#               against cuBLAS (CUTE_DSL_ARGS); not part of 'all'. Needs the parts that
#               scripts/fetch_cute_dsl.sh makes, carried: .cute_dsl1 and .cute_dsl2, in
#               one call or two consecutive ones (the first leaves .cute_dsl1 on the
#               warm machine); unpacked into /tmp/cute_dsl, a private dir
#     rowwise   benchmarks/rowwise.py: moye.ops' softmax, log_softmax, rms_norm, layer_norm and
#               cross_entropy, forward and backward, against the copy, torch eager,
#               torch.compile and QuACK (ROWWISE_ARGS, e.g. --quick), then its plot:
#               $ROWWISE_NAME.json, .log and .png under $OUT (default name: rowwise). Not
#               part of 'all' until a default run is timed at 8 minutes or less; a run
#               too long for one call splits, e.g. ROWWISE_ARGS="--dtypes float32"
#               ROWWISE_NAME=rowwise_f32, then bfloat16, merged afterwards anywhere by
#               benchmarks/rowwise.py --merge A.json B.json --json all.json (and
#               plot_rowwise.py A.json B.json). QuACK needs .cute_dsl1, .cute_dsl2
#               (scripts/fetch_cute_dsl.sh) and .cute_dsl3 (scripts/fetch_quack.sh)
#               carried, as for 'cutedsl'; without .cute_dsl3 its column reads n/a
#     rowwise_ab benchmarks/rowwise.py's moye column (no host times) on this tree and on the
#               reference tree AB_TREE (scripts/ab_tree.sh REV: moye/ and benchmarks/ of
#               a revision, carried), alternating, AB_ROUNDS rounds (default 2), with
#               ROWWISE_ARGS each; then rowwise.py --compare of the runs:
#               rowwise_ab.log and ab_{here,ref}_ROUND.json under $OUT. Not part of 'all'
#     shapes    benchmarks/matmul_shapes.py: moye.ops.matmul and linear against cuBLAS on
#               issue 19's shapes (SHAPES_ARGS, e.g. --dtypes bfloat16), then its plot:
#               $SHAPES_NAME.json, .log and .png under $OUT (default name: matmul_shapes).
#               Not part of 'all'; runs split to fit a call merge with
#               benchmarks/matmul_shapes.py --merge A.json B.json --json all.json
#     calltiming benchmarks/matmul_call_timing.py: moye.ops.matmul and torch.mm on small-M
#               shapes, in a loop of calls and call by call (CALLTIMING_ARGS); not part of 'all'
#     kerneltimes benchmarks/matmul_kernel_times.py: the GPU time of every candidate config of
#               gemm_skinny and gemm_sm90 beside cuBLAS on few-row shapes (KERNELTIMES_ARGS);
#               not part of 'all'
#     attnops   benchmarks/attention_ops.py: moye.ops.attention forward and backward against
#               SDPA's cuDNN and FLASH backends (and flash-attn-4 where it imports) on issue
#               20's shapes (ATTNOPS_ARGS, e.g. --head-dims 64 --no-backward): attention_ops.json
#               and .log under $OUT; not part of 'all'. flash-attn-4 needs .cute_dsl1-3
#               carried (scripts/fetch_cute_dsl.sh, scripts/fetch_quack.sh), as for 'rowwise'
# The machine has no network: packages it lacks travel in .whl/ (made by
# scripts/fetch_device_wheels.sh; carry it), installed into /tmp/site with
# no index. NVRTC comes from the carried tarball (nvidia/cu13/lib); without it,
# cuda.pathfinder looks for the machine's toolkit ($CUDA_HOME).
set -uo pipefail
OUT=${OUT:-/tmp/moye-gpu-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl 2>&1 | tee "$OUT/install.log" || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
for tarball in .whl/*.tar.xz; do
  [[ -f $tarball ]] || continue
  python3 - "$tarball" <<'EOF' || exit 1
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall("/tmp/site", filter="data")
    except TypeError:                       # a Python without extraction filters
        t.extractall("/tmp/site")
EOF
  export PYTHONPATH=/tmp/site:$PWD
done
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export MOYE_CACHE_DIR=${MOYE_CACHE_DIR:-/tmp/moye-cache}
export PYTHONUNBUFFERED=1
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(all)
want() { [[ " ${stages[*]} " == *" all "* || " ${stages[*]} " == *" $1 "* ]]; }
status=0
# dsl_peers STAGE WHO: the PYTHONPATH prefix of the CuTe DSL peers (QuACK, flash-attn-4:
# .cute_dsl1-3 carried, unpacked into /tmp), or nothing, saying so on stderr
dsl_peers() {
  if [[ -d .cute_dsl3 ]] && bash scripts/fetch_cute_dsl.sh unpack /tmp/cute_dsl >&2 \
      && bash scripts/fetch_quack.sh unpack /tmp/quack >&2; then
    echo /tmp/cute_dsl/nvidia_cutlass_dsl/dsl_packages:/tmp/cute_dsl:/tmp/quack:
  else
    echo "$1: $2 is not installed (no .cute_dsl3, or see above): its column reads n/a" >&2
  fi
}
# tvm-ffi (the DSL peers' calls) would JIT-build a torch addon where torch lacks the DLPack
# exchange API; skip that there (see scripts/fetch_quack.sh)
no_dlpack_addon() {
  python3 -c 'import sys, torch; t = torch.Tensor; sys.exit(not (hasattr(t, "__dlpack_c_exchange_api__") or hasattr(t, "__c_dlpack_exchange_api__")))' \
    || export TVM_FFI_DISABLE_TORCH_C_DLPACK=1
}
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv
  nvidia-smi | head -4
  python3 --version
  python3 -m pip list 2>/dev/null | grep -i -E "cuda|nvidia|torch|numpy|pytest|ml.dtypes|hypothesis"
  echo "PYTHONPATH=$PYTHONPATH"
  python3 -c "
from moye.backend.cuda import driver, nvrtc
print(nvrtc.describe())
print('device:', driver.device_name(), driver.device_arch(), 'driver CUDA', driver.driver_version(),
      'smem opt-in', driver.max_shared_memory_per_block_optin())
"
} 2>&1 | tee "$OUT/device.log" || status=1
if want backend; then
  python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/backend 2>&1 \
    | tee "$OUT/gpu_backend.log" || status=1
fi
if want tests; then
  python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" \
    || status=1
fi
if want examples; then
  for ex in copy_kernel transpose matmul_smem tiled_matmul; do
    python3 -m moye.examples.$ex 2>&1 | tee -a "$OUT/examples.log" || status=1
  done
  python3 -m moye.examples.transpose 8192 8192 2>&1 | tee -a "$OUT/examples.log" || status=1
  python3 -m moye.examples.gemm 2>&1 | tee -a "$OUT/examples.log" || status=1
  python3 -m moye.examples.gemm 2048 2048 1024 bfloat16 2>&1 | tee -a "$OUT/examples.log" \
    || status=1
  python3 -m moye.examples.gemm 1000 1000 1000 2>&1 | tee -a "$OUT/examples.log" || status=1
  python3 -m moye.examples.sgemm 2>&1 | tee -a "$OUT/examples.log" || status=1
  for v in tf32 ldmatrix; do
    python3 -m moye.examples.tensor_core_matmul $v 2>&1 | tee -a "$OUT/examples.log" || status=1
  done
  python3 -m moye.examples.tma_copy 2>&1 | tee -a "$OUT/examples.log" || status=1
  python3 -m moye.examples.tma_copy 4096 8192 2>&1 | tee -a "$OUT/examples.log" || status=1
  python3 -m moye.examples.wgmma_matmul 2>&1 | tee -a "$OUT/examples.log" || status=1
  python3 -m moye.examples.wgmma_matmul 512 768 1024 256 2>&1 | tee -a "$OUT/examples.log" \
    || status=1
  python3 -m moye.examples.tma_multicast 2>&1 | tee -a "$OUT/examples.log" || status=1
  python3 -m moye.examples.hopper_gemm 2>&1 | tee -a "$OUT/examples.log" || status=1
  python3 -m moye.examples.hopper_gemm 1000 1064 1000 bfloat16 2>&1 \
    | tee -a "$OUT/examples.log" || status=1
  for ex in vectorized_copy async_matmul tensor_core_double_buffer; do
    python3 -m moye.examples.$ex 2>&1 | tee -a "$OUT/examples.log" || status=1
  done
  for ex in attention_simt attention_mma; do
    python3 -m moye.examples.$ex 2>&1 | tee -a "$OUT/examples.log" || status=1
    python3 -m moye.examples.$ex 320 3 2 2>&1 | tee -a "$OUT/examples.log" || status=1
  done
fi
if want bench; then
  python3 benchmarks/launch_overhead.py --json "$OUT/launch_overhead.json" 2>&1 \
    | tee "$OUT/launch_overhead.log" || status=1
  python3 benchmarks/kernels.py ${BENCH_ARGS:-} --json "$OUT/kernels.json" 2>&1 \
    | tee "$OUT/bench.log" || status=1
fi
if want gemm; then
  python3 benchmarks/gemm.py ${GEMM_ARGS:-} --json "$OUT/gemm.json" 2>&1 \
    | tee "$OUT/gemm.log" || status=1
  python3 benchmarks/mma_peak.py --json "$OUT/mma_peak.json" 2>&1 \
    | tee "$OUT/mma_peak.log" || status=1
fi
if want sgemm; then
  python3 benchmarks/sgemm.py ${SGEMM_ARGS:-} --json "$OUT/sgemm.json" 2>&1 \
    | tee "$OUT/sgemm.log" || status=1
fi
if want matmuls; then
  python3 benchmarks/matmuls.py ${MATMULS_ARGS:-} --json "$OUT/matmuls.json" 2>&1 \
    | tee "$OUT/matmuls.log" || status=1
fi
if want attention; then
  python3 benchmarks/attention.py ${ATTENTION_ARGS:-} --json "$OUT/attention.json" 2>&1 \
    | tee "$OUT/attention.log" || status=1
fi
if want hopper; then
  python3 -m moye.examples.hopper_gemm 2>&1 | tee "$OUT/hopper.log" || status=1
  python3 benchmarks/hopper_gemm.py ${HOPPER_ARGS:-} --json "$OUT/hopper_gemm.json" 2>&1 \
    | tee -a "$OUT/hopper.log" || status=1
fi
if want compile; then
  python3 benchmarks/compile_time.py ${COMPILE_ARGS:-} --json "$OUT/compile_time.json" 2>&1 \
    | tee "$OUT/compile_time.log" || status=1
fi
if [[ " ${stages[*]} " == *" attnops "* ]]; then
  {
    no_dlpack_addon
    fa4_path=$(dsl_peers attnops "flash-attn-4")
    PYTHONPATH=$fa4_path$PYTHONPATH python3 benchmarks/attention_ops.py ${ATTNOPS_ARGS:-} \
      --json "$OUT/attention_ops.json"
  } 2>&1 | tee "$OUT/attention_ops.log" || status=1
fi
if [[ " ${stages[*]} " == *" cutlass "* ]]; then
  {
    bash scripts/fetch_cutlass.sh unpack /tmp/cutlass &&
    "$CUDA_HOME/bin/nvcc" -O3 -std=c++17 -arch=sm_90a -I/tmp/cutlass/include \
      benchmarks/cutlass_sm80_gemm.cu -lcublas -o /tmp/cutlass_sm80_gemm &&
    /tmp/cutlass_sm80_gemm ${CUTLASS_ARGS:-} > "$OUT/cutlass_sm80.json"
  } 2>&1 | tee "$OUT/cutlass.log" || status=1
fi
if [[ " ${stages[*]} " == *" cutedsl "* ]]; then
  {
    bash scripts/fetch_cute_dsl.sh unpack /tmp/cute_dsl &&
    PYTHONPATH=/tmp/cute_dsl/nvidia_cutlass_dsl/dsl_packages:/tmp/cute_dsl:$PYTHONPATH \
      python3 benchmarks/cute_dsl_gemm.py ${CUTE_DSL_ARGS:-} --json "$OUT/cute_dsl_h100.json"
  } 2>&1 | tee "$OUT/cute_dsl.log" || status=1
fi
if [[ " ${stages[*]} " == *" rowwise "* ]]; then
  {
    no_dlpack_addon
    quack_path=$(dsl_peers rowwise "QuACK")
    name=${ROWWISE_NAME:-rowwise}
    PYTHONPATH=$quack_path$PYTHONPATH python3 benchmarks/rowwise.py ${ROWWISE_ARGS:-} \
      --json "$OUT/$name.json"
    rc=$?                               # the plot also shows a run that failed a check
    [[ -s $OUT/$name.json ]] && python3 benchmarks/plot_rowwise.py "$OUT/$name.json" \
      -o "$OUT/$name.png"
    exit $rc
  } 2>&1 | tee "$OUT/${ROWWISE_NAME:-rowwise}.log" || status=1
fi
if [[ " ${stages[*]} " == *" rowwise_ab "* ]]; then
  {
    [[ -f ${AB_TREE:-}/benchmarks/rowwise.py ]] || {
      echo "rowwise_ab: AB_TREE=${AB_TREE:-} is no tree from scripts/ab_tree.sh (carried?)"
      exit 1
    }
    rc=0
    for round in $(seq "${AB_ROUNDS:-2}"); do
      python3 benchmarks/rowwise.py --contenders moye --no-host ${ROWWISE_ARGS:-} \
        --json "$OUT/ab_here_$round.json" || rc=1
      # the reference tree's rowwise.py puts its own moye first on sys.path
      python3 "$AB_TREE/benchmarks/rowwise.py" --contenders moye --no-host ${ROWWISE_ARGS:-} \
        --json "$OUT/ab_ref_$round.json" || rc=1
    done
    python3 benchmarks/rowwise.py --compare "$OUT"/ab_here_*.json "$OUT"/ab_ref_*.json
    exit $rc
  } 2>&1 | tee "$OUT/rowwise_ab.log" || status=1
fi
if [[ " ${stages[*]} " == *" shapes "* ]]; then
  {
    name=${SHAPES_NAME:-matmul_shapes}
    python3 benchmarks/matmul_shapes.py ${SHAPES_ARGS:-} --json "$OUT/$name.json"
    rc=$?                               # the plot also shows a run that failed a check
    [[ -s $OUT/$name.json ]] && python3 benchmarks/plot_matmul_shapes.py "$OUT/$name.json" \
      -o "$OUT/$name.png"
    exit $rc
  } 2>&1 | tee "$OUT/${SHAPES_NAME:-matmul_shapes}.log" || status=1
fi
if [[ " ${stages[*]} " == *" calltiming "* ]]; then
  python3 benchmarks/matmul_call_timing.py ${CALLTIMING_ARGS:-} \
    --json "$OUT/matmul_call_timing.json" 2>&1 | tee "$OUT/matmul_call_timing.log" || status=1
fi
if [[ " ${stages[*]} " == *" kerneltimes "* ]]; then
  python3 benchmarks/matmul_kernel_times.py ${KERNELTIMES_ARGS:-} \
    --json "$OUT/matmul_kernel_times.json" 2>&1 | tee "$OUT/matmul_kernel_times.log" || status=1
fi
echo "gpu_check: exit $status" | tee -a "$OUT/device.log"
exit $status

#!/usr/bin/env bash
# QuACK (PyPI quack-kernels: Tri Dao's lab's CuTe DSL kernels for softmax,
# RMSNorm, LayerNorm and cross-entropy, pure Python) and FlashAttention-4 (PyPI
# flash-attn-4, pre-release 4.0.0b36: flash_attn.cute, CuTe DSL kernels with
# sm_90 forward and backward, pure Python, on QuACK) for the GPU machine (no
# network), for the side-by-side runs of benchmarks/rowwise.py and
# benchmarks/attention_ops.py (gpu_check.sh stages 'rowwise' and 'attnops').
# Nothing here is committed: the folder it writes, .cute_dsl3/, is gitignored
# (/.cute_dsl*/), since the wheels are not ours to commit.
#
#   scripts/fetch_quack.sh [pack]       download and check the wheels (here, with network)
#   scripts/fetch_quack.sh unpack DIR   install them into DIR (the device; pip, no index)
#
# QuACK runs on NVIDIA's CuTe DSL, which scripts/fetch_cute_dsl.sh packs as
# .cute_dsl1/ and .cute_dsl2/ (nvidia-cutlass-dsl 4.7.0, CUDA 13 flavour). The
# versions match: quack-kernels 0.6.5 is Dao-AILab/quack's main at the commit
# "Update to cutlass-dsl 4.7.0" and after (its pyproject pins
# nvidia-cutlass-dsl==4.7.0; the wheel's metadata says >=4.7; only the version
# string differs from that tree).
#
# What quack-kernels 0.6.5 requires, and where each comes from on the device:
#   nvidia-cutlass-dsl[cu13] 4.7.0  carried: .cute_dsl1 + .cute_dsl2 (fetch_cute_dsl.sh)
#   flash-attn-4 4.0.0b36           carried here; it asks quack-kernels >= 0.5.3,
#                                   nvidia-cutlass-dsl >= 4.6.2, apache-tvm-ffi
#                                   >=0.1.11,<0.2, torch-c-dlpack-ext and einops, as above
#   apache-tvm-ffi >=0.1.6,<0.2     carried here: 0.1.15.post2 (cp312 manylinux_2_28,
#                                   3.3 MB; needs typing-extensions, on the device). The
#                                   DSL's kernels are compiled with --enable-tvm-ffi and
#                                   called through it
#   torch, einops                   on the device
#   torch-c-dlpack-ext              not carried: its prebuilt addons stop at torch 2.9,
#                                   and tvm-ffi skips it where torch itself has the DLPack
#                                   exchange API (torch >= 2.10); where it does not,
#                                   gpu_check.sh sets TVM_FFI_DISABLE_TORCH_C_DLPACK=1 so
#                                   that tvm-ffi does not JIT-build the addon there
# Seen on the H100 machine (2026-11-24): Python 3.12.3, torch 2.11.0+cu130 with
# torch.Tensor.__dlpack_c_exchange_api__, einops 0.8.2, typing_extensions 4.16.0,
# cuda-bindings 13.3.1, matplotlib 3.11.2 (for plot_rowwise.py).
# So one folder, .cute_dsl3/ (~4 MB), holds the two wheels; carry it with the
# DSL's parts (e.g. call 1: .cute_dsl1; call 2: .cute_dsl2 .cute_dsl3 and .whl).
# On the device: `unpack DIR` pip-installs them into DIR (--no-index --no-deps
# --target), then PYTHONPATH=<DSL's dsl_packages>:<DSL dir>:DIR (gpu_check.sh does
# all of this in its 'rowwise' stage).
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=.cute_dsl3
QUACK=quack_kernels-0.6.5-py3-none-any.whl
FA4=flash_attn_4-4.0.0b36-py3-none-any.whl
TVM_FFI=apache_tvm_ffi-0.1.15.post2-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl
declare -A SHA256=(       # as downloaded from PyPI, 2026-11
  [$QUACK]=df1ddd31366c82eb9692fe087c671209189dcbde53c909c81a865d4ee66b158d
  [$FA4]=b6f0e2a264334cb1b59289ddd309c7c76d3a8d184268316b43403e51ba8795d2
  [$TVM_FFI]=059eed9bfc94bcd41650fb8eefde74040a1bc7e7b1a6f0a8ff897b02b118875b
)

check() {   # every wheel here, against its sha256
  local w
  for w in "$QUACK" "$FA4" "$TVM_FFI"; do
    [[ -s $DEST/$w ]] || { echo "fetch_quack: $DEST/$w is missing" >&2; return 1; }
    [[ $(sha256sum "$DEST/$w" | cut -d' ' -f1) == "${SHA256[$w]}" ]] \
      || { echo "fetch_quack: $DEST/$w does not match its sha256" >&2; return 1; }
  done
}

if [[ ${1:-pack} == unpack ]]; then
  dir=${2:?usage: fetch_quack.sh unpack DIR}
  check
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$dir" "$DEST/$QUACK" "$DEST/$FA4" "$DEST/$TVM_FFI"
  echo "fetch_quack: quack-kernels, flash-attn-4 and apache-tvm-ffi in $dir"
  exit
fi
[[ ${1:-pack} == pack ]] || { echo "usage: $0 [pack | unpack DIR]" >&2; exit 2; }

mkdir -p "$DEST"
rm -f "$DEST"/*.whl                 # one version of each, or pip --target gets two
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$DEST" \
  "quack-kernels==0.6.5" "flash-attn-4==4.0.0b36" "apache-tvm-ffi==0.1.15.post2"
check
ls -l "$DEST"
du -sh --apparent-size "$DEST"

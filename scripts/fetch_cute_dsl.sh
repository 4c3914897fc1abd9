#!/usr/bin/env bash
# CuTe DSL (PyPI nvidia-cutlass-dsl, NVIDIA's own Python DSL for CuTe) and its
# Hopper persistent and Ampere tensor-op dense GEMM examples, packed for the GPU
# machine (no network) for the side-by-side runs of benchmarks/cute_dsl_gemm.py
# (gpu_check.sh stage 'cutedsl'). Nothing here is committed: every path it writes is gitignored
# (/.cute_dsl*/), since the wheels and NVIDIA's example are not ours to commit.
#
#   scripts/fetch_cute_dsl.sh [pack]     download, check, repack (here, with network)
#   scripts/fetch_cute_dsl.sh unpack DIR [--partial]
#                                        unpack the carried parts into DIR (the device);
#                                        --partial: a missing part is no error
#
# Version: nvidia-cutlass-dsl 4.7.0 with the example at the cutlass repo's tag
# v4.7.0 (commit dcf215af68a2d08d305076c152a06f201728cd53), the newest release
# for which both exist here. (PyPI has 4.8.1, but the cutlass snapshot
# available to us stops between v4.7.0 and v4.8, so a 4.8.1 wheel could not be
# matched to its example; the example's file is unchanged from v4.5.0 to that
# snapshot.) The CUDA 13 flavour is used: the libs-cu13 wheel (the [cu13] extra)
# instead of libs-cu12, which the bare package requires; the DSL picks the cu13
# build when the driver reports CUDA >= 13 (the device: driver 580, CUDA 13.0).
#
# Wheels (cp312, manylinux_2_28 x86_64, no dependencies: the device has numpy,
# cuda-bindings, typing-extensions; protobuf and nvidia-cuda-nvdisasm, also
# declared, are only used by the DSL's profiler and SASS dumps):
#   nvidia-cutlass-dsl, nvidia-cutlass-dsl-libs-base, nvidia-cutlass-dsl-libs-core,
#   nvidia-cutlass-dsl-libs-cu13  (the last is 88 MB: over one device call's 64 MiB)
# They are not installed with pip on the device: their files are extracted here
# (as pip --target would lay them out) and repacked with xz (x86 BCJ filter +
# LZMA2 -9e) into two parts, each carried as one gitignored folder:
#   .cute_dsl1/cute_dsl-part1.tar.xz  the DSL's compiler (_cutlass_ir.cu13...so, 181 MB)
#   .cute_dsl2/cute_dsl-part2.tar.xz  everything else (the cu13 runtime library, Python)
#   .cute_dsl2/examples/              the example file(s) and SOURCE.txt (where from)
# `unpack DIR` extracts both into DIR; then put DIR/nvidia_cutlass_dsl/dsl_packages
# and DIR on PYTHONPATH (a .pth file is not read from PYTHONPATH).
#
# The examples: examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/
# dense_gemm_persistent.py (and its non-persistent sibling dense_gemm.py), and
# examples/python/CuTeDSL/cute/ampere/kernel/dense_gemm/tensorop_gemm.py (the
# cp.async + ldmatrix + mma.sync GEMM), at tag v4.7.0 of
# https://github.com/NVIDIA/cutlass. This script takes them from
# CUTLASS_REPO (a git clone or bare mirror holding that tag; default: the mirror
# at /work/.mirror/NVIDIA+cutlass/repo, if present), else downloads them with
# curl from raw.githubusercontent.com, else reuses .cute_dsl/src/ if the files
# are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

DSL_VERSION=4.7.0
TAG=v4.7.0
TAG_COMMIT=dcf215af68a2d08d305076c152a06f201728cd53
EX_ROOT=examples/python/CuTeDSL/cute
EXAMPLES=(dense_gemm_persistent.py dense_gemm.py tensorop_gemm.py)
declare -A EX_DIR=(     # each example's folder in the cutlass repo
  [dense_gemm_persistent.py]=$EX_ROOT/hopper/kernel/dense_gemm
  [dense_gemm.py]=$EX_ROOT/hopper/kernel/dense_gemm
  [tensorop_gemm.py]=$EX_ROOT/ampere/kernel/dense_gemm
)
# sha256 of the example files at $TAG (checked after every fetch)
declare -A EX_SHA256=(
  [dense_gemm_persistent.py]=65088a1fd7655ed46ad54fecd08e1461a334fb38f1b2d1da7cf252e465afc130
  [dense_gemm.py]=bb7b76d893219757e2f3701abf1a7c8c819b9966e38aaed30a768596a55aca9f
  [tensorop_gemm.py]=ed7eca473c66a3a3ded741eb4ee30757b4b944d5d360e4023ad6be7ba225b21c
)
BIG=nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
PART1=.cute_dsl1/cute_dsl-part1.tar.xz
PART2=.cute_dsl2/cute_dsl-part2.tar.xz
LIMIT=$((60 * 1024 * 1024))          # each part well inside one call's 64 MiB

unpack() {   # DIR [--partial]: extract the carried parts that are here into DIR
  local dest=$1 partial=${2:-} part missing=()
  mkdir -p "$dest"
  for part in "$PART1" "$PART2"; do
    if [[ ! -s $part ]]; then
      missing+=("$part")
      continue
    fi
    local stamp="$dest/.unpacked-$(basename "$part")-$(stat -c %s "$part")"
    if [[ ! -f $stamp ]]; then
      python3 - "$part" "$dest" <<'EOF' || return 1
import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz") as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:                       # a Python without extraction filters
        t.extractall(sys.argv[2])
EOF
      touch "$stamp"
    fi
    echo "fetch_cute_dsl: $part unpacked in $dest"
  done
  if (( ${#missing[@]} )); then
    echo "fetch_cute_dsl: not here: ${missing[*]} (carry its folder in this call, or in the" \
         "call just before on the same warm machine)" >&2
    [[ $partial == --partial ]] && return 0
    return 1
  fi
  test -f "$dest/$BIG" && test -f "$dest/nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so"
  echo "fetch_cute_dsl: nvidia-cutlass-dsl in $dest ($(du -sh "$dest" | cut -f1));" \
       "PYTHONPATH=$dest/nvidia_cutlass_dsl/dsl_packages:$dest"
}

if [[ ${1:-pack} == unpack ]]; then
  unpack "${2:?usage: fetch_cute_dsl.sh unpack DIR [--partial]}" "${3:-}"
  exit
fi
[[ ${1:-pack} == pack ]] || { echo "usage: $0 [pack | unpack DIR]" >&2; exit 2; }

stage=.cute_dsl
mkdir -p "$stage/wheels" "$stage/src" .cute_dsl1 .cute_dsl2/examples

# 1. the wheels
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$stage/wheels" \
  "nvidia-cutlass-dsl==$DSL_VERSION" "nvidia-cutlass-dsl-libs-base==$DSL_VERSION" \
  "nvidia-cutlass-dsl-libs-core==$DSL_VERSION" "nvidia-cutlass-dsl-libs-cu13==$DSL_VERSION"
ls -l "$stage/wheels"

# 2. the example files at the tag
repo=${CUTLASS_REPO:-/work/.mirror/NVIDIA+cutlass/repo}
for f in "${EXAMPLES[@]}"; do
  out=$stage/src/$f
  dir=${EX_DIR[$f]}
  if git -C "$repo" rev-parse -q --verify "$TAG^{commit}" >/dev/null 2>&1; then
    [[ $(git -C "$repo" rev-parse "$TAG^{commit}") == "$TAG_COMMIT" ]] \
      || { echo "fetch_cute_dsl: $TAG in $repo is not $TAG_COMMIT" >&2; exit 1; }
    git -C "$repo" show "$TAG:$dir/$f" >"$out.part" && mv "$out.part" "$out"
    from="git show $TAG:$dir/$f in a clone of https://github.com/NVIDIA/cutlass"
  elif curl -fsSL "https://raw.githubusercontent.com/NVIDIA/cutlass/$TAG/$dir/$f" \
         -o "$out.part" 2>/dev/null; then
    mv "$out.part" "$out"
    from="https://raw.githubusercontent.com/NVIDIA/cutlass/$TAG/$dir/$f"
  elif [[ -s $out ]]; then
    from="kept from an earlier run ($out)"
  else
    rm -f "$out.part"
    echo "fetch_cute_dsl: cannot get $dir/$f at $TAG: set CUTLASS_REPO to a cutlass clone" >&2
    exit 1
  fi
  echo "$(sha256sum "$out" | cut -d' ' -f1)  $f" | tee "$stage/src/$f.sha256"
  [[ $(cut -d' ' -f1 "$stage/src/$f.sha256") == "${EX_SHA256[$f]}" ]] \
    || { echo "fetch_cute_dsl: $f does not match its sha256 at $TAG" >&2; exit 1; }
  cp "$out" .cute_dsl2/examples/
  echo "$f: $from" >>"$stage/src/SOURCE.txt.part"
done
{
  echo "NVIDIA CUTLASS, https://github.com/NVIDIA/cutlass, tag $TAG (commit $TAG_COMMIT),"
  echo "directory $EX_ROOT (BSD-3-Clause, see the files' headers)."
  echo "For nvidia-cutlass-dsl==$DSL_VERSION (PyPI), CUDA 13 flavour (libs-cu13)."
  cat "$stage/src/SOURCE.txt.part"
  (cd .cute_dsl2/examples && sha256sum "${EXAMPLES[@]}")
} >.cute_dsl2/examples/SOURCE.txt
rm -f "$stage/src/SOURCE.txt.part"

# 3. extract the wheels as pip --target would, then repack in two parts
site=$stage/site
rm -rf "$site" && mkdir -p "$site"
for w in "$stage"/wheels/*-"$DSL_VERSION"-*.whl; do
  python3 -m zipfile -e "$w" "$site"
done
test -f "$site/$BIG"
chmod 755 $(find "$site" -name '*.so*')
xzpack() {   # OUT, then paths under $site (tar options first)
  local out=$1; shift
  tar -C "$site" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$@" \
    | xz --x86 --lzma2=preset=9e,dict=192MiB -T1 >"$out.part"
  mv "$out.part" "$out"
}
# the parts are rebuilt only when the extracted files change
sums=$(cd "$site" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
if [[ ! -s $PART1 || ! -s $PART2 || $(cat .cute_dsl2/site.sum 2>/dev/null) != "$sums" ]]; then
  rm -f .cute_dsl1/*.tar.xz .cute_dsl2/*.tar.xz
  xzpack "$PART1" "$BIG" & p1=$!                # ~4 min, ~43 MiB
  xzpack "$PART2" --exclude="./$BIG" . & p2=$!  # ~2 min, ~14 MiB
  wait $p1; wait $p2                           # each fails the script (set -e)
  echo "$sums" >.cute_dsl2/site.sum
fi
for part in "$PART1" "$PART2"; do
  size=$(stat -c %s "$part")
  (( size < LIMIT )) || { echo "fetch_cute_dsl: $part is $size bytes, over $LIMIT" >&2; exit 1; }
done
ls -l .cute_dsl1 .cute_dsl2 .cute_dsl2/examples
du -sh --apparent-size .cute_dsl1 .cute_dsl2

#!/usr/bin/env bash
# NVIDIA CUTLASS's headers (include/, tag v4.7.0) packed for the GPU machine (no network),
# for benchmarks/cutlass_sm80_gemm.cu (gpu_check.sh stage 'cutlass'). Nothing here is
# committed: .cutlass/ is gitignored, since CUTLASS is not ours to commit.
#
#   scripts/fetch_cutlass.sh [pack]       from CUTLASS_REPO (a git clone or bare mirror
#                                          holding the tag; default the mirror at
#                                          /work/.mirror/NVIDIA+cutlass/repo), else a
#                                          download of the tag's tarball from GitHub
#   scripts/fetch_cutlass.sh unpack DIR   (the device) DIR/include/{cutlass,cute}
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=v4.7.0
PACK=.cutlass/cutlass-include-$TAG.tar.xz
case "${1:-pack}" in
  pack)
    mkdir -p .cutlass
    repo=${CUTLASS_REPO:-/work/.mirror/NVIDIA+cutlass/repo}
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if git --git-dir="$repo" rev-parse -q --verify "$TAG^{commit}" >/dev/null 2>&1; then
      git --git-dir="$repo" archive "$TAG" include | tar -x -C "$tmp"
    else
      curl -fsSL "https://github.com/NVIDIA/cutlass/archive/refs/tags/$TAG.tar.gz" \
        | tar -xz -C "$tmp" --strip-components=1 "cutlass-${TAG#v}/include"
    fi
    tar -C "$tmp" -cJf "$PACK" include
    echo "fetch_cutlass: $PACK ($(du -h "$PACK" | cut -f1))"
    ;;
  unpack)
    dir=${2:?unpack needs a directory}
    mkdir -p "$dir"
    tar -xJf "$PACK" -C "$dir"
    echo "fetch_cutlass: CUTLASS $TAG headers in $dir/include"
    ;;
  *)
    echo "usage: scripts/fetch_cutlass.sh [pack | unpack DIR]" >&2
    exit 2
    ;;
esac

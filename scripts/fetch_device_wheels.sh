#!/usr/bin/env bash
# What the GPU machine lacks (it has no network), for its Python 3.12, into .whl/
# (gitignored; carry it with the device tool: carry=[".whl"], 64 MiB at most).
#
# The nvidia-cuda-nvrtc wheel is 90 MB (two 105 MB builds of libnvrtc), too big
# to carry. Its two libraries that NVRTC needs, libnvrtc.so.13 and
# libnvrtc-builtins.so.13.0, travel instead as an xz tarball (~32 MB) laid out
# as in the wheel (nvidia/cu13/lib/...); gpu_check.sh unpacks it beside the
# installed wheels, where moye.backend.cuda.nvrtc finds it on sys.path.
set -euo pipefail
cd "$(dirname "$0")/.."
NVRTC=13.0.88
download() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "$@"
}
mkdir -p .whl
rm -f .whl/*.whl                    # one version of each, or pip --target gets two
download -d .whl "cuda-bindings==13.0.3" "cuda-pathfinder==1.9.0" "ml_dtypes==0.6.0" \
  "nvidia-cuda-runtime==13.0.96" "hypothesis==6.155.2" "sortedcontainers==2.4.0"
tarball=.whl/nvidia_cuda_nvrtc-$NVRTC-libs.tar.xz
if [[ ! -s $tarball ]]; then
  rm -f .whl/nvidia_cuda_nvrtc-*-libs.tar.xz
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  download -d "$tmp" "nvidia-cuda-nvrtc==$NVRTC"
  python3 - "$tmp"/nvidia_cuda_nvrtc-*.whl "$tarball.part" <<'EOF'
import io, sys, tarfile, zipfile
wheel, out = sys.argv[1], sys.argv[2]
keep = ("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cu13/lib/libnvrtc-builtins.so.13.0")
with zipfile.ZipFile(wheel) as z, tarfile.open(out, "w:xz", preset=6) as tar:
    names = [n for n in z.namelist() if n in keep or n.endswith((".dist-info/METADATA",
                                                                  ".dist-info/License.txt"))]
    assert all(k in names for k in keep), names
    for n in names:
        data = z.read(n)
        info = tarfile.TarInfo(n)
        info.size, info.mode = len(data), 0o755 if ".so" in n else 0o644
        tar.addfile(info, io.BytesIO(data))
EOF
  mv "$tarball.part" "$tarball"
fi
ls -l .whl
du -sh .whl

#!/usr/bin/env bash
# Wheels the GPU machine lacks (it has no network), for Python 3.12, into .whl/.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "cuda-bindings==13.0.3" "cuda-pathfinder==1.9.0" "ml_dtypes==0.6.0"
du -sh .whl

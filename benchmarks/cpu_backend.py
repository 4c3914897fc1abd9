"""The CPU backend's speed on the seeds' kernels (issue target: < 10 s each
on a 2-core machine).

    python benchmarks/cpu_backend.py [--json out.json]
"""
import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def colmajor(rng, shape, fill=None):
    a = np.asfortranarray(rng.standard_normal(shape).astype(np.float32))
    if fill is not None:
        a[...] = fill
    return a


def run(name, launch, M, N, K, rng):
    A, B, C = colmajor(rng, (M, K)), colmajor(rng, (N, K)), colmajor(rng, (M, N), np.nan)
    t0 = time.perf_counter()
    launch(A, B, C)
    seconds = time.perf_counter() - t0
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    err = float(np.linalg.norm(C - ref) / np.linalg.norm(ref))
    return {"kernel": name, "shape": f"{M}x{N}x{K}", "seconds": seconds, "rel_error": err}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    from moye.examples import matmul_smem, tiled_matmul
    rng = np.random.default_rng(0)
    rows = [run("matmul_smem (seed 002 GPU kernel)", matmul_smem.launch, 256, 256, 128, rng),
            run("tiled_matmul (seed 000, UniversalFMA)", tiled_matmul.launch, 256, 256, 128, rng)]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"{'kernel':42} {'shape':>12} {'seconds':>8} {'rel. error':>11}")
    for r in rows:
        print(f"{r['kernel']:42} {r['shape']:>12} {r['seconds']:8.2f} {r['rel_error']:11.1e}")
    print(f"machine: {machine}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

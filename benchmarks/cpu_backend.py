"""The CPU backend's speed on the seeds' kernels and the tensor-core ones
(issue target: < 10 s each on a 2-core machine).

    python benchmarks/cpu_backend.py [--json out.json]

Each kernel runs once with its output poisoned (tracing included: "first"),
then three more times ("run": the median); the error is the first run's,
relative to float64 in the Frobenius norm.
"""
import argparse
import json
import os
import platform
import statistics
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


def bench(name, shape, launch, out, ref):
    """Time `launch()`, which writes `out`, and compare `out` with `ref`."""
    out[...] = np.nan
    t0 = time.perf_counter()
    launch()
    first = time.perf_counter() - t0
    out64 = out.astype(np.float64)
    err = float(np.linalg.norm(out64 - ref) / np.linalg.norm(ref))
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        launch()
        runs.append(time.perf_counter() - t0)
    return {"kernel": name, "shape": shape, "first_seconds": first,
            "seconds": statistics.median(runs), "rel_error": err}


def seed_matmul(name, launch, M, N, K, rng):
    """C = A * B^T, float32, column-major as in the seeds."""
    A, B, C = colmajor(rng, (M, K)), colmajor(rng, (N, K)), colmajor(rng, (M, N), np.nan)
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    return bench(name, f"{M}x{N}x{K}", lambda: launch(A, B, C), C, ref)


def tensor_core_matmul(variant, M, N, K, rng):
    """C = A * B^T with A, B K-major in the variant's type, C column-major float32."""
    from moye.examples import tensor_core_matmul as tc
    dtype = tc.VARIANTS[variant][2]
    A = rng.standard_normal((M, K)).astype(dtype)
    B = rng.standard_normal((N, K)).astype(dtype)
    C = colmajor(rng, (M, N), np.nan)
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    return bench(f"tensor_core_matmul {variant} ({dtype})", f"{M}x{N}x{K}",
                 lambda: tc.launch(variant, A, B, C), C, ref)


def production_gemm(M, N, K, rng, alpha=0.5, beta=-1.5):
    """D = alpha * A @ B.T + beta * C, fp16, A and B K-major (gemm.launch
    takes torch tensors, so the kernel is launched as it does)."""
    from moye.examples import gemm
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((N, K)).astype(np.float16)
    C = rng.standard_normal((M, N)).astype(np.float16)
    D = np.full((M, N), np.nan, np.float16)
    ref = alpha * (A.astype(np.float64) @ B.astype(np.float64).T) + beta * C.astype(np.float64)

    def launch():
        gemm.launch(A, B, D, C, alpha=alpha, beta=beta)
    return bench("gemm (fp16, K-major, alpha 0.5, beta -1.5)", f"{M}x{N}x{K}", launch, D, ref)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    from moye.examples import matmul_smem, tiled_matmul
    rng = np.random.default_rng(0)
    rows = [seed_matmul("matmul_smem (seed 002 GPU kernel)", matmul_smem.launch,
                        256, 256, 128, rng),
            seed_matmul("tiled_matmul (seed 000, UniversalFMA)", tiled_matmul.launch,
                        256, 256, 128, rng),
            tensor_core_matmul("tf32", 128, 128, 64, rng),
            tensor_core_matmul("ldmatrix", 128, 128, 64, rng),
            production_gemm(128, 128, 64, rng)]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"{'kernel':42} {'shape':>12} {'first s':>8} {'run s':>8} {'rel. error':>11}")
    for r in rows:
        print(f"{r['kernel']:42} {r['shape']:>12} {r['first_seconds']:8.2f} {r['seconds']:8.2f} "
              f"{r['rel_error']:11.1e}")
    print(f"machine: {machine}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

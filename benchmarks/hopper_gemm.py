"""The warp-specialized Hopper GEMM (moye/examples/hopper_gemm.py) against
cuBLAS (torch.mm) on the same data, in one run.

    python benchmarks/hopper_gemm.py [--shapes 8192x8192x8192,...] [--dtypes float16,bfloat16]
                                     [--json out.json]

C = A @ B.T, A (M, K) and B (N, K) row-major, fp16 or bf16 in and out, fp32
accumulation, random normal data. Every shape is checked first (C poisoned
with NaN, every element against a float64 product: ‖C − ref‖ / ‖ref‖), then
moye and torch are timed alternately with CUDA events (median of rounds,
L2 not flushed, as benchmarks/matmuls.py). Also the kernel's compile time,
cold and from the disk cache (each in a fresh process).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernels import alternate, median, warm_up  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 4096),
          (4000, 4000, 4000)]
TOL = {"float16": 2e-3, "bfloat16": 1e-2}

_COMPILE_SNIPPET = """
import time, torch
t0 = time.perf_counter()
from moye.examples import hopper_gemm as hg
A = torch.randn(256, 256, device="cuda").half(); C = torch.empty(256, 256, device="cuda").half()
hg.matmul(C, A, A)
torch.cuda.synchronize()
print(time.perf_counter() - t0)
"""


def check(torch, hg, M, N, K, dt):
    A = torch.randn(M, K, device="cuda").to(dt)
    B = torch.randn(N, K, device="cuda").to(dt)
    C = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
    hg.matmul(C, A, B)
    torch.cuda.synchronize()
    ref = A.double() @ B.double().T
    return A, B, C, ((C.double() - ref).norm() / ref.norm()).item()


def bench_shape(torch, hg, shape, dtype, rounds=5):
    M, N, K = shape
    dt = getattr(torch, dtype)
    A, B, C, err = check(torch, hg, M, N, K, dt)
    grid, cluster, args = hg.launch_args(C, A, B)
    out = torch.empty(M, N, device="cuda", dtype=dt)
    flop = 2.0 * M * N * K
    iters = max(10, min(200, int(2e13 / flop)))
    times = alternate(torch, hg.launch_function(grid, cluster, args),
                      lambda: torch.mm(A, B.T, out=out), iters, rounds)
    ms_ours, ms_theirs = map(median, times)
    return {"shape": list(shape), "dtype": dtype, "rel_error": err, "tolerance": TOL[dtype],
            "moye_ms": ms_ours, "cublas_ms": ms_theirs,
            "moye_tflops": flop / ms_ours / 1e9, "cublas_tflops": flop / ms_theirs / 1e9,
            "ratio": ms_theirs / ms_ours, "grid": grid, "cluster": list(cluster or (1, 1, 1))}


def bench_compile():
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as cache:
        env["MOYE_CACHE_DIR"] = cache
        run = lambda: float(subprocess.check_output(                      # noqa: E731
            [sys.executable, "-c", _COMPILE_SNIPPET], env=env).split()[-1])
        cold = run()
        warm = [run() for _ in range(2)]
    return {"cold_s": cold, "disk_cache_s": min(warm)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    p.add_argument("--dtypes", default="float16,bfloat16")
    p.add_argument("--json")
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args(argv)
    import torch
    from moye.examples import hopper_gemm as hg
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    warm_up(torch)
    results = {"device": torch.cuda.get_device_name(), "rows": []}
    print(f"{'shape':>18} {'dtype':>9} {'rel err':>9} {'moye TF/s':>10} {'cuBLAS TF/s':>12} "
          f"{'ratio':>6}")
    ok = True
    for dtype in args.dtypes.split(","):
        for shape in shapes:
            r = bench_shape(torch, hg, shape, dtype)
            results["rows"].append(r)
            good = r["rel_error"] < r["tolerance"]
            ok &= good
            print(f"{'x'.join(map(str, shape)):>18} {dtype:>9} {r['rel_error']:9.2e} "
                  f"{r['moye_tflops']:10.1f} {r['cublas_tflops']:12.1f} {r['ratio']:6.3f}"
                  + ("" if good else "  WRONG"), flush=True)
    if not args.no_compile:
        results["compile"] = bench_compile()
        print(f"compile: cold {results['compile']['cold_s']:.2f} s, from the disk cache "
              f"{results['compile']['disk_cache_s']:.3f} s (import, trace, load, first run)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

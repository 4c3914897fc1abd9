"""Every matmul of the tensor-core issue (#7) against cuBLAS (torch.mm) in the
same run, on the same random normal data: TFLOP/s at 4096^3, 8192^3 and three
non-square shapes.

    python benchmarks/matmuls.py [--json out.json] [--shapes M,N,K ...] [--only KERNEL ...]

C = A * B^T with A (M, K), B (N, K), C (M, N). Kernels (--only names), each
against its cuBLAS peer on the kernel's own tensors:

  async_double  seed 001's double-buffered SIMT kernel (examples/async_matmul.py
                "double"), float32, A, B, C column-major       vs cuBLAS float32, TF32 off
  sgemm         the tuned SIMT SGEMM (examples/sgemm.py), the same tensors
                (benchmarks/sgemm.py's Workload)                vs cuBLAS float32, TF32 off
  tf32_double   examples/tensor_core_double_buffer.py, TF32 mma.sync, A column-
                major, B row-major, C column-major              vs cuBLAS with TF32 on
  tf32          examples/tensor_core_matmul.py "tf32", A and B row-major,
                C column-major                                  vs cuBLAS with TF32 on
  gemm_fp16     the production GEMM (examples/gemm.py), K-major A and B,
  gemm_bf16     row-major D, fp32 accumulation                  vs cuBLAS float16 / bfloat16

All kernels see the same values: float32 normal data from one seed per shape,
rearranged into each kernel's layouts and rounded to fp16/bf16 for the GEMM.
Each moye output is NaN-poisoned, computed and checked before it is timed:
relative Frobenius error against a float64 product on the GPU (float32
cuBLAS with TF32 off where float64 would not fit), tolerance by precision.
A failed check is reported and its row left out; the script then exits 1.
Times are medians of CUDA-event timings after a 2 s warm-up, the number of
runs sized to about 1 s per figure (5 to 200; the seed kernel at 8192^3
takes ~30 ms a call). Each kernel's static arguments (layouts, tiled copies
and MMAs) are built once, as benchmarks/sgemm.py does, so the Python time
of building them (0.1-0.4 ms a call) is not counted. cuBLAS computes the
same product both ways round (C = A B^T into a row-major C, and C^T = B A^T,
i.e. a column-major C) and the faster counts.
"""
import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import cuda_time, warm_up  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 4096),
          (2048, 8192, 4096)]

# name: (precision, what it is, its cuBLAS peer, the block tile that M, N, K must divide)
KERNELS = {
    "async_double": ("float32", "seed 001 double-buffered SIMT (async_matmul double)",
                     "cuBLAS float32 (TF32 off)", (128, 128, 8)),
    "sgemm": ("float32", "tuned SIMT SGEMM (sgemm.py)", "cuBLAS float32 (TF32 off)",
              (128, 128, 32)),
    "tf32_double": ("tf32", "double-buffered TF32 (tensor_core_double_buffer.py)",
                    "cuBLAS TF32", (128, 128, 16)),
    "tf32": ("tf32", "minimal TF32 (tensor_core_matmul tf32)", "cuBLAS TF32", (1, 1, 4)),
    "gemm_fp16": ("float16", "production GEMM (gemm.py)", "cuBLAS float16", (1, 1, 8)),
    "gemm_bf16": ("bfloat16", "production GEMM (gemm.py)", "cuBLAS bfloat16", (1, 1, 8)),
}
# relative Frobenius error allowed: float32 accumulation over K; TF32 inputs (10-bit
# mantissas); the rounding of D to fp16 / bf16
TOLERANCE = {"float32": 1e-5, "tf32": 2e-3, "float16": 2e-3, "bfloat16": 1e-2}
TIMED_SECONDS = 1.0


def parse_shape(text):
    """(M, N, K) from 'M,N,K' (or 'MxNxK')."""
    parts = text.replace("x", ",").split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected M,N,K, e.g. 4096,4096,4096")
    return tuple(int(p) for p in parts)


def shape_label(M, N, K):
    """'4096^3' for a cube, else 'MxNxK'."""
    return f"{M}^3" if M == N == K else f"{M}x{N}x{K}"


def unsupported(name, shape):
    """Why `name` cannot run `shape` (its tile does not divide it), or None."""
    tile = KERNELS[name][3]
    if any(n % t for n, t in zip(shape, tile)):
        return (f"{name}: {shape_label(*shape)} is not a multiple of "
                f"{'x'.join(map(str, tile))} (M x N x K)")
    return None


def iterations(estimate_ms, seconds=TIMED_SECONDS):
    """Timed runs for a call of `estimate_ms`: about `seconds` in all, 5 to 200."""
    return max(5, min(200, round(seconds * 1e3 / max(estimate_ms, 1e-3))))


def timed(torch, fn):
    """Median milliseconds of fn(), iterations sized by a first estimate."""
    estimate = cuda_time(torch, fn, iters=3, warmup=1)
    return cuda_time(torch, fn, iters=iterations(estimate), warmup=2)


def set_tf32(torch, on):
    """cuBLAS float32 matmuls with TF32 tensor cores on or off."""
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


def reference(torch, A, B):
    """(A @ B.T, its type): float64 on the GPU where it fits, else float32 with
    TF32 off."""
    (M, K), N = A.shape, B.shape[0]
    need = 8 * (M * K + N * K + 3 * M * N)          # operands, product, a difference
    if need < 0.8 * torch.cuda.mem_get_info()[0]:
        return A.double() @ B.double().t(), "float64"
    tf32 = torch.backends.cuda.matmul.allow_tf32
    set_tf32(torch, False)
    ref = A.float() @ B.float().t()
    set_tf32(torch, tf32)
    return ref, "float32"


def operands(torch, M, N, K):
    """A (M, K) and B (N, K) column-major float32, random normal, seed 0: the
    values benchmarks/sgemm.py's Workload makes."""
    from moye.examples._common import column_major
    torch.manual_seed(0)
    return column_major(torch, (M, K), torch.float32), column_major(torch, (N, K), torch.float32)


class Problem:
    """One kernel's operands and output on one shape, their reference product
    and cuBLAS's times on the same operands: what benchmarks/sgemm.py's
    Workload holds, for any layout and type."""

    def __init__(self, torch, A, B, C):
        (M, K), N = A.shape, B.shape[0]
        self.torch, self.A, self.B, self.C, self.shape = torch, A, B, C, (M, N, K)
        self.ref, self.reference = reference(torch, A, B)
        self.ref_norm = self.ref.norm().item()
        rows = torch.empty(M, N, device="cuda", dtype=C.dtype)
        cols = torch.empty(N, M, device="cuda", dtype=C.dtype)   # C^T row-major = C col-major
        runs = {"col": (lambda: torch.mm(B, A.t(), out=cols), cols.t()),
                "row": (lambda: torch.mm(A, B.t(), out=rows), rows)}
        self.cublas = {way: timed(torch, run) for way, (run, _) in runs.items()}
        run, out = runs[min(self.cublas, key=self.cublas.get)]
        run()
        self.cublas_error = self.error(out)

    def error(self, C):
        return (C.to(self.ref.dtype) - self.ref).norm().item() / self.ref_norm


# Each setup returns (problem, call): the tensors and a launch of the kernel on them with
# its static arguments built once, as the example's `launch` would build them.

def setup_async_double(torch, workload):
    from moye import size
    from moye.examples import async_matmul
    w = workload()
    M, N, _ = w.shape
    sA, copy_A, sB, copy_B, mma = async_matmul.make_config("double")
    kernel = async_matmul.double_buffer_kernel[(M // 128, N // 128), size(mma)]
    return w, lambda: kernel(w.A, sA, copy_A, w.B, sB, copy_B, w.C, mma)


def setup_sgemm(torch, workload):
    from moye.examples import sgemm
    w = workload()
    M, N, _ = w.shape
    args, threads = sgemm.make_config()
    kernel = sgemm.sgemm_kernel[(M // 128, N // 128), threads]
    return w, lambda: kernel(w.A, w.B, w.C, *args)


def setup_tf32_double(torch, A, B):
    from moye import size
    from moye.examples import tensor_core_double_buffer as tcdb
    from moye.examples._common import column_major
    (M, K), N = A.shape, B.shape[0]
    B = B.contiguous()                                          # K-major
    C = column_major(torch, (M, N), torch.float32, fill="empty")
    p = Problem(torch, A, B, C)
    sA, g2s_A, s2r_A, sB, g2s_B, s2r_B, mma = tcdb.make_config()
    kernel = tcdb.matmul_kernel[(M // 128, N // 128), size(mma)]
    return p, lambda: kernel(A, sA, g2s_A, s2r_A, B, sB, g2s_B, s2r_B, C, mma)


def setup_tf32(torch, A, B):
    from moye.examples import tensor_core_matmul as tcm
    from moye.examples._common import column_major
    (M, K), N = A.shape, B.shape[0]
    A, B = A.contiguous(), B.contiguous()                       # K-major
    C = column_major(torch, (M, N), torch.float32, fill="empty")
    p = Problem(torch, A, B, C)
    _, (bM, bN, bK) = tcm.tf32_config()
    args, _ = tcm.tf32_config(residue=bool(M % bM or N % bN or K % bK))
    kernel = tcm.tf32_kernel[(-(-M // bM), -(-N // bN)), 128]
    return p, lambda: kernel(A, B, C, *args)


def setup_gemm(torch, A, B, dtype):
    from moye.examples import gemm
    (M, K), N = A.shape, B.shape[0]
    dt = getattr(torch, dtype)
    A, B = A.contiguous().to(dt), B.contiguous().to(dt)        # K-major
    D = torch.empty(M, N, device="cuda", dtype=dt)
    p = Problem(torch, A, B, D)
    # gemm.launch's defaults for K-major operands and a row-major D, alpha 1, beta 0
    bM, bN, bK = gemm.TILE["bM"], gemm.TILE["bN"], gemm.TILE["bK"]
    element = {"float16": "Float16", "bfloat16": "BFloat16"}[dtype]
    args, threads = gemm.make_config(element, "K", "K",
                                     residue=bool(M % bM or N % bN or K % bK),
                                     d_vector=next(v for v in (8, 4, 2, 1) if N % v == 0))
    kernel = gemm.gemm_kernel[gemm.grid(M, N), threads]
    return p, lambda: kernel(A, B, D, D, 1.0, 0.0, *args)


def measure(torch, name, problem, call):
    """Poison, run and check the kernel, then time it; its row."""
    dtype, _, peer, _ = KERNELS[name]
    M, N, K = problem.shape
    problem.C.fill_(float("nan"))
    call()
    torch.cuda.synchronize()
    err = problem.error(problem.C)
    if not err < TOLERANCE[dtype]:          # also catches NaN
        raise AssertionError(f"{name} {shape_label(M, N, K)}: relative error {err:.2e} "
                             f"exceeds {TOLERANCE[dtype]:.0e} ({dtype})")
    ms = timed(torch, call)
    way = min(problem.cublas, key=problem.cublas.get)
    flop = 2.0 * M * N * K
    row = {"kernel": name, "dtype": dtype, "M": M, "N": N, "K": K,
           "moye_tflops": flop / ms / 1e9, "cublas_tflops": flop / problem.cublas[way] / 1e9,
           "rel_error": err, "cublas_rel_error": problem.cublas_error, "cublas": peer,
           "cublas_layout": {"col": "C column-major", "row": "C row-major"}[way],
           "reference": getattr(problem, "reference", "float64"),
           "moye_ms": ms, "cublas_ms": problem.cublas[way]}
    row["ratio"] = row["moye_tflops"] / row["cublas_tflops"]
    return row


def table(rows):
    """The rows as a Markdown table."""
    lines = ["| kernel | dtype | M x N x K | moye TFLOP/s | cuBLAS TFLOP/s | ratio | "
             "rel. error | cuBLAS error |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['dtype']} | {shape_label(r['M'], r['N'], r['K'])} | "
                     f"{r['moye_tflops']:.1f} | {r['cublas_tflops']:.1f} | {r['ratio']:.3f} | "
                     f"{r['rel_error']:.1e} | {r['cublas_rel_error']:.1e} |")
    return "\n".join(lines)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write the device and the rows here")
    parser.add_argument("--shapes", nargs="+", type=parse_shape, metavar="M,N,K",
                        help="default: " + " ".join(",".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--only", nargs="+", choices=list(KERNELS), metavar="KERNEL",
                        help=f"a subset of {', '.join(KERNELS)}")
    args = parser.parse_args(argv)
    args.shapes = args.shapes or SHAPES
    args.only = [k for k in KERNELS if k in (args.only or KERNELS)]
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch

    import sgemm as sgemm_bench
    device = torch.cuda.get_device_name()
    print(f"device: {device}", flush=True)
    warm_up(torch)
    rows, skipped, failed = [], [], []
    for shape in args.shapes:
        cache = {}

        def workload():         # the SIMT kernels' tensors and cuBLAS float32 times
            if "workload" not in cache:
                set_tf32(torch, False)
                cache["workload"] = sgemm_bench.Workload(torch, *shape)
            return cache["workload"]

        for name in args.only:
            why = unsupported(name, shape)
            if why:
                print(f"skipped {why}", flush=True)
                skipped.append(why)
                continue
            dtype = KERNELS[name][0]
            set_tf32(torch, dtype == "tf32")
            try:
                if name == "async_double":
                    problem, call = setup_async_double(torch, workload)
                elif name == "sgemm":
                    problem, call = setup_sgemm(torch, workload)
                else:
                    A, B = operands(torch, *shape)
                    if name == "tf32_double":
                        problem, call = setup_tf32_double(torch, A, B)
                    elif name == "tf32":
                        problem, call = setup_tf32(torch, A, B)
                    else:
                        problem, call = setup_gemm(torch, A, B, dtype)
                    del A, B
                row = measure(torch, name, problem, call)
            except Exception as e:      # a wrong result or a kernel that fails to build
                traceback.print_exc()
                what = str(e) if isinstance(e, AssertionError) else \
                    f"{name} {shape_label(*shape)}: {type(e).__name__}: {e}"
                print(f"FAILED {what}", flush=True)
                failed.append(what)
                continue
            finally:
                problem = call = None
                torch.cuda.empty_cache()
            rows.append(row)
            print(f"{name:12} {dtype:8} {shape_label(*shape):>16}  moye {row['moye_tflops']:7.1f} "
                  f"TFLOP/s  {row['cublas']} {row['cublas_tflops']:7.1f}  ratio "
                  f"{row['ratio']:.3f}  err {row['rel_error']:.1e} "
                  f"(cuBLAS {row['cublas_rel_error']:.1e})", flush=True)
        cache.clear()
        torch.cuda.empty_cache()
    set_tf32(torch, False)
    print(f"\ndevice: {device}\n{table(rows)}")
    for f in failed:
        print(f"FAILED {f}")
    if args.json:
        out = {"device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
               "date": time.strftime("%Y-%m-%d"), "kernels": {k: list(v[:3]) for k, v in
                                                              KERNELS.items()},
               "rows": rows, "skipped": skipped, "failed": failed}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

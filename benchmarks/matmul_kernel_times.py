"""The GPU time of every candidate config of moye.ops.matmul's kernels
(gemm_skinny where it applies, gemm_sm90 on Hopper, its swapped tiles of
few rows apart) beside cuBLAS, on the
same tensors: the launches alone, no host time (queued behind a GPU sleep),
each config's output checked against the float64 product first. What
benchmarks/matmul_shapes.py times through the public call, this splits by
kernel and config.

    python benchmarks/matmul_kernel_times.py [--shapes M,N,K ...] [--layouts nt nn]
        [--dtypes bfloat16 float16] [--reps 20] [--top 3] [--json out.json] [--device cuda]

Layouts as matmul_shapes.py's: nt is linear's weight (N, K), K-major; nn a
row-major (K, N). Microseconds a launch; TB/s count b's bytes alone (what a
few-row product streams). On the CPU (`--device cpu`, the tests' smoke run)
the kernels run on the CPU backend, the wall clock stands in for the GPU's,
and only gemm_skinny is timed (gemm_sm90's candidates take minutes there).
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from matmul_shapes import excess, mnk, operands  # noqa: E402

SHAPES = ((1, 4096, 4096), (1, 8192, 8192), (1, 4096, 14336), (4, 8192, 8192),
          (16, 8192, 8192))
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", type=mnk, default=list(SHAPES), metavar="M,N,K",
                   help="(default: %(default)s)")
    p.add_argument("--layouts", nargs="+", default=["nt", "nn"], choices=["nt", "nn"])
    p.add_argument("--dtypes", nargs="+", default=["bfloat16"], choices=sorted(EPS))
    p.add_argument("--reps", type=int, default=20, help="launches a figure (default 20)")
    p.add_argument("--top", type=int, default=3, help="configs printed a kernel (default 3)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.reps < 1 or a.top < 1:
        p.error("--reps, --top: at least 1")
    return a


def gpu_us(torch, run, reps, cuda):
    """Microseconds a run: `reps` runs between two CUDA events, queued behind
    a GPU sleep (so that their launches' host time is not timed), after one
    untimed run; on the CPU one run's wall clock."""
    run()
    if not cuda:
        start = time.perf_counter()
        run()
        return (time.perf_counter() - start) * 1e6
    torch.cuda.synchronize()
    torch.cuda._sleep(5_000_000)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def kernel_views(t, layout):
    """(a (1, M, K), b^T (1, N, K)) as the kernels take them: nt's b^T is w
    itself (K-major), nn's the transposed view of b (N-major)."""
    b3 = t["w"][None] if layout == "nt" else t["b"][None].transpose(1, 2)
    return t["a"][None], b3


def candidates(torch, a3, b3, out, cuda):
    """{kernel name: its candidate configs} for this product and device."""
    from moye.ops import gemm_skinny, gemm_sm90, rows
    (_, M, N), K = out.shape, a3.shape[2]
    sms = rows.multiprocessors(out) if cuda else gemm_sm90.SMS_H100
    found = {}
    if gemm_skinny.eligible(a3, b3):
        found["gemm_skinny"] = gemm_skinny.candidates(M, N, K, 1, sms, gemm_skinny.b_major(b3))
    if cuda and rows.hopper(out):
        mine = gemm_sm90.candidates(M, N, K, 1, sms, 2)
        found["gemm_sm90"] = [c for c in mine if not gemm_sm90.kernel_tile(c)[2]]
        found["gemm_sm90 swapped"] = [c for c in mine if gemm_sm90.kernel_tile(c)[2]]
    return found, sms


def time_shape(torch, args, layout, dtype, M, N, K):
    """The row of one product: each kernel's configs timed, best first."""
    from moye.ops import matmul_op
    cuda = args.device == "cuda"
    t = operands(torch, dtype, M, N, K, False, args.device)
    a3, b3 = kernel_views(t, layout)
    out = torch.empty(1, M, N, device=args.device, dtype=getattr(torch, dtype))
    prod = t["a"].double() @ t["b"].double()
    scale = t["a"].double().abs() @ t["b"].double().abs()
    backend = None if cuda else "cpu"
    found, sms = candidates(torch, a3, b3, out, cuda)
    row = {"layout": layout, "dtype": dtype, "M": M, "N": N, "K": K, "kernels": {}}
    for name, configs in found.items():
        if not configs:
            continue
        timed = []
        for cfg in configs:
            plan = matmul_op._launches(a3, b3, out, None, None, 1.0, None, cfg, sms, backend)

            def run(plan=plan):
                for kernel, dims, launch_args in plan:
                    kernel[dims](*launch_args, backend=backend)
            out.fill_(float("nan"))
            run()
            worst, over = excess(torch, out[0], prod, scale, EPS[dtype])
            if over:
                raise AssertionError(f"{name} {cfg} on {layout} {dtype} {M}x{N}x{K}: {over} "
                                     f"elements off the bound (worst {worst:.3g} of it)")
            timed.append({"config": list(cfg), "us": gpu_us(torch, run, args.reps, cuda)})
        row["kernels"][name] = sorted(timed, key=lambda c: c["us"])
    if cuda:
        a2, w = t["a"], t["w"]
        peer = (lambda: torch.mm(a2, w.T)) if layout == "nt" else (lambda: torch.mm(a2, t["b"]))
        row["cublas_us"] = gpu_us(torch, peer, args.reps, cuda)
    return row


def line(row, top):
    """A row as text: each kernel's best configs, cuBLAS, and TB/s of b."""
    nbytes = row["N"] * row["K"] * 2
    parts = [f"{row['layout']} {row['dtype']} {row['M']}x{row['N']}x{row['K']}:"]
    for name, timed in row["kernels"].items():
        best = ", ".join(f"{c['us']:.1f} {tuple(c['config'])}" for c in timed[:top])
        parts.append(f"{name} [{best}] {nbytes / (timed[0]['us'] * 1e6):.2f} TB/s;")
    if "cublas_us" in row:
        parts.append(f"cuBLAS {row['cublas_us']:.1f} {nbytes / (row['cublas_us'] * 1e6):.2f} "
                     "TB/s")
    return " ".join(parts)


def main(argv=None):
    args = parse(argv)
    import torch
    rows = []
    for dtype in args.dtypes:
        for M, N, K in args.shapes:
            for layout in args.layouts:
                rows.append(time_shape(torch, args, layout, dtype, M, N, K))
                print(line(rows[-1], args.top), flush=True)
    if args.json:
        device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
        Path(args.json).write_text(json.dumps({"device": device, "torch": torch.__version__,
                                               "reps": args.reps, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""moye.ops.matmul and torch.mm timed two ways on the same tensors: a loop
of calls between two CUDA events (what a stream of calls gets), and CUDA
events around each call, the median (as benchmarks/matmul_shapes.py times).
Where a call's host time comes close to its GPU time, the second shows it.
Also the config moye's autotuner chose.

    python benchmarks/matmul_call_timing.py [--shapes M,N,K ...] [--dtypes bfloat16 float16]
                                            [--calls 200] [--json out.json] [--device cuda]

Microseconds a call. On the CPU (`--device cpu`, the tests' smoke run) the
wall clock stands in for the events.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from matmul_shapes import mnk  # noqa: E402

SHAPES = ((1, 14336, 4096), (1, 8192, 8192), (16, 8192, 8192), (16, 4096, 14336))


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", type=mnk, default=list(SHAPES), metavar="M,N,K",
                   help="(default: %(default)s)")
    p.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"])
    p.add_argument("--calls", type=int, default=200, help="calls a figure (default 200)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--json")
    a = p.parse_args(argv)
    if a.calls < 1:
        p.error("--calls: at least 1")
    return a


def in_loop(torch, fn, calls, cuda):
    """Microseconds a call over `calls` back-to-back calls, median of 5."""
    fn()
    figures = []
    for _ in range(5):
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            figures.append(start.elapsed_time(end) * 1e3 / calls)
        else:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            figures.append((time.perf_counter() - t0) * 1e6 / calls)
    return sorted(figures)[2]


def call_by_call(torch, fn, calls, cuda):
    """Microseconds of the median call, timed alone (kernels.cuda_time)."""
    if not cuda:
        return in_loop(torch, fn, 1, cuda)
    from kernels import cuda_time
    return cuda_time(torch, fn, iters=calls) * 1e3


def main(argv=None):
    args = parse(argv)
    import torch

    import moye.ops as mops
    from moye.ops import matmul_op
    cuda = args.device == "cuda"
    rows = []
    for dtype in args.dtypes:
        for M, N, K in args.shapes:
            g = torch.Generator(device=args.device).manual_seed(M + N + K)
            dt = getattr(torch, dtype)
            a = torch.randn(M, K, device=args.device, generator=g).to(dt)
            b = torch.randn(K, N, device=args.device, generator=g).to(dt)
            before = set(matmul_op._timed.cache)
            moye_call, torch_call = (lambda: mops.matmul(a, b)), (lambda: torch.mm(a, b))
            moye_call()
            row = {"dtype": dtype, "M": M, "N": N, "K": K,
                   "config": [list(c.cfg) for k, c in matmul_op._timed.cache.items()
                              if k not in before],
                   "loop_us": {"moye": in_loop(torch, moye_call, args.calls, cuda),
                               "torch": in_loop(torch, torch_call, args.calls, cuda)},
                   "call_us": {"moye": call_by_call(torch, moye_call, args.calls, cuda),
                               "torch": call_by_call(torch, torch_call, args.calls, cuda)}}
            rows.append(row)
            print(f"{dtype} {M}x{N}x{K} config {row['config']}: in a loop moye "
                  f"{row['loop_us']['moye']:.1f} torch {row['loop_us']['torch']:.1f} us; call by "
                  f"call moye {row['call_us']['moye']:.1f} torch {row['call_us']['torch']:.1f} us",
                  flush=True)
    if args.json:
        device = torch.cuda.get_device_name() if cuda else "cpu"
        Path(args.json).write_text(json.dumps({"device": device, "torch": torch.__version__,
                                               "calls": args.calls, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

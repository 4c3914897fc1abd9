"""The production GEMM (moye/examples/gemm.py) against cuBLAS (torch.mm) in
the same run, fp16 and bf16, random normal data, TFLOP/s and ratios.

    python benchmarks/gemm.py [--json out.json] [--shapes 4096,4096,4096 ...]

Every timed kernel is first checked: D poisoned, every element compared
with a float64 reference (relative Frobenius error). Times are medians of
CUDA-event timings after a 2 s warm-up; cuBLAS runs on the same tensors.
Also prints the kernel's registers and spills from ptxas (via NVRTC).
"""
import argparse
import itertools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import cuda_time, gpu_state, warm_up  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 4096),
          (2048, 8192, 4096)]


def main():
    import torch

    from moye.examples import gemm as G
    from moye.examples._common import rel_error
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--shapes", nargs="*")
    parser.add_argument("--config", default="{}", help="extra make_config keywords (JSON)")
    parser.add_argument("--power", nargs="*", default=["8192,8192,8192"],
                        help="shapes at which to sample clock and power under each kernel")
    parser.add_argument("--majors", nargs="*", default=["K,K"],
                        help="operand layouts to time, A's and B's major mode: K,K M,K K,N M,N")
    args = parser.parse_args()
    config = json.loads(args.config)
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    device = torch.cuda.get_device_name()
    warm_up(torch)
    rows = []
    for dtype in ("float16", "bfloat16"):
        dt = getattr(torch, dtype)
        for (M, N, K), majors in itertools.product(shapes, args.majors):
            torch.manual_seed(0)
            a_major, b_major = majors.split(",")
            # an M- (N-) major operand is the transposed view of a row-major (K, M) ((K, N))
            A = torch.randn(M, K, device="cuda", dtype=dt) if a_major == "K" else \
                torch.randn(K, M, device="cuda", dtype=dt).t()
            B = torch.randn(N, K, device="cuda", dtype=dt) if b_major == "K" else \
                torch.randn(K, N, device="cuda", dtype=dt).t()
            D = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
            G.launch(A, B, D, **config)
            torch.cuda.synchronize()
            if M * N * K <= 4096 ** 3:
                ref = A.double() @ B.double().t()
                err = rel_error(D.float().cpu().numpy(), ref.cpu().numpy())
            else:       # float32 cuBLAS reference at the big sizes (float64 is slow)
                ref = A.float() @ B.float().t()
                err = float((D.float() - ref).norm() / ref.norm())
            t_moye = cuda_time(torch, lambda: G.launch(A, B, D, **config), iters=30)
            t_cublas = cuda_time(torch, lambda: torch.mm(A, B.t(), out=D), iters=30)
            flop = 2.0 * M * N * K
            row = {"dtype": dtype, "M": M, "N": N, "K": K, "majors": majors, "rel_error": err,
                   "moye_tflops": flop / t_moye / 1e9, "cublas_tflops": flop / t_cublas / 1e9}
            row["ratio"] = row["moye_tflops"] / row["cublas_tflops"]
            rows.append(row)
            print(f"{dtype:9} {M:6}x{N:6}x{K:6} {majors}  moye {row['moye_tflops']:7.1f} TFLOP/s  "
                  f"cuBLAS {row['cublas_tflops']:7.1f}  ratio {row['ratio']:.3f}  "
                  f"err {err:.1e}", flush=True)
            if f"{M},{N},{K}" in args.power:        # sustained, with clock and power
                for who, fn in (("moye", lambda: G.launch(A, B, D, **config)),
                                ("cublas", lambda: torch.mm(A, B.t(), out=D))):
                    state = gpu_state(lambda: [fn() for _ in range(5)] and
                                      torch.cuda.synchronize())
                    state["tflops"] = 5 * flop * state.pop("runs_per_s") / 1e12
                    row[f"{who}_sustained"] = state
                    print(f"    {who} sustained: {state['tflops']:.1f} TFLOP/s, SM clock "
                          f"{state.get('sm_clock_mhz', 0):.0f} MHz, {state.get('power_w', 0):.0f}"
                          f" W, power-capped: {state.get('power_capped')}", flush=True)
    print(f"device: {device}")
    print(ptxas_report(G, config))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "rows": rows}, indent=2))


def ptxas_report(G, config):
    """Registers, spills and shared memory of the fp16 K-major kernel, from ptxas."""
    import numpy as np

    from moye.backend.cuda import codegen, driver, nvrtc
    from moye import ir
    A = np.zeros((256, 128), np.float16)
    D = np.zeros((256, 256), np.float16)
    args, threads = G.make_config("Float16", **config)
    kernel, _, _ = G.gemm_kernel.trace(A, A, D, D, 1.0, 0.0, *args, block=threads)
    src = codegen.generate(kernel, threads)
    m = nvrtc.compile_cuda(src, [ir.symbol(kernel.name)], driver.device_arch(),
                           options=("--ptxas-options=-v",))
    return "ptxas: " + " | ".join(line.strip() for line in (m.log or "").splitlines()
                                  if "registers" in line or "spill" in line)


if __name__ == "__main__":
    main()

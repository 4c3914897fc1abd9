"""The SIMT SGEMM (moye/examples/sgemm.py) against cuBLAS float32 (torch.mm
with TF32 off) in the same run: C = A * B^T, A (M,K), B (N,K), C (M,N), all
column-major, random normal data, TFLOP/s and ratios.

    python benchmarks/sgemm.py [--json out.json] [--shapes M,N,K ...]
                               [--config JSON] [--sweep]

Every timed kernel is first checked: C poisoned with NaN, every element
compared with a float64 product on the GPU (relative Frobenius error).
Times are medians of CUDA-event timings after a 2 s warm-up. cuBLAS runs on
the same tensors, twice: writing C column-major (torch.mm(B, A.t()) into
C^T) and row-major (torch.mm(A, B.t())); the faster one is the reference.
--sweep first times several tile configurations at 4096^3 and 8192^3, then
the full table with the fastest at 8192^3. Also prints the tabled
configuration's registers and spills from ptxas (via NVRTC).
"""
import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import cuda_time, warm_up  # noqa: E402

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 1024), (16384, 4096, 4096),
          (2048, 8192, 4096)]
SWEEP_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
SWEEP = [{}, {"stages": 2}, {"stages": 4}, {"bK": 32, "stages": 2}, {"bK": 32},
         {"warp": [8, 4]}, {"bK": 8}, {"bN": 256}]


def label(config):
    from moye.examples.sgemm import make_config
    import inspect
    d = {k: v.default for k, v in inspect.signature(make_config).parameters.items()}
    d.update(config)
    return f"{d['bM']}x{d['bN']}x{d['bK']} s{d['stages']} warp{d['warp'][0]}x{d['warp'][1]}"


class Workload:
    """One shape's tensors, float64 reference and cuBLAS times, shared by
    every configuration timed on it."""

    def __init__(self, torch, M, N, K):
        from moye.examples._common import column_major
        self.torch, self.shape = torch, (M, N, K)
        torch.manual_seed(0)
        self.A = column_major(torch, (M, K), torch.float32)
        self.B = column_major(torch, (N, K), torch.float32)
        self.C = column_major(torch, (M, N), torch.float32, fill="empty")
        self.C_row = torch.empty(M, N, device="cuda", dtype=torch.float32)
        self.ref = self.A.double() @ self.B.double().t()
        self.ref_norm = self.ref.norm().item()
        Ct = self.C.t()                                  # (N, M) row-major storage of C
        self.cublas = {
            "col": cuda_time(torch, lambda: torch.mm(self.B, self.A.t(), out=Ct), iters=20),
            "row": cuda_time(torch, lambda: torch.mm(self.A, self.B.t(), out=self.C_row),
                             iters=20)}
        torch.mm(self.B, self.A.t(), out=Ct)
        self.cublas_error = self.error(self.C)

    def error(self, C):
        return ((C.double() - self.ref).norm().item()) / self.ref_norm

    def flop(self):
        M, N, K = self.shape
        return 2.0 * M * N * K

    def run(self, config):
        from moye.examples import sgemm as S
        torch, A, B, C = self.torch, self.A, self.B, self.C
        M, N, _ = self.shape
        args, threads = S.make_config(**config)
        bM, bN = config.get("bM", 128), config.get("bN", 128)
        kernel = S.sgemm_kernel[(M // bM, N // bN), threads]
        C.fill_(float("nan"))
        kernel(A, B, C, *args)
        torch.cuda.synchronize()
        err = self.error(C)
        t = cuda_time(torch, lambda: kernel(A, B, C, *args), iters=20)
        t_cublas = min(self.cublas.values())
        M, N, K = self.shape
        row = {"config": label(config), "M": M, "N": N, "K": K, "rel_error": err,
               "cublas_rel_error": self.cublas_error,
               "moye_tflops": self.flop() / t / 1e9, "cublas_tflops": self.flop() / t_cublas / 1e9,
               "cublas_col_tflops": self.flop() / self.cublas["col"] / 1e9,
               "cublas_row_tflops": self.flop() / self.cublas["row"] / 1e9}
        row["ratio"] = row["moye_tflops"] / row["cublas_tflops"]
        print(f"{row['config']:26} {M:6}x{N:6}x{K:6}  moye {row['moye_tflops']:6.2f} TFLOP/s  "
              f"cuBLAS {row['cublas_tflops']:6.2f}  ratio {row['ratio']:.3f}  err {err:.1e}",
              flush=True)
        assert err < 1e-5, f"sgemm {label(config)} {self.shape}: relative error {err:.2e}"
        return row


def ptxas_report(config):
    """Registers, spills and shared memory of one configuration, from ptxas."""
    import numpy as np

    from moye.backend.cuda import codegen, driver, nvrtc
    from moye import ir
    from moye.examples import sgemm as S
    args, threads = S.make_config(**config)
    A = np.asfortranarray(np.zeros((256, 64), np.float32))
    C = np.asfortranarray(np.zeros((256, 256), np.float32))
    kernel, _, _ = S.sgemm_kernel.trace(A, A, C, *args, block=threads)
    src = codegen.generate(kernel, threads)
    m = nvrtc.compile_cuda(src, [ir.symbol(kernel.name)], driver.device_arch(),
                           options=("--ptxas-options=-v",))
    return " | ".join(line.split(":", 1)[-1].strip() for line in (m.log or "").splitlines()
                      if "registers" in line or "spill" in line)


def main():
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    parser.add_argument("--shapes", nargs="*")
    parser.add_argument("--config", default="{}", help="make_config keywords (JSON)")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--sweep-configs", help="a JSON list of configurations to sweep")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    device = torch.cuda.get_device_name()
    print(f"device: {device}")
    warm_up(torch)
    workloads = {}

    def workload(shape):
        if shape not in workloads:
            workloads.clear()                   # one shape's tensors at a time
            torch.cuda.empty_cache()
            workloads[shape] = Workload(torch, *shape)
        return workloads[shape]

    out = {"device": device, "sweep": [], "rows": [], "ptxas": {}}
    config = json.loads(args.config)
    if args.sweep:
        sweep = json.loads(args.sweep_configs) if args.sweep_configs else SWEEP
        for shape in SWEEP_SHAPES:
            w = workload(shape)
            for c in sweep:
                out["sweep"].append(w.run(c))
        big = [r for r in out["sweep"] if (r["M"], r["N"], r["K"]) == SWEEP_SHAPES[-1]]
        best = max(range(len(big)), key=lambda i: big[i]["moye_tflops"])
        config = sweep[best]
        print(f"fastest at {SWEEP_SHAPES[-1]}: {label(config)}")
    out["config"] = label(config)
    for shape in shapes:
        out["rows"].append(workload(shape).run(config))
    out["ptxas"][label(config)] = ptxas_report(config)
    print(f"device: {device}")
    for k, v in out["ptxas"].items():
        print(f"ptxas {k}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

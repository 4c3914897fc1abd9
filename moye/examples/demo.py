"""The main demo: a tour of layouts, then the seeds' tiled matmul kernel,
written in Python, run on the GPU if there is one and on the CPU backend
otherwise, and checked against NumPy.

    python -m moye
"""
import time

import numpy as np

import moye

from . import layout_tour, tiled_matmul
from ._common import torch_cuda


def main():
    layout_tour.main()
    print("\n--- A kernel in Python: C = A * B^T with TiledCopy and TiledMMA ---")
    torch = torch_cuda()
    rng = np.random.default_rng(0)
    if torch is not None:
        M, N, K = 2048, 2048, 256
        A = torch.randn(K, M, device="cuda").t()
        B = torch.randn(K, N, device="cuda").t()
        C = torch.full((N, M), float("nan"), device="cuda").t()
        t0 = time.perf_counter()
        tiled_matmul.launch(A, B, C)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        ref = (A.double() @ B.double().t()).cpu().numpy()
        out, where = C.cpu().numpy(), f"GPU ({torch.cuda.get_device_name()})"
    else:
        M, N, K = 256, 128, 32
        A = np.asfortranarray(rng.standard_normal((M, K)).astype(np.float32))
        B = np.asfortranarray(rng.standard_normal((N, K)).astype(np.float32))
        C = np.asfortranarray(np.full((M, N), np.nan, np.float32))
        t0 = time.perf_counter()
        tiled_matmul.launch(A, B, C)
        elapsed = time.perf_counter() - t0
        ref, out, where = A.astype(np.float64) @ B.astype(np.float64).T, C, "CPU backend (no GPU)"
    err = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    print(f"{M}x{N}x{K} float32 on the {where}: relative error {err:.1e}, "
          f"{elapsed:.2f} s including tracing and compilation")
    sA, copy_A, sB, copy_B, mma = tiled_matmul.make_config(moye.Float32)
    print(f"\nThe tiled MMA it used:\n{mma}")
    assert err < 1e-5


if __name__ == "__main__":
    main()

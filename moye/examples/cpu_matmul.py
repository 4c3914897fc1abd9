"""Seed 002 on the CPU: C = A * B^T with 16 host threads.

    python -m moye.examples.cpu_matmul [M N K]

A is (M, K), B is (N, K) and C is (M, N), column-major as Julia's arrays
are. The 16 threads form a (4, 4) thread layout, and thread `t` owns the
elements of C at coordinate (t % 4, t // 4) of every 4x4 tile of C. To
compute them it needs the rows of A with the same row coordinate and the
rows of B with the same column coordinate: `parallelize` with the projection
(1, None) keeps only the thread layout's first mode when it partitions A
(threads 0, 4, 8 and 12 get the same rows), and (None, 1) only its second
mode when it partitions B. Each thread then runs the seed's three loops,
k outermost, over its views; the views write straight into C.

Every element access is an indexing call on a MoYeArray, so at the seed's
size (128x128x256, 4.2 million multiply-adds) this takes a while in Python:
the point is the partitioning, which is the same code a kernel runs.
"""
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from moye.array import MoYeArray, parallelize
from moye.layout import make_layout, size

THREAD_LAYOUT = make_layout((4, 4))


def thread_matmul(tile_A, tile_B, tile_C):
    """tile_C += tile_A * tile_B^T with the seed's loops: k, then n, then m."""
    for k in range(size(tile_A, 1)):
        for n in range(size(tile_C, 1)):
            for m in range(size(tile_C, 0)):
                tile_C[m, n] += tile_A[m, k] * tile_B[n, k]


def matmul(A, B, C, thr_layout=THREAD_LAYOUT):
    """C += A * B^T in place, one Python thread per thread of `thr_layout`
    (NumPy arrays of any memory order: MoYeArray keeps their strides)."""
    moye_A, moye_B, moye_C = MoYeArray(A), MoYeArray(B), MoYeArray(C)

    def work(thread_idx):
        tile_A = parallelize(moye_A, thr_layout, thread_idx, (1, None))
        tile_B = parallelize(moye_B, thr_layout, thread_idx, (None, 1))
        tile_C = parallelize(moye_C, thr_layout, thread_idx)
        thread_matmul(tile_A, tile_B, tile_C)

    nthreads = size(thr_layout)
    with ThreadPoolExecutor(max_workers=nthreads) as pool:
        list(pool.map(work, range(nthreads)))  # list() re-raises a thread's error
    return C


def main(M=128, N=128, K=256, seed=0):
    """Multiply random column-major float64 matrices and check against NumPy;
    returns the largest absolute error."""
    rng = np.random.default_rng(seed)
    A = np.asfortranarray(rng.random((M, K)))
    B = np.asfortranarray(rng.random((N, K)))
    C = np.zeros((M, N), order="F")
    start = time.perf_counter()
    matmul(A, B, C)
    seconds = time.perf_counter() - start
    ref = A @ B.T
    err = float(np.max(np.abs(C - ref)))
    ok = bool(np.allclose(C, ref))
    print(f"C = A * B^T, M={M} N={N} K={K}, {size(THREAD_LAYOUT)} threads: {seconds:.2f} s")
    print(f"matches NumPy: {ok}, max abs error {err:.3g}")
    if not ok:
        raise SystemExit(1)
    return err


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))

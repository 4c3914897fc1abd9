"""Seed 002 (GPU): C = A * B^T with shared-memory tiles and projections.

    python -m moye.examples.matmul_smem [M N K]

A is (M, K), B is (N, K), C is (M, N), column-major as in the seed. Each
block computes a 128x128 tile of C with 32x8 threads; A and B tiles of
(128, 8) pass through shared memory; each thread accumulates a 4x16
register fragment.
"""
import sys

import moye
from moye import Layout, MoYeArray, make_fragment_like, parallelize, size, tile, zeros_


@moye.kernel
def matmul_kernel(A, block_layout_A, thread_layout_A, B, block_layout_B, thread_layout_B,
                  C, block_layout_C, thread_layout_C):
    sA = moye.shared_array(A.dtype, block_layout_A)
    sB = moye.shared_array(B.dtype, block_layout_B)
    mA, mB, mC = MoYeArray(A), MoYeArray(B), MoYeArray(C)
    bM, bN, bK = size(block_layout_A, 0), size(block_layout_B, 0), size(block_layout_B, 1)

    block_A = tile(mA, (bM, bK), (moye.block_idx.x, None))                 # (bM, bK, k)
    block_B = tile(mB, (bN, bK), (moye.block_idx.y, None))                 # (bN, bK, k)
    block_C = tile(mC, (bM, bN), (moye.block_idx.x, moye.block_idx.y))     # (bM, bN)

    # tiles for loading A and B from global to shared memory
    thread_gA = parallelize(block_A, thread_layout_A, moye.thread_idx.x)   # (tM, tK, k)
    thread_sA = parallelize(sA, thread_layout_A, moye.thread_idx.x)        # (tM, tK)
    thread_gB = parallelize(block_B, thread_layout_B, moye.thread_idx.x)   # (tN, tK, k)
    thread_sB = parallelize(sB, thread_layout_B, moye.thread_idx.x)        # (tN, tK)

    # tiles for the computation: projections keep M of A and N of B
    compute_sA = parallelize(sA, thread_layout_C, moye.thread_idx.x, (1, None))
    compute_sB = parallelize(sB, thread_layout_C, moye.thread_idx.x, (None, 1))
    compute_gC = parallelize(block_C, thread_layout_C, moye.thread_idx.x)

    frg_c = make_fragment_like(compute_gC)
    zeros_(frg_c)

    k_max = size(thread_gA, 2)
    for i in range(k_max):
        moye.copyto(thread_sA, thread_gA[:, :, i])
        moye.copyto(thread_sB, thread_gB[:, :, i])
        moye.sync_threads()
        for k in range(size(compute_sA, 1)):
            for m in range(size(compute_sA, 0)):
                for n in range(size(compute_sB, 0)):
                    frg_c[m, n] += compute_sA[m, k] * compute_sB[n, k]
        moye.sync_threads()
    moye.copyto(compute_gC, frg_c)


def launch(A, B, C):
    """C = A * B^T; M and N multiples of 128, K a multiple of 8."""
    block_A = block_B = Layout((128, 8))
    block_C = Layout((128, 128))
    threads = Layout((32, 8))
    M, N = A.shape[0], B.shape[0]
    matmul_kernel[(M // 128, N // 128), size(threads)](A, block_A, threads, B, block_B, threads,
                                                       C, block_C, threads)


def main(M=2048, N=2048, K=256):
    from ._common import check_matmul
    check_matmul("matmul_smem", launch, M, N, K)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))

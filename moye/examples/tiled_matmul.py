"""Seed 000: the shared-memory matmul rewritten with TiledCopy and TiledMMA,
overlapping the next tile's global loads (into registers) with the current
tile's computation.

    python -m moye.examples.tiled_matmul [M N K]

C = A * B^T with A (M, K), B (N, K), C (M, N) column-major, 128x128x8 block
tiles, 256 threads, a UniversalFMA tiled MMA of (32, 8) threads.
"""
import sys

import moye
from moye import (CopyAtom, Layout, MoYeArray, UniversalCopy, UniversalFMA, copyto, gemm,
                  get_slice, make_fragment_C, make_fragment_like, make_layout, make_tiled_copy,
                  make_tiled_mma, partition_A, partition_B, partition_C, partition_D, partition_S,
                  size, tile, zeros_)


@moye.kernel
def matmul_kernel(A, sA_layout, copy_A, B, sB_layout, copy_B, C, mma_C):
    sA = moye.shared_array(A.dtype, sA_layout)
    sB = moye.shared_array(B.dtype, sB_layout)
    mA, mB, mC = MoYeArray(A), MoYeArray(B), MoYeArray(C)
    bM, bN, bK = size(sA_layout, 0), size(sB_layout, 0), size(sB_layout, 1)
    gA = tile(mA, (bM, bK), (moye.block_idx.x, None))               # (bM, bK, k)
    gB = tile(mB, (bN, bK), (moye.block_idx.y, None))               # (bN, bK, k)
    gC = tile(mC, (bM, bN), (moye.block_idx.x, moye.block_idx.y))   # (bM, bN)

    # copy partitions
    thr_copy_a = get_slice(copy_A, moye.thread_idx.x)
    tAgA = partition_S(thr_copy_a, gA)                 # (CPY, CPY_M, CPY_K, k)
    tAsA = partition_D(thr_copy_a, sA)                 # (CPY, CPY_M, CPY_K)
    tArA = make_fragment_like(tAsA)                    # (CPY, CPY_M, CPY_K)
    thr_copy_b = get_slice(copy_B, moye.thread_idx.x)
    tBgB = partition_S(thr_copy_b, gB)                 # (CPY, CPY_N, CPY_K, k)
    tBsB = partition_D(thr_copy_b, sB)                 # (CPY, CPY_N, CPY_K)
    tBrB = make_fragment_like(tBsB)                    # (CPY, CPY_N, CPY_K)

    # mma partitions
    thr_mma = get_slice(mma_C, moye.thread_idx.x)
    tCsA = partition_A(thr_mma, sA)                    # (MMA, MMA_M, MMA_K)
    tCsB = partition_B(thr_mma, sB)                    # (MMA, MMA_N, MMA_K)
    tCgC = partition_C(thr_mma, gC)                    # (MMA, MMA_M, MMA_N)
    tCrC = make_fragment_C(thr_mma, tCgC)
    zeros_(tCrC)

    # overlap copy and compute: the first tile goes to registers now
    copyto(copy_A, tArA, tAgA[:, :, :, 0])
    copyto(copy_B, tBrB, tBgB[:, :, :, 0])

    k_max = size(tAgA, 3)
    for k in range(k_max):
        moye.sync_threads()
        copyto(tAsA, tArA)
        copyto(tBsB, tBrB)
        moye.sync_threads()
        # load the next tile while this one is multiplied
        k_next = moye.minimum(k + 1, k_max - 1)
        copyto(copy_A, tArA, tAgA[:, :, :, k_next])
        copyto(copy_B, tBrB, tBgB[:, :, :, k_next])
        gemm(mma_C, tCrC, tCsA, tCsB, tCrC)
    copyto(tCgC, tCrC)


def make_config(dtype):
    bM, bN, bK = 128, 128, 8
    sA = make_layout((bM, bK), (1, bM + 1))
    sB = make_layout((bN, bK), (1, bN + 1))
    copy_A = make_tiled_copy(CopyAtom(UniversalCopy(dtype), dtype), Layout((32, 8)), Layout((1, 1)))
    copy_B = make_tiled_copy(CopyAtom(UniversalCopy(dtype), dtype), Layout((32, 8)), Layout((1, 1)))
    mma = make_tiled_mma(UniversalFMA(dtype, dtype, dtype), Layout((32, 8)))
    return sA, copy_A, sB, copy_B, mma


def launch(A, B, C):
    """C = A * B^T (float32); M and N multiples of 128, K a multiple of 8."""
    from moye import Float32
    sA, copy_A, sB, copy_B, mma = make_config(Float32)
    M, N = A.shape[0], B.shape[0]
    matmul_kernel[(M // 128, N // 128), size(mma)](A, sA, copy_A, B, sB, copy_B, C, mma)


def main(M=2048, N=2048, K=256):
    from ._common import check_matmul
    check_matmul("tiled_matmul", launch, M, N, K)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))

"""A tuned SIMT SGEMM written with moye: float32, FMA on the CUDA cores, no
tensor cores (issue #7).

    python -m moye.examples.sgemm [M N K]

C = A * B^T with A (M, K), B (N, K), C (M, N) column-major, as in the seeds
(tiled_matmul.py): A and B are M- and N-contiguous, so a (bM, bK) tile of A
is bK columns of bM contiguous floats. That is CuTe's sgemm_sm80 "NT" case.

- Block tile 128x128x32 by default, 3 shared stages (96 KiB), 127
  registers: two blocks per SM. On an H100 it runs at 0.97-0.99 of cuBLAS
  float32 (benchmarks/sgemm.py).
- Global -> shared with 16-byte cp.async in a multistage pipeline; the
  shared tiles keep M (N) contiguous, so no transpose is needed.
- 256 threads in a 16x16 grid, each warp 4 (M) x 8 (N) threads; each thread
  owns (bM/16) x (bN/16) accumulators in runs of 4 contiguous rows and
  columns, 64 apart (the TiledMMA's permutation (16,4):(4,1)). It reads its
  A and B values for one k as 16-byte shared loads: a warp touches 64 bytes
  of A and 128 of B, one wavefront each, no bank conflicts.
- Register double buffering: the fragments of k-block kb + 1 are loaded
  from shared memory while kb is multiplied.
- Epilogue: the accumulators go straight to C as 16-byte stores.
M, N must be multiples of the block tile, K of bK.
"""
import sys

import moye
from moye import (CopyAtom, Layout, MoYeArray, UInt128, UniversalFMA, copyto, gemm, get_slice,
                  make_fragment_A, make_fragment_B, make_fragment_C, make_layout,
                  make_tiled_copy, make_tiled_mma, partition_A, partition_B, partition_C,
                  partition_D, partition_S, size, tile, zeros_)


@moye.kernel
def sgemm_kernel(A, B, C, sA_layout, sB_layout, copy_A, copy_B, mma, stages: moye.Constexpr):
    bM, bK, bN = size(sA_layout, 0), size(sA_layout, 1), size(sB_layout, 0)
    tid = moye.thread_idx.x
    sA = moye.shared_array(A.dtype, sA_layout)                      # (bM, bK, stages)
    sB = moye.shared_array(B.dtype, sB_layout)                      # (bN, bK, stages)
    gA = tile(MoYeArray(A), (bM, bK), (moye.block_idx.x, None))     # (bM, bK, k)
    gB = tile(MoYeArray(B), (bN, bK), (moye.block_idx.y, None))     # (bN, bK, k)
    gC = tile(MoYeArray(C), (bM, bN), (moye.block_idx.x, moye.block_idx.y))

    # global -> shared: 16-byte cp.async
    thr_a, thr_b = get_slice(copy_A, tid), get_slice(copy_B, tid)
    tAgA, tAsA = partition_S(thr_a, gA), partition_D(thr_a, sA)   # (CPY, M, K, k|stage)
    tBgB, tBsB = partition_S(thr_b, gB), partition_D(thr_b, sB)

    # shared -> registers -> FMA
    thr_mma = get_slice(mma, tid)
    tCsA = partition_A(thr_mma, sA)                     # (MMA, MMA_M, MMA_K, stage)
    tCsB = partition_B(thr_mma, sB)                     # (MMA, MMA_N, MMA_K, stage)
    tCgC = partition_C(thr_mma, gC)                     # (MMA, MMA_M, MMA_N)
    tCrA = make_fragment_A(thr_mma, tCsA[:, :, :, 0])   # (MMA, MMA_M, MMA_K)
    tCrB = make_fragment_B(thr_mma, tCsB[:, :, :, 0])
    tCrC = make_fragment_C(thr_mma, tCgC)
    zeros_(tCrC)

    k_tiles = size(tAgA, 3)
    for s in range(stages - 1):                 # prologue: the first stages - 1 tiles
        if s < k_tiles:
            copyto(copy_A, tAsA[:, :, :, s], tAgA[:, :, :, s])
            copyto(copy_B, tBsB[:, :, :, s], tBgB[:, :, :, s])
        moye.cp_async_commit()

    # the first k-block's fragments
    k_blocks = size(tCrA, 2)
    moye.cp_async_wait(stages - 2)
    moye.sync_threads()
    copyto(tCrA[:, :, 0], tCsA[:, :, 0, 0])
    copyto(tCrB[:, :, 0], tCsB[:, :, 0, 0])

    # main loop over k tiles; within one, k-block kb + 1's fragments load while
    # kb multiplies; the last k-block waits for the next tile and loads its first
    smem_read, smem_write = 0, stages - 1
    for k in range(k_tiles):
        smem_next = moye.ifelse(smem_read == stages - 1, 0, smem_read + 1)
        for kb in range(k_blocks):
            if kb == k_blocks - 1:
                moye.cp_async_wait(stages - 2)      # tile k + 1 has landed (this thread's)
                moye.sync_threads()                 # ... everyone's
                copyto(tCrA[:, :, 0], tCsA[:, :, 0, smem_next])
                copyto(tCrB[:, :, 0], tCsB[:, :, 0, smem_next])
            else:
                copyto(tCrA[:, :, kb + 1], tCsA[:, :, kb + 1, smem_read])
                copyto(tCrB[:, :, kb + 1], tCsB[:, :, kb + 1, smem_read])
            if kb == 0:
                # refill the stage that tile k - 1 used (everyone is past it)
                if k + stages - 1 < k_tiles:
                    copyto(copy_A, tAsA[:, :, :, smem_write], tAgA[:, :, :, k + stages - 1])
                    copyto(copy_B, tBsB[:, :, :, smem_write], tBgB[:, :, :, k + stages - 1])
                moye.cp_async_commit()
            gemm(mma, tCrC, tCrA[:, :, kb], tCrB[:, :, kb], tCrC)
        smem_write = smem_read
        smem_read = smem_next

    copyto(tCgC, tCrC)


def make_config(bM=128, bN=128, bK=32, stages=3, warp=(4, 8)):
    """(static arguments of sgemm_kernel, threads) for one tile configuration.
    256 threads in a 16x16 grid of `warp` (M, N) threads per warp; each thread
    (bM/16) x (bN/16) accumulators."""
    from moye import CPOP_ASYNC_CACHEGLOBAL, Float32
    wm, wn = warp
    if wm * wn != 32 or 16 % wm or 16 % wn:
        raise ValueError(f"sgemm: warp {warp} must be 32 threads dividing a 16x16 grid")
    if bM % 64 or bN % 64 or bK % 8:
        raise ValueError(f"sgemm: the tile ({bM}, {bN}, {bK}) must be multiples of (64, 64, 8)")
    threads = 256
    sA = make_layout((bM, bK, stages))                  # M contiguous, as A is
    sB = make_layout((bN, bK, stages))
    g2s = CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float32)

    def copy(rows):       # columns of `rows` contiguous floats, 4 per thread
        per_col = rows // 4
        return make_tiled_copy(g2s, make_layout((per_col, threads // per_col)), Layout((4, 1)))

    # thread (m, n) of the 16x16 grid: a warp is wm x wn threads, warps m-first
    atoms = Layout(((wm, 16 // wm), (wn, 16 // wn)), ((1, 32), (wm, 32 * (16 // wm))))
    runs = Layout((16, 4), (4, 1))                      # 4 contiguous values per thread
    mma = make_tiled_mma(UniversalFMA(Float32), atoms, (runs, runs))
    return (sA, sB, copy(bM), copy(bN), mma, stages), threads


def launch(A, B, C, **config):
    """C = A * B^T (float32, column-major) for torch/CuPy arrays A (M,K), B (N,K), C (M,N)."""
    M, K = A.shape
    N = B.shape[0]
    bM, bN, bK = config.get("bM", 128), config.get("bN", 128), config.get("bK", 32)
    if M % bM or N % bN or K % bK:
        raise ValueError(f"sgemm: M={M}, N={N}, K={K} must be multiples of the tile "
                         f"({bM}, {bN}, {bK})")
    args, threads = make_config(**config)
    sgemm_kernel[(M // bM, N // bN), threads](A, B, C, *args)


def main(M=4096, N=4096, K=4096):
    from ._common import check_matmul
    check_matmul("sgemm", launch, M, N, K)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))

"""Seed 001 and MoYe's async manual: the tiled matmul with cp.async.

    python -m moye.examples.async_matmul [async|async_vec|overlap|double] [M N K]

C = A * B^T with A (M, K), B (N, K), C (M, N) column-major float32, 128x128x8
block tiles, 256 threads, UniversalFMA. Each variant moves A and B from
global to shared memory with cp.async (no registers in between):

- `async`: copy a tile, wait for it (cp_async_wait), multiply from shared
  memory, repeat. 4-byte cp.async copies, smem columns padded by one float.
- `async_vec`: the same kernel with 8-byte cp.async copies; the padding
  grows to two floats so that every column stays 8-byte aligned.
- `overlap`: shared -> registers explicitly, then the next tile's cp.async is
  issued before this tile's FMAs, so the copy runs under the compute.
- `double`: two shared buffers and a register double buffer: the next
  tile's cp.async goes to one buffer while the other is read; the next
  k-block's registers load while this one's FMAs run. The buffers swap with
  the seed's `smem_read, smem_write = smem_write, smem_read` in a run-time
  loop.

With no argument every variant runs.
"""
import sys

import moye
from moye import (CPOP_ASYNC_CACHEALWAYS, CopyAtom, Float32, Float64, Layout, MoYeArray,
                  UniversalFMA, copyto, gemm, get_slice, make_fragment_A, make_fragment_B,
                  make_fragment_C, make_layout, make_tiled_copy, make_tiled_mma, partition_A,
                  partition_B, partition_C, partition_D, partition_S, size, tile, zeros_)


@moye.kernel
def async_kernel(A, sA_layout, copy_A, B, sB_layout, copy_B, C, mma_C):
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
    thr_copy_b = get_slice(copy_B, moye.thread_idx.x)
    tBgB = partition_S(thr_copy_b, gB)                 # (CPY, CPY_N, CPY_K, k)
    tBsB = partition_D(thr_copy_b, sB)                 # (CPY, CPY_N, CPY_K)

    # mma partitions
    thr_mma = get_slice(mma_C, moye.thread_idx.x)
    tCsA = partition_A(thr_mma, sA)                    # (MMA, MMA_M, MMA_K)
    tCsB = partition_B(thr_mma, sB)                    # (MMA, MMA_N, MMA_K)
    tCgC = partition_C(thr_mma, gC)                    # (MMA, MMA_M, MMA_N)
    tCrC = make_fragment_C(thr_mma, tCgC)
    zeros_(tCrC)

    for k in range(size(tAgA, 3)):
        copyto(copy_A, tAsA, tAgA[:, :, :, k])         # cp.async: issued, not waited for
        copyto(copy_B, tBsB, tBgB[:, :, :, k])
        moye.cp_async_commit()
        moye.cp_async_wait(0)                          # this thread's copies have landed
        moye.sync_threads()                            # ... and every other thread's
        gemm(mma_C, tCrC, tCsA, tCsB, tCrC)
        moye.sync_threads()                            # reads done before the next copy
    copyto(tCgC, tCrC)


@moye.kernel
def overlap_kernel(A, sA_layout, copy_A, B, sB_layout, copy_B, C, mma_C):
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
    thr_copy_b = get_slice(copy_B, moye.thread_idx.x)
    tBgB = partition_S(thr_copy_b, gB)                 # (CPY, CPY_N, CPY_K, k)
    tBsB = partition_D(thr_copy_b, sB)                 # (CPY, CPY_N, CPY_K)

    # copy gmem to smem for k_tile 0
    copyto(copy_A, tAsA, tAgA[:, :, :, 0])
    copyto(copy_B, tBsB, tBgB[:, :, :, 0])

    # mma partitions
    thr_mma = get_slice(mma_C, moye.thread_idx.x)
    tCsA = partition_A(thr_mma, sA)                    # (MMA, MMA_M, MMA_K)
    tCsB = partition_B(thr_mma, sB)                    # (MMA, MMA_N, MMA_K)
    tCgC = partition_C(thr_mma, gC)                    # (MMA, MMA_M, MMA_N)

    # mma registers
    tCrA = make_fragment_A(thr_mma, tCsA)              # (MMA, MMA_M, MMA_K)
    tCrB = make_fragment_B(thr_mma, tCsB)              # (MMA, MMA_N, MMA_K)
    tCrC = make_fragment_C(thr_mma, tCgC)              # (MMA, MMA_M, MMA_N)
    zeros_(tCrC)

    k_max = size(tAgA, 3)
    for k in range(k_max):
        moye.cp_async_wait()
        moye.sync_threads()

        # copy from smem to rmem
        copyto(tCrA, tCsA)
        copyto(tCrB, tCsB)
        moye.sync_threads()

        # the next tile's copy runs while this one is multiplied
        if k < k_max - 1:
            copyto(copy_A, tAsA, tAgA[:, :, :, k + 1])
            copyto(copy_B, tBsB, tBgB[:, :, :, k + 1])

        gemm(mma_C, tCrC, tCrA, tCrB, tCrC)
    copyto(tCgC, tCrC)


@moye.kernel
def double_buffer_kernel(A, sA_layout, copy_A, B, sB_layout, copy_B, C, mma_C):
    sA = moye.shared_array(A.dtype, sA_layout)         # (bM, bK, 2)
    sB = moye.shared_array(B.dtype, sB_layout)         # (bN, bK, 2)
    mA, mB, mC = MoYeArray(A), MoYeArray(B), MoYeArray(C)
    bM, bN, bK = size(sA_layout, 0), size(sB_layout, 0), size(sB_layout, 1)
    gA = tile(mA, (bM, bK), (moye.block_idx.x, None))               # (bM, bK, k)
    gB = tile(mB, (bN, bK), (moye.block_idx.y, None))               # (bN, bK, k)
    gC = tile(mC, (bM, bN), (moye.block_idx.x, moye.block_idx.y))   # (bM, bN)

    # copy partitions
    thr_copy_a = get_slice(copy_A, moye.thread_idx.x)
    tAgA = partition_S(thr_copy_a, gA)                 # (CPY, CPY_M, CPY_K, k)
    tAsA = partition_D(thr_copy_a, sA)                 # (CPY, CPY_M, CPY_K, 2)
    thr_copy_b = get_slice(copy_B, moye.thread_idx.x)
    tBgB = partition_S(thr_copy_b, gB)                 # (CPY, CPY_N, CPY_K, k)
    tBsB = partition_D(thr_copy_b, sB)                 # (CPY, CPY_N, CPY_K, 2)

    # copy gmem to smem for k_tile 0
    copyto(copy_A, tAsA[:, :, :, 0], tAgA[:, :, :, 0])
    copyto(copy_B, tBsB[:, :, :, 0], tBgB[:, :, :, 0])

    # mma partitions
    thr_mma = get_slice(mma_C, moye.thread_idx.x)
    tCsA = partition_A(thr_mma, sA)                    # (MMA, MMA_M, MMA_K, 2)
    tCsB = partition_B(thr_mma, sB)                    # (MMA, MMA_N, MMA_K, 2)
    tCgC = partition_C(thr_mma, gC)                    # (MMA, MMA_M, MMA_N)

    # mma registers
    tCrA = make_fragment_A(thr_mma, tCsA[:, :, :, 0])  # (MMA, MMA_M, MMA_K)
    tCrB = make_fragment_B(thr_mma, tCsB[:, :, :, 0])  # (MMA, MMA_N, MMA_K)
    tCrC = make_fragment_C(thr_mma, tCgC)              # (MMA, MMA_M, MMA_N)
    zeros_(tCrC)

    moye.cp_async_wait()
    moye.sync_threads()

    # copy smem to rmem for k_block 0
    smem_read = 0
    smem_write = 1
    tCsA_p = tCsA[:, :, :, smem_read]
    tCsB_p = tCsB[:, :, :, smem_read]
    copyto(tCrA[:, :, 0], tCsA_p[:, :, 0])
    copyto(tCrB[:, :, 0], tCsB_p[:, :, 0])

    k_tile_max = size(tAgA, 3)
    k_block_max = size(tCrA, 2)
    for k_tile in range(k_tile_max):                   # run-time loop
        for k_block in range(k_block_max):             # static: unrolled
            k_block_next = k_block + 1
            if k_block == k_block_max - 1:
                # the next tile has landed in smem_read: wait for it, read from it
                moye.cp_async_wait()
                moye.sync_threads()
                tCsA_p = tCsA[:, :, :, smem_read]
                tCsB_p = tCsB[:, :, :, smem_read]
                k_block_next = 0

            # registers for the next k_block load while this one is multiplied
            copyto(tCrA[:, :, k_block_next], tCsA_p[:, :, k_block_next])
            copyto(tCrB[:, :, k_block_next], tCsB_p[:, :, k_block_next])

            if k_block == 0 and k_tile < k_tile_max - 1:
                copyto(copy_A, tAsA[:, :, :, smem_write], tAgA[:, :, :, k_tile + 1])
                copyto(copy_B, tBsB[:, :, :, smem_write], tBgB[:, :, :, k_tile + 1])
                smem_read, smem_write = smem_write, smem_read

            gemm(mma_C, tCrC, tCrA[:, :, k_block], tCrB[:, :, k_block], tCrC)
    copyto(tCgC, tCrC)


def make_config(variant, dtype=Float32):
    """(sA_layout, copy_A, sB_layout, copy_B, mma_C) as the seed and the manual
    choose them for `variant`."""
    bM, bN, bK = 128, 128, 8
    if variant == "async":
        # one float per cp.async; a column stride of bM + 1 avoids bank conflicts
        sA = make_layout((bM, bK), (1, bM + 1))
        sB = make_layout((bN, bK), (1, bN + 1))
        copy = make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEALWAYS(dtype), dtype),
                               Layout((32, 8)), Layout((4, 1)))
        mma = make_tiled_mma(UniversalFMA(dtype, dtype, dtype), Layout((16, 16)))
    elif variant in ("async_vec", "overlap"):
        # two floats per cp.async, coalesced as seed 000 shows; columns must start
        # 8-byte aligned, hence the padding of bM + 2
        sA = make_layout((bM, bK), (1, bM + 2))
        sB = make_layout((bN, bK), (1, bN + 2))
        copy = make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEALWAYS(Float64), dtype),
                               Layout((32, 8)), Layout((2, 1)))
        mma = make_tiled_mma(UniversalFMA(dtype, dtype, dtype), Layout((16, 16)))
    elif variant == "double":
        sA = make_layout((bM, bK, 2), (1, bM + 2, (bM + 2) * bK))
        sB = make_layout((bN, bK, 2), (1, bN + 2, (bN + 2) * bK))
        copy = make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEALWAYS(Float64), dtype),
                               Layout((32, 8)), Layout((2, 1)))
        mma = make_tiled_mma(UniversalFMA(dtype, dtype, dtype), Layout((32, 8)))
    else:
        raise ValueError(f"async_matmul: unknown variant {variant!r}; "
                         f"one of {', '.join(KERNELS)}")
    return sA, copy, sB, copy, mma


KERNELS = {"async": async_kernel, "async_vec": async_kernel, "overlap": overlap_kernel,
           "double": double_buffer_kernel}


def launch(variant, A, B, C):
    """C = A * B^T (float32); M and N multiples of 128, K a multiple of 8."""
    sA, copy_A, sB, copy_B, mma = make_config(variant)
    M, N = A.shape[0], B.shape[0]
    KERNELS[variant][(M // 128, N // 128), size(mma)](A, sA, copy_A, B, sB, copy_B, C, mma)


def main(variant=None, M=2048, N=2048, K=256):
    from ._common import check_matmul
    for v in [variant] if variant else KERNELS:
        check_matmul(f"async_matmul {v}", lambda A, B, C, v=v: launch(v, A, B, C), M, N, K)


if __name__ == "__main__":
    args = sys.argv[1:]
    variant = args.pop(0) if args and not args[0].isdigit() else None
    main(variant, *map(int, args[:3]))

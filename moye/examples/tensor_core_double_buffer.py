"""MoYe's tensor-core manual, last kernel: a double-buffered TF32 matmul.

    python -m moye.examples.tensor_core_double_buffer [M N K]

C = A * B^T with A (M, K) M-major (column-major), B (N, K) K-major
(row-major), C (M, N) column-major, float32 data multiplied as TF32 with
float32 accumulators. 128x128x16 block tiles, 128 threads: four warps of
MMAOP_16x8x8_F32TF32TF32F32_TN, tiled to 32x32x8.

- global -> shared: 16-byte cp.async into two shared stages; the next
  tile's copy runs while the tensor cores work on the other stage;
- shared -> registers: B with LDSM_U32x4_N (ldmatrix; B is K-major in shared
  memory), A with plain 4-byte loads (A is M-major, which ldmatrix without
  transposition cannot read for 32-bit types);
- the registers are double-buffered too: k-block k+1 loads while k-block k
  multiplies, and the stages swap with the seed's
  `smem_read, smem_write = smem_write, smem_read` in a run-time loop.
"""
import sys

import moye
from moye import (CPOP_ASYNC_CACHEALWAYS, CopyAtom, Float32, LDSM_U32x4_N, Layout, MoYeArray,
                  MMAOP_16x8x8_F32TF32TF32F32_TN, UInt128, UniversalCopy, copyto, gemm,
                  get_slice, make_fragment_A, make_fragment_B, make_fragment_C, make_layout,
                  make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B, make_tiled_mma,
                  partition_A, partition_B, partition_C, partition_D, partition_S, retile_D, size,
                  tile, zeros_)


@moye.kernel
def matmul_kernel(A, sA_layout, gmem_copy_A, smem_copy_A,
                  B, sB_layout, gmem_copy_B, smem_copy_B, C, mma):
    sA = moye.shared_array(A.dtype, sA_layout)          # (bM, bK, 2)
    sB = moye.shared_array(B.dtype, sB_layout)          # (bN, bK, 2)
    mA, mB, mC = MoYeArray(A), MoYeArray(B), MoYeArray(C)
    bM, bN, bK = size(sA_layout, 0), size(sB_layout, 0), size(sB_layout, 1)
    gA = tile(mA, (bM, bK), (moye.block_idx.x, None))               # (bM, bK, k)
    gB = tile(mB, (bN, bK), (moye.block_idx.y, None))               # (bN, bK, k)
    gC = tile(mC, (bM, bN), (moye.block_idx.x, moye.block_idx.y))   # (bM, bN)

    # gmem copy partitions
    gmem_thr_copy_A = get_slice(gmem_copy_A, moye.thread_idx.x)
    tAgA = partition_S(gmem_thr_copy_A, gA)             # (CPY, CPY_M, CPY_K, k)
    tAsA = partition_D(gmem_thr_copy_A, sA)             # (CPY, CPY_M, CPY_K, 2)
    gmem_thr_copy_B = get_slice(gmem_copy_B, moye.thread_idx.x)
    tBgB = partition_S(gmem_thr_copy_B, gB)             # (CPY, CPY_N, CPY_K, k)
    tBsB = partition_D(gmem_thr_copy_B, sB)             # (CPY, CPY_N, CPY_K, 2)

    # copy gmem to smem for k_tile 0
    copyto(gmem_copy_A, tAsA[:, :, :, 0], tAgA[:, :, :, 0])
    copyto(gmem_copy_B, tBsB[:, :, :, 0], tBgB[:, :, :, 0])

    # mma partitions
    thr_mma = get_slice(mma, moye.thread_idx.x)
    tCsA = partition_A(thr_mma, sA)                     # (MMA, MMA_M, MMA_K, 2)
    tCsB = partition_B(thr_mma, sB)                     # (MMA, MMA_N, MMA_K, 2)
    tCgC = partition_C(thr_mma, gC)                     # (MMA, MMA_M, MMA_N)
    tCrA = make_fragment_A(thr_mma, tCsA[:, :, :, 0])   # (MMA, MMA_M, MMA_K)
    tCrB = make_fragment_B(thr_mma, tCsB[:, :, :, 0])   # (MMA, MMA_N, MMA_K)
    tCrC = make_fragment_C(thr_mma, tCgC)               # (MMA, MMA_M, MMA_N)
    zeros_(tCrC)

    # shared -> registers, retiled for the smem copies
    smem_thr_copy_A = get_slice(smem_copy_A, moye.thread_idx.x)
    smem_thr_copy_B = get_slice(smem_copy_B, moye.thread_idx.x)
    tCsA_retiled = partition_S(smem_thr_copy_A, sA)     # (CPY, CPY_M, CPY_K, 2)
    tCsB_retiled = partition_S(smem_thr_copy_B, sB)     # (CPY, CPY_N, CPY_K, 2)
    tCrA_retiled = retile_D(smem_thr_copy_A, tCrA)      # (CPY, CPY_M, CPY_K)
    tCrB_retiled = retile_D(smem_thr_copy_B, tCrB)      # (CPY, CPY_N, CPY_K)

    moye.cp_async_wait()
    moye.sync_threads()

    # copy smem to rmem for k_block 0
    smem_read = 0
    smem_write = 1
    tCsA_p = tCsA_retiled[:, :, :, smem_read]
    tCsB_p = tCsB_retiled[:, :, :, smem_read]
    copyto(smem_copy_A, tCrA_retiled[:, :, 0], tCsA_p[:, :, 0])
    copyto(smem_copy_B, tCrB_retiled[:, :, 0], tCsB_p[:, :, 0])

    k_tile_max = size(tAgA, 3)
    k_block_max = size(tCrA, 2)
    for k_tile in range(k_tile_max):                    # run-time loop
        for k_block in range(k_block_max):              # static: unrolled
            k_block_next = k_block + 1
            if k_block == k_block_max - 1:
                moye.cp_async_wait()
                moye.sync_threads()
                tCsA_p = tCsA_retiled[:, :, :, smem_read]
                tCsB_p = tCsB_retiled[:, :, :, smem_read]
                k_block_next = 0

            copyto(smem_copy_A, tCrA_retiled[:, :, k_block_next], tCsA_p[:, :, k_block_next])
            copyto(smem_copy_B, tCrB_retiled[:, :, k_block_next], tCsB_p[:, :, k_block_next])

            if k_block == 0 and k_tile < k_tile_max - 1:
                copyto(gmem_copy_A, tAsA[:, :, :, smem_write], tAgA[:, :, :, k_tile + 1])
                copyto(gmem_copy_B, tBsB[:, :, :, smem_write], tBgB[:, :, :, k_tile + 1])
                smem_read, smem_write = smem_write, smem_read

            gemm(mma, tCrC, tCrA[:, :, k_block], tCrB[:, :, k_block], tCrC)
    copyto(tCgC, tCrC)


def make_config():
    """The kernel's layouts and atoms after the line `A, B, C` in its signature:
    (sA_layout, gmem_copy_A, smem_copy_A, sB_layout, gmem_copy_B, smem_copy_B, mma)."""
    bM, bN, bK = 128, 128, 16
    mma = make_tiled_mma(MMAOP_16x8x8_F32TF32TF32F32_TN, Layout((2, 2, 1), (2, 1, 1)),
                         (32, 32, 8))
    # A is M-major: threads along M, four consecutive floats each
    gmem_copy_A = make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEALWAYS(UInt128), Float32),
                                  Layout((16, 8)), Layout((4, 1)))
    # B is K-major: four threads along a row of 16 k, four floats each
    gmem_copy_B = make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEALWAYS(UInt128), Float32),
                                  Layout((32, 4), (4, 1)), Layout((1, 4)))
    # ldmatrix reads 16-byte rows; A's rows run along M, so A takes plain loads
    smem_copy_A = make_tiled_copy_A(CopyAtom(UniversalCopy(Float32), Float32), mma)
    smem_copy_B = make_tiled_copy_B(CopyAtom(LDSM_U32x4_N, Float32), mma)
    # Padded stages (the seed's are (1, 128, 2048) and (16, 1, 2048)): with a column
    # stride of bM + 8 the MMA's A reads (8 m x 4 k per warp) fall in 32 banks;
    # with a row stride of bK + 4 the eight 16-byte rows of each ldmatrix matrix
    # do. Both keep the 16-byte alignment cp.async and ldmatrix need.
    sA_layout = make_layout((bM, bK, 2), (1, bM + 8, (bM + 8) * bK))
    sB_layout = make_layout((bN, bK, 2), (bK + 4, 1, bN * (bK + 4)))
    return sA_layout, gmem_copy_A, smem_copy_A, sB_layout, gmem_copy_B, smem_copy_B, mma


def launch(A, B, C):
    """C = A * B^T; A (M, K) column-major, B (N, K) row-major, C (M, N)
    column-major float32; M and N multiples of 128, K a multiple of 16."""
    sA, gA, sA_copy, sB, gB, sB_copy, mma = make_config()
    M, N = A.shape[0], B.shape[0]
    matmul_kernel[(M // 128, N // 128), size(mma)](A, sA, gA, sA_copy, B, sB, gB, sB_copy, C, mma)


def main(M=2048, N=2048, K=256):
    from ._common import check_matmul
    check_matmul("tensor_core_double_buffer", launch, M, N, K, b_k_major=True,
                 precision="tf32", tol=1e-3)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))

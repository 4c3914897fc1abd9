"""A production GEMM written with moye: fp16 or bf16 inputs, fp32
accumulation, D = alpha * A @ B^T + beta * C, on Ampere-style tensor cores.

    python -m moye.examples.gemm [M N K] [float16|bfloat16]

- A (M, K) and B (N, K), each K-major (torch row-major) or M/N-major
  (the transposed view of one); C and D (M, N) row-major.
- Shared memory in swizzled layouts (Swizzle o (8, 64) atoms), written by
  cp.async in a multistage pipeline and read by ldmatrix (.trans for
  M/N-major operands) without bank conflicts.
- mma.sync m16n8k16 tiled over 2x2 warps, each warp a 64x64 piece of the
  128x128 block tile.
- An epilogue through shared memory: alpha * accumulators are converted and
  stored to a padded tile, then 16-byte vectors are read back and written to
  D with beta * C added, coalesced.
M and N must be multiples of 128, K of 32 (`launch` says so otherwise).
"""
import sys

import moye
from moye import (CopyAtom, Layout, MoYeArray, Swizzle, UInt128, composition, copyto, gemm,
                  get_slice, make_fragment_like, make_layout, make_tiled_copy, make_tiled_copy_A,
                  make_tiled_copy_B, make_tiled_mma, partition_C, partition_D,
                  partition_fragment_A, partition_fragment_B, partition_fragment_C, partition_S,
                  retile_D, size, tile, tile_to_shape, zeros_)


@moye.kernel
def gemm_kernel(A, B, D, C, alpha, beta, sA_layout, sB_layout, copy_A, copy_B, mma, s2r_A,
                s2r_B, sC_layout, copy_C, stages: moye.Constexpr):
    bM, bK, bN = size(sA_layout, 0), size(sA_layout, 1), size(sB_layout, 0)
    tid = moye.thread_idx.x
    sA = moye.shared_array(A.dtype, sA_layout)                  # (bM, bK, stages)
    sB = moye.shared_array(B.dtype, sB_layout)                  # (bN, bK, stages)
    gA = tile(MoYeArray(A), (bM, bK), (moye.block_idx.x, None))  # (bM, bK, k)
    gB = tile(MoYeArray(B), (bN, bK), (moye.block_idx.y, None))  # (bN, bK, k)

    # global -> shared: cp.async of 16 bytes per thread and copy
    thr_a, thr_b = get_slice(copy_A, tid), get_slice(copy_B, tid)
    tAgA, tAsA = partition_S(thr_a, gA), partition_D(thr_a, sA)   # (CPY, M, K, k|stage)
    tBgB, tBsB = partition_S(thr_b, gB), partition_D(thr_b, sB)

    # the MMA's register fragments, and ldmatrix copies shaped for them
    thr_mma = get_slice(mma, tid)
    tCrA = partition_fragment_A(thr_mma, sA[:, :, 0])             # (MMA, MMA_M, MMA_K)
    tCrB = partition_fragment_B(thr_mma, sB[:, :, 0])             # (MMA, MMA_N, MMA_K)
    sC = moye.shared_array(D.dtype, sC_layout)                    # (bM, bN)
    tCrC = partition_fragment_C(thr_mma, sC)                      # (MMA, MMA_M, MMA_N)
    zeros_(tCrC)
    ldsm_a = get_slice(make_tiled_copy_A(s2r_A, mma), tid)
    tXsA, tXrA = partition_S(ldsm_a, sA), retile_D(ldsm_a, tCrA)
    ldsm_b = get_slice(make_tiled_copy_B(s2r_B, mma), tid)
    tXsB, tXrB = partition_S(ldsm_b, sB), retile_D(ldsm_b, tCrB)

    k_tiles = size(tAgA, 3)
    for s in range(stages - 1):                 # prologue: the first stages - 1 tiles
        if s < k_tiles:
            copyto(copy_A, tAsA[:, :, :, s], tAgA[:, :, :, s])
            copyto(copy_B, tBsB[:, :, :, s], tBgB[:, :, :, s])
        moye.cp_async_commit()

    # the main loop: wait for tile k, refill the stage read last time with tile
    # k + stages - 1, and multiply tile k block by block from registers
    smem_read, smem_write = 0, stages - 1
    for k in range(k_tiles):
        moye.cp_async_wait(stages - 2)          # tile k has landed (this thread's copies)
        moye.sync_threads()                     # ... everyone's; the write stage is free
        if k + stages - 1 < k_tiles:
            copyto(copy_A, tAsA[:, :, :, smem_write], tAgA[:, :, :, k + stages - 1])
            copyto(copy_B, tBsB[:, :, :, smem_write], tBgB[:, :, :, k + stages - 1])
        moye.cp_async_commit()
        for kb in range(size(tCrA, 2)):
            copyto(s2r_A, tXrA[:, :, kb], tXsA[:, :, kb, smem_read])
            copyto(s2r_B, tXrB[:, :, kb], tXsB[:, :, kb, smem_read])
            gemm(mma, tCrC, tCrA[:, :, kb], tCrB[:, :, kb], tCrC)
        smem_write = smem_read
        smem_read = moye.ifelse(smem_read == stages - 1, 0, smem_read + 1)

    # epilogue: alpha * acc -> shared (converted), then 16-byte rows to D with beta * C
    tCsC = partition_C(thr_mma, sC)
    tCrD = make_fragment_like(tCsC)
    for i in range(size(tCrD)):
        tCrD[i] = alpha * tCrC[i]
    copyto(tCsC, tCrD)
    moye.sync_threads()
    thr_c = get_slice(copy_C, tid)
    gD = tile(MoYeArray(D), (bM, bN), (moye.block_idx.x, moye.block_idx.y))
    gC = tile(MoYeArray(C), (bM, bN), (moye.block_idx.x, moye.block_idx.y))
    tDsC, tDgD, tDgC = partition_S(thr_c, sC), partition_D(thr_c, gD), partition_D(thr_c, gC)
    out = make_fragment_like(tDsC)
    copyto(copy_C, out, tDsC)
    if beta != 0:
        old = make_fragment_like(tDgC)
        copyto(copy_C, old, tDgC)
        for i in range(size(out)):
            out[i] = out[i] + beta * old[i]
    copyto(copy_C, tDgD, out)


def _major(t):
    """'K' if the tensor's second mode is contiguous, else 'MN'."""
    return "K" if t.stride(1) == 1 else "MN"


def make_config(dtype, a_major="K", b_major="K", bM=128, bN=128, bK=32, stages=4,
                warps=(2, 2)):
    """The static arguments of gemm_kernel for one data type and operand layout."""
    from moye import LDSM_U16x8_T, LDSM_U32x4_N, MMAOP_16x8x16_F32BF16BF16F32_TN, \
        MMAOP_16x8x16_F32F16F16F32_TN, CPOP_ASYNC_CACHEGLOBAL
    dtype = moye.as_element_type(dtype)
    op = {"Float16": MMAOP_16x8x16_F32F16F16F32_TN,
          "BFloat16": MMAOP_16x8x16_F32BF16BF16F32_TN}[dtype.name]
    threads = 32 * warps[0] * warps[1]
    mma = make_tiled_mma(op, Layout((warps[0], warps[1], 1)), (16 * warps[0], 16 * warps[1], 16))
    g2s = CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), dtype)

    def operand(rows, major):
        if major == "K":            # rows of bK contiguous halves; 8x64 swizzled atoms
            kb = min(bK, 64)
            atom = composition(Swizzle({16: 1, 32: 2, 64: 3}[kb], 3, 3),
                               Layout((8, kb), (kb, 1)))
            per_row = bK // 8
            thr = make_layout((threads // per_row, per_row), (per_row, 1))
            copy = make_tiled_copy(g2s, thr, Layout((1, 8)))
            return tile_to_shape(atom, (rows, bK, stages)), copy, CopyAtom(LDSM_U32x4_N, dtype)
        atom = composition(Swizzle(3, 3, 3), Layout((64, 8), (1, 64)))
        per_col = rows // 8
        thr = make_layout((per_col, threads // per_col), (1, per_col))
        copy = make_tiled_copy(g2s, thr, Layout((8, 1)))
        return tile_to_shape(atom, (rows, bK, stages)), copy, CopyAtom(LDSM_U16x8_T, dtype)

    sA, copy_A, s2r_A = operand(bM, a_major)
    sB, copy_B, s2r_B = operand(bN, b_major)
    sC = make_layout((bM, bN), (bN + 8, 1))          # padded rows: conflict-free stores
    per_row = bN // 8
    copy_C = make_tiled_copy(CopyAtom(moye.UniversalCopy(UInt128), dtype),
                             make_layout((threads // per_row, per_row), (per_row, 1)),
                             Layout((1, 8)))
    return (sA, sB, copy_A, copy_B, mma, s2r_A, s2r_B, sC, copy_C, stages), threads


def launch(A, B, D, C=None, alpha=1.0, beta=0.0, **config):
    """D = alpha * A @ B.T + beta * C for torch fp16/bf16 tensors A (M,K), B (N,K)."""
    M, K = A.shape
    N = B.shape[0]
    bM, bN, bK = config.get("bM", 128), config.get("bN", 128), config.get("bK", 32)
    if M % bM or N % bN or K % bK:
        raise ValueError(f"gemm: M={M}, N={N}, K={K} must be multiples of the tile "
                         f"({bM}, {bN}, {bK})")
    if C is None:
        C, beta = D, 0.0
    args, threads = make_config(_dtype(A), _major(A), _major(B), **config)
    gemm_kernel[(M // bM, N // bN), threads](A, B, D, C, float(alpha), float(beta), *args)


def _dtype(t):
    return {"torch.float16": "Float16", "torch.bfloat16": "BFloat16"}[str(t.dtype)]


def main(M=4096, N=4096, K=4096, dtype="float16"):
    from ._common import rel_error, torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("gemm: no CUDA device; see the CPU backend")
        return
    dt = getattr(torch, dtype)
    for a_major, b_major in (("K", "K"), ("M", "K"), ("K", "N"), ("M", "N")):
        A = torch.randn(M, K, device="cuda", dtype=dt) if a_major == "K" else \
            torch.randn(K, M, device="cuda", dtype=dt).t()
        B = torch.randn(N, K, device="cuda", dtype=dt) if b_major == "K" else \
            torch.randn(K, N, device="cuda", dtype=dt).t()
        C = torch.randn(M, N, device="cuda", dtype=dt)
        D = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
        launch(A, B, D, C, alpha=0.5, beta=-1.5)
        torch.cuda.synchronize()
        ref = 0.5 * (A.double() @ B.double().t()) - 1.5 * C.double()
        err = rel_error(D.float().cpu().numpy(), ref.cpu().numpy())
        print(f"gemm {M}x{N}x{K} {dtype} A {a_major}-major, B {b_major}-major on "
              f"{torch.cuda.get_device_name()}: relative error {err:.2e}")
        assert err < (1e-2 if dtype == "bfloat16" else 2e-3)


if __name__ == "__main__":
    nums = [int(x) for x in sys.argv[1:4]]
    main(*nums, **({"dtype": sys.argv[4]} if len(sys.argv) > 4 else {}))

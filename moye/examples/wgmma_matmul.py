"""A minimal Hopper matmul: one warpgroup per block, TMA loads into
128-byte-swizzled shared memory, wgmma from there.

    python -m moye.examples.wgmma_matmul [M N K [bN]]

C = A * B^T with A (M, K) and B (N, K) row-major fp16 (K-major, so
C = A @ B.T), C (M, N) row-major fp32. Each block of 128 threads computes a
64 x bN tile of C (bN 64, 128 or 256), looping over K by 64: one thread
loads the (64, 64) tiles of A and B with TMA, completing on an mbarrier
whose phase flips each k-tile; the warpgroup waits on it, issues four
wgmma.m64nNk16 (their descriptors read the GMMA 128B-swizzled layout of
gmma_smem_layout, which is also TMA's 128B box layout), waits for them, and
a barrier frees the tiles for the next loads. M a multiple of 64, N of
bN, K of 64 (no predication).
"""
import sys

import moye
from moye import Float16, Float32, MoYeArray, copyto, gemm, make_tiled_mma, tile

THREADS = 128
BM, BK = 64, 64


@moye.kernel
def wgmma_matmul_kernel(C, load_a, load_b, mma, k_tiles):
    sA = moye.shared_array(load_a.dtype, load_a.smem_layout, align=1024)
    sB = moye.shared_array(load_b.dtype, load_b.smem_layout, align=1024)
    bar = moye.mbarrier()
    bM, bK = load_a.tile
    bN = load_b.tile[0]
    tid = moye.thread_idx.x
    m0, n0 = moye.block_idx.x * bM, moye.block_idx.y * bN
    gC = tile(MoYeArray(C), (bM, bN), (moye.block_idx.x, moye.block_idx.y))
    thr = mma.get_slice(tid)
    tCsA = thr.partition_A(sA)                  # ((64,16), 1, 4): one wgmma per k-step
    tCsB = thr.partition_B(sB)                  # ((bN,16), 1, 4)
    tCgC = thr.partition_C(gC)
    acc = thr.partition_fragment_C(gC)          # bN / 2 fp32 registers, in PTX order
    for i in range(moye.size(acc)):
        acc[i] = 0.0
    if tid == 0:
        moye.mbarrier_init(bar, 1)
        moye.fence_barrier_init()
    moye.sync_threads()
    for k in range(k_tiles):
        if tid == 0:
            moye.mbarrier_arrive_expect_tx(bar, load_a.bytes + load_b.bytes)
            moye.tma_load(load_a, sA, (m0, k * bK), bar)
            moye.tma_load(load_b, sB, (n0, k * bK), bar)
        moye.mbarrier_wait(bar, k % 2)
        gemm(mma, acc, tCsA, tCsB, acc)         # fence, 4 x wgmma, commit
        moye.wgmma_wait(0)
        moye.sync_threads()                     # every thread done with sA, sB
    copyto(tCgC, acc)


def tiles(A, B, bN=128):
    """The TMA copies of A's (64, 64) and B's (bN, 64) tiles and the wgmma
    TiledMMA for a 64 x bN x 64 block tile."""
    sA = moye.gmma_smem_layout(Float16, "K", 128, (BM, BK))
    sB = moye.gmma_smem_layout(Float16, "K", 128, (bN, BK))
    load_a = moye.make_tma_copy(moye.TMA_LOAD, A, sA)
    load_b = moye.make_tma_copy(moye.TMA_LOAD, B, sB)
    mma = make_tiled_mma(moye.wgmma_op(bN, Float16, Float16, Float32))
    return load_a, load_b, mma


def matmul(C, A, B, bN=128):
    """C = A * B^T (fp16 in, fp32 out), on the arrays' device."""
    (M, K), N = A.shape, B.shape[0]
    if M % BM or N % bN or K % BK or C.shape != (M, N):
        raise moye.MoyeError(f"wgmma_matmul: A {tuple(A.shape)}, B {tuple(B.shape)}, C "
                             f"{tuple(C.shape)}: need C (M, N), M a multiple of {BM}, N of "
                             f"{bN}, K of {BK}")
    load_a, load_b, mma = tiles(A, B, bN)
    wgmma_matmul_kernel[(M // BM, N // bN), THREADS](C, load_a, load_b, mma, K // BK)


def main(M=1024, N=1024, K=1024, bN=128):
    from ._common import torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("wgmma_matmul: no CUDA device; see the CPU backend")
        return
    if torch.cuda.get_device_capability() < (9, 0):
        print("wgmma_matmul: wgmma needs a Hopper GPU (sm_90a)")
        return
    A = torch.randn(M, K, device="cuda").half()
    B = torch.randn(N, K, device="cuda").half()
    C = torch.full((M, N), float("nan"), device="cuda")
    matmul(C, A, B, bN)
    torch.cuda.synchronize()
    want = A.float() @ B.float().T
    err = ((C - want).abs().max() / want.abs().max()).item()
    print(f"wgmma_matmul {M}x{N}x{K} (tile 64x{bN}x64): max error / max |C| = {err:.2e}")
    assert err < 1e-3, err


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:]))

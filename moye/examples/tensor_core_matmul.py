"""Tensor-core matmuls: MoYe's tensor-core manual in Python.

    python -m moye.examples.tensor_core_matmul [tf32|ldmatrix|double] [M N K]

C = A * B^T with A (M, K) and B (N, K) K-major (row-major torch tensors, so
C = A @ B.T), fp32 accumulators. Any M and N; K a multiple of the 16 bytes one
cp.async copies (4 floats, 8 halves). Where the block tile does not divide
them, the kernels are specialized with `residue`: identity arrays tiled and
partitioned like A, B and C give each element's coordinates, cp.async
zero-fills shared memory outside A and B, and C is stored only inside.

- `tf32`: the minimal kernel: cp.async global -> shared, one
  MMAOP_16x8x8_F32TF32TF32F32_TN atom tiled 2x2 over four warps, fragments
  loaded element by element from shared memory.
- `ldmatrix`: fp16 with MMAOP_16x8x16_F32F16F16F32_TN; shared memory to
  registers with LDSM_U32x4_N through make_tiled_copy_A/B.
- `double`: the 128x128x16 fp16 kernel double-buffered twice: two shared
  stages filled by cp.async while the tensor cores work on the other, and
  the next k-block's ldmatrix issued before this one's mma.
"""
import sys

import moye
from moye import (Bool, CopyAtom, Layout, MoYeArray, copy_if, copyto, elem_less, gemm,
                  get_slice, make_copy_predicate, make_fragment_A, make_fragment_B,
                  make_fragment_C, make_fragment_like, make_identity_array, make_layout,
                  make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B, make_tiled_mma,
                  partition_A, partition_B, partition_C, partition_D, partition_S, retile_D,
                  shape, size, tile, zeros_)


class Residue:
    """The coordinates of a block's tiles of A, B and C, partitioned as the
    kernel partitions the data, and the predicated copies they drive."""

    def __init__(self, A, B, C, tiles, copy_A, copy_B, thr_mma):
        (bM, bN, bK), tid = tiles, moye.thread_idx.x
        bx, by = moye.block_idx.x, moye.block_idx.y
        self.extents = shape(A), shape(B), shape(C)
        cA = tile(make_identity_array(shape(A)), (bM, bK), (bx, None))  # gA's coordinates
        cB = tile(make_identity_array(shape(B)), (bN, bK), (by, None))
        cC = tile(make_identity_array(shape(C)), (bM, bN), (bx, by))
        self.tAcA = partition_S(get_slice(copy_A, tid), cA)               # (CPY, M, K, k)
        self.tBcB = partition_S(get_slice(copy_B, tid), cB)
        self.tCcC = partition_C(thr_mma, cC)                              # (MMA, M, N)

    def load(self, copy_A, copy_B, tAsA, tAgA, tBsB, tBgB, k):
        """k-tile k of A and B to shared memory, zero-filled outside A and B."""
        copy_if(copy_A, make_copy_predicate(self.tAcA[:, :, :, k], self.extents[0]), tAsA,
                tAgA[:, :, :, k])
        copy_if(copy_B, make_copy_predicate(self.tBcB[:, :, :, k], self.extents[1]), tBsB,
                tBgB[:, :, :, k])

    def store(self, tCgC, tCrC):
        """The accumulators to C, element by element where inside C."""
        pred = make_fragment_like(self.tCcC.layout, Bool)
        for i in range(size(pred)):
            pred[i] = elem_less(self.tCcC[i], self.extents[2])
        copy_if(pred, tCgC, tCrC)


@moye.kernel
def tf32_kernel(A, B, C, sA_layout, sB_layout, copy_A, copy_B, mma, residue: moye.Constexpr):
    sA = moye.shared_array(A.dtype, sA_layout)
    sB = moye.shared_array(B.dtype, sB_layout)
    bM, bN, bK = size(sA_layout, 0), size(sB_layout, 0), size(sA_layout, 1)
    mA, mB, mC = MoYeArray(A), MoYeArray(B), MoYeArray(C)
    gA = tile(mA, (bM, bK), (moye.block_idx.x, None))      # (bM, bK, k)
    gB = tile(mB, (bN, bK), (moye.block_idx.y, None))      # (bN, bK, k)
    gC = tile(mC, (bM, bN), (moye.block_idx.x, moye.block_idx.y))

    tAgA = partition_S(get_slice(copy_A, moye.thread_idx.x), gA)
    tAsA = partition_D(get_slice(copy_A, moye.thread_idx.x), sA)
    tBgB = partition_S(get_slice(copy_B, moye.thread_idx.x), gB)
    tBsB = partition_D(get_slice(copy_B, moye.thread_idx.x), sB)

    thr_mma = get_slice(mma, moye.thread_idx.x)
    tCsA = partition_A(thr_mma, sA)
    tCsB = partition_B(thr_mma, sB)
    tCgC = partition_C(thr_mma, gC)
    tCrC = make_fragment_C(thr_mma, tCgC)
    zeros_(tCrC)
    if residue:         # static: a tile overhangs A, B or C
        edge = Residue(mA, mB, mC, (bM, bN, bK), copy_A, copy_B, thr_mma)

    for k in range(size(tAgA, 3)):
        if residue:
            edge.load(copy_A, copy_B, tAsA, tAgA, tBsB, tBgB, k)
        else:
            copyto(copy_A, tAsA, tAgA[:, :, :, k])
            copyto(copy_B, tBsB, tBgB[:, :, :, k])
        moye.cp_async_wait()
        moye.sync_threads()
        gemm(mma, tCrC, tCsA, tCsB, tCrC)
        moye.sync_threads()
    if residue:
        edge.store(tCgC, tCrC)
    else:
        copyto(tCgC, tCrC)


def tf32_config(residue=False):
    from moye import (CPOP_ASYNC_CACHEGLOBAL, MMAOP_16x8x8_F32TF32TF32F32_TN, Float32,
                      UInt128)
    bM, bN, bK = 64, 64, 16
    # K-major tiles, rows padded by 4 floats: 16-byte aligned rows, fewer bank conflicts
    sA = make_layout((bM, bK), (bK + 4, 1))
    sB = make_layout((bN, bK), (bK + 4, 1))
    atom = CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float32)
    # 128 threads, each moving 4 consecutive k of one row
    thr = make_layout((32, 4), (4, 1))
    copy = make_tiled_copy(atom, thr, Layout((1, 4)))
    mma = make_tiled_mma(MMAOP_16x8x8_F32TF32TF32F32_TN, Layout((2, 2, 1)))
    return (sA, sB, copy, copy, mma, residue), (bM, bN, bK)


@moye.kernel
def ldmatrix_kernel(A, B, C, sA_layout, sB_layout, copy_A, copy_B, mma, s2r_atom,
                    residue: moye.Constexpr):
    sA = moye.shared_array(A.dtype, sA_layout)
    sB = moye.shared_array(B.dtype, sB_layout)
    bM, bN, bK = size(sA_layout, 0), size(sB_layout, 0), size(sA_layout, 1)
    mA, mB, mC = MoYeArray(A), MoYeArray(B), MoYeArray(C)
    gA = tile(mA, (bM, bK), (moye.block_idx.x, None))
    gB = tile(mB, (bN, bK), (moye.block_idx.y, None))
    gC = tile(mC, (bM, bN), (moye.block_idx.x, moye.block_idx.y))

    tAgA = partition_S(get_slice(copy_A, moye.thread_idx.x), gA)
    tAsA = partition_D(get_slice(copy_A, moye.thread_idx.x), sA)
    tBgB = partition_S(get_slice(copy_B, moye.thread_idx.x), gB)
    tBsB = partition_D(get_slice(copy_B, moye.thread_idx.x), sB)

    thr_mma = get_slice(mma, moye.thread_idx.x)
    tCrA = make_fragment_A(thr_mma, partition_A(thr_mma, sA))       # (MMA, MMA_M, MMA_K)
    tCrB = make_fragment_B(thr_mma, partition_B(thr_mma, sB))       # (MMA, MMA_N, MMA_K)
    tCgC = partition_C(thr_mma, gC)
    tCrC = make_fragment_C(thr_mma, tCgC)
    zeros_(tCrC)
    if residue:
        edge = Residue(mA, mB, mC, (bM, bN, bK), copy_A, copy_B, thr_mma)

    # shared -> registers with ldmatrix, laid out as the MMA wants
    s2r_A = get_slice(make_tiled_copy_A(s2r_atom, mma), moye.thread_idx.x)
    tXsA, tXrA = partition_S(s2r_A, sA), retile_D(s2r_A, tCrA)
    s2r_B = get_slice(make_tiled_copy_B(s2r_atom, mma), moye.thread_idx.x)
    tXsB, tXrB = partition_S(s2r_B, sB), retile_D(s2r_B, tCrB)

    for k in range(size(tAgA, 3)):
        if residue:
            edge.load(copy_A, copy_B, tAsA, tAgA, tBsB, tBgB, k)
        else:
            copyto(copy_A, tAsA, tAgA[:, :, :, k])
            copyto(copy_B, tBsB, tBgB[:, :, :, k])
        moye.cp_async_wait()
        moye.sync_threads()
        copyto(s2r_atom, tXrA, tXsA)
        copyto(s2r_atom, tXrB, tXsB)
        gemm(mma, tCrC, tCrA, tCrB, tCrC)
        moye.sync_threads()
    if residue:
        edge.store(tCgC, tCrC)
    else:
        copyto(tCgC, tCrC)


def ldmatrix_config(bM=64, bN=64, bK=32, stages=None, residue=False):
    from moye import (CPOP_ASYNC_CACHEGLOBAL, LDSM_U32x4_N, MMAOP_16x8x16_F32F16F16F32_TN,
                      Float16, UInt128)
    # K-major tiles, rows padded by 8 halves (16 bytes): ldmatrix rows stay aligned and
    # the 8 rows of a matrix fall in different banks
    shape = (bM, bK) if stages is None else (bM, bK, stages)
    sA = make_layout(shape, (bK + 8, 1) if stages is None else (bK + 8, 1, bM * (bK + 8)))
    shape = (bN, bK) if stages is None else (bN, bK, stages)
    sB = make_layout(shape, (bK + 8, 1) if stages is None else (bK + 8, 1, bN * (bK + 8)))
    atom = CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float16)
    per_row = bK // 8                                   # threads per row of 8-half vectors
    thr = make_layout((128 // per_row, per_row), (per_row, 1))
    copy = make_tiled_copy(atom, thr, Layout((1, 8)))
    mma = make_tiled_mma(MMAOP_16x8x16_F32F16F16F32_TN, Layout((2, 2, 1)),
                         (32, 32, 16))
    s2r = CopyAtom(LDSM_U32x4_N, Float16)
    return (sA, sB, copy, copy, mma, s2r, residue), (bM, bN, bK)


VARIANTS = {"tf32": (tf32_kernel, tf32_config, "float32", 1e-3),
            "ldmatrix": (ldmatrix_kernel, ldmatrix_config, "float16", 1e-3)}


def launch(variant, A, B, C):
    """C = A * B^T: A (M, K), B (N, K) row-major in the variant's type, C (M, N)
    float32; torch tensors, or NumPy arrays on the CPU backend."""
    kern, config, dtype, _ = VARIANTS[variant]
    (M, K), N = A.shape, B.shape[0]
    vector = 4 if dtype == "float32" else 8        # elements per 16-byte cp.async
    if K % vector:
        raise moye.MoyeError(f"tensor_core_matmul {variant}: K = {K} must be a multiple of "
                             f"{vector}: each 16-byte cp.async copies {vector} contiguous "
                             f"{dtype} elements of a row of A and B")
    _, (bM, bN, bK) = config()
    args, _ = config(residue=bool(M % bM or N % bN or K % bK))
    kern[(-(-M // bM), -(-N // bN)), 128](A, B, C, *args)


def main(variant="tf32", M=2048, N=2048, K=256):
    from ._common import rel_error, torch_cuda
    torch = torch_cuda()
    if torch is None:
        print(f"tensor_core_matmul {variant}: no CUDA device; see the CPU backend")
        return
    _, _, dtype, tol = VARIANTS[variant]
    dt = getattr(torch, dtype)
    A = torch.randn(M, K, device="cuda").to(dt)
    B = torch.randn(N, K, device="cuda").to(dt)
    C = torch.full((N, M), float("nan"), device="cuda").t()          # column-major (M, N)
    launch(variant, A, B, C)
    torch.cuda.synchronize()
    ref = A.double() @ B.double().t()
    err = rel_error(C.cpu().numpy(), ref.cpu().numpy())
    print(f"tensor_core_matmul {variant} {M}x{N}x{K} {dtype} on "
          f"{torch.cuda.get_device_name()}: relative error {err:.2e}")
    assert err < tol


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tf32", *map(int, sys.argv[2:5]))

"""A production GEMM written with moye: fp16 or bf16 inputs, fp32
accumulation, D = alpha * A @ B^T + beta * C, on Ampere-style tensor cores.

    python -m moye.examples.gemm [M N K] [float16|bfloat16]     (e.g. 1000 1000 1000)

- A (M, K) and B (N, K), each K-major (torch row-major) or M/N-major
  (the transposed view of one); C and D (M, N) row-major.
- Shared memory in swizzled layouts (Swizzle o (8, 64) atoms), written by
  cp.async in a multistage pipeline and read by ldmatrix (.trans for
  M/N-major operands) without bank conflicts.
- mma.sync m16n8k16 tiled over 4x2 warps, each warp a 64x64 piece of the
  256x128 block tile (TILE; make_config takes others); the fragments of the
  next k-block are read with ldmatrix while the current one is multiplied,
  and the next tile's while the last k-block is.
- Blocks ordered in columns of `group` tiles (tile_of_block), so the blocks
  resident at once share their A and B tiles in L2.
- An epilogue through shared memory: alpha * accumulators are converted and
  stored to a padded tile (in the main loop's A or B buffers where one holds
  it), then 16-byte vectors are read back and written to D with beta * C
  added, coalesced.
- Any M, N, K: where the tiles do not divide them, the kernel is specialized
  with `residue` and predicates every copy on coordinates from identity
  arrays tiled like the data: cp.async zero-fills what lies outside A and B
  (so a partial k-tile adds nothing), and the epilogue stores only inside D.
  Divisible shapes run the unpredicated kernel. A predicate covers a whole
  vector, so vectors must not straddle an edge: each 16-byte cp.async moves 8
  contiguous elements, and each operand's contiguous extent (K for a K-major
  one, M or N otherwise) must be a multiple of 8 (`launch` says so
  otherwise); D is written in the widest vectors (8, 4, 2, 1) dividing N.
"""
import functools
import sys

import moye
from moye import (CopyAtom, Layout, MoYeArray, Swizzle, UInt128, composition, copy_if, copyto,
                  cosize,
                  gemm, get_slice, make_copy_predicate, make_fragment_like, make_identity_array,
                  make_layout, make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B,
                  make_tiled_mma, partition_C, partition_D, partition_fragment_A,
                  partition_fragment_B, partition_fragment_C, partition_S, retile_D, shape, size,
                  tile, tile_to_shape, zeros_)


def copy_tile(copy, dst, src, coords, extents):
    """copyto(copy, dst, src); with `coords` (the coordinates of the global
    side's elements), only the atoms inside `extents`."""
    if coords is None:
        copyto(copy, dst, src)
    else:
        copy_if(copy, make_copy_predicate(coords, extents), dst, src)


def epilogue_buffer(dtype, layout, *buffers):
    """Shared memory for the epilogue's tile: the first of the main loop's
    buffers that holds it (the loop is done with them by then), else its own."""
    for buf in buffers:
        if buf.engine.dtype is moye.as_element_type(dtype) and \
                cosize(layout) <= cosize(buf.layout):
            return MoYeArray.view_of(buf.engine, layout)
    return moye.shared_array(dtype, layout)


def tile_of_block(M, N, bM, bN, group):
    """The (m, n) tile of this block. With `group`, blocks run down columns of
    `group` tiles (a 1-D grid), so the blocks resident at once share A's and
    B's tiles in L2; else the 2-D grid's (block_idx.x, block_idx.y)."""
    if not group:
        return moye.block_idx.x, moye.block_idx.y
    tiles_m, tiles_n = (M + bM - 1) // bM, (N + bN - 1) // bN
    block, per_group = moye.block_idx.x, group * tiles_n
    first_m = block // per_group * group
    rows = moye.minimum(tiles_m - first_m, group)
    return first_m + block % per_group % rows, block % per_group // rows


def k_tile(partition, k):
    """Tile k of a (CPY, CPY_M, CPY_K, k) partition; None stays None."""
    return None if partition is None else partition[:, :, :, k]


@moye.kernel
def gemm_kernel(A, B, D, C, alpha, beta, sA_layout, sB_layout, copy_A, copy_B, mma, s2r_A,
                s2r_B, sC_layout, copy_C, stages: moye.Constexpr, residue: moye.Constexpr,
                group: moye.Constexpr):
    bM, bK, bN = size(sA_layout, 0), size(sA_layout, 1), size(sB_layout, 0)
    tid = moye.thread_idx.x
    mA, mB, mD, mC = MoYeArray(A), MoYeArray(B), MoYeArray(D), MoYeArray(C)
    bx, by = tile_of_block(size(mA, 0), size(mB, 0), bM, bN, group)
    sA = moye.shared_array(A.dtype, sA_layout)                  # (bM, bK, stages)
    sB = moye.shared_array(B.dtype, sB_layout)                  # (bN, bK, stages)
    gA = tile(mA, (bM, bK), (bx, None))                         # (bM, bK, k)
    gB = tile(mB, (bN, bK), (by, None))                         # (bN, bK, k)

    # global -> shared: cp.async of 16 bytes per thread and copy
    thr_a, thr_b = get_slice(copy_A, tid), get_slice(copy_B, tid)
    tAgA, tAsA = partition_S(thr_a, gA), partition_D(thr_a, sA)   # (CPY, M, K, k|stage)
    tBgB, tBsB = partition_S(thr_b, gB), partition_D(thr_b, sB)
    # where the tiles overhang A and B: the coordinates of gA's and gB's elements,
    # partitioned alike, predicate the copies (statically absent otherwise)
    tAcA = tBcB = None
    if residue:
        tAcA = partition_S(thr_a, tile(make_identity_array(shape(mA)), (bM, bK), (bx, None)))
        tBcB = partition_S(thr_b, tile(make_identity_array(shape(mB)), (bN, bK), (by, None)))

    # the MMA's register fragments, and ldmatrix copies shaped for them
    thr_mma = get_slice(mma, tid)
    tCrA = partition_fragment_A(thr_mma, sA[:, :, 0])             # (MMA, MMA_M, MMA_K)
    tCrB = partition_fragment_B(thr_mma, sB[:, :, 0])             # (MMA, MMA_N, MMA_K)
    sC = epilogue_buffer(D.dtype, sC_layout, sA, sB)              # (bM, bN)
    tCrC = partition_fragment_C(thr_mma, sC)                      # (MMA, MMA_M, MMA_N)
    zeros_(tCrC)
    ldsm_a = get_slice(make_tiled_copy_A(s2r_A, mma), tid)
    tXsA, tXrA = partition_S(ldsm_a, sA), retile_D(ldsm_a, tCrA)
    ldsm_b = get_slice(make_tiled_copy_B(s2r_B, mma), tid)
    tXsB, tXrB = partition_S(ldsm_b, sB), retile_D(ldsm_b, tCrB)

    k_tiles = size(tAgA, 3)
    for s in range(stages - 1):                 # prologue: the first stages - 1 tiles
        if s < k_tiles:
            copy_tile(copy_A, tAsA[:, :, :, s], tAgA[:, :, :, s], k_tile(tAcA, s), shape(mA))
            copy_tile(copy_B, tBsB[:, :, :, s], tBgB[:, :, :, s], k_tile(tBcB, s), shape(mB))
        moye.cp_async_commit()

    # the main loop, pipelined in shared memory (tile k + stages - 1 is copied
    # while tile k is multiplied) and in registers (k-block kb + 1 is read with
    # ldmatrix while k-block kb is multiplied; the last k-block reads k-block 0
    # of the next tile, after waiting for it)
    k_blocks = size(tCrA, 2)
    if k_blocks < 2:
        raise moye.MoyeError(f"gemm: bK = {bK} gives {k_blocks} k-block of the MMA; the "
                             "register pipeline needs two or more (bK >= 32)")
    smem_read, smem_write = 0, stages - 1
    moye.cp_async_wait(stages - 2)              # tile 0 has landed (this thread's copies)
    moye.sync_threads()                         # ... everyone's
    copyto(s2r_A, tXrA[:, :, 0], tXsA[:, :, 0, smem_read])
    copyto(s2r_B, tXrB[:, :, 0], tXsB[:, :, 0, smem_read])
    for k in range(k_tiles):
        smem_next = moye.ifelse(smem_read == stages - 1, 0, smem_read + 1)
        for kb in range(k_blocks):
            if kb == k_blocks - 1:
                moye.cp_async_wait(stages - 2)  # tile k + 1 has landed, and every thread
                moye.sync_threads()             # is done reading the stage written next
                copyto(s2r_A, tXrA[:, :, 0], tXsA[:, :, 0, smem_next])
                copyto(s2r_B, tXrB[:, :, 0], tXsB[:, :, 0, smem_next])
            else:
                copyto(s2r_A, tXrA[:, :, kb + 1], tXsA[:, :, kb + 1, smem_read])
                copyto(s2r_B, tXrB[:, :, kb + 1], tXsB[:, :, kb + 1, smem_read])
            if kb == 0:
                if k + stages - 1 < k_tiles:
                    k_next = k + stages - 1
                    copy_tile(copy_A, tAsA[:, :, :, smem_write], tAgA[:, :, :, k_next],
                              k_tile(tAcA, k_next), shape(mA))
                    copy_tile(copy_B, tBsB[:, :, :, smem_write], tBgB[:, :, :, k_next],
                              k_tile(tBcB, k_next), shape(mB))
                moye.cp_async_commit()
            gemm(mma, tCrC, tCrA[:, :, kb], tCrB[:, :, kb], tCrC)
        smem_write = smem_read
        smem_read = smem_next

    # epilogue: alpha * acc -> shared (converted), then 16-byte rows to D with beta * C
    tCsC = partition_C(thr_mma, sC)
    tCrD = make_fragment_like(tCsC)
    for i in range(size(tCrD)):
        tCrD[i] = alpha * tCrC[i]
    moye.cp_async_wait(0)                       # sC may be a pipeline buffer: all copies
    moye.sync_threads()                         # into it and reads of it are done
    copyto(tCsC, tCrD)
    moye.sync_threads()
    thr_c = get_slice(copy_C, tid)
    gD = tile(mD, (bM, bN), (bx, by))
    gC = tile(mC, (bM, bN), (bx, by))
    tDsC, tDgD, tDgC = partition_S(thr_c, sC), partition_D(thr_c, gD), partition_D(thr_c, gC)
    tDcD = None
    if residue:
        tDcD = partition_D(thr_c, tile(make_identity_array(shape(mD)), (bM, bN), (bx, by)))
    out = make_fragment_like(tDsC)
    copyto(copy_C, out, tDsC)
    if beta != 0:
        old = make_fragment_like(tDgC)
        copy_tile(copy_C, old, tDgC, tDcD, shape(mD))
        for i in range(size(out)):
            out[i] = out[i] + beta * old[i]
    copy_tile(copy_C, tDgD, out, tDcD, shape(mD))


# the default tile: the fastest on an H100 (benchmarks/RESULTS.md)
TILE = {"bM": 256, "bN": 128, "bK": 64, "stages": 3, "warps": (4, 2), "group": 16}


def make_config(dtype, a_major="K", b_major="K", bM=TILE["bM"], bN=TILE["bN"], bK=TILE["bK"],
                stages=TILE["stages"], warps=TILE["warps"], group=TILE["group"], residue=False,
                d_vector=8):
    """The static arguments of gemm_kernel for one data type and operand
    layout; `residue` predicates the copies (tiles that overhang A, B or D),
    the epilogue writes D in vectors of `d_vector` elements, and `group`
    orders the blocks (0: a 2-D grid; see tile_of_block and `grid`)."""
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
    per_row = min(bN // d_vector, threads)
    vector = {8: UInt128, 4: moye.UInt64, 2: moye.UInt32, 1: dtype}[d_vector]
    copy_C = make_tiled_copy(CopyAtom(moye.UniversalCopy(vector), dtype),
                             make_layout((threads // per_row, per_row), (per_row, 1)),
                             Layout((1, d_vector)))
    return (sA, sB, copy_A, copy_B, mma, s2r_A, s2r_B, sC, copy_C, stages, residue,
            group), threads


def grid(M, N, bM=TILE["bM"], bN=TILE["bN"], group=TILE["group"], **_):
    """The launch grid of gemm_kernel for an M x N result with this config."""
    tiles = (-(-M // bM), -(-N // bN))
    return (tiles[0] * tiles[1],) if group else tiles


def launch(A, B, D, C=None, alpha=1.0, beta=0.0, **config):
    """D = alpha * A @ B.T + beta * C for fp16/bf16 arrays A (M,K), B (N,K)
    and row-major C, D (M,N): torch tensors, or NumPy arrays on the CPU
    backend. Any M, N, K; each operand's contiguous extent must be a
    multiple of 8 (16-byte cp.async)."""
    (M, K), N = A.shape, B.shape[0]
    if C is None:
        C, beta = D, 0.0
    _check_shapes(A, B, D, C)
    dtype = _dtype(A)
    a_major, b_major = _major(A), _major(B)
    for name, major, extents in (("A", a_major, {"K": K, "MN": M}),
                                 ("B", b_major, {"K": K, "MN": N})):
        extent = extents[major]
        if extent % 8:
            mn = "M" if name == "A" else "N"
            what, other = ("K", mn) if major == "K" else (mn, "K")
            raise moye.MoyeError(
                f"gemm: {what} = {extent} must be a multiple of 8 because {name} is "
                f"{what}-major: each 16-byte cp.async copies 8 contiguous {dtype} elements of "
                f"{name}; pad {name} or pass it {other}-major")
    config = {**TILE, **config}
    bM, bN, bK = config["bM"], config["bN"], config["bK"]
    config.setdefault("residue", bool(M % bM or N % bN or K % bK))
    config.setdefault("d_vector", next(v for v in (8, 4, 2, 1) if N % v == 0))
    args, threads = _config(dtype, a_major, b_major, tuple(sorted(
        (k, tuple(v) if isinstance(v, list) else v) for k, v in config.items())))
    gemm_kernel[grid(M, N, **config), threads](A, B, D, C, float(alpha), float(beta), *args)


@functools.lru_cache(maxsize=64)
def _config(dtype, a_major, b_major, items):
    """make_config, once per data type, operand layout and configuration
    (building the tiled copies and MMA takes about half a millisecond)."""
    return make_config(dtype, a_major, b_major, **dict(items))


def _check_shapes(A, B, D, C):
    (M, K), (N, K_B) = A.shape, B.shape
    if K_B != K:
        raise moye.MoyeError(f"gemm: A is {M}x{K} and B is {N}x{K_B}; B must be N x K "
                             f"(D = A @ B.T), with K = {K}")
    for name, t in (("D", D), ("C", C)):
        if tuple(t.shape) != (M, N):
            raise moye.MoyeError(f"gemm: {name} has shape {tuple(t.shape)}; expected "
                                 f"(M, N) = ({M}, {N})")
        if N > 1 and _strides(t)[1] != 1:
            raise moye.MoyeError(f"gemm: {name} must be row-major (unit stride along N), "
                                 f"got strides {_strides(t)}")


def _strides(t):
    """Strides in elements: torch's stride(), or NumPy's in bytes / itemsize."""
    if callable(getattr(t, "stride", None)):
        return tuple(t.stride())
    return tuple(s // t.itemsize for s in t.strides)


def _major(t):
    """'K' if the operand's second mode is contiguous, else 'MN'."""
    return "K" if _strides(t)[1] == 1 else "MN"


def _dtype(t):
    name = str(t.dtype)
    return {"torch.float16": "Float16", "torch.bfloat16": "BFloat16"}.get(name) or \
        moye.as_element_type(t.dtype).name


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
        try:
            launch(A, B, D, C, alpha=0.5, beta=-1.5)
        except moye.MoyeError as e:         # an extent this operand layout cannot take
            print(f"gemm {M}x{N}x{K} A {a_major}-major, B {b_major}-major: {e}")
            continue
        torch.cuda.synchronize()
        ref = 0.5 * (A.double() @ B.double().t()) - 1.5 * C.double()
        err = rel_error(D.float().cpu().numpy(), ref.cpu().numpy())
        print(f"gemm {M}x{N}x{K} {dtype} A {a_major}-major, B {b_major}-major on "
              f"{torch.cuda.get_device_name()}: relative error {err:.2e}")
        assert err < (1e-2 if dtype == "bfloat16" else 2e-3)


if __name__ == "__main__":
    nums = [int(x) for x in sys.argv[1:4]]
    main(*nums, **({"dtype": sys.argv[4]} if len(sys.argv) > 4 else {}))

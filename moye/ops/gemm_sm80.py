"""moye.ops.matmul's kernel for sm_80, sm_86 and sm_89: an mma.sync GEMM
with its epilogue fused (CUTLASS: the sm80 multistage GEMM; CuTe:
sgemm_sm80's cp.async + ldmatrix + mma.sync mainloop).

    out[b] = activation(alpha * a[b] @ b[b]^T + bias) + beta * residual[b]

a (M, K) or (Ba, M, K) and b (N, K) or (Bb, N, K) of float16 or bfloat16,
each K-major or M/N-major (the transposed view of one), its contiguous
extent a multiple of 8 (16-byte cp.async), or both float32, K-major (K a
multiple of 4), multiplied as tf32 (mma.sync m16n8k8, the tiles' bK
halved: the same bytes); a batch of 1 or batch stride 0
is one matrix shared by every batch. out (M, N) or (B, M, N) row-major, of
the inputs' type or float32; bias (N,) shared by the batches, of the inputs'
type or float32; residual (M, N) or (Br, M, N) of out's type, any strides.
Float32 accumulation; `epilogue_value` (moye/ops/epilogue.py) on every
accumulator, in float32, then one rounding to out's type.

The tutorial is moye/examples/gemm.py (the same kernel, D = alpha A B^T +
beta C): shared memory in swizzled layouts written by cp.async in a
multistage pipeline and read by ldmatrix, mma.sync m16n8k16 over a grid of
warps, copies predicated where the tiles overhang, blocks ordered so that
the ones resident at once share tiles in L2; the epilogue writes out
through shared memory in 16-byte rows where a pipeline buffer holds the
tile, else straight from the registers. Grid z runs over the batches.

    >>> import numpy as np
    >>> a, b = np.ones((2, 64, 32), np.float16), np.ones((48, 32), np.float16)    # b shared
    >>> out = np.full((2, 64, 48), np.nan, np.float32)
    >>> launch(a, b, out, bias=np.arange(48, dtype=np.float32), activation="relu",
    ...        config=CONFIGS[-1])
    >>> float(out[1, 5, 2]), float(out[0, 63, 47])
    (34.0, 79.0)
"""
import functools
from typing import NamedTuple

import moye
from moye import (CopyAtom, Layout, MoYeArray, Swizzle, UInt128, composition, copy_if, copyto,
                  cosize, elem_less, gemm, get_slice, make_copy_predicate, make_fragment_like,
                  make_identity_array, make_layout, make_tiled_copy, make_tiled_copy_A,
                  make_tiled_copy_B, make_tiled_mma, partition_C, partition_D,
                  partition_fragment_A, partition_fragment_B, partition_fragment_C, partition_S,
                  retile_D, shape, size, tile, tile_to_shape, zeros_)

from ..compiler.arguments import as_array_arg
from ..errors import MoyeError
from . import replay
from .epilogue import check_activation, epilogue_value


# -- the kernel ------------------------------------------------------------------------

def copy_tile(copy, dst, src, coords, extents):
    """copyto(copy, dst, src); with `coords` (the coordinates of the global
    side's elements), only the atoms inside `extents` (CuTe: copy_if)."""
    if coords is None:
        copyto(copy, dst, src)
    else:
        copy_if(copy, make_copy_predicate(coords, extents), dst, src)


def epilogue_buffer(dtype, layout, *buffers):
    """Shared memory for the epilogue's tile: the first of the main loop's
    buffers with room for it, seen as `dtype` (the loop is done with them by
    then), else its own."""
    dtype = moye.as_element_type(dtype)
    for buf in buffers:
        if cosize(layout) * dtype.bits <= cosize(buf.layout) * buf.dtype.bits:
            engine = buf.engine if buf.dtype is dtype else buf.engine.recast(dtype)
            return MoYeArray.view_of(engine, layout)
    return moye.shared_array(dtype, layout)


def tile_of_block(M, N, bM, bN, group):
    """The (m, n) tile of this block. With `group`, blocks run down columns of
    `group` tiles (a 1-D grid), so the blocks resident at once share A's and
    B's tiles in L2 (CUTLASS: the swizzled threadblock order); else the 2-D
    grid's (block_idx.x, block_idx.y)."""
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


def matrix(X, batch):
    """Batch `batch` of array X (rank 3), X itself (rank 2: shared by every
    batch), or None."""
    if X is None or len(X.shape) == 2:
        return X
    return X[batch, :, :]


@moye.func
def fused_epilogue(tCrD, tCrC, tCcC, origin, M, N, alpha, bias, C, beta, activation, residue):
    """tCrD[i] = epilogue_value of accumulator tCrC[i] at its coordinates (tCcC[i]
    in the tile at `origin` of D (M, N)), in float32. C is read under a predicate:
    only inside D, and not at all where beta is 0 (as BLAS: NaNs there drop out
    too). Bias is read at columns clamped into D; what lies outside D is not
    stored. (C read first, predicated rather than clamped: so ptxas keeps the
    predicated 256x128 kernel free of spills.) A device function, so that the
    loop stays one C++ loop, unrolled by NVRTC to the same SASS as 128 copies."""
    c_cols = None if C is None else moye.ifelse(beta != 0, N, 0)      # beta = 0: none
    for i in range(size(tCrD)):
        row, col, c = 0, 0, None
        if bias is not None or C is not None:
            row, col = tCcC[i] + origin
        if C is not None:
            c = value_inside(C, row, col, M, c_cols)
        v = epilogue_value(tCrC[i], row, moye.minimum(col, N - 1) if residue else col, alpha,
                           bias, None, beta, activation)
        if C is not None:
            v = v + beta * moye.cast(c, moye.Float32)
        tCrD[i] = v


@moye.func
def value_inside(X, row, col, M, N):
    """X[row, col], or 0 outside (M, N)."""
    x = make_fragment_like(Layout(1), X.dtype)
    x[0] = 0.0
    if elem_less((row, col), (M, N)):
        x[0] = X[row, col]
    return x[0]


@moye.kernel
def gemm_kernel(A, B, D, C, alpha, beta, sA_layout, sB_layout, copy_A, copy_B, mma, s2r_A,
                s2r_B, sC_layout, copy_C, stages: moye.Constexpr, residue: moye.Constexpr,
                group: moye.Constexpr, bias=None, activation: moye.Constexpr = None):
    """D = activation(alpha * A @ B^T + bias) + beta * C of one (bM, bN) tile
    per block; arrays of rank 3 are indexed by block_idx.z. C and bias may
    be None (left out), sC_layout None (D written from the registers)."""
    bM, bK, bN = size(sA_layout, 0), size(sA_layout, 1), size(sB_layout, 0)
    tid = moye.thread_idx.x
    mA, mB, mD, mC = (matrix(X, moye.block_idx.z) for X in (A, B, D, C))
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
    tCrC = partition_fragment_C(thr_mma, make_layout((bM, bN)))   # (MMA, MMA_M, MMA_N)
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

    # epilogue: the accumulators through epilogue_value into D's type, then D written
    # from the registers or through shared memory
    M, N = size(mD, 0), size(mD, 1)
    tCcC = partition_C(thr_mma, make_identity_array((bM, bN)))    # coordinates in the tile
    tCrD = make_fragment_like(tCrC, D.dtype)
    origin = (bx * bM, by * bN)
    fused_epilogue(tCrD, tCrC, tCcC, origin, M, N, alpha, bias, mC, beta, activation, residue)
    gD = tile(mD, (bM, bN), (bx, by))
    if sC_layout is None:                       # straight from the registers
        tCgD = partition_C(thr_mma, gD)
        if residue:
            for i in range(size(tCrD)):
                if elem_less(tCcC[i], (M - bx * bM, N - by * bN)):
                    tCgD[i] = tCrD[i]
        else:
            copyto(tCgD, tCrD)
        return
    # through shared memory: the tile (padded rows), then 16-byte rows of it to D
    sC = epilogue_buffer(D.dtype, sC_layout, sA, sB)              # (bM, bN)
    moye.cp_async_wait(0)                       # sC may be a pipeline buffer: all copies
    moye.sync_threads()                         # into it and reads of it are done
    copyto(partition_C(thr_mma, sC), tCrD)
    moye.sync_threads()
    thr_c = get_slice(copy_C, tid)
    tDsC, tDgD = partition_S(thr_c, sC), partition_D(thr_c, gD)
    tDcD = None
    if residue:
        tDcD = partition_D(thr_c, tile(make_identity_array(shape(mD)), (bM, bN), (bx, by)))
    out = make_fragment_like(tDsC)
    copyto(copy_C, out, tDsC)
    copy_tile(copy_C, tDgD, out, tDcD, shape(mD))


# -- configurations --------------------------------------------------------------------

# the default tile: the fastest on an H100 (benchmarks/RESULTS.md); 144 KB of shared memory
TILE = {"bM": 256, "bN": 128, "bK": 64, "stages": 3, "warps": (4, 2), "group": 16}

# candidates for an autotuner, largest first (shared memory: smem_bytes)
CONFIGS = (
    TILE,                                                                   # 144 KB
    {"bM": 128, "bN": 256, "bK": 64, "stages": 3, "warps": (2, 4), "group": 16},  # 144 KB
    {"bM": 128, "bN": 128, "bK": 64, "stages": 3, "warps": (2, 2), "group": 8},   # 96 KB
    {"bM": 128, "bN": 128, "bK": 32, "stages": 4, "warps": (2, 2), "group": 8},   # 64 KB
    {"bM": 64, "bN": 128, "bK": 64, "stages": 3, "warps": (2, 2), "group": 8},    # 72 KB
    {"bM": 64, "bN": 64, "bK": 64, "stages": 4, "warps": (2, 2), "group": 8},     # 64 KB
)

SMEM_SM80 = 163 * 1024          # shared memory a block may opt in to: A100 (sm_86/89: 99 KB)
SMS_SM80 = 108                  # the A100's multiprocessors


def smem_bytes(config, ebytes=2):
    """Bytes of shared memory the main loop of `config` takes (inputs of
    `ebytes` bytes: 16-bit, or 4 for tf32).
        >>> smem_bytes(TILE) // 1024
        144
    """
    c = {**TILE, **config}
    return (c["bM"] + c["bN"]) * c["bK"] * c["stages"] * ebytes


def tf32_configs():
    """CONFIGS for float32 (tf32) inputs: bK halved (the same bytes a stage),
    where that leaves bK 32 or more (4 k-blocks of mma.sync's K = 8).
        >>> [c["bK"] for c in tf32_configs()]
        [32, 32, 32, 32, 32]
    """
    return tuple({**c, "bK": c["bK"] // 2} for c in CONFIGS if c["bK"] >= 64)


def default_config(M, N, K, batches=1, sms=SMS_SM80, smem=SMEM_SM80, ebytes=2):
    """The tile for an M x N x K problem of `batches` (gemm_sm90's signature)
    with inputs of `ebytes` bytes: the largest of CONFIGS (tf32_configs for
    4) within `smem` bytes of shared memory that still gives each of `sms`
    multiprocessors a tile, else the smallest (K does not matter yet).
    `device_limits` gives a device's sms and smem.
        >>> [default_config(n, n, 4096)["bM"] for n in (8192, 1536, 100)]
        [256, 128, 64]
        >>> default_config(8192, 8192, 8192, smem=99 * 1024)["bN"]     # sm_86, sm_89
        128
    """
    configs = tf32_configs() if ebytes == 4 else CONFIGS
    fits = [c for c in configs if smem_bytes(c, ebytes) <= smem]
    return next((c for c in fits if batches * -(-M // c["bM"]) * -(-N // c["bN"]) >= sms),
                fits[-1])


def device_limits(device):
    """(multiprocessors, shared bytes a block may opt in to) of a torch CUDA
    device; the A100's for anything else (the CPU backend)."""
    if getattr(device, "type", None) != "cuda":
        return SMS_SM80, SMEM_SM80
    from .rows import _cuda_device
    sms, _, smem = _cuda_device(device.index)[:3]
    return sms, smem


def make_config(dtype, a_major="K", b_major="K", bM=TILE["bM"], bN=TILE["bN"], bK=TILE["bK"],
                stages=TILE["stages"], warps=TILE["warps"], group=TILE["group"], residue=False,
                d_vector=8, out_dtype=None):
    """The static arguments of gemm_kernel (after alpha and beta) for one input
    type and operand layout, and its threads: `residue` predicates the copies
    (tiles that overhang A, B or D), `group` orders the blocks (0: a 2-D grid;
    see tile_of_block and `grid`), D (of `out_dtype`, default `dtype`) is
    written through shared memory in vectors of `d_vector` elements (16 bytes
    at most) where a pipeline buffer holds its tile, else from the registers."""
    from moye import LDSM_U16x8_T, LDSM_U32x4_N, MMAOP_16x8x16_F32BF16BF16F32_TN, \
        MMAOP_16x8x16_F32F16F16F32_TN, MMAOP_16x8x8_F32TF32TF32F32_TN, CPOP_ASYNC_CACHEGLOBAL
    dtype = moye.as_element_type(dtype)
    out_dtype = moye.as_element_type(out_dtype or dtype)
    _check_tile(bM, bN, bK, stages, warps)
    op = {"Float16": MMAOP_16x8x16_F32F16F16F32_TN,
          "BFloat16": MMAOP_16x8x16_F32BF16BF16F32_TN,
          "Float32": MMAOP_16x8x8_F32TF32TF32F32_TN}[dtype.name]
    threads = 32 * warps[0] * warps[1]
    mma = make_tiled_mma(op, Layout((warps[0], warps[1], 1)),
                         (16 * warps[0], 16 * warps[1], op.shape_mnk[2]))
    g2s = CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), dtype)
    vec = 128 // dtype.bits                 # values a 16-byte cp.async copies
    shift = 4 - (dtype.bits // 8).bit_length() + 1      # log2(vec): 3, or 2 for 32 bits

    def operand(rows, major):
        if major == "K":            # rows of bK contiguous values; 8 x 128-byte swizzled atoms
            kb = min(bK, 64 * 16 // dtype.bits)
            atom = composition(Swizzle({2: 1, 4: 2, 8: 3}[kb // vec], shift, 3),
                               Layout((8, kb), (kb, 1)))
            per_row = bK // vec
            thr = make_layout((threads // per_row, per_row), (per_row, 1))
            copy = make_tiled_copy(g2s, thr, Layout((1, vec)))
            return tile_to_shape(atom, (rows, bK, stages)), copy, CopyAtom(LDSM_U32x4_N, dtype)
        atom = composition(Swizzle(3, 3, 3), Layout((64, 8), (1, 64)))
        per_col = rows // 8
        thr = make_layout((per_col, threads // per_col), (1, per_col))
        copy = make_tiled_copy(g2s, thr, Layout((8, 1)))
        return tile_to_shape(atom, (rows, bK, stages)), copy, CopyAtom(LDSM_U16x8_T, dtype)

    sA, copy_A, s2r_A = operand(bM, a_major)
    sB, copy_B, s2r_B = operand(bN, b_major)
    sC = make_layout((bM, bN), (bN + 8, 1))          # padded rows: conflict-free stores
    copy_C = None
    if cosize(sC) * out_dtype.bits > max(bM, bN) * bK * stages * dtype.bits:
        sC = None                                    # no buffer holds it: from the registers
    else:
        d_vector = min(d_vector, 128 // out_dtype.bits)
        per_row = min(bN // d_vector, threads)
        vector = {128: UInt128, 64: moye.UInt64, 32: moye.UInt32}.get(
            d_vector * out_dtype.bits, out_dtype)
        copy_C = make_tiled_copy(CopyAtom(moye.UniversalCopy(vector), out_dtype),
                                 make_layout((threads // per_row, per_row), (per_row, 1)),
                                 Layout((1, d_vector)))
    return (sA, sB, copy_A, copy_B, mma, s2r_A, s2r_B, sC, copy_C, stages, residue,
            group), threads


def _check_tile(bM, bN, bK, stages, warps):
    w0, w1 = warps
    if bM % 64 or bN % 64 or bK not in (32, 64, 128) or stages < 2 or bM % (16 * w0) or \
            bN % (16 * w1) or not 1 <= w0 * w1 <= 16:
        raise MoyeError(f"gemm: tile bM={bM} bN={bN} bK={bK} stages={stages} warps={warps}; "
                        "bM and bN must be multiples of 64 and of 16 x their warps, bK 32, 64 "
                        "or 128, stages 2 or more, 1 to 16 warps")


def grid(M, N, bM=TILE["bM"], bN=TILE["bN"], group=TILE["group"], batch=1, **_):
    """The launch grid of gemm_kernel for an M x N result (of `batch`
    batches, in grid z) with this config."""
    tiles = (-(-M // bM), -(-N // bN))
    xy = (tiles[0] * tiles[1], 1) if group else tiles
    return xy + (batch,) if batch > 1 else xy[:1] if group else xy


# -- the launch ------------------------------------------------------------------------

NAMES = {"a": "a", "b": "b", "out": "out", "residual": "residual", "bias": "bias"}
INPUT_TYPES = ("Float16", "BFloat16", "Float32")      # Float32: as tf32, K-major


class Plan(NamedTuple):
    """How one launch runs: gemm_kernel's (grid, block) (None where out is
    empty), its static arguments, and which of a, b and residual every batch
    shares (passed as their first matrix)."""
    launch: object
    args: tuple
    shared: tuple


def launch(a, b, out, *, bias=None, residual=None, alpha=1.0, beta=1.0, activation=None,
           config=None, backend=None, names=None):
    """out = activation(alpha * a @ b^T + bias) + beta * residual (see the
    module's doc) for torch tensors, NumPy arrays or anything moye takes as
    arrays: CUDA tensors on torch's current stream, NumPy arrays and CPU
    tensors on the CPU backend (or `backend`). b is (N, K): out = a @ b.T.
    `config` takes tile parameters (CONFIGS; default_config by default);
    beta = 0 leaves residual unread. `names` renames the operands in errors
    (the example's A, B, D, C). The checks and the kernel's configuration
    are planned once per layout of the operands (a Plan, cached).
        >>> import numpy as np
        >>> a, b = np.ones((64, 32), np.float16), np.ones((48, 32), np.float16)
        >>> out = np.zeros((64, 48), np.float16)
        >>> launch(a, b, out, alpha=0.5, residual=out + 1, config=CONFIGS[-1])
        >>> float(out[0, 0])
        17.0
    """
    names = NAMES if names is None else {**NAMES, **names}
    check_activation(activation, "gemm")
    arrays = {k: _arg(x, names[k]) for k, x in (("a", a), ("b", b), ("out", out),
                                                 ("residual", residual), ("bias", bias))
              if x is not None}
    config_key = None if config is None else tuple(sorted(
        (k, tuple(v) if isinstance(v, list) else v) for k, v in config.items()))
    key = (tuple((k, tuple(v.shape), tuple(v.strides), v.dtype.name, v.ptr % 16, v.device)
                 for k, v in arrays.items()), activation, config_key, getattr(a, "device", None))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _plan(arrays, config, names, getattr(a, "device", None))
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        _PLANS[key] = plan
    if plan.launch is None:
        return
    a, b, residual = (x[0] if shared else x for x, shared in zip((a, b, residual), plan.shared))
    replay.launch(gemm_kernel, plan.launch, (a, b, out, residual if beta != 0 else None,
                                             float(alpha), float(beta), *plan.args, bias,
                                             activation), backend)


_PLANS = {}             # what decides a launch's plan -> its Plan (bounded)


def _plan(arrays, config, names, device):
    """The Plan of a launch with these operands (ArrayArgs) on `device`, or a
    MoyeError in the caller's `names`."""
    M, N, K, batch = _check_shapes(arrays, names)
    dtype, out_dtype = _check_dtypes(arrays, names)
    a_major = _check_operand(arrays["a"], names["a"], "M")
    b_major = _check_operand(arrays["b"], names["b"], "N")
    if M == 0 or N == 0 or batch == 0:
        return Plan(None, (), ())
    sms, smem = device_limits(device)
    ebytes = 4 if dtype == "Float32" else 2
    if ebytes == 4 and "MN" in (a_major, b_major):
        raise MoyeError(f"gemm: float32 (tf32) operands must be K-major (ldmatrix transposes "
                        f"16-bit values alone); {names['a'] if a_major == 'MN' else names['b']} "
                        "is not: copy it K-major")
    config = {**(config or default_config(M, N, K, batch, sms=sms, smem=smem, ebytes=ebytes))}
    unknown = set(config) - set(TILE) - {"residue", "d_vector"}
    if unknown:
        raise MoyeError(f"gemm: unknown config keys {sorted(unknown)}; a config takes "
                        f"{', '.join(TILE)} (and residue, d_vector)")
    if smem_bytes(config, ebytes) > smem:
        raise MoyeError(f"gemm: config {config} takes {smem_bytes(config, ebytes)} bytes of shared "
                        f"memory and this device allows {smem}; take a smaller one "
                        f"(default_config(..., smem={smem}))")
    bM, bN, bK = (config.get(k, TILE[k]) for k in ("bM", "bN", "bK"))
    config.setdefault("residue", bool(M % bM or N % bN or K % bK))
    config.setdefault("d_vector", _vector(arrays["out"], N, out_dtype))
    args, threads = _config(dtype, out_dtype, a_major, b_major, tuple(sorted(
        (k, tuple(v) if isinstance(v, list) else v) for k, v in config.items())))
    shared = tuple(k in arrays and len(arrays[k].shape) == 3 and
                   (arrays[k].shape[0] == 1 or arrays[k].strides[0] == 0 or batch == 1)
                   for k in ("a", "b", "residual"))
    return Plan((grid(M, N, batch=batch, **config), threads), args, shared)


@functools.lru_cache(maxsize=64)
def _config(dtype, out_dtype, a_major, b_major, items):
    """make_config, once per data types, operand layout and configuration
    (building the tiled copies and MMA takes about half a millisecond)."""
    return make_config(dtype, a_major, b_major, out_dtype=out_dtype, **dict(items))


def _arg(x, name):
    """moye's view of array x (shape, strides in elements, dtype, ptr)."""
    arg = as_array_arg(x, name)
    if arg is None:
        raise MoyeError(f"gemm: {name} must be an array (a torch tensor, a NumPy array, ...), "
                        f"got {type(x).__name__}")
    return arg


def _dims(shape):
    return "x".join(map(str, shape))


def _check_shapes(arrays, names):
    """(M, N, K, batches), or a MoyeError naming the operand that does not fit."""
    A, B, D, R, BIAS = (names[k] for k in ("a", "b", "out", "residual", "bias"))
    shapes = {names[k]: tuple(v.shape) for k, v in arrays.items()}
    for name, ranks in ((A, (2, 3)), (B, (2, 3)), (D, (2, 3)), (R, (2, 3)), (BIAS, (1,))):
        if name in shapes and len(shapes[name]) not in ranks:
            raise MoyeError(f"gemm: {name} has shape {shapes[name]}; it must have "
                            f"{' or '.join(map(str, ranks))} dimensions")
    (M, K), (N, K_B) = shapes[A][-2:], shapes[B][-2:]
    if K_B != K:
        raise MoyeError(f"gemm: {A} is {_dims(shapes[A])} and {B} is {_dims(shapes[B])}; {B} "
                        f"must be N x K ({D} = {A} @ {B}.T), with K = {K}")
    if K == 0:
        raise MoyeError(f"gemm: K = 0 ({A} is {_dims(shapes[A])}, {B} {_dims(shapes[B])}): "
                        "nothing to multiply; the caller computes activation(bias) + "
                        "beta * residual")
    batches = {n: s[0] for n, s in shapes.items() if len(s) == 3}
    batch = max(batches.values(), default=1)
    for name, count in batches.items():
        if count not in (1, batch):
            raise MoyeError(f"gemm: {name} has {count} batches and another operand {batch} "
                            f"(shapes {shapes}); each must have {batch} or 1 (shared)")
    expected = (M, N) if len(shapes[D]) == 2 and batch == 1 else (batch, M, N)
    if shapes[D] != expected:
        what = "(M, N)" if len(expected) == 2 else "(batches, M, N)"
        raise MoyeError(f"gemm: {D} has shape {shapes[D]}; expected {what} = {expected}")
    if R in shapes and shapes[R][-2:] != (M, N):
        raise MoyeError(f"gemm: {R} has shape {shapes[R]}; expected (M, N) = {(M, N)} or "
                        f"(batches, M, N) = {(batch, M, N)}")
    if BIAS in shapes and shapes[BIAS] != (N,):
        raise MoyeError(f"gemm: {BIAS} has shape {shapes[BIAS]}; expected (N,) = ({N},)")
    strides = tuple(arrays["out"].strides)
    if N > 1 and strides[-1] != 1:
        raise MoyeError(f"gemm: {D} must be row-major (unit stride along N), got shape "
                        f"{shapes[D]} and strides {strides}")
    return M, N, K, batch


def _check_dtypes(arrays, names):
    """(input type, output type) names, or a MoyeError naming the operand."""
    t = {k: v.dtype.name for k, v in arrays.items()}
    A, D = names["a"], names["out"]
    rules = {"a": (INPUT_TYPES, "Float16, BFloat16 or Float32 (as tf32)"),
             "b": ((t["a"],), f"{A}'s type ({t['a']})"),
             "out": ((t["a"], "Float32"), f"{A}'s type ({t['a']}) or Float32"),
             "bias": ((t["a"], "Float32"), f"{A}'s type ({t['a']}) or Float32"),
             "residual": ((t["out"],), f"{D}'s type ({t['out']})")}
    for k, dtype in t.items():
        allowed, what = rules[k]
        if dtype not in allowed:
            raise MoyeError(f"gemm: {names[k]} is {dtype}; it must be {what}")
    return t["a"], t["out"]


def _check_operand(arg, name, mn):
    """'K' or 'MN': which of operand `arg`'s last two modes is contiguous, or
    a MoyeError where 16-byte cp.async cannot read it (8 contiguous 16-bit
    elements, or 4 of 32 bits, from a 16-byte aligned address)."""
    (rows, k), (s_rows, s_k) = arg.shape[-2:], arg.strides[-2:]
    vec = 128 // arg.dtype.bits
    where = f"({name} has shape {tuple(arg.shape)} and strides {tuple(arg.strides)})"
    if s_k == 1 and (k % vec == 0 or s_rows != 1):
        major, extent, other = "K", k, s_rows
    elif s_rows == 1:
        major, extent, other = "MN", rows, s_k
    else:
        raise MoyeError(f"gemm: {name} must be K-major (row-major) or {mn}-major (the "
                        f"transposed view of a row-major one) {where}")
    if extent % vec:
        what, alt = ("K", mn) if major == "K" else (mn, "K")
        raise MoyeError(
            f"gemm: {what} = {extent} must be a multiple of {vec} because {name} is "
            f"{what}-major: each 16-byte cp.async copies {vec} contiguous {arg.dtype} elements "
            f"of {name} {where}; pad {name} or pass it {alt}-major")
    batch_stride = arg.strides[0] if len(arg.shape) == 3 and arg.shape[0] > 1 else 0
    if other % vec or batch_stride % vec or arg.ptr % 16:
        raise MoyeError(f"gemm: each 16-byte cp.async reads {vec} contiguous elements of "
                        f"{name}, so its address must be 16-byte aligned and its other strides "
                        f"multiples of {vec} {where}; copy {name} to a contiguous array")
    return major


def _vector(arg, N, out_dtype):
    """The widest vector (elements, 16 bytes at most) in which out (`arg`)'s
    rows can be written: dividing N, out's strides and its address."""
    nbytes = moye.as_element_type(out_dtype).bits // 8
    strides = [s for s, n in zip(arg.strides[:-1], arg.shape[:-1]) if n > 1]
    return next(v for v in (8, 4, 2, 1) if v * nbytes <= 16 and N % v == 0 and
                all(s % v == 0 for s in strides) and arg.ptr % (v * nbytes) == 0)

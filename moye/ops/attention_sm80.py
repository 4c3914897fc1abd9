"""Attention's forward pass on mma.sync tensor cores (FlashAttention-2's
design), for sm_80 to sm_89 and the CPU backend:
O = softmax(Q K^T * scale) V, with the log-sum-exp of each row.

- Q (B, Hq, Sq, D), K and V (B, Hk, Sk, D), O of Q's shape, LSE (B, Hq, Sq)
  float32; 16-bit inputs, float32 accumulation; D of HEAD_DIMS; query head
  h reads key head h // (Hq // Hk) (GQA, MQA).
- A block of 4 warps owns 64 rows of Q (one head of one batch), each warp
  16 of them and whole rows of S = Q K^T and O: a row lives in the 4 lanes
  of a quad, so the online softmax needs no shared memory.
- Q, K and V^T tiles reach shared memory by 16-byte cp.async, zero-filled
  past the sequences' ends (copy_if); ldmatrix reads them in the MMA's
  fragment layouts. P stays in registers: S's accumulators converted to
  16 bits are the A fragment of P V (PTX ISA, "Matrix Fragments for
  mma.m16n8k16").
- Causal attention is aligned to the bottom right (FlashAttention): query i
  sees key j where j <= i + Sk - Sq. Key tiles past a block's last visible
  key are skipped; scores are masked (-inf) only in tiles that cross the
  diagonal or the end of K. A row that sees no key gets O = 0, LSE = -inf.
"""
import math

import moye
from moye import (CPOP_ASYNC_CACHEGLOBAL, CopyAtom, Layout, LDSM_U16x8_T, LDSM_U32x4_N, MoYeArray,
                  Swizzle, UInt128, composition, copy_if, copyto, fill_, gemm, get_slice,
                  make_copy_predicate, make_fragment_like, make_identity_array, make_layout,
                  make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B, make_tiled_mma,
                  partition_C, partition_fragment_A, partition_fragment_B, partition_fragment_C,
                  partition_S, partition_D, retile_D, size, tile, tile_to_shape, transpose, zeros_)

from ..compiler import Constexpr
from . import replay, rows
from .gemm_sm90 import element_type
from .row_kernels import LN2, LOG2E

BLOCK_M, BLOCK_N, THREADS = 64, 64, 128
HEAD_DIMS = (64, 96, 128, 256)


@moye.kernel(fast_math=True)
def attention_forward_sm80(Q, K, V, O, LSE, cu_q, cu_k, groups, scale_log2, sQ_layout, sK_layout,
                           sVt_layout, copy_qk, copy_vt, mma, s2r_qk, s2r_vt, causal: Constexpr):
    bM, bN, d = size(sQ_layout, 0), size(sK_layout, 0), size(sQ_layout, 1)
    tid, h, b = moye.thread_idx.x, moye.block_idx.y, moye.block_idx.z
    mb = moye.grid_dim.x - 1 - moye.block_idx.x      # the longest (causal) query blocks first
    bb, q0, Sq = sequence_of(cu_q, b, size(Q, 2))      # its rows: q0.. of array batch bb
    _, k0, Sk = sequence_of(cu_k, b, size(K, 2))
    mQ, mO = rows_of(Q, bb, h, q0, Sq), rows_of(O, bb, h, q0, Sq)          # (Sq, d)
    mK, mV = rows_of(K, bb, h // groups, k0, Sk), rows_of(V, bb, h // groups, k0, Sk)
    gQ, gO = tile(mQ, (bM, d), (mb, 0)), tile(mO, (bM, d), (mb, 0))         # (bM, d)
    gK = tile(mK, (bN, d), (None, 0))                                       # (bN, d, n)
    gVt = tile(transpose(mV), (d, bN), (0, None))                           # (d, bN, n): V^T
    cQ = tile(make_identity_array((Sq, d)), (bM, d), (mb, 0))               # coordinates
    cK = tile(make_identity_array((Sk, d)), (bN, d), (None, 0))
    cVt = tile(make_identity_array((d, Sk)), (d, bN), (0, None))
    sQ = moye.shared_array(Q.dtype, sQ_layout)                              # (bM, d)
    sK = moye.shared_array(K.dtype, sK_layout)                              # (bN, d)
    sVt = moye.shared_array(V.dtype, sVt_layout)                            # (d, bN)

    thr_qk, thr_vt = get_slice(copy_qk, tid), get_slice(copy_vt, tid)
    tKgK, tKsK, tKcK = partition_S(thr_qk, gK), partition_D(thr_qk, sK), partition_S(thr_qk, cK)
    tVgV, tVsV, tVcV = partition_S(thr_vt, gVt), partition_D(thr_vt, sVt), \
        partition_S(thr_vt, cVt)

    thr_mma = get_slice(mma, tid)
    tSrQ = partition_fragment_A(thr_mma, sQ)                        # (MMA, 1, d/16)
    tSrK = partition_fragment_B(thr_mma, sK)                        # (MMA, bN/8, d/16)
    tSrS = partition_fragment_C(thr_mma, make_layout((bM, bN)))     # ((2, 2), 1, bN/8)
    tScS = partition_C(thr_mma, make_identity_array((bM, bN)))      # their (row, col) in the tile
    tOrP = partition_fragment_A(thr_mma, make_layout((bM, bN)))     # ((2, 2, 2), 1, bN/16)
    tOrV = partition_fragment_B(thr_mma, sVt)                       # (MMA, d/8, bN/16)
    tOrO = partition_fragment_C(thr_mma, make_layout((bM, d)))      # ((2, 2), 1, d/8)
    zeros_(tOrO)
    ldsm_q = get_slice(make_tiled_copy_A(s2r_qk, mma), tid)
    tXsQ, tXrQ = partition_S(ldsm_q, sQ), retile_D(ldsm_q, tSrQ)
    ldsm_k = get_slice(make_tiled_copy_B(s2r_qk, mma), tid)
    tXsK, tXrK = partition_S(ldsm_k, sK), retile_D(ldsm_k, tSrK)
    ldsm_v = get_slice(make_tiled_copy_B(s2r_vt, mma), tid)
    tXsV, tXrV = partition_S(ldsm_v, sVt), retile_D(ldsm_v, tOrV)

    # a thread holds 2 rows of S and O: values (c, r) of each n8 atom are row
    # groupID + 8 r, column 2 threadID_in_group + c
    row_max = make_fragment_like(Layout(2), moye.Float32)          # in units of log2
    row_sum = make_fragment_like(Layout(2), moye.Float32)
    fill_(row_max, -math.inf)
    zeros_(row_sum)

    # the key tiles this block sees: all, or (causal) up to its last row's last visible key
    diagonal = Sk - Sq                      # query i sees keys up to i + diagonal
    n_tiles = key_tiles(mb * bM, bM, bN, Sq, Sk, causal)
    # cp.async groups, oldest first: Q + K_0, V_0, then K_1, V_1, ...
    tQgQ, tQsQ, tQcQ = partition_S(thr_qk, gQ), partition_D(thr_qk, sQ), partition_S(thr_qk, cQ)
    copy_if(copy_qk, make_copy_predicate(tQcQ, (Sq, d)), tQsQ, tQgQ)
    load_tile(copy_qk, tKsK, tKgK, tKcK, 0, (Sk, d))
    moye.cp_async_commit()
    load_tile(copy_vt, tVsV, tVgV, tVcV, 0, (d, Sk))
    moye.cp_async_commit()
    for j in range(n_tiles):
        moye.cp_async_wait(1)                   # K_j has landed (this thread's copies)
        moye.sync_threads()                     # ... everyone's
        zeros_(tSrS)
        for kb in range(size(tSrQ, 2)):
            copyto(s2r_qk, tXrQ[:, :, kb], tXsQ[:, :, kb])
            copyto(s2r_qk, tXrK[:, :, kb], tXsK[:, :, kb])
            gemm(mma, tSrS, tSrQ[:, :, kb], tSrK[:, :, kb], tSrS)
        moye.sync_threads()                     # sK is read: fetch K_{j+1} under the rest
        if j + 1 < n_tiles:
            load_tile(copy_qk, tKsK, tKgK, tKcK, j + 1, (Sk, d))
        moye.cp_async_commit()                  # (an empty group after the last tile)

        if crosses(j * bN, bN, mb * bM, Sk, diagonal, causal):
            for i in range(size(tSrS)):         # past K's end, or above the diagonal
                row, col = tScS[i]
                if hidden(mb * bM + row, j * bN + col, Sk, diagonal, causal):
                    tSrS[i] = -math.inf
        for r in range(2):
            m = tSrS[2 * r, 0, 0]
            for n in range(size(tSrS, 2)):
                for c in range(2):
                    m = moye.maximum(m, tSrS[c + 2 * r, 0, n])
            m_new = moye.maximum(row_max[r], moye.warp_reduce(m, "max", 4) * scale_log2)
            base = moye.ifelse(m_new == -math.inf, 0.0, m_new)     # a row that sees no key yet
            correction = moye.exp2_approx(row_max[r] - base, ftz=True)
            row_max[r] = m_new
            total = 0.0
            for n in range(size(tSrS, 2)):
                for c in range(2):
                    p = moye.exp2_approx(tSrS[c + 2 * r, 0, n] * scale_log2 - base, ftz=True)
                    tSrS[c + 2 * r, 0, n] = p
                    total = total + p
            row_sum[r] = row_sum[r] * correction + moye.warp_reduce(total, "sum", 4)
            for n in range(size(tOrO, 2)):
                for c in range(2):
                    tOrO[c + 2 * r, 0, n] = tOrO[c + 2 * r, 0, n] * correction
        to_a(tOrP, tSrS, Q.dtype)               # P in 16 bits, in registers

        moye.cp_async_wait(1)                   # V_j has landed
        moye.sync_threads()
        for kb in range(size(tOrP, 2)):
            copyto(s2r_vt, tXrV[:, :, kb], tXsV[:, :, kb])
            gemm(mma, tOrO, tOrP[:, :, kb], tOrV[:, :, kb], tOrO)
        moye.sync_threads()                     # sVt is read: fetch V_{j+1}
        if j + 1 < n_tiles:
            load_tile(copy_vt, tVsV, tVgV, tVcV, j + 1, (d, Sk))
        moye.cp_async_commit()
    moye.cp_async_wait(0)

    tOgO = partition_C(thr_mma, gO)
    tOcO = partition_C(thr_mma, cQ)
    for r in range(2):
        seen = row_sum[r] > 0.0
        inv = moye.ifelse(seen, 1.0 / row_sum[r], 0.0)
        for n in range(size(tOrO, 2)):
            for c in range(2):
                if tOcO[c + 2 * r, 0, n][0] < Sq:
                    tOgO[c + 2 * r, 0, n] = moye.cast(tOrO[c + 2 * r, 0, n] * inv, O.dtype)
        row = tOcO[2 * r, 0, 0][0]
        if tid % 4 == 0 and row < Sq:           # a quad's first lane writes its rows' LSE
            LSE[bb, h, q0 + row] = moye.ifelse(seen, (row_max[r] + moye.log2(row_sum[r])) * LN2,
                                               -math.inf)


@moye.func
def sequence_of(cu, b, length):
    """(array batch, first row, rows) of batch b's sequence: b, 0, `length`
    for dense arrays (cu None); for packed ones (varlen: batch 0 of the
    arrays), rows cu[b] to cu[b + 1]."""
    if cu is None:
        return b, 0, length
    return 0, cu[b], cu[b + 1] - cu[b]


@moye.func
def rows_of(X, bb, h, start, length):
    """Rows start.. start + length of head h of batch bb of the 4-D X, as a
    (length, D) array (its last dimension contiguous).
        >>> import numpy as np
        >>> rows_of(np.arange(24.0).reshape(1, 2, 3, 4), 0, 1, 1, 2)[1, 3]
        np.float64(23.0)
    """
    m = MoYeArray(X)[bb, h, :, :]
    step = m.layout.stride[0]
    return MoYeArray.view_of(m.engine.offset_by(start * step),
                             make_layout((length, size(m, 1)), (step, 1)))


@moye.func
def key_tiles(row0, rows, keys, Sq, Sk, causal):
    """The key tiles of `keys` keys that rows row0.. row0 + rows - 1 see: all
    of K's, or (causal) up to their last row's last visible key; none where
    the rows start past Sq (a block beyond its sequence, varlen).
        >>> key_tiles(0, 64, 64, 100, 300, False), key_tiles(0, 64, 64, 100, 300, True)
        (5, 5)
        >>> key_tiles(0, 64, 64, 300, 100, True), key_tiles(128, 64, 64, 100, 300, False)
        (0, 0)
    """
    n = (Sk + keys - 1) // keys
    if causal:
        seen = moye.maximum(row0 + rows + Sk - Sq, 0)
        n = moye.minimum(n, (seen + keys - 1) // keys)
    return moye.ifelse(row0 < Sq, n, 0)


@moye.func
def to_a(a, acc, dtype):
    """The accumulators of n8 atoms 2 kb and 2 kb + 1 of `acc` as the A
    fragment of k16 atom kb of `a`, in `dtype` (PTX ISA, "Matrix Fragments
    for mma.m16n8k16")."""
    for kb in range(size(a, 2)):
        for half in range(2):
            for v in range(4):
                a[v + 4 * half, 0, kb] = moye.cast(acc[v, 0, 2 * kb + half], dtype)


@moye.func
def crosses(key0, keys, row0, Sk, diagonal, causal):
    """Whether the key tile of `keys` keys from key0 holds a key that a row
    from row0 does not see (past Sk, or, causal, above the diagonal)."""
    past = key0 + keys > Sk
    if causal:
        past = past | (key0 + keys - 1 > row0 + diagonal)
    return past


@moye.func
def hidden(row, key, Sk, diagonal, causal):
    """Whether query `row` does not see `key`: key >= Sk or, causal, key >
    row + diagonal."""
    past = key >= Sk
    if causal:
        past = past | (key > row + diagonal)
    return past


@moye.func
def load_tile(copy, dst, src, coords, j, shape):
    """cp.async tile j of the partitioned `src` (..., n) into `dst`, zero-filled
    where `coords` (src's coordinates) lie outside `shape`."""
    copy_if(copy, make_copy_predicate(coords[:, :, :, j], shape), dst, src[:, :, :, j])


def static_args(dtype_name, d):
    """The static arguments of attention_forward_sm80 for `dtype_name`
    ("Float16" or "BFloat16") and head dim `d`: swizzled shared layouts,
    cp.async and ldmatrix copies and the tiled MMA.
        >>> sQ, sK, sVt = static_args("Float16", 96)[:3]
        >>> size(sQ), size(sVt)
        (6144, 6144)
    """
    dtype = getattr(moye, dtype_name)
    cols = 64 if d % 64 == 0 else 32            # a swizzle atom's row: 128 or 64 bytes
    bits = 3 if cols == 64 else 2               # its 16-byte chunks: 8 or 4
    # rows of `cols` 16-bit values in 8-row atoms, swizzled so that the 8 rows an ldmatrix
    # reads, and the 16-byte vectors cp.async writes, fall in distinct banks
    k_major = composition(Swizzle(bits, 3, 3), Layout((8, cols), (cols, 1)))
    sQ = tile_to_shape(k_major, (BLOCK_M, d))
    sK = tile_to_shape(k_major, (BLOCK_N, d))
    n_major = composition(Swizzle(bits, 3, 3), Layout((cols, 8), (1, cols)))
    sVt = tile_to_shape(n_major, (d, BLOCK_N))                      # V^T: d contiguous
    g2s = CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), dtype)
    per_row = cols // 8                         # 16-byte vectors a row of an atom
    copy_qk = make_tiled_copy(g2s, make_layout((THREADS // per_row, per_row), (per_row, 1)),
                              Layout((1, 8)))
    copy_vt = make_tiled_copy(g2s, make_layout((per_row, THREADS // per_row), (1, per_row)),
                              Layout((8, 1)))
    op = moye.MMAOP_16x8x16_F32F16F16F32_TN if dtype_name == "Float16" else \
        moye.MMAOP_16x8x16_F32BF16BF16F32_TN
    # 4 warps along M, 16 rows each; N tiles of 16 so that one ldmatrix.x4 feeds two atoms
    mma = make_tiled_mma(op, Layout((THREADS // 32, 1, 1)), (16 * THREADS // 32, 16, 16))
    return (sQ, sK, sVt, copy_qk, copy_vt, mma, CopyAtom(LDSM_U32x4_N, dtype),
            CopyAtom(LDSM_U16x8_T, dtype))


def launch(q, k, v, o, lse, scale, causal, cu_q=None, cu_k=None, max_q=None):
    """o, lse = attention(q, k, v) on the arrays' device: CUDA tensors on
    torch's stream, NumPy arrays and CPU tensors on the CPU backend (the op
    checks shapes, types, a contiguous last dimension and 16-byte rows).
    Packed sequences (varlen): q, k, v, o (1, H, total, D) and lse (1, H,
    total), batch b's rows cu_q[b].. of q (cu_k[b].. of k), max_q the
    longest."""
    B, Hq, Sq, d = q.shape
    if cu_q is not None:
        B, Sq = cu_q.shape[0] - 1, max_q
    grid = (-(-Sq // BLOCK_M), Hq, B)
    args = (q, k, v, o, lse, cu_q, cu_k, Hq // k.shape[1], float(scale * LOG2E),
            *static_args(element_type(q).name, d), bool(causal))
    replay.launch(attention_forward_sm80, (grid, THREADS), args,
                  None if rows.backend_of(q) == "cuda" else "cpu")

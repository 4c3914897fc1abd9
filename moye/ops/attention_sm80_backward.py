"""Attention's backward pass on mma.sync tensor cores (FlashAttention-2's
algorithm), for sm_80 to sm_89 and the CPU backend. From the forward's O
and LSE and the output's gradient dO, with P = exp(S * scale - LSE):

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D) with D = rowsum(dO * O),
    dQ = scale * dS K,   dK = scale * dS^T Q.

Three kernels, each on attention_sm80's tiles, copies and MMA:
- attention_row_dots: D, ROW_THREADS threads a row, 16-byte loads;
- attention_dq_sm80: a block a 64-row tile of Q (as the forward): it
  recomputes S and dP key tile by key tile and accumulates dQ in registers;
- attention_dkdv_sm80: a block a 64-key tile of one key head: it walks the
  query tiles of each query head that reads it (GQA), recomputing S^T = K
  Q^T and dP^T = V dO^T with the keys as rows, so that P^T and dS^T are
  already the A operands of dV and dK, and accumulates both in registers.
dQ in its own kernel (FlashAttention-3's "separate pass") needs no atomics
and gives the same bits on every run.
"""
import moye
from moye import (Layout, MoYeArray, copy_if, copyto, gemm, get_slice, make_copy_predicate,
                  make_fragment_like, make_identity_array, make_layout, make_tiled_copy_A,
                  make_tiled_copy_B, partition_C, partition_D, partition_fragment_A,
                  partition_fragment_B, partition_fragment_C, partition_S, retile_D, size, tile,
                  zeros_)
from moye.layout import composition

from ..compiler import Constexpr, range_constexpr
from . import replay, rows
from .attention_sm80 import (BLOCK_M, BLOCK_N, LOG2E, THREADS, crosses, hidden, key_tiles,
                             load_tile, rows_of, sequence_of, static_args, to_a)
from .gemm_sm90 import element_type
from .row_kernels import load_chunk, store_chunk

VEC = 8                                 # attention_row_dots: a thread's values a load (16 bytes)
ROW_THREADS = 4                         # ... and a row's threads
ROWS_PER_BLOCK = THREADS // ROW_THREADS


@moye.kernel
def attention_row_dots(D, dO, O, dLSE, zeroed=None):
    """D[b, h, i] = sum over the head dim of dO[b, h, i] * O[b, h, i], in
    float32, less dLSE[b, h, i] where the log-sum-exp has a gradient too
    (d lse / dS = P, so that dS = P * (dP - D) takes it in). `zeroed`, an
    array of O's batch and heads and at least its rows (the Hopper
    backward's float32 sum of dQ, which its TMA reduce-adds add to), unless
    None, is zero-filled on the way (the grid covers its rows)."""
    b, h = moye.block_idx.z, moye.block_idx.y
    row = moye.block_idx.x * ROWS_PER_BLOCK + moye.thread_idx.x // ROW_THREADS
    part = moye.thread_idx.x % ROW_THREADS
    at = moye.minimum(row, size(O, 2) - 1)      # every lane reduces: rows past the end too
    x, y = (make_fragment_like(Layout((VEC, 1)), moye.Float32) for _ in range(2))
    total = moye.cast(0.0, moye.Float32)
    for c in range(part, size(O, 3) // VEC, ROW_THREADS):
        load_chunk(x, 0, dO[b, h, at, None], c)
        load_chunk(y, 0, O[b, h, at, None], c)
        for e in range_constexpr(VEC):
            total = total + x[e, 0] * y[e, 0]
    if zeroed is not None:
        if row < size(zeroed, 2):
            for e in range_constexpr(VEC):
                x[e, 0] = 0.0
            for c in range(part, size(zeroed, 3) // VEC, ROW_THREADS):
                store_chunk(zeroed[b, h, row, None], c, x, 0)
    total = moye.warp_reduce(total, "sum", ROW_THREADS)
    if part == 0 and row < size(O, 2):
        if dLSE is not None:
            total = total - dLSE[b, h, row]
        D[b, h, row] = total


def transposed(layout, rows, cols, buffers=None):
    """The (cols, rows) view of a (rows, cols) shared layout: element (c, r)
    is the layout's (r, c) (CuTe: a composition with the swapping layout);
    with `buffers`, of a (rows, cols, buffers) one, the buffers kept last.
        >>> transposed(Layout((2, 3), (3, 1)), 2, 3)(2, 1)
        5
        >>> transposed(Layout((2, 3, 2), (3, 1, 6)), 2, 3, 2)(2, 1, 1)
        11
    """
    if buffers is None:
        return composition(layout, make_layout((cols, rows), (rows, 1)))
    return composition(layout, Layout((cols, rows, buffers), (rows, 1, rows * cols)))


@moye.kernel(fast_math=True)
def attention_dq_sm80(dQ, Q, K, V, dO, LSE, D, cu_q, cu_k, groups, scale, scale_log2, sQ_layout,
                      sK_layout, copy_qk, mma, s2r_qk, s2r_t, causal: Constexpr):
    bM, bN, d = size(sQ_layout, 0), size(sK_layout, 0), size(sQ_layout, 1)
    tid, h, b = moye.thread_idx.x, moye.block_idx.y, moye.block_idx.z
    mb = moye.grid_dim.x - 1 - moye.block_idx.x      # the longest (causal) query blocks first
    bb, q0, Sq = sequence_of(cu_q, b, size(Q, 2))
    _, k0, Sk = sequence_of(cu_k, b, size(K, 2))
    mQ, mdO = rows_of(Q, bb, h, q0, Sq), rows_of(dO, bb, h, q0, Sq)
    mK, mV = rows_of(K, bb, h // groups, k0, Sk), rows_of(V, bb, h // groups, k0, Sk)
    gQ, gdO = tile(mQ, (bM, d), (mb, 0)), tile(mdO, (bM, d), (mb, 0))
    gK, gV = tile(mK, (bN, d), (None, 0)), tile(mV, (bN, d), (None, 0))     # (bN, d, n)
    cQ = tile(make_identity_array((Sq, d)), (bM, d), (mb, 0))
    cK = tile(make_identity_array((Sk, d)), (bN, d), (None, 0))
    sQ, sdO = moye.shared_array(Q.dtype, sQ_layout), moye.shared_array(Q.dtype, sQ_layout)
    sK, sV = moye.shared_array(Q.dtype, sK_layout), moye.shared_array(Q.dtype, sK_layout)
    sKt = MoYeArray.view_of(sK.engine, transposed(sK_layout, bN, d))       # (d, bN): K^T

    thr = get_slice(copy_qk, tid)
    tKgK, tKsK, tKcK = partition_S(thr, gK), partition_D(thr, sK), partition_S(thr, cK)
    tVgV, tVsV = partition_S(thr, gV), partition_D(thr, sV)
    tQc = partition_S(thr, cQ)
    copy_if(copy_qk, make_copy_predicate(tQc, (Sq, d)), partition_D(thr, sQ), partition_S(thr, gQ))
    copy_if(copy_qk, make_copy_predicate(tQc, (Sq, d)), partition_D(thr, sdO),
            partition_S(thr, gdO))

    thr_mma = get_slice(mma, tid)
    tSrQ = partition_fragment_A(thr_mma, sQ)                        # (MMA, 1, d/16)
    tSrdO = partition_fragment_A(thr_mma, sdO)
    tSrK = partition_fragment_B(thr_mma, sK)                        # (MMA, bN/8, d/16)
    tSrV = partition_fragment_B(thr_mma, sV)
    tSrS = partition_fragment_C(thr_mma, make_layout((bM, bN)))     # S, then P, then dS
    tSrP = partition_fragment_C(thr_mma, make_layout((bM, bN)))     # dP
    tScS = partition_C(thr_mma, make_identity_array((bM, bN)))
    tQrS = partition_fragment_A(thr_mma, make_layout((bM, bN)))     # dS in 16 bits
    tQrK = partition_fragment_B(thr_mma, sKt)                       # (MMA, d/8, bN/16)
    tQrQ = partition_fragment_C(thr_mma, make_layout((bM, d)))      # dQ
    zeros_(tQrQ)
    ldsm_a = get_slice(make_tiled_copy_A(s2r_qk, mma), tid)
    tXsQ, tXrQ = partition_S(ldsm_a, sQ), retile_D(ldsm_a, tSrQ)
    tXsdO, tXrdO = partition_S(ldsm_a, sdO), retile_D(ldsm_a, tSrdO)
    ldsm_b = get_slice(make_tiled_copy_B(s2r_qk, mma), tid)
    tXsK, tXrK = partition_S(ldsm_b, sK), retile_D(ldsm_b, tSrK)
    tXsV, tXrV = partition_S(ldsm_b, sV), retile_D(ldsm_b, tSrV)
    ldsm_t = get_slice(make_tiled_copy_B(s2r_t, mma), tid)
    tXsKt, tXrKt = partition_S(ldsm_t, sKt), retile_D(ldsm_t, tQrK)

    # a thread's 2 rows: their LSE (in log2 units) and D
    base = make_fragment_like(Layout(2), moye.Float32)
    dsum = make_fragment_like(Layout(2), moye.Float32)
    for r in range(2):
        row = mb * bM + tScS[2 * r, 0, 0][0]
        base[r] = 0.0
        dsum[r] = 0.0
        if row < Sq:
            base[r] = LSE[bb, h, q0 + row] * LOG2E
            dsum[r] = D[bb, h, q0 + row]
    diagonal = Sk - Sq
    n_tiles = key_tiles(mb * bM, bM, bN, Sq, Sk, causal)
    for j in range(n_tiles):
        load_both(copy_qk, tKsK, tKgK, tVsV, tVgV, tKcK, j, (Sk, d))
        product(s2r_qk, mma, tSrS, tSrQ, tXrQ, tXsQ, tSrK, tXrK, tXsK)      # S = Q K^T
        product(s2r_qk, mma, tSrP, tSrdO, tXrdO, tXsdO, tSrV, tXrV, tXsV)   # dP = dO V^T
        edge = crosses(j * bN, bN, mb * bM, Sk, diagonal, causal)
        for i in range(size(tSrS)):
            row, col = tScS[i]
            r = i % 4 // 2
            p = moye.exp2_approx(tSrS[i] * scale_log2 - base[r], ftz=True)
            if edge:
                p = moye.ifelse(hidden(mb * bM + row, j * bN + col, Sk, diagonal, causal), 0.0,
                                p)
            tSrS[i] = p * (tSrP[i] - dsum[r])                               # dS
        to_a(tQrS, tSrS, Q.dtype)
        for kb in range(size(tQrS, 2)):
            copyto(s2r_t, tXrKt[:, :, kb], tXsKt[:, :, kb])
            gemm(mma, tQrQ, tQrS[:, :, kb], tQrK[:, :, kb], tQrQ)          # dQ += dS K
        moye.sync_threads()                     # sK and sV are read: the next tile's may land
    moye.cp_async_commit()                      # (Q and dO's copies, where no key tile ran)
    moye.cp_async_wait(0)

    tQgQ = partition_C(thr_mma, tile(rows_of(dQ, bb, h, q0, Sq), (bM, d), (mb, 0)))
    tQcQ = partition_C(thr_mma, cQ)
    for i in range(size(tQrQ)):
        if tQcQ[i][0] < Sq:
            tQgQ[i] = moye.cast(tQrQ[i] * scale, dQ.dtype)


@moye.kernel(fast_math=True)
def attention_dkdv_sm80(dK, dV, Q, K, V, dO, LSE, D, cu_q, cu_k, groups, scale, scale_log2,
                        sQ_layout, sK_layout, copy_qk, mma, s2r_qk, s2r_t, causal: Constexpr):
    bM, bN, d = size(sQ_layout, 0), size(sK_layout, 0), size(sQ_layout, 1)
    tid, nb, hk, b = moye.thread_idx.x, moye.block_idx.x, moye.block_idx.y, moye.block_idx.z
    bb, q0, Sq = sequence_of(cu_q, b, size(Q, 2))
    _, k0, Sk = sequence_of(cu_k, b, size(K, 2))
    mK, mV = rows_of(K, bb, hk, k0, Sk), rows_of(V, bb, hk, k0, Sk)
    gK, gV = tile(mK, (bN, d), (nb, 0)), tile(mV, (bN, d), (nb, 0))
    cK = tile(make_identity_array((Sk, d)), (bN, d), (nb, 0))
    sK, sV = moye.shared_array(Q.dtype, sK_layout), moye.shared_array(Q.dtype, sK_layout)
    sQ, sdO = moye.shared_array(Q.dtype, sQ_layout), moye.shared_array(Q.dtype, sQ_layout)
    sQt = MoYeArray.view_of(sQ.engine, transposed(sQ_layout, bM, d))       # (d, bM): Q^T
    sdOt = MoYeArray.view_of(sdO.engine, transposed(sQ_layout, bM, d))

    thr = get_slice(copy_qk, tid)
    tKc = partition_S(thr, cK)
    copy_if(copy_qk, make_copy_predicate(tKc, (Sk, d)), partition_D(thr, sK), partition_S(thr, gK))
    copy_if(copy_qk, make_copy_predicate(tKc, (Sk, d)), partition_D(thr, sV), partition_S(thr, gV))
    tQsQ, tQsdO = partition_D(thr, sQ), partition_D(thr, sdO)

    thr_mma = get_slice(mma, tid)
    tSrK = partition_fragment_A(thr_mma, sK)                        # (MMA, 1, d/16)
    tSrV = partition_fragment_A(thr_mma, sV)
    tSrQ = partition_fragment_B(thr_mma, sQ)                        # (MMA, bM/8, d/16)
    tSrdO = partition_fragment_B(thr_mma, sdO)
    tSrS = partition_fragment_C(thr_mma, make_layout((bN, bM)))     # S^T, then P^T
    tSrP = partition_fragment_C(thr_mma, make_layout((bN, bM)))     # dP^T, then dS^T
    tScS = partition_C(thr_mma, make_identity_array((bN, bM)))      # (key, query) in the tile
    tVrP = partition_fragment_A(thr_mma, make_layout((bN, bM)))     # P^T, dS^T in 16 bits
    tVrdO = partition_fragment_B(thr_mma, sdOt)                     # (MMA, d/8, bM/16)
    tKrQ = partition_fragment_B(thr_mma, sQt)
    tVrV = partition_fragment_C(thr_mma, make_layout((bN, d)))      # dV
    tKrK = partition_fragment_C(thr_mma, make_layout((bN, d)))      # dK
    zeros_(tVrV)
    zeros_(tKrK)
    ldsm_a = get_slice(make_tiled_copy_A(s2r_qk, mma), tid)
    tXsK, tXrK = partition_S(ldsm_a, sK), retile_D(ldsm_a, tSrK)
    tXsV, tXrV = partition_S(ldsm_a, sV), retile_D(ldsm_a, tSrV)
    ldsm_b = get_slice(make_tiled_copy_B(s2r_qk, mma), tid)
    tXsQ, tXrQ = partition_S(ldsm_b, sQ), retile_D(ldsm_b, tSrQ)
    tXsdO, tXrdO = partition_S(ldsm_b, sdO), retile_D(ldsm_b, tSrdO)
    ldsm_t = get_slice(make_tiled_copy_B(s2r_t, mma), tid)
    tXsQt, tXrQt = partition_S(ldsm_t, sQt), retile_D(ldsm_t, tKrQ)
    tXsdOt, tXrdOt = partition_S(ldsm_t, sdOt), retile_D(ldsm_t, tVrdO)

    diagonal = Sk - Sq
    m_tiles = moye.ifelse(nb * bN < Sk, (Sq + bM - 1) // bM, 0)   # none past the sequence
    first = 0
    if causal:                  # query i sees key nb * bN first where i >= nb * bN - diagonal
        first = moye.maximum(nb * bN - diagonal, 0) // bM
    for g in range(groups):
        h = hk * groups + g
        mQ, mdO = rows_of(Q, bb, h, q0, Sq), rows_of(dO, bb, h, q0, Sq)
        gQ = tile(mQ, (bM, d), (None, 0))                           # (bM, d, m)
        gdO = tile(mdO, (bM, d), (None, 0))
        cQ = tile(make_identity_array((Sq, d)), (bM, d), (None, 0))
        tQgQ, tQgdO, tQcQ = partition_S(thr, gQ), partition_S(thr, gdO), partition_S(thr, cQ)
        for i in range(first, m_tiles):
            load_both(copy_qk, tQsQ, tQgQ, tQsdO, tQgdO, tQcQ, i, (Sq, d))
            product(s2r_qk, mma, tSrS, tSrK, tXrK, tXsK, tSrQ, tXrQ, tXsQ)      # S^T = K Q^T
            product(s2r_qk, mma, tSrP, tSrV, tXrV, tXsV, tSrdO, tXrdO, tXsdO)   # dP^T = V dO^T
            for e in range(size(tSrS)):
                key, col = tScS[e]
                query = i * bM + col
                row = moye.minimum(query, Sq - 1)
                p = moye.exp2_approx(tSrS[e] * scale_log2 - LSE[bb, h, q0 + row] * LOG2E, ftz=True)
                p = moye.ifelse((query >= Sq) | hidden(query, nb * bN + key, Sk, diagonal,
                                                       causal), 0.0, p)
                tSrS[e] = p                                                  # P^T
                tSrP[e] = p * (tSrP[e] - D[bb, h, q0 + row])                 # dS^T
            to_a(tVrP, tSrS, Q.dtype)
            for kb in range(size(tVrP, 2)):
                copyto(s2r_t, tXrdOt[:, :, kb], tXsdOt[:, :, kb])
                gemm(mma, tVrV, tVrP[:, :, kb], tVrdO[:, :, kb], tVrV)     # dV += P^T dO
            to_a(tVrP, tSrP, Q.dtype)
            for kb in range(size(tVrP, 2)):
                copyto(s2r_t, tXrQt[:, :, kb], tXsQt[:, :, kb])
                gemm(mma, tKrK, tVrP[:, :, kb], tKrQ[:, :, kb], tKrK)      # dK += dS^T Q
            moye.sync_threads()                 # sQ and sdO are read: the next tile's may land
    moye.cp_async_commit()                      # (K and V's copies, where no query tile ran)
    moye.cp_async_wait(0)

    cKv = partition_C(thr_mma, cK)
    tgK = partition_C(thr_mma, tile(rows_of(dK, bb, hk, k0, Sk), (bN, d), (nb, 0)))
    tgV = partition_C(thr_mma, tile(rows_of(dV, bb, hk, k0, Sk), (bN, d), (nb, 0)))
    for e in range(size(tKrK)):
        if cKv[e][0] < Sk:
            tgK[e] = moye.cast(tKrK[e] * scale, dK.dtype)
            tgV[e] = moye.cast(tVrV[e], dV.dtype)


@moye.func
def load_both(copy, dst1, src1, dst2, src2, coords, j, shape):
    """Tile j of two partitioned arrays of one shape (coordinates `coords`)
    into shared memory by cp.async, zero-filled outside `shape`; waited for
    by every thread."""
    load_tile(copy, dst1, src1, coords, j, shape)
    load_tile(copy, dst2, src2, coords, j, shape)
    moye.cp_async_commit()
    moye.cp_async_wait(0)
    moye.sync_threads()


@moye.func
def product(s2r, mma, acc, rA, xrA, xsA, rB, xrB, xsB):
    """acc = A B^T: fragments rA and rB filled from shared memory a k-block
    at a time by ldmatrix (xsA, xsB their sources; xrA, xrB their views in
    the copy's layout), then mma.sync."""
    zeros_(acc)
    for kb in range(size(rA, 2)):
        copyto(s2r, xrA[:, :, kb], xsA[:, :, kb])
        copyto(s2r, xrB[:, :, kb], xsB[:, :, kb])
        gemm(mma, acc, rA[:, :, kb], rB[:, :, kb], acc)


def launch(dq, dk, dv, q, k, v, o, do, lse, dlse, scale, causal, cu_q=None, cu_k=None,
           max_q=None, max_k=None):
    """dq, dk, dv of attention(q, k, v) from its o and lse and the gradients
    do and dlse (None: none) of both, on the arrays' device (the op checks
    them). Packed sequences (varlen) as attention_sm80.launch takes them,
    max_q and max_k the longest."""
    B, Hq, Sq, d = q.shape
    Hk, Sk = k.shape[1], k.shape[2]
    backend = None if rows.backend_of(q) == "cuda" else "cpu"
    D = rows.empty(q, (B, Hq, Sq), "float32")
    replay.launch(attention_row_dots, ((-(-Sq // ROWS_PER_BLOCK), Hq, B), THREADS),
                  (D, do, o, dlse), backend)
    if cu_q is not None:
        B, Sq, Sk = cu_q.shape[0] - 1, max_q, max_k
    sQ, sK, _, copy_qk, _, mma, s2r_qk, s2r_t = static_args(element_type(q).name, d)
    common = (q, k, v, do, lse, D, cu_q, cu_k, Hq // Hk, float(scale), float(scale * LOG2E), sQ,
              sK, copy_qk, mma, s2r_qk, s2r_t, bool(causal))
    replay.launch(attention_dq_sm80, ((-(-Sq // BLOCK_M), Hq, B), THREADS), (dq, *common),
                  backend)
    replay.launch(attention_dkdv_sm80, ((-(-Sk // BLOCK_N), Hk, B), THREADS),
                  (dk, dv, *common), backend)

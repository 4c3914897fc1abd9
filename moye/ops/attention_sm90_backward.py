"""Attention's backward pass on Hopper, for head dims 64 and 128: the
algorithm of attention_sm80_backward (D = rowsum(dO * O) less dlse by its
attention_row_dots; dQ in a kernel of query tiles, dK and dV in one of key
tiles) on attention_sm90's machinery: a producer warpgroup TMA-loads the
tile a block keeps and a ring of the tiles it walks, two consumer
warpgroups of 64 rows compute by wgmma. Each kernel's products:

- dK, dV (a block 128 keys of one key head, walking the query tiles of
  each query head that reads it): S^T = K Q^T and dP^T = V dO^T from shared
  memory (keys as rows), then P^T and dS^T = P^T * (dP^T - D) converted in
  registers as A operands of dV += P^T dO and dK += dS^T Q, whose B (dO,
  Q) is read MN-major from the tile TMA wrote;
- dQ (a block 128 queries, walking key tiles): S = Q K^T and dP = dO V^T,
  then dS as the A operand of dQ += dS K, K read MN-major.
Each kernel issues a tile's last products behind the next tile's first
(dQ's always; dK and dV's at head dim 64, OVERLAP), so the tensor cores
run while the next dS is computed. No atomics: the same bits every run.
"""
import moye
from moye import (Float32, Layout, MoYeArray, gemm, make_fragment_like, make_identity_array,
                  make_layout, size)

from ..compiler import Constexpr, range_constexpr
from . import replay, rows
from .attention_sm80 import LOG2E, hidden, key_tiles
from .attention_sm80_backward import ROWS_PER_BLOCK, attention_row_dots
from .attention_sm90 import (BLOCK_M, THREADS, box, consumers_mma, fill_stage, k_major, load_rows,
                             mn_major, release)
from .gemm_sm90 import element_type

HEAD_DIMS = (64, 128)       # 256: dK and dV's accumulators leave no registers for the rest
BLOCK_N = 64                # the tiles a block walks: 64 rows
STAGES = 2
# head dim -> whether the dK/dV kernel issues a tile's dV and dK behind the next tile's
# S^T and dP^T: at 128 the registers of both fragments in flight beside dK's and dV's
# accumulators spill (ptxas then serializes the wgmma)
OVERLAP = {64: True, 128: False}


@moye.kernel(fast_math=True)
def attention_dkdv_sm90(load_q, load_k, load_v, load_do, dK, dV, LSE, D, Sq, Sk, groups, scale,
                        scale_log2, sKV_layout, sQ_layout, sQt_layout, mma_s, mma_g,
                        causal: Constexpr, overlap: Constexpr):
    d = size(sKV_layout, 1)
    bK, bQ = BLOCK_M, BLOCK_N                   # keys a block, queries a tile it walks
    ebytes = load_q.dtype.bits // 8
    nb, hk, b = moye.block_idx.x, moye.block_idx.y, moye.block_idx.z
    sK = moye.shared_array(load_k.dtype, sKV_layout, align=1024)        # (bK, d)
    sV = moye.shared_array(load_v.dtype, sKV_layout, align=1024)
    sQ = moye.shared_array(load_q.dtype, sQ_layout, align=1024)         # (bQ, d, stages)
    sdO = moye.shared_array(load_q.dtype, sQ_layout, align=1024)
    sQt = MoYeArray.view_of(sQ.engine, sQt_layout)                      # (d, bQ, stages)
    sdOt = MoYeArray.view_of(sdO.engine, sQt_layout)
    kv_full = moye.mbarrier()
    pipe = moye.TmaPipeline(STAGES, consumers=8)
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(kv_full, 1)
        pipe.init()
    moye.sync_threads()
    diagonal = Sk - Sq
    m_tiles = moye.ifelse(nb * bK < Sk, (Sq + bQ - 1) // bQ, 0)
    first = 0
    if causal:                  # query i sees key nb * bK first where i >= nb * bK - diagonal
        first = moye.minimum(moye.maximum(nb * bK - diagonal, 0) // bQ, m_tiles)
    warpgroup = moye.warp_idx() // 4
    if warpgroup == 0:                                      # the producer
        moye.setmaxnreg_dec(24)
        if tid == 0:
            moye.mbarrier_arrive_expect_tx(kv_full, 2 * bK * d * ebytes)
            load_rows(load_k, sK, b, hk, nb * bK, d, bK, kv_full)
            load_rows(load_v, sV, b, hk, nb * bK, d, bK, kv_full)
            stage, phase = 0, 0
            for g in range(groups):
                for i in range(first, m_tiles):
                    stage, phase = fill_stage(pipe, stage, phase, b, hk * groups + g, i * bQ,
                                              d, bQ, load_q, sQ, load_do, sdO)
    else:                                                   # the consumers: 64 keys each
        moye.setmaxnreg_inc(240)
        ctid = tid - 128
        lane0 = ctid % 32 == 0
        thr_s, thr_g = mma_s.get_slice(ctid), mma_g.get_slice(ctid)
        tSsK, tSsV = thr_s.partition_A(sK), thr_s.partition_A(sV)
        tSsQ, tSsdO = thr_s.partition_B(sQ), thr_s.partition_B(sdO)    # (..., stages)
        tGsQt, tGsdOt = thr_g.partition_B(sQt), thr_g.partition_B(sdOt)
        acc_s = thr_s.partition_fragment_C(make_layout((bK, bQ)))      # S^T, then P^T
        acc_p = thr_s.partition_fragment_C(make_layout((bK, bQ)))      # dP^T, then dS^T
        cS = thr_s.partition_C(make_identity_array((bK, bQ)))          # (key, query) in the tile
        a16 = thr_g.partition_fragment_A(make_layout((bK, bQ)))          # P^T in 16 bits
        b16 = thr_g.partition_fragment_A(make_layout((bK, bQ)))          # dS^T (overlap)
        acc_dv = thr_g.partition_fragment_C(make_layout((bK, d)))
        acc_dk = thr_g.partition_fragment_C(make_layout((bK, d)))
        cG = thr_g.partition_C(make_identity_array((bK, d)))
        for i in range_constexpr(size(acc_dv)):
            acc_dv[i] = 0.0
            acc_dk[i] = 0.0
        moye.mbarrier_wait(kv_full, 0)
        # the query tiles of each query head that reads this key head, one after another;
        # with `overlap`, dV += P^T dO and dK += dS^T Q of tile t-1 are issued behind tile t's
        # S^T and dP^T and run while tile t's P^T and dS^T are computed
        per = m_tiles - first
        total = groups * per
        stage, phase = 0, 0
        if not overlap:         # one tile at a time: P^T and dS^T share a16's registers
            for t in range(total):
                pipe.consumer_wait(stage, phase)
                products(mma_s, acc_s, tSsK, tSsQ[:, :, :, stage], acc_p, tSsV,
                         tSsdO[:, :, :, stage])             # S^T = K Q^T, dP^T = V dO^T
                moye.wgmma_wait(0)
                p_ds_tile(acc_s, acc_p, cS, LSE, D, b, hk * groups + t // per,
                          (first + t % per) * bQ, nb * bK, Sq, Sk, scale_log2, diagonal, causal)
                for e in range_constexpr(size(a16)):
                    a16[e] = moye.cast(acc_s[e], load_q.dtype)
                gemm(mma_g, acc_dv, a16, tGsdOt[:, :, :, stage], acc_dv)     # dV += P^T dO
                moye.wgmma_wait(0)
                for e in range_constexpr(size(a16)):
                    a16[e] = moye.cast(acc_p[e], load_q.dtype)
                gemm(mma_g, acc_dk, a16, tGsQt[:, :, :, stage], acc_dk)      # dK += dS^T Q
                moye.wgmma_wait(0)
                stage, phase = release(pipe, stage, phase, lane0)
        elif total > 0:
            pipe.consumer_wait(stage, phase)
            products(mma_s, acc_s, tSsK, tSsQ[:, :, :, stage], acc_p, tSsV,
                     tSsdO[:, :, :, stage])
            moye.wgmma_wait(0)
            p_ds_tile(acc_s, acc_p, cS, LSE, D, b, hk * groups, first * bQ, nb * bK, Sq, Sk,
                      scale_log2, diagonal, causal)
            for e in range_constexpr(size(a16)):
                a16[e] = moye.cast(acc_s[e], load_q.dtype)
                b16[e] = moye.cast(acc_p[e], load_q.dtype)
            for t in range(1, total):
                held = stage
                stage, phase = pipe.advance(stage, phase)
                pipe.consumer_wait(stage, phase)
                products(mma_s, acc_s, tSsK, tSsQ[:, :, :, stage], acc_p, tSsV,
                         tSsdO[:, :, :, stage])
                gemm(mma_g, acc_dv, a16, tGsdOt[:, :, :, held], acc_dv)     # dV += P^T dO
                gemm(mma_g, acc_dk, b16, tGsQt[:, :, :, held], acc_dk)      # dK += dS^T Q
                moye.wgmma_wait(2)                                          # S^T, dP^T done
                p_ds_tile(acc_s, acc_p, cS, LSE, D, b, hk * groups + t // per,
                          (first + t % per) * bQ, nb * bK, Sq, Sk, scale_log2, diagonal, causal)
                moye.wgmma_wait(0)
                if lane0:
                    pipe.consumer_release(held)
                for e in range_constexpr(size(a16)):
                    a16[e] = moye.cast(acc_s[e], load_q.dtype)
                    b16[e] = moye.cast(acc_p[e], load_q.dtype)
            gemm(mma_g, acc_dv, a16, tGsdOt[:, :, :, stage], acc_dv)
            gemm(mma_g, acc_dk, b16, tGsQt[:, :, :, stage], acc_dk)
            moye.wgmma_wait(0)
            if lane0:
                pipe.consumer_release(stage)
        for e in range_constexpr(size(acc_dk)):
            key, col = cG[e]
            if nb * bK + key < Sk:
                dK[b, hk, nb * bK + key, col] = moye.cast(acc_dk[e] * scale, dK.dtype)
                dV[b, hk, nb * bK + key, col] = moye.cast(acc_dv[e], dV.dtype)


@moye.kernel(fast_math=True)
def attention_dq_sm90(load_q, load_k, load_v, load_do, dQ, LSE, D, Sq, Sk, groups, scale,
                      scale_log2, sQ_layout, sKV_layout, sKt_layout, mma_s, mma_g,
                      causal: Constexpr):
    d = size(sQ_layout, 1)
    bM, bN = BLOCK_M, BLOCK_N
    ebytes = load_q.dtype.bits // 8
    # the last query blocks first: under a causal mask they see the most keys
    mb, h, b = moye.grid_dim.x - 1 - moye.block_idx.x, moye.block_idx.y, moye.block_idx.z
    sQ = moye.shared_array(load_q.dtype, sQ_layout, align=1024)         # (bM, d)
    sdO = moye.shared_array(load_q.dtype, sQ_layout, align=1024)
    sK = moye.shared_array(load_k.dtype, sKV_layout, align=1024)        # (bN, d, stages)
    sV = moye.shared_array(load_v.dtype, sKV_layout, align=1024)
    sKt = MoYeArray.view_of(sK.engine, sKt_layout)                      # (d, bN, stages)
    q_full = moye.mbarrier()
    pipe = moye.TmaPipeline(STAGES, consumers=8)
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(q_full, 1)
        pipe.init()
    moye.sync_threads()
    diagonal = Sk - Sq
    n_tiles = key_tiles(mb * bM, bM, bN, Sq, Sk, causal)
    warpgroup = moye.warp_idx() // 4
    if warpgroup == 0:                                      # the producer
        moye.setmaxnreg_dec(24)
        if tid == 0:
            moye.mbarrier_arrive_expect_tx(q_full, 2 * bM * d * ebytes)
            load_rows(load_q, sQ, b, h, mb * bM, d, bM, q_full)
            load_rows(load_do, sdO, b, h, mb * bM, d, bM, q_full)
            stage, phase = 0, 0
            for j in range(n_tiles):
                stage, phase = fill_stage(pipe, stage, phase, b, h // groups, j * bN, d, bN,
                                          load_k, sK, load_v, sV)
    else:                                                   # the consumers: 64 queries each
        moye.setmaxnreg_inc(240)
        ctid = tid - 128
        lane0 = ctid % 32 == 0
        thr_s, thr_g = mma_s.get_slice(ctid), mma_g.get_slice(ctid)
        tSsQ, tSsdO = thr_s.partition_A(sQ), thr_s.partition_A(sdO)
        tSsK, tSsV = thr_s.partition_B(sK), thr_s.partition_B(sV)      # (..., stages)
        tGsKt = thr_g.partition_B(sKt)
        acc_s = thr_s.partition_fragment_C(make_layout((bM, bN)))      # S, then dS
        acc_p = thr_s.partition_fragment_C(make_layout((bM, bN)))      # dP
        cS = thr_s.partition_C(make_identity_array((bM, bN)))          # (query, key) in the tile
        a16 = thr_g.partition_fragment_A(make_layout((bM, bN)))
        acc_dq = thr_g.partition_fragment_C(make_layout((bM, d)))
        cG = thr_g.partition_C(make_identity_array((bM, d)))
        for i in range_constexpr(size(acc_dq)):
            acc_dq[i] = 0.0
        moye.mbarrier_wait(q_full, 0)
        # a thread's 2 rows' LSE (log2 units) and D: value e lies in row half e % 4 // 2
        rows_lse = make_fragment_like(Layout(2), Float32)
        rows_d = make_fragment_like(Layout(2), Float32)
        for r in range_constexpr(2):
            row = mb * bM + cS[2 * r][0]
            rows_lse[r] = 0.0
            rows_d[r] = 0.0
            if row < Sq:
                rows_lse[r] = LSE[b, h, row] * LOG2E
                rows_d[r] = D[b, h, row]
        # dQ += dS_{j-1} K_{j-1} is issued behind tile j's S and dP and runs while dS_j is
        # computed (as the forward's P V behind S)
        stage, phase = 0, 0
        if n_tiles > 0:
            pipe.consumer_wait(stage, phase)
            products(mma_s, acc_s, tSsQ, tSsK[:, :, :, stage], acc_p, tSsdO,
                     tSsV[:, :, :, stage])                          # S = Q K^T, dP = dO V^T
            moye.wgmma_wait(0)
            ds_tile(acc_s, acc_p, cS, rows_lse, rows_d, scale_log2, mb * bM, 0, Sk, diagonal,
                    causal)
            for e in range_constexpr(size(a16)):
                a16[e] = moye.cast(acc_s[e], load_q.dtype)
            for j in range(1, n_tiles):
                held = stage
                stage, phase = pipe.advance(stage, phase)
                pipe.consumer_wait(stage, phase)
                products(mma_s, acc_s, tSsQ, tSsK[:, :, :, stage], acc_p, tSsdO,
                         tSsV[:, :, :, stage])
                gemm(mma_g, acc_dq, a16, tGsKt[:, :, :, held], acc_dq)      # dQ += dS K
                moye.wgmma_wait(1)                                          # S, dP done
                ds_tile(acc_s, acc_p, cS, rows_lse, rows_d, scale_log2, mb * bM, j * bN, Sk,
                        diagonal, causal)
                moye.wgmma_wait(0)
                if lane0:
                    pipe.consumer_release(held)
                for e in range_constexpr(size(a16)):
                    a16[e] = moye.cast(acc_s[e], load_q.dtype)
            gemm(mma_g, acc_dq, a16, tGsKt[:, :, :, stage], acc_dq)
            moye.wgmma_wait(0)
            if lane0:
                pipe.consumer_release(stage)
        for e in range_constexpr(size(acc_dq)):
            row, col = cG[e]
            if mb * bM + row < Sq:
                dQ[b, h, mb * bM + row, col] = moye.cast(acc_dq[e] * scale, dQ.dtype)


@moye.func
def p_ds_tile(acc_s, acc_p, cS, LSE, D, b, h, query0, key0, Sq, Sk, scale_log2, diagonal, causal):
    """P^T in acc_s and dS^T = P^T * (dP^T - D) in acc_p, from S^T in acc_s
    and dP^T in acc_p (a key tile's, keys key0.., against the query tile
    of head h from query0 on): P^T = exp2(S^T scaled less the query's LSE),
    0 for queries past Sq or hidden."""
    for e in range_constexpr(size(acc_s)):
        key, col = cS[e]
        query = query0 + col
        row = moye.minimum(query, Sq - 1)
        p = moye.exp2_approx(acc_s[e] * scale_log2 - LSE[b, h, row] * LOG2E, ftz=True)
        p = moye.ifelse((query >= Sq) | hidden(query, key0 + key, Sk, diagonal, causal), 0.0, p)
        acc_s[e] = p
        acc_p[e] = p * (acc_p[e] - D[b, h, row])


@moye.func
def ds_tile(acc_s, acc_p, cS, rows_lse, rows_d, scale_log2, row0, key0, Sk, diagonal, causal):
    """dS = P * (dP - D) in acc_s, from S in acc_s and dP in acc_p (a
    query tile's, rows row0.., keys key0..): P = exp2(S scaled less the
    row's LSE), 0 where hidden; a thread's rows' LSE (log2 units) and D in
    rows_lse and rows_d (value e lies in row half e % 4 // 2)."""
    for e in range_constexpr(size(acc_s)):
        row, key = cS[e]
        p = moye.exp2_approx(acc_s[e] * scale_log2 - rows_lse[e % 4 // 2], ftz=True)
        p = moye.ifelse(hidden(row0 + row, key0 + key, Sk, diagonal, causal), 0.0, p)
        acc_s[e] = p * (acc_p[e] - rows_d[e % 4 // 2])


@moye.func
def products(mma, acc1, tA1, tB1, acc2, tA2, tB2):
    """acc1 = A1 B1^T and acc2 = A2 B2^T by wgmma from shared memory (issued,
    not waited for; both cleared first, so that no register of the first
    is touched while its wgmma run)."""
    for i in range_constexpr(size(acc1)):
        acc1[i] = 0.0
        acc2[i] = 0.0
    gemm(mma, acc1, tA1, tB1, acc1)
    gemm(mma, acc2, tA2, tB2, acc2)


def launch(dq, dk, dv, q, k, v, o, do, lse, dlse, scale, causal):
    """dq, dk, dv of attention(q, k, v) by the Hopper kernels (the op checks
    the arrays: head dims of HEAD_DIMS, 16-byte rows)."""
    B, Hq, Sq, d = q.shape
    Hk, Sk = k.shape[1], k.shape[2]
    backend = None if rows.backend_of(q) == "cuda" else "cpu"
    D = rows.empty(q, (B, Hq, Sq), "float32")
    replay.launch(attention_row_dots, ((-(-Sq // ROWS_PER_BLOCK), Hq, B), 128),
                  (D, do, o, dlse), backend)
    dtype = element_type(q)
    mma_s, mma_g = consumers_mma(BLOCK_N, dtype, "SS", "K"), consumers_mma(d, dtype, "RS", "MN")
    big, small = box(BLOCK_M), box(BLOCK_N)
    common = (float(scale), float(scale * LOG2E))
    dq_copies = [moye.make_tma_copy(moye.TMA_LOAD, t, x) for t, x in ((q, big), (k, small),
                                                                     (v, small), (do, big))]
    replay.launch(attention_dq_sm90, ((-(-Sq // BLOCK_M), Hq, B), THREADS),
                  (*dq_copies, dq, lse, D, Sq, Sk, Hq // Hk, *common, k_major(dtype, BLOCK_M, d),
                   k_major(dtype, BLOCK_N, d, STAGES), mn_major(d, BLOCK_N, STAGES), mma_s, mma_g,
                   bool(causal)), backend)
    kv_copies = [moye.make_tma_copy(moye.TMA_LOAD, t, x) for t, x in ((q, small), (k, big),
                                                                     (v, big), (do, small))]
    replay.launch(attention_dkdv_sm90, ((-(-Sk // BLOCK_M), Hk, B), THREADS),
                  (*kv_copies, dk, dv, lse, D, Sq, Sk, Hq // Hk, *common,
                   k_major(dtype, BLOCK_M, d), k_major(dtype, BLOCK_N, d, STAGES),
                   mn_major(d, BLOCK_N, STAGES), mma_s, mma_g, bool(causal), OVERLAP[d]), backend)

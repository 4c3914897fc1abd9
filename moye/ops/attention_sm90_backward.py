"""Attention's backward pass on Hopper, for head dims 64, 128 and 256, in
one kernel (FlashAttention-3's design) between attention_row_dots (D =
rowsum(dO * O) less dlse) and a conversion of dQ's float32 sum. A block
keeps the keys of one key head (PLANS: 128, or 64 at 256) and walks the
query tiles (PLANS: 128 rows at head dim 64, else 64) of each query head
that reads them: a producer warpgroup TMA-loads the keys' K and V once and
a ring of Q and dO tiles; at head dims 64 and 128, two consumer
warpgroups of 64 keys:

- S^T = K Q^T and dP^T = V dO^T by wgmma from shared memory (keys as
  rows), then P^T and dS^T = P^T * (dP^T - D) (the tile's LSE and D read
  once into shared memory behind the wgmma, load_row_values), converted in
  registers as the A operands of dV += P^T dO and dK += dS^T Q, whose B
  (dO, Q) is read MN-major from the tile TMA wrote;
- dQ's part from these keys (dq_tile): dS^T stored to shared memory by
  both warpgroups, then each 64-column chunk of dS K is one warpgroup's
  wgmma (of 128 queries: each warpgroup's of its 64 rows), staged in
  shared memory in its accumulator's order (DQ_FRAGMENT: no bank
  conflicts) and added to dQ's float32 sum in global memory, in that
  order too, by a TMA reduce-add.

At 256 (wide) one warpgroup's dK and dV of 64 keys would take 256
registers a thread, so the two split them by columns instead, 128 each;
each computes S^T and dP^T for half of the tile's queries (wgmma N = 32),
and both store P^T and dS^T to shared memory, the A operands of every
column of dV += P^T dO and dK += dS^T Q (as FlashAttention-3 does at 256).
Shared memory holds no dQ staging of its own there: a warpgroup stages its
dQ columns (dq_halves) in its halves of the tile's dO and Q, which nothing
reads once its dV and dK wgmma are done. The next tile's S^T and dP^T are
issued behind a tile's dV and dK, before its dQ.
dK and dV take the same bits every run (the mma.sync backward's, on the CPU
backend); dQ's sum is added in the order the blocks finish, so its bits
may vary in the last place.
"""
import functools

import moye
from moye import (Float32, Layout, MoYeArray, Swizzle, composition, copyto, gemm,
                  gmma_smem_layout, make_fragment_like, make_identity_array, make_layout,
                  make_tiled_mma, size, tile_to_shape)

from ..compiler import Constexpr, range_constexpr
from . import replay, rows
from .attention_sm80 import LOG2E, hidden
from .attention_sm80_backward import ROWS_PER_BLOCK, attention_row_dots, transposed
from .attention_sm90 import (CHUNK, THREADS, box, consumers_mma, fill_stage, k_major,
                             load_rows, mn_major, release)
from .gemm_sm90 import batched_tile, element_type
from .row_kernels import load_chunk, store_chunk

BLOCK_N = 64                # a consumer warpgroup's rows of a wgmma
STAGES = 2
# head dim -> (keys a block, queries a tile it walks, wide: the warpgroups split dK's and dV's
# columns). At 64, tiles of 128 queries halve the tiles' syncs and waits (FlashAttention-3's
# 128 x 128); issuing a tile's dV and dK wgmma behind the next tile's S^T and dP^T, on 64
# queries, ran 15% slower (benchmarks/RESULTS.md, session 25); at 128 that overlap's
# fragments spill 144 B and run slower
PLANS = {64: (128, 128, False), 128: (128, 64, False), 256: (64, 64, True)}
HEAD_DIMS = tuple(PLANS)
DS_BARRIER = 1              # both consumer warpgroups' dS of a tile in shared memory
DQ_BARRIER = 2              # 2 and 3: a consumer warpgroup's dQ part in shared memory
ROWS_BARRIER = 4            # 4 and 5: a consumer warpgroup's LSE and D of a query tile
# a warpgroup's dQ part, BLOCK_N queries by CHUNK columns of float32, in shared memory and in
# dQ's float32 sum alike, in the order of its accumulator: thread t's value i at
# (i // 4) * 512 + 4 t + i % 4 (DQ_FRAGMENT from 4 t), so that a warp's stores of one value
# meet each bank once at addresses that are a base plus constants. The sum is (queries / 64
# * chunks) such parts, rows of SUM_ROW values, a TMA box each (SUM_BOX); attention_dq_from_sum
# orders it.
PART = BLOCK_N * CHUNK
DQ_FRAGMENT = Layout((4, PART // 512), (1, 512))
SUM_ROW = 256
SUM_BOX = batched_tile(batched_tile(Layout((PART // SUM_ROW, SUM_ROW), (SUM_ROW, 1))))


@moye.kernel(fast_math=True)
def attention_bwd_sm90(load_q, load_k, load_v, load_do, add_dq, dK, dV, LSE, D, Sq, Sk, groups,
                       scale, scale_log2, sKV_layout, sQ_layout, sQt_layout, sdS_layout,
                       sKc_layout, mma_s, mma_g, mma_q, causal: Constexpr,
                       wide: Constexpr):
    d = size(sKV_layout, 1)
    bK, bQ = size(sKV_layout, 0), size(sQ_layout, 0)    # keys a block, queries a tile it walks
    ebytes = load_q.dtype.bits // 8
    nb, hk, b = moye.block_idx.x, moye.block_idx.y, moye.block_idx.z
    sK = moye.shared_array(load_k.dtype, sKV_layout, align=1024)        # (bK, d)
    sV = moye.shared_array(load_v.dtype, sKV_layout, align=1024)
    sQ = moye.shared_array(load_q.dtype, sQ_layout, align=1024)         # (bQ, d, stages)
    sdO = moye.shared_array(load_q.dtype, sQ_layout, align=1024)
    sQt = MoYeArray.view_of(sQ.engine, sQt_layout)                      # (d, bQ, stages)
    sdOt = MoYeArray.view_of(sdO.engine, sQt_layout)
    sdS = moye.shared_array(load_q.dtype, sdS_layout, align=1024)       # (bQ, bK, 2): dS
    sP = moye.shared_array(load_q.dtype, sdS_layout, align=1024) if wide else None     # P
    sKc = MoYeArray.view_of(sK.engine, sKc_layout)          # (columns, bK, chunks): K^T
    # both warpgroups' dQ parts (dq_tile); wide: in the tiles themselves (dq_halves)
    sdQ = None if wide else moye.shared_array(Float32, Layout(2 * PART), align=1024)
    # each consumer warpgroup's copy of a query tile's LSE (log2 units) and D: (2, bQ, 2 buffers)
    sLD = moye.shared_array(Float32, Layout((2, bQ, 2, 2)))
    kv_full = moye.mbarrier()
    pipe = moye.TmaPipeline(STAGES, consumers=2 if wide else 8)   # wide: a warpgroup's lead
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
    else:                                   # the consumers: 64 keys each, or (wide) columns
        moye.setmaxnreg_inc(240)
        ctid = tid - 128
        wg = ctid // 128
        lane0 = ctid % 32 == 0
        thr_s, thr_g = mma_s.get_slice(ctid), mma_g.get_slice(ctid)
        tSsK, tSsV = thr_s.partition_A(sK), thr_s.partition_A(sV)
        tSsQ, tSsdO = thr_s.partition_B(sQ), thr_s.partition_B(sdO)    # (..., stages)
        tGsQt, tGsdOt = thr_g.partition_B(sQt), thr_g.partition_B(sdOt)
        acc_s = thr_s.partition_fragment_C(make_layout((bK, bQ)))      # S^T, then P^T
        acc_p = thr_s.partition_fragment_C(make_layout((bK, bQ)))      # dP^T, then dS^T
        cS = thr_s.partition_C(make_identity_array((bK, bQ)))          # (key, query) in the tile
        # dS^T's values where this thread's accumulators lie: (key, query, buffer) of sdS
        tSsdS = thr_s.partition_C(keys_by_queries(sdS))
        if wide:                # P^T and dS^T, all of the tile's, as the A of dV and dK
            tSsP = thr_s.partition_C(keys_by_queries(sP))
            tGsP, tGsdS = thr_g.partition_A(keys_by_queries(sP)), \
                thr_g.partition_A(keys_by_queries(sdS))
        else:
            a16 = thr_g.partition_fragment_A(make_layout((bK, bQ)))      # P^T, dS^T in 16 bits
        acc_dv = thr_g.partition_fragment_C(make_layout((bK, d)))
        acc_dk = thr_g.partition_fragment_C(make_layout((bK, d)))
        cG = thr_g.partition_C(make_identity_array((bK, d)))
        dq = DqTile(mma_q, sdS, sKc, sdQ, add_dq, wg, ctid)
        rows_ = (sLD[:, :, :, wg], LSE, D, b, Sq)
        for i in range_constexpr(size(acc_dv)):
            acc_dv[i] = 0.0
            acc_dk[i] = 0.0
        moye.mbarrier_wait(kv_full, 0)
        # the query tiles of each query head that reads this key head, one after another
        per = m_tiles - first
        total = groups * per
        stage, phase = 0, 0
        if wide:    # P^T and dS^T through shared memory; tile t+1's S^T and dP^T issued
            h, query0 = hk * groups, first * bQ     # behind tile t's dV and dK, before its dQ
            if total > 0:
                pipe.consumer_wait(stage, phase)
                products(mma_s, acc_s, tSsK, tSsQ[:, :, :, stage], acc_p, tSsV,
                         tSsdO[:, :, :, stage])             # S^T = K Q^T, dP^T = V dO^T
                load_row_values(*rows_, h, query0, 0)
            for t in range(total):
                moye.wgmma_wait(0)
                p_ds_tile(acc_s, acc_p, cS, rows_[0][:, :, t % 2], query0, nb * bK, Sq, Sk,
                          scale_log2, diagonal, causal)
                store_ds(tSsP[:, :, :, t % 2], acc_s)
                store_ds(tSsdS[:, :, :, t % 2], acc_p)
                share_ds()
                gemm(mma_g, acc_dv, tGsP[:, :, :, t % 2], tGsdOt[:, :, :, stage], acc_dv)
                gemm(mma_g, acc_dk, tGsdS[:, :, :, t % 2], tGsQt[:, :, :, stage], acc_dk)
                held, h_t, query_t = stage, h, query0
                if t + 1 < total:
                    stage, phase = pipe.advance(stage, phase)
                    h, query0 = hk * groups + (t + 1) // per, (first + (t + 1) % per) * bQ
                    pipe.consumer_wait(stage, phase)
                    products(mma_s, acc_s, tSsK, tSsQ[:, :, :, stage], acc_p, tSsV,
                             tSsdO[:, :, :, stage])
                    load_row_values(*rows_, h, query0, t + 1)
                dq_halves(dq, sQ, sdO, held, t, b, h_t, query_t)     # dQ += dS K; waits for all
                if ctid % 128 == 0:
                    moye.tma_store_wait(0)                  # the reduce-adds have read the stage
                    pipe.consumer_release(held)
            moye.wgmma_wait(0)          # (dq_halves waited; ptxas cannot tell, C7517)
        else:                   # one tile at a time: P^T and dS^T share a16's registers
            for t in range(total):
                h, query0 = hk * groups + t // per, (first + t % per) * bQ
                pipe.consumer_wait(stage, phase)
                products(mma_s, acc_s, tSsK, tSsQ[:, :, :, stage], acc_p, tSsV,
                         tSsdO[:, :, :, stage])             # S^T = K Q^T, dP^T = V dO^T
                sLDt = load_row_values(*rows_, h, query0, t)
                moye.wgmma_wait(0)
                p_ds_tile(acc_s, acc_p, cS, sLDt, query0, nb * bK, Sq, Sk, scale_log2, diagonal,
                          causal)
                for e in range_constexpr(size(a16)):
                    a16[e] = moye.cast(acc_s[e], load_q.dtype)
                gemm(mma_g, acc_dv, a16, tGsdOt[:, :, :, stage], acc_dv)     # dV += P^T dO
                store_ds(tSsdS[:, :, :, t % 2], acc_p)
                moye.wgmma_wait(0)
                for e in range_constexpr(size(a16)):
                    a16[e] = moye.cast(acc_p[e], load_q.dtype)
                gemm(mma_g, acc_dk, a16, tGsQt[:, :, :, stage], acc_dk)      # dK += dS^T Q
                share_ds()
                dq_tile(dq, t, b, h, query0)                                 # dQ += dS K
                stage, phase = release(pipe, stage, phase, lane0)
        if ctid % 128 == 0:
            moye.tma_store_wait(0)                  # the last reduce has read sdQ
        for e in range_constexpr(size(acc_dk)):
            key, col = cG[e]
            if nb * bK + key < Sk:
                dK[b, hk, nb * bK + key, col] = moye.cast(acc_dk[e] * scale, dK.dtype)
                dV[b, hk, nb * bK + key, col] = moye.cast(acc_dv[e], dV.dtype)


class DqTile:
    """What dq_tile and dq_halves need of consumer thread ctid: its slice of
    the dQ wgmma (dq_mma: one warpgroup's, 64 queries by a chunk's columns,
    or, where a tile has 128 queries, `by_rows`, both warpgroups', 64 rows
    each), dS and K partitioned as its A and B, its fragment of dQ and
    (dq_tile) its part of sdQ, as DQ_FRAGMENT."""

    def __init__(self, mma_q, sdS, sKc, sdQ, add_dq, wg, ctid):
        self.by_rows = size(mma_q) == 256
        # (a warpgroup's slice by thread_idx % 128, as timed: ptxas's registers move with the
        # spelling; ctid % 128 once spilled 172 B against 48 at 256)
        thr = mma_q.get_slice(ctid if self.by_rows else moye.thread_idx.x % 128)
        self.mma, self.add_dq, self.wg = mma_q, add_dq, wg
        self.sdS, self.sK = thr.partition_A(sdS), thr.partition_B(sKc)  # (..., 2), (..., chunks)
        self.acc = thr.partition_fragment_C(make_layout((size(sdS, 0), size(sKc, 0))))
        if sdQ is not None:
            self.staged = sdQ.engine.offset_by(wg * PART)
            self.part = MoYeArray.view_of(self.staged.offset_by(4 * (moye.thread_idx.x % 128)),
                                          DQ_FRAGMENT)
        self.chunks = size(sKc, 2)


@moye.func
def store_ds(tSsdS, acc_p):
    """dS^T (acc_p) into shared memory in 16 bits, where its values lie."""
    for e in range_constexpr(size(acc_p)):
        tSsdS[e] = moye.cast(acc_p[e], tSsdS.dtype)


@moye.func
def share_ds():
    """Both consumer warpgroups wait here until the other's stores of dS (P)
    are done, and visible to the wgmma that read them."""
    moye.fence_proxy_async()                        # the stores, before wgmma reads them
    moye.named_barrier_sync(DS_BARRIER, 256)


@moye.func
def dq_tile(dq, t, b, h, query0):
    """dQ's part of query tile t from this block's keys, FlashAttention-3's
    way, once both consumer warpgroups have stored their keys' dS (buffer
    t % 2 of sdS; share_ds): chunk c of dQ's columns = dS K is the wgmma of
    warpgroup (c + t) % 2 (of a 128-query tile, `by_rows`: each
    warpgroup's of its 64 rows), which stages it in its sdQ part and adds
    it to dQ's float32 sum in global memory by TMA reduce-adds (the atomics
    of FlashAttention-2, in bulk). Waits for every wgmma issued."""
    lead = moye.thread_idx.x % 128 == 0
    ds = dq.sdS[:, :, :, t % 2]
    rows0 = query0 + BLOCK_N * dq.wg if dq.by_rows else query0
    for c in range_constexpr(dq.chunks):
        if dq.by_rows or (c + t) % 2 == dq.wg:
            for i in range_constexpr(size(dq.acc)):
                dq.acc[i] = 0.0
            gemm(dq.mma, dq.acc, ds, dq.sK[:, :, :, c], dq.acc)
            moye.wgmma_wait(0)
            if lead:
                moye.tma_store_wait(0)              # the last reduce has read sdQ
            moye.named_barrier_sync(DQ_BARRIER + dq.wg, 128)
            for i in range_constexpr(size(dq.acc)):
                dq.part[i] = dq.acc[i]
            moye.fence_proxy_async()                # the stores, before TMA reads them
            moye.named_barrier_sync(DQ_BARRIER + dq.wg, 128)
            if lead:
                reduce_add_part(dq.add_dq, dq.staged, b, h, rows0, c, dq.chunks)
    moye.wgmma_wait(0)


@moye.func
def dq_halves(dq, sQ, sdO, stage, t, b, h, query0):
    """The wide plan's dQ part of a query tile from this block's keys, once
    both warpgroups have stored dS (share_ds): warpgroup w's columns,
    2 * CHUNK from w * 2 * CHUNK on, as two chunks of dS K, each stored in
    float32 where only this warpgroup read the tile and its dV and dK wgmma
    have finished: its columns of the tile's dO (the first chunk) and Q
    (the second), 16 KiB each; the lead thread reduce-adds each to dQ's sum
    (the kernel waits for those reads before it releases the stage). Waits
    for every wgmma issued."""
    lead = moye.thread_idx.x % 128 == 0
    bQ, d = size(sQ, 0), size(sQ, 1)
    # the chunk by index, not by a branch on the warpgroup: a wgmma in a branch that ptxas
    # sees as divergent serializes every wgmma of the kernel (C7518)
    for j in range_constexpr(2):
        c = 2 * dq.wg + j
        for i in range_constexpr(size(dq.acc)):
            dq.acc[i] = 0.0
        gemm(dq.mma, dq.acc, dq.sdS[:, :, :, t % 2], dq.sK[:, :, :, c], dq.acc)
        moye.wgmma_wait(0)
        free = (sdO if j == 0 else sQ).engine.offset_by(
            stage * bQ * d + dq.wg * 2 * bQ * CHUNK).recast(Float32)
        part = MoYeArray.view_of(free.offset_by(4 * (moye.thread_idx.x % 128)), DQ_FRAGMENT)
        for i in range_constexpr(size(dq.acc)):
            part[i] = dq.acc[i]
        moye.fence_proxy_async()                    # the stores, before TMA reads them
        moye.named_barrier_sync(DQ_BARRIER + dq.wg, 128)
        if lead:
            reduce_add_part(dq.add_dq, free, b, h, query0, c, dq.chunks)


@moye.func
def reduce_add_part(add_dq, staged, b, h, rows0, c, chunks):
    """The TMA reduce-add of a dQ part staged from the shared engine
    `staged` to dQ's sum: of queries rows0.. (a multiple of BLOCK_N) and
    chunk c of `chunks`."""
    moye.tma_reduce_add(add_dq, (b, h, PART // SUM_ROW * ((rows0 // BLOCK_N) * chunks + c), 0),
                        MoYeArray.view_of(staged, add_dq.smem_layout))
    moye.tma_store_commit()


@moye.kernel
def attention_dq_from_sum(dQ, acc, scale, mma_q):
    """dQ = acc * scale in dQ's type, from acc, dQ's float32 sum as
    dq_tile adds it up (parts of BLOCK_N queries by CHUNK columns in the
    order of the dQ wgmma's accumulator, DQ_FRAGMENT): a block a part, a
    thread its accumulator's values (16-byte loads), put in order through
    shared memory (rows padded by 16 bytes: a warp's pairs meet each bank
    once) and stored 16 bytes at a time."""
    b, h, part = moye.block_idx.z, moye.block_idx.y, moye.block_idx.x
    t = moye.thread_idx.x
    chunks = size(dQ, 3) // CHUNK
    row0, col0 = part // chunks * BLOCK_N, part % chunks * CHUNK
    x = make_fragment_like(DQ_FRAGMENT, Float32)
    for j in range_constexpr(size(x, 1)):
        # thread t's 4 values j at (512 j + 4 t) of the part
        load_chunk(x, j, acc[b, h, (PART * part + 512 * j + 4 * t) // SUM_ROW, None],
                   t % (SUM_ROW // 4))
    tile = moye.shared_array(dQ.dtype, Layout((BLOCK_N, CHUNK), (CHUNK + 8, 1)))
    cD = mma_q.get_slice(t).partition_C(make_identity_array((BLOCK_N, CHUNK)))
    pairs = make_fragment_like(Layout((2, size(cD) // 2)), Float32)
    for i in range_constexpr(size(cD)):
        pairs[i % 2, i // 2] = x[i % 4, i // 4] * scale
    for k in range_constexpr(size(pairs, 1)):
        row, col = cD[2 * k]                # (2 k + 1: the next column)
        store_chunk(tile[row, None], col // 2, pairs, k)
    moye.sync_threads()
    vec = make_fragment_like(Layout(8), dQ.dtype)
    for k in range_constexpr(BLOCK_N * CHUNK // 8 // 128):
        row, c8 = (t + 128 * k) // (CHUNK // 8), (t + 128 * k) % (CHUNK // 8)
        if row0 + row < size(dQ, 2):
            copyto(vec, moye.tile(tile[row, None], (8,), (c8,)))
            copyto(moye.tile(dQ[b, h, row0 + row, None], (8,), (col0 // 8 + c8,)), vec)


@moye.func
def load_row_values(sLD, LSE, D, b, Sq, h, query0, t):
    """A query tile's LSE (log2 units) and D, read from global memory into
    buffer t % 2 of this warpgroup's sLD (2, queries, 2) once, a value a
    thread for 64 queries, two for 128 (issued behind the tile's wgmma, so
    that their latency hides under them; p_ds_tile reads shared memory);
    sLD's buffer."""
    queries = size(sLD, 1)
    tile = sLD[:, :, t % 2]
    for j in range_constexpr(queries // 64):
        i = moye.thread_idx.x % 128 + 128 * j
        row = moye.minimum(query0 + i % queries, Sq - 1)
        if i < queries:
            tile[0, i] = LSE[b, h, row] * LOG2E
        else:
            tile[1, i - queries] = D[b, h, row]
    moye.named_barrier_sync(ROWS_BARRIER + moye.thread_idx.x // 128 - 1, 128)
    return tile


@moye.func
def p_ds_tile(acc_s, acc_p, cS, sLD, query0, key0, Sq, Sk, scale_log2, diagonal, causal):
    """P^T in acc_s and dS^T = P^T * (dP^T - D) in acc_p, from S^T in acc_s
    and dP^T in acc_p (a key tile's, keys key0.., against a query tile from
    query0 on, whose LSE and D are in sLD): P^T = exp2(S^T scaled less the
    query's LSE), 0 for queries past Sq or hidden."""
    for e in range_constexpr(size(acc_s)):
        key, col = cS[e]
        query = query0 + col
        p = moye.exp2_approx(acc_s[e] * scale_log2 - sLD[0, col], ftz=True)
        p = moye.ifelse((query >= Sq) | hidden(query, key0 + key, Sk, diagonal, causal), 0.0, p)
        acc_s[e] = p
        acc_p[e] = p * (acc_p[e] - sLD[1, col])


@moye.func
def products(mma, acc1, tA1, tB1, acc2, tA2, tB2):
    """acc1 = A1 B1^T and acc2 = A2 B2^T by wgmma from shared memory (issued,
    not waited for; both cleared first, so that no register of the first
    is touched while its wgmma run)."""
    for i in range_constexpr(size(acc1)):
        acc1[i] = 0.0
        acc2[i] = 0.0
    moye.wgmma_fence_operand(acc2)
    gemm(mma, acc1, tA1, tB1, acc1)
    gemm(mma, acc2, tA2, tB2, acc2)


def launch(dq, dk, dv, q, k, v, o, do, lse, dlse, scale, causal):
    """dq, dk, dv of attention(q, k, v) by the Hopper kernel (the op checks
    the arrays: head dims of HEAD_DIMS, 16-byte rows)."""
    B, Hq, Sq, d = q.shape
    Hk, Sk = k.shape[1], k.shape[2]
    keys, queries, wide = PLANS[d]
    backend = None if rows.backend_of(q) == "cuda" else "cpu"
    D = rows.empty(q, (B, Hq, Sq), "float32")
    padded = -(-Sq // BLOCK_N) * BLOCK_N
    dq_sum = rows.empty(q, (B, Hq, padded * d // SUM_ROW, SUM_ROW), "float32")   # SUM_BOX's
    replay.launch(attention_row_dots, ((padded // ROWS_PER_BLOCK, Hq, B), 128),
                  (D, do, o, dlse, dq_sum.reshape(B, Hq, padded, d)), backend)   # zero-filled
    dtype = element_type(q)
    if wide:
        mma_s, mma_g = consumers_mma(queries // 2, dtype, "SS", "K", "N"), \
            consumers_mma(d // 2, dtype, "SS", "MN", "N")
    else:
        mma_s, mma_g = consumers_mma(queries, dtype, "SS", "K"), \
            consumers_mma(d, dtype, "RS", "MN")
    copies = [moye.make_tma_copy(moye.TMA_LOAD, t, box(n)) for t, n in ((q, queries), (k, keys),
                                                                     (v, keys), (do, queries))]
    add_dq = moye.make_tma_copy(moye.TMA_REDUCE_ADD, dq_sum, SUM_BOX)
    replay.launch(attention_bwd_sm90, ((-(-Sk // keys), Hk, B), THREADS),
                  (*copies, add_dq, dk, dv, lse, D, Sq, Sk, Hq // Hk, float(scale),
                   float(scale * LOG2E), k_major(dtype, keys, d),
                   k_major(dtype, queries, d, STAGES), mn_major(d, queries, STAGES),
                   ds_layout(dtype, keys, queries), key_chunks(d, keys), mma_s, mma_g,
                   dq_mma(dtype, queries // BLOCK_N), bool(causal), wide), backend)
    replay.launch(attention_dq_from_sum, ((padded // BLOCK_N * (d // CHUNK), Hq, B), 128),
                  (dq, dq_sum, float(scale), dq_mma(dtype)), backend)


@functools.lru_cache(maxsize=None)
def ds_layout(dtype, keys, queries):
    """dS of a query tile in shared memory, (queries, keys, 2 buffers),
    queries contiguous: wgmma's A (BLOCK_N rows at a time), MN-major,
    unswizzled (8x8 core matrices: a thread's stores are a base plus
    constants); seen as (keys, queries) (keys_by_queries), the K-major A of
    dK += dS^T Q."""
    return tile_to_shape(gmma_smem_layout(dtype, "MN", 0, (BLOCK_N, keys)),
                         (queries, keys, 2))


def keys_by_queries(tile):
    """The (keys, queries, buffers) view of a (queries, keys, buffers)
    shared tile (ds_layout's)."""
    return MoYeArray.view_of(tile.engine, transposed(tile.layout, *(size(tile, i)
                                                                    for i in range(3))))


@functools.lru_cache(maxsize=None)
def key_chunks(d, keys):
    """The block's K tile (keys, d; k_major: boxes of CHUNK columns) seen as
    (CHUNK columns, keys, d / CHUNK chunks): a chunk at a time, as the
    MN-major B of dQ += dS K.
        >>> key_chunks(128, 128)
        Sw<3,3,3> o 0 o (64,(8,16),2):(1,(64,512),8192)
    """
    return composition(Swizzle(3, 3, 3), Layout((CHUNK, (8, keys // 8), d // CHUNK),
                                                (1, (CHUNK, 8 * CHUNK), keys * CHUNK)))


@functools.lru_cache(maxsize=None)
def dq_mma(dtype, warpgroups=1):
    """The wgmma of dQ += dS K, A and B MN-major: one warpgroup's, 64
    queries by CHUNK columns, or two warpgroups' one above the other."""
    return make_tiled_mma(moye.wgmma_op(CHUNK, dtype, dtype, Float32, "SS", "MN", "MN"),
                          make_layout((warpgroups, 1)))

"""Attention's forward pass on Hopper (FlashAttention-3's design, first
version): O = softmax(Q K^T * scale) V and the row log-sum-exp, for head
dims 64, 128 and 256 (96 runs attention_sm80's kernel).

- A block owns 128 or 192 rows of Q of one head (TILES): a producer
  warpgroup and two or three consumer warpgroups of 64 rows each
  (setmaxnreg moves the producer's registers to them).
- The producer's first thread TMA-loads Q once, then K and V tiles into
  rings of stages, one for K and one for V (TmaPipeline: full and empty
  mbarriers), K one tile ahead, skipping the causal tiles past the block's
  last visible key. K_j's stage is free once S_j is computed, so K_{j+1}
  loads while the softmax and P_{j-1} V_{j-1} run.
- Each consumer computes S = Q K^T by wgmma from shared memory, the online
  softmax in registers (exp2, the scale folded in, a row's values in the 4
  lanes of a quad), converts P to 16 bits in registers (the accumulator's
  values in order are the A fragment's: PTX ISA, "Register Fragments"), and
  runs O += P V by wgmma with A from registers and V read MN-major from the
  same 128-byte-swizzled tile TMA wrote (its transpose: no copy). The
  softmax of tile j runs while tile j-1's P V does (FlashAttention-3's
  intra-warpgroup overlap): S_j's wgmma are issued, then P_{j-1} V_{j-1}'s,
  and the softmax waits for S_j's alone; and the consumer warpgroups take
  turns to issue their wgmma (ping-pong: one's GEMMs run while the others'
  softmax do), each at the named barriers of its index, a run-time value
  (one copy of the loop for all). Both at every head dim (TILES). A
  warpgroup whose rows see fewer tiles than the block's (causal, or rows
  past Sq) issues nothing for the others, only takes its turns.
- The epilogue divides by the row sums, writes each warpgroup's O into
  its rows of Q's tile, or of a tile of O's own (below), and TMA-stores
  them; LSE from the registers.
- At head dim 64, where K is short (PERSISTENT_KEYS), a block per
  multiprocessor walks query blocks (query_blocks): the next one's K and V
  load while this one's O is stored. O has a tile of its own there
  (OWN_O_BYTES), so Q's tile is free once the block's last S = Q K^T is
  done and the next Q loads during the last P V and O's store.
Q, K, V tiles are (rows, D) boxes of 64 values (128 bytes) each, one after
another; TMA zero-fills rows past the sequences, which the masks drop.
"""
import functools
import math

import moye
from moye import (Float32, Layout, MoYeArray, Swizzle, composition, gemm, gmma_smem_layout,
                  make_fragment_like, make_identity_array, make_layout, make_tiled_mma, size,
                  tile_to_shape)

from ..compiler import Constexpr, range_constexpr
from . import replay, rows
from .attention_sm80 import LN2, LOG2E, crosses, hidden, key_tiles
from .gemm_sm90 import SMS_H100, batched_tile, element_type

CHUNK = 64                  # values of a 128-byte swizzle row: a TMA box's columns
HEAD_DIMS = (64, 128, 256)
# head dim -> (query rows a block: 64 a consumer warpgroup, keys a tile, stages of each of
# the K and V rings, overlap, persistent where K has at most PERSISTENT_KEYS rows).
# - At 64 three consumer warpgroups (FlashAttention-3's 192-row tiles): a tile's exp2 take
#   as long as its wgmma there, and two warpgroups' softmax run while the third's GEMMs do.
#   H100, TFLOP/s at 1k / 4k / 16k keys, two warpgroups -> three: 284 / 386 / 403 -> 321 /
#   449 / 491 (causal 205 / 349 / 424 -> 202 / 345 / 460; benchmarks/RESULTS.md, session 34).
# - At 256 (Q's tile and 2 stages of 80 keys: 224 KiB) the overlap spills ~52 B (O's 128
#   accumulators, S_j's 40 and P_{j-1}'s 20 live together), and is still faster: 664
#   against 550 TFLOP/s without it, at 4k keys on an H200 (benchmarks/RESULTS.md).
# - Persistent at 64 alone: at 128 and 256 it ran slower at every length (H100, 1k keys:
#   d128 456 -> 328 TFLOP/s, d256 498 -> 319; d128 with O's own tile, room for 2 stages
#   only: 465 -> 337, session 35).
TILES = {64: (192, 128, 4, True, True), 128: (128, 128, 3, True, False),
         256: (128, 80, 2, True, False)}
THREADS = 384               # a producer warpgroup and two consumer ones (the backward's too)
# K's rows up to which a block per multiprocessor walks query blocks (persistent, TILES): the
# next block's K and V load while this one's O is stored. At 1k keys, head dim 64, on an H200:
# 412 -> 404 us, causal 312 -> 280 (benchmarks/RESULTS.md, session 25); longer K gains nothing
PERSISTENT_KEYS = 2048
# shared memory up to which O gets a tile of its own (persistent). H100, head dim 64, TFLOP/s
# at 1k / 4k / 16k keys, O through Q's tile -> its own: 326 / 453 / 485 -> 349 / 461 / 474,
# causal 205 / 363 / 466 -> 242 / 393 / 454 (benchmarks/RESULTS.md, session 35)
OWN_O_BYTES = 200 * 1024
PINGPONG = 1                # named barriers 1, 2 (, 3): the consumer warpgroups' turns
STORE_BARRIER = 4           # 4, 5 (, 6): a consumer warpgroup's O in shared memory, for TMA


@moye.kernel(fast_math=True)
def attention_forward_sm90(load_q, load_k, load_v, store_o, LSE, Sq, Sk, groups, scale_log2,
                           sQ_layout, sK_layout, sV_layout, mma_s, mma_o,
                           bN: Constexpr, stages: Constexpr, causal: Constexpr,
                           overlap: Constexpr, persistent: Constexpr, own_o: Constexpr):
    bM, d = size(sQ_layout, 0), size(sQ_layout, 1)
    consumers = bM // 64                                    # warpgroups of 64 rows
    ebytes = load_q.dtype.bits // 8
    sQ = moye.shared_array(load_q.dtype, sQ_layout, align=1024)         # (bM, d)
    sK = moye.shared_array(load_k.dtype, sK_layout, align=1024)         # (bN, d, stages)
    sV = moye.shared_array(load_v.dtype, sV_layout, align=1024)         # (d, bN, stages): V^T
    # O leaves through Q's tile, or (`own_o`, walking query blocks where shared memory has
    # room) a tile of its own: the next Q then loads while this block's last P V and O's
    # store run
    sO = moye.shared_array(load_q.dtype, sQ_layout, align=1024) if own_o else sQ
    q_full = moye.mbarrier()
    q_empty = moye.mbarrier()           # every consumer warpgroup is done reading sQ
    # K and V in rings of their own (lane 0 of each consumer warp frees a stage): K_j is free
    # once S_j is, so K_{j+1} loads while P_{j-1} V_{j-1} and the softmax run
    pipe_k = moye.TmaPipeline(stages, consumers=4 * consumers)
    pipe_v = moye.TmaPipeline(stages, consumers=4 * consumers)
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(q_full, 1)
        moye.mbarrier_init(q_empty, consumers)
        pipe_k.init()
        pipe_v.init()
    moye.sync_threads()
    blocks = (Sq + bM - 1) // bM * size(LSE, 1) * size(LSE, 0)     # query blocks of all heads
    warpgroup = moye.warp_idx() // 4
    if warpgroup == 0:                                      # the producer
        moye.setmaxnreg_dec(24)
        if tid == 0:
            k_stage, k_phase, v_stage, v_phase = 0, 0, 0, 0
            n = 0
            for w in query_blocks(blocks, persistent):
                mb, h, b = query_block(w, bM, Sq, size(LSE, 1), size(LSE, 0), persistent)
                if n > 0:
                    moye.mbarrier_wait(q_empty, (n - 1) % 2)     # the last block's O has left
                moye.mbarrier_arrive_expect_tx(q_full, bM * d * ebytes)
                load_rows(load_q, sQ, b, h, mb * bM, d, bM, q_full)
                n_tiles = key_tiles(mb * bM, bM, bN, Sq, Sk, causal)
                kv = h // groups
                for j in range(n_tiles + 1):                # K one tile ahead of V
                    if j < n_tiles:
                        k_stage, k_phase = fill_stage(pipe_k, k_stage, k_phase, b, kv, j * bN,
                                                      d, bN, load_k, sK)
                    if j > 0:
                        v_stage, v_phase = fill_stage(pipe_v, v_stage, v_phase, b, kv,
                                                      (j - 1) * bN, d, bN, load_v, sV)
                n += 1
    else:
        # the consumers; with `overlap` they take turns (ping-pong), each at the barriers of
        # its index (warp-uniform, at run time: one copy of the loop for all)
        consume(warpgroup - 1 if overlap else -1, sQ, sO, sK, sV, q_full, q_empty, pipe_k,
                pipe_v, mma_s, mma_o, store_o, LSE, blocks, Sq, Sk, groups, scale_log2, bN, causal,
                overlap, persistent)


def query_blocks(blocks, persistent):
    """The work items this block takes, of `blocks` in all: its own, or
    (persistent) every grid_dim-th from block_idx on, a run-time loop."""
    if persistent:
        return moye.range(moye.block_idx.x, blocks, moye.grid_dim.x)
    return (moye.block_idx.x,)


@moye.func
def query_block(w, bM, Sq, heads, batches, persistent):
    """(query block, head, batch) of work item w. A block an item: the last
    query blocks first (under a causal mask they see the most keys, and the
    longest last would leave a wave's tail waiting for them), a head's
    blocks side by side (they share K and V in L2). Persistent: every
    head's last query block first, then every head's next to last, ..., so
    that the blocks, taking the items in turn, get like loads. Blocks of bM rows."""
    m = (Sq + bM - 1) // bM
    if persistent:
        hb = w % (heads * batches)
        return m - 1 - w // (heads * batches), hb % heads, hb // heads
    return m - 1 - w % m, w // m % heads, w // m // heads


@moye.func
def consume(wg, sQ, sO, sK, sV, q_full, q_empty, pipe_k, pipe_v, mma_s, mma_o, store_o, LSE,
            blocks, Sq, Sk, groups, scale_log2, bN, causal, overlap, persistent):
    """A consumer warpgroup's work on the key tiles of each query block this
    block takes (see the module doc): `wg` its index (0, 1, 2) where the
    warpgroups take turns (ping-pong), -1 where they do not."""
    bM, d = size(sQ, 0), size(sQ, 1)
    consumers = bM // 64
    moye.setmaxnreg_inc(240 if consumers == 2 else 160)     # the producer's 128 keep 24
    diagonal = Sk - Sq
    dtype = sQ.dtype
    ctid = moye.thread_idx.x - 128
    lane0 = ctid % 32 == 0
    thr_s, thr_o = mma_s.get_slice(ctid), mma_o.get_slice(ctid)
    tSsQ = thr_s.partition_A(sQ)
    tSsK = thr_s.partition_B(sK)                        # (..., stages)
    tOsV = thr_o.partition_B(sV)
    acc_s = thr_s.partition_fragment_C(make_layout((bM, bN)))
    p16 = thr_o.partition_fragment_A(make_layout((bM, bN)))
    acc_o = thr_o.partition_fragment_C(make_layout((bM, d)))
    row_max = make_fragment_like(Layout(2), Float32)        # a thread's 2 rows, log2 units
    row_sum = make_fragment_like(Layout(2), Float32)
    correction = make_fragment_like(Layout(2), Float32)     # O's factor for the new maxima
    k_stage, k_phase, v_stage, v_phase = 0, 0, 0, 0
    n = 0
    for w in query_blocks(blocks, persistent):
        mb, h, b = query_block(w, bM, Sq, size(LSE, 1), size(LSE, 0), persistent)
        row0 = mb * bM
        n_tiles = key_tiles(row0, bM, bN, Sq, Sk, causal)
        # the tiles this warpgroup's 64 rows see, a prefix of the block's: past them (causal
        # tiles above its rows, or rows past Sq) it issues no wgmma and no softmax, but
        # still takes its turns and frees the stages
        mine0 = row0 + (moye.warp_idx() // 4 - 1) * 64     # (uniform: wgmma loop on it)
        mine = key_tiles(mine0, 64, bN, Sq, Sk, causal)
        for i in range(size(acc_o)):
            acc_o[i] = 0.0
        for r in range(2):
            row_max[r] = -math.inf
            row_sum[r] = 0.0
        moye.mbarrier_wait(q_full, n % 2)
        if n_tiles > 0:
            # with `overlap`, the softmax of tile j runs while the wgmma of O += P_{j-1}
            # V_{j-1} do (FA3's intra-warpgroup overlap): S_j is issued first, waited for alone
            if overlap and wg == consumers - 1:
                moye.named_barrier_arrive(PINGPONG, 256)        # warpgroup 0 issues first
            pipe_k.consumer_wait(k_stage, k_phase)
            lone_turn(mine > 0, overlap, wg, consumers, False, mma_s, acc_s, tSsQ,
                      tSsK[:, :, :, k_stage], True)                              # S_0
            k_stage, k_phase = release(pipe_k, k_stage, k_phase, lane0)
            if mine > 0:
                softmax_tile(acc_s, mma_s, row_max, row_sum, correction, scale_log2, 0, bM, bN,
                             row0, Sk, diagonal, causal)
                for i in range_constexpr(size(p16)):    # P in 16 bits: the accumulators
                    p16[i] = moye.cast(acc_s[i], dtype)
            for j in range(1, mine):
                pipe_k.consumer_wait(k_stage, k_phase)
                pipe_v.consumer_wait(v_stage, v_phase)                          # V_{j-1}
                if overlap:
                    turn(overlap, wg, consumers, True, False)
                    scores(mma_s, acc_s, tSsQ, tSsK[:, :, :, k_stage])          # S_j
                    gemm(mma_o, acc_o, p16, tOsV[:, :, :, v_stage], acc_o)     # O += P V
                    turn(overlap, wg, consumers, False, False)
                    moye.wgmma_wait(1)              # S_j is done; P V runs on
                else:                               # P V, then S_j: fewer registers live
                    gemm(mma_o, acc_o, p16, tOsV[:, :, :, v_stage], acc_o)
                    moye.wgmma_wait(0)
                    scores(mma_s, acc_s, tSsQ, tSsK[:, :, :, k_stage])
                    moye.wgmma_wait(0)
                k_stage, k_phase = release(pipe_k, k_stage, k_phase, lane0)
                softmax_tile(acc_s, mma_s, row_max, row_sum, correction, scale_log2, j, bM,
                             bN, row0, Sk, diagonal, causal)
                moye.wgmma_wait(0)
                v_stage, v_phase = release(pipe_v, v_stage, v_phase, lane0)
                for i in range_constexpr(size(acc_o)):
                    acc_o[i] = acc_o[i] * correction[i % 4 // 2]
                for i in range_constexpr(size(p16)):
                    p16[i] = moye.cast(acc_s[i], dtype)
            for j in range(moye.maximum(mine, 1), n_tiles):    # past this warpgroup's tiles
                pipe_k.consumer_wait(k_stage, k_phase)
                pipe_v.consumer_wait(v_stage, v_phase)
                lone_turn(j == mine, overlap, wg, consumers, False, mma_o, acc_o, p16,
                          tOsV[:, :, :, v_stage], False)                     # P_{j-1} V_{j-1}
                k_stage, k_phase = release(pipe_k, k_stage, k_phase, lane0)
                v_stage, v_phase = release(pipe_v, v_stage, v_phase, lane0)
        if ctid % 128 == 0 and sO is not sQ:
            moye.mbarrier_arrive(q_empty)       # this warpgroup's S = Q K^T are done
        if n_tiles > 0:
            pipe_v.consumer_wait(v_stage, v_phase)
            lone_turn(mine == n_tiles, overlap, wg, consumers, True, mma_o, acc_o, p16,
                      tOsV[:, :, :, v_stage], False)                             # P V, the last
            v_stage, v_phase = release(pipe_v, v_stage, v_phase, lane0)
        store_rows(store_o, sO, LSE, acc_o, mma_o, row_max, row_sum, b, h, row0, Sq,
                   sO is not sQ)
        if ctid % 128 == 0 and sO is sQ:
            moye.mbarrier_arrive(q_empty)               # this warpgroup's O has left sQ
        n += 1
    if ctid % 128 == 0 and sO is not sQ:
        moye.tma_store_wait(0)                          # the last O has left sO


@moye.func
def turn(pingpong, wg, consumers, begins, last):
    """FlashAttention-3's ping-pong: the consumer warpgroups (`consumers` of
    them) take turns in order to issue their wgmma (named barriers PINGPONG
    + wg), so that one's GEMMs run while the others' softmax do. A turn
    `begins` by waiting for this warpgroup's barrier and ends by arriving at
    the next one's (not after the last warpgroup's `last` turn: warpgroup 0
    no longer waits)."""
    if pingpong:
        if begins:
            moye.named_barrier_sync(PINGPONG + wg, 256)
        elif not last or wg < consumers - 1:
            moye.named_barrier_arrive(PINGPONG + (wg + 1) % consumers, 256)


@moye.func
def lone_turn(issue, overlap, wg, consumers, last, mma, acc, a, b, zeroed):
    """A turn with one GEMM, acc (+)= a b (acc `zeroed` first), issued where
    `issue` (a warpgroup past its tiles issues none) and waited for inside
    the branch: no wgmma is in flight where the paths meet (ptxas would
    serialize every wgmma, C7515)."""
    turn(overlap, wg, consumers, True, False)
    if issue:
        if zeroed:
            for i in range_constexpr(size(acc)):
                acc[i] = 0.0
        gemm(mma, acc, a, b, acc)
        turn(overlap, wg, consumers, False, last)
        moye.wgmma_wait(0)
    else:
        turn(overlap, wg, consumers, False, last)


@moye.func
def scores(mma_s, acc_s, tSsQ, tSsK):
    """Issue S = Q K^T for this tile (not waited for)."""
    for i in range_constexpr(size(acc_s)):
        acc_s[i] = 0.0
    gemm(mma_s, acc_s, tSsQ, tSsK, acc_s)


@moye.func
def softmax_tile(acc_s, mma_s, row_max, row_sum, correction, scale_log2, j, bM, bN, row0, Sk,
                 diagonal, causal):
    """FlashAttention's online softmax of key tile j's scores `acc_s` (a
    wgmma accumulator of `mma_s` on a (bM, bN) tile: value i of a thread
    lies in row half (i % 4) // 2), masked where the tile crosses K's end or
    the diagonal of this warpgroup's 64 rows (the block's from row0): the
    running row maxima (log2 units) and sums, acc_s made exp2 of the scaled
    scores less the new maxima, and `correction`, O's factor for them."""
    mine0 = row0 + (moye.warp_idx() // 4 - 1) * 64
    if crosses(j * bN, bN, mine0, Sk, diagonal, causal):
        # each value's (row, key) in the tile, from the broadcast thread index: made here,
        # not before the loops and kept live in registers through them
        ctid = moye.warp_idx() * 32 + moye.lane_idx() - 128
        cS = mma_s.get_slice(ctid).partition_C(make_identity_array((bM, bN)))
        for i in range_constexpr(size(acc_s)):
            row, key = cS[i]
            if hidden(row0 + row, j * bN + key, Sk, diagonal, causal):
                acc_s[i] = -math.inf
    for r in range_constexpr(2):
        m = -math.inf
        for i in range_constexpr(r * 2, size(acc_s), 4):        # row half r: values 4k + 2r, +1
            m = moye.maximum(m, moye.maximum(acc_s[i], acc_s[i + 1]))
        m_new = moye.maximum(row_max[r], moye.warp_reduce(m, "max", 4) * scale_log2)
        base = moye.ifelse(m_new == -math.inf, 0.0, m_new)         # a row that sees no key yet
        correction[r] = moye.exp2_approx(row_max[r] - base, ftz=True)
        row_max[r] = m_new
        total = 0.0
        for i in range_constexpr(r * 2, size(acc_s), 4):
            for e in range_constexpr(2):
                p = moye.exp2_approx(acc_s[i + e] * scale_log2 - base, ftz=True)
                acc_s[i + e] = p
                total = total + p
        row_sum[r] = row_sum[r] * correction[r] + moye.warp_reduce(total, "sum", 4)


@moye.func
def store_rows(store_o, sO, LSE, acc_o, mma_o, row_max, row_sum, b, h, row0, Sq, deferred):
    """O = acc_o / the row sums (0 for a row that saw no key) through shared
    memory and TMA stores, and the rows' LSE (-inf there) from the
    registers. This warpgroup's 64 rows of sO take its O: Q's tile (it
    alone read those rows, and its wgmma are done), or, `deferred`, a tile
    of O's own whose last store is waited for here, before the rows are
    written again, rather than after it is issued. TMA clips the rows past
    Sq."""
    # O's places from this thread's index as the warp's lane 0 broadcasts it (a convergent
    # read): in the persistent loop the compiler then computes them here, for each block,
    # rather than once before the loop and kept live in registers across the main loop
    ctid = moye.warp_idx() * 32 + moye.lane_idx() - 128
    wg = ctid // 128
    bM, d = size(sO, 0), size(sO, 1)
    cO = mma_o.get_slice(ctid).partition_C(make_identity_array((bM, d)))
    if deferred:
        if ctid % 128 == 0:
            moye.tma_store_wait(0)                      # the last block's O has left sO
        moye.named_barrier_sync(STORE_BARRIER + wg, 128)
    for r in range_constexpr(2):
        seen = row_sum[r] > 0.0
        inv = moye.ifelse(seen, 1.0 / row_sum[r], 0.0)
        for i in range_constexpr(size(acc_o)):
            if i % 4 // 2 == r:
                row, col = cO[i]
                sO[row, col] = moye.cast(acc_o[i] * inv, sO.dtype)
        row = row0 + cO[2 * r][0]
        if ctid % 4 == 0 and row < Sq:                  # a quad's first lane: its rows' LSE
            LSE[b, h, row] = moye.ifelse(seen, (row_max[r] + moye.log2(row_sum[r])) * LN2,
                                         -math.inf)
    moye.fence_proxy_async()                            # the stores, before TMA reads them
    moye.named_barrier_sync(STORE_BARRIER + wg, 128)
    if ctid % 128 == 0:
        for c in range(d // CHUNK):
            rows_ = MoYeArray.view_of(sO.engine.offset_by((c * bM + wg * 64) * CHUNK),
                                      store_o.smem_layout)
            moye.tma_store(store_o, (b, h, row0 + wg * 64, c * CHUNK), rows_)
        moye.tma_store_commit()
        if not deferred:
            moye.tma_store_wait(0)


@moye.func
def fill_stage(pipe, stage, phase, b, h, row0, d, rows, load1, ring1, load2=None, ring2=None):
    """The producer's step: wait until `stage` of the ring is free, then
    TMA-load rows row0.. (`rows` of them) of head h of batch b of one array
    (or two) into its ring's stage; the next (stage, phase)."""
    nbytes = rows * d * (load1.dtype.bits // 8) * (1 if load2 is None else 2)
    full = pipe.producer_acquire(stage, phase, nbytes)
    load_rows(load1, ring1[:, :, stage], b, h, row0, d, rows, full)
    if load2 is not None:
        load_rows(load2, ring2[:, :, stage], b, h, row0, d, rows, full)
    return pipe.advance(stage, phase)


@moye.func
def release(pipe, stage, phase, lane0):
    """A consumer warp is done reading `stage` (its lane 0 says so); the
    next (stage, phase)."""
    if lane0:
        pipe.consumer_release(stage)
    return pipe.advance(stage, phase)


@moye.func
def load_rows(load, tile, b, h, row0, d, rows, bar):
    """TMA-load rows row0.. (`rows` of them, d values each) of head h of
    batch b into `tile`, a box of CHUNK columns at a time, one after
    another."""
    for c in range(d // CHUNK):
        dst = MoYeArray.view_of(tile.engine.offset_by(c * rows * CHUNK), load.smem_layout)
        moye.tma_load(load, dst, (b, h, row0, c * CHUNK), bar)


@functools.lru_cache(maxsize=None)
def box(rows):
    """A TMA box of (1, 1, rows, CHUNK) 16-bit values, 128-byte swizzled."""
    return batched_tile(batched_tile(composition(Swizzle(3, 3, 3),
                                                 Layout((rows, CHUNK), (CHUNK, 1)))))


@functools.lru_cache(maxsize=None)
def k_major(dtype, rows, d, stages=None):
    """A (rows, d) tile, or a ring of `stages` of them, K-major for wgmma:
    boxes of CHUNK columns one after another, each 128-byte swizzled, as
    TMA writes them (box)."""
    tile = gmma_smem_layout(dtype, "K", 128, (rows, d))
    return tile if stages is None else tile_to_shape(tile, (rows, d, stages))


@functools.lru_cache(maxsize=None)
def mn_major(d, rows, stages):
    """The same bytes as k_major(dtype, rows, d, stages) seen as (d, rows,
    stages): MN-major, the transposed tile as wgmma's B.
        >>> mn_major(128, 128, 2)
        Sw<3,3,3> o 0 o ((64,2),(8,16),2):((1,8192),(64,512),16384)
    """
    return composition(Swizzle(3, 3, 3), Layout(((CHUNK, d // CHUNK), (8, rows // 8), stages),
                                                ((1, rows * CHUNK), (CHUNK, 8 * CHUNK),
                                                 rows * d)))


@functools.lru_cache(maxsize=None)
def consumers_mma(n, dtype, a_from, b_major, along="M", warpgroups=2):
    """The consumer warpgroups' wgmma, 64 rows each: N = n, A from shared
    memory ("SS") or registers ("RS"), B `b_major` ("K", "MN"); the
    warpgroups one above the other (`along` "M": 64 rows each) or side by
    side ("N": n columns each). The layouts and MMAs a launch takes are made
    once (cached): a call then makes only its TMA copies."""
    return make_tiled_mma(moye.wgmma_op(n, dtype, dtype, Float32, a_from, "K", b_major),
                          make_layout((warpgroups, 1) if along == "M" else (1, warpgroups)))


def launch(q, k, v, o, lse, scale, causal, blocks=None):
    """o, lse = attention(q, k, v) by attention_forward_sm90 (the op checks
    the arrays: head dims of HEAD_DIMS, 16-byte rows). A block a query
    block, or, where K has at most PERSISTENT_KEYS rows (a block's work is
    short beside its start and end), a block a multiprocessor walking query
    blocks; `blocks` fixes the grid (tests: fewer than the query blocks is
    persistent, more is a block a query block)."""
    B, Hq, Sq, d = q.shape
    bM, bN, stages, overlap, persists = TILES[d]
    dtype = element_type(q)
    sQ, sK, sV = k_major(dtype, bM, d), k_major(dtype, bN, d, stages), \
        mn_major(d, bN, stages)
    mma_s = consumers_mma(bN, dtype, "SS", "K", warpgroups=bM // 64)
    mma_o = consumers_mma(d, dtype, "RS", "MN", warpgroups=bM // 64)
    copies = [moye.make_tma_copy(moye.TMA_LOAD, t, box(rows_))
              for t, rows_ in ((q, bM), (k, bN), (v, bN))]
    items = -(-Sq // bM) * Hq * B
    if blocks is None:
        persistent = persists and k.shape[2] <= PERSISTENT_KEYS
        sms = rows.multiprocessors(q) if rows.backend_of(q) == "cuda" else SMS_H100
        blocks = min(items, sms) if persistent else items
    else:
        blocks = min(blocks, items)
        persistent = blocks < items
    args = (*copies, moye.make_tma_copy(moye.TMA_STORE, o, box(64)), lse, Sq, k.shape[2],
            Hq // k.shape[1], float(scale * LOG2E), sQ, sK, sV, mma_s, mma_o, bN, stages,
            bool(causal), overlap, persistent,
            persistent and (2 * bM + 2 * stages * bN) * d * q.itemsize <= OWN_O_BYTES)
    replay.launch(attention_forward_sm90, ((blocks, 1, 1), 128 + 2 * bM), args,
                  None if rows.backend_of(q) == "cuda" else "cpu")

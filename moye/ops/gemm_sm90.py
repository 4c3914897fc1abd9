"""moye.ops.matmul's Hopper kernel: a warp-specialized, persistent wgmma
GEMM with its epilogue fused (CUTLASS: the sm90 TMA warp-specialized
kernels with an EVT epilogue).

    out[b] = activation(alpha * a[b] @ b[b]^T + bias) + beta * residual[b]

a (Ba, M, K) and b (Bb, N, K) of float16 or bfloat16, each K-major or
M/N-major (the transposed view of one; wgmma reads both from shared
memory), or both of float32, K-major, multiplied as tf32 (wgmma
TFloat32, K = 8: the tensor cores ignore the low 13 mantissa bits), with
Ba and Bb the batch count or 1 (shared by every batch); out
(B, M, N) row-major, of the inputs' type or float32. Every global tile
moves by TMA, so rows must be 16-byte aligned (matmul_op pads where not).

One block of 128 * (1 + consumers) threads per multiprocessor walks the
output tiles (bM x bN) of every batch in a grouped order (tile_coords):
- warpgroup 0 is the producer: one thread TMA-loads A's and B's tiles into
  a ring of `stages` 128-byte-swizzled stages, each one swizzle row of K
  (bk: 64 16-bit values, 32 tf32) (a K-major tile in one box, an M/N-major
  one in boxes of 64 rows: a 128-byte swizzle spans 64 16-bit values);
- the consumer warpgroups each own 64 (or bM / consumers) rows of the tile
  and issue wgmma from the stages;
- the epilogue: each consumer warpgroup applies epilogue.epilogue_of to
  its accumulators (their coordinates from an identity array partitioned
  like them), writes one box of 64 rows by 128 bytes at a time to shared
  memory (stmatrix for 16-bit outputs), which one of its threads
  TMA-stores (TMA clips what lies outside out), while the producer already
  loads the next tile; an output TMA cannot store is stored from the
  registers (store_values);
- split along K (a config's `splits`), a tile's K is shared among that many
  (tile, split) units: each writes its float32 partial sums to a workspace
  and takes a ticket of its tile, and the last to take one adds them all
  up, in split order, and runs the epilogue (settle_split), in one launch.

A tile of few rows (bM 8, 16 or 32: few-row GEMMs, decode) runs swapped,
out^T = b a^T: b's bN columns lie on wgmma's 64 rows (bN / 64 consumer
warpgroups) and a's bM rows are wgmma's N, so that the tensor cores do not
multiply 64 rows where there are a few, and a split's partial sums are a
few rows too (cuBLAS's few-row kernels do the same); the epilogue stores
out^T from the registers, its bias along the rows (kernel_tile).
"""
import functools

import moye
from moye import (CopyAtom, Float32, Layout, MoYeArray, Swizzle, UniversalCopy,
                  composition, copyto, gemm, make_fragment_like, make_identity_array,
                  make_layout, make_tiled_copy_C, make_tiled_mma, size, tile_to_shape)

from ..compiler import range_constexpr
from ..compiler.arguments import as_array_arg
from ..errors import MoyeError
from . import rows, workspace
from .epilogue import epilogue_of

SWIZZLE_BYTES = 128         # a swizzle row: a stage's K (bk), an M/N-major box's rows
EPI_ROWS = 64               # an epilogue box: 64 rows of 128 bytes
EPI_SLOTS = 2               # boxes each consumer warpgroup has in flight
SPLIT_BARRIER = 3           # the named barrier of the consumers' split-K settling (1, 2: theirs)
SMS_H100 = 132              # the heuristic's multiprocessors where no device says (CPU backend)
SMEM_SM90 = 227 * 1024      # shared memory a block may opt in to on sm_90
TMA_ALIGN = 16              # bytes: a TMA tensor's address and strides are multiples of it
IN_TYPES = ("Float16", "BFloat16", "Float32")   # Float32 runs as tf32 (wgmma: TFloat32)


def bk(ebytes=2):
    """A stage's K: the values of `ebytes` bytes in one 128-byte swizzle
    row (64 of 16 bits; 32 of 32 bits, tf32).
        >>> bk(2), bk(4)
        (64, 32)
    """
    return SWIZZLE_BYTES // ebytes


@functools.lru_cache(maxsize=None)
def config(bM=128, bN=256, stages=4, group=8, splits=1):
    """A configuration: (bM, bN, stages, group, splits) of an output tile
    bM x bN, checked. bM is 64 (one consumer warpgroup) or 128 (two), bN a
    multiple of 64 up to 256; or bM is one of SWAPPED_ROWS and bN 64 or 128
    (a swapped tile: kernel_tile); `splits` > 1 splits K among that many
    blocks per tile, the last of which to finish adds up their float32
    partial sums (split-K, in one launch).
        >>> config(128, 128), config(16, 64, 16)
        ((128, 128, 4, 8, 1), (16, 64, 16, 8, 1))
    """
    tile_ok = (bM in (64, 128) and bN in (64, 128, 192, 256)) or \
        (bM in SWAPPED_ROWS and bN in (64, 128))
    if not tile_ok or not 2 <= stages <= MAX_STAGES or \
            not (isinstance(group, int) and group >= 1) or not 1 <= splits <= MAX_SPLITS:
        raise MoyeError(f"gemm_sm90.config: bM={bM!r} bN={bN!r} stages={stages!r} "
                        f"group={group!r} splits={splits!r}; need bM 64 or 128 with bN 64..256 by "
                        f"64, or bM one of {SWAPPED_ROWS} with bN 64 or 128; 2..{MAX_STAGES} "
                        f"stages, 1..{MAX_SPLITS} splits")
    return bM, bN, stages, group, splits


def kernel_tile(cfg):
    """The kernel's (rows, columns) tile of `cfg` and whether it is swapped:
    an output tile of few rows (bM in SWAPPED_ROWS) runs as out^T's tile,
    b's bN columns on wgmma's rows and a's bM rows as its N.
        >>> kernel_tile(config(128, 256)), kernel_tile(config(8, 128, 8))
        ((128, 256, False), (128, 8, True))
    """
    bM, bN = cfg[:2]
    return (bN, bM, True) if bM in SWAPPED_ROWS else (bM, bN, False)


MAX_SPLITS = 16
MAX_STAGES = 16
SWAPPED_ROWS = (8, 16, 32)      # a swapped tile's rows of out: wgmma's N (kernel_tile)
# the tiles, unsplit, each with the stages that fit (smem_bytes): the narrow 64 x 64 tile,
# which the few-row GEMMs stream their weights through, keeps the most bytes in flight; then
# the swapped tiles of few rows
CONFIGS = tuple(config(*c) for c in ((128, 256, 4), (128, 128, 6), (64, 256, 5), (64, 128, 8),
                                     (128, 64, 8), (64, 64, 12),
                                     (8, 64, 16), (16, 64, 16), (32, 64, 16),
                                     (8, 128, 10), (16, 128, 10), (32, 128, 9)))


def swapped_rows(M, a_major="K"):
    """The rows of the swapped tile for M rows of out (the fewest of
    SWAPPED_ROWS that hold M), or None where no swapped tile applies (M past
    them; an M-major a, which wgmma would read as an N-major B of a few rows).
        >>> swapped_rows(1), swapped_rows(17), swapped_rows(33), swapped_rows(4, "MN")
        (8, 32, None, None)
    """
    return min((r for r in SWAPPED_ROWS if r >= M), default=None) if a_major == "K" else None


def candidates(M, N, K, batches=1, sms=SMS_H100, ebytes=2, a_major="K"):
    """The configs worth timing for an (M, N, K) GEMM of `batches` with
    inputs of `ebytes` bytes (4: tf32, whose stages hold half the K): the
    tiles of 64 rows for M <= 64 (wgmma's least), else of 64 and 128; for
    M <= 32 the swapped tiles of swapped_rows(M, a_major) too; each
    unsplit, and where its tiles leave multiprocessors idle, split along K
    into about one or two units a multiprocessor (at least 2 K-tiles a
    split, at most MAX_SPLITS splits). A stage takes (bM + bN) * 128 bytes
    whatever the type, so every config fits shared memory (smem_bytes).
        >>> candidates(16, 4096, 4096)[:4]
        [(64, 256, 5, 8, 1), (64, 256, 5, 8, 8), (64, 256, 5, 8, 16), (64, 128, 8, 8, 1)]
        >>> [(c[:2], c[4]) for c in candidates(16, 4096, 4096) if c[0] < 64]  # swapped
        [((16, 64), 1), ((16, 64), 2), ((16, 64), 4), ((16, 128), 1), ((16, 128), 4), ((16, 128), 8)]
    """
    out = []
    k_tiles = -(-K // bk(ebytes))
    swapped = swapped_rows(M, a_major)
    for c in CONFIGS:
        bM, bN = c[:2]
        if (M <= 64 and bM == 128) or (bM in SWAPPED_ROWS and bM != swapped):
            continue
        tiles = batches * -(-M // bM) * -(-N // bN)
        splits = {min(MAX_SPLITS, waves * sms // tiles, k_tiles // 2) for waves in (1, 2)}
        out += [config(*c[:4], s) for s in sorted(splits | {1}) if s >= 1]
    return out


def default_config(M, N, K, batches=1, sms=SMS_H100, ebytes=2, a_major="K"):
    """The heuristic's config for an (M, N, K) GEMM of `batches` with inputs
    of `ebytes` bytes (the one used untuned). For M <= 32 (swapped_rows) a
    swapped tile of 64 columns, or of 128 where those fill the `sms`
    multiprocessors once and 64 would pass one wave, split along K to
    fill them once (on an H200 within 3% of the best candidate, and faster
    than cuBLAS, from 1 x 4096 x 4096 to 16 x 8192 x 28672). Else 64-row
    tiles for M <= 64, 128 above; the widest bN whose tiles still fill the
    multiprocessors; where even the narrowest leave some idle, the widest
    tiles split along K to fill them once.
        >>> default_config(4096, 4096, 4096), default_config(64, 4096, 4096)
        ((128, 256, 4, 8, 1), (64, 256, 5, 8, 8))
        >>> default_config(1, 4096, 4096), default_config(16, 14336, 4096)
        ((8, 64, 16, 8, 2), (16, 128, 10, 8, 1))
    """
    swapped = swapped_rows(M, a_major)
    if swapped is not None:
        narrow, wide = (batches * -(-M // swapped) * -(-N // bN) for bN in (64, 128))
        bN, tiles = (128, wide) if wide <= sms < narrow else (64, narrow)
        tile, = (c for c in CONFIGS if c[:2] == (swapped, bN))
        splits = max(1, min(MAX_SPLITS, sms // tiles, -(-K // bk(ebytes)) // 2))
        return config(*tile[:4], splits)
    bM = 64 if M <= 64 else 128
    mine = [c for c in candidates(M, N, K, batches, sms, ebytes, a_major) if c[0] == bM]
    for c in mine:
        if c[4] == 1 and batches * -(-M // bM) * -(-N // c[1]) >= sms:
            return c
    widest = [c for c in mine if c[1] == max(c[1] for c in mine)]
    return widest[min(1, len(widest) - 1)]      # split to fill the multiprocessors once


def smem_bytes(cfg):
    """Shared memory a block of `cfg` takes, whatever the inputs' and the
    output's types (a stage is (bM + bN) rows of one 128-byte swizzle row:
    bk(2) 16-bit or bk(4) tf32 values; the epilogue's boxes are 128-byte
    rows of 16- or 32-bit values), and its pipeline's barriers.
        >>> smem_bytes(config(128, 256, 4)) <= SMEM_SM90
        True
    """
    bM, bN, stages = cfg[:3]
    barriers = 2 * 8 * stages
    return (bM + bN) * SWIZZLE_BYTES * stages + \
        consumers(cfg) * EPI_SLOTS * EPI_ROWS * SWIZZLE_BYTES + barriers


def tile_coords(t, tiles_m, tiles_n, group):
    """The (m, n) output tile of linear tile `t`: tiles go down columns of
    `group` tile rows, so that the tiles in flight at once share A's and B's
    panels in L2 (CUTLASS: the swizzled tile scheduler).
        >>> [tile_coords(t, 3, 2, 2) for t in range(6)]
        [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    """
    per_group = group * tiles_n
    first_m = t // per_group * group
    rows = moye.minimum(tiles_m - first_m, group)
    return first_m + t % per_group % rows, t % per_group // rows


@moye.func
def consume_tile(pipe, mma, acc, tCsA, tCsB, k_tiles, stage, phase, lane0):
    """acc = the sum over `k_tiles` stages of `pipe` of wgmma on them (A, B
    partitioned as tCsA, tCsB: (..., stages)): each stage is released (by
    the `lane0` threads) once the next one's wgmma are in flight. Returns
    the (stage, phase) after them."""
    for i in range(size(acc)):
        acc[i] = 0.0
    pipe.consumer_wait(stage, phase)
    gemm(mma, acc, tCsA[:, :, :, stage], tCsB[:, :, :, stage], acc)
    last = stage
    stage, phase = pipe.advance(stage, phase)
    for k in range(1, k_tiles):
        pipe.consumer_wait(stage, phase)
        gemm(mma, acc, tCsA[:, :, :, stage], tCsB[:, :, :, stage], acc)
        moye.wgmma_wait(1)                                  # k-1's wgmma have read their stage
        if lane0:
            pipe.consumer_release(last)
        last = stage
        stage, phase = pipe.advance(stage, phase)
    moye.wgmma_wait(0)
    if lane0:
        pipe.consumer_release(last)
    return stage, phase


@moye.func
def load_tile(load, stage_tile, batch, row0, k0, rows, bar):
    """TMA-load the (rows, bK) tile of `load`'s array at (batch, row0, k0)
    into `stage_tile`, in boxes of load.tile[1] rows (one box for a K-major
    tile; 64-row boxes of an M/N-major one, which lie one after another)."""
    box, bK = load.tile[1], load.tile[2]
    for i in range(rows // box):
        dst = MoYeArray.view_of(stage_tile.engine.offset_by(i * box * bK), load.smem_layout)
        moye.tma_load(load, dst, (batch, row0 + i * box, k0), bar)


@moye.kernel
def sm90_gemm_kernel(load_a, load_b, store_c, bias, residual, partial, tickets, sA_layout,
                     sB_layout, sC_layout, mma, box_mma, save_c, M, N, K, batches, splits, a_step,
                     b_step, alpha, beta,
                     bM: moye.Constexpr, bN: moye.Constexpr, stages: moye.Constexpr,
                     group: moye.Constexpr, activation: moye.Constexpr,
                     bias_rows: moye.Constexpr):
    bK = load_a.tile[2]
    ebytes = load_a.dtype.bits // 8                                 # 2, or 4 (tf32)
    consumers = bM // 64
    direct = isinstance(store_c, MoYeArray)     # an output TMA cannot address: stored from registers
    box_cols = size(sC_layout, 1)
    dtype = store_c.dtype
    sA = moye.shared_array(load_a.dtype, sA_layout, align=1024)     # (bM, bK, stages)
    sB = moye.shared_array(load_b.dtype, sB_layout, align=1024)     # (bN, bK, stages)
    sC = moye.shared_array(dtype, sC_layout, align=1024)            # (64, box_cols, slots)
    pipe = moye.TmaPipeline(stages, consumers=4 * consumers)        # lane 0 of consumer warps
    tid = moye.thread_idx.x
    if tid == 0:
        moye.prefetch_tma_descriptor(load_a)        # fetched while the barriers are made
        moye.prefetch_tma_descriptor(load_b)
        if not direct:
            moye.prefetch_tma_descriptor(store_c)
        pipe.init()
    moye.sync_threads()
    tiles_m, tiles_n = (M + bM - 1) // bM, (N + bN - 1) // bN
    per_batch = tiles_m * tiles_n
    units = batches * per_batch * splits                # (tile, K split) pairs
    k_tiles = (K + bK - 1) // bK
    warpgroup = moye.warp_idx() // 4
    stage, phase = 0, 0
    if warpgroup == 0:                                      # the producer
        moye.setmaxnreg_dec(40)
        if tid == 0:
            t = moye.block_idx.x
            while t < units:
                tile = t // splits
                bt = tile // per_batch
                m, n = tile_coords(tile % per_batch, tiles_m, tiles_n, group)
                split = t - tile * splits
                for k in range(split * k_tiles // splits, (split + 1) * k_tiles // splits):
                    full = pipe.producer_acquire(stage, phase, (bM + bN) * bK * ebytes)
                    load_tile(load_a, sA[:, :, stage], bt * a_step, m * bM, k * bK, bM, full)
                    load_tile(load_b, sB[:, :, stage], bt * b_step, n * bN, k * bK, bN, full)
                    stage, phase = pipe.advance(stage, phase)
                t += moye.grid_dim.x
    else:                                                   # the consumers
        moye.setmaxnreg_inc(232 if consumers == 2 else 240)
        ctid = tid - 128
        wg = warpgroup - 1
        lane0 = ctid % 32 == 0
        storer = ctid % 128 == 0
        thr = mma.get_slice(ctid)
        tCsA = thr.partition_A(sA)
        tCsB = thr.partition_B(sB)
        acc = thr.partition_fragment_C(make_layout((bM, bN)))
        coords = thr.partition_C(make_identity_array((bM, bN)))
        r2s = save_c.get_slice(ctid % 128)
        box_acc = make_fragment_like(box_mma.get_slice(ctid % 128).partition_fragment_C(
            make_layout((EPI_ROWS, box_cols))), dtype)
        boxes = 1 if direct else bN // box_cols    # stored from the registers: all at once
        per_box = size(acc) // boxes
        # a residual stored through 16-bit boxes is read a box ahead into registers (res_box;
        # a float32 output's epilogue, and a split one's, have no registers to spare): read as
        # each box is stored, DRAM's latency would stall the epilogue box after box
        early = residual is not None and not direct and dtype.bits == 16 and partial is None
        if partial is not None:     # split along K: the block that adds up a tile's splits
            settled = moye.shared_array(moye.Int32, 1)
        t = moye.block_idx.x
        while t < units:
            tile = t // splits
            bt = tile // per_batch
            m, n = tile_coords(tile % per_batch, tiles_m, tiles_n, group)
            split = t - tile * splits
            k_split = (split + 1) * k_tiles // splits - split * k_tiles // splits
            res = residual[bt, :, :] if residual is not None else None
            stage, phase = consume_tile(pipe, mma, acc, tCsA, tCsB, k_split, stage, phase, lane0)
            last = True
            if partial is not None:
                last = settle_split(partial, tickets, settled, acc, coords, tile, split, splits,
                                    m * bM, M, ctid, 128 * consumers)
            if last:
                epilogue(store_c, sC, save_c, r2s, acc, box_acc, coords, bias, res, bt,
                         m * bM, n * bN, M, N, alpha, beta, wg, storer, boxes, per_box, box_cols,
                         direct, early, activation, bias_rows)
            t += moye.grid_dim.x
        if storer and not direct:
            moye.tma_store_wait(0)


@moye.func
def epilogue(store_c, sC, save_c, r2s, acc, box_acc, coords, bias, res, batch, row0, col0, M, N,
             alpha, beta, wg, storer, boxes, per_box, box_cols, direct, early, activation,
             bias_rows):
    """Warpgroup `wg`'s epilogue of the tile at (row0, col0) of `batch`: its
    64 rows, one box of box_cols columns at a time, through shared memory
    and a TMA store, or from the registers (`direct`; a swapped tile's,
    whose bias lies along its rows: `bias_rows`); with `early`, the
    residual read a box ahead."""
    if early:
        res_box = make_fragment_like(box_acc, res.dtype)
        for i in range(per_box):
            res_box[i] = res[clamped(coords[i], row0, col0, M, N)]
    for j in range_constexpr(boxes):
        if direct:
            store_values(store_c, acc, coords, j * per_box, per_box, batch, row0, col0, M, N,
                         alpha, bias, res, beta, activation, bias_rows)
        else:
            slot = sC[:, :, wg * EPI_SLOTS + j % EPI_SLOTS]
            if storer:
                moye.tma_store_wait(EPI_SLOTS - 1)      # the slot's last store read it
            moye.named_barrier_sync(1 + wg, 128)
            for i in range(per_box):
                row, col = clamped(coords[j * per_box + i], row0, col0, M, N)
                r = res_box[i] if early else None if res is None else res[row, col]
                if early and j + 1 < boxes:     # the next box's, in the register read
                    res_box[i] = res[clamped(coords[(j + 1) * per_box + i], row0, col0, M, N)]
                box_acc[i] = moye.cast(epilogue_of(acc[j * per_box + i], col, alpha, bias, r,
                                                   beta, activation), box_acc.dtype)
            copyto(save_c, r2s.partition_D(slot), r2s.retile_S(box_acc))
            moye.fence_proxy_async()
            moye.named_barrier_sync(1 + wg, 128)
            if storer:
                moye.tma_store(store_c, (batch, row0 + wg * EPI_ROWS, col0 + j * box_cols),
                               MoYeArray.view_of(slot.engine, store_c.smem_layout))
                moye.tma_store_commit()


@moye.func
def split_slot(partial, slot, values, threads):
    """Slot `slot` of the flat float32 workspace `partial`: (values, threads),
    a thread's values `threads` apart (a warp's accesses adjacent), its
    strides static (each access an immediate offset from the slot's base).
        >>> import numpy as np
        >>> split_slot(MoYeArray(np.arange(12.0)), 1, 3, 2)[2, 1]
        np.float64(11.0)
    """
    return MoYeArray.view_of(partial.engine.offset_by(slot * values * threads),
                             make_layout((values, threads), (threads, 1)))


@moye.func
def settle_split(partial, tickets, settled, acc, coords, tile, split, splits, row0, M, thread,
                 threads):
    """Split-K in one launch: each of a tile's `splits` blocks writes its
    partial sum `acc` (its rows inside the M rows) to its slot of `partial`
    (split_slot(tile * splits + split)), fences, and takes a ticket
    (tickets[tile], zero before the launch); the block that takes the last
    one zeroes it again (workspace.tickets: kept for the next launch),
    fences, sets its `acc` to the splits' sum, added in split order (the
    same bits whichever came last), and returns True: it stores the tile.
    `threads` threads take part (the consumers), `thread` this one;
    `settled` is a shared Int32 (CUTLASS: the serial split-K reduction).
    The last block reads every value, unwritten ones too (rows past M, taken
    as 0.0): a load under a branch of its own would wait for the one before
    (hundreds of L2 round trips a tile)."""
    n = size(acc)
    mine = split_slot(partial, tile * splits + split, n, threads)
    for i in range_constexpr(n):
        if row0 + coords[i][0] < M:
            mine[i, thread] = acc[i]
    moye.threadfence()
    moye.named_barrier_sync(SPLIT_BARRIER, threads)
    if thread == 0:
        settled[0] = moye.atomic_add(tickets, tile, 1)
    moye.named_barrier_sync(SPLIT_BARRIER, threads)
    last = settled[0] == splits - 1
    if last:
        if thread == 0:
            tickets[tile] = 0       # as it was before the launch, for the next one
        moye.threadfence()
        slot = split_slot(partial, tile * splits, n, threads)
        for i in range_constexpr(n):
            acc[i] = moye.ifelse(row0 + coords[i][0] < M, slot[i, thread], 0.0)
        for s in range(1, splits):
            slot = split_slot(partial, tile * splits + s, n, threads)
            for i in range_constexpr(n):
                acc[i] = acc[i] + moye.ifelse(row0 + coords[i][0] < M, slot[i, thread], 0.0)
    return last


@moye.func
def clamped(coord, row0, col0, M, N):
    """(row0, col0) + coord, clamped into an (M, N) output: the epilogue
    computes a value outside out on an edge element (its bias, its
    residual), which the TMA store then clips."""
    row, col = coord
    return moye.minimum(row0 + row, M - 1), moye.minimum(col0 + col, N - 1)


@moye.func
def store_values(out, acc, coords, first, count, batch, row0, col0, M, N, alpha, bias, residual,
                 beta, activation, bias_rows=False):
    """out[batch, row, col] = the epilogue of acc[first + i] for i < count,
    at (row0, col0) + coords[first + i], each from its register where it
    lies inside the (M, N) output: the epilogue of an output whose rows TMA
    cannot address (not 16-byte aligned), instead of a padded copy, and of
    a swapped tile (out^T, its bias along the rows: `bias_rows`)."""
    for i in range(count):
        row, col = coords[first + i]
        row, col = row0 + row, col0 + col
        if row < M and col < N:
            r = None if residual is None else residual[row, col]
            v = epilogue_of(acc[first + i], row if bias_rows else col, alpha, bias, r, beta,
                            activation)
            out[batch, row, col] = moye.cast(v, out.dtype)


# -- the host side ------------------------------------------------------------------------
def batched_tile(layout):
    """`layout` (a 2-D tile, maybe swizzled) with a leading batch mode of
    one element: the (1, rows, cols) tile of a rank-3 TMA copy.
        >>> batched_tile(Layout((8, 64), (64, 1)))
        (1,8,64):(0,64,1)
    """
    if hasattr(layout, "outer"):
        return composition(layout.outer, batched_tile(layout.inner))
    return Layout((1,) + tuple(layout.shape), (0,) + tuple(layout.stride))


def operand_tile(dtype, major, rows):
    """The (rows, bK) shared-memory tile of an operand that wgmma reads and
    TMA writes, bK = bk(its bytes), 128-byte swizzled: K-major, one TMA box
    (CuTe: GMMA::Layout_K_SW128_Atom tiled); M/N-major (16-bit types),
    boxes of one 128-byte row's values (64) one after another (each its bK
    rows of 128 bytes), and the box of one TMA load.
        >>> operand_tile(moye.Float16, "MN", 128)[0]
        Sw<3,3,3> o 0 o ((64,2),64):((1,4096),64)
        >>> operand_tile(moye.TFloat32, "K", 64)[0]
        Sw<3,2,3> o 0 o ((8,8),(32,1)):((32,256),(1,2048))
    """
    ebytes = dtype.bits // 8
    k = bk(ebytes)
    if major == "K":
        tile = moye.gmma_smem_layout(dtype, "K", SWIZZLE_BYTES, (rows, k))
        return tile, tile
    row = SWIZZLE_BYTES // ebytes           # values in a 128-byte swizzle row
    swizzle = Swizzle(3, 4 - (ebytes.bit_length() - 1), 3)
    tile = composition(swizzle, Layout(((row, rows // row), k), ((1, row * k), row)))
    return tile, composition(swizzle, Layout((row, k), (1, row)))


def major(x, what):
    """"K" where the last mode of `x` (rows, K) is contiguous, "MN" where the
    rows are, else a MoyeError."""
    strides = as_array_arg(x, what).strides
    if strides[-1] == 1:
        return "K"
    if strides[-2] == 1:
        return "MN"
    raise MoyeError(f"gemm_sm90: {what} of shape {tuple(x.shape)} has strides {tuple(strides)}; "
                    "one of its last two modes must be contiguous")


@functools.lru_cache(maxsize=64)
def static_plan(dtype, out_dtype, a_major, b_major, bM, bN, stages):
    """What the launch takes that depends on types, majors and tiles alone:
    the TMA boxes' layouts (A, B, C's) and the staged shared-memory layouts,
    the MMAs and the epilogue's shared-memory store. Float32 inputs run as
    tf32: wgmma TFloat32 x TFloat32 -> Float32 (K = 8), on tiles of bk(4)
    = 32 values that TMA fills with float32 (the same 32 bits; the tensor
    cores ignore the low 13 mantissa bits)."""
    if dtype.bits == 32:
        dtype = moye.TFloat32
    k = bk(dtype.bits // 8)
    a_tile, a_box = operand_tile(dtype, a_major, bM)
    b_tile, b_box = operand_tile(dtype, b_major, bN)
    ebytes = out_dtype.bits // 8
    box_cols = 128 // ebytes
    box = composition(Swizzle(3, 4 - (ebytes.bit_length() - 1), 3),
                      Layout((EPI_ROWS, box_cols), (box_cols, 1)))
    consumers = bM // 64
    mma = make_tiled_mma(moye.wgmma_op(bN, dtype, dtype, Float32, "SS", a_major, b_major),
                         make_layout((consumers, 1)))
    box_mma = make_tiled_mma(moye.wgmma_op(box_cols, dtype, dtype, Float32))
    atom = CopyAtom(moye.STSM_U32x4_N, out_dtype) if ebytes == 2 else \
        CopyAtom(UniversalCopy(Float32), Float32)
    save_c = make_tiled_copy_C(atom, box_mma)
    return (batched_tile(a_box), batched_tile(b_box), batched_tile(box),
            tile_to_shape(a_tile, (bM, k, stages)), tile_to_shape(b_tile, (bN, k, stages)),
            tile_to_shape(box, (EPI_ROWS, box_cols, consumers * EPI_SLOTS)),
            mma, box_mma, save_c)


def consumers(cfg):
    """The consumer warpgroups of `cfg`: one a 64 rows of the kernel's tile."""
    return kernel_tile(cfg)[0] // 64


def threads(cfg):
    """The block's threads: a producer warpgroup and the consumers."""
    return 128 * (1 + consumers(cfg))


def launch(a, b, out, *, bias=None, residual=None, alpha=1.0, beta=1.0, activation=None,
           cfg=CONFIGS[0], blocks=None, backend=None):
    """out = activation(alpha * a @ b^T + bias) + beta * residual on the
    arrays' device: a (Ba, M, K), b (Bb, N, K) (Ba, Bb the batch count of
    out or 1), out and residual (B, M, N), out row-major, bias (N,); `cfg`
    a config(); `blocks` the persistent grid (one block per multiprocessor
    by default). The arrays' rows must be 16-byte aligned (TMA).
        >>> import numpy as np
        >>> a, b = np.ones((1, 64, 64), np.float16), np.ones((1, 64, 64), np.float16)
        >>> out = np.zeros((1, 64, 64), np.float32)
        >>> launch(a, b, out, bias=np.ones(64, np.float32), cfg=config(64, 64), blocks=1)
        >>> float(out.min()), float(out.max())
        (65.0, 65.0)
    """
    for kernel, dims, args in launches(a, b, out, bias=bias, residual=residual, alpha=alpha,
                                       beta=beta, activation=activation, cfg=cfg, blocks=blocks,
                                       backend=backend):
        kernel[dims](*args, backend=backend)


def launches(a, b, out, *, bias, residual, alpha, beta, activation, cfg, blocks, backend):
    """The launches of `launch`, as (kernel, (grid, block), args) each: one,
    the GEMM's; with a config split along K, it also takes a float32
    workspace for the splits' partial sums and tickets, one per tile
    (settle_split), from workspace.py."""
    partial = tickets = None
    bM, bN, splits = cfg[0], cfg[1], cfg[4]
    if splits > 1:
        B, M, N = out.shape
        tiles = B * -(-M // bM) * -(-N // bN)
        if tiles * splits * bM * bN >= 2**31:
            raise MoyeError(f"gemm_sm90: config {cfg} splits {tiles} tiles of out "
                            f"{tuple(out.shape)} into {tiles * splits * bM * bN} partial sums, past 2**31 - 1: "
                            f"fewer splits")
        partial = workspace.scratch(out, tiles * splits * bM * bN)
        tickets = workspace.tickets(out, tiles)
    grid, block, args = arguments(a, b, out, bias=bias, residual=residual, alpha=alpha, beta=beta,
                                  activation=activation, cfg=cfg, blocks=blocks, backend=backend,
                                  partial=partial, tickets=tickets)
    return [(sm90_gemm_kernel, (grid, block), args)]


def arguments(a, b, out, *, bias, residual, alpha, beta, activation, cfg, blocks, backend,
              partial=None, tickets=None):
    """(grid, block, the GEMM kernel's arguments) of a launch writing `out`;
    `partial` and `tickets` are a split config's workspace (launches)."""
    dtype, out_dtype = element_type(a), element_type(out)
    bM, bN, swapped = kernel_tile(cfg)
    stages, group, splits = cfg[2:]
    majors = major(a, "a"), major(b, "b")
    check_operands(dtype, element_type(b), *majors)
    if swapped:                 # out^T = b a^T: b's columns on wgmma's rows (kernel_tile)
        if majors[0] != "K":
            raise MoyeError(f"gemm_sm90: config {cfg} is a swapped tile of few rows, whose a "
                            f"must be K-major; a of shape {tuple(a.shape)} is M-major")
        a, b, majors = b, a, majors[::-1]
        out = transposed(out)
        residual = None if residual is None else transposed(residual)
    (batches, M, N), K = out.shape, a.shape[2]
    a_box, b_box, c_box, sA, sB, sC, mma, box_mma, save_c = static_plan(
        dtype, out_dtype, *majors, bM, bN, stages)
    load_a = moye.make_tma_copy(moye.TMA_LOAD, a, a_box)
    load_b = moye.make_tma_copy(moye.TMA_LOAD, b, b_box)
    store_c = moye.make_tma_copy(moye.TMA_STORE, out, c_box) \
        if tma_storable(out) and not swapped else out
    units = batches * -(-M // bM) * -(-N // bN) * splits
    if blocks is None:
        blocks = rows.multiprocessors(out) if backend is None else 2
    args = (load_a, load_b, store_c, bias, residual, partial, tickets, sA, sB, sC, mma, box_mma,
            save_c, M, N, K, batches, splits, int(a.shape[0] > 1), int(b.shape[0] > 1),
            float(alpha), float(beta), bM, bN, stages, group, activation, swapped)
    return max(1, min(blocks, units)), threads(cfg), args


def transposed(t):
    """The (B, C, R) transposed view of a (B, R, C) torch tensor or NumPy
    array.
        >>> import numpy as np
        >>> transposed(np.zeros((2, 3, 4))).shape
        (2, 4, 3)
    """
    return t.transpose(1, 2) if rows.is_torch(t) else t.transpose(0, 2, 1)


TICKETS = 6     # the place of a split launch's tickets among the GEMM kernels' arguments


def check_operands(a_type, b_type, a_major, b_major):
    """A MoyeError unless a and b are of one type of IN_TYPES, K-major where
    float32 (tf32 wgmma reads K-major tiles alone).
        >>> check_operands(moye.Float32, moye.Float32, "K", "MN")
        Traceback (most recent call last):
        ...
        moye.errors.MoyeError: gemm_sm90: float32 (tf32) operands must be K-major; b is MN-major
    """
    if a_type.name not in IN_TYPES or b_type is not a_type:
        raise MoyeError(f"gemm_sm90: a is {a_type} and b {b_type}; they must be of one type, "
                        f"one of {', '.join(IN_TYPES)}")
    for what, m in (("a", a_major), ("b", b_major)):
        if a_type.bits == 32 and m != "K":
            raise MoyeError(f"gemm_sm90: float32 (tf32) operands must be K-major; {what} is "
                            f"{m}-major")


def tma_addressable(t):
    """Whether TMA addresses 3-D `t`: one of its last two modes contiguous,
    the other's stride (and the batch stride, if more than one) a multiple
    of 16 bytes, its address 16-byte aligned.
        >>> import numpy as np
        >>> tma_addressable(np.zeros((1, 4, 8), np.float16)), tma_addressable(np.zeros((1, 4, 7), np.float16))
        (True, False)
    """
    arg = as_array_arg(t)
    s, ebytes = arg.strides, arg.dtype.bits // 8
    inner = 2 if s[2] == 1 or t.shape[2] == 1 else 1 if s[1] == 1 or t.shape[1] == 1 else None
    if inner is None:
        return False
    outer = [3 - inner] + ([0] if t.shape[0] > 1 else [])
    return all(s[k] > 0 and s[k] * ebytes % TMA_ALIGN == 0 for k in outer) and \
        arg.ptr % TMA_ALIGN == 0


def tma_storable(out):
    """Whether the GEMM stores its (B, M, N) `out` by TMA: TMA addresses it
    (tma_addressable) and its rows are contiguous, as the epilogue's boxes
    in shared memory are (static_plan's c_box); else (a column-major out,
    a transposed view) it stores from its registers.
        >>> import numpy as np
        >>> out = np.zeros((1, 16, 8), np.float16)
        >>> tma_storable(out), tma_storable(np.zeros((1, 8, 16), np.float16).transpose(0, 2, 1))
        (True, False)
    """
    return tma_addressable(out) and (as_array_arg(out).strides[2] == 1 or out.shape[2] == 1)


def element_type(x):
    """moye's element type of an array (torch, CuPy, DLPack, NumPy)."""
    return as_array_arg(x, "array").dtype

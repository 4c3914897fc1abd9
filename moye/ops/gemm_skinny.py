"""moye.ops.matmul's kernel for few rows (M <= 16: decoding, GEMV-like
products), where the time is reading b once: b's values go from global
memory straight into mma.sync registers, 16 bytes a load, with no shared
memory between (CUTLASS: the GEMV kernels; TensorRT-LLM: the "skinny"
GEMMs).

    out[b] = activation(alpha * a[b] @ b[b]^T + bias) + beta * residual[b]

a (Ba, M, K) K-major and b (Bb, N, K), K-major or N-major (the transposed
view of a row-major (K, N)), float16 or bfloat16, K a multiple of 8 and
every row 16-byte aligned (`eligible`); out (B, M, N) of any strides.

One mma.sync m16n8k16 has 16 rows: a's M rows fill them (rows past M
repeat row M - 1, never stored). A sum over k does not care about the
order of the k's, so the MMA's k's are renumbered, the same for a and b,
that each thread reads runs of b that are contiguous in memory:
- K-major b: in a chunk of 16 * steps k's, thread (g, t) of a warp (lane
  4 g + t) holds 4 * steps contiguous k's of b's row 8 j + g for each of
  its `tiles` n-tiles j (k_of), read 16 bytes at a time; step s's fragment
  is its values 4 s .. 4 s + 3 (the MMA's k's 2t, 2t+1, 2t+8, 2t+9);
- N-major b: the thread reads 16 bytes of columns 8 g .. 8 g + 7 of each of
  those k's rows, and n-tile j's column g is column 8 g + j (eight n-tiles
  a warp: 64 columns).
a's fragment takes the same k's of its rows g and g + 8.

A block of `warps` warps covers warps * 8 * tiles columns over one part of
K: the grid is (column blocks, splits, batches). A thread keeps two chunks
of loads in flight: the next chunk's are issued before this one's MMAs.
Split along K (`splits` > 1), each block writes its float32 partial sums
and takes a ticket of its columns, and the last adds them up in split
order and runs the epilogue (settle), in one launch.

It is the few-row kernel of sm_80-89. On Hopper gemm_sm90's swapped tiles
are faster at most shapes (an H200: 8.8 against 14.3 us at 1 x 4096 x 4096
with an N-major b); the tuner times both.
"""
import functools

import moye
from moye import Layout, gemm, make_fragment_like, make_layout, make_tiled_mma, tile

from ..compiler import range_constexpr
from ..compiler.arguments import as_array_arg
from ..errors import MoyeError
from . import workspace
from .gemm_sm90 import store_values

MAX_ROWS = 16               # one mma.sync's M
MAX_SPLITS = 32
ALIGN = 8                   # values of a 16-byte load
WARPS = 4
# the tuned (warps, tiles, steps): K-major b's, N-major b's (an N-major b's 4 steps take 214
# registers with two chunks in flight: 2 blocks a multiprocessor; its 2 steps take 136, and
# blocks of 2 warps time as well or better: H200, bfloat16, 1 x 4096 x 4096 11.8 against 12.2 us
# at 4 warps, 4 x 8192 x 8192 42.2 against 42.7)
SHAPES = ((4, 2, 4), (4, 4, 4), (2, 8, 2))


@functools.lru_cache(maxsize=None)
def config(tiles=4, steps=4, splits=1, warps=WARPS):
    """A configuration ("skinny", warps, tiles, steps, splits): a warp's
    n-tiles of 8 columns (8 for an N-major b), the mma k-steps of a chunk
    (a thread reads 4 * steps values of a row a chunk), the splits of K.
        >>> config(2, 4, 8)
        ('skinny', 4, 2, 4, 8)
    """
    if tiles not in (1, 2, 4, 8) or steps not in (2, 4) or warps not in (1, 2, 4, 8) or \
            not 1 <= splits <= MAX_SPLITS:
        raise MoyeError(f"gemm_skinny.config: tiles={tiles!r} steps={steps!r} splits={splits!r} "
                        f"warps={warps!r}; need tiles 1, 2, 4 or 8, steps 2 or 4, warps 1..8 "
                        f"(powers of 2), 1..{MAX_SPLITS} splits")
    return "skinny", warps, tiles, steps, splits


def is_config(cfg):
    """Whether `cfg` is one of this kernel's configs (not gemm_sm90's)."""
    return cfg[0] == "skinny"


def eligible(a, b):
    """Whether this kernel computes (B, M, N) `out` from a (Ba, M, K) and
    b (Bb, N, K): M <= 16, 16-bit inputs, a K-major, b K- or N-major, the
    16-byte loads aligned (K, and N for an N-major b, multiples of 8, the
    strides too, the addresses 16-byte aligned).
        >>> import numpy as np
        >>> x, w = np.zeros((1, 4, 64), np.float16), np.zeros((1, 32, 64), np.float16)
        >>> eligible(x, w), eligible(x[..., :60], w[..., :60])
        (True, False)
    """
    A, B = as_array_arg(a, "a"), as_array_arg(b, "b")
    M, K, N = a.shape[1], a.shape[2], b.shape[1]
    if M > MAX_ROWS or A.dtype.bits != 16 or B.dtype is not A.dtype or K % ALIGN:
        return False
    if A.strides[2] != 1 and K > 1:
        return False
    major = b_major(b)
    if major is None or (major == "MN" and N % ALIGN):
        return False
    steps = [s for x in (A, B) for s, n in zip(x.strides, x.shape) if n > 1 and s != 1]
    return all(s % ALIGN == 0 for s in steps) and A.ptr % 16 == 0 and B.ptr % 16 == 0


def b_major(b):
    """"K" where b's rows (N, K) are contiguous, "MN" where its columns are,
    else None."""
    s = as_array_arg(b, "b").strides
    return "K" if s[2] == 1 else "MN" if s[1] == 1 else None


def columns(cfg, major):
    """The columns one block covers."""
    tiles = cfg[2] if major == "K" else 8
    return cfg[1] * 8 * tiles


def candidates(M, N, K, batches=1, sms=132, major="K"):
    """The configs worth timing for an (M, N, K) product (SHAPES): for a
    K-major b 2 or 4 n-tiles a warp, split along K into about 1/2, 1 and 2
    times the splits of _fill; for an N-major b 3/4, 1 and 5/4 of them (one
    more at least; at least one chunk a split).
        >>> candidates(1, 4096, 4096)[:3]
        [('skinny', 4, 2, 4, 4), ('skinny', 4, 2, 4, 8), ('skinny', 4, 2, 4, 16)]
        >>> candidates(1, 8192, 8192, major="MN")
        [('skinny', 2, 8, 2, 6), ('skinny', 2, 8, 2, 8), ('skinny', 2, 8, 2, 10)]
    """
    out = []
    for warps, tiles, steps in SHAPES[:2] if major == "K" else SHAPES[2:]:
        base = _fill(config(tiles, steps, 1, warps), M, N, K, batches, sms, major)
        chunks = -(-K // (16 * steps))
        near = (base // 2, base, 2 * base) if major == "K" else \
            (3 * base // 4, base, max(5 * base // 4, base + 1))
        for s in sorted(set(near)):
            if 1 <= s <= min(MAX_SPLITS, chunks):
                out.append(config(tiles, steps, s, warps))
    return out


def default_config(M, N, K, batches=1, sms=132, major="K"):
    """The heuristic's config: SHAPES' first for a K-major b (2 n-tiles of 4
    warps), its last for an N-major one (2 steps, 2 warps), split as _fill
    says (the fastest on an H200 at M = 1 and 4, K = 2048 to 32768).
        >>> default_config(1, 4096, 14336), default_config(16, 14336, 4096, major="MN")
        (('skinny', 4, 2, 4, 8), ('skinny', 2, 8, 2, 4))
    """
    warps, tiles, steps = SHAPES[0] if major == "K" else SHAPES[-1]
    splits = _fill(config(tiles, steps, 1, warps), M, N, K, batches, sms, major)
    return config(tiles, steps, splits, warps)


def _fill(cfg, M, N, K, batches, sms, major):
    """The splits (at most one a chunk, at most MAX_SPLITS) for a K-major b:
    about 16 warps a multiprocessor, a power of 2. For an N-major b (blocks
    of 2 warps, 136 registers a thread: 6 blocks a multiprocessor at once,
    ncu's occupancy): 4 blocks a multiprocessor (3 above 4 rows), each split
    at least 16 chunks of K. On an H200, bfloat16: 1 x 4096 x 4096 in 8
    splits 14.4 us, in 20 16.9; 1 x 4096 x 14336 in 16 38.5, in 8 47.1; 16 x
    8192 x 8192 in 6 48.5, in 10 52.2, in 14 (a second wave) 79.6."""
    chunks = -(-K // (16 * cfg[3]))
    if major == "K":
        warps = batches * -(-N // columns(cfg, major)) * cfg[1]        # warps a split
        want = _pow2_near(-(-16 * sms // warps))
    else:
        blocks = batches * -(-N // columns(cfg, major))                 # blocks a split
        want = min(round((4 if M <= 4 else 3) * sms / blocks), chunks // 16)
    return max(1, min(MAX_SPLITS, chunks, want))


def _pow2_near(n):
    """The power of 2 nearest n (the larger of a tie)."""
    up = 1 << max(0, n - 1).bit_length()
    return up if 4 * n >= 3 * up else up // 2


@functools.lru_cache(maxsize=None)
def tiled_mma(dtype_name):
    """mma.sync m16n8k16 of `dtype_name` (float16, bfloat16) into float32."""
    op = moye.MMAOP_16x8x16_F32F16F16F32_TN if dtype_name == "Float16" else \
        moye.MMAOP_16x8x16_F32BF16BF16F32_TN
    return make_tiled_mma(op)


# -- the kernel ------------------------------------------------------------------------

def k_of(kbase, t, q, span):
    """The k of value q (0 .. span - 1) of quad thread t's run of `span` in
    the chunk at kbase: a thread's k's contiguous (32 bytes of a b row for
    4 steps). Threads of a quad side by side in 16-byte pieces instead (a
    warp's load then covers 64 contiguous bytes of a row) timed slower: 1 x
    8192 x 8192 61 against 42 us on an H200."""
    return kbase + span * t + q


@moye.func
def load_piece(dst, r, src, k, K, tail):
    """dst[:, r] = the 8 values of view `src` (from k); with `tail`, zeros
    where k is at or past K (K is a multiple of 8: a piece lies in or out)."""
    if tail:
        if k < K:
            moye.copyto(dst[None, r], src)
        else:
            for i in range_constexpr(8):
                dst[i, r] = 0.0
    else:
        moye.copyto(dst[None, r], src)


@moye.func
def load_pieces(dst, views, per, kbase, t, K, tail):
    """dst[:, r] = the 8 values from k_of(kbase, t, 8 (r % per), 8 per) of row
    view views[r // per], for each column r of dst (load_piece)."""
    for r in range_constexpr(moye.size(dst, 1)):
        k = k_of(kbase, t, 8 * (r % per), 8 * per)
        load_piece(dst, r, tile(views[r // per], (8,), (k // 8,)), k, K, tail)


@moye.func
def load_chunk(x, w, A, Bm, r0, r1, col0, g, t, kbase, N, K, tiles, steps, major, tail):
    """x, w = this thread's 4 * steps k's (k_of) of the chunk of K at kbase:
    of a's rows r0 and r1, and of its b rows (K-major) or columns (N-major)."""
    span = 4 * steps
    per = span // 8
    load_pieces(x, (A[r0, None], A[r1, None]), per, kbase, t, K, tail)
    if major == "K":
        b_rows = [Bm[moye.minimum(col0 + 8 * j + g, N - 1), None] for j in range(tiles)]
        load_pieces(w, b_rows, per, kbase, t, K, tail)
    else:
        piece = moye.minimum(col0 // 8 + g, N // 8 - 1)
        for r in range_constexpr(span):
            k = k_of(kbase, t, r, span)
            load_piece(w, r, tile(Bm[None, k], (8,), (piece,)), k, K, tail)


@moye.func
def mma_chunk(mma, acc, tCrA, tCrB, x, w, tiles, steps, major):
    """acc += the chunk load_chunk read into x and w, placed into the MMA's
    fragments (the module doc's order)."""
    per = 4 * steps // 8
    for s in range_constexpr(steps):
        for v in range_constexpr(8):        # a: rows g, g + 8 (v // 2 % 2), k pairs (v // 4)
            q = 4 * s + 2 * (v // 4) + v % 2
            tCrA[v, 0, s] = x[q % 8, (v // 2 % 2) * per + q // 8]
        for j in range_constexpr(tiles):
            for v in range_constexpr(4):
                if major == "K":
                    tCrB[v, j, s] = w[(4 * s + v) % 8, j * per + (4 * s + v) // 8]
                else:
                    tCrB[v, j, s] = w[j, 4 * s + v]
    gemm(mma, acc, tCrA, tCrB, acc)


@moye.kernel
def skinny_gemm_kernel(a, b, out, bias, residual, partial, tickets, mma, M, N, K, a_step, b_step,
                       alpha, beta, splits, warps: moye.Constexpr, tiles: moye.Constexpr,
                       steps: moye.Constexpr, major: moye.Constexpr,
                       activation: moye.Constexpr):
    tid = moye.thread_idx.x
    lane, warp = tid % 32, tid // 32
    g = lane // 4
    col_block, split, bt = moye.block_idx.x, moye.block_idx.y, moye.block_idx.z
    span, kc = 4 * steps, 16 * steps
    cols = 8 * tiles
    col0 = (col_block * warps + warp) * cols
    A, Bm = a[bt * a_step, None, None], b[bt * b_step, None, None]
    thr = mma.get_slice(lane)
    tCrA = thr.partition_fragment_A(make_layout((16, kc)))
    tCrB = thr.partition_fragment_B(make_layout((cols, kc)))
    acc = thr.partition_fragment_C(make_layout((16, cols)))
    for i in range_constexpr(moye.size(acc)):
        acc[i] = 0.0
    x = make_fragment_like(Layout((8, 2 * span // 8)), a.dtype)       # rows g, g + 8
    w = make_fragment_like(Layout((8, tiles * span // 8)), b.dtype) if major == "K" else \
        make_fragment_like(Layout((8, span)), b.dtype)               # N-major: k rows
    r0, r1 = moye.minimum(g, M - 1), moye.minimum(g + 8, M - 1)
    t = lane % 4
    chunks = (K + kc - 1) // kc
    first, last = split * chunks // splits, (split + 1) * chunks // splits
    whole = moye.minimum(last, K // kc)
    # two chunks in flight: the next one's loads issued before this one's MMAs (H200, 1 x 8192
    # x 8192 bfloat16, K-major b: 36.7 us against 41.3 one chunk at a time; N-major 39.0, 40.5)
    x2, w2 = make_fragment_like(x), make_fragment_like(w)
    if first < whole:
        load_chunk(x, w, A, Bm, r0, r1, col0, g, t, first * kc, N, K, tiles, steps, major, False)
    for c in range(first, whole, 2):
        if c + 1 < whole:
            load_chunk(x2, w2, A, Bm, r0, r1, col0, g, t, (c + 1) * kc, N, K, tiles, steps,
                       major, False)
        mma_chunk(mma, acc, tCrA, tCrB, x, w, tiles, steps, major)
        if c + 2 < whole:
            load_chunk(x, w, A, Bm, r0, r1, col0, g, t, (c + 2) * kc, N, K, tiles, steps, major,
                       False)
        if c + 1 < whole:
            mma_chunk(mma, acc, tCrA, tCrB, x2, w2, tiles, steps, major)
    if whole < last:                                # K's last, partial chunk
        load_chunk(x, w, A, Bm, r0, r1, col0, g, t, whole * kc, N, K, tiles, steps, major, True)
        mma_chunk(mma, acc, tCrA, tCrB, x, w, tiles, steps, major)
    coords = [value_coords(i, lane, col0, major) for i in range(moye.size(acc))]
    # a split's partial sums lie as a K-major b's would: lanes 4g .. 4g + 3 side by side (2 values
    # each), so that a warp's store covers whole sectors; an N-major b's columns (8c + j) spread
    # it over 32 (H200, 16 x 4096 x 4096 in 15 splits: 60 us, 2.5 times that of 1 row)
    places = [value_coords(i, lane, col0, "K") for i in range(moye.size(acc))]
    res = residual[bt, None, None] if residual is not None else None
    if partial is None or settle(partial, tickets, acc, places, bt * moye.grid_dim.x + col_block,
                                 split, splits, col_block * warps * cols, warps * cols, M):
        store_values(out, acc, coords, 0, moye.size(acc), bt, 0, 0, M, N, alpha, bias, res,
                     beta, activation)


@moye.func
def settle(partial, tickets, acc, places, tile_id, split, splits, col_base, cols, M):
    """Split-K in one launch: each block of a column block's `splits`
    writes the rows < M of its partial sums (M x cols float32, row-major,
    value i at places[i]: its row, and a column of the block's) to its slot
    of `partial`, fences and takes a ticket (tickets[tile_id],
    zero before the launch); the block that takes the last one zeroes it
    again (workspace.tickets: kept for the next launch), sets each thread's
    `acc` to the slots' sums of its own values, added in split order (the
    same bits whichever came last), and returns True: it stores them
    (CUTLASS: the serial split-K reduction). A split's loads are a static
    count a thread, independent of one another: a value's row is clamped
    into the M rows written (at M = 1 every row reads row 0, from cache)
    and rows past M taken as 0.0; a load under a branch of its own would
    wait for the one before."""
    per_split = M * cols
    base = tile_id * splits * per_split
    for i in range_constexpr(moye.size(acc)):
        row, col = places[i]
        if row < M:
            partial[base + split * per_split + row * cols + col - col_base] = acc[i]
    moye.threadfence()
    settled = moye.shared_array(moye.Int32, 1)
    moye.sync_threads()
    if moye.thread_idx.x == 0:
        settled[0] = moye.atomic_add(tickets, tile_id, 1)
    moye.sync_threads()
    last = settled[0] == splits - 1
    if last:
        if moye.thread_idx.x == 0:
            tickets[tile_id] = 0        # as it was before the launch, for the next one
        moye.threadfence()
        for s in range(splits):
            for i in range_constexpr(moye.size(acc)):
                row, col = places[i]
                v = partial[base + s * per_split + moye.minimum(row, M - 1) * cols + col - col_base]
                v = moye.ifelse(row < M, v, 0.0)
                acc[i] = moye.ifelse(s == 0, v, acc[i] + v)
    return last


def value_coords(i, lane, col0, major):
    """(row, column) in out of accumulator value i (4 a tile: rows g and
    g + 8, the MMA's columns 2t and 2t + 1) of lane 4 g + t."""
    g, t = lane // 4, lane % 4
    v, j = i % 4, i // 4
    row, c = g + 8 * (v // 2), 2 * t + v % 2
    return row, col0 + (8 * j + c if major == "K" else 8 * c + j)


# -- the host side ------------------------------------------------------------------------

def launch(a, b, out, *, bias=None, residual=None, alpha=1.0, beta=1.0, activation=None,
           cfg=None, backend=None):
    """out = activation(alpha * a @ b^T + bias) + beta * residual on the
    arrays' device (shapes as gemm_sm90.launch; `eligible` must hold).
        >>> import numpy as np
        >>> a, b = np.ones((1, 3, 64), np.float16), np.ones((1, 40, 64), np.float16)
        >>> out = np.full((1, 3, 40), np.nan, np.float32)
        >>> launch(a, b, out, bias=np.arange(40, dtype=np.float32), cfg=config(1, 2, 2))
        >>> float(out[0, 0, 0]), float(out[0, 2, 39])
        (64.0, 103.0)
    """
    for kernel, dims, args in launches(a, b, out, bias=bias, residual=residual, alpha=alpha,
                                       beta=beta, activation=activation, cfg=cfg,
                                       backend=backend):
        kernel[dims](*args, backend=backend)


def launches(a, b, out, *, bias, residual, alpha, beta, activation, cfg, backend=None):
    """The launch of `launch`, as [(kernel, (grid, block), args)]; split
    along K, with a float32 workspace and tickets (one per block's
    columns) from workspace.py."""
    if not eligible(a, b):
        raise MoyeError(f"gemm_skinny: a {tuple(a.shape)} and b {tuple(b.shape)} (strides "
                        f"{as_array_arg(a).strides}, {as_array_arg(b).strides}) are not for this "
                        "kernel: see gemm_skinny.eligible")
    (batches, M, N), K = out.shape, a.shape[2]
    major = b_major(b)
    if cfg is None:
        cfg = default_config(M, N, K, batches, major=major)
    _, warps, tiles, steps, splits = cfg
    if major == "MN" and tiles != 8:
        raise MoyeError(f"gemm_skinny: config {cfg} has {tiles} n-tiles a warp; an N-major b "
                        "takes 8")
    col_blocks = -(-N // columns(cfg, major))
    partial = tickets = None
    threads = 32 * warps
    if splits > 1:
        values = col_blocks * batches * splits * M * columns(cfg, major)
        if values >= 2**31:
            raise MoyeError(f"gemm_skinny: config {cfg} takes {values} partial sums for out "
                            f"{tuple(out.shape)}, past 2**31 - 1: fewer splits")
        partial = workspace.scratch(out, values)
        tickets = workspace.tickets(out, col_blocks * batches)
    A = as_array_arg(a)
    args = (a, b, out, bias, residual, partial, tickets, tiled_mma(A.dtype.name), M, N, K,
            int(a.shape[0] > 1), int(b.shape[0] > 1), float(alpha), float(beta), splits,
            warps, tiles, steps, major, activation)
    return [(skinny_gemm_kernel, ((col_blocks, splits, batches), threads), args)]

"""The row-wise ops' device side, shared by their kernels: where a thread
sits (its row, its place among the row's threads), a row loaded into
registers in chunks of VEC elements (16-byte vector loads where the data
allows) and stored back, and reductions over the threads of a row.

A row of N elements is N / VEC chunks (rows.plan picks VEC dividing N).
The row's `nt` threads take chunks round-robin: chunk k of thread t is
chunk k * nt + t of the row, so a warp's loads of one k are contiguous. A
fragment of (VEC, CHUNKS) registers holds a thread's part, in the math type
(`math_type`: Float64 for Float64 data, else Float32); chunks past the row's
end hold `fill` and are not stored.

The "registers" kernels loop over row groups (`row_groups`, `load_group`):
a block (or cluster) takes groups first, first + step, ... A launch of a
block per group makes one trip each; a cluster plan launches the clusters
that run at once, and each stages its next group's rows in shared memory
(cp.async) while it works on this one. A backward that also sums over rows
(a norm's dweight) keeps its threads' column sums in registers across its
groups and writes them as one row of a (blocks, N) partial
(`store_partial`); `column_sum` adds the partial's rows.

Three shapes of work, all static (kernel Constexprs):
- ROWS rows per block, TPR threads (a power of two up to 32) per row;
- one row per block (ROWS == 1, TPR == THREADS);
- one row per thread-block cluster of CLUSTER blocks (sm_90): the row's
  threads are the cluster's.
Each row's reductions are one row_merge of a tuple (softmax's max and sum,
layer_norm's moments, a backward's sums): warp shuffles, then the warps'
tuples through shared memory after a block barrier, then the blocks',
each pushed into every peer's shared memory (st.async) and waited for on
the block's own mbarrier, with no cluster barrier.
"""
from ..array import make_fragment_like, tile
from ..compiler import KernelError, func, kernel, range_constexpr
from ..compiler import range as unrolled_range
from ..device import (atomic_add, block_idx, block_rank_in_cluster, cast, cluster_arrive,
                      cluster_grid_dim, cluster_idx, cluster_wait, cp_async_commit,
                      cp_async_wait, cucopyto, exp2, fence_barrier_init, grid_dim, ifelse, log2,
                      maximum, mbarrier_array, mbarrier_arrive_expect_tx, mbarrier_init,
                      mbarrier_wait, minimum, peer_shared, shared_array, store_async,
                      sync_threads, thread_idx, warp_reduce)
from ..layout import Layout, size
from ..tiled import copyto
from ..types import Float32, Float64


LOG2E = 1.4426950408889634             # exp(x) = exp2(x log2(e))
LN2 = 0.6931471805599453               # log(s) = log2(s) ln(2)


def math_type(dtype):
    """The type the ops compute in: Float64 for Float64 data, else Float32."""
    return Float64 if dtype == Float64 else Float32


def lowest(dtype):
    """The lowest finite value of the math type `dtype`: max's identity, kept
    finite so that exp2(identity - max) is 0, not NaN (-inf - -inf)."""
    return -1.7976931348623157e308 if dtype == Float64 else -3.4028234663852886e38


class Lanes:
    """A group of `width` lanes (a power of two up to 32), each holding a
    tuple `values`: reduce(f, op) is op ("sum", "max") over the lanes of
    f(the lane's tuple), returned to each (warp_reduce: a butterfly, so
    bitwise the same in each)."""

    def __init__(self, values, width):
        self.values, self.width = values, width

    def __len__(self):
        return len(self.values)

    def reduce(self, f, op):
        return warp_reduce(f(self.values), op, self.width)


def sums(group):
    """A row_merge level: each value of the tuples summed."""
    return tuple(group.reduce(lambda v, i=i: v[i], "sum") for i in range(len(group)))


sums.identity = lambda values: tuple(0.0 for v in values)


def max_sumexp(group):
    """A row_merge level: (max, sum of exp(x - max)) pairs merged: the max,
    then the sums rescaled to it; (lowest, 0) is its identity."""
    big = group.reduce(lambda v: v[0], "max")
    return big, group.reduce(lambda v: v[1] * exp2((v[0] - big) * LOG2E), "sum")


max_sumexp.identity = lambda values: (lowest(values[0].type), 0.0)


@func
def row_merge(values, level, nth, TPR, CLUSTER, THREADS, bars=None):
    """The tuple `values` of each of this row's threads merged over the row,
    returned to each of them, bitwise the same in each (CuTe DSL's and
    QuACK's row reductions). `level(group)` merges the tuples of a group of
    lanes (Lanes) with its reduce(); `level.identity(values)` is a tuple of
    floats that it ignores (f of it is op's identity: 0 for sums, lowest for
    max). `nth` counts the kernel's earlier calls (0, 1, 2, ...): its
    shared arrays have two slots, nth % 2, and a slot is written again only
    after every thread has read it. Three levels, each a butterfly over
    lanes (few registers, short chains):
    - the lanes of a warp (min(TPR, 32) of them);
    - a row of more than a warp: the warps' tuples, lane w reading warp w's
      from shared memory after one block barrier;
    - a row in a cluster (CLUSTER a power of two; `bars`, row_groups'
      mbarrier pair): lanes r < CLUSTER of the first warp send the block's
      tuple into block r's slot (store_async, completing on r's mbarrier of
      the slot); every thread waits on its block's, then lane-group rank r
      reads block r's tuple there. No cluster barrier: a block sends the
      next tuple to a slot only after its own wait for the previous call's,
      which follows every peer's reads of that slot (QuACK's exchange).
        big, total = row_merge((m, s), max_sumexp, nth, TPR, CLUSTER, THREADS, bars)
    """
    NV = len(values)
    slot = nth % 2
    values = level(Lanes(values, min(TPR, 32)))
    if TPR > 32:
        WARPS = THREADS // 32
        WIDTH = 1 << (WARPS - 1).bit_length()
        lane = thread_idx.x % 32
        warps = shared_array(values[0].type, Layout((WARPS, NV, 2)), align=16)
        if lane == 0:
            for i in range_constexpr(NV):
                warps[thread_idx.x // 32, i, slot] = values[i]
        sync_threads()
        w = lane % WIDTH                # each group of WIDTH lanes merges the warps'
        identity = level.identity(values)
        values = level(Lanes(tuple(
            ifelse(w < WARPS, warps[minimum(w, WARPS - 1), i, slot],
                   cast(identity[i], values[i].type)) for i in range_constexpr(NV)), WIDTH))
    if CLUSTER > 1:
        if bars is None:
            raise KernelError("row_merge: a row in a cluster of blocks needs the mbarrier pair "
                              "that row_groups returns (bars)")
        blocks = shared_array(values[0].type, Layout((CLUSTER, NV, 2)), align=16)
        if nth == 0:
            cluster_wait()              # every block's mbarriers are ready (row_groups)
        if thread_idx.x < CLUSTER:
            if thread_idx.x == 0:
                mbarrier_arrive_expect_tx(bars[slot], CLUSTER * NV * (values[0].type.bits // 8))
            peer = peer_shared(blocks, thread_idx.x)
            me = block_rank_in_cluster()
            for i in range_constexpr(NV):
                store_async(peer, (me, i, slot), values[i], bars[slot])
        mbarrier_wait(bars[slot], (nth // 2) % 2)
        r = thread_idx.x % CLUSTER      # lane-group rank r: block r's
        values = level(Lanes(tuple(blocks[r, i, slot] for i in range_constexpr(NV)), CLUSTER))
    return values


@func
def load_chunk(r, k, g, c):
    """r[:, k] = chunk c (VEC = size(r, 0) elements) of the row `g`, converted
    to r's type: one vector load where the data's alignment allows."""
    vec = size(r, 0)
    buf = make_fragment_like(Layout(vec), g.dtype)
    copyto(buf, tile(g, (vec,), (c,)))
    for e in range(vec):
        r[e, k] = cast(buf[e], r.dtype)


@func
def store_chunk(g, c, r, k):
    """Chunk c of the row `g` = r[:, k], converted to g's type."""
    vec = size(r, 0)
    buf = make_fragment_like(Layout(vec), g.dtype)
    for e in range(vec):
        buf[e] = cast(r[e, k], g.dtype)
    copyto(tile(g, (vec,), (c,)), buf)


@func
def load_row(r, g, t, nt, n, fill):
    """Fill the (VEC, CHUNKS) fragment `r` with this thread's chunks of the
    row `g` (n elements, a multiple of VEC), converted to r's type; `fill`
    past the end."""
    for k in range(size(r, 1)):
        c = k * nt + t
        if c * size(r, 0) < n:
            load_chunk(r, k, g, c)
        else:
            for e in range(size(r, 0)):
                r[e, k] = fill


@func
def store_row(g, r, t, nt, n):
    """Store this thread's chunks of the fragment `r` into the row `g` (n
    elements), converted to g's type; chunks past the end are skipped."""
    for k in range(size(r, 1)):
        c = k * nt + t
        if c * size(r, 0) < n:
            store_chunk(g, c, r, k)


@func
def store_normalized(g, r, scale, w, b, HAS_W, HAS_B, KEEP, t, nt, n):
    """The norms' write: this thread's chunks of the fragment `r` times
    `scale`, times the weight `w`'s chunk (HAS_W), plus the bias `b`'s
    (HAS_B), stored into the row `g` (n elements) in g's type; chunks past
    the end are skipped. w and b are read chunk by chunk (param_chunk: from
    kept_param's shared arrays with KEEP, else from global memory, cache
    hits after the first row)."""
    vec = size(r, 0)
    wk = make_fragment_like(Layout((vec, 1)), r.dtype)
    bk = make_fragment_like(Layout((vec, 1)), r.dtype)
    for k in range(size(r, 1)):
        c = k * nt + t
        if c * vec < n:
            if HAS_W:
                param_chunk(wk, w, k, c, KEEP)
            if HAS_B:
                param_chunk(bk, b, k, c, KEEP)
            for e in range(vec):
                r[e, k] = r[e, k] * scale
                if HAS_W:
                    r[e, k] = r[e, k] * wk[e, 0]
                if HAS_B:
                    r[e, k] = r[e, k] + bk[e, 0]
            store_chunk(g, c, r, k)


def thread_chunks(dtype, VEC, THREADS, CHUNKS):
    """The layout of a shared array in which each of THREADS threads keeps
    CHUNKS chunks of VEC elements of `dtype` (a kept parameter's, kept
    column sums; the ring's rows take 16 bytes a chunk at most, so stay
    whole), indexed (element, thread, chunk): each chunk in 16-byte
    pieces, a piece's threads side by side, so that a warp's 16-byte loads
    and stores of one piece meet no bank conflict (a 32-byte chunk in one
    place, as float32 parameters beside bfloat16 rows are, would take two
    passes for each of them); a chunk of 16 bytes or less stays whole.
        >>> thread_chunks(Float32, 8, 256, 2)
        ((4,2),256,2):((1,1024),4,2048)
    """
    piece = max(1, min(VEC, 16 // (dtype.bits // 8)))
    if piece == VEC:
        return Layout((VEC, THREADS, CHUNKS))
    return Layout(((piece, VEC // piece), THREADS, CHUNKS),
                  ((1, piece * THREADS), piece, VEC * THREADS))


@func
def kept_param(w, KEEP, WORK, t, nt, n):
    """With KEEP, this thread's chunks of the (N,) parameter `w` (a norm's
    weight or bias) copied into its places of a new (VEC, THREADS, CHUNKS)
    shared array of w's type (ones past the row's end) and waited for (only
    this thread reads them), returned as its (VEC, CHUNKS) view, indexed as
    a fragment is: a looping kernel reads its rows' parameters there, not
    from L2 at every row nor from registers. Else `w` itself.
        rw = kept_param(w, KEEP, WORK, t, nt, size(x, 1))
    """
    if not KEEP:
        return w
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    s = shared_array(w.dtype, thread_chunks(w.dtype, VEC, THREADS, CHUNKS))
    stage_row(s, w, t, nt, n, 1.0)
    cp_async_commit()
    cp_async_wait(0)
    return s[None, thread_idx.x, None]


@func
def param_chunk(dst, w, k, c, KEEP):
    """dst[:, 0] = this thread's chunk k (chunk c of the row) of a parameter:
    from its kept_param view with KEEP, else chunk c of the (N,) w."""
    if KEEP:
        load_chunk(dst, 0, w[None, k], 0)
    else:
        load_chunk(dst, 0, w, c)


@func
def stage_row(s, g, t, nt, n, fill=None):
    """Start copying (cp.async, not waited for) this thread's chunks of the
    row `g` (n elements) into its places in the shared array `s`, a
    (VEC, THREADS, CHUNKS) array of g's type: the chunks load_row would
    read, read later by unstage_row; `fill` (stored) in the places past the
    row's end, where given. Only this thread reads them, so its
    cp_async_wait is all the waiting they need."""
    vec = size(s, 0)
    for k in range(size(s, 2)):
        c = k * nt + t
        if c * vec < n:
            cucopyto(s[None, thread_idx.x, k], tile(g, (vec,), (c,)))
        elif fill is not None:
            for e in range(vec):
                s[e, thread_idx.x, k] = cast(fill, s.dtype)


@func
def unstage_row(r, s, t, nt, n, fill):
    """load_row from the shared array `s` (filled by stage_row and waited
    for): this thread's chunks into the (VEC, CHUNKS) fragment `r`,
    converted to r's type; `fill` past the row's end."""
    for k in range(size(r, 1)):
        c = k * nt + t
        if c * size(r, 0) < n:
            load_chunk(r, k, s[None, thread_idx.x, k], 0)
        else:
            for e in range(size(r, 0)):
                r[e, k] = fill


@func
def stage_group(ring, arrays, g, count, step, WORK, m):
    """Start copying this thread's chunks of row group g's rows of each of
    `arrays` into its places in `ring` (a shared array for each, stage_row),
    in the ring's stage for g (ring_stage), if g < count, and commit them
    as one cp.async group."""
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    if g < count:
        row, t, nt, _ = group_place(ROWS, TPR, CLUSTER, THREADS, m, g)
        for s, a in zip(ring, arrays):
            stage_row(ring_stage(s, g, step), a[row, None], t, nt, size(a, 1))
    cp_async_commit()


@func
def ring_stage(s, g, step):
    """The (VEC, THREADS, CHUNKS) stage of the ring's shared array `s` that
    row group g takes: the groups first, first + step, ... (first < step)
    take the stages in turn."""
    stages = size(s, 3)
    if stages == 1:
        return s[None, None, None, 0]
    return s[None, None, None, (g // step) % stages]


@func
def row_groups(arrays, WORK, STAGED, LOOPS, MERGES=True):
    """The start of a kernel that loops over row groups of the (M, N)
    `arrays` (a tuple: the rows it reads): (first, count, step) of its
    groups (groups(); with LOOPS False, the launch has a block or cluster
    per group, and the loop takes one trip that NVCC sees as one: count is
    first + 1), this thread's index t among its row's nt threads, and the
    ring: with STAGED (a number of stages; True is one), a (VEC, THREADS,
    CHUNKS, STAGED) shared array of each array's type, the first STAGED
    groups' rows in flight into it (load_group reads a group's and starts
    the one STAGED groups on); else None; and `bars`: with
    MERGES (the kernel calls row_merge), in a cluster, row_merge's two
    mbarriers, initialized here, with an arrival at the cluster barrier that
    the first row_merge waits for before it reaches a peer's; else None.
        first, count, step, t, nt, ring, bars = row_groups((x,), WORK, STAGED, True)
        r = fragment(WORK, math_type(x.dtype))
        for g in range(first, count, step):
            row, mine = load_group((r,), ring, (x,), g, count, step, t, nt, 0.0, WORK)
    """
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    m = size(arrays[0], 0)
    first, count, step = groups(ROWS, CLUSTER, m)
    if not LOOPS:
        count = first + 1
        step = 1
    _, t, nt, _ = group_place(ROWS, TPR, CLUSTER, THREADS, m, first)
    bars = None
    if MERGES and CLUSTER > 1:
        bars = mbarrier_array(2)
        if thread_idx.x == 0:
            mbarrier_init(bars[0], 1)
            mbarrier_init(bars[1], 1)
            fence_barrier_init()
    ring = None
    if STAGED:
        ring = tuple(shared_array(a.dtype, Layout((VEC, THREADS, CHUNKS, int(STAGED))))
                     for a in arrays)
        for k in range(int(STAGED)):
            stage_group(ring, arrays, first + k * step, count, step, WORK, m)
    if MERGES and CLUSTER > 1:
        cluster_arrive(relaxed=True)
    return first, count, step, t, nt, ring, bars


@func
def group_start(x, dy, w, HAS_W, WORK, STAGED, KEEP=False):
    """A norm backward's start: row_groups((x, dy), WORK, STAGED, True) and the
    weight's chunks rw, read as a (VEC, CHUNKS) fragment is, the same for
    every row: kept_param's shared view with KEEP and HAS_W, else a fragment
    of the math type (ones without HAS_W):
    (first, count, step, t, nt, rw, ring, bars)."""
    first, count, step, t, nt, ring, bars = row_groups((x, dy), WORK, STAGED, True)
    if KEEP and HAS_W:
        rw = kept_param(w, KEEP, WORK, t, nt, size(x, 1))
    else:
        rw = fragment(WORK, math_type(x.dtype))
        for k in range(size(rw, 1)):
            for e in range(size(rw, 0)):
                rw[e, k] = cast(1.0, rw.dtype)
        if HAS_W:
            load_row(rw, w, t, nt, size(x, 1), 1.0)
    return first, count, step, t, nt, rw, ring, bars


# the norms' forwards sum a thread's chunks in this many accumulators (element e of a chunk
# into lane e % SUM_LANES): that many short chains of dependent adds instead of one of VEC *
# CHUNKS, 4 cycles each (FFMA's latency), where 8 warps an SM hide little (bfloat16 at
# 131,072: 64 elements a thread). Their registers are free there (ptxas, sm_90a: the same
# counts); in the backwards and softmax's kernels they cost registers and spills (layer_norm's
# backward at bfloat16 131,072: 0 to 8 bytes spilled, at 262,144: 132 to 160), so those keep
# one chain
SUM_LANES = 4


@func
def sum_lanes(dtype):
    """SUM_LANES accumulators of `dtype`, all 0, for a thread's sum over its
    chunks; `reduce(acc, "sum")` adds them pairwise at the end.
        acc = sum_lanes(r.dtype)
        for k in range(CHUNKS):
            for e in range(VEC):
                acc[e % SUM_LANES] = acc[e % SUM_LANES] + r[e, k] * r[e, k]
        s = reduce(acc, "sum")
    """
    acc = make_fragment_like(Layout((SUM_LANES,)), dtype)
    for i in range(SUM_LANES):
        acc[i] = cast(0.0, dtype)
    return acc


@func
def zeros(WORK, dtype, KEEP=False):
    """A new (VEC, CHUNKS) fragment of `dtype` (the first two of WORK or
    SLAB), all 0: a thread's column sums; with KEEP in shared memory
    instead, this thread's (VEC, CHUNKS) view of a new (VEC, THREADS,
    CHUNKS) shared array, read as a fragment is (out of its registers).
        accb = zeros(WORK, Float32, KEEP)
    """
    if KEEP:
        chunks = thread_chunks(dtype, WORK[0], WORK[-1], WORK[1])
        r = shared_array(dtype, chunks)[None, thread_idx.x, None]
    else:
        r = fragment(WORK, dtype)
    for k in range(size(r, 1)):
        for e in range(size(r, 0)):
            r[e, k] = cast(0.0, dtype)
    return r


@func
def load_group(frags, ring, arrays, g, count, step, t, nt, fill, WORK):
    """(row, mine) of this thread in row group `g` (group_place), with its
    row of each of `arrays`, this thread's chunks, loaded into the (VEC,
    CHUNKS) fragments `frags` (`fill` past the row's end): from the ring
    (row_groups), whose places then take the next group's rows (each thread
    reads back only the places it filled, so no barrier is needed between),
    or, with no ring, from global memory."""
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    m, n = size(arrays[0], 0), size(arrays[0], 1)
    row, _, _, mine = group_place(ROWS, TPR, CLUSTER, THREADS, m, g)
    if ring is not None:
        stages = size(ring[0], 3)
        cp_async_wait(stages - 1)
        for r, s in zip(frags, ring):
            unstage_row(r, ring_stage(s, g, step), t, nt, n, fill)
        stage_group(ring, arrays, g + stages * step, count, step, WORK, m)
    else:
        for r, a in zip(frags, arrays):
            load_row(r, a[row, None], t, nt, n, fill)
    return row, mine


@func
def fragment(WORK, dtype):
    """A new (VEC, CHUNKS) fragment of `dtype` (the first two of WORK): a
    thread's chunks of a row."""
    return make_fragment_like(Layout((WORK[0], WORK[1])), dtype)


@func
def fragment_max(r):
    """The max of this thread's fragment `r` (no less than lowest(): finite,
    so that exp2(x - max) is 0 for a -inf fill, not NaN)."""
    m = cast(lowest(r.dtype), r.dtype)
    for k in range(size(r, 1)):
        for e in range(size(r, 0)):
            m = maximum(m, r[e, k])
    return m


@func
def row_logsumexp(r, nth, TPR, CLUSTER, THREADS, bars):
    """(m, l): the max of this thread's row, held in the fragments `r` of its
    threads (-inf past the row's end), and l = log(sum(exp(x - m))), returned
    to each of them in r's type; the log-sum-exp is m + l, kept apart so
    that x - m - l loses nothing to a large m. One pass over the registers
    for each thread's max, one for its sum of exp2((x - max) log2(e)), then
    one row_merge of the threads' (max, sum) pairs (`nth`, `bars`: row_merge's)."""
    m = fragment_max(r)
    s = cast(0.0, r.dtype)
    for k in range(size(r, 1)):
        for e in range(size(r, 0)):
            s = s + exp2((r[e, k] - m) * LOG2E)
    big, total = row_merge((m, s), max_sumexp, nth, TPR, CLUSTER, THREADS, bars)
    return big, log2(total) * LN2


@func
def loop_logsumexp(g, r, THREADS):
    """(m, l) as row_logsumexp's for the row `g` (one block of THREADS per
    row), returned to each thread in the type of `r`, a (VEC, 1) fragment it
    loads chunks through: one pass over the row keeps each thread's running
    max and sum (the sum rescaled when the max grows), the block merges
    them."""
    m = cast(lowest(r.dtype), r.dtype)  # typed: the loop carries them in the math type
    s = cast(0.0, r.dtype)
    for c in range(thread_idx.x, size(g, 0) // size(r, 0), THREADS):
        load_chunk(r, 0, g, c)
        for e in range(size(r, 0)):
            m_new = maximum(m, r[e, 0])
            s = s * exp2((m - m_new) * LOG2E) + exp2((r[e, 0] - m_new) * LOG2E)
            m = m_new
    big, total = row_merge((m, s), max_sumexp, 0, THREADS, 1, THREADS)
    return big, log2(total) * LN2


@func
def groups(ROWS, CLUSTER, m):
    """(first, count, step) of the row groups a looping kernel's block (or
    cluster) takes: first, first + step, ... below count. A group is ROWS
    rows (one row per block or cluster when ROWS == 1); every thread of a
    block takes the same groups, so the row reductions stay uniform."""
    if CLUSTER > 1:
        first = cluster_idx.x
        step = cluster_grid_dim.x
    else:
        first = block_idx.x
        step = grid_dim.x
    return first, (m + ROWS - 1) // ROWS, step


@func
def group_place(ROWS, TPR, CLUSTER, THREADS, m, g):
    """(row, t, nt, mine) of this thread in row group `g`: its row (clamped
    to the last, m - 1, for the spare threads of a block past the last row:
    they load it, reduce it and store nothing), its index t among the row's
    nt threads, and whether the row is its own (only then does it store)."""
    mine = True
    if CLUSTER > 1:
        row = g
        t = block_rank_in_cluster() * THREADS + thread_idx.x
        nt = CLUSTER * THREADS
    elif ROWS == 1:
        row = g
        t = thread_idx.x
        nt = THREADS
    else:
        row = minimum(g * ROWS + thread_idx.x // TPR, m - 1)
        mine = g * ROWS + thread_idx.x // TPR < m
        t = thread_idx.x % TPR
        nt = TPR
    return row, t, nt, mine


@func
def store_partial(p, acc, t, nt, n, ROWS, THREADS):
    """Write the block's column sums into the partial row `p` (n elements):
    each thread's (VEC, CHUNKS) fragment `acc` holds its chunks of the sum
    over the rows it took. With ROWS > 1 rows per block, the rows' threads
    (nt == TPR each) hold the same columns: they are added in shared memory
    first (atomics), so the block writes one row."""
    if ROWS > 1:
        vec, chunks = size(acc, 0), size(acc, 1)
        s = shared_array(acc.dtype, Layout(vec * chunks * nt))
        for i in range(thread_idx.x, vec * chunks * nt, THREADS):
            s[i] = cast(0.0, acc.dtype)
        sync_threads()
        for k in range(chunks):
            c = k * nt + t
            if c * vec < n:
                for e in range(vec):
                    atomic_add(s, c * vec + e, acc[e, k])
        sync_threads()
        for i in range(thread_idx.x, n, THREADS):
            p[i] = s[i]
    else:
        store_row(p, acc, t, nt, n)


@func
def slab_place(slabs, n, b, SLAB):
    """(i, slab, left) of block `b` in a launch over slabs: rows too long for
    one block's registers are cut into slabs of VEC * CHUNKS * THREADS
    elements (SLAB = (VEC, CHUNKS, THREADS)), `slabs` to a row; block b
    takes slab b % slabs of row (or row group) i = b // slabs, whose
    elements from the slab's start to the row's end number `left`."""
    VEC, CHUNKS, THREADS = SLAB
    slab = b % slabs
    return b // slabs, slab, n - slab * (VEC * CHUNKS * THREADS)


@func
def slab_fragment(g, slab, left, fill, dtype, SLAB, LOAD):
    """This thread's chunks of slab `slab` of the row `g` (`left` elements
    from the slab's start to the row's end) in a new (VEC, CHUNKS) fragment
    of `dtype`, `fill` past the row's end, or everywhere when LOAD is False
    (static: g need not be a row then)."""
    VEC, CHUNKS, THREADS = SLAB
    r = make_fragment_like(Layout((VEC, CHUNKS)), dtype)
    if LOAD:
        load_row(r, tile(g, (VEC * CHUNKS * THREADS,), (slab,)), thread_idx.x, THREADS, left,
                 fill)
    else:
        for k in range(CHUNKS):
            for e in range(VEC):
                r[e, k] = fill
    return r


@func
def store_slab(g, r, slab, left, SLAB):
    """Store this thread's chunks of the fragment `r` into slab `slab` of the
    row `g` (as slab_fragment reads them)."""
    VEC, CHUNKS, THREADS = SLAB
    store_row(tile(g, (VEC * CHUNKS * THREADS,), (slab,)), r, thread_idx.x, THREADS, left)


@func
def slab_total(sums, i):
    """The sum of row i of `sums` (a value per slab), returned to every
    thread: its warp's lanes take every 32nd value, then shuffles."""
    s = cast(0.0, sums.dtype)
    for j in range(thread_idx.x % 32, size(sums, 1), 32):
        s = s + sums[i, j]
    return warp_reduce(s, "sum")


# column_sum's block: COLUMNS columns (a warp's coalesced loads) times
# COLUMN_LANES lanes down the rows, many loads in flight when the partial
# has few columns and many rows (short rows, many blocks)
COLUMNS = 32
COLUMN_LANES = 32


@kernel
def column_sum(out, part):
    """out[c] = the sum of part[:, c] (in part's type), stored in out's type:
    a block of COLUMNS x COLUMN_LANES threads per COLUMNS columns, each lane
    adding every COLUMN_LANES-th row (coalesced across the columns), the
    lanes' sums added in shared memory. Launched as
    column_sum[ceil(N / COLUMNS), COLUMNS * COLUMN_LANES]."""
    p, n = size(part, 0), size(part, 1)
    col = block_idx.x * COLUMNS + thread_idx.x % COLUMNS
    lane = thread_idx.x // COLUMNS
    s = cast(0.0, part.dtype)
    if col < n:
        for i in unrolled_range(lane, p, COLUMN_LANES, unroll=4):
            s = s + part[i, col]
    sums = shared_array(part.dtype, Layout(COLUMNS * COLUMN_LANES))
    sums[thread_idx.x] = s
    sync_threads()
    if lane == 0 and col < n:
        total = s
        for j in range(1, COLUMN_LANES):
            total = total + sums[j * COLUMNS + thread_idx.x]
        out[col] = cast(total, out.dtype)

"""LayerNorm over the last dimension, forward and backward, as moye kernels.

Forward: mean = mean(x), rstd = 1 / sqrt(mean((x - mean)^2) + eps) (each
thread's mean and squared deviations from two passes over its registers,
merged over the row by Chan et al.'s update; not E[x^2] - E[x]^2, which
cancels),
y = (x - mean) * rstd * weight + bias, in float32 (float64 for float64
data); y in x's type, mean and rstd in float32 (float64). Backward, with
xhat = (x - mean) * rstd and g = dy * weight:
dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dweight = the sum over
rows of dy * xhat, dbias = the sum over rows of dy.

The kernels are rms_norm_op's, with the mean: a "registers" forward (the
row read once; in a cluster, weight and bias are kept in shared memory
where they take 64 or more elements a thread or the launch loops over row
groups anyway), a "loop" forward (three passes: mean, variance, write),
and backwards that loop over row groups, keeping dweight and dbias
columns in registers for row_kernels.column_sum (in a cluster,
staging the next group's x and dy in shared memory, and for 16-bit rows
keeping the weight there too, the dbias columns as well where that alone
leaves no registers plan, and under plan_options(keep="sums") the dweight
columns too: rows.backward_plan), or, for rows the loop
plan takes, two slab kernels (the slabs' sums of g and g * xhat, then dx
per row group and slab).
"""
from ..array import make_fragment_like
from ..compiler import Constexpr, func, kernel
from ..device import (block_idx, block_reduce, cast, grid_dim, maximum, minimum, reduce,
                      rsqrt, thread_idx)
from ..layout import Layout, size

from . import replay, rows
from .norm_args import as_scalar, check_eps, check_param, check_stat, norm_rows
from .row_kernels import (SUM_LANES, fragment, group_place, group_start, kept_param, load_chunk,
                          load_group, math_type, row_groups, row_merge, slab_fragment, slab_place,
                          slab_total, store_chunk, store_normalized, store_partial, store_row,
                          store_slab, sum_lanes, sums, zeros)

OP = "layer_norm"
# the (VEC, CHUNKS) fragments a thread of the backward keeps: x, dy, weight and two sums
FRAGMENTS = 5
# the forward's largest block for a row in one block: in blocks of 1,024 (64 registers a
# thread) it ran slower (H100, bfloat16 rows of 16,384: 2,066 GB/s with 1,024 threads,
# 2,844-2,912 with 512; after row_merge, 2,314 and 2,904; float32: 2,947 and 2,916-2,946)
FORWARD_THREADS = 512


def _forward_plan(x, name, n):
    """The shared plan, but a row that takes one block of more than
    FORWARD_THREADS threads takes one of FORWARD_THREADS if it fits there
    (clusters and the loop kernel keep theirs)."""
    p = rows.plan_for(x, name, n)
    if p.kernel == "registers" and p.cluster == 1 and p.threads > FORWARD_THREADS:
        q = rows.plan_for(x, name, n, max_threads=FORWARD_THREADS)
        if q.kernel == "registers" and q.cluster == 1:
            return q
    return p


# -- kernels ---------------------------------------------------------------------------------

@func
def squared_deviations(r, mu, t, nt, n):
    """The sum of (x - mu)^2 over this thread's elements of the row in the
    (VEC, CHUNKS) fragment `r` (not the fill past the row's end)."""
    VEC = size(r, 0)
    v = sum_lanes(r.dtype)
    for k in range(size(r, 1)):
        if (k * nt + t) * VEC < n:
            for e in range(VEC):
                d = r[e, k] - mu
                v[e % SUM_LANES] = v[e % SUM_LANES] + d * d
    return reduce(v, "sum")


@func
def thread_moments(r, c, t, nt, n):
    """(count, mean, sum of squared deviations about the mean) of this
    thread's elements of the row in the (VEC, CHUNKS) fragment `r` (not the
    fill past the row's end; (0, 0, 0) for none), in r's type, about `c`
    (a value of the row): r's elements are shifted by -c, so that the means
    merged later are small and a constant row's are exactly 0, whatever
    fast_math's division gives."""
    VEC = size(r, 0)
    count = cast(0.0, r.dtype)
    s = sum_lanes(r.dtype)
    for k in range(size(r, 1)):
        if (k * nt + t) * VEC < n:
            count = count + VEC
            for e in range(VEC):
                r[e, k] = r[e, k] - c
                s[e % SUM_LANES] = s[e % SUM_LANES] + r[e, k]
    mu = reduce(s, "sum") / maximum(count, cast(1.0, r.dtype))
    return count, mu, squared_deviations(r, mu, t, nt, n)


def moments(group):
    """A row_merge level: (count, mean, sum of squared deviations) merged:
    the count, the mean of the means by their counts, then each member's
    squared deviations about it plus its count times its mean's squared
    distance from it (Chan et al.); (0, 0, 0) is its identity."""
    n = group.reduce(lambda v: v[0], "sum")
    mu = group.reduce(lambda v: v[0] * v[1], "sum") / maximum(n, cast(1.0, n.type))
    return n, mu, group.reduce(lambda v: v[2] + v[0] * (v[1] - mu) * (v[1] - mu), "sum")


moments.identity = lambda values: (0.0, 0.0, 0.0)


@kernel(fast_math=True)
def layer_norm_registers(y, mean, rstd, x, w, b, eps, rn, HAS_W: Constexpr,
                         HAS_B: Constexpr, WORK: Constexpr, STAGED: Constexpr,
                         KEEP: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    n = size(x, 1)
    first, count, step, t, nt, ring, bars = row_groups((x,), WORK, STAGED, STAGED or KEEP)
    if HAS_W:
        w = kept_param(w, KEEP, WORK, t, nt, n)
    if HAS_B:
        b = kept_param(b, KEEP, WORK, t, nt, n)
    r = fragment(WORK, math_type(x.dtype))
    m = size(x, 0)
    # r is shifted by its row's first element, loaded a group ahead: at the group's start
    # its latency (from memory: the rest of the row comes from the ring) stood alone
    c = cast(x[group_place(ROWS, TPR, CLUSTER, THREADS, m, first)[0], 0], r.dtype)
    nth = 0
    for g in range(first, count, step):
        ahead = cast(x[group_place(ROWS, TPR, CLUSTER, THREADS, m,
                                   minimum(g + step, count - 1))[0], 0], r.dtype)
        row, mine = load_group((r,), ring, (x,), g, count, step, t, nt, 0.0, WORK)
        _, centre, q = row_merge(thread_moments(r, c, t, nt, n), moments, nth, TPR, CLUSTER,
                                 THREADS, bars)
        mu = c + centre
        for k in range(CHUNKS):
            for e in range(VEC):
                r[e, k] = r[e, k] - centre
        inv = rsqrt(q * rn + eps)
        if mine:
            if t == 0:
                mean[row] = mu
                rstd[row] = inv
            store_normalized(y[row, None], r, inv, w, b, HAS_W, HAS_B, KEEP, t, nt, n)
        c = ahead
        nth = nth + 1


@kernel(fast_math=True)
def layer_norm_loop(y, mean, rstd, x, w, b, eps, rn, HAS_W: Constexpr, HAS_B: Constexpr,
                    VEC: Constexpr, THREADS: Constexpr):
    n = size(x, 1)
    gx = x[block_idx.x, None]
    gy = y[block_idx.x, None]
    r = make_fragment_like(Layout((VEC, 1)), math_type(x.dtype))
    wk = make_fragment_like(Layout((VEC, 1)), r.dtype)
    bk = make_fragment_like(Layout((VEC, 1)), r.dtype)
    s = cast(0.0, r.dtype)             # typed: the loops carry them in the math type
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(r, 0, gx, c)
        for e in range(VEC):
            s = s + r[e, 0]
    mu = block_reduce(s, "sum") * rn
    v = cast(0.0, r.dtype)
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(r, 0, gx, c)
        for e in range(VEC):
            v = v + (r[e, 0] - mu) * (r[e, 0] - mu)
    inv = rsqrt(block_reduce(v, "sum") * rn + eps)
    if thread_idx.x == 0:
        mean[block_idx.x] = mu
        rstd[block_idx.x] = inv
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(r, 0, gx, c)
        if HAS_W:
            load_chunk(wk, 0, w, c)
        if HAS_B:
            load_chunk(bk, 0, b, c)
        for e in range(VEC):
            r[e, 0] = (r[e, 0] - mu) * inv
            if HAS_W:
                r[e, 0] = r[e, 0] * wk[e, 0]
            if HAS_B:
                r[e, 0] = r[e, 0] + bk[e, 0]
        store_chunk(gy, c, r, 0)


@kernel(fast_math=True)
def layer_norm_backward_registers(dx, pw, pb, dy, x, w, mean, rstd, rn, HAS_W: Constexpr,
                                  HAS_B: Constexpr, WORK: Constexpr, STAGED: Constexpr,
                                  KEEP: Constexpr, AHEAD: Constexpr):
    """dx of row groups first, first + step, ... and each group's dweight and
    dbias partial sums (pw[first], pb[first]); KEEP (rows.backward_plan): 0,
    the weight and both sums in registers; 1, the weight in shared memory;
    2, the dbias sums there too; 3, the dweight sums as well. With AHEAD,
    each row's mean and rstd are loaded a group ahead (xhat needs them
    before the reductions)."""
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    n = size(x, 1)
    first, count, step, t, nt, rw, ring, bars = group_start(x, dy, w, HAS_W, WORK, STAGED,
                                                            KEEP > 0)
    mt = math_type(x.dtype)
    rx = fragment(WORK, mt)
    rdy = fragment(WORK, mt)
    accw = zeros(WORK, mt, KEEP > 2)
    accb = zeros(WORK, mt, KEEP > 1)
    if AHEAD:
        m = size(x, 0)
        here = group_place(ROWS, TPR, CLUSTER, THREADS, m, first)[0]
        mu = cast(mean[here], mt)
        rs = cast(rstd[here], mt)
    nth = 0
    for g in range(first, count, step):
        if AHEAD:
            ahead = group_place(ROWS, TPR, CLUSTER, THREADS, m, minimum(g + step, count - 1))[0]
            mu_ahead = cast(mean[ahead], mt)
            rs_ahead = cast(rstd[ahead], mt)
        row, mine = load_group((rx, rdy), ring, (x, dy), g, count, step, t, nt, 0.0, WORK)
        if not AHEAD:
            mu = cast(mean[row], mt)
            rs = cast(rstd[row], mt)
        sg = cast(0.0, mt)
        sgx = cast(0.0, mt)
        for k in range(CHUNKS):
            for e in range(VEC):
                rx[e, k] = (rx[e, k] - mu) * rs       # xhat (the fill's is never used)
                sg = sg + rdy[e, k] * rw[e, k]
                sgx = sgx + rdy[e, k] * rw[e, k] * rx[e, k]
        sg, sgx = row_merge((sg, sgx), sums, nth, TPR, CLUSTER, THREADS, bars)
        sg = sg * rn
        sgx = sgx * rn
        if mine:
            for k in range(CHUNKS):
                for e in range(VEC):
                    if HAS_W:
                        accw[e, k] = accw[e, k] + rdy[e, k] * rx[e, k]
                    if HAS_B:
                        accb[e, k] = accb[e, k] + rdy[e, k]
                    rx[e, k] = rs * (rdy[e, k] * rw[e, k] - sg - rx[e, k] * sgx)
            store_row(dx[row, None], rx, t, nt, n)
        if AHEAD:
            mu = mu_ahead
            rs = rs_ahead
        nth = nth + 1
    if HAS_W:
        store_partial(pw[first, None], accw, t, nt, n, ROWS, THREADS)
    if HAS_B:
        store_partial(pb[first, None], accb, t, nt, n, ROWS, THREADS)


@kernel(fast_math=True)
def layer_norm_backward_sums(sums_g, sums_gx, dy, x, w, mean, rstd, HAS_W: Constexpr,
                             SLAB: Constexpr):
    """Rows too long for a block's registers, step 1: the sums of g = dy * w
    and of g * xhat over slab s of the row (slab_place), in sums_g[row, s]
    and sums_gx[row, s]."""
    VEC, CHUNKS, THREADS = SLAB
    row, slab, left = slab_place(size(sums_g, 1), size(x, 1), block_idx.x, SLAB)
    mt = math_type(x.dtype)
    rx = slab_fragment(x[row, None], slab, left, 0.0, mt, SLAB, True)
    rdy = slab_fragment(dy[row, None], slab, left, 0.0, mt, SLAB, True)
    rw = slab_fragment(w, slab, left, 1.0, mt, SLAB, HAS_W)
    mu = cast(mean[row], mt)
    rs = cast(rstd[row], mt)
    sg = cast(0.0, mt)
    sgx = cast(0.0, mt)
    for k in range(CHUNKS):
        for e in range(VEC):
            sg = sg + rdy[e, k] * rw[e, k]
            sgx = sgx + rdy[e, k] * rw[e, k] * (rx[e, k] - mu) * rs
    sg = block_reduce(sg, "sum")
    sgx = block_reduce(sgx, "sum")
    if thread_idx.x == 0:
        sums_g[row, slab] = sg
        sums_gx[row, slab] = sgx


@kernel(fast_math=True)
def layer_norm_backward_slabs(dx, pw, pb, dy, x, w, mean, rstd, sums_g, sums_gx, rn,
                              HAS_W: Constexpr, HAS_B: Constexpr, SLAB: Constexpr):
    """Step 2: a block per (row group, slab), looping over the group's rows:
    dx from the row's slab sums, the slab's dweight and dbias columns in
    registers, written as row `group` of the partials."""
    VEC, CHUNKS, THREADS = SLAB
    slabs = size(sums_g, 1)
    group, slab, left = slab_place(slabs, size(x, 1), block_idx.x, SLAB)
    mt = math_type(x.dtype)
    rw = slab_fragment(w, slab, left, 1.0, mt, SLAB, HAS_W)
    accw = zeros(SLAB, mt)
    accb = zeros(SLAB, mt)
    for row in range(group, size(x, 0), grid_dim.x // slabs):
        rx = slab_fragment(x[row, None], slab, left, 0.0, mt, SLAB, True)
        rdy = slab_fragment(dy[row, None], slab, left, 0.0, mt, SLAB, True)
        mu = cast(mean[row], mt)
        rs = cast(rstd[row], mt)
        sg = cast(slab_total(sums_g, row), mt) * rn
        sgx = cast(slab_total(sums_gx, row), mt) * rn
        for k in range(CHUNKS):
            for e in range(VEC):
                rx[e, k] = (rx[e, k] - mu) * rs
                if HAS_W:
                    accw[e, k] = accw[e, k] + rdy[e, k] * rx[e, k]
                if HAS_B:
                    accb[e, k] = accb[e, k] + rdy[e, k]
                rx[e, k] = rs * (rdy[e, k] * rw[e, k] - sg - rx[e, k] * sgx)
        store_slab(dx[row, None], rx, slab, left, SLAB)
    if HAS_W:
        store_slab(pw[group, None], accw, slab, left, SLAB)
    if HAS_B:
        store_slab(pb[group, None], accb, slab, left, SLAB)


# -- the ops ---------------------------------------------------------------------------------

@replay.replayed
def layer_norm_forward(x, weight, bias, eps):
    """(y, mean, rstd): LayerNorm of `x` over its last dimension,
    y = (x - mean) * rstd * weight + bias with rstd = 1 / sqrt(var + eps), the
    biased variance; mean and rstd float32 (float64 for float64 x) of shape
    x.shape[:-1]; `weight`, `bias` (N,) of x's dtype or float32, or None.

        >>> import numpy as np
        >>> y, mean, rstd = layer_norm_forward(np.array([[1.0, 3.0]], np.float32), None,
        ...                                    None, 1e-5)
        >>> np.round(y.astype(float), 4).tolist(), mean.tolist(), np.round(rstd, 4).tolist()
        ([[-1.0, 1.0]], [2.0], [1.0])
    """
    name, m, n, x2, _, weight = norm_rows(OP, x, weight)
    bias = check_param(bias, "bias", x, name, n, OP)
    eps = check_eps(eps, OP)
    y = rows.empty_like(x)
    mean = rows.empty(x, tuple(x.shape[:-1]), rows.stats_dtype(name))
    rstd = rows.empty(x, tuple(x.shape[:-1]), rows.stats_dtype(name))
    if n == 0:
        replay.host_work()
        mean[...] = 0                  # the moments of no elements: 0
        rstd[...] = eps ** -0.5
    elif m:
        p = _forward_plan(x, name, n)
        rows.launch(p, layer_norm_registers, layer_norm_loop, y.reshape(m, n), mean.reshape(m),
                    rstd.reshape(m), x2, x2 if weight is None else weight,
                    x2 if bias is None else bias, as_scalar(eps, name), as_scalar(1 / n, name),
                    weight is not None, bias is not None,
                    params=tuple(v for v in (weight, bias) if v is not None))
    return y, mean, rstd


@replay.replayed
def layer_norm_backward(dy, x, weight, mean, rstd):
    """(dx, dweight, dbias): the gradients of layer_norm_forward from the
    output's gradient `dy`, its `x`, `weight` and the `mean`, `rstd` it
    returned: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
    xhat = (x - mean) * rstd, g = dy * weight; dweight = the sum over rows of
    dy * xhat and dbias = the sum over rows of dy, in weight's dtype.
    dweight is None when weight is; dbias is always computed (the caller
    drops it when there is no bias), in weight's dtype or else x's.

        >>> import numpy as np
        >>> x = np.array([[1.0, 3.0], [0.0, 4.0]], np.float32)
        >>> y, mean, rstd = layer_norm_forward(x, None, None, 1e-5)
        >>> dx, dw, db = layer_norm_backward(np.ones_like(x), x, None, mean, rstd)
        >>> np.round(dx.astype(float), 4).tolist(), dw, db.tolist()
        ([[0.0, 0.0], [0.0, 0.0]], None, [2.0, 2.0])
    """
    op = "layer_norm_backward"
    name, m, n, x2, dy2, weight = norm_rows(op, x, weight, dy)
    mean1 = check_stat(mean, "mean", x, name, op)
    rstd1 = check_stat(rstd, "rstd", x, name, op)
    pname = name if weight is None else rows.dtype_name(weight, "weight", op)
    dx = rows.empty_like(x)
    if m == 0 or n == 0:
        sums = []
        for wanted in (weight is not None, True):
            s = rows.empty(x, (n,), pname) if wanted else None
            if s is not None:
                replay.host_work()
                s[...] = 0
            sums.append(s)
        return dx, sums[0], sums[1]
    p, keep = rows.backward_plan(x, name, n, FRAGMENTS, weight, sums=2)
    dx2, w = dx.reshape(m, n), x2 if weight is None else weight
    stats = rows.stats_dtype(name)
    if p.kernel == "loop":              # rows too long for registers: two kernels over slabs
        work, slabs, used = rows.slab_plan(p, x, m, n, FRAGMENTS)
        sums_g, sums_gx = rows.empty(x, (m, slabs), stats), rows.empty(x, (m, slabs), stats)
        rows.run(p, layer_norm_backward_sums, m * slabs, work[2], sums_g, sums_gx, dy2, x2, w,
                 mean1, rstd1, weight is not None, work)
        pw = dx2 if weight is None else rows.empty(x, (used, n), stats)
        pb = rows.empty(x, (used, n), stats)
        rows.run(p, layer_norm_backward_slabs, used * slabs, work[2], dx2, pw, pb, dy2, x2, w,
                 mean1, rstd1, sums_g, sums_gx, as_scalar(1 / n, name), weight is not None,
                 True, work)
    else:
        # AHEAD only where the weight alone is kept: on an H100 at bfloat16 16,384 and
        # 32,768, 0.77 and 0.73 of the copy's GB/s without, 0.93 and 0.92 with; nothing kept
        # (float32 16,384 to 65,536) it lost 0.01 to 0.03, and 0.09 with the sums kept too
        staged = rows.staged(p, x, 2)
        count = rows.group_count(p, x, m, FRAGMENTS - keep, 2 * staged,
                                 rows.kept_bytes(p, (weight,), sums=keep - 1) if keep else 0)
        pw = dx2 if weight is None else rows.empty(x, (count, n), stats)
        pb = rows.empty(x, (count, n), stats)
        used = rows.launch_groups(p, layer_norm_backward_registers, count, dx2, pw, pb, dy2,
                                  x2, w, mean1, rstd1, as_scalar(1 / n, name),
                                  weight is not None, True, staged=staged,
                                  tail=(keep, keep == 1))
    dw = None if weight is None else rows.sum_columns(pw[:used], pname)
    return dx, dw, rows.sum_columns(pb[:used], pname)


def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm of `x` over its last dimension: (x - mean) / sqrt(var + eps)
    * weight + bias, in x's dtype (float32 math inside; float64 for float64).
    torch: `torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)`.

        >>> import numpy as np
        >>> y = layer_norm(np.array([[1.0, 3.0]], np.float32), np.array([2.0, 2.0], np.float32),
        ...                np.array([0.0, 1.0], np.float32))
        >>> np.round(y.astype(float), 4).tolist()
        [[-2.0, 3.0]]
    """
    return layer_norm_forward(x, weight, bias, eps)[0]

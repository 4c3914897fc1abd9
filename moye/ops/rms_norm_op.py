"""RMSNorm over the last dimension, forward and backward, as moye kernels.

Forward: rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * weight, in float32
(float64 for float64 data), y stored in x's type and rstd in float32
(float64). Backward, with xhat = x * rstd and g = dy * weight:
dx = rstd * (g - xhat * mean(g * xhat)), dweight = sum over rows of dy * xhat.

On row_kernels' skeleton (rows.Plan picks the kernel):
- forward "registers": the row is read once into registers, its sum of
  squares reduced over the row's threads, then scaled and written; "loop":
  one block per row, a pass for the sum of squares, a second to write.
  In a cluster, a weight of 64 or more elements a thread, or one whose
  launch loops over row groups anyway, is kept in shared memory
  (rows.keeps), not read from L2 at every row.
- backward: a block (or cluster) loops over row groups (rows.group_count of
  them), keeping weight in registers (in a cluster, for 16-bit rows, in
  shared memory: rows.backward_plan) and its threads' dweight columns in
  float32 registers across its rows (in a cluster, the next group's x and
  dy staged in shared memory meanwhile); each writes one row of a
  (groups, N) partial that row_kernels.column_sum adds up. Rows the loop
  plan takes go through two slab kernels: the slabs' sums of g * x, then dx
  per (row group, slab), the slab's dweight columns in registers.
"""
from ..array import make_fragment_like
from ..compiler import Constexpr, kernel
from ..device import block_idx, block_reduce, cast, grid_dim, reduce, rsqrt, thread_idx
from ..layout import Layout, size

from . import replay, rows
from .norm_args import as_scalar, check_eps, check_stat, norm_rows
from .row_kernels import (SUM_LANES, fragment, group_start, kept_param, load_chunk, load_group,
                          math_type, row_groups, row_merge, slab_fragment, slab_place, slab_total,
                          store_chunk, store_normalized, store_partial, store_row, store_slab,
                          sum_lanes, sums, zeros)

OP = "rms_norm"
# the (VEC, CHUNKS) fragments a thread of the backward keeps: x, dy, weight and the sums
FRAGMENTS = 4


# -- kernels ---------------------------------------------------------------------------------

@kernel(fast_math=True)
def rms_norm_registers(y, rstd, x, w, eps, rn, HAS_W: Constexpr, WORK: Constexpr,
                       STAGED: Constexpr, KEEP: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    n = size(x, 1)
    first, count, step, t, nt, ring, bars = row_groups((x,), WORK, STAGED, STAGED or KEEP)
    if HAS_W:
        w = kept_param(w, KEEP, WORK, t, nt, n)
    r = fragment(WORK, math_type(x.dtype))
    nth = 0
    for g in range(first, count, step):
        row, mine = load_group((r,), ring, (x,), g, count, step, t, nt, 0.0, WORK)
        s = sum_lanes(r.dtype)
        for k in range(CHUNKS):
            for e in range(VEC):
                s[e % SUM_LANES] = s[e % SUM_LANES] + r[e, k] * r[e, k]
        s = row_merge((reduce(s, "sum"),), sums, nth, TPR, CLUSTER, THREADS, bars)[0]
        inv = rsqrt(s * rn + eps)
        if mine:
            if t == 0:
                rstd[row] = inv
            store_normalized(y[row, None], r, inv, w, w, HAS_W, False, KEEP, t, nt, n)
        nth = nth + 1


@kernel(fast_math=True)
def rms_norm_loop(y, rstd, x, w, eps, rn, HAS_W: Constexpr, VEC: Constexpr,
                  THREADS: Constexpr):
    n = size(x, 1)
    gx = x[block_idx.x, None]
    gy = y[block_idx.x, None]
    r = make_fragment_like(Layout((VEC, 1)), math_type(x.dtype))
    wk = make_fragment_like(Layout((VEC, 1)), r.dtype)
    s = cast(0.0, r.dtype)             # typed: the loop carries it in the math type
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(r, 0, gx, c)
        for e in range(VEC):
            s = s + r[e, 0] * r[e, 0]
    inv = rsqrt(block_reduce(s, "sum") * rn + eps)
    if thread_idx.x == 0:
        rstd[block_idx.x] = inv
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(r, 0, gx, c)
        if HAS_W:
            load_chunk(wk, 0, w, c)
        for e in range(VEC):
            r[e, 0] = r[e, 0] * inv
            if HAS_W:
                r[e, 0] = r[e, 0] * wk[e, 0]
        store_chunk(gy, c, r, 0)


@kernel(fast_math=True)
def rms_norm_backward_registers(dx, part, dy, x, w, rstd, rn, HAS_W: Constexpr,
                                WORK: Constexpr, STAGED: Constexpr, KEEP: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    n = size(x, 1)
    first, count, step, t, nt, rw, ring, bars = group_start(x, dy, w, HAS_W, WORK, STAGED, KEEP)
    mt = math_type(x.dtype)
    rx = fragment(WORK, mt)
    rdy = fragment(WORK, mt)
    acc = zeros(WORK, mt)
    nth = 0
    for g in range(first, count, step):
        row, mine = load_group((rx, rdy), ring, (x, dy), g, count, step, t, nt, 0.0, WORK)
        rs = cast(rstd[row], mt)
        d = cast(0.0, mt)
        for k in range(CHUNKS):
            for e in range(VEC):
                d = d + rdy[e, k] * rw[e, k] * rx[e, k]
        # d = rstd^2 * mean(g * xhat), so that dx = rstd * g - x * d
        d = row_merge((d,), sums, nth, TPR, CLUSTER, THREADS, bars)[0] * rs * rs * rs * rn
        if mine:
            for k in range(CHUNKS):
                for e in range(VEC):
                    if HAS_W:
                        acc[e, k] = acc[e, k] + rdy[e, k] * rx[e, k] * rs
                    rx[e, k] = rs * rdy[e, k] * rw[e, k] - rx[e, k] * d
            store_row(dx[row, None], rx, t, nt, n)
        nth = nth + 1
    if HAS_W:
        store_partial(part[first, None], acc, t, nt, n, ROWS, THREADS)


@kernel(fast_math=True)
def rms_norm_backward_sums(sums, dy, x, w, HAS_W: Constexpr, SLAB: Constexpr):
    """Rows too long for a block's registers, step 1: sums[row, s] = the sum
    of dy * w * x over slab s of the row (slab_place)."""
    VEC, CHUNKS, THREADS = SLAB
    row, slab, left = slab_place(size(sums, 1), size(x, 1), block_idx.x, SLAB)
    mt = math_type(x.dtype)
    rx = slab_fragment(x[row, None], slab, left, 0.0, mt, SLAB, True)
    rdy = slab_fragment(dy[row, None], slab, left, 0.0, mt, SLAB, True)
    rw = slab_fragment(w, slab, left, 1.0, mt, SLAB, HAS_W)
    d = cast(0.0, mt)
    for k in range(CHUNKS):
        for e in range(VEC):
            d = d + rdy[e, k] * rw[e, k] * rx[e, k]
    d = block_reduce(d, "sum")
    if thread_idx.x == 0:
        sums[row, slab] = d


@kernel(fast_math=True)
def rms_norm_backward_slabs(dx, part, dy, x, w, rstd, sums, rn, HAS_W: Constexpr,
                            SLAB: Constexpr):
    """Step 2: a block per (row group, slab), looping over the group's rows:
    dx from the row's slab sums, the slab's dweight columns in registers,
    written as row `group` of the partial."""
    VEC, CHUNKS, THREADS = SLAB
    slabs = size(sums, 1)
    group, slab, left = slab_place(slabs, size(x, 1), block_idx.x, SLAB)
    mt = math_type(x.dtype)
    rw = slab_fragment(w, slab, left, 1.0, mt, SLAB, HAS_W)
    acc = zeros(SLAB, mt)
    for row in range(group, size(x, 0), grid_dim.x // slabs):
        rx = slab_fragment(x[row, None], slab, left, 0.0, mt, SLAB, True)
        rdy = slab_fragment(dy[row, None], slab, left, 0.0, mt, SLAB, True)
        rs = cast(rstd[row], mt)
        d = cast(slab_total(sums, row), mt) * rs * rs * rs * rn
        for k in range(CHUNKS):
            for e in range(VEC):
                if HAS_W:
                    acc[e, k] = acc[e, k] + rdy[e, k] * rx[e, k] * rs
                rx[e, k] = rs * rdy[e, k] * rw[e, k] - rx[e, k] * d
        store_slab(dx[row, None], rx, slab, left, SLAB)
    if HAS_W:
        store_slab(part[group, None], acc, slab, left, SLAB)


# -- the ops ---------------------------------------------------------------------------------

@replay.replayed
def rms_norm_forward(x, weight, eps):
    """(y, rstd): RMSNorm of `x` over its last dimension, y = x * rstd * weight
    with rstd = 1 / sqrt(mean(x^2) + eps) (float32; float64 for float64 x) of
    shape x.shape[:-1]; `weight` (N,) of x's dtype or float32, or None.

        >>> import numpy as np
        >>> y, rstd = rms_norm_forward(np.array([[3.0, 4.0]], np.float32), None, 1e-6)
        >>> np.round(y.astype(float), 4).tolist(), np.round(rstd.astype(float), 4).tolist()
        ([[0.8485, 1.1314]], [0.2828])
    """
    name, m, n, x2, _, weight = norm_rows(OP, x, weight)
    eps = check_eps(eps, OP)
    y = rows.empty_like(x)
    rstd = rows.empty(x, tuple(x.shape[:-1]), rows.stats_dtype(name))
    if n == 0:
        replay.host_work()
        rstd[...] = eps ** -0.5        # the mean of no squares: 0
    elif m:
        rows.launch(rows.plan_for(x, name, n), rms_norm_registers, rms_norm_loop,
                    y.reshape(m, n), rstd.reshape(m), x2, x2 if weight is None else weight,
                    as_scalar(eps, name), as_scalar(1 / n, name), weight is not None,
                    params=() if weight is None else (weight,))
    return y, rstd


@replay.replayed
def rms_norm_backward(dy, x, weight, rstd):
    """(dx, dweight): the gradients of rms_norm_forward from the output's
    gradient `dy`, its `x`, `weight` and the `rstd` it returned:
    dx = rstd * (g - xhat * mean(g * xhat)) with xhat = x * rstd, g = dy * weight;
    dweight = the sum over rows of dy * xhat in weight's dtype (None when
    weight is None).

        >>> import numpy as np
        >>> x = np.array([[3.0, 4.0]], np.float32)
        >>> y, rstd = rms_norm_forward(x, None, 1e-6)
        >>> dx, dw = rms_norm_backward(np.array([[1.0, 0.0]], np.float32), x, None, rstd)
        >>> np.round(dx.astype(float), 4).tolist(), dw
        ([[0.181, -0.1358]], None)
    """
    op = "rms_norm_backward"
    name, m, n, x2, dy2, weight = norm_rows(op, x, weight, dy)
    rstd1 = check_stat(rstd, "rstd", x, name, op)
    dx = rows.empty_like(x)
    if m == 0 or n == 0:
        dw = None if weight is None else rows.empty(x, (n,), rows.dtype_name(weight, "", op))
        if dw is not None:
            replay.host_work()
            dw[...] = 0
        return dx, dw
    p, keep = rows.backward_plan(x, name, n, FRAGMENTS, weight)
    dx2, w = dx.reshape(m, n), x2 if weight is None else weight
    if p.kernel == "loop":              # rows too long for registers: two kernels over slabs
        work, slabs, used = rows.slab_plan(p, x, m, n, FRAGMENTS)
        sums = rows.empty(x, (m, slabs), rows.stats_dtype(name))
        rows.run(p, rms_norm_backward_sums, m * slabs, work[2], sums, dy2, x2, w,
                 weight is not None, work)
        part = dx2 if weight is None else rows.empty(x, (used, n), rows.stats_dtype(name))
        rows.run(p, rms_norm_backward_slabs, used * slabs, work[2], dx2, part, dy2, x2, w, rstd1,
                 sums, as_scalar(1 / n, name), weight is not None, work)
    else:
        staged = rows.staged(p, x, 2)
        count = rows.group_count(p, x, m, FRAGMENTS - keep, 2 * staged,
                                 rows.kept_bytes(p, (weight,)) if keep else 0)
        part = dx2 if weight is None else rows.empty(x, (count, n), rows.stats_dtype(name))
        used = rows.launch_groups(p, rms_norm_backward_registers, count, dx2, part, dy2, x2, w,
                                  rstd1, as_scalar(1 / n, name), weight is not None,
                                  staged=staged, tail=(keep,))
    if weight is None:
        return dx, None
    return dx, rows.sum_columns(part[:used], rows.dtype_name(weight, "weight", op))


def rms_norm(x, weight, eps=1e-6):
    """RMSNorm of `x` over its last dimension: x / sqrt(mean(x^2) + eps) *
    weight, in x's dtype (float32 math inside; float64 for float64).
    torch: `torch.nn.functional.rms_norm(x, (N,), weight, eps)`.

        >>> import numpy as np
        >>> y = rms_norm(np.array([[3.0, 4.0]], np.float32), np.array([1.0, 2.0], np.float32))
        >>> np.round(y.astype(float), 4).tolist()
        [[0.8485, 2.2627]]
    """
    return rms_norm_forward(x, weight, eps)[0]

"""Softmax along one dimension, forward and backward, as moye kernels.

Forward: y = exp(x - max(x)) / sum(exp(x - max(x))), computed as
exp2((x - max) * log2(e)) in float32 (float64 for float64 data) and stored
in the input's type. Backward: dx = y * (dy - sum(dy * y)).

Two kernels each, on row_kernels' skeleton (rows.Plan says which):
- "registers": the row is loaded once into registers (16-byte chunks), its
  max and sum reduced over the row's threads (warp lanes, the block or the
  cluster), then written;
- "loop": any N, one block per row. Forward: one pass for the row's
  log-sum-exp (loop_logsumexp: the online softmax), a second writes
  exp(x - lse). Backward: a pass for sum(dy * y), a second for dx.
"""
from ..array import make_fragment_like
from ..compiler import Constexpr, kernel
from ..device import block_idx, block_reduce, cast, exp2, thread_idx
from ..layout import Layout, size

from . import replay, rows
from .row_kernels import (LOG2E, fragment, fragment_max, load_chunk, load_group,
                          loop_logsumexp, math_type, max_sumexp, row_groups, row_merge,
                          store_chunk, store_row, sums)

# -- kernels ---------------------------------------------------------------------------------

@kernel(fast_math=True)
def softmax_registers(y, x, WORK: Constexpr, STAGED: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    first, count, step, t, nt, ring, bars = row_groups((x,), WORK, STAGED, STAGED)
    r = fragment(WORK, math_type(x.dtype))
    nth = 0
    for g in range(first, count, step):
        row, mine = load_group((r,), ring, (x,), g, count, step, t, nt, -float("inf"), WORK)
        m = fragment_max(r)
        s = cast(0.0, r.dtype)
        for k in range(CHUNKS):
            for e in range(VEC):
                p = exp2((r[e, k] - m) * LOG2E)
                r[e, k] = p
                s = s + p
        big, total = row_merge((m, s), max_sumexp, nth, TPR, CLUSTER, THREADS, bars)
        scale = exp2((m - big) * LOG2E) / total        # this thread's exp(x - m) to y
        for k in range(CHUNKS):
            for e in range(VEC):
                r[e, k] = r[e, k] * scale
        if mine:
            store_row(y[row, None], r, t, nt, size(x, 1))
        nth = nth + 1


@kernel(fast_math=True)
def softmax_loop(y, x, VEC: Constexpr, THREADS: Constexpr):
    gx = x[block_idx.x, None]
    gy = y[block_idx.x, None]
    r = make_fragment_like(Layout((VEC, 1)), math_type(x.dtype))
    m, l = loop_logsumexp(gx, r, THREADS)
    for c in range(thread_idx.x, size(x, 1) // VEC, THREADS):
        load_chunk(r, 0, gx, c)
        for e in range(VEC):
            r[e, 0] = exp2((r[e, 0] - m - l) * LOG2E)
        store_chunk(gy, c, r, 0)


@kernel(fast_math=True)
def softmax_backward_registers(dx, y, dy, WORK: Constexpr, STAGED: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    first, count, step, t, nt, ring, bars = row_groups((y, dy), WORK, STAGED, STAGED)
    ry = fragment(WORK, math_type(y.dtype))
    rdy = fragment(WORK, ry.dtype)
    nth = 0
    for g in range(first, count, step):
        row, mine = load_group((ry, rdy), ring, (y, dy), g, count, step, t, nt, 0.0, WORK)
        d = cast(0.0, ry.dtype)
        for k in range(CHUNKS):
            for e in range(VEC):
                d = d + ry[e, k] * rdy[e, k]
        d = row_merge((d,), sums, nth, TPR, CLUSTER, THREADS, bars)[0]
        for k in range(CHUNKS):
            for e in range(VEC):
                ry[e, k] = ry[e, k] * (rdy[e, k] - d)
        if mine:
            store_row(dx[row, None], ry, t, nt, size(y, 1))
        nth = nth + 1


@kernel(fast_math=True)
def softmax_backward_loop(dx, y, dy, VEC: Constexpr, THREADS: Constexpr):
    n = size(y, 1)
    gy = y[block_idx.x, None]
    gdy = dy[block_idx.x, None]
    gdx = dx[block_idx.x, None]
    ry = make_fragment_like(Layout((VEC, 1)), math_type(y.dtype))
    rdy = make_fragment_like(Layout((VEC, 1)), math_type(y.dtype))
    d = cast(0.0, ry.dtype)            # typed: the loop carries it in the math type
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(ry, 0, gy, c)
        load_chunk(rdy, 0, gdy, c)
        for e in range(VEC):
            d = d + ry[e, 0] * rdy[e, 0]
    d = block_reduce(d, "sum")
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(ry, 0, gy, c)
        load_chunk(rdy, 0, gdy, c)
        for e in range(VEC):
            ry[e, 0] = ry[e, 0] * (rdy[e, 0] - d)
        store_chunk(gdx, c, ry, 0)


# -- the ops ---------------------------------------------------------------------------------

@replay.replayed
def softmax(x, dim=-1):
    """The raw softmax of `x` along `dim` (moye.ops.softmax without the
    torch custom op: no autograd): float32, float16, bfloat16 or float64 in,
    the same type out, float32 math inside (float64 for float64).

        >>> import numpy as np
        >>> y = softmax(np.array([[0.0, 1.0, 2.0]], np.float32))
        >>> np.round(y.astype(float), 4).tolist()
        [[0.09, 0.2447, 0.6652]]
    """
    return rows.map_rows("softmax", softmax_registers, softmax_loop, dim, x=x)


@replay.replayed
def softmax_backward(y, dy, dim=-1):
    """The raw gradient of softmax (moye.ops.softmax_backward's kernels):
    dx = y * (dy - sum(dy * y)) along `dim`, from the forward's output `y`
    and the output's gradient `dy` (same shape and type).

        >>> import numpy as np
        >>> y = softmax(np.array([[0.0, 1.0, 2.0]], np.float32))
        >>> dx = softmax_backward(y, np.array([[1.0, 0.0, 0.0]], np.float32))
        >>> np.round(dx.astype(float), 4).tolist()
        [[0.0819, -0.022, -0.0599]]
    """
    return rows.map_rows("softmax_backward", softmax_backward_registers, softmax_backward_loop, dim,
                         y=y, dy=dy)

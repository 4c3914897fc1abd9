"""Log-softmax along one dimension, forward and backward, as moye kernels.

Forward: y = (x - max) - log(sum(exp(x - max))), computed with exp2 and
log2 (log2(e) and ln(2) factors) in float32 (float64 for float64
data) and stored in the input's type. Backward: dx = dy - exp(y) * sum(dy).

Two kernels each, on row_kernels' skeleton (rows.Plan says which):
- "registers": the row is loaded once into registers, its log-sum-exp
  reduced over the row's threads (row_kernels.row_logsumexp), then written;
- "loop": any N, one block per row. Forward: one pass for the log-sum-exp
  (the online form, row_kernels.loop_logsumexp), a second that writes.
  Backward: a pass for sum(dy), a second for dx.
"""
from ..array import make_fragment_like
from ..compiler import Constexpr, kernel
from ..device import block_idx, block_reduce, cast, exp2, thread_idx
from ..layout import Layout, size

from . import replay, rows
from .row_kernels import (LOG2E, fragment, load_chunk, load_group, loop_logsumexp,
                          math_type, row_groups, row_logsumexp, row_merge, store_chunk, store_row,
                          sums)


# -- kernels ---------------------------------------------------------------------------------

@kernel(fast_math=True)
def log_softmax_registers(y, x, WORK: Constexpr, STAGED: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    first, count, step, t, nt, ring, bars = row_groups((x,), WORK, STAGED, STAGED)
    r = fragment(WORK, math_type(x.dtype))
    nth = 0
    for g in range(first, count, step):
        row, mine = load_group((r,), ring, (x,), g, count, step, t, nt, -float("inf"), WORK)
        m, l = row_logsumexp(r, nth, TPR, CLUSTER, THREADS, bars)
        for k in range(CHUNKS):
            for e in range(VEC):
                r[e, k] = r[e, k] - m - l
        if mine:
            store_row(y[row, None], r, t, nt, size(x, 1))
        nth = nth + 1


@kernel(fast_math=True)
def log_softmax_loop(y, x, VEC: Constexpr, THREADS: Constexpr):
    n = size(x, 1)
    gx = x[block_idx.x, None]
    gy = y[block_idx.x, None]
    r = make_fragment_like(Layout((VEC, 1)), math_type(x.dtype))
    m, l = loop_logsumexp(gx, r, THREADS)
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(r, 0, gx, c)
        for e in range(VEC):
            r[e, 0] = r[e, 0] - m - l
        store_chunk(gy, c, r, 0)


@kernel(fast_math=True)
def log_softmax_backward_registers(dx, y, dy, WORK: Constexpr, STAGED: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    first, count, step, t, nt, ring, bars = row_groups((y, dy), WORK, STAGED, STAGED)
    ry = fragment(WORK, math_type(y.dtype))
    rdy = fragment(WORK, ry.dtype)
    nth = 0
    for g in range(first, count, step):
        row, mine = load_group((ry, rdy), ring, (y, dy), g, count, step, t, nt, 0.0, WORK)
        s = cast(0.0, ry.dtype)
        for k in range(CHUNKS):
            for e in range(VEC):
                s = s + rdy[e, k]
        s = row_merge((s,), sums, nth, TPR, CLUSTER, THREADS, bars)[0]
        for k in range(CHUNKS):
            for e in range(VEC):
                ry[e, k] = rdy[e, k] - exp2(ry[e, k] * LOG2E) * s
        if mine:
            store_row(dx[row, None], ry, t, nt, size(y, 1))
        nth = nth + 1


@kernel(fast_math=True)
def log_softmax_backward_loop(dx, y, dy, VEC: Constexpr, THREADS: Constexpr):
    n = size(y, 1)
    gy = y[block_idx.x, None]
    gdy = dy[block_idx.x, None]
    gdx = dx[block_idx.x, None]
    ry = make_fragment_like(Layout((VEC, 1)), math_type(y.dtype))
    rdy = make_fragment_like(Layout((VEC, 1)), math_type(y.dtype))
    s = cast(0.0, ry.dtype)            # typed: the loop carries it in the math type
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(rdy, 0, gdy, c)
        for e in range(VEC):
            s = s + rdy[e, 0]
    s = block_reduce(s, "sum")
    for c in range(thread_idx.x, n // VEC, THREADS):
        load_chunk(ry, 0, gy, c)
        load_chunk(rdy, 0, gdy, c)
        for e in range(VEC):
            ry[e, 0] = rdy[e, 0] - exp2(ry[e, 0] * LOG2E) * s
        store_chunk(gdx, c, ry, 0)


# -- the ops ---------------------------------------------------------------------------------

@replay.replayed
def log_softmax(x, dim=-1):
    """Log-softmax of `x` along `dim`: x - log(sum(exp(x))), float32, float16,
    bfloat16 or float64 in, the same type out, float32 math inside (float64
    for float64). torch: `torch.log_softmax(x, dim)`.

        >>> import numpy as np
        >>> y = log_softmax(np.array([[0.0, 1.0, 2.0]], np.float32))
        >>> np.round(y.astype(float), 4).tolist()
        [[-2.4076, -1.4076, -0.4076]]
    """
    return rows.map_rows("log_softmax", log_softmax_registers, log_softmax_loop, dim, x=x)


@replay.replayed
def log_softmax_backward(y, dy, dim=-1):
    """The gradient of log_softmax: dx = dy - exp(y) * sum(dy) along `dim`,
    from the forward's output `y` and the output's gradient `dy` (same shape
    and type). torch: `torch._log_softmax_backward_data(dy, y, dim, y.dtype)`.

        >>> import numpy as np
        >>> y = log_softmax(np.array([[0.0, 1.0, 2.0]], np.float32))
        >>> dx = log_softmax_backward(y, np.array([[1.0, 0.0, 0.0]], np.float32))
        >>> np.round(dx.astype(float), 4).tolist()
        [[0.91, -0.2447, -0.6652]]
    """
    return rows.map_rows("log_softmax_backward", log_softmax_backward_registers,
                         log_softmax_backward_loop, dim, y=y, dy=dy)

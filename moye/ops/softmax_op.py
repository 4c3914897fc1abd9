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
from ..device import block_idx, block_reduce, cast, exp2, maximum, thread_idx
from ..errors import MoyeTypeError, ShapeError
from ..layout import Layout, size

from . import rows
from .row_kernels import (LOG2E, load_chunk, loop_logsumexp, lowest, math_type, my_row, owns_row,
                          row_fragment, row_max_sumexp, row_reduce, store_chunk, store_row)

# -- kernels ---------------------------------------------------------------------------------

@kernel(fast_math=True)
def softmax_registers(y, x, WORK: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    m_rows, n = size(x, 0), size(x, 1)
    row, t, nt, r = my_row(x, -float("inf"), WORK)
    m = cast(lowest(r.dtype), r.dtype)
    for k in range(CHUNKS):
        for e in range(VEC):
            m = maximum(m, r[e, k])
    s = cast(0.0, r.dtype)
    for k in range(CHUNKS):
        for e in range(VEC):
            p = exp2((r[e, k] - m) * LOG2E)
            r[e, k] = p
            s = s + p
    big, total = row_max_sumexp(m, s, TPR, CLUSTER)
    scale = exp2((m - big) * LOG2E) / total        # this thread's exp(x - m) to y
    for k in range(CHUNKS):
        for e in range(VEC):
            r[e, k] = r[e, k] * scale
    if owns_row(ROWS, TPR, m_rows):
        store_row(y[row, None], r, t, nt, n)


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
def softmax_backward_registers(dx, y, dy, WORK: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    m_rows, n = size(y, 0), size(y, 1)
    row, t, nt, ry = my_row(y, 0.0, WORK)
    rdy = row_fragment(dy, row, t, nt, 0.0, WORK)
    d = cast(0.0, ry.dtype)
    for k in range(CHUNKS):
        for e in range(VEC):
            d = d + ry[e, k] * rdy[e, k]
    d = row_reduce(d, "sum", TPR, CLUSTER)
    for k in range(CHUNKS):
        for e in range(VEC):
            ry[e, k] = ry[e, k] * (rdy[e, k] - d)
    if owns_row(ROWS, TPR, m_rows):
        store_row(dx[row, None], ry, t, nt, n)


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

def softmax(x, dim=-1):
    """The raw softmax of `x` along `dim` (moye.ops.softmax without the
    torch custom op: no autograd): float32, float16, bfloat16 or float64 in,
    the same type out, float32 math inside (float64 for float64).

        >>> import numpy as np
        >>> y = softmax(np.array([[0.0, 1.0, 2.0]], np.float32))
        >>> np.round(y.astype(float), 4).tolist()
        [[0.09, 0.2447, 0.6652]]
    """
    name = rows.dtype_name(x, "x", "softmax")
    d = rows.check_dim(x, dim, "x", "softmax")
    nd = x.dim() if rows.is_torch(x) else x.ndim
    xl = rows.to_last(x, d)
    x2, m, n = rows.as_rows(xl, "x", "softmax")
    y = rows.empty_like(xl)
    if n:
        rows.launch(rows.plan_for(x, name, n), softmax_registers, softmax_loop, y.reshape(m, n),
                    x2)
    return rows.from_last(y, d, nd)


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
    name = rows.dtype_name(y, "y", "softmax_backward")
    name_dy = rows.dtype_name(dy, "dy", "softmax_backward")
    if name_dy != name:
        raise MoyeTypeError(f"softmax_backward: dy is {name_dy} but y is {name}; they must "
                                 "have the same dtype")
    if tuple(dy.shape) != tuple(y.shape):
        raise ShapeError(f"softmax_backward: dy has shape {tuple(dy.shape)} but y has "
                              f"{tuple(y.shape)}; they must match")
    if rows.is_torch(y) != rows.is_torch(dy) or rows.backend_of(y) != rows.backend_of(dy):
        raise MoyeTypeError("softmax_backward: y and dy must be on the same device "
                                 "(both NumPy, both CPU tensors or both CUDA tensors)")
    d = rows.check_dim(y, dim, "y", "softmax_backward")
    nd = y.dim() if rows.is_torch(y) else y.ndim
    yl, dyl = rows.to_last(y, d), rows.to_last(dy, d)
    y2, m, n = rows.as_rows(yl, "y", "softmax_backward")
    dy2, _, _ = rows.as_rows(dyl, "dy", "softmax_backward")
    dx = rows.empty_like(yl)
    if n:
        rows.launch(rows.plan_for(y, name, n), softmax_backward_registers, softmax_backward_loop,
                    dx.reshape(m, n), y2, dy2)
    return rows.from_last(dx, d, nd)

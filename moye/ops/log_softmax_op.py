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
from ..errors import MoyeTypeError, ShapeError
from ..layout import Layout, size

from . import rows
from .row_kernels import (LOG2E, load_chunk, loop_logsumexp, math_type, my_row, owns_row,
                          row_fragment, row_logsumexp, row_reduce, store_chunk, store_row)


# -- kernels ---------------------------------------------------------------------------------

@kernel(fast_math=True)
def log_softmax_registers(y, x, WORK: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    m_rows, n = size(x, 0), size(x, 1)
    row, t, nt, r = my_row(x, -float("inf"), WORK)
    m, l = row_logsumexp(r, TPR, CLUSTER)
    for k in range(CHUNKS):
        for e in range(VEC):
            r[e, k] = r[e, k] - m - l
    if owns_row(ROWS, TPR, m_rows):
        store_row(y[row, None], r, t, nt, n)


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
def log_softmax_backward_registers(dx, y, dy, WORK: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    m_rows, n = size(y, 0), size(y, 1)
    row, t, nt, ry = my_row(y, 0.0, WORK)
    rdy = row_fragment(dy, row, t, nt, 0.0, WORK)
    s = cast(0.0, ry.dtype)
    for k in range(CHUNKS):
        for e in range(VEC):
            s = s + rdy[e, k]
    s = row_reduce(s, "sum", TPR, CLUSTER)
    for k in range(CHUNKS):
        for e in range(VEC):
            ry[e, k] = rdy[e, k] - exp2(ry[e, k] * LOG2E) * s
    if owns_row(ROWS, TPR, m_rows):
        store_row(dx[row, None], ry, t, nt, n)


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

def log_softmax(x, dim=-1):
    """Log-softmax of `x` along `dim`: x - log(sum(exp(x))), float32, float16,
    bfloat16 or float64 in, the same type out, float32 math inside (float64
    for float64). torch: `torch.log_softmax(x, dim)`.

        >>> import numpy as np
        >>> y = log_softmax(np.array([[0.0, 1.0, 2.0]], np.float32))
        >>> np.round(y.astype(float), 4).tolist()
        [[-2.4076, -1.4076, -0.4076]]
    """
    name = rows.dtype_name(x, "x", "log_softmax")
    d = rows.check_dim(x, dim, "x", "log_softmax")
    nd = x.dim() if rows.is_torch(x) else x.ndim
    xl = rows.to_last(x, d)
    x2, m, n = rows.as_rows(xl, "x", "log_softmax")
    y = rows.empty_like(xl)
    if n:
        rows.launch(rows.plan_for(x, name, n), log_softmax_registers, log_softmax_loop,
                    y.reshape(m, n), x2)
    return rows.from_last(y, d, nd)


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
    op = "log_softmax_backward"
    name = rows.dtype_name(y, "y", op)
    name_dy = rows.dtype_name(dy, "dy", op)
    if name_dy != name:
        raise MoyeTypeError(f"{op}: dy is {name_dy} but y is {name}; they must have the same "
                            "dtype")
    if tuple(dy.shape) != tuple(y.shape):
        raise ShapeError(f"{op}: dy has shape {tuple(dy.shape)} but y has {tuple(y.shape)}; "
                         "they must match")
    if rows.is_torch(y) != rows.is_torch(dy) or rows.backend_of(y) != rows.backend_of(dy):
        raise MoyeTypeError(f"{op}: y and dy must be on the same device (both NumPy, both CPU "
                            "tensors or both CUDA tensors)")
    d = rows.check_dim(y, dim, "y", op)
    nd = y.dim() if rows.is_torch(y) else y.ndim
    yl, dyl = rows.to_last(y, d), rows.to_last(dy, d)
    y2, m, n = rows.as_rows(yl, "y", op)
    dy2, _, _ = rows.as_rows(dyl, "dy", op)
    dx = rows.empty_like(yl)
    if n:
        rows.launch(rows.plan_for(y, name, n), log_softmax_backward_registers,
                    log_softmax_backward_loop, dx.reshape(m, n), y2, dy2)
    return rows.from_last(dx, d, nd)

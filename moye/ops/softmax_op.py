"""Softmax along one dimension, forward and backward, as moye kernels.

Forward: y = exp(x - max(x)) / sum(exp(x - max(x))), computed as
exp2((x - max) * log2(e)) in float32 and stored in the input's type.
Backward: dx = y * (dy - sum(dy * y)).

Two kernels each (rows.Plan says which):
- "registers": one block per row, or one warp per row for short rows
  (several rows per block); the row is loaded once into registers
  (`chunks` chunks of `vec` elements per thread, the tail predicated), the
  max and the sum by `block_reduce` (`warp_reduce`), then written;
- "general": any N. Forward: one pass keeps each thread's running max and
  sum (the sum rescaled when the max grows: the online softmax), the block
  combines them, and a second pass writes; backward: a pass for sum(dy * y),
  a second for dx.
"""
from ..array import make_fragment_like
from ..compiler import Constexpr, kernel
from ..device import (block_idx, block_reduce, cast, exp2, lane_idx, maximum, thread_idx,
                      warp_idx, warp_reduce)
from ..errors import MoyeTypeError, ShapeError
from ..layout import Layout, size
from ..types import Float32

from . import rows

LOG2E = 1.4426950408889634
LOWEST = -3.4028234663852886e38          # the lowest float32: max's identity, finite


# -- kernels ---------------------------------------------------------------------------------

def _row_of(ROWS, THREADS):
    """(row, thread in the row, threads per row, the reduction) of this
    thread: one block of THREADS per row (ROWS == 1, block_reduce), or one
    warp per row, ROWS rows per block (warp_reduce)."""
    if ROWS == 1:
        return block_idx.x, thread_idx.x, THREADS, block_reduce
    return block_idx.x * ROWS + warp_idx(), lane_idx(), 32, warp_reduce


@kernel
def softmax_registers(y, x, VEC: Constexpr, CHUNKS: Constexpr, ROWS: Constexpr,
                      THREADS: Constexpr):
    row, t, nt, reduce = _row_of(ROWS, THREADS)
    n = size(x, 1)

    def body():
        gx = x[row, None]
        gy = y[row, None]
        r = make_fragment_like(Layout((VEC, CHUNKS)), Float32)
        m = LOWEST
        for k in range(CHUNKS):
            c0 = (k * nt + t) * VEC
            for e in range(VEC):
                v = -float("inf")
                if c0 + e < n:
                    v = cast(gx[c0 + e], Float32)
                r[e, k] = v
                m = maximum(m, v)
        m = reduce(m, "max")
        s = 0.0
        for k in range(CHUNKS):
            for e in range(VEC):
                p = exp2((r[e, k] - m) * LOG2E)
                r[e, k] = p
                s = s + p
        s = reduce(s, "sum")
        inv = 1.0 / s
        for k in range(CHUNKS):
            c0 = (k * nt + t) * VEC
            for e in range(VEC):
                if c0 + e < n:
                    gy[c0 + e] = cast(r[e, k] * inv, gy.dtype)

    if ROWS == 1:
        body()
    else:
        if row < size(x, 0):           # the whole warp takes the same branch
            body()


@kernel
def softmax_general(y, x, THREADS: Constexpr):
    row = block_idx.x
    t = thread_idx.x
    nt = THREADS                       # static: the loops' step is a constant
    n = size(x, 1)
    gx = x[row, None]
    gy = y[row, None]
    m = LOWEST
    s = 0.0
    for c in range(t, n, nt):
        v = cast(gx[c], Float32)
        m_new = maximum(m, v)
        s = s * exp2((m - m_new) * LOG2E) + exp2((v - m_new) * LOG2E)
        m = m_new
    mb = block_reduce(m, "max")
    sb = block_reduce(s * exp2((m - mb) * LOG2E), "sum")
    inv = 1.0 / sb
    for c in range(t, n, nt):
        v = cast(gx[c], Float32)
        gy[c] = cast(exp2((v - mb) * LOG2E) * inv, gy.dtype)


@kernel
def softmax_backward_registers(dx, y, dy, VEC: Constexpr, CHUNKS: Constexpr, ROWS: Constexpr,
                               THREADS: Constexpr):
    row, t, nt, reduce = _row_of(ROWS, THREADS)
    n = size(y, 1)

    def body():
        gy = y[row, None]
        gdy = dy[row, None]
        gdx = dx[row, None]
        ry = make_fragment_like(Layout((VEC, CHUNKS)), Float32)
        rdy = make_fragment_like(Layout((VEC, CHUNKS)), Float32)
        d = 0.0
        for k in range(CHUNKS):
            c0 = (k * nt + t) * VEC
            for e in range(VEC):
                a = 0.0
                b = 0.0
                if c0 + e < n:
                    a = cast(gy[c0 + e], Float32)
                    b = cast(gdy[c0 + e], Float32)
                ry[e, k] = a
                rdy[e, k] = b
                d = d + a * b
        d = reduce(d, "sum")
        for k in range(CHUNKS):
            c0 = (k * nt + t) * VEC
            for e in range(VEC):
                if c0 + e < n:
                    gdx[c0 + e] = cast(ry[e, k] * (rdy[e, k] - d), gdx.dtype)

    if ROWS == 1:
        body()
    else:
        if row < size(y, 0):           # the whole warp takes the same branch
            body()


@kernel
def softmax_backward_general(dx, y, dy, THREADS: Constexpr):
    row = block_idx.x
    t = thread_idx.x
    nt = THREADS                       # static: the loops' step is a constant
    n = size(y, 1)
    gy = y[row, None]
    gdy = dy[row, None]
    gdx = dx[row, None]
    d = 0.0
    for c in range(t, n, nt):
        d = d + cast(gy[c], Float32) * cast(gdy[c], Float32)
    d = block_reduce(d, "sum")
    for c in range(t, n, nt):
        a = cast(gy[c], Float32)
        gdx[c] = cast(a * (cast(gdy[c], Float32) - d), gdx.dtype)


# -- the ops ---------------------------------------------------------------------------------

def _launch(p, registers, general, out, *ins):
    m = out.shape[0]
    if m == 0:
        return
    if p.kernel == "registers":
        grid = -(-m // p.rows)
        registers[grid, p.threads](out, *ins, p.vec, p.chunks, p.rows, p.threads,
                                   backend=p.backend)
    else:
        general[m, p.threads](out, *ins, p.threads, backend=p.backend)


def softmax(x, dim=-1, *, register_elements=rows.REGISTER_ELEMENTS):
    """Softmax of `x` along `dim`: float32, float16 or bfloat16 in, the same
    type out, float32 math inside. torch: `torch.softmax(x, dim)`.
    `register_elements` caps the elements one thread keeps in registers
    (rows longer than threads x that take the two-pass kernel).

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
        p = rows.plan(name, n, rows.backend_of(x), register_elements)
        _launch(p, softmax_registers, softmax_general, y.reshape(m, n), x2)
    return rows.from_last(y, d, nd)


def softmax_backward(y, dy, dim=-1, *, register_elements=rows.REGISTER_ELEMENTS):
    """The gradient of softmax: dx = y * (dy - sum(dy * y)) along `dim`, from
    the forward's output `y` and the output's gradient `dy` (same shape and
    type). torch: `torch._softmax_backward_data(dy, y, dim, y.dtype)`.

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
        p = rows.plan(name, n, rows.backend_of(y), register_elements)
        _launch(p, softmax_backward_registers, softmax_backward_general, dx.reshape(m, n), y2, dy2)
    return rows.from_last(dx, d, nd)

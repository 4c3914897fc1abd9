"""Whole-array operations: copies, fills, fragments, recasts and
element-wise arithmetic. Each goes through the engine's read/write, so it
is one vectorized gather/scatter on the host."""
import numpy as np

from ..errors import MoyeError, ShapeError
from ..layout import Layout, make_fragment_like as _fragment_layout, recast_layout
from ..layout import inttuple as T
from ..layout import transpose as _transpose_layout
from ..types import as_element_type
from .array import MoYeArray


def _mode_sizes(shape):
    sizes = list(T.product_each(shape)) if type(shape) is tuple else [shape]
    while len(sizes) > 1 and type(sizes[-1]) is int and sizes[-1] == 1:
        sizes.pop()
    return tuple(sizes)


def _congruent_sizes(a, b):
    """Mode sizes agree where both are known; a dynamic size matches anything."""
    if len(a) != len(b):
        return False
    return all(x == y for x, y in zip(a, b) if type(x) is int and type(y) is int)


def copyto(dst, src):
    """Copy `src` into `dst` element by element in logical (colex) order;
    `src` may also be a scalar. Their mode sizes must agree (trailing
    size-1 modes aside). MoYe: copyto!; CuTe: copy.
        >>> dst = MoYeArray.zeros(Int64, (2, 3))
        >>> _ = copyto(dst, MoYeArray(np.arange(6), Layout((2, 3), (3, 1))))
        >>> dst.numpy().tolist()
        [[0, 1, 2], [3, 4, 5]]
    """
    if not isinstance(dst, MoYeArray):
        raise TypeError(f"copyto: dst must be a MoYeArray, got {type(dst).__name__}")
    if isinstance(src, MoYeArray):
        if not _congruent_sizes(_mode_sizes(dst.shape), _mode_sizes(src.shape)):
            raise ShapeError(f"copyto: dst has shape {T.fmt(dst.shape)} but src has shape "
                            f"{T.fmt(src.shape)}; they must be congruent")
        copy = getattr(dst.engine, "copy_from", None)
        if copy is not None and copy(dst.layout, src.engine, src.layout):
            return dst
        values = src.engine.read(src.layout)
    else:
        values = src
        if isinstance(src, np.ndarray) and src.ndim > 0 and src.size != dst.size:
            raise ShapeError(f"copyto: dst has shape {T.fmt(dst.shape)} ({dst.size} elements) but "
                            f"the NumPy array has shape {src.shape}")
        if isinstance(src, np.ndarray) and src.ndim > 1:
            values = src.reshape(-1, order="F")      # logical (colexicographic) order
    dst.engine.write(dst.layout, values)
    return dst


def fill_(a, value):
    """Set every element of `a` to `value`. MoYe: fill!; CuTe: fill."""
    a.engine.write(a.layout, value)
    return a


def zeros_(a):
    """Set every element of `a` to zero. MoYe: zeros!; CuTe: clear."""
    return fill_(a, 0)


def make_fragment_like(a, dtype=None):
    """A new compact array shaped like `a` (or a layout/shape), in `a`'s
    stride order with mode 0 column-major: a register fragment in kernels.
    Given a layout and no dtype, the fragment's layout. CuTe: make_fragment_like.
        >>> make_fragment_like(MoYeArray(np.zeros(8), Layout((2, 4), (4, 1)))).layout
        (2,4):(1,2)
    """
    if isinstance(a, MoYeArray):
        return MoYeArray.empty(a.dtype if dtype is None else dtype, _fragment_layout(a.layout))
    if dtype is None:
        return _fragment_layout(a)
    return MoYeArray.empty(dtype, _fragment_layout(a))


def recast(a, dtype):
    """The same memory seen as elements of `dtype` (e.g. Float32 as UInt128
    vectors of 4). CuTe: recast.
        >>> recast(MoYeArray(np.arange(8, dtype=np.float32), Layout(8)), UInt128).layout
        2:1
    """
    dtype = as_element_type(dtype)
    try:
        layout = recast_layout(a.layout, a.dtype, dtype)
    except MoyeError as e:
        raise MoyeError(f"recast: cannot see layout {a.layout} of {a.dtype} as {dtype}: {e}") \
            from None
    return MoYeArray.view_of(a.engine.recast(dtype), layout)


def transpose(a):
    """`a` with the two modes of its rank-2 layout swapped (a view)."""
    if isinstance(a, MoYeArray):
        return MoYeArray.view_of(a.engine, _transpose_layout(a.layout))
    return _transpose_layout(a)


def view(a, *coord):
    """The view of `a` at `coord`, with ``None`` (or ``:``) keeping a mode.
    MoYe: view."""
    return a[coord[0] if len(coord) == 1 else coord]


def _logical(x, rank):
    """x's values as a NumPy array for broadcasting: one axis per mode, padded
    with trailing size-1 axes to `rank` (MoYe's broadcasting aligns leading modes)."""
    if isinstance(x, MoYeArray):
        v = x.numpy()
        return v.reshape(v.shape + (1,) * (rank - v.ndim))
    return x


def _rank(x):
    return len(_mode_sizes_full(x.shape)) if isinstance(x, MoYeArray) else 0


def _mode_sizes_full(shape):
    return tuple(T.product_each(shape)) if type(shape) is tuple else (shape,)


def _result_layout(values_shape, operands):
    for x in operands:
        if isinstance(x, MoYeArray) and _mode_sizes_full(x.shape) == values_shape:
            shape, stride = x.layout.shape, getattr(x.layout, "stride", None)
            if stride is None:
                return Layout(shape)
            return Layout(shape, T.compact_order(shape, stride))
    return Layout(values_shape if len(values_shape) > 1 else values_shape[0])


def _compute(op, operands):
    rank = max(_rank(x) for x in operands)
    try:
        values = op(*(_logical(x, rank) for x in operands))
    except ValueError as e:
        shapes = ", ".join(T.fmt(x.shape) if isinstance(x, MoYeArray) else
                           f"{type(x).__name__} {np.shape(x)}" for x in operands)
        raise ShapeError(f"cannot broadcast arrays of shapes {shapes}: the modes must agree, "
                        f"or be 1, aligned from the first mode ({e})") from None
    return np.asarray(values)


def elementwise(op, *operands):
    """A new compact array of op applied element-wise, broadcasting arrays of
    lower rank along their missing trailing modes; its layout keeps the
    stride order of the first operand of the result's shape.
        >>> a = MoYeArray(np.arange(6.0), (2, 3))
        >>> (a * 2 - MoYeArray(np.array([1.0, 2.0]), 2)).numpy().tolist()
        [[-1.0, 3.0, 7.0], [0.0, 4.0, 8.0]]
    """
    values = _compute(op, operands)
    if values is None:
        return None
    if values.ndim == 0:
        return values[()]
    layout = _result_layout(values.shape, operands)
    out = MoYeArray.empty(_element_type(values, operands), layout)
    out.engine.write(layout, values.reshape(-1, order="F"))
    return out


def _element_type(values, operands):
    """The element type of computed values: NumPy's, or inside kernels (object
    arrays of symbolic values) the type the values carry."""
    if values.dtype != object:
        return values.dtype
    for v in values.flat:
        t = getattr(v, "type", None)
        if t is not None and hasattr(t, "bits"):
            return t
    for x in operands:
        if isinstance(x, MoYeArray):
            return x.dtype
    raise MoyeError("cannot tell the element type of the result")


def elementwise_into(dst, op, *operands):
    """dst[...] = op(operands...) element-wise, keeping dst's layout."""
    values = _compute(op, operands)
    dims = _mode_sizes_full(dst.shape)
    values = np.broadcast_to(values, dims) if values.shape != dims else values
    flat = values.reshape(-1, order="F")
    if flat.dtype != object:
        flat = flat.astype(dst.dtype.numpy, copy=False)
    dst.engine.write(dst.layout, flat)
    return dst

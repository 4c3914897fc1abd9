"""MoYeArray: an engine (where the elements live) seen through a layout.

    >>> a = MoYeArray(np.arange(1, 13), Layout((3, 4)))
    >>> print(a[1, 2], a[7], a[(1, 2)])
    8 8 8
    >>> a[1, :]
    4 MoYeArray{Int64} with layout (4):(3):
      2
      5
      8
     11
"""
import numpy as np

from ..errors import BoundsError, MoyeError
from ..layout import Layout, as_layout, cosize, slice_and_offset
from ..layout import inttuple as T
from ..layout.layout import norm_coord
from ..types import as_element_type
from .engine import HostEngine, allocate, image_bounds, mode_offsets


class MoYeArray:
    """An array: `data` (a NumPy array or list, used as linear memory without
    a copy, or an engine) seen through `layout` (a Layout or a shape). With
    no layout, a NumPy array keeps its own shape and strides.
        >>> MoYeArray(np.arange(6.0), (2, 3))
        2×3 MoYeArray{Float64} with layout (2,3):(1,2):
         0.0  2.0  4.0
         1.0  3.0  5.0
    """
    # `_inside`: None until an element is accessed, then True if the whole
    # image of the layout lies in the engine's memory (element accesses need
    # no further check) or False if it overhangs (each access is checked,
    # so a predicated copy may still use the elements inside).
    __slots__ = ("engine", "layout", "_inside")

    def __init__(self, data, layout=None):
        self._inside = None
        if hasattr(data, "offset_by") and hasattr(data, "read"):
            if layout is None:
                raise MoyeError("MoYeArray(engine, layout): an engine needs a layout")
            self.engine, self.layout = data, _as_layout(layout)
            return
        if isinstance(data, MoYeArray):
            self.engine = data.engine
            self.layout = data.layout if layout is None else _as_layout(layout)
            return
        array = np.asarray(data)
        if layout is None:
            self.engine, self.layout = _engine_with_strides(array)
            return
        layout = _as_layout(layout)
        self.engine, self.layout = HostEngine(_linear_buffer(array)), layout
        lo, hi = image_bounds(layout)
        n = len(self.engine.buffer)
        if lo < 0:
            raise BoundsError(f"MoYeArray: layout {layout} reaches offset {lo}, before the start "
                              f"of the buffer (a negative stride needs the array to start "
                              f"further in: pass the buffer from element {-lo} on)")
        if hi >= n:
            raise BoundsError(f"MoYeArray: layout {layout} reaches {hi + 1} elements but the "
                              f"buffer has only {n}")

    @classmethod
    def view_of(cls, engine, layout):
        """The array of `engine` seen through `layout` (checked when accessed)."""
        a = object.__new__(cls)
        a.engine, a.layout, a._inside = engine, layout, None
        return a

    # -- owning constructors ---------------------------------------------------
    @classmethod
    def empty(cls, dtype, layout):
        """A new host array of `dtype` over cosize(layout) uninitialized elements."""
        layout = _as_layout(layout)
        engine = allocate(dtype, cosize(layout))
        lo = _least_offset(layout)        # negative strides reach back from the start
        return cls.view_of(engine.offset_by(-lo) if lo else engine, layout)

    @classmethod
    def zeros(cls, dtype, layout):
        """A new host array of zeros.
            >>> MoYeArray.zeros(Float32, (2, 2))
            2×2 MoYeArray{Float32} with layout (2,2):(1,2):
             0.0  0.0
             0.0  0.0
        """
        a = cls.empty(dtype, layout)
        _whole(a).write(Layout(cosize(a.layout)), 0)
        return a

    @classmethod
    def fill(cls, value, layout, dtype=None):
        """A new host array holding `value` everywhere; with a zero-stride
        layout it stores a single element (MoYe's filled constructor).
            >>> a = MoYeArray.fill(1.5, Layout((3, 2), (0, 0)))
            >>> a.engine.buffer, a.numpy().tolist()
            (array([1.5]), [[1.5, 1.5], [1.5, 1.5], [1.5, 1.5]])
        """
        dtype = as_element_type(type(value) if dtype is None else dtype)
        a = cls.empty(dtype, layout)
        _whole(a).write(Layout(cosize(a.layout)), value)
        return a

    # -- queries -----------------------------------------------------------------
    @property
    def shape(self):
        return self.layout.shape

    @property
    def stride(self):
        return self.layout.stride

    @property
    def dtype(self):
        return self.engine.dtype

    @property
    def size(self):
        return T.product(self.layout.shape)

    @property
    def rank(self):
        return T.rank(self.layout.shape)

    def __len__(self):
        """The number of elements (arrays iterate over elements)."""
        n = self.size
        if type(n) is not int:
            raise MoyeError(f"len(): the array's size {n!r} is dynamic")
        return n

    def __iter__(self):
        return iter(self.engine.read(self.layout))

    # -- element access and views ------------------------------------------------
    def __getitem__(self, coord):
        if _plain(coord):
            return self.engine.load(self._offset(coord))
        coord = norm_coord(coord)
        if T.has_none(coord):
            _check_coord(coord, self.layout.shape)
            sub, offset = slice_and_offset(coord, self.layout)
            return MoYeArray.view_of(self.engine.offset_by(offset), sub)
        return self.engine.load(self._offset(coord))

    def __setitem__(self, coord, value):
        if _plain(coord):
            self.engine.store(self._offset(coord), value)
            return
        coord = norm_coord(coord)
        if T.has_none(coord):
            from .ops import copyto
            copyto(self[coord], value)
            return
        self.engine.store(self._offset(coord), value)

    def _offset(self, coord):
        """The offset of a coordinate, checked against the shape and, for a
        host array, against the buffer."""
        layout = self.layout
        offset = _listed_offset(layout, coord) if type(coord) is tuple and \
            type(layout) is Layout else None
        if offset is None:
            _check_coord(coord, layout.shape)
            offset = T.crd2idx(coord, layout.shape, layout.stride) if type(layout) is Layout \
                else layout(coord)
        if self._inside is not True:
            self._check_offset(coord, offset)
        return offset

    def _check_offset(self, coord, offset):
        """Learn once whether the whole image lies in the buffer; if it does
        not, check this one offset."""
        engine = self.engine
        if self._inside is None:
            self._inside = engine.space != "host" or engine.holds(*image_bounds(self.layout))
        if not self._inside and not engine.holds(offset, offset):
            raise BoundsError(f"coordinate {T.fmt(coord)} of an array of shape "
                              f"{T.fmt(self.layout.shape)} (layout {self.layout}) is element "
                              f"{engine.start + offset} of a buffer of {len(engine.buffer)} "
                              f"elements: the view overhangs its buffer")

    def __call__(self, *coord):
        """MoYe/CuTe spelling: a(i, j) is a[i, j]."""
        return self[coord[0] if len(coord) == 1 else coord]

    def numpy(self):
        """The logical array: one NumPy axis per mode (a copy).
            >>> MoYeArray(np.arange(6), Layout((2, 3), (3, 1))).numpy()
            array([[0, 1, 2],
                   [3, 4, 5]])
        """
        values = np.asarray(self.engine.read(self.layout))
        return values.reshape(_dims(self.layout.shape), order="F")

    def __array__(self, dtype=None, copy=None):
        values = self.numpy()
        return values if dtype is None else values.astype(dtype)

    # -- the algebra on arrays ------------------------------------------------------
    def __moye_through__(self, fn, *args):
        return MoYeArray.view_of(self.engine, fn(self.layout, *args))

    # -- printing ----------------------------------------------------------------------
    def __str__(self):
        return _format(self)

    __repr__ = __str__

    # -- arithmetic (element-wise, broadcasting like MoYe/Julia) ------------------------
    def _binary(self, other, op, reflected=False):
        from .ops import elementwise
        return elementwise(op, other, self) if reflected else elementwise(op, self, other)

    def __add__(self, o): return self._binary(o, np.add)
    def __radd__(self, o): return self._binary(o, np.add, True)
    def __sub__(self, o): return self._binary(o, np.subtract)
    def __rsub__(self, o): return self._binary(o, np.subtract, True)
    def __mul__(self, o): return self._binary(o, np.multiply)
    def __rmul__(self, o): return self._binary(o, np.multiply, True)
    def __truediv__(self, o): return self._binary(o, np.true_divide)
    def __rtruediv__(self, o): return self._binary(o, np.true_divide, True)
    def __floordiv__(self, o): return self._binary(o, np.floor_divide)
    def __mod__(self, o): return self._binary(o, np.mod)
    def __pow__(self, o): return self._binary(o, np.power)

    def __neg__(self):
        from .ops import elementwise
        return elementwise(np.negative, self)

    def __abs__(self):
        from .ops import elementwise
        return elementwise(np.abs, self)

    def _inplace(self, other, op):
        from .ops import elementwise_into
        elementwise_into(self, op, self, other)
        return self

    def __iadd__(self, o): return self._inplace(o, np.add)
    def __isub__(self, o): return self._inplace(o, np.subtract)
    def __imul__(self, o): return self._inplace(o, np.multiply)
    def __itruediv__(self, o): return self._inplace(o, np.true_divide)


def _as_layout(layout):
    if isinstance(layout, Layout) or hasattr(layout, "inner"):
        return layout
    return as_layout(layout, "MoYeArray layout")


def _whole(a):
    """The engine of a new array `a` from the start of its storage."""
    lo = _least_offset(a.layout)
    return a.engine.offset_by(lo) if lo else a.engine


def _least_offset(layout):
    """The least offset of a Layout (image_bounds'): 0 unless a stride is negative."""
    return image_bounds(layout)[0] if type(layout) is Layout else 0


def _linear_buffer(array):
    if array.ndim <= 1 and (array.ndim == 0 or array.strides[0] == array.itemsize
                            or array.size <= 1):
        return array.reshape(-1)
    if array.flags.c_contiguous:
        return array.reshape(-1, order="C")
    if array.flags.f_contiguous:
        return array.reshape(-1, order="F")
    raise MoyeError(f"MoYeArray: a layout needs linear memory, but this array of shape "
                    f"{array.shape} has strides {array.strides}; pass no layout to keep its "
                    "strides, or a contiguous copy")


def _engine_with_strides(array):
    """A host engine and the layout of NumPy's own shape and strides."""
    item = array.itemsize
    if any(s % item for s in array.strides) or any(s < 0 for s in array.strides):
        raise MoyeError(f"MoYeArray: strides {array.strides} of the NumPy array are negative "
                        f"or not multiples of its itemsize {item}")
    shape = tuple(int(n) for n in array.shape)
    stride = tuple(0 if n == 1 else s // item for n, s in zip(shape, array.strides))
    span = 1 + sum((n - 1) * d for n, d in zip(shape, stride)) if array.size else 0
    buffer = np.lib.stride_tricks.as_strided(array, shape=(span,), strides=(item,))
    if array.ndim == 0:
        return HostEngine(buffer), Layout(1, 0)
    if len(shape) == 1:
        return HostEngine(buffer), Layout(shape[0], stride[0])
    return HostEngine(buffer), Layout(shape, stride)


def _plain(coord):
    """An int, or a flat tuple of ints: the common element access."""
    t = type(coord)
    if t is int:
        return True
    if t is tuple:
        for c in coord:
            if type(c) is not int:
                return False
        return True
    return False


def _listed_offset(layout, coord):
    """The offset of `coord`, a tuple of ints one per mode, in a static
    Layout, summed from its modes' listed offsets (mode_offsets); None where
    that does not apply, or `coord` is out of bounds (_check_coord says why)."""
    modes = mode_offsets(layout)
    if not modes or len(modes) != len(coord):
        return None
    offset = 0
    for c, listed in zip(coord, modes):
        if type(c) is not int or not 0 <= c < len(listed):
            return None
        offset += listed[c]
    return offset


def _check_coord(coord, shape):
    _check_coord_mode(coord, shape, coord, shape)


def _check_coord_mode(c, s, coord, shape):
    if type(c) is tuple:
        if type(s) is not tuple or len(c) != len(s):
            raise BoundsError(f"coordinate {T.fmt(coord)} does not fit the array's shape "
                             f"{T.fmt(shape)}")
        for ci, si in zip(c, s):
            _check_coord_mode(ci, si, coord, shape)
        return
    n = T.product(s)
    if type(n) is not int:
        if type(c) is int and c < 0:        # below any run-time extent
            raise BoundsError(f"coordinate {T.fmt(coord)} of the array's shape {T.fmt(shape)} "
                              "is negative: coordinates do not count from the end, as Python's "
                              "indices do (write size(a, mode) - 1 for the last)")
        return
    if type(c) is int:
        if not 0 <= c < n:
            raise BoundsError(f"coordinate {T.fmt(coord)} is out of bounds for the array's "
                              f"shape {T.fmt(shape)}")
    elif _coordinate_checks and not isinstance(c, slice):
        for check in _coordinate_checks:
            check(c, n, lambda: f"coordinate {T.fmt(coord)} of the array's shape {T.fmt(shape)}")


_coordinate_checks = []


def on_dynamic_coordinate(check):
    """Register `check(c, extent, describe)`, called for every dynamic
    coordinate `c` of a mode with a static extent; `describe()` names it (the
    kernel tracer checks coordinates of unrolled loops, compiler/unrolled.py)."""
    _coordinate_checks.append(check)
    return check


def _dims(shape):
    if type(shape) is tuple:
        return tuple(T.product(s) for s in shape)
    return (shape,)


def _cell(v):
    if isinstance(v, (float, np.floating)) or type(v).__module__ == "ml_dtypes":
        f = float(v)
        s = f"{f:.6g}"
        return s + ".0" if s.lstrip("-").isdigit() else s
    if isinstance(v, (np.void, bytes)):
        return "0x" + bytes(v)[::-1].hex()
    return str(v)


def _format(a):
    dims = _dims(a.layout.shape)
    layout = getattr(a.engine, "format_layout", str)(a.layout)
    head = f"{'×'.join(str(d) for d in dims)} MoYeArray{{{a.dtype}}} with layout {layout}:"
    if a.engine.space not in ("host", "coordinate"):
        return f"{head[:-1]} in {a.engine.space} memory"
    try:
        values = a.numpy()
    except MoyeError:
        return head[:-1]
    cells = np.vectorize(_cell, otypes=[object])(values) if values.size else values
    if values.ndim == 1:
        cells = cells.reshape(-1, 1)
    if cells.ndim == 2:
        return head + "\n" + _matrix(cells)
    blocks = []
    for idx in np.ndindex(*cells.shape[2:][::-1]):
        idx = idx[::-1]
        label = ", ".join(str(i) for i in idx)
        blocks.append(f"[:, :, {label}] =\n" + _matrix(cells[(slice(None), slice(None)) + idx]))
    return head + "\n" + "\n\n".join(blocks)


def _matrix(cells):
    if cells.size == 0:
        return ""
    widths = [max(len(c) for c in cells[:, j]) for j in range(cells.shape[1])]
    return "\n".join(" " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)

"""Identity arrays: arrays whose element at coordinate c is c itself, so that
tiling and partitioning them tells each thread which coordinates of the
original array its elements have (CuTe's identity tensors). Comparing those
coordinates with the extents (`elem_less`) gives the predicates of
`copy_if` where tiles do not divide an array.

CuTe builds an identity tensor from a counting iterator of ArithmeticTuples
and a layout whose strides are basis elements (1@0, 1@1, ...). moye keeps
its layout algebra on integers, so the basis strides are packed into one
integer: top-level mode j of the shape is digit j of the offset, digit 0 in
units of 1 and digit j >= 1 in units of 2**(31 + (j - 1) * b) with
b = 32 // (n - 1) for n modes; within a nested mode the strides are compact
column-major, as in a data array. Every layout function maps coordinates to
offsets linearly, so `tile`, `partition_S`, slicing and the rest treat an
identity array as a data array of the same shape; the engine turns each
offset back into the coordinate. Digits above 0 start at 2**31 so that
kernel arithmetic on them is 64-bit (the tracer widens a constant that large)
and cannot overflow. As in CuTe, a tiler that crosses top-level modes (a
1-D tile of a 2-D array) cannot divide an identity array: its modes do not
coalesce.

Each coordinate must stay below its digit's capacity, tile overhang included:
digits 0 and (for two modes) 1 below 2**31; for n > 2 modes, digits 1..n-1
below 2**b (2**16 for three modes). Static extents are checked. A digit
decoded in a kernel is 32-bit again.
"""
import numpy as np

from ..errors import MoyeError
from ..layout import Layout, size
from ..layout import inttuple as T
from ..layout import scalar as S
from ..types import Int32
from .array import MoYeArray
from .engine import layout_offsets


class ArithTuple(tuple):
    """A coordinate as a value: + and - act element-wise, as on CuTe's
    ArithmeticTuple; it prints as CuTe prints it.
        >>> ArithTuple((1, 2)) + (10, 20)
        (11,22)
    """
    __slots__ = ()

    def __add__(self, other):
        return ArithTuple(_zip_with(S.add, self, other))

    def __radd__(self, other):
        return ArithTuple(_zip_with(S.add, other, self))

    def __sub__(self, other):
        return ArithTuple(_zip_with(S.sub, self, other))

    def __rsub__(self, other):
        return ArithTuple(_zip_with(S.sub, other, self))

    def __str__(self):
        return "(" + ",".join(str(e) for e in self) + ")"

    __repr__ = __str__


def _zip_with(op, a, b):
    if not isinstance(b, tuple) or not isinstance(a, tuple) or len(a) != len(b):
        raise MoyeError(f"coordinate arithmetic: {a} and {b} are not coordinates of one rank")
    return tuple(_zip_with(op, x, y) if isinstance(x, tuple) else op(x, y) for x, y in zip(a, b))


class CoordinateType:
    """The element type of identity arrays (coordinates, not numbers)."""
    name = "ArithTuple"

    def __str__(self):
        return self.name

    __repr__ = __str__


Coordinate = CoordinateType()


def _digit_units(n):
    """The unit of each digit for n modes, and each digit's capacity."""
    if n == 1:
        return (1,), (1 << 63,)
    b = 32 // (n - 1)
    units = (1,) + tuple(1 << (31 + (j - 1) * b) for j in range(1, n))
    caps = (1 << 31,) + ((1 << 31,) if n == 2 else tuple(1 << b for _ in range(1, n)))
    return units, caps


def _narrow(digit):
    """A digit decoded from a 64-bit offset, as a 32-bit value (below its
    capacity, 2**31 at most, it fits): the comparisons and sums a kernel
    makes of a coordinate (masks, predicates) then stay 32-bit."""
    cast = getattr(type(digit), "cast", None)
    if cast is None or getattr(getattr(digit, "type", None), "bits", 32) <= 32:
        return digit
    return cast(digit, Int32)


class CoordinateEngine:
    """The coordinates of `shape` as an engine: the element at offset i is
    `start` plus the coordinate whose digits i packs (see the module)."""
    __slots__ = ("shape", "start", "units")
    space = "coordinate"
    dtype = Coordinate

    def __init__(self, shape, start=None, units=None):
        self.shape = shape
        n = T.rank(shape)
        self.units = units if units is not None else _digit_units(n)[0]
        self.start = start if start is not None else (0,) * n

    def _digits(self, k):
        """The digits that offset `k` packs."""
        if type(k) is int:
            return tuple(k // u % (self.units[j + 1] // u) if j + 1 < len(self.units) else k // u
                         for j, u in enumerate(self.units))
        if getattr(getattr(k, "type", None), "bits", 64) <= 32 or len(self.units) == 1:
            # a 32-bit dynamic offset holds digit 0 only: the higher digits' units
            # are 2**31 and above, so arithmetic reaching them is 64-bit
            return (k,) + (0,) * (len(self.units) - 1)
        out = []
        div = S.known_divisor(k)
        for j, u in enumerate(self.units):
            if j + 1 < len(self.units) and div % self.units[j + 1] == 0:
                out.append(0)           # k is a multiple of the next digit's unit
                continue
            d = S.floordiv(k, u)
            out.append(_narrow(d % (self.units[j + 1] // u) if j + 1 < len(self.units) else d))
        return tuple(out)

    def offset_by(self, k):
        if type(k) is int and k == 0:
            return self
        start = tuple(S.add(s, d) for s, d in zip(self.start, self._digits(k)))
        return CoordinateEngine(self.shape, start, self.units)

    def load(self, i):
        flat = tuple(S.add(s, d) for s, d in zip(self.start, self._digits(i)))
        return _as_coordinate(flat, self.shape)

    def store(self, i, value):
        raise MoyeError("an identity array is read-only: its elements are their own coordinates")

    def write(self, layout, values):
        self.store(0, values)

    def read(self, layout):
        if all(type(s) is int for s in self.start) and type(layout) is Layout \
                and layout.is_static():
            offsets = layout_offsets(layout)
            out = np.empty(len(offsets), dtype=object)
            digits = [offsets // u % (self.units[j + 1] // u) if j + 1 < len(self.units)
                      else offsets // u for j, u in enumerate(self.units)]
            for i in range(len(offsets)):
                out[i] = _as_coordinate(tuple(s + int(d[i]) for s, d in zip(self.start, digits)),
                                        self.shape)
            return out
        n = size(layout)
        if type(n) is not int:
            raise MoyeError(f"reading the coordinates of layout {layout}: its size is dynamic")
        out = np.empty(n, dtype=object)
        for i in range(n):
            out[i] = self.load(layout(i))
        return out

    def recast(self, dtype):
        raise MoyeError("recast: an identity array holds coordinates, not elements of a type")

    def format_layout(self, layout):
        """`layout` with its packed strides written as CuTe writes basis
        strides: 1@0 for the unit of mode 0, 32@1 for 32 units of mode 1."""
        if not hasattr(layout, "stride"):
            return str(layout)
        return f"{T.fmt(layout.shape)}:{self._format_stride(layout.stride)}"

    def _format_stride(self, d):
        if type(d) is tuple:
            return "(" + ",".join(self._format_stride(e) for e in d) + ")"
        if type(d) is not int:
            return str(d)
        if d == 0:
            return "0"
        terms = [f"{x}@{j}" for j, x in enumerate(self._digits(d)) if x]
        return "+".join(terms)

    def __repr__(self):
        return f"CoordinateEngine({T.fmt(self.shape)}, start={self.start})"


def _as_coordinate(digits, shape):
    """The coordinate of `shape` whose top-level modes sit at `digits` (each
    a 1-D index within its mode): an int for an int shape, else an ArithTuple."""
    if type(shape) is not tuple:
        return digits[0]
    return ArithTuple(d if type(m) is not tuple else _nest(T.index_to_coord(d, m))
                      for d, m in zip(digits, shape))


def _nest(t):
    return ArithTuple(_nest(e) if type(e) is tuple else e for e in t) if type(t) is tuple else t


def make_identity_array(shape):
    """An array of `shape` whose element at each coordinate is that
    coordinate: tile and partition it like a data array of the same shape
    to learn the coordinates of a partition's elements. CuTe:
    make_identity_tensor.
        >>> c = make_identity_array((2, 3))
        >>> c[1, 2], tile(c, (2, 2), (0, 1))[1, 0]
        ((1,2), (1,2))
    """
    if isinstance(shape, Layout):
        shape = shape.shape
    shape = T.as_int_tuple(shape, "make_identity_array shape")
    modes = shape if type(shape) is tuple else (shape,)
    units, caps = _digit_units(len(modes))
    for j, (m, cap) in enumerate(zip(modes, caps)):
        s = T.product(m)
        if type(s) is int and s > cap // 2:
            raise MoyeError(f"make_identity_array: extent {s} of mode {j} of shape "
                            f"{T.fmt(shape)} exceeds what a coordinate of {len(modes)} modes "
                            f"holds ({cap // 2}, leaving room for a tile's overhang)")
    stride = tuple(u if type(m) is not tuple else T.compact_col_major(m, u)
                   for m, u in zip(modes, units))
    stride = stride if type(shape) is tuple else stride[0]
    return MoYeArray.view_of(CoordinateEngine(shape, None, units), Layout(shape, stride))


make_identity_tensor = make_identity_array

"""Engines: where the elements of a MoYeArray live.

An engine is linear memory of one element type, seen from a starting
element. The array's layout turns coordinates into offsets; the engine turns
offsets into loads and stores. Every array operation goes through this
small interface, so the same `tile`, `parallelize` and `copyto` serve host
arrays (here: a NumPy buffer) and, inside kernels, symbolic pointers into
global, shared and register memory.

The interface (`HostEngine` is the reference):
    dtype               the ElementType of one element
    space               "host", "global", "shared" or "register"
    offset_by(k)        the engine seen from element k further on
    recast(dtype)       the same memory seen as another element type
    load(i) / store(i, v)          one element at offset i
    read(layout)        the elements at every offset of `layout`, in colex order
    write(layout, values)          store them (values broadcast)
A host engine also answers `holds(lo, hi)`: whether offsets lo..hi lie in
its buffer. Host reads and writes never touch memory outside the buffer: a
whole-layout access checks the layout's image (its least and greatest
offset, `image_bounds`, cached per layout) once, and MoYeArray checks
element accesses against it the same way (see array.py).
"""
import numpy as np

from ..errors import BoundsError, MoyeError
from ..layout import Layout
from ..layout import inttuple as T
from ..layout.memo import memoized
from ..types import UInt128, as_element_type


class HostEngine:
    """Elements in a 1-D NumPy buffer, from element `start` on (MoYe's
    ViewEngine / ArrayEngine)."""
    __slots__ = ("buffer", "start", "dtype")
    space = "host"

    def __init__(self, buffer, start=0, dtype=None):
        self.buffer = buffer
        self.start = start
        self.dtype = _element_type_of(buffer.dtype) if dtype is None else dtype

    def __len__(self):
        """Elements from `start` to the end of the buffer."""
        return len(self.buffer) - self.start

    def offset_by(self, k):
        if k == 0:
            return self
        return HostEngine(self.buffer, self.start + int(k), self.dtype)

    def holds(self, lo, hi):
        """True if offsets lo..hi (from `start`) all lie in the buffer."""
        return self.start + lo >= 0 and self.start + hi < len(self.buffer)

    def check(self, layout):
        """A BoundsError if some offset of `layout` lies outside the buffer."""
        bounds = image_bounds(layout)
        if not self.holds(*bounds):
            raise BoundsError(_outside_message(self, layout, bounds))

    def load(self, i):
        return self.buffer[self.start + i]

    def store(self, i, value):
        if self.dtype is UInt128:
            value = _opaque(value)
        self.buffer[self.start + i] = value

    def read(self, layout):
        self.check(layout)
        view = _strided_view(self.buffer, self.start, layout)
        if view is not None:
            return view.flatten()
        return self.buffer[self.start + layout_offsets(layout)]

    def write(self, layout, values):
        self.check(layout)
        if self.dtype is UInt128:
            values = _opaque(values)
        view = _strided_view(self.buffer, self.start, layout, for_write=True)
        if view is not None:
            values = np.asarray(values)
            if values.ndim == 0 or (values.ndim == 1 and values.size == view.size):
                view[...] = values.reshape(view.shape) if values.ndim else values
                return
        self.buffer[self.start + layout_offsets(layout)] = values

    def copy_from(self, layout, src, src_layout):
        """self[layout] = src[src_layout] in one NumPy strided assignment when
        both are large affine views of the same shape; False where it cannot
        (the caller then reads and writes)."""
        if not isinstance(src, HostEngine) or src.dtype.numpy != self.dtype.numpy:
            return False
        self.check(layout)
        src.check(src_layout)
        dst_view = _strided_view(self.buffer, self.start, layout, for_write=True)
        if dst_view is None:
            return False
        src_view = _strided_view(src.buffer, src.start, src_layout)
        if src_view is None or src_view.shape != dst_view.shape:
            return False
        dst_view[...] = src_view
        return True

    def recast(self, dtype):
        dtype = as_element_type(dtype)
        old, new = self.dtype.bits, dtype.bits
        if old % 8 or new % 8:
            raise MoyeError(f"recast: {self.dtype} -> {dtype}: sub-byte element types are not "
                            "stored packed on the host")
        start_bytes = self.start * old // 8
        if start_bytes % (new // 8):
            raise MoyeError(f"recast: the array starts at byte {start_bytes}, which is not "
                            f"aligned to {dtype} ({new // 8} bytes)")
        raw = self.buffer.view(np.uint8)
        usable = (len(raw) // (new // 8)) * (new // 8)
        return HostEngine(raw[:usable].view(dtype.numpy), start_bytes // (new // 8), dtype)

    def __repr__(self):
        return f"HostEngine({self.dtype}, {len(self.buffer)} elements, start={self.start})"


def image_bounds(layout):
    """The least and the greatest offset of `layout` (a static Layout or a
    swizzled one): its image lies in lo..hi.
        >>> image_bounds(Layout((3, 4), (-1, 3)))
        (-2, 9)
    """
    if type(layout) is Layout:
        return _affine_bounds(layout)
    offsets = layout_offsets(layout)
    return int(offsets.min()), int(offsets.max())


@memoized
def _affine_bounds(layout):
    lo = hi = 0
    for s, d in zip(_flat(layout.shape), _flat(layout.stride)):
        if d < 0:
            lo += (s - 1) * d
        else:
            hi += (s - 1) * d
    return lo, hi


def _outside_message(engine, layout, bounds):
    """Which coordinate of `layout` first falls outside `engine`'s buffer."""
    offsets = engine.start + layout_offsets(layout)
    bad = np.flatnonzero((offsets < 0) | (offsets >= len(engine.buffer)))
    shape = layout.shape
    coord = T.index_to_coord(int(bad[0]), shape) if bad.size else None
    where = f"coordinate {T.fmt(coord)} is element {int(offsets[bad[0]])}" if bad.size else ""
    return (f"an array of shape {T.fmt(shape)} with layout {layout} from element {engine.start} "
            f"reaches elements {engine.start + bounds[0]}..{engine.start + bounds[1]}, outside "
            f"its buffer of {len(engine.buffer)} elements (0..{len(engine.buffer) - 1}): {where}")


def _element_type_of(dtype):
    """The element type a NumPy buffer holds (16-byte opaque elements are UInt128)."""
    return UInt128 if dtype == UInt128.numpy else as_element_type(dtype)


def _opaque(value):
    """A UInt128 element on the host is 16 raw bytes; an int becomes its
    little-endian bytes, so zeros_ and fill_ work on every element type."""
    if isinstance(value, (int, np.integer)):
        return int(value).to_bytes(16, "little")
    return value


# Below this many elements a cached offset array is the cheapest access; above
# it, a strided view avoids building (and caching) an index array as large as
# the data, and reads and writes run at NumPy's strided-copy speed.
_VIEW_THRESHOLD = 4096


def _strided_view(buffer, start, layout, for_write=False):
    """`layout`'s elements as a NumPy view of `buffer` from element `start`,
    one axis per flat mode in reverse order (so C order is colex order); None
    where a view cannot serve: a small or non-affine (swizzled) layout, a
    buffer that is not contiguous or holds Python objects, a layout that
    reaches outside the buffer (the index path then raises), or for writes
    a layout that maps two coordinates to one element (which element wins
    is the index path's rule)."""
    if type(layout) is not Layout or not buffer.flags.c_contiguous or buffer.dtype.hasobject:
        return None
    shape, stride = _flat(layout.shape), _flat(layout.stride)
    size = 1
    for s in shape:
        size *= s
    if size < _VIEW_THRESHOLD or (for_write and not _injective(shape, stride)):
        return None
    item = buffer.itemsize
    try:
        return np.ndarray(shape[::-1], buffer.dtype, buffer, start * item,
                          [d * item for d in stride[::-1]])
    except (ValueError, TypeError):  # reaches outside the buffer
        return None


def _injective(shape, stride):
    """True if distinct coordinates surely have distinct offsets: with the
    modes sorted by |stride|, each steps past everything the smaller ones reach."""
    reach = 0
    for d, s in sorted((abs(d), s) for s, d in zip(shape, stride) if s > 1):
        if d <= reach:
            return False
        reach += (s - 1) * d
    return True


def host_allocate(dtype, size):
    """A new host engine of `size` uninitialized elements."""
    return HostEngine(np.empty(size, dtype=dtype.numpy), 0, dtype)


_allocators = [host_allocate]


def allocate(dtype, size):
    """New storage for an owning array: a NumPy buffer on the host; inside a
    kernel being traced, the tracer's allocator (a register array)."""
    return _allocators[-1](as_element_type(dtype), size)


class allocator:
    """Within this context, owning arrays are allocated by `fn(dtype, size)`."""

    def __init__(self, fn):
        self.fn = fn

    def __enter__(self):
        _allocators.append(self.fn)

    def __exit__(self, *exc):
        _allocators.pop()


@memoized
def _offsets(layout):
    off = np.zeros(1, dtype=np.int64)
    for s, d in zip(_flat(layout.shape), _flat(layout.stride)):
        # each new mode varies slower than all before it (colex order)
        off = ((np.arange(s, dtype=np.int64) * d)[:, None] + off[None, :]).reshape(-1)
    off.setflags(write=False)
    return off


def layout_offsets(layout):
    """The offset of every coordinate of `layout`, in colexicographic order,
    as a read-only int64 array (cached for static layouts).
        >>> layout_offsets(Layout((2, 3), (3, 1)))
        array([0, 3, 1, 4, 2, 5])
    """
    if type(layout) is Layout:
        return _offsets(layout)
    inner = getattr(layout, "inner", None)
    if inner is None:
        raise TypeError(f"layout_offsets: expected a layout, got {layout!r}")
    return np.asarray(layout.outer(layout.offset + layout_offsets(inner)), dtype=np.int64)


@memoized
def mode_offsets(layout):
    """Per mode of a static Layout with a tuple shape, the offsets of the
    mode's elements as a list, in colexicographic order, so that the offset
    of a tuple of ints is one sum of list items; () for another layout, or
    where a mode is longer than element access needs listed.
        >>> mode_offsets(Layout((2, (2, 3)), (1, (6, 2))))
        ([0, 1], [0, 6, 2, 8, 4, 10])
    """
    if type(layout.shape) is not tuple or not layout.is_static():
        return ()
    modes = tuple(layout[i] for i in range(len(layout.shape)))
    if any(T.product(m.shape) > _LISTED_MODE for m in modes):
        return ()
    return tuple(_offsets(m).tolist() for m in modes)


_LISTED_MODE = 1 << 12          # the largest mode mode_offsets lists


def _flat(t):
    if type(t) is tuple:
        out = []
        for e in t:
            out.extend(_flat(e))
        return out
    if type(t) is not int:
        raise MoyeError(f"host arrays need static layouts; got a dynamic value {t!r}")
    return [t]


_loop_runners = []


def on_loop(runner):
    """Register `runner(engine, start, stop, body)`: it runs body(k) for k in
    range(start, stop) as code for arrays of its engines and returns True,
    or returns False (the kernel tracer's, in compiler/control.py)."""
    _loop_runners.append(runner)
    return runner


def run_loop(engine, start, stop, body):
    """body(k) for k in range(start, stop), as code of `engine`'s kind: on
    the host Python's loop; inside a kernel one loop that NVRTC unrolls,
    where the body allows.
        >>> run_loop(HostEngine(np.zeros(1), 0, None), 0, 3, print)
        0
        1
        2
    """
    for runner in _loop_runners:
        if runner(engine, start, stop, body):
            return
    for k in range(start, stop):
        body(k)

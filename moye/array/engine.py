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
"""
import numpy as np

from ..errors import MoyeError
from ..layout import Layout
from ..layout.memo import memoized
from ..types import as_element_type


class HostEngine:
    """Elements in a 1-D NumPy buffer, from element `start` on (MoYe's
    ViewEngine / ArrayEngine)."""
    __slots__ = ("buffer", "start", "dtype")
    space = "host"

    def __init__(self, buffer, start=0, dtype=None):
        self.buffer = buffer
        self.start = start
        self.dtype = as_element_type(buffer.dtype) if dtype is None else dtype

    def __len__(self):
        """Elements from `start` to the end of the buffer."""
        return len(self.buffer) - self.start

    def offset_by(self, k):
        if k == 0:
            return self
        return HostEngine(self.buffer, self.start + int(k), self.dtype)

    def load(self, i):
        return self.buffer[self.start + i]

    def store(self, i, value):
        self.buffer[self.start + i] = value

    def read(self, layout):
        return self.buffer[self.start + layout_offsets(layout)]

    def write(self, layout, values):
        self.buffer[self.start + layout_offsets(layout)] = values

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


def _flat(t):
    if type(t) is tuple:
        out = []
        for e in t:
            out.extend(_flat(e))
        return out
    if type(t) is not int:
        raise MoyeError(f"host arrays need static layouts; got a dynamic value {t!r}")
    return [t]

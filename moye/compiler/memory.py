"""Engines inside kernels: symbolic pointers into global, shared and
register memory. They implement the engine interface of moye.array, so
`tile`, `parallelize`, `copyto` and arithmetic work unchanged in kernels.

Loads and stores become IR instructions. A whole-array copy is widened to
vector accesses of up to 16 bytes where both layouts keep that many
elements contiguous and the offsets are provably aligned.
"""
import numpy as np

from .. import types as T
from ..errors import MoyeTypeError
from ..layout import Layout, complement, composition, make_layout, max_common_layout, size
from ..layout import inttuple as IT
from .. import ir
from .unrolled import check_register_index
from .tracer import KernelError, Sym, coerce, divisor_of, current


# How copy, copy_if and gemm with an atom become instructions: the device
# library (moye.device.atoms) fills this when it loads, so that the compiler
# does not import it.
ATOM_LOWERING = {}


def lowers_atoms(copy, copy_if, mma):
    """Register the lowering of atom copies, predicated copies and MMAs in
    kernels: copy(atom, dst, src), copy_if(atom, pred, dst, src) and
    mma(atom, d, a, b, c)."""
    ATOM_LOWERING.update(copy=copy, copy_if=copy_if, mma=mma)


def index_operand(idx):
    """An element index as an instruction's operand: Int32, or Int64 where
    its math is 64-bit (an array whose offsets pass 2**31: the binder's
    64-bit indices), which 32 bits would wrap."""
    if not isinstance(idx, Sym):
        return idx
    return coerce(idx, T.Int64 if idx.type.bits == 64 else T.Int32)


class PointerEngine:
    """Elements of `dtype` at `base` (a pointer Value or an ir.Array) + `offset`.
    `align` is the byte alignment known for `base`."""
    __slots__ = ("base", "dtype", "space", "offset", "align")

    def __init__(self, base, dtype, space, offset=0, align=16):
        self.base, self.dtype, self.space, self.offset, self.align = base, dtype, space, offset, align

    def offset_by(self, k):
        if isinstance(k, int) and k == 0:
            return self
        return PointerEngine(self.base, self.dtype, self.space, self.offset + k, self.align)

    def _index(self, i):
        if self.dtype.bits < 8:
            raise KernelError(f"element access to {self.dtype} values: sub-byte elements are "
                              "reached as packed words through recast(array, UInt32)")
        idx = self.offset + i
        if self.space == "local" and not isinstance(idx, int):
            size = self.base.size if isinstance(self.base, ir.Array) else None
            check_register_index(idx, size)
        return idx

    def _idx_operand(self, idx):
        return index_operand(idx)

    def load(self, i, width=1):
        idx = self._index(i)
        t = self.dtype if width == 1 else T.uint_of_bits(self.dtype.bits * width)
        v = current().instr("load", (self.base, self._idx_operand(idx)), t, width=width,
                            elem=self.dtype)
        return Sym(v, t)

    def store(self, i, value, width=1):
        idx = self._index(i)
        if width == 1:
            if not isinstance(value, (Sym, int, float, np.number)):
                raise MoyeTypeError(f"cannot store {value!r} in an array of {self.dtype}; "
                                    "store a number")
            value = coerce(value, self.dtype) if isinstance(value, (Sym, int, float)) else value
        else:
            value = value.value if isinstance(value, Sym) else value
        current().instr("store", (self.base, self._idx_operand(idx), value), width=width,
                        elem=self.dtype)

    def read(self, layout):
        return Loaded(self, layout)

    def write(self, layout, values):
        if isinstance(values, Loaded):
            return copy_elements(self, layout, values.engine, values.layout)
        n = size(layout)
        if isinstance(values, (Sym, int, float)):
            for i in range(n):
                self.store(layout(i), values)
            return
        flat = np.asarray(values, dtype=object).reshape(-1, order="F") \
            if not isinstance(values, list) else values
        if len(flat) != n:
            raise KernelError(f"writing {len(flat)} values into an array of {n} elements")
        for i in range(n):
            self.store(layout(i), flat[i])

    def recast(self, dtype):
        dtype = T.as_element_type(dtype)
        # the new offset, without going through bits: offset * bits would overflow the
        # 32-bit index arithmetic four to sixteen times sooner than the elements do
        old, new = self.dtype.bits, dtype.bits
        if new >= old:
            if new % old or divisor_of(self.offset) % (new // old):
                raise KernelError(f"recast to {dtype}: the array's offset is not provably "
                                  f"aligned to {new // 8} bytes")
            offset = self.offset // (new // old)
        else:
            if old % new:
                raise KernelError(f"recast to {dtype}: {old}-bit elements do not split into "
                                  f"{new}-bit ones")
            offset = self.offset * (old // new)
        b = current()
        base = self.base
        if isinstance(base, ir.Array):
            base = b.instr("addr", (base,), ir.PtrType(base.elem, self.space))
        base = b.instr("cast", (base,), ir.PtrType(dtype, self.space), to=dtype, ptr=True)
        return PointerEngine(base, dtype, self.space, offset, self.align)

    def atom_copy(self, atom, dst, src):
        """copyto(atom, dst, src) in a kernel: the atom's instruction per atom."""
        ATOM_LOWERING["copy"](atom, dst, src)

    def atom_copy_if(self, atom, pred, dst, src):
        """copy_if(atom, pred, dst, src) in a kernel: one predicate per atom."""
        ATOM_LOWERING["copy_if"](atom, pred, dst, src)

    def atom_mma(self, atom, d, a, b, c):
        """gemm with a warp-wide MMA atom in a kernel: one instruction per (m, n, k)."""
        ATOM_LOWERING["mma"](atom, d, a, b, c)

    def __repr__(self):
        return f"PointerEngine({self.base!r}+{self.offset!r}, {self.dtype}, {self.space})"


class Loaded:
    """The elements of an array read in a kernel: loaded when first used, so
    that a copy can instead move them with vector instructions."""
    __slots__ = ("engine", "layout", "_values")

    def __init__(self, engine, layout):
        self.engine, self.layout, self._values = engine, layout, None

    def values(self):
        if self._values is None:
            self._values = [self.engine.load(self.layout(i)) for i in range(size(self.layout))]
        return self._values

    def __iter__(self):
        return iter(self.values())

    def __len__(self):
        return size(self.layout)

    def __array__(self, dtype=None, copy=None):
        out = np.empty(len(self), dtype=object)
        out[:] = self.values()
        return out


def _aligned(engine, vec):
    """The engine's start is provably a multiple of `vec` elements, in bytes too."""
    nbytes = vec * engine.dtype.bits // 8
    return engine.align % nbytes == 0 and divisor_of(engine.offset) % vec == 0


def copy_elements(dst, dst_layout, src, src_layout):
    """dst[dst_layout] = src[src_layout], moving the widest aligned vectors
    (up to 16 bytes) that both layouts keep contiguous."""
    n, m = size(dst_layout), size(src_layout)
    if isinstance(n, Sym):
        n = m
    if isinstance(n, int) and isinstance(m, int) and m != n:
        raise KernelError(f"copy of {m} elements into {n}")
    if not isinstance(n, int):
        raise KernelError(f"copy of a dynamic number of elements ({dst_layout} from "
                          f"{src_layout}): copies in kernels need a static size; tile first")
    split = vector_split(dst, dst_layout, src, src_layout, n)
    if split is None:
        for i in range(n):
            dst.store(dst_layout(i), src.load(src_layout(i)))
        return
    vec, d, s = split
    for j in range(n // vec):
        dst.store(d((0, j)), src.load(s((0, j)), vec), vec)


def vector_split(dst, dst_layout, src, src_layout, n):
    """(vec, dst, src) with both layouts divided into (vec, rest) where each
    vec run is contiguous and aligned in both; None if no vector fits."""
    if dst.dtype.bits != src.dtype.bits or dst.dtype.bits % 8 or not isinstance(n, int):
        return None
    try:
        common = max_common_layout(dst_layout, src_layout)
    except Exception:
        return None
    run = size(common)
    if not isinstance(run, int):
        return None
    vec = 128 // dst.dtype.bits
    while vec >= 2:
        if run % vec == 0 and _aligned(dst, vec) and _aligned(src, vec):
            head = composition(common, Layout(vec))
            try:
                tiler = make_layout(head, complement(head, n))
                d, s = composition(dst_layout, tiler), composition(src_layout, tiler)
            except Exception:
                d = s = None
            if d is not None and _rest_aligned(d, vec) and _rest_aligned(s, vec):
                return vec, d, s
        vec //= 2
    return None


def _rest_aligned(layout, vec):
    return all(divisor_of(x) % vec == 0 for x in IT.flatten_to_tuple(layout[1].stride))


def register_allocate(dtype, size):
    """The kernel's allocator for owning arrays: a register array."""
    if not isinstance(size, int):
        raise KernelError(f"a register fragment needs a static size, got {size!r}")
    dtype = T.as_element_type(dtype)
    if dtype.bits < 8:
        # sub-byte elements (Int4, UInt1) live packed in 32-bit registers; they are
        # reached through recast(fragment, UInt32), as the MMA instructions take them
        arr = ir.Array(T.UInt32, -(-size * dtype.bits // 32), "local", 16)
    else:
        arr = ir.Array(dtype, size, "local", 16)
    current().kernel.arrays.append(arr)
    return PointerEngine(arr, dtype, "local", 0, 16)

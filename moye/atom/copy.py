"""Copy operations and copy atoms.

A copy *operation* is one instruction (a plain load/store of up to 128 bits,
cp.async, ldmatrix, stmatrix, ...). It carries, as facts from the PTX ISA,
which threads take part (`thr_id`) and the thread-value layouts of its
source, destination and reference in *bits*: (thread, value) -> bit.
A copy *atom* is an operation applied to elements of one type; its value
layouts are the bit layouts recast to that type.
"""
from ..errors import MoyeError
from ..layout import Layout, recast_layout, size
from ..types import UInt1, as_element_type


class CopyOp:
    """One copy instruction: its name, threads and bit-level TV layouts;
    `instruction` the IR class it becomes (None for a plain load and store),
    whose rules in `ir.lowering` are its C++ and CPU semantics."""

    def __init__(self, name, thr_id, src, dst, ref=None, *, kind, bits=None, arch=0,
                 instruction=None, **info):
        self.name, self.thr_id, self.kind, self.arch = name, thr_id, kind, arch
        self.instruction = instruction
        self.src_bits, self.dst_bits = src, dst
        self.ref_bits = dst if ref is None else ref
        self.bits = bits
        self.info = info

    def __repr__(self):
        return self.name

    def __eq__(self, other):
        return isinstance(other, CopyOp) and self.name == other.name

    def __hash__(self):
        return hash(self.name)


_UNIVERSAL = {}


def UniversalCopy(T, D=None):
    """A plain copy of one `T` (8 to 128 bits) per thread: vector loads and
    stores when T is wider than the elements. MoYe: UniversalCopy{T}.
        >>> UniversalCopy(UInt128).src_bits
        (1,128):(0,1)
    """
    T = as_element_type(T)
    D = T if D is None else as_element_type(D)
    if T.bits not in (8, 16, 32, 64, 128) and T.bits != D.bits:
        raise MoyeError(f"UniversalCopy: {T} has {T.bits} bits; 8 to 128 are supported")
    key = (T.name, D.name)
    op = _UNIVERSAL.get(key)
    if op is None:
        name = f"UniversalCopy({T})" if T is D else f"UniversalCopy({T}, {D})"
        op = _UNIVERSAL[key] = CopyOp(name, Layout(1), Layout((1, T.bits)), Layout((1, D.bits)),
                                      kind="universal", bits=T.bits)
    return op


class CopyAtom:
    """A copy operation on elements of `dtype`: MoYe's CopyAtom{Op, T}; CuTe's
    Copy_Atom. Its value layouts map (thread, value) to element offsets.
        >>> CopyAtom(UniversalCopy(UInt128), Float32).val_layout_src
        (1,4):(0,1)
    """

    def __init__(self, op, dtype):
        self.op = op
        self.dtype = as_element_type(dtype)
        self.thr_id = op.thr_id
        try:
            self.val_layout_src = recast_layout(op.src_bits, UInt1, self.dtype)
            self.val_layout_dst = recast_layout(op.dst_bits, UInt1, self.dtype)
            self.val_layout_ref = recast_layout(op.ref_bits, UInt1, self.dtype)
        except MoyeError as e:
            raise MoyeError(f"CopyAtom: {op} cannot copy {self.dtype} values: {e}") from None
        for which, lay in (("src", self.val_layout_src), ("dst", self.val_layout_dst),
                           ("ref", self.val_layout_ref)):
            if size(lay[0]) != size(self.thr_id):
                raise MoyeError(f"CopyAtom: {op} is not valid for {which} values of {self.dtype}")
            if size(lay) * self.dtype.bits != size(getattr(op, f"{which}_bits")):
                raise MoyeError(f"CopyAtom: {op} cannot copy {self.dtype} values: its {which} "
                                f"is not a whole number of {self.dtype.bits}-bit values")

    @property
    def num_val_src(self):
        return size(self.val_layout_src[1])

    @property
    def num_val_dst(self):
        return size(self.val_layout_dst[1])

    def __repr__(self):
        return (f"CopyAtom\n  ThrID:        {self.thr_id}\n"
                f"  ValLayoutSrc: {self.val_layout_src}\n"
                f"  ValLayoutDst: {self.val_layout_dst}\n"
                f"  ValLayoutRef: {self.val_layout_ref}\n"
                f"  ValueType:    {self.dtype.bits}b")

    def __eq__(self, other):
        return isinstance(other, CopyAtom) and self.op == other.op and self.dtype is other.dtype

    def __hash__(self):
        return hash((self.op, self.dtype.name))

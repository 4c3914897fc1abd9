"""MMA operations and MMA atoms.

An MMA *operation* is one matrix-multiply-accumulate instruction
D = A * B^T + C on an (M, N, K) tile: its element types and, as facts from
the PTX ISA, the thread-value layouts of A, B and C: (thread, value) -> the
column-major index of the element in the (M,K), (N,K) and (M,N) tiles.
"""
import numpy as np

from ..errors import MoyeError
from ..layout import Layout, cosize, size
from ..types import as_element_type


class MMAOp:
    """One MMA instruction: shape, threads, TV layouts and types; `instruction`
    the IR class it becomes (None for a scalar FMA), whose rules in
    `ir.lowering` are its C++ and CPU semantics."""

    def __init__(self, name, shape_mnk, thr_id, a_layout, b_layout, c_layout, types, *,
                 arch=0, ptx=None, instruction=None, **info):
        self.instruction = instruction
        self.name, self.shape_mnk, self.thr_id = name, shape_mnk, thr_id
        self.a_layout, self.b_layout, self.c_layout = a_layout, b_layout, c_layout
        self.d_type, self.a_type, self.b_type, self.c_type = (as_element_type(t) for t in types)
        self.arch, self.ptx, self.info = arch, ptx, info
        m, n, k = shape_mnk
        for what, layout, extent in (("A", a_layout, m * k), ("B", b_layout, n * k),
                                     ("C", c_layout, m * n)):
            if cosize(layout) > extent or size(layout[0]) != size(thr_id):
                raise MoyeError(f"MMAOp {name}: the {what} layout {layout} does not map "
                                f"{size(thr_id)} threads into a {extent}-element tile")

    def __repr__(self):
        return self.name

    def __eq__(self, other):
        return isinstance(other, MMAOp) and self.name == other.name

    def __hash__(self):
        return hash(self.name)


_FMA = {}


def UniversalFMA(TA, TB=None, TC=None, TD=None):
    """One thread's scalar d = a * b + c: MoYe's UniversalFMA{TA,TB,TC}.
        >>> UniversalFMA(Float32).shape_mnk
        (1, 1, 1)
    """
    TA = as_element_type(TA)
    TB = TA if TB is None else as_element_type(TB)
    TC = TA if TC is None else as_element_type(TC)
    TD = TC if TD is None else as_element_type(TD)
    key = (TD.name, TA.name, TB.name, TC.name)
    op = _FMA.get(key)
    if op is None:
        name = f"UniversalFMA({TA}, {TB}, {TC})"
        one = Layout((1, 1))
        op = _FMA[key] = MMAOp(name, (1, 1, 1), Layout(1), one, one, one, (TD, TA, TB, TC),
                               kind="fma")
    return op


class MMAAtom:
    """An MMA operation as an atom of a TiledMMA: MoYe's MMAAtom{Op}; CuTe's
    MMA_Atom. The TV layouts are the op's."""

    def __init__(self, op):
        self.op = op.op if isinstance(op, MMAAtom) else op
        op = self.op
        self.shape_mnk, self.thr_id = op.shape_mnk, op.thr_id
        self.layout_a_tv, self.layout_b_tv, self.layout_c_tv = op.a_layout, op.b_layout, op.c_layout
        self.d_type, self.a_type, self.b_type, self.c_type = op.d_type, op.a_type, op.b_type, op.c_type

    def __repr__(self):
        return (f"MMAAtom\n  ThrID:      {self.thr_id}\n  Shape_MNK:  {_fmt(self.shape_mnk)}\n"
                f"  LayoutA_TV: {self.layout_a_tv}\n  LayoutB_TV: {self.layout_b_tv}\n"
                f"  LayoutC_TV: {self.layout_c_tv}")

    def __eq__(self, other):
        return isinstance(other, MMAAtom) and self.op == other.op

    def __hash__(self):
        return hash(self.op)


def _fmt(t):
    return "(" + ",".join(str(x) for x in t) + ")"


def round_inputs(values, dtype):
    """Operand values as the tensor cores read them: TF32 keeps the top 19
    bits of a float32 (the low 13 mantissa bits are ignored); other types
    are exact in their own format."""
    if dtype.name == "TFloat32":
        bits = np.asarray(values, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        return bits.view(np.float32).astype(np.float64)
    if dtype.kind == "float":
        return np.asarray(values).astype(dtype.numpy).astype(np.float64)
    return np.asarray(values).astype(np.int64)


def mma_reference(op, a, b, c):
    """D = A * B^T + C for one op on whole operands A (M,K), B (N,K), C (M,N),
    with the op's precision: inputs as the hardware reads them, exact
    products, one rounding to the accumulator type (integer ops wrap, or
    saturate for the _SATURATE variants; B1 ops count bits)."""
    kind = op.info.get("kind")
    if kind == "popc":
        a = np.asarray(a).astype(np.int64) & 1
        b = np.asarray(b).astype(np.int64) & 1
        bits = (a[:, None, :] ^ b[None, :, :]) if op.info["bitop"] == "xor" \
            else (a[:, None, :] & b[None, :, :])
        return (bits.sum(axis=2) + np.asarray(c).astype(np.int64)).astype(op.d_type.numpy)
    A, B = round_inputs(a, op.a_type), round_inputs(b, op.b_type)
    if op.d_type.is_float:
        acc = A @ B.T + np.asarray(c).astype(np.float64)
        return acc.astype(op.d_type.numpy)
    acc = A @ B.T + np.asarray(c).astype(np.int64)
    info = np.iinfo(op.d_type.numpy)
    if op.info.get("saturate"):
        return np.clip(acc, info.min, info.max).astype(op.d_type.numpy)
    return acc.astype(op.d_type.numpy)

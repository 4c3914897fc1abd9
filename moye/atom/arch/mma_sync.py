"""How a warp-wide `mma.sync` operation is named, spelled in PTX and packed
into registers. sm70.py, sm75.py and sm80.py hold the facts (shapes, types,
thread-value layouts); this module turns them into MMAOp constants.

Names are MoYe.jl's: MMAOP_{M}x{N}x{K}_{D}{A}{B}{C}_{majors}[_SATURATE][_XORPOPC|_ANDPOPC],
where the majors say how A (M x K) and B (K x N) are stored: T for A is
`.row`, N for A is `.col`; N for B is `.col`, T for B is `.row`. So `_TN` is
PTX's `.row.col`. CuTe's names (SM80_16x8x8_F32TF32TF32F32_TN, ...) are
aliases; CuTe spells the single-bit type U1 where MoYe spells B1.

Register counts (info["registers"]) are what one thread passes to the
instruction: {"a": (count, ptx register type), ...}. Packed operands (f16x2,
bf16x2, tf32, 4 x s8, 8 x s4, 32 x b1) travel in `b32` registers; f32 and s32
accumulators take one register per element; f64 operands take one 64-bit
`f64` register per element.
"""
from ... import ir
from ...layout import Layout, size
from ...types import as_element_type
from ..mma import MMAOp

# moye element type -> (PTX type, letters in MoYe's op names, letters in CuTe's)
_SPELLING = {
    "Float16": ("f16", "F16", "F16"),
    "BFloat16": ("bf16", "BF16", "BF16"),
    "TFloat32": ("tf32", "TF32", "TF32"),
    "Float32": ("f32", "F32", "F32"),
    "Float64": ("f64", "F64", "F64"),
    "Int8": ("s8", "S8", "S8"),
    "UInt8": ("u8", "U8", "U8"),
    "Int4": ("s4", "S4", "S4"),
    "UInt4": ("u4", "U4", "U4"),
    "UInt1": ("b1", "B1", "U1"),
    "Int32": ("s32", "S32", "S32"),
}


def ptx_type(t):
    """The PTX spelling of an element type.
        >>> ptx_type(BFloat16), ptx_type(UInt1)
        ('bf16', 'b1')
    """
    return _SPELLING[as_element_type(t).name][0]


def type_letters(types, cute=False):
    """(D, A, B, C) as MoYe's op names (or CuTe's) spell them.
        >>> type_letters((Int32, UInt1, UInt1, Int32)), type_letters((Int32, UInt1), cute=True)
        ('S32B1B1S32', 'S32U1')
    """
    return "".join(_SPELLING[as_element_type(t).name][2 if cute else 1] for t in types)


def _registers(kind, count_elems, t):
    """(count, register type) for `count_elems` elements of type t in one thread."""
    t = as_element_type(t)
    if t.name == "Float64":
        return (count_elems, "f64")
    if kind in "cd" and t.bits == 32:
        return (count_elems, ptx_type(t))
    return (count_elems * t.bits // 32, "b32")


def mma_sync_op(shape_mnk, types, a_layout, b_layout, c_layout, *, arch, min_sm, majors="TN",
                thr_id=None, saturate=False, bitop=None, cute=True, c_after=False):
    """The MMAOp of one mma.sync instruction. `types` is (D, A, B, C); the
    layouts map (thread, value) to the column-major index in the (M,K),
    (N,K) and (M,N) tiles, thread being the op's logical thread (a lane of
    the warp through `thr_id`, Layout(32) unless given). `cute=False` for
    the few ops that CuTe does not name; `c_after` where C's registers are
    not arranged as D's (the instruction then gets a zero C, and C is added
    to D after it)."""
    m, n, k = shape_mnk
    types = tuple(as_element_type(t) for t in types)
    thr_id = Layout(32) if thr_id is None else thr_id
    suffix = majors + ("_SATURATE" if saturate else "") + \
        ({"xor": "_XORPOPC", "and": "_ANDPOPC"}[bitop] if bitop else "")
    name = f"MMAOP_{m}x{n}x{k}_{type_letters(types)}_{suffix}"
    cute_name = f"SM{arch}_{m}x{n}x{k}_{type_letters(types, cute=True)}_{suffix}" if cute else None

    d, a, b, c = (ptx_type(t) for t in types)
    lay = {"T": "row", "N": "col"}
    a_major, b_major = lay[majors[0]], {"N": "col", "T": "row"}[majors[1]]
    ptx = (f"mma.sync.aligned.m{m}n{n}k{k}.{a_major}.{b_major}" + (".satfinite" if saturate else "")
           + f".{d}.{a}.{b}.{c}" + (f".{bitop}.popc" if bitop else ""))

    threads = size(thr_id)
    registers = {
        "a": _registers("a", m * k // threads, types[1]),
        "b": _registers("b", n * k // threads, types[2]),
        "c": _registers("c", m * n // threads, types[3]),
        "d": _registers("d", m * n // threads, types[0]),
    }
    return MMAOp(name, shape_mnk, thr_id, a_layout, b_layout, c_layout, types, arch=arch, ptx=ptx,
                 instruction=ir.Mma,
                 kind="popc" if bitop else "mma", bitop=bitop, saturate=saturate,
                 registers=registers, min_sm=min_sm, cute_name=cute_name,
                 c_after=c_after)


def export(ops, namespace):
    """Put each op in `namespace` under its MoYe name and its CuTe alias;
    return the names added."""
    names = []
    for op in ops:
        for name in (op.name, op.info["cute_name"]):
            if name is None:
                continue
            namespace[name] = op
            names.append(name)
    return names

"""Bit-manipulation intrinsics of 32- and 64-bit integers: population
count, leading zeros, first set bit and bit reversal (the PTX ISA's popc,
clz, bfind and brev; CUDA's __popc, __clz, __ffs and __brev and their `ll`
forms). The functions kernels call are in `device/builtins.py`.

    >>> from moye import ir
    >>> ir.Bits.FUNCTIONS
    ('popc', 'clz', 'ffs', 'brev')
"""
import numpy as np

from .. import types as T
from .instr import Instr, type_of
from .lowering import lowering

_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], np.int32)
_BYTE_REVERSED = np.array([int(f"{i:08b}"[::-1], 2) for i in range(256)], np.uint8)
_CUDA = {"popc": "__popc", "clz": "__clz", "ffs": "__ffs", "brev": "__brev"}


class Bits(Instr):
    """The intrinsic `fn` of x, a 32- or 64-bit integer taken as its bits:
    popc, the bits set; clz, the zeros above the highest set bit; ffs, the
    lowest set bit's position counted from 1 (0 where x is 0), all Int32;
    brev, x's bits in reverse order, of x's type."""
    op = "bits"
    operands = ("x",)
    attributes = {"fn": None}
    pure = True
    FUNCTIONS = tuple(_CUDA)

    def result_type(self):
        return type_of(self.x) if self.fn == "brev" else T.Int32

    def check(self):
        if self.fn not in self.FUNCTIONS:
            return f"bits' fn is one of {', '.join(self.FUNCTIONS)}, not {self.fn!r}"
        t = type_of(self.x)
        if t is None or not t.is_integer or t.bits not in (32, 64):
            return f"{self.fn} takes a 32- or 64-bit integer, not {t or self.x!r}"
        return None


@lowering("cuda", Bits)
def _emit_bits(w, s, ind, decl):
    t = type_of(s.x)
    wide = t.bits == 64
    arg = {("popc", False): "unsigned", ("popc", True): "unsigned long long",
           ("brev", False): "unsigned", ("brev", True): "unsigned long long"}.get(
        (s.fn, wide), "long long" if wide else "int")
    call = f"{_CUDA[s.fn]}{'ll' if wide else ''}(({arg}){w.operand(s.x)})"
    w.emit(ind, f"{decl}({w.ctype(s.result.type)}){call};")


def bit_length(u):
    """The bit length of each unsigned 32- or 64-bit value of `u` (0 for 0),
    exactly: halves of 32 bits are exact in float64."""
    if u.dtype == np.uint64:
        hi, lo = (u >> np.uint64(32)).astype(np.uint32), (u & np.uint64(0xFFFFFFFF)).astype(
            np.uint32)
        return np.where(hi > 0, 32 + bit_length(hi), bit_length(lo))
    return np.frexp(u.astype(np.float64))[1].astype(np.int32)


def evaluate(fn, u):
    """fn of the unsigned values `u` (uint32 or uint64), as the GPU computes it."""
    width = u.dtype.itemsize * 8
    octets = np.ascontiguousarray(u).view(np.uint8).reshape(u.shape + (width // 8,))
    if fn == "popc":
        return _BYTE_BITS[octets].sum(axis=-1, dtype=np.int32)
    if fn == "clz":
        return (width - bit_length(u)).astype(np.int32)
    if fn == "ffs":
        return bit_length(u & (~u + u.dtype.type(1)))      # the lowest set bit alone
    reversed_ = _BYTE_REVERSED[octets[..., ::-1]]          # brev: bytes, then each byte's bits
    return np.ascontiguousarray(reversed_).view(u.dtype).reshape(u.shape)


@lowering("cpu", Bits)
def _run_bits(b, s, mask):
    t = type_of(s.x)
    unsigned = np.dtype(f"uint{t.bits}")
    u = b.vec(s.x).astype(t.numpy).view(unsigned)
    out = evaluate(s.fn, u)
    b.set_result(s, out.view(t.numpy) if s.fn == "brev" else out, mask)

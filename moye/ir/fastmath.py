"""The approximate Float32 math of the PTX ISA: `ex2.approx.f32`,
`rsqrt.approx.f32`, `rcp.approx.f32`, `tanh.approx.f32` and
`div.approx.f32`. The functions kernels call are in `device/fastmath.py`
(and `moye.exp2` and friends under `@moye.kernel(fast_math=True)`).

The CPU rule computes each exactly, then rounds the result to the
precision the PTX ISA guarantees for the instruction (`BITS`: the fraction
bits kept), so that a kernel tested on the CPU does not rely on more
accuracy than the GPU gives, and every result is within the ISA's bound:

| instruction | the PTX ISA's bound | kept |
| --- | --- | --- |
| ex2.approx.f32 | 2 ulp of the correctly rounded result | 22 bits: 1 ulp |
| rsqrt.approx.f32 | relative 2^-22.9 | 22 bits: 2^-23 |
| rcp.approx.f32 | 1 ulp | 22 bits: 1 ulp |
| div.approx.f32 | 2 ulp for 2^-126 <= abs(b) <= 2^126; 0 beyond | 22 bits: 1 ulp |
| tanh.approx.f32 | relative 2^-11 (sm_75 and later) | 10 bits: 2^-11 |
| ex2.approx.f16x2 | relative 2^-9.9 (sm_75 and later) | 9 bits: 2^-10 |
| ex2.approx.ftz.bf16x2 | relative 2^-7 (sm_90; CUDA's h2exp2 before) | 6 bits: 2^-7 |

    >>> from moye import ir
    >>> ir.Approx.FUNCTIONS["tanh"]
    'tanh.approx.f32'
"""
import numpy as np

from .. import types as T
from .instr import Instr, type_of
from .lowering import lowering


class Approx(Instr):
    """The PTX approximation `fn` (ex2, rsqrt, rcp, tanh: of x; div: x / y)
    of Float32 operands, a Float32 result."""
    op = "approx"
    operands = ("*xs",)
    attributes = {"fn": None}
    pure = True
    FUNCTIONS = {"ex2": "ex2.approx.f32", "rsqrt": "rsqrt.approx.f32", "rcp": "rcp.approx.f32",
                 "tanh": "tanh.approx.f32", "div": "div.approx.f32"}
    ARITY = {"div": 2}
    BITS = {"ex2": 22, "rsqrt": 22, "rcp": 22, "div": 22, "tanh": 10}

    def result_type(self):
        return T.Float32

    def check(self):
        if self.fn not in self.FUNCTIONS:
            return f"no approximation named {self.fn!r}: {', '.join(self.FUNCTIONS)}"
        if len(self.xs) != self.ARITY.get(self.fn, 1):
            return f"{self.FUNCTIONS[self.fn]} takes {self.ARITY.get(self.fn, 1)} operand(s)"
        for x in self.xs:
            t = type_of(x)
            if t is not None and t is not T.Float32:
                return f"an operand is {t}, not Float32"
        return None


@lowering("cuda", Approx)
def _emit_approx(w, s, ind, decl):
    """The result is a plain local that the asm writes (not volatile: it is
    pure, so NVCC may move or drop it)."""
    r = w.name(s.result)
    args = [w.arg(x, T.Float32) for x in s.xs]
    operands = ", ".join(f"%{i + 1}" for i in range(len(args)))
    asm = (f'asm("{s.FUNCTIONS[s.fn]} %0, {operands};" : "=f"({r}) : '
           + ", ".join(f'"f"({a})' for a in args) + ");")
    w.emit(ind, f"float {r};")
    if s.fn == "tanh":      # tanh.approx needs sm_75
        w.emit(ind, "#if __CUDA_ARCH__ >= 750")
        w.emit(ind, asm)
        w.emit(ind, "#else")
        w.emit(ind, f"{r} = tanhf({args[0]});")
        w.emit(ind, "#endif")
    else:
        w.emit(ind, asm)


def _keep_bits(x, bits):
    """x (float64) rounded to `bits` fraction bits (to nearest, ties to
    even); zeros, infinities and NaNs unchanged."""
    m, e = np.frexp(x)
    scale = float(2 ** (bits + 1))       # frexp's m is in [0.5, 1): one more bit
    finite = np.isfinite(m)
    m = np.where(finite, np.round(np.where(finite, m, 0) * scale) / scale, m)
    return np.ldexp(m, e)


def approximate(fn, xs):
    """What the CPU gives for Approx `fn` of the float64 vectors `xs`, as
    float64 (see the module docstring)."""
    with np.errstate(all="ignore"):
        if fn == "ex2":
            exact = np.exp2(xs[0])
        elif fn == "rsqrt":
            exact = 1 / np.sqrt(xs[0])
        elif fn == "rcp":
            exact = 1 / xs[0]
        elif fn == "tanh":
            exact = np.tanh(xs[0])
        else:
            a, b = xs
            exact = a / b
            # past 2^126 the PTX ISA gives 0 for a finite numerator
            huge = (np.abs(b) > 2.0 ** 126) & np.isfinite(b) & np.isfinite(a)
            exact = np.where(huge, 0.0 * np.sign(a) * np.sign(b), exact)
        return _keep_bits(exact, Approx.BITS[fn])


@lowering("cpu", Approx)
def _run_approx(b, s, mask):
    xs = [b.vec(x).astype(np.float32).astype(np.float64) for x in s.xs]
    with np.errstate(over="ignore"):        # beyond Float32: infinity, as on the GPU
        b.set_result(s, approximate(s.fn, xs).astype(np.float32), mask)


class ApproxPair(Instr):
    """ex2.approx of a packed pair of Float16 (f16x2) or BFloat16 (ftz.bf16x2)
    values: one UInt32 word in (the low half first), one out."""
    op = "approx_pair"
    operands = ("x",)
    attributes = {"elem": None}
    pure = True
    PTX = {"Float16": "ex2.approx.f16x2", "BFloat16": "ex2.approx.ftz.bf16x2"}
    BITS = {"Float16": 9, "BFloat16": 6}

    def result_type(self):
        return T.UInt32

    def check(self):
        if self.elem is None or self.elem.name not in self.PTX:
            return f"ex2 of a packed pair takes Float16 or BFloat16 halves, not {self.elem}"
        t = type_of(self.x)
        if t is not None and t is not T.UInt32:
            return f"the packed pair is a {t}, not a UInt32 word"
        return None


@lowering("cuda", ApproxPair)
def _emit_approx_pair(w, s, ind, decl):
    """bf16x2's instruction needs sm_90; before it, CUDA's h2exp2 (through
    Float32) gives the pair."""
    r, x = w.name(s.result), w.arg(s.x, T.UInt32)
    asm = f'asm("{s.PTX[s.elem.name]} %0, %1;" : "=r"({r}) : "r"({x}));'
    w.emit(ind, f"uint32_t {r};")
    if s.elem is T.BFloat16:
        w.emit(ind, "#if __CUDA_ARCH__ >= 900")
        w.emit(ind, asm)
        w.emit(ind, "#else")
        w.emit(ind, f"{{ __nv_bfloat162 h = h2exp2("
               f"*reinterpret_cast<const __nv_bfloat162*>(&{x})); "
               f"{r} = *reinterpret_cast<uint32_t*>(&h); }}")
        w.emit(ind, "#endif")
    else:
        w.emit(ind, asm)


def approximate_pair(elem, words):
    """What the CPU gives for ApproxPair on the UInt32 `words`: each half's
    exact 2^x rounded to the ISA's bound (BITS), in `elem` (bf16: ftz, a
    subnormal input or result is 0)."""
    half = elem.numpy
    xs = np.ascontiguousarray(words, np.uint32).view(half).astype(np.float64)
    tiny = 2.0 ** -126
    with np.errstate(all="ignore"):
        if elem is T.BFloat16:
            xs = np.where(np.abs(xs) < tiny, 0.0, xs)
        ys = _keep_bits(np.exp2(xs), ApproxPair.BITS[elem.name])
        if elem is T.BFloat16:
            ys = np.where(ys < tiny, 0.0, ys)
        return ys.astype(half).view(np.uint32)


@lowering("cpu", ApproxPair)
def _run_approx_pair(b, s, mask):
    b.set_result(s, approximate_pair(s.elem, b.vec(s.x).astype(np.uint32)), mask)

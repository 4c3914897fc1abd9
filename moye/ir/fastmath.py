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
| ex2.approx.ftz.f32 | the same, subnormal inputs and results flushed to 0 | 22 bits |
| rsqrt.approx.f32 | relative 2^-22.9 | 22 bits: 2^-23 |
| rcp.approx.f32 | 1 ulp | 22 bits: 1 ulp |
| div.approx.f32 | 2 ulp for 2^-126 <= abs(b) <= 2^126; 0 beyond | 22 bits: 1 ulp |
| tanh.approx.f32 | relative 2^-11 (sm_75 and later) | 10 bits: 2^-11 |

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
    of Float32 operands, a Float32 result; `ftz` (ex2 only) flushes
    subnormal inputs and results to zero, which spares ex2 the scaling
    instructions ptxas wraps around it otherwise."""
    op = "approx"
    operands = ("*xs",)
    attributes = {"fn": None, "ftz": False}
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
        if self.ftz and self.fn != "ex2":
            return f"ftz is for ex2 only, not {self.fn}"
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
    ptx = s.FUNCTIONS[s.fn].replace(".f32", ".ftz.f32") if s.ftz else s.FUNCTIONS[s.fn]
    asm = (f'asm("{ptx} %0, {operands};" : "=f"({r}) : '
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


def approximate(fn, xs, ftz=False):
    """What the CPU gives for Approx `fn` of the float64 vectors `xs`, as
    float64 (see the module docstring)."""
    tiny = 2.0 ** -126                  # Float32's least normal number
    with np.errstate(all="ignore"):
        if fn == "ex2" and ftz:
            x = np.where(np.abs(xs[0]) < tiny, 0.0, xs[0])
            exact = np.exp2(x)
            return np.where(exact < tiny, 0.0, _keep_bits(exact, Approx.BITS[fn]))
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
        b.set_result(s, approximate(s.fn, xs, s.ftz).astype(np.float32), mask)

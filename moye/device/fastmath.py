"""Approximate Float32 math: the PTX ISA's fast forms, called by name
(`moye.exp2_approx(x)`), or in place of `moye.exp`, `exp2`, `rsqrt`,
`tanh` and Float32 division throughout a kernel decorated with
`@moye.kernel(fast_math=True)`. The accurate forms stay the default.

Each takes Float32 operands (integers, Float16 and BFloat16 are converted;
the result is Float32) and refuses Float64, for which PTX has no such
approximation: use the accurate function, or cast to Float32 first. On
static numbers they give Python's accurate result. The CPU backend rounds
each result to the precision the PTX ISA guarantees (`ir/fastmath.py`
lists the bounds), so a test that passes on the CPU does not count on
more accuracy than the GPU gives.
"""
import math
import numbers

from .. import types as T
from ..errors import MoyeTypeError
from ..compiler.tracer import Sym, coerce, current

LOG2_E = 1.4426950408889634     # exp(x) = 2^(x log2(e))


def overflow_to_inf(pyfn):
    """`pyfn` on host numbers, inf where Python's float overflows (as CUDA's
    float math does).
        >>> overflow_to_inf(math.exp)(1000.0)
        inf
    """
    def f(*args):
        try:
            return pyfn(*args)
        except OverflowError:
            return math.inf
    return f


exp_host = overflow_to_inf(math.exp)     # e^x of host numbers, inf past float's range
exp2_host = overflow_to_inf(lambda x: 2.0 ** x)     # 2^x of host numbers, the same way


def _operand(name, arg, x):
    """`x` as a Float32 operand of `name`, or None for a static number."""
    if isinstance(x, Sym):
        if x.type is T.Float64:
            raise MoyeTypeError(f"{name}: {arg} is a Float64; the PTX approximation is for "
                                "Float32 only: use the accurate function, or "
                                "moye.cast(x, moye.Float32) first")
        if not (x.type.is_integer or x.type.is_float and x.type.bits >= 16):
            raise MoyeTypeError(f"{name}: {arg} must be an integer or a float of 16 to 32 "
                                f"bits, got a {x.type}")
        return coerce(x, T.Float32)
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return None
    raise MoyeTypeError(f"{name}: {arg} must be a number, got {x!r}")


def _unary(name, fn, python, doc):
    def f(x):
        v = _operand(name, "x", x)
        if v is None:
            return python(float(x))
        return Sym(current().instr("approx", (v,), T.Float32, fn=fn), T.Float32)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


def exp2_approx(x, ftz=False):
    """2^x, approximately: within 2 ulp over the whole range. PTX:
    ex2.approx.f32; with `ftz`, ex2.approx.ftz.f32: subnormal inputs and
    results are 0, which spares the instructions that ptxas wraps around
    ex2 to keep them (a compare and two scalings an exponential: where
    results below 2^-126 do not matter, as softmax's).
        >>> import moye
        >>> @moye.kernel
        ... def powers(out, x):
        ...     out[moye.thread_idx.x] = moye.exp2_approx(x[moye.thread_idx.x])
        ...     out[3 + moye.thread_idx.x] = moye.exp2_approx(x[moye.thread_idx.x], ftz=True)
        >>> out = np.zeros(6, np.float32)
        >>> powers[1, 3](out, np.array([-1.0, 0.5, -130.0], np.float32))
        >>> bool(np.abs(out[:2] / 2 ** np.array([-1.0, 0.5]) - 1).max() < 2 ** -22)
        True
        >>> out[2] > 0, out[5]
        (np.True_, np.float32(0.0))
    """
    if not isinstance(ftz, bool):
        raise MoyeTypeError(f"exp2_approx: ftz must be a bool, got {ftz!r}")
    v = _operand("exp2_approx", "x", x)
    if v is None:
        y = exp2_host(float(x))
        return 0.0 if ftz and y < 2.0 ** -126 else y
    return Sym(current().instr("approx", (v,), T.Float32, fn="ex2", ftz=ftz), T.Float32)


rsqrt_approx = _unary("rsqrt_approx", "rsqrt", lambda x: 1.0 / math.sqrt(x), """\
1 / sqrt(x), approximately: relative error within 2^-22.9. PTX:
rsqrt.approx.f32.
    >>> import moye
    >>> moye.rsqrt_approx(4.0)          # a static number: Python's exact value
    0.5
""")

rcp_approx = _unary("rcp_approx", "rcp", lambda x: 1.0 / x, """\
1 / x, approximately: within 1 ulp. PTX: rcp.approx.f32.
    >>> import moye
    >>> moye.rcp_approx(8)
    0.125
""")

tanh_approx = _unary("tanh_approx", "tanh", math.tanh, """\
tanh(x), approximately: relative error within 2^-11 (sm_75 and later).
PTX: tanh.approx.f32.
    >>> import moye
    >>> moye.tanh_approx(0.0)
    0.0
""")


def exp_approx(x):
    """e^x, approximately, as CUDA's __expf: ex2.approx.f32 of x * log2(e)
    rounded to Float32; within 2 + floor(abs(1.173 x)) ulp.
        >>> import moye
        >>> round(moye.exp_approx(1.0), 6)
        2.718282
    """
    v = _operand("exp_approx", "x", x)
    if v is None:
        return exp_host(float(x))
    b = current()
    t = b.instr("mul", (v, LOG2_E), T.Float32)
    return Sym(b.instr("approx", (t,), T.Float32, fn="ex2"), T.Float32)


def div_approx(x, y):
    """x / y, approximately: within 2 ulp for 2^-126 <= abs(y) <= 2^126, and
    0 for a larger finite y. PTX: div.approx.f32 (CUDA's __fdividef).
        >>> import moye
        >>> moye.div_approx(1, 4)
        0.25
    """
    a, b = _operand("div_approx", "x", x), _operand("div_approx", "y", y)
    if a is None and b is None:
        return float(x) / float(y)
    ops = (float(x) if a is None else a, float(y) if b is None else b)
    return Sym(current().instr("approx", ops, T.Float32, fn="div"), T.Float32)


FAST_FORMS = {"exp": exp_approx, "exp2": exp2_approx, "rsqrt": rsqrt_approx,
              "tanh": tanh_approx}
"""The approximate form of each accurate function that fast_math replaces."""

__all__ = ["exp2_approx", "exp_approx", "rsqrt_approx", "rcp_approx", "tanh_approx",
           "div_approx"]

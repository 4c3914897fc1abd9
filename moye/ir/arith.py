"""Arithmetic, comparisons, conversions, math functions and special registers.

Arithmetic follows C on the operand types: the tracer casts both operands
of a binary instruction to its result type first (comparisons: to a common
type, the result is Bool).
"""
import math

import numpy as np

from .. import types as T
from .instr import Instr, same_type, type_of
from .values import PtrType


def _mismatch(s, want):
    """A sentence about the first operand whose type is not `want`, or None."""
    for name, x in zip(s.operands, s.args):
        t = type_of(x)
        if t is not None and want is not None and not same_type(t, want):
            return f"operand {name} is {t}, not {want}"
    return None


class Binary(Instr):
    """`a op b`, both of the result's type."""
    operands = ("a", "b")
    pure = True

    def result_type(self):
        return self.result.type

    def check(self):
        return _mismatch(self, self.result.type)


class Add(Binary):
    """a + b"""
    op = "add"


class Sub(Binary):
    """a - b"""
    op = "sub"


class Mul(Binary):
    """a * b"""
    op = "mul"


class Div(Binary):
    """a / b (integers: truncated, as in C)"""
    op = "div"


class Mod(Binary):
    """a % b (integers: C's remainder)"""
    op = "mod"


class And(Binary):
    """a & b"""
    op = "and"


class Or(Binary):
    """a | b"""
    op = "or"


class Xor(Binary):
    """a ^ b"""
    op = "xor"


class Shl(Binary):
    """a << b"""
    op = "shl"


class Shr(Binary):
    """a >> b"""
    op = "shr"


class Min(Binary):
    """min(a, b)"""
    op = "min"


class Max(Binary):
    """max(a, b)"""
    op = "max"


class Compare(Instr):
    """`a op b` -> Bool, a and b of one type."""
    operands = ("a", "b")
    pure = True

    def result_type(self):
        return T.Bool

    def check(self):
        ta, tb = type_of(self.a), type_of(self.b)
        if ta is not None and tb is not None and not same_type(ta, tb):
            return f"compares a {ta} with a {tb}"
        return None


class Lt(Compare):
    """a < b"""
    op = "lt"


class Le(Compare):
    """a <= b"""
    op = "le"


class Gt(Compare):
    """a > b"""
    op = "gt"


class Ge(Compare):
    """a >= b"""
    op = "ge"


class Eq(Compare):
    """a == b"""
    op = "eq"


class Ne(Compare):
    """a != b"""
    op = "ne"


class Unary(Instr):
    """`op x`, of x's type."""
    operands = ("x",)
    pure = True

    def result_type(self):
        return self.result.type

    def check(self):
        return _mismatch(self, self.result.type)


class Neg(Unary):
    """-x"""
    op = "neg"


class Abs(Unary):
    """|x|"""
    op = "abs"


class Not(Unary):
    """Logical not of a Bool."""
    op = "not"

    def result_type(self):
        return T.Bool


class Select(Instr):
    """`cond ? a : b`."""
    op = "select"
    operands = ("cond", "a", "b")
    pure = True

    def result_type(self):
        return self.result.type

    def check(self):
        t = type_of(self.cond)
        if t is not None and t is not T.Bool:
            return f"the condition is {t}, not Bool"
        for name, x in (("a", self.a), ("b", self.b)):
            tx = type_of(x)
            if tx is not None and not same_type(tx, self.result.type):
                return f"operand {name} is {tx}, not {self.result.type}"
        return None


class Cast(Instr):
    """x converted to the element type `to`; with ptr, a pointer seen as
    pointing to `to` elements (the same address)."""
    op = "cast"
    operands = ("x",)
    attributes = {"to": None, "ptr": False}
    pure = True

    def result_type(self):
        if self.ptr:
            t = type_of(self.x)
            return PtrType(self.to, t.space) if isinstance(t, PtrType) else None
        return self.to

    def check(self):
        if self.ptr and not isinstance(type_of(self.x), PtrType):
            return f"a pointer cast of {self.x!r}, which is not a pointer"
        return None


def _erf(f):
    return np.vectorize(f, otypes=[np.float64])


# fn -> (CUDA's Float32 function, its Float64 one, the CPU backend's, on float64 arrays)
MATH = {
    "exp": ("expf", "exp", np.exp), "exp2": ("exp2f", "exp2", np.exp2),
    "exp10": ("exp10f", "exp10", lambda x: np.power(10.0, x)),
    "expm1": ("expm1f", "expm1", np.expm1), "log": ("logf", "log", np.log),
    "log2": ("log2f", "log2", np.log2), "log10": ("log10f", "log10", np.log10),
    "log1p": ("log1pf", "log1p", np.log1p), "sqrt": ("sqrtf", "sqrt", np.sqrt),
    "rsqrt": ("rsqrtf", "rsqrt", lambda x: 1 / np.sqrt(x)), "cbrt": ("cbrtf", "cbrt", np.cbrt),
    "sin": ("sinf", "sin", np.sin), "cos": ("cosf", "cos", np.cos), "tan": ("tanf", "tan", np.tan),
    "asin": ("asinf", "asin", np.arcsin), "acos": ("acosf", "acos", np.arccos),
    "atan": ("atanf", "atan", np.arctan), "atan2": ("atan2f", "atan2", np.arctan2),
    "sinh": ("sinhf", "sinh", np.sinh), "cosh": ("coshf", "cosh", np.cosh),
    "tanh": ("tanhf", "tanh", np.tanh), "erf": ("erff", "erf", _erf(math.erf)),
    "erfc": ("erfcf", "erfc", _erf(math.erfc)), "hypot": ("hypotf", "hypot", np.hypot),
    "copysign": ("copysignf", "copysign", np.copysign),
    "fma": ("fmaf", "fma", lambda a, b, c: a * b + c), "pow": ("powf", "pow", np.power),
    "floor": ("floorf", "floor", np.floor), "ceil": ("ceilf", "ceil", np.ceil),
    "trunc": ("truncf", "trunc", np.trunc), "rint": ("rintf", "rint", np.rint)}


class Call(Instr):
    """A math function `fn` of MATH (exp, log, sin, pow, floor, ...) of
    floating-point operands of the result's type."""
    op = "call"
    operands = ("*xs",)
    attributes = {"fn": None}
    pure = True

    def result_type(self):
        return self.result.type

    def check(self):
        return None if self.fn in MATH else f"no math function {self.fn!r} (MATH has them)"


class Special(Instr):
    """A special register (`name`: threadIdx.x, blockIdx.y, blockDim.z,
    gridDim.x, ...), defined at the top of the kernel."""
    op = "special"
    attributes = {"name": None}
    pure = True

    def result_type(self):
        return T.Int32

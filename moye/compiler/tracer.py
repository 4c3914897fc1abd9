"""Tracing: running a kernel's Python body once to build its IR.

`Builder` collects statements into nested bodies. `Sym` is the dynamic
scalar of the layout algebra inside kernels: arithmetic on it emits IR
instructions, folding what is static. Every statement records the user's
source line, so errors and the generated code point at the kernel source.
"""
import linecache
import math
import operator
import os
import sys

import numpy as np

from .. import types as T
from ..errors import KernelError, MoyeError
from .. import ir

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_EXAMPLES_DIR = os.path.join(_PKG_DIR, "examples")


def user_location(seen=None):
    """The ir.Loc of the innermost frame of user code (outside the moye
    package, or in its examples); `seen`, a dict (file, line) -> Loc, gives
    the statements of one line one Loc."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        user = _USER_FILES.get(fn)
        if user is None:
            user = _USER_FILES[fn] = not fn.startswith(_PKG_DIR) or fn.startswith(_EXAMPLES_DIR)
        if user:
            key = (fn, f.f_lineno)
            loc = seen.get(key) if seen is not None else None
            if loc is None:
                loc = ir.Loc(fn, f.f_lineno, linecache.getline(fn, f.f_lineno).strip())
                if seen is not None:
                    seen[key] = loc
            return loc
        f = f.f_back
    return None


_USER_FILES = {}        # file name -> whether it holds user code


class Builder:
    """The kernel being traced: parameters, arrays and a stack of open bodies."""

    def __init__(self, name):
        self.kernel = ir.Kernel(name, [], [])
        self.bodies = [self.kernel.body]
        self.memo = [{}]            # pure instructions already emitted, per open body
        self.specials = {}
        self.loop_kinds = []
        self.dynamic_ifs = 0
        self.unrolled = 0           # open loops that NVRTC unrolls (control.for_loop)
        self.known = {}             # value id -> how it follows from those loops' variables
        self.leaves = {}            # value id -> unrolled.leaves of it, once found
        self.bounds = {}            # value id -> unrolled._bounds of it, once found
        self.guards = []            # (condition, polarity) of the open dynamic branches
        self.static_sites = {}      # loop site -> why it unrolls while tracing
        self.fast_math = False      # @moye.kernel(fast_math=True): approximate Float32 math
        self.locs = {}              # user_location's Loc of each (file, line) met

    def emit(self, stmt):
        if stmt.loc is None:
            stmt.loc = user_location(self.locs)
        self.bodies[-1].append(stmt)
        return stmt

    def instr(self, op, args, type=None, hint="v", **attrs):
        """Emit the instruction named `op` (its class in `ir.INSTRUCTIONS`) on
        `args`, with a result of `type` (None: no result); return the result.
        An equal pure instruction already emitted in an open body is reused."""
        cls = ir.instruction_class(op)
        key = None
        if cls.pure and type is not None and op != "special":
            key = (op, tuple(map(_key, args)), type,
                   tuple(sorted(attrs.items(), key=str)) if attrs else ())
            for memo in reversed(self.memo):
                hit = memo.get(key)
                if hit is not None:
                    return hit
        result = ir.Value(type, hint) if type is not None else None
        stmt = self.emit(cls(*args, result=result, **attrs))
        if key is not None:
            self.memo[-1][key] = result
            if self.unrolled and args and all(
                    a.id in self.known if isinstance(a, ir.Value) else isinstance(a, (int, float))
                    for a in args):
                self.known[result.id] = stmt
        return result

    def push(self, body):
        self.bodies.append(body)
        self.memo.append({})

    def pop(self):
        self.bodies.pop()
        self.memo.pop()


def _key(a):
    if isinstance(a, (int, float, bool)):
        return (type(a), a)
    return id(a)


_current = []


def current():
    if not _current:
        raise MoyeError("this operation only exists inside a @moye.kernel being traced")
    return _current[-1]


def tracing():
    return bool(_current)


class tracing_context:
    def __init__(self, builder):
        self.builder = builder

    def __enter__(self):
        _current.append(self.builder)
        return self.builder

    def __exit__(self, *exc):
        _current.pop()


# -- types ---------------------------------------------------------------------------

_INT_RANK = {"Bool": 0, "Int8": 1, "UInt8": 1, "Int16": 2, "UInt16": 2, "Int32": 3, "UInt32": 3,
             "Int64": 4, "UInt64": 4}
_FLOAT_RANK = {"Float16": 1, "BFloat16": 1, "TFloat32": 2, "Float32": 2, "Float64": 3}


def promote(a, b):
    """The C-like result type of a binary operation on types a and b."""
    if a is b:
        return a
    fa, fb = a.name in _FLOAT_RANK, b.name in _FLOAT_RANK
    if fa or fb:
        if fa and fb:
            if _FLOAT_RANK[a.name] == _FLOAT_RANK[b.name]:
                return T.Float32
            return a if _FLOAT_RANK[a.name] > _FLOAT_RANK[b.name] else b
        return a if fa else b
    ra, rb = _INT_RANK.get(a.name, 3), _INT_RANK.get(b.name, 3)
    r = max(ra, rb, 3)
    if r == 4:
        return T.UInt64 if "UInt64" in (a.name, b.name) else T.Int64
    return T.UInt32 if "UInt32" in (a.name, b.name) and max(ra, rb) == 3 else T.Int32


def type_of(x):
    if isinstance(x, Sym):
        return x.type
    if isinstance(x, bool):
        return T.Bool
    if isinstance(x, int):
        return T.Int32 if -2**31 <= x < 2**31 else T.Int64
    if isinstance(x, float):
        return T.Float32
    raise KernelError(f"{x!r} of type {type(x).__name__} cannot be used in kernel arithmetic")


def operand_type(sym, other):
    """The type of a binary op between a Sym and a Python number: an int
    takes the Sym's type; a float makes it at least Float32, as a double
    literal would in C++ (but not Float64: `x * 0.5` stays Float32), so
    `s = 0.0; s = s + h * h` accumulates in Float32 for a Float16 `h`;
    arithmetic on booleans happens in Int32, as in C."""
    if isinstance(other, Sym):
        t = promote(sym.type, other.type)
        return T.Int32 if t is T.Bool else t
    if isinstance(other, float) and _FLOAT_RANK.get(sym.type.name, 0) < 2:
        return T.Float32
    if isinstance(other, int) and not isinstance(other, bool) and not sym.type.is_float \
            and not -2**31 <= other < 2**31:
        return promote(sym.type, T.Int64)
    return sym.type if sym.type.name != "Bool" else T.Int32


_BITWISE = {"and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}


def _check_bitwise(op, t, a, b):
    """Refuse a bitwise operator of a float (Python raises a TypeError; C++
    would not compile), and a shift by a static amount outside 0..bits-1
    (C++ leaves it undefined; Python's result would need more bits)."""
    sign = _BITWISE.get(op, "~")
    if t.is_float:
        what = f"{_shown(a)} {sign} {_shown(b)}" if b is not None else f"~{_shown(a)}"
        raise KernelError(f"{what}: bitwise operators take integers, not {t} "
                          "(moye.cast(x, moye.Int32) converts a value)")
    if op in ("shl", "shr") and isinstance(b, int) and not 0 <= b < t.bits:
        raise KernelError(f"{_shown(a)} {sign} {b}: a shift of a {t.bits}-bit {t} by {b} is "
                          f"undefined in the kernel (C++); shift by 0..{t.bits - 1}, or cast to "
                          "moye.Int64 first")


def _shown(x):
    """A kernel value or a number as an error names it."""
    if not isinstance(x, Sym):
        return repr(x)
    return f"{'an' if x.type.name[0] in 'AEIO' else 'a'} {x.type} value"


def _gcd_div(a, b):
    return math.gcd(a, b) if a and b else (a or b)


def divisor_of(x):
    """A number known to divide `x`: a Sym's `div` (a power of two), a
    static int's own magnitude (2**30 for 0), 1 for anything else."""
    if isinstance(x, Sym):
        return x.div
    if isinstance(x, int):
        return abs(x) if x else 1 << 30
    return 1


def _scalar(x):
    return x.item() if isinstance(x, np.generic) else x


UFUNCS = {}
"""NumPy ufunc name -> the kernel's function of kernel values (Sym.__array_ufunc__):
Python's operators here, the math functions from moye.device.builtins."""

MATH_FUNCTIONS = {}
"""Python's math module's function name -> the kernel's function of kernel values
(control.math_), from moye.device.builtins; floor, ceil and trunc are Sym's dunders."""


class Sym:
    """A dynamic scalar inside a kernel: an IR value with Python operators.
    `div` is a power of two known to divide it (for vectorization)."""
    __slots__ = ("value", "type", "div")
    __hash__ = object.__hash__

    def __init__(self, value, type, div=1):
        self.value, self.type, self.div = value, type, div

    @property
    def __moye_divisor__(self):
        return self.div

    def __repr__(self):
        return f"Sym({self.value!r}: {self.type})"

    def __bool__(self):
        raise KernelError(
            f"the value {self.value!r} is only known when the kernel runs, so Python cannot "
            "branch on it here; use it in an `if`/`while` of the kernel body (rewritten into "
            "kernel control flow) or of a helper decorated with @moye.func, or "
            "moye.ifelse(cond, a, b)")

    def __index__(self):
        raise KernelError(f"the dynamic value {self.value!r} is used where a static int is needed")

    def __getitem__(self, index, value=None):
        raise KernelError(f"{_shown(self)} is a number, not an array: it has no elements to "
                          f"index with {_shown(index)} (an array argument is a NumPy array or "
                          "a tensor; a number passed for it is a scalar"
                          + ("; a 1-D array's shape is its extent, as CuTe's: x.shape is n, "
                             "not (n,)" if type(index) is int and index in (0, -1) else "") + ")")

    __setitem__ = __getitem__

    def __iter__(self):
        raise KernelError(f"{_shown(self)} is a number, not an array or a sequence: "
                          "there is nothing to iterate over")

    # reached where the rewrite did not send the call to control (int_, float_, math_):
    # in a function that is neither the kernel nor a @moye.func helper
    def __int__(self):
        raise KernelError(f"int() of the dynamic value {self.value!r}: it is only known at run "
                          "time (moye.cast(x, moye.Int32) converts it in the kernel; int(x) does "
                          "too in a kernel body or a @moye.func helper)")

    def __float__(self):
        raise KernelError(f"float() of the dynamic value {self.value!r}: it is only known at run "
                          "time (moye.cast(x, moye.Float32) converts it in the kernel; Python's "
                          "math.sqrt, math.exp, ... take floats: write moye.sqrt, moye.exp, ..., "
                          "or NumPy's np.sqrt, np.exp, ..., or call them from a kernel body or "
                          "a @moye.func helper, where they are the kernel's)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy's ufuncs of kernel values (np.exp(x), np.maximum(a, b),
        np.float32(2) * x): the kernel's function of that name
        (UFUNCS), called on the values."""
        fn = UFUNCS.get(ufunc.__name__) if method == "__call__" and not kwargs else None
        if fn is None:
            name = ufunc.__name__ + ("" if method == "__call__" else "." + method)
            raise KernelError(f"NumPy's {name}{' with ' + ', '.join(kwargs) if kwargs else ''} "
                              "of a kernel value is not a kernel function; see "
                              "docs/builtins.md for what a kernel body can call")
        if not any(isinstance(x, np.ndarray) for x in inputs):
            return fn(*(_scalar(x) for x in inputs))
        # with a NumPy array (of constants, or of kernel values): element by element
        shape = np.broadcast_shapes(*(np.shape(x) for x in inputs))
        args = [np.broadcast_to(x, shape) if isinstance(x, np.ndarray) else x for x in inputs]
        out = np.empty(shape, dtype=object)
        for at in np.ndindex(shape):
            out[at] = fn(*(_scalar(x[at]) if isinstance(x, np.ndarray) else x for x in args))
        return out

    def _rounded(self, fn):
        """Python's math.floor, math.ceil, math.trunc and round of a kernel
        value: an integer, as in Python (Int32; a float's rounding by
        floorf, ceilf, truncf or rintf, then converted)."""
        if not self.type.is_float:
            return self
        t = T.Float64 if self.type is T.Float64 else T.Float32
        return Sym.cast(Sym(current().instr("call", (coerce(self, t),), t, fn=fn), t), T.Int32)

    def __floor__(self):
        return self._rounded("floor")

    def __ceil__(self):
        return self._rounded("ceil")

    def __trunc__(self):
        return self._rounded("trunc")

    def __round__(self, ndigits=None):
        if ndigits is not None:
            raise KernelError(f"round() of the dynamic value {self.value!r} to {ndigits!r} "
                              "digits: only round(x), to the nearest integer, is a kernel's")
        return self._rounded("rint")             # halves to even, as Python's round

    def __pow__(self, o):
        """x ** n of a small static int n by multiplications (of x's type, as
        Python's int ** int is an int); other exponents by powf (pow for a
        Float64)."""
        if isinstance(o, int) and not isinstance(o, bool) and 0 <= o <= 16:
            result, square, n = 1, self, o
            while n:
                if n & 1:
                    result = square * result
                n >>= 1
                if n:
                    square = square * square
            return result if isinstance(result, Sym) else Sym.cast(1, self.type)
        return self._power(self, o)

    def __rpow__(self, o):
        return self._power(o, self)

    @staticmethod
    def _power(a, b):
        if not isinstance(a, (Sym, int, float)) or not isinstance(b, (Sym, int, float)) or \
                isinstance(a, bool) or isinstance(b, bool):
            return NotImplemented
        t = operand_type(a, b) if isinstance(a, Sym) else operand_type(b, a)
        if not t.is_float:
            raise KernelError(
                f"{_shown(a)} ** {_shown(b)} of integers: a kernel takes x ** n for a static n "
                "from 0 to 16 (multiplications), 1 << n for powers of two, and x ** y of floats "
                "(powf)")
        t = T.Float64 if t is T.Float64 else T.Float32
        return Sym(current().instr("call", (coerce(a, t), coerce(b, t)), t, fn="pow"), t)

    # arithmetic -------------------------------------------------------------
    def _bin(self, op, other, reflected=False, result=None):
        if not isinstance(other, (Sym, int, float)):
            return NotImplemented
        t = operand_type(self, other)
        a, b = (other, self) if reflected else (self, other)
        if op in _BITWISE:
            _check_bitwise(op, t, a, b)
        div = _div_rule(op, a, b)
        a, b = coerce(a, t), coerce(b, t)
        rt = result or t
        v = current().instr(op, (a, b), rt)
        return Sym(v, rt, div)

    def _true_div(self, other, reflected=False):
        """a / b; in a fast_math kernel, Float32 by div.approx.f32."""
        if not isinstance(other, (Sym, int, float)):
            return NotImplemented
        b = current()
        if b.fast_math and operand_type(self, other) is T.Float32:
            x, y = (other, self) if reflected else (self, other)
            v = b.instr("approx", (coerce(x, T.Float32), coerce(y, T.Float32)), T.Float32,
                        fn="div")
            return Sym(v, T.Float32)
        return self._bin("div", other, reflected)

    def __add__(self, o):
        if isinstance(o, int) and o == 0:
            return self
        return self._bin("add", o)

    def __radd__(self, o):
        if isinstance(o, int) and o == 0:
            return self
        return self._bin("add", o, True)

    def __sub__(self, o):
        if isinstance(o, int) and o == 0:
            return self
        return self._bin("sub", o)

    def __rsub__(self, o):
        return self._bin("sub", o, True)

    def __mul__(self, o):
        if isinstance(o, int) and not isinstance(o, bool):
            if o == 1:
                return self
            if o == 0 and not self.type.is_float:
                return 0
        return self._bin("mul", o)

    def __rmul__(self, o):
        if isinstance(o, int) and not isinstance(o, bool):
            if o == 1:
                return self
            if o == 0 and not self.type.is_float:
                return 0
        return self._bin("mul", o, True)

    def _int_div(self, other, reflected=False):
        """a // b of integers, truncated toward zero as in C; a float refused
        (C has no such division, and Python's floors)."""
        if isinstance(other, float) or self.type.is_float or \
                isinstance(other, Sym) and other.type.is_float:
            a, b = (_shown(x) for x in ((other, self) if reflected else (self, other)))
            raise KernelError(
                f"{a} // {b}: // divides integers (toward zero, as in C), and one of these is "
                "a float; write moye.floor(a / b) for Python's floor division, moye.trunc(a / "
                "b) for C's")
        return self._bin("div", other, reflected)

    def __floordiv__(self, o):
        if isinstance(o, int) and not isinstance(o, bool) and o == 1:
            return self
        return self._int_div(o)

    def __rfloordiv__(self, o):
        return self._int_div(o, True)

    def __truediv__(self, o):
        if not self.type.is_float and not isinstance(o, float) and \
                not (isinstance(o, Sym) and o.type.is_float):
            return Sym.cast(self, T.Float32)._true_div(o)
        return self._true_div(o)

    def __rtruediv__(self, o):
        if not self.type.is_float and not isinstance(o, float):
            return Sym.cast(self, T.Float32)._true_div(o, True)
        return self._true_div(o, True)

    def __mod__(self, o):
        if isinstance(o, int) and o == 1:
            return 0
        return self._bin("mod", o)

    def __rmod__(self, o):
        return self._bin("mod", o, True)

    def __and__(self, o): return self._bin("and", o)
    def __rand__(self, o): return self._bin("and", o, True)
    def __or__(self, o): return self._bin("or", o)
    def __ror__(self, o): return self._bin("or", o, True)
    def __xor__(self, o): return self._bin("xor", o)
    def __rxor__(self, o): return self._bin("xor", o, True)
    def __lshift__(self, o): return self._bin("shl", o)
    def __rlshift__(self, o): return self._bin("shl", o, True)
    def __rshift__(self, o): return self._bin("shr", o)
    def __rrshift__(self, o): return self._bin("shr", o, True)

    def __neg__(self):
        return Sym(current().instr("neg", (self.value,), self.type), self.type, self.div)

    def __pos__(self):
        return self

    def __abs__(self):
        return Sym(current().instr("abs", (self.value,), self.type), self.type, self.div)

    def __invert__(self):
        if self.type is T.Bool:
            return Sym(current().instr("not", (self.value,), T.Bool), T.Bool)
        _check_bitwise("invert", self.type, self, None)
        return Sym(current().instr("xor", (self.value, -1), self.type), self.type)

    def _cmp(self, op, o):
        if not isinstance(o, (Sym, int, float)):
            return NotImplemented
        t = operand_type(self, o)
        return Sym(current().instr(op, (coerce(self, t), coerce(o, t)), T.Bool), T.Bool)

    def __lt__(self, o): return self._cmp("lt", o)
    def __le__(self, o): return self._cmp("le", o)
    def __gt__(self, o): return self._cmp("gt", o)
    def __ge__(self, o): return self._cmp("ge", o)
    def __eq__(self, o): return self._cmp("eq", o)
    def __ne__(self, o): return self._cmp("ne", o)

    @staticmethod
    def cast(x, to):
        to = T.as_element_type(to)
        if isinstance(x, Sym):
            if x.type is to:
                return x
            return Sym(current().instr("cast", (x.value,), to, to=to), to, x.div)
        return Sym(current().instr("cast", (x,), to, to=to), to, divisor_of(x))


def coerce(x, t):
    """An operand of type t: a Sym's value (cast if needed) or a constant."""
    if isinstance(x, Sym):
        if x.type is t or (x.type.bits == t.bits and x.type.kind == t.kind
                           and x.type.numpy == t.numpy):     # TFloat32 is a Float32
            return x.value
        return current().instr("cast", (x.value,), t, to=t)
    if isinstance(x, bool):
        return int(x)
    if t.is_float:
        return float(x)
    return x


def _div_rule(op, a, b):
    """A power of two known to divide `a op b`, from those of a and b."""
    da, db = _pow2(divisor_of(a)), _pow2(divisor_of(b))
    if op in ("add", "sub"):
        return min(da, db)
    if op == "mul":
        return min(da * db, 1 << 30)
    if op == "div" and isinstance(b, int) and b > 0 and da % _pow2(b) == 0:
        return da // _pow2(b)
    return 1


def _pow2(n):
    """The largest power of two dividing n (n > 0)."""
    return n & -n if n > 0 else 1 << 30


def sym_select(cond, a, b):
    """cond ? a : b, folding static conditions."""
    if not isinstance(cond, Sym):
        return a if cond else b
    ta, tb = type_of(a), type_of(b)
    t = promote(ta, tb) if isinstance(a, Sym) or isinstance(b, Sym) else ta
    cv = cond.value if cond.type is T.Bool else (cond != 0).value
    v = current().instr("select", (cv, coerce(a, t), coerce(b, t)), t)
    return Sym(v, t, _gcd_div(divisor_of(a), divisor_of(b)))


UFUNCS.update(
    add=operator.add, subtract=operator.sub, multiply=operator.mul, true_divide=operator.truediv,
    floor_divide=operator.floordiv, remainder=operator.mod, power=operator.pow,
    negative=operator.neg, absolute=operator.abs, less=operator.lt, less_equal=operator.le,
    greater=operator.gt, greater_equal=operator.ge, equal=operator.eq, not_equal=operator.ne,
    bitwise_and=operator.and_, bitwise_or=operator.or_, bitwise_xor=operator.xor,
    invert=operator.invert, left_shift=operator.lshift, right_shift=operator.rshift,
    maximum=lambda a, b: sym_minmax("max", a, b), minimum=lambda a, b: sym_minmax("min", a, b))


def sym_minmax(op, a, b):
    if not isinstance(a, Sym) and not isinstance(b, Sym):
        return min(a, b) if op == "min" else max(a, b)
    t = promote(type_of(a), type_of(b))
    return Sym(current().instr(op, (coerce(a, t), coerce(b, t)), t), t)


def special(name, op="special", loc=None):
    """threadIdx.x and friends (or another IR `op` reading a special register,
    at source line `loc`), defined once at the top of the kernel."""
    b = current()
    s = b.specials.get(name)
    if s is None:
        v = ir.Value(T.Int32, name.replace(".", "_"))
        b.kernel.body.insert(len(b.specials), ir.instruction_class(op)(result=v, loc=loc, name=name))
        s = b.specials[name] = Sym(v, T.Int32, 1)
    return s

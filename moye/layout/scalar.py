"""Static and dynamic integers: the scalar protocol of the layout algebra.

A *static* value is a Python ``int`` (a NumPy integer scalar is turned into
one where layouts are built; a ``bool`` is refused, since ``Layout(True)`` is
a mistake, not the layout 1:0). A *dynamic* value is any other object with
integer arithmetic (``+ - * // %``, both sides, unary ``-``, ``abs``) and
comparisons whose results behave as 0/1 in arithmetic, the way Python's bools
do. Inside kernels the tracer's symbolic scalars are dynamic values; the
algebra never calls ``bool()`` on a dynamic value, and never branches on one.

The helpers here fold to plain ints whenever their inputs are static, and
drop the trivial operations (``x*1``, ``x+0``, ``x//1``) with a dynamic
operand so results stay small.
"""
import numbers

from ..errors import DynamicValueError, LayoutError, MoyeTypeError


def is_int(x):
    """True for an integer value: a Python int or a NumPy integer, not a bool.
        >>> is_int(3), is_int(np.int8(3)), is_int(True), is_int(3.0)
        (True, True, False, False)
    """
    return type(x) is int or isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_static(x):
    """True for a static integer (a Python int)."""
    return type(x) is int or isinstance(x, int)


def is_dynamic_scalar(x):
    """True for an object that can stand for a run-time integer (not a
    number, a string, a tuple or an array)."""
    return not isinstance(x, (int, tuple, str, bytes, numbers.Number)) and \
        not hasattr(x, "__array__") and \
        hasattr(x, "__add__") and hasattr(x, "__mul__") and hasattr(x, "__floordiv__")


def as_scalar(x, what="value"):
    """`x` as a static int (from a NumPy integer too) or a dynamic value; a
    MoyeTypeError for anything else (a float, a bool, an array).
        >>> as_scalar(np.int64(4)), type(as_scalar(np.int64(4)))
        (4, <class 'int'>)
    """
    if type(x) is int:
        return x
    if is_int(x):
        return int(x)
    if is_dynamic_scalar(x):
        return x
    raise not_an_int(x, what)


def not_an_int(x, what):
    """The MoyeTypeError for a value `x` given where an int is due."""
    kind = type(x).__name__
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        kind = f"{kind} of shape {tuple(x.shape)}"
    return MoyeTypeError(f"{what}: expected an integer, got {x!r} of type {kind}")


def require_static(x, what):
    """`x` as a static int, else a DynamicValueError naming `what` (a
    MoyeTypeError if it is no integer at all)."""
    if type(x) is int:
        return x
    if is_dynamic_scalar(x):
        raise DynamicValueError(f"{what} must be static (known while tracing), "
                                f"got the dynamic value {x!r}")
    return as_scalar(x, what)


def require_positive(x, what):
    """`x` itself, a LayoutError if it is a static int below 1 (a dynamic
    value passes: it cannot be checked while tracing)."""
    if type(x) is int and x < 1:
        raise LayoutError(f"{what} must be positive, got {x}")
    return x


def known_divisor(x):
    """A power of two known to divide `x`: from the value when static, from
    a dynamic value's `__moye_divisor__` (1 if it has none)."""
    if type(x) is int:
        return x & -x if x else 1 << 30
    return getattr(x, "__moye_divisor__", 1)


def is_const(x, value):
    """True when `x` is the static integer `value` (CuTe's is_constant)."""
    return type(x) is int and x == value


def mul(a, b):
    if type(a) is int:
        if type(b) is int:
            return a * b
        if a == 1:
            return b
        if a == 0:
            return 0
    elif type(b) is int:
        if b == 1:
            return a
        if b == 0:
            return 0
    return a * b


def add(a, b):
    if type(a) is int:
        if type(b) is int:
            return a + b
        if a == 0:
            return b
    elif type(b) is int and b == 0:
        return a
    return a + b


def sub(a, b):
    if type(b) is int and b == 0:
        return a
    return a - b


def floordiv(a, b):
    if type(b) is int and b == 1:
        return a
    return a // b


def ceil_div(a, b):
    """ceil(a / b) for positive b."""
    if type(a) is int and type(b) is int:
        return -(-a // b)
    if type(b) is int and b == 1:
        return a
    return (a + b - 1) // b


def sign(x):
    return (x > 0) - (x < 0)


def smin(a, b):
    if type(a) is int and type(b) is int:
        return a if a < b else b
    return b + (a - b) * (a < b)


def smax(a, b):
    if type(a) is int and type(b) is int:
        return a if a > b else b
    return a + (b - a) * (a < b)


def same(a, b):
    """Structural identity of two int tuples: ints by value, dynamic values
    by identity (the algebra cannot compare them)."""
    if type(a) is tuple:
        return type(b) is tuple and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is int:
        return type(b) is int and a == b
    return a is b

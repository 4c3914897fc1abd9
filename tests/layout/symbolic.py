"""A symbolic integer for testing the algebra's dynamic-value protocol: an
expression tree with integer arithmetic, printable, evaluated in an environment.

It is deliberately dumb: no simplification at all, so whatever folds to a
plain int in a result was folded by moye; hashable by identity; and it has
no truth value, so an algebra that branches on a dynamic value (calls bool()
on it, or on a comparison of it) fails loudly with TypeError.

The protocol moye documents is + - * // % (both sides), unary -, abs and
comparisons (whose results act as 0/1 in arithmetic). The bitwise operators
& | ^ << >> are extra: only swizzles of dynamic offsets use them.
"""
import operator


class S:
    """An integer known only by name; arithmetic builds expressions."""
    __hash__ = object.__hash__

    def __init__(self, op, *args):
        self.op, self.args = op, args

    @staticmethod
    def var(name):
        return S("var", name)

    def eval(self, env):
        if self.op == "var":
            return env[self.args[0]]
        vals = [a.eval(env) if isinstance(a, S) else a for a in self.args]
        return _OPS[self.op][0](*vals)

    def variables(self):
        if self.op == "var":
            return {self.args[0]}
        return set().union(*[a.variables() for a in self.args if isinstance(a, S)])

    def __repr__(self):
        if self.op == "var":
            return self.args[0]
        sym = _OPS[self.op][1]
        if len(self.args) == 1:
            return f"{sym}({self.args[0]!r})"
        return f"({self.args[0]!r} {sym} {self.args[1]!r})"

    def __bool__(self):
        raise TypeError(f"a symbolic integer has no truth value: {self!r}")

    def __index__(self):
        raise TypeError(f"a symbolic integer is not a Python int: {self!r}")

    def _bin(op, reflected=False):
        def f(self, other):
            if not isinstance(other, (S, int)):
                return NotImplemented
            return S(op, other, self) if reflected else S(op, self, other)
        return f

    __add__, __radd__ = _bin("add"), _bin("add", True)
    __sub__, __rsub__ = _bin("sub"), _bin("sub", True)
    __mul__, __rmul__ = _bin("mul"), _bin("mul", True)
    __floordiv__, __rfloordiv__ = _bin("floordiv"), _bin("floordiv", True)
    __mod__, __rmod__ = _bin("mod"), _bin("mod", True)
    __lt__, __le__ = _bin("lt"), _bin("le")
    __gt__, __ge__ = _bin("gt"), _bin("ge")
    __eq__, __ne__ = _bin("eq"), _bin("ne")
    __and__, __rand__ = _bin("and"), _bin("and", True)
    __or__, __ror__ = _bin("or"), _bin("or", True)
    __xor__, __rxor__ = _bin("xor"), _bin("xor", True)
    __lshift__, __rlshift__ = _bin("lshift"), _bin("lshift", True)
    __rshift__, __rrshift__ = _bin("rshift"), _bin("rshift", True)

    @property
    def __moye_divisor__(self):
        """A power of two known to divide the value: a product's factors'
        divisors multiply, a sum keeps the smallest of its terms'."""
        def div(x):
            return (x & -x if x else 1 << 30) if type(x) is int else x.__moye_divisor__
        if self.op == "mul":
            return min(div(self.args[0]) * div(self.args[1]), 1 << 30)
        if self.op in ("add", "sub"):
            return min(div(self.args[0]), div(self.args[1]))
        return 1

    def __neg__(self):
        return S("neg", self)

    def __abs__(self):
        return S("abs", self)


_OPS = {"add": (operator.add, "+"), "sub": (operator.sub, "-"), "mul": (operator.mul, "*"),
        "floordiv": (operator.floordiv, "//"), "mod": (operator.mod, "%"),
        "lt": (operator.lt, "<"), "le": (operator.le, "<="), "gt": (operator.gt, ">"),
        "ge": (operator.ge, ">="), "eq": (operator.eq, "=="), "ne": (operator.ne, "!="),
        "and": (operator.and_, "&"), "or": (operator.or_, "|"), "xor": (operator.xor, "^"),
        "lshift": (operator.lshift, "<<"), "rshift": (operator.rshift, ">>"),
        "neg": (operator.neg, "-"), "abs": (abs, "abs")}


def evaluate(x, env):
    """An int tuple (or a value) with its symbolic leaves evaluated."""
    if isinstance(x, tuple):
        return tuple(evaluate(e, env) for e in x)
    return x.eval(env) if isinstance(x, S) else x


def is_static(x):
    """Every leaf a plain Python int."""
    if isinstance(x, tuple):
        return all(is_static(e) for e in x)
    return type(x) is int

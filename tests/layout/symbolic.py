"""A symbolic integer for testing the algebra's dynamic-value protocol:
an expression tree with integer arithmetic, evaluated in an environment."""
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
        return _OPS[self.op](*vals)

    def __repr__(self):
        if self.op == "var":
            return self.args[0]
        return f"{self.op}({', '.join(map(repr, self.args))})"

    def __bool__(self):
        raise TypeError("a symbolic integer has no truth value")

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

    def __neg__(self):
        return S("neg", self)

    def __abs__(self):
        return S("abs", self)


_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
        "floordiv": operator.floordiv, "mod": operator.mod, "lt": operator.lt,
        "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
        "ne": operator.ne, "neg": operator.neg, "abs": abs}


def evaluate(x, env):
    """An int tuple with symbolic leaves evaluated."""
    if isinstance(x, tuple):
        return tuple(evaluate(e, env) for e in x)
    return x.eval(env) if isinstance(x, S) else x

"""Values inside loops that NVRTC unrolls: what they are in each iteration.

A `for` over a static range is traced once, with a symbolic loop variable,
and emitted as a C++ loop under `#pragma unroll` (control.for_loop). After
unrolling, every value computed only from loop variables and constants is
a constant, so such a value may index a register fragment, and its static
bounds can still be checked while tracing: the Builder records how each of
those values is computed (`Builder.known`), and this module evaluates them
for every iteration, skipping iterations that a dynamic `if` on such a
value excludes.

    >>> from moye.compiler import tracer
    >>> b = tracer.Builder("k")
    >>> b.unrolled += 1                 # inside one unrolled loop
    >>> with tracer.tracing_context(b):
    ...     k = loop_variable(b, 0, 4, 1)
    ...     values(b, (k * 2 + 1).value)
    [1, 3, 5, 7]
"""
import itertools
import math

from .. import types as T
from ..array.array import on_dynamic_coordinate
from ..errors import BoundsError
from .. import ir
from .tracer import KernelError, Sym, current, tracing

COMBINATIONS_LIMIT = 1 << 14
"""The most iterations an index is checked over (nested unrolled loops
multiply); past it the loop unrolls while tracing instead."""


class Unknown(Exception):
    """A value does not follow from the unrolled loops' variables alone."""


class IV:
    """The variable of an unrolled loop: start, stop, step (ints)."""
    __slots__ = ("values",)

    def __init__(self, start, stop, step):
        self.values = range(start, stop, step)


class CarriedRead:
    """A loop-carried value read at the top of an unrolled loop's body;
    `slot` is its place in the loop's carried names."""
    __slots__ = ("loop", "slot")

    def __init__(self, loop, slot):
        self.loop, self.slot = loop, slot


def loop_variable(b, start, stop, step, read=None):
    """A Sym for the variable of an unrolled loop over range(start, stop,
    step), known to `b`; `read` the IR value that reads it (made if None)."""
    if read is None:
        read = ir.Value(T.Int32, "i")
    b.known[read.id] = IV(start, stop, step)
    return Sym(read, T.Int32, _pow2_dividing(start, step))


def _pow2_dividing(start, step):
    g = math.gcd(start, step)
    return g & -g if g else 1 << 30


def leaves(b, x):
    """The loop variables and carried reads that `x` is computed from (a set
    of known entries' value ids); Unknown if it depends on anything else.
    A value's entry is made with it and never changes, so each value's
    leaves are found once per trace (`b.leaves`)."""
    if isinstance(x, (int, float, bool)):
        return frozenset()
    if isinstance(x, Sym):
        x = x.value
    if not isinstance(x, ir.Value):
        raise Unknown(x)
    out = b.leaves.get(x.id)
    if out is not None:
        return out
    k = b.known.get(x.id)
    if k is None:
        raise Unknown(x)
    if isinstance(k, (IV, CarriedRead)):
        out = frozenset((x.id,))
    else:
        out = frozenset().union(*(leaves(b, a) for a in k.args))
    b.leaves[x.id] = out
    return out


def values(b, x):
    """The values `x` takes in the iterations that reach the current point
    (the open branches' known conditions hold), in iteration order.
    Unknown if `x` or the iteration count is not known."""
    if isinstance(x, (int, float, bool)):
        return [x]
    guards = []
    for cond, polarity in b.guards:
        try:
            guards.append((cond, polarity, leaves(b, cond)))
        except Unknown:
            pass                    # a run-time condition: the iteration may reach here
    ids = set(leaves(b, x))
    for _, _, g in guards:
        ids |= g
    if any(not isinstance(b.known[i], IV) for i in ids):
        raise Unknown(x)
    ids = sorted(ids)
    ranges = [b.known[i].values for i in ids]
    if math.prod(len(r) for r in ranges) > COMBINATIONS_LIMIT:
        raise Unknown(x)
    out = []
    for combo in itertools.product(*ranges):
        env = dict(zip(ids, combo))
        cache = {}
        if all(bool(_eval(b, c, env, cache)) == p for c, p, _ in guards):
            out.append(_eval(b, x, env, cache))
    return out


def check_range(x, lo, hi, what):
    """A BoundsError unless lo <= x < hi in every iteration that reaches
    here; Unknown if x is not known in every iteration."""
    b, x = current(), x.value if isinstance(x, Sym) else x
    if _inside(b, x, lo, hi):
        return
    vals = values(b, x)
    bad = [i for i in vals if not lo <= i < hi]
    if bad:
        raise BoundsError(f"{what} is {bad[0]} in an iteration of an unrolled loop; it must lie "
                          f"in [{lo}, {hi})")


@on_dynamic_coordinate
def check_coordinate(c, extent, describe):
    """A coordinate computed from unrolled loops' variables, checked in every
    iteration as a static one is (a run-time coordinate is not checked)."""
    if tracing() and current().unrolled and isinstance(c, Sym):
        try:
            check_range(c, 0, extent, describe())
        except Unknown:
            pass


def check_register_index(idx, size):
    """A register fragment's element index: static after unrolling and inside
    the fragment (`size` elements, None if not known) in every iteration."""
    try:
        check_range(idx, 0, size if size is not None else 1 << 62,
                    "a register fragment's element index")
    except Unknown:
        raise KernelError("a register fragment is indexed with a dynamic value; fragments live "
                          "in registers and take static indices only (or indices computed from "
                          "the variables of loops NVRTC unrolls)") from None


def _inside(b, x, lo, hi):
    """Whether lo <= x < hi surely holds in every iteration, found from
    bounds on x (not from each iteration's value) where values(b, x) would
    find each value and raise nothing; False where unsure: values() decides
    (and raises, or names the first bad value)."""
    if isinstance(x, ir.Value):
        if any(_known_leaves(b, cond) for cond, _ in b.guards):
            return False            # some iterations skip here: values() knows which
        try:
            ids = leaves(b, x)
        except Unknown:
            return False
        if math.prod(len(b.known[i].values) if isinstance(b.known[i], IV) else 0
                     for i in ids) > COMBINATIONS_LIMIT:
            return False
    span = _bounds(b, x, b.bounds)
    return span is not None and lo <= span[0] and span[1] < hi


def _known_leaves(b, x):
    try:
        leaves(b, x)
        return True
    except Unknown:
        return False


def _bounds(b, x, cache):
    """(least, greatest) int value of x over every combination of its loop
    variables, where each step is an int operation that cannot fail (values()
    would raise Unknown on none of them); None otherwise. `cache`: the
    values' bounds found so far (b.bounds: like leaves, once per trace)."""
    if type(x) is int or type(x) is bool:
        return int(x), int(x)
    if not isinstance(x, ir.Value):
        return None
    if x.id in cache:
        return cache[x.id]
    k = b.known.get(x.id)
    out = None
    if isinstance(k, IV):
        out = (min(k.values), max(k.values)) if len(k.values) else None
    elif k is not None and not isinstance(k, CarriedRead) and not k.result.type.is_float:
        args = [_bounds(b, a, cache) for a in k.args]
        if None not in args:
            rule = _BOUNDS.get((k.op, len(args)))
            out = rule(args, k.result.type) if rule is not None else None
    cache[x.id] = out
    return out


def _corners(f, a, c):
    vals = [f(p, q) for p in a for q in c]
    return min(vals), max(vals)


def _div_bounds(args, t):
    a, c = args
    if c[0] <= 0 <= c[1]:
        return None                 # a division by zero in some iteration
    return _corners(_c_div, a, c)


def _mod_bounds(args, t):
    (a0, a1), (c0, c1) = args
    if c0 != c1 or c0 == 0:
        return None
    m = abs(c0) - 1                 # C's remainder takes the dividend's sign
    if 0 <= a0 and a1 <= m or -m <= a0 and a1 <= 0:
        return a0, a1
    return (0 if a0 >= 0 else -m), (0 if a1 <= 0 else m)


def _abs_bounds(args, t):
    (a0, a1), = args
    return (a0, a1) if a0 >= 0 else (-a1, -a0) if a1 <= 0 else (0, max(-a0, a1))


def _cast_bounds(args, t):
    (a0, a1), = args
    if t.name == "Bool" or t.kind not in ("int", "uint"):
        return None
    lo, hi = (-(1 << (t.bits - 1)), 1 << (t.bits - 1)) if t.kind == "int" else (0, 1 << t.bits)
    return (a0, a1) if lo <= a0 and a1 < hi else None


_BOUNDS = {                         # (op, operand count): bounds of the result
    ("add", 2): lambda args, t: (args[0][0] + args[1][0], args[0][1] + args[1][1]),
    ("sub", 2): lambda args, t: (args[0][0] - args[1][1], args[0][1] - args[1][0]),
    ("mul", 2): lambda args, t: _corners(lambda p, q: p * q, *args),
    ("min", 2): lambda args, t: (min(args[0][0], args[1][0]), min(args[0][1], args[1][1])),
    ("max", 2): lambda args, t: (max(args[0][0], args[1][0]), max(args[0][1], args[1][1])),
    ("neg", 1): lambda args, t: (-args[0][1], -args[0][0]),
    ("div", 2): _div_bounds, ("mod", 2): _mod_bounds, ("abs", 1): _abs_bounds,
    ("cast", 1): _cast_bounds,
}


def _eval(b, x, env, cache):
    if not isinstance(x, ir.Value):
        return x
    if x.id in env:
        return env[x.id]
    hit = cache.get(x.id)
    if hit is not None:
        return hit
    s = b.known[x.id]
    args = [_eval(b, a, env, cache) for a in s.args]
    out = _apply(s.op, args, s.result.type)
    cache[x.id] = out
    return out


def _c_div(a, c):
    q = abs(a) // abs(c)
    return q if (a >= 0) == (c >= 0) else -q


_OPS = {
    "add": lambda a, c: a + c, "sub": lambda a, c: a - c, "mul": lambda a, c: a * c,
    "and": lambda a, c: a & c, "or": lambda a, c: a | c, "xor": lambda a, c: a ^ c,
    "shl": lambda a, c: a << c, "shr": lambda a, c: a >> c,
    "lt": lambda a, c: a < c, "le": lambda a, c: a <= c, "gt": lambda a, c: a > c,
    "ge": lambda a, c: a >= c, "eq": lambda a, c: a == c, "ne": lambda a, c: a != c,
    "min": min, "max": max,
}


def _apply(op, args, t):
    if t.is_float or any(isinstance(a, float) for a in args):
        raise Unknown(op)           # indices and conditions in integers only
    if op in _OPS:
        return int(_OPS[op](*args))
    if op in ("div", "mod"):
        if args[1] == 0:
            raise Unknown(op)
        q = _c_div(*args)
        return q if op == "div" else args[0] - q * args[1]
    if op == "neg":
        return -args[0]
    if op == "not":
        return int(not args[0])
    if op == "abs":
        return abs(args[0])
    if op == "select":
        return args[1] if args[0] else args[2]
    if op == "cast" and t.name == "Bool":
        return int(bool(args[0]))
    if op == "cast":
        signed = t.kind == "int"
        lo, hi = (-(1 << (t.bits - 1)), 1 << (t.bits - 1)) if signed else (0, 1 << t.bits)
        if lo <= args[0] < hi:
            return args[0]
    raise Unknown(op)

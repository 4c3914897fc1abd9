"""Run-time side of the control-flow rewrite (see rewrite.py): each loop or
branch is static (Python runs it) or dynamic (it becomes IR control flow),
decided by whether its range or condition holds a dynamic value.
"""
import builtins

import numpy as np

from .. import types as T
from ..array import MoYeArray
from ..errors import MoyeTypeError
from .. import ir
from .memory import PointerEngine
from .tracer import KernelError, Sym, coerce, current, promote, sym_minmax, sym_select, type_of


class _Unbound:
    """The value of a name that is not bound (yet)."""

    def __repr__(self):
        return "<unbound>"


UNBOUND = _Unbound()


class OutOfScope:
    """A name assigned inside dynamic control flow and used after it without
    a value on every path."""

    def __init__(self, name, why=None):
        self.name, self.why = name, why

    def _fail(self, *a, **k):
        raise KernelError(self.why or f"'{self.name}' is assigned inside a dynamic branch or "
                          "loop but has no value on every path; give it a value before the "
                          "branch")

    # every use is the error, printing included (a store shows the value it refuses)
    __getattr__ = __call__ = __add__ = __radd__ = __mul__ = __getitem__ = __bool__ = _fail
    __sub__ = __rsub__ = __rmul__ = __truediv__ = __floordiv__ = __mod__ = __neg__ = _fail
    __lt__ = __le__ = __gt__ = __ge__ = __index__ = __int__ = __float__ = __repr__ = _fail


def get(thunk):
    try:
        return thunk()
    except (NameError, UnboundLocalError):
        return UNBOUND


def is_dynamic(x):
    return isinstance(x, Sym)


# -- carried state: scalars and array pointers held in variables ----------------------

class _Slot:
    """One name carried through dynamic control flow, held in an IR variable."""

    def __init__(self, name, example):
        self.name = name
        if example is UNBOUND:
            self.kind = "temp"
        elif isinstance(example, MoYeArray) and isinstance(example.engine, PointerEngine):
            eng = example.engine
            self.kind, self.layout = "array", example.layout
            self.dtype, self.space, self.align = eng.dtype, eng.space, eng.align
            self.var = ir.Var(ir.PtrType(eng.dtype, eng.space), "p")
        elif isinstance(example, (Sym, int, float)) and not isinstance(example, bool):
            self.kind = "scalar"
            self.var = ir.Var(type_of(example), name if name.isidentifier() else "x")
        else:
            self.kind, self.example = "static", example

    def encode(self, value):
        """The IR operand to store for `value`."""
        if self.kind == "scalar":
            if not isinstance(value, (Sym, int, float)):
                raise KernelError(f"'{self.name}' changes from a number to {value!r} inside "
                                  "dynamic control flow")
            return coerce(value, self.var.type)
        if self.kind == "array":
            if not isinstance(value, MoYeArray) or value.layout != self.layout or \
                    value.engine.dtype is not self.dtype:
                raise KernelError(f"'{self.name}' must stay an array of layout {self.layout} "
                                  f"inside dynamic control flow, got {value!r}")
            return pointer_of(value.engine)
        return None

    def decode(self):
        b = current()
        if self.kind == "temp":
            return UNBOUND
        if self.kind == "scalar":
            v = b.instr("read", (self.var,), self.var.type, hint=self.var.hint)
            return Sym(v, self.var.type)
        if self.kind == "array":
            v = b.instr("read", (self.var,), self.var.type, hint="p")
            return MoYeArray.view_of(PointerEngine(v, self.dtype, self.space, 0, self.align),
                                     self.layout)
        return self.example

    def check_static(self, value):
        if self.kind == "static" and value is not self.example and value is not UNBOUND:
            same = False
            try:
                same = bool(value == self.example)
            except Exception:
                pass
            if not same:
                raise KernelError(f"'{self.name}' holds the static value {self.example!r} and is "
                                  f"reassigned to {value!r} inside dynamic control flow; only "
                                  "numbers and arrays can change there")


def pointer_of(engine):
    """A pointer Value to an engine's first element."""
    b = current()
    base = engine.base
    if isinstance(base, ir.Array):
        base = b.instr("addr", (base,), ir.PtrType(base.elem, engine.space))
    off = engine.offset
    if isinstance(off, int) and off == 0:
        return base
    off = coerce(off, T.Int32) if isinstance(off, Sym) else off
    return b.instr("offset", (base, off), ir.PtrType(engine.dtype, engine.space))


def _declare(slot, value, body, index=None):
    init = slot.encode(value) if value is not UNBOUND else None
    stmt = ir.Instr("decl", (slot.var, init))
    if index is None:
        current().emit(stmt)
    else:
        body.insert(index, stmt)


# -- for -----------------------------------------------------------------------------

STATIC_UNROLL_LIMIT = 65536
"""The most iterations one loop may unroll while tracing (a static `for`, or
a `while` whose condition is static): past it, tracing stops with a
KernelError instead of running on, or filling memory, for ever."""


class range:
    """A dynamic-or-static range with an explicit unroll request:
    `for k in moye.range(n, unroll=4)`. With static bounds and no unroll it
    unrolls completely, like Python's range. Its bounds are ints or dynamic
    integers, and its step is not 0: a dynamic step's sign is checked when
    the kernel runs."""

    def __init__(self, *args, unroll=None):
        if not 1 <= len(args) <= 3:
            raise MoyeTypeError("range(stop) or range(start, stop[, step])")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else \
            (args[0], args[1], args[2] if len(args) == 3 else 1)
        self.start, self.stop, self.step, self.unroll = start, stop, step, unroll
        if self.dynamic:
            for what, x in (("start", start), ("stop", stop), ("step", step)):
                if isinstance(x, Sym) and x.type.is_float or \
                        not isinstance(x, (Sym, int, np.integer)):
                    raise MoyeTypeError(f"range() {what} must be an integer, got {x!r}")
            self.start, self.stop, self.step = (x if isinstance(x, Sym) else int(x)
                                                for x in (start, stop, step))
        if isinstance(step, (int, np.integer)) and step == 0:
            raise KernelError("range() step must not be 0")

    @property
    def dynamic(self):
        return self.unroll is not None or any(isinstance(x, Sym) for x in
                                              (self.start, self.stop, self.step))


class for_loop:
    def __init__(self, iterable, names, values):
        self.names, self.values = names, list(values)
        self.dynamic = isinstance(iterable, range) and iterable.dynamic
        if not self.dynamic:
            if isinstance(iterable, range):
                iterable = builtins.range(iterable.start, iterable.stop, iterable.step)
            if isinstance(iterable, builtins.range) and \
                    iterable[STATIC_UNROLL_LIMIT:STATIC_UNROLL_LIMIT + 1]:
                raise _too_long(f"this `for` over {iterable} would unroll more than "
                                f"{STATIC_UNROLL_LIMIT} times")
            self.iterable = iterable
            return
        self.range = iterable
        b = current()
        self.slots = [_Slot(n, v) for n, v in zip(names, values)]
        for s, v in zip(self.slots, values):
            if s.kind in ("scalar", "array"):
                _declare(s, v, None)
        t = promote(promote(type_of(iterable.start), type_of(iterable.stop)),
                    type_of(iterable.step))
        self.iv = ir.Var(T.Int32 if t.name in ("Bool", "Int8", "Int16") else t, "i")
        start = coerce(iterable.start, self.iv.type)
        stop = coerce(iterable.stop, self.iv.type)
        step = coerce(iterable.step, self.iv.type)
        self.stmt = ir.For(self.iv, start, stop, step, [], iterable.unroll)
        b.emit(self.stmt)

    def __iter__(self):
        b = current()
        if not self.dynamic:
            b.loop_kinds.append("static")
            try:
                for n, x in enumerate(self.iterable):
                    if n == STATIC_UNROLL_LIMIT:
                        raise _too_long("this `for` over a static iterable has not ended")
                    yield x
            finally:
                b.loop_kinds.pop()
            return
        b.push(self.stmt.body)
        b.loop_kinds.append("dynamic")
        try:
            v = b.instr("read", (self.iv,), self.iv.type, hint="i")
            yield Sym(v, self.iv.type, 1)
        finally:
            b.loop_kinds.pop()
            b.pop()

    def carried(self):
        if not self.dynamic:
            return tuple(self.values) if len(self.values) != 1 else self.values[0]
        out = tuple(s.decode() for s in self.slots)
        return out if len(out) != 1 else out[0]

    def next(self, values):
        if not self.dynamic:
            self.values = list(values)
            return
        _write_slots(self.slots, values)

    def done(self):
        if not self.dynamic:
            return tuple(self.values) if len(self.values) != 1 else self.values[0]
        out = tuple(OutOfScope(s.name) if s.kind == "temp" else s.decode() for s in self.slots)
        return out if len(out) != 1 else out[0]

    def targets(self, names, values):
        """The loop's variables after it: as Python leaves them after a static
        loop; after a dynamic loop they have no value."""
        if self.dynamic:
            out = tuple(OutOfScope(n, f"'{n}' is the variable of a dynamic loop and has no "
                                      "value after it; keep what you need in another "
                                      "variable") for n in names)
        else:
            out = tuple(OutOfScope(n, f"'{n}' has no value: the loop ran no times")
                        if v is UNBOUND else v for n, v in zip(names, values))
        return out if len(out) != 1 else out[0]


def _too_long(what):
    return KernelError(f"{what}; a loop unrolled while tracing may run at most "
                       f"{STATIC_UNROLL_LIMIT} times (moye.kernel.control.STATIC_UNROLL_LIMIT). "
                       "For a loop that stays a loop in the kernel, give it a dynamic bound or "
                       "write moye.range(n, unroll=1)")


def _write_slots(slots, values):
    b = current()
    for s, v in zip(slots, values):
        if s.kind == "static":
            s.check_static(v)
        elif s.kind != "temp":
            b.instr("write", (s.var, s.encode(v)))


# -- while ---------------------------------------------------------------------------

class while_loop:
    def __init__(self, names, values, test):
        self.names, self.values = names, list(values)
        b = current()
        scratch = []
        b.push(scratch)
        try:
            probe = test()
        finally:
            b.pop()
        self.dynamic = isinstance(probe, Sym)
        self.state = "start"
        self.count = 0
        if not self.dynamic:
            b.loop_kinds.append("static")
            return
        self.slots = [_Slot(n, v) for n, v in zip(names, values)]
        for s, v in zip(self.slots, values):
            if s.kind in ("scalar", "array"):
                _declare(s, v, None)
        self.stmt = ir.While([], None, [])
        b.emit(self.stmt)

    def carried(self):
        if not self.dynamic:
            return tuple(self.values) if len(self.values) != 1 else self.values[0]
        b = current()
        b.push(self.stmt.cond_body)
        self.state = "cond"
        out = tuple(s.decode() for s in self.slots)
        return out if len(out) != 1 else out[0]

    def test(self, cond):
        if not self.dynamic:
            if isinstance(cond, Sym):
                raise KernelError("a while condition that was static became dynamic")
            self.count += 1
            if self.count > STATIC_UNROLL_LIMIT and cond:
                raise _too_long("this `while` has a static condition (Python runs it while "
                                "tracing) that is still true")
            return bool(cond)
        b = current()
        if not isinstance(cond, Sym):
            cond = Sym(b.instr("cast", (bool(cond),), T.Bool, to=T.Bool), T.Bool)
        self.stmt.cond = cond.value if cond.type is T.Bool else (cond != 0).value
        b.pop()
        b.push(self.stmt.body)
        b.loop_kinds.append("dynamic")
        self.state = "body"
        return True

    def next(self, values):
        if not self.dynamic:
            self.values = list(values)
            return
        b = current()
        _write_slots(self.slots, values)
        b.loop_kinds.pop()
        b.pop()
        self.state = "done"

    def finished(self):
        return self.dynamic and self.state == "done"

    def done(self):
        if not self.dynamic:
            current().loop_kinds.pop()
            return tuple(self.values) if len(self.values) != 1 else self.values[0]
        out = tuple(OutOfScope(s.name) if s.kind == "temp" else s.decode() for s in self.slots)
        return out if len(out) != 1 else out[0]


# -- if --------------------------------------------------------------------------------

class if_:
    def __init__(self, cond, names, values):
        self.names, self.before = names, list(values)
        self.dynamic = isinstance(cond, Sym)
        self.then_values = self.else_values = None
        if not self.dynamic:
            self.cond = bool(cond)
            return
        c = cond.value if cond.type is T.Bool else (cond != 0).value
        self.stmt = ir.If(c, [], [])
        b = current()
        b.emit(self.stmt)
        self.parent = b.bodies[-1]
        self.index = len(self.parent) - 1

    def then(self):
        if not self.dynamic:
            return self.cond
        current().push(self.stmt.then)
        current().dynamic_ifs += 1
        return True

    def then_done(self, values):
        self.then_values = list(values)
        if self.dynamic:
            current().dynamic_ifs -= 1
            current().pop()

    def orelse(self):
        if not self.dynamic:
            return not self.cond
        current().push(self.stmt.orelse)
        current().dynamic_ifs += 1
        return True

    def restore(self):
        """The values before the if of the merged names, then of the names the
        else-branch reads before assigning (the then-branch ran first)."""
        vals = self.before
        return tuple(vals) if len(vals) != 1 else vals[0]

    def else_done(self, values):
        self.else_values = list(values)
        if self.dynamic:
            current().dynamic_ifs -= 1
            current().pop()

    def result(self):
        if not self.dynamic:
            vals = self.then_values if self.cond else self.else_values
            vals = self.before if vals is None else vals
        else:
            vals = [self._merge(i) for i in builtins.range(len(self.names))]
        return tuple(vals) if len(vals) != 1 else vals[0]

    def _merge(self, i):
        name, before = self.names[i], self.before[i]
        t = self.then_values[i] if self.then_values is not None else before
        e = self.else_values[i] if self.else_values is not None else before
        if t is e:
            return t
        if t is UNBOUND or e is UNBOUND:
            return OutOfScope(name)
        slot = _Slot(name, t)
        if slot.kind == "static":
            slot.check_static(e)
            return t
        decl = ir.Instr("decl", (slot.var, None))
        self.parent.insert(self.index, decl)
        self.index += 1
        b = current()
        for body, v in ((self.stmt.then, t), (self.stmt.orelse, e)):
            b.push(body)
            try:
                b.instr("write", (slot.var, slot.encode(v)))
            finally:
                b.pop()
        return slot.decode()


# -- expressions -------------------------------------------------------------------------

def _as_bool(x):
    if isinstance(x, Sym):
        return x if x.type is T.Bool else x != 0
    return x


def _logical(op, a, b):
    return Sym(current().instr(op, (_as_bool(a).value, _as_bool(b).value), T.Bool), T.Bool)


def and_(*thunks):
    """Python's `and` where any term may be dynamic: static terms short-circuit,
    dynamic ones are combined in the kernel."""
    dynamic, last = None, True
    for th in thunks:
        v = th()
        if isinstance(v, Sym):
            dynamic = _as_bool(v) if dynamic is None else _logical("and", dynamic, v)
        elif not v:
            return v
        else:
            last = v
    return last if dynamic is None else dynamic


def or_(*thunks):
    """Python's `or` where any term may be dynamic."""
    dynamic, last = None, False
    for th in thunks:
        v = th()
        if isinstance(v, Sym):
            dynamic = _as_bool(v) if dynamic is None else _logical("or", dynamic, v)
        elif v:
            return v
        else:
            last = v
    return last if dynamic is None else dynamic


def not_(x):
    if isinstance(x, Sym):
        return Sym(current().instr("not", (_as_bool(x).value,), T.Bool), T.Bool)
    return not x


def ifexp(cond, a, b):
    if isinstance(cond, Sym):
        return sym_select(cond, a(), b())
    return a() if cond else b()


def min_(*args, **kw):
    if len(args) == 2 and not kw and (isinstance(args[0], Sym) or isinstance(args[1], Sym)):
        return sym_minmax("min", *args)
    return builtins.min(*args, **kw)


def max_(*args, **kw):
    if len(args) == 2 and not kw and (isinstance(args[0], Sym) or isinstance(args[1], Sym)):
        return sym_minmax("max", *args)
    return builtins.max(*args, **kw)


def jump_base():
    """The dynamic control flow open when a function inside a kernel is
    called: its `return` may leave only what it opened itself."""
    b = current()
    return len(b.loop_kinds), b.dynamic_ifs


def check_jump(kind, base=None):
    b = current()
    if kind == "return":
        loops, ifs = base or (0, 0)
        if "dynamic" in b.loop_kinds[loops:] or b.dynamic_ifs > ifs:
            raise KernelError("`return` inside dynamic control flow is not supported; "
                              "let the kernel body end instead")
        return
    if b.loop_kinds and b.loop_kinds[-1] == "dynamic":
        raise KernelError(f"`{kind}` inside a dynamic loop is not supported; use a `while` "
                          "with a condition instead")

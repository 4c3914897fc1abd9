"""Run-time side of the control-flow rewrite (see rewrite.py): each loop or
branch is static (Python runs it) or dynamic (it becomes IR control flow),
decided by whether its range or condition holds a dynamic value.
"""
import builtins
import itertools
import sys
import types

import numpy as np

from .. import types as T
from ..array import MoYeArray
from ..array.engine import on_loop
from ..errors import MoyeTypeError
from .. import ir
from . import unrolled
from .memory import PointerEngine
from .tracer import (MATH_FUNCTIONS, KernelError, Sym, coerce, current, operand_type, promote,
                     sym_minmax, sym_select, type_of)


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

def _number(x):
    return isinstance(x, (Sym, int, float)) and not isinstance(x, bool)


def merged_type(a, b):
    """The type of a name that a run-time `if` leaves holding number `a` on
    one path and `b` on the other: wide enough for both, as Python's value
    would be (a float on either side makes it a float).
        >>> from moye import types as T
        >>> merged_type(0, 1.5), merged_type(Sym(None, T.Float16), 0)
        (Float32, Float16)
    """
    if isinstance(a, Sym) and isinstance(b, Sym):
        return promote(a.type, b.type)
    if isinstance(a, Sym) or isinstance(b, Sym):
        sym, other = (a, b) if isinstance(a, Sym) else (b, a)
        return sym.type if isinstance(other, bool) and sym.type is T.Bool else \
            operand_type(sym, other)
    return promote(type_of(a), type_of(b))


def _cuts(t, value):
    """Whether storing `value` in a variable of type t would change it: a
    float in an integer, a wider number in a narrower one, a number in a
    Bool (a Python number adapts where it fits: 0.5 in a Float16)."""
    if not isinstance(value, Sym):
        return (isinstance(value, float) and not t.is_float) or \
            (t is T.Bool and not isinstance(value, bool)) or \
            (isinstance(value, int) and not t.is_float and type_of(value).bits > t.bits)
    v = value.type
    if t is T.Bool:
        return v is not T.Bool
    if v.is_float:
        return not t.is_float or v.bits > t.bits or v.bits == t.bits and v.numpy != t.numpy
    return not t.is_float and v.bits > t.bits


class _Slot:
    """One name carried through dynamic control flow, held in an IR variable
    (of type `type`, else its example's)."""

    def __init__(self, name, example, type=None):
        self.name = name
        if example is UNBOUND:
            self.kind = "temp"
        elif isinstance(example, MoYeArray) and isinstance(example.engine, PointerEngine):
            eng = example.engine
            self.kind, self.layout = "array", example.layout
            self.dtype, self.space, self.align = eng.dtype, eng.space, eng.align
            self.var = ir.Var(ir.PtrType(eng.dtype, eng.space), "p")
        elif _number(example):
            self.kind = "scalar"
            self.var = ir.Var(type or type_of(example), name if name.isidentifier() else "x")
        else:
            self.kind, self.example = "static", example

    def encode(self, value):
        """The IR operand to store for `value`; a KernelError where the
        variable's type would change it (a loop that starts `s = 0` and
        adds floats to it)."""
        if self.kind == "scalar":
            if not _number(value):
                raise KernelError(f"'{self.name}' changes from a number to {value!r} inside "
                                  "dynamic control flow")
            if _cuts(self.var.type, value):
                raise KernelError(
                    f"'{self.name}' changes type from {self.var.type} to {type_of(value)} in the "
                    f"body of a loop that stays a loop, where it keeps one type: give it the "
                    f"wider type before the loop ({self.name} = 0.0 for a float, or "
                    f"moye.cast(x, moye.{type_of(value)}))")
            return coerce(value, self.var.type)
        if self.kind == "array":
            if isinstance(value, MoYeArray) and not isinstance(value.engine, PointerEngine):
                raise KernelError(f"'{self.name}' is reassigned to an array in "
                                  f"{value.engine.space} memory inside dynamic control flow, "
                                  "which only a pointer into global, shared or register memory "
                                  "can be; make that view where it is used")
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

TRACE_ERRORS = Exception
"""What an unrolled attempt's body may raise and still fall back."""

STATIC_UNROLL_LIMIT = 65536
"""The most iterations one loop may unroll while tracing (a static `for`, or
a `while` whose condition is static): past it, tracing stops with a
KernelError instead of running on, or filling memory, for ever."""


class range:
    """A range whose loop form you choose: `for k in moye.range(n, unroll=u)`.

    - `unroll=None` (the default, and Python's `range` in a kernel): static
      bounds give a loop traced once and unrolled by NVRTC where the body
      allows it, else unrolled while tracing; a dynamic bound gives a
      run-time loop;
    - `unroll=True`: traced once and fully unrolled by NVRTC
      (`#pragma unroll`); static bounds only, and the body must not need the
      variable as a Python int (an error otherwise, not a fallback);
    - `unroll=k` (an int >= 1): a run-time loop under `#pragma unroll k`
      (`unroll=1`: not unrolled).

    `moye.range_constexpr` unrolls while tracing. Bounds are ints or dynamic
    integers; the step is not 0 (a dynamic step's sign is checked when the
    kernel runs). CuTe DSL: `cutlass.range`."""

    def __init__(self, *args, unroll=None):
        if not 1 <= len(args) <= 3:
            raise MoyeTypeError("range(stop) or range(start, stop[, step])")
        if not (unroll is None or unroll is True or
                isinstance(unroll, (int, np.integer)) and not isinstance(unroll, bool)
                and unroll >= 1):
            raise MoyeTypeError(f"range(unroll={unroll!r}): unroll is None, True or a count >= 1 "
                                "(1: not unrolled); moye.range_constexpr unrolls while tracing")
        start, stop, step = (0, args[0], 1) if len(args) == 1 else \
            (args[0], args[1], args[2] if len(args) == 3 else 1)
        for what, x in (("start", start), ("stop", stop), ("step", step)):
            if isinstance(x, Sym) and x.type.is_float or \
                    not isinstance(x, (Sym, int, np.integer)) or isinstance(x, bool):
                raise MoyeTypeError(f"range() {what} must be an integer, got {x!r}")
        self.start, self.stop, self.step = (x if isinstance(x, Sym) else int(x)
                                            for x in (start, stop, step))
        self.unroll = unroll if unroll is None or unroll is True else int(unroll)
        if isinstance(self.step, int) and self.step == 0:
            raise KernelError("range() step must not be 0")
        if unroll is True and self.dynamic:
            raise KernelError("range(..., unroll=True) needs static bounds; a run-time loop "
                              "takes an unroll count: unroll=4")

    @property
    def dynamic(self):
        """Whether it is a run-time loop: a dynamic bound or an unroll count."""
        return isinstance(self.unroll, int) and self.unroll is not True or \
            any(isinstance(x, Sym) for x in (self.start, self.stop, self.step))


class forever(range):
    """What `while True:` with a `break` of its own loops over (the rewrite
    makes it a `for`): a loop traced once whose breaks end it, else, where
    its body needs that (control.for_loop), Python's loop until a break,
    while tracing."""

    def __init__(self):
        super().__init__(0, 2 ** 31 - 1)


def range_constexpr(*args):
    """A range unrolled while tracing: the body runs once per iteration with
    the variable a Python int. CuTe DSL: `cutlass.range_constexpr`.
        >>> list(range_constexpr(2, 8, 3))
        [2, 5]
    """
    for x in args:
        if isinstance(x, Sym) or not isinstance(x, (int, np.integer)) or isinstance(x, bool):
            raise MoyeTypeError(f"range_constexpr() takes static ints, got {x!r}")
    return builtins.range(*(int(x) for x in args))


FULL_UNROLL_LIMIT = 1024
"""Trip counts up to which a loop traced once is emitted under `#pragma
unroll` (fully unrolled by NVRTC); longer ones are left to NVRTC."""


class for_loop:
    """One `for` of a kernel, in one of three forms (rewrite.py's protocol):

    - "static": Python runs it; the body is traced once per iteration;
    - "dynamic": an IR loop with run-time bounds or an unroll count;
    - "unrolled": a static range traced once with a symbolic variable and
      emitted as a loop that NVRTC unrolls.

    A static range tries "unrolled" and falls back to "static" (rolling the
    trace back) when the body needs the variable as a Python int (it raises),
    changes Python objects (which one traced iteration would change once), or
    leaves a carried name in a state the code after the loop cannot use as it
    could after unrolling; the reason is an IR comment, and the loop's site
    unrolls while tracing from then on in this trace."""

    def __init__(self, iterable, names, values, site=None, live=(), reads=(), roots=None):
        """`reads`: the names the body reads (the Python objects it may change
        are found from them, in the caller's frame); `roots` the objects
        themselves instead, for a library loop."""
        self.names, self.values, self.entry = names, list(values), list(values)
        self.site, self.live = site, live
        self.pending, self.forced, self.python = True, False, None
        self.jumped = False         # a break or continue emitted in the IR loop's body
        self.why = None             # why a static range unrolls while tracing (_fall_back)
        self.forever = isinstance(iterable, forever)
        self.elements = None        # an array of a run-time size: its elements, in order
        if isinstance(iterable, MoYeArray) and type(iterable.size) is not int:
            self.elements, iterable = iterable, range(iterable.size)
        b = current()
        if isinstance(iterable, range):
            if iterable.dynamic:
                self.mode = "dynamic"
                self._open(b, iterable, iterable.unroll)
                return
            span = builtins.range(iterable.start, iterable.stop, iterable.step)
            self.forced = iterable.unroll is True
            why = None if self.forced else self._why_static(b, span)
            if why is None:
                self.mode, self.span = "unrolled", span
                if not self.forced:
                    self.python = _PythonState(
                        _frame_values(sys._getframe(1), reads) if roots is None else roots)
                    if not self.python.complete:
                        self._static(b, span, None)
                        return
                self._open(b, iterable, "full" if len(span) <= FULL_UNROLL_LIMIT else None)
                return
            self._static(b, span, self._remember(b, why))
            return
        self._static(b, iterable, None)

    def _remember(self, b, why):
        """Record why this loop's site unrolls while tracing; the reason to
        print as an IR comment the first time, else None. A library loop
        (no site) is not remembered: its next call may go otherwise."""
        if not why or self.site in b.static_sites:
            return None
        if self.site is not None:
            b.static_sites[self.site] = why
        return why

    @property
    def dynamic(self):
        """Whether the loop is an IR loop (run-time or traced once)."""
        return self.mode != "static"

    def _why_static(self, b, span):
        if len(span) < 2:
            return ""
        if self.site in b.static_sites:
            return b.static_sites[self.site]      # said once, at its first fall-back
        for n, v in zip(self.names, self.values):
            if isinstance(v, MoYeArray) and isinstance(v.engine, PointerEngine) and \
                    v.engine.space == "local":
                return f"'{n}' is a register fragment reassigned in the body"
        return None

    def _static(self, b, iterable, why):
        self.mode = "static"
        if isinstance(iterable, builtins.range) and \
                iterable[STATIC_UNROLL_LIMIT:STATIC_UNROLL_LIMIT + 1]:
            raise _too_long(f"this `for` over {iterable} would unroll more than "
                            f"{STATIC_UNROLL_LIMIT} times")
        self.iterable = iterable
        if why:
            b.instr("comment", (), text=f"unrolled while tracing: {why}")

    def _open(self, b, r, unroll):
        """Emit the IR loop (its carried names' variables first)."""
        self.parent = b.bodies[-1]
        self.mark = (len(self.parent), len(b.specials), len(b.kernel.arrays), len(b.bodies),
                     len(b.loop_kinds), len(b.guards), b.dynamic_ifs, b.unrolled,
                     len(b.static_sites))
        self.slots = [_Slot(n, v) for n, v in zip(self.names, self.values)]
        for s, v in zip(self.slots, self.values):
            if s.kind in ("scalar", "array"):
                _declare(s, v, None)
        t = promote(promote(type_of(r.start), type_of(r.stop)), type_of(r.step))
        self.iv = ir.Var(T.Int32 if t.name in ("Bool", "Int8", "Int16") else t, "i")
        start, stop, step = (coerce(x, self.iv.type) for x in (r.start, r.stop, r.step))
        self.stmt = ir.For(self.iv, start, stop, step, [], unroll)
        b.emit(self.stmt)

    def attempt(self):
        """Whether to run the loop (again): once, and once more after an
        unrolled attempt falls back."""
        if self.pending:
            self.pending = False
            return True
        if self.mode == "unrolled" and not self.forced:
            why = self._decline()
            if why:
                self._fall_back(why)
                return self.attempt()
        return False

    def retry(self):
        """The body raised: fall back (True) if this was an unrolled attempt
        that may, else let the error through (False)."""
        if self.mode != "unrolled" or self.forced:
            return False
        err = sys.exc_info()[1]
        self._fall_back(f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:160]}")
        return True

    def __iter__(self):
        b = current()
        if self.mode == "static":
            b.loop_kinds.append("static")
            self.ifs = b.dynamic_ifs
            try:
                for n, x in enumerate(self.iterable):
                    if n == STATIC_UNROLL_LIMIT:
                        raise _too_long("this `while True` has not ended" if self.forever else
                                        "this `for` over a static iterable has not ended")
                    yield x
            finally:
                b.loop_kinds.pop()
            return
        depth = (len(b.bodies), len(b.loop_kinds), b.unrolled)
        self.open = depth
        b.push(self.stmt.body)
        b.loop_kinds.append("dynamic")
        try:
            v = b.instr("read", (self.iv,), self.iv.type, hint="i")
            if self.mode == "unrolled":
                b.unrolled += 1
                span = self.span
                yield unrolled.loop_variable(b, span.start, span.stop, span.step, v)
            elif self.elements is not None:
                yield self.elements[Sym(v, self.iv.type, 1)]
            else:
                yield Sym(v, self.iv.type, 1)
        finally:
            if self.open is depth:          # not already undone by a fall-back
                self.open = None
                del b.bodies[depth[0]:], b.memo[depth[0]:], b.loop_kinds[depth[1]:]
                b.unrolled = depth[2]

    def _fall_back(self, why):
        """Undo the unrolled attempt: its IR, the builder's state, the Python
        objects it changed; then run the loop while tracing."""
        b = current()
        n_body, n_specials, n_arrays, n_bodies, n_kinds, n_guards, ifs, unrolled_, n_sites = \
            self.mark
        self.open = None
        del b.bodies[n_bodies:], b.memo[n_bodies:], b.loop_kinds[n_kinds:], b.guards[n_guards:]
        b.dynamic_ifs, b.unrolled = ifs, unrolled_
        start = n_body + (len(b.specials) - n_specials if self.parent is b.kernel.body else 0)
        gone = {s.result.id for s in self.parent[start:]
                if isinstance(s, ir.Instr) and s.result is not None}
        del self.parent[start:]
        memo = b.memo[-1]
        for k in [k for k, v in memo.items() if v.id in gone]:
            del memo[k]
        for a in b.kernel.arrays[n_arrays:]:
            b.kernel.array_locs.pop(a.id, None)
        del b.kernel.arrays[n_arrays:]
        for site in list(b.static_sites)[n_sites:]:    # inner loops' verdicts on this attempt
            del b.static_sites[site]
        if self.python is not None:
            self.python.restore()
        self.values, self.pending, self.jumped = list(self.entry), True, False
        self.why = why
        self._static(b, itertools.count() if self.forever else self.span,
                     self._remember(b, why))

    def _decline(self):
        """Why the unrolled attempt cannot stand (None if it can)."""
        if self.python is not None and self.python.changed():
            return ("the body changes Python objects (a list, a dict, an attribute), which a "
                    "loop traced once would change once")
        b = current()
        static = set()
        for i, (s, n) in enumerate(zip(self.slots, self.names)):
            live = n in self.live
            if s.kind == "temp" and live:
                return f"'{n}' is first assigned in the body and used after the loop"
            if s.kind == "array" and live and not self.forever:     # (no count to unroll)
                return f"the array '{n}' is reassigned in the body and used after the loop"
            if s.kind == "scalar":
                t = type_of(self.end[i])
                if t is not s.var.type:
                    return f"'{n}' changes type from {s.var.type} to {t} in the body"
                if not isinstance(self.entry[i], Sym) and not self.jumped:
                    static.add(i)       # (after a break or continue, a run-time value)
        # the names that stay static through the iterations: their new values follow
        # from the loop variables and each other only
        while True:
            drop = set()
            for i in static:
                try:
                    deps = unrolled.leaves(b, self.end[i])
                except unrolled.Unknown:
                    drop.add(i)
                    continue
                if any(isinstance(b.known[d], unrolled.CarriedRead) and
                       (b.known[d].loop is not self or b.known[d].slot not in static)
                       for d in deps):
                    drop.add(i)
            if not drop:
                break
            static -= drop
        for i in sorted(static):
            if self.names[i] in self.live:
                return (f"'{self.names[i]}' keeps a static value through the loop and is used "
                        "after it")
        return None

    def carried(self):
        if not self.dynamic:
            return tuple(self.values) if len(self.values) != 1 else self.values[0]
        out = tuple(s.decode() for s in self.slots)
        if self.mode == "unrolled":
            b = current()
            for i, (s, v) in enumerate(zip(self.slots, out)):
                if s.kind == "scalar" and not isinstance(self.entry[i], Sym):
                    b.known[v.value.id] = unrolled.CarriedRead(self, i)
        return out if len(out) != 1 else out[0]

    def next(self, values):
        if not self.dynamic:
            self.values = list(values)
            return
        self.end = list(values)
        _write_slots(self.slots, values)

    def jump(self, kind, values):
        return _jump(self, kind, values)

    def done(self):
        if not self.dynamic:
            return tuple(self.values) if len(self.values) != 1 else self.values[0]
        out = tuple(OutOfScope(s.name) if s.kind == "temp" else s.decode() for s in self.slots)
        return out if len(out) != 1 else out[0]

    def targets(self, names, values):
        """The loop's variables after it: as Python leaves them after a static
        or unrolled loop; after a dynamic loop they have no value."""
        if self.mode == "dynamic":
            out = tuple(OutOfScope(n, f"'{n}' is the variable of a dynamic loop and has no "
                                      "value after it; keep what you need in another "
                                      "variable") for n in names)
        elif self.mode == "unrolled":
            last = self.span[-1] if len(self.span) else UNBOUND
            out = (OutOfScope(names[0], f"'{names[0]}' has no value: the loop ran no times")
                   if last is UNBOUND else last,)
        else:
            out = tuple(OutOfScope(n, f"'{n}' has no value: the loop ran no times")
                        if v is UNBOUND else v for n, v in zip(names, values))
        return out if len(out) != 1 else out[0]


class _PythonState:
    """Shallow copies of the lists, dicts, sets and plain objects reachable
    from some values: whether a traced loop body changed them, and how to
    put them back. moye's own values (layouts, arrays, atoms) are immutable
    and not followed. `complete` is False past LIMIT objects."""
    LIMIT = 2048

    def __init__(self, roots):
        self.saved, self.complete = [], True
        seen, stack = set(), list(roots)
        while stack:
            x = stack.pop()
            if id(x) in seen or isinstance(x, _IMMUTABLE):
                continue
            seen.add(id(x))
            if isinstance(x, (tuple, frozenset)):
                stack.extend(x)
                continue
            if isinstance(x, list):
                copy = list(x)
            elif isinstance(x, dict):
                copy = dict(x)
            elif isinstance(x, set):
                copy = set(x)
            elif _followed(x):
                copy = dict(vars(x))
            else:
                continue
            self.saved.append((x, copy))
            stack.extend(copy.values() if isinstance(copy, dict) else copy)
            if len(self.saved) > self.LIMIT:
                self.complete = False
                return

    def changed(self):
        for x, copy in self.saved:
            now = x if isinstance(x, (list, dict, set)) else vars(x)
            if isinstance(copy, set):
                if now != copy:
                    return True
            elif len(now) != len(copy):
                return True
            elif isinstance(copy, list):
                if any(a is not c for a, c in zip(now, copy)):
                    return True
            elif any(k not in now or now[k] is not v for k, v in copy.items()):
                return True
        return False

    def restore(self):
        for x, copy in self.saved:
            if isinstance(x, list):
                x[:] = copy
            else:
                now = x if isinstance(x, (dict, set)) else vars(x)
                now.clear()
                now.update(copy)


_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), builtins.range, type,
              types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
              np.ndarray, np.generic, Sym)


def _followed(x):
    """Whether to look into a plain object's attributes: anything with a
    __dict__ except moye's own values (its examples' classes are user code)."""
    module = type(x).__module__ or ""
    if module.startswith("moye.") and not module.startswith("moye.examples"):
        return False
    return hasattr(x, "__dict__")


def _reachable(fn):
    """What a function can reach besides its arguments: its closure's values,
    the globals its code names, its bound object, its defaults."""
    out = [getattr(fn, "__self__", None)]
    code = getattr(fn, "__code__", None)
    if code is not None:
        out += [c.cell_contents for c in fn.__closure__ or () if _bound(c)]
        out += [fn.__globals__[n] for n in code.co_names if n in fn.__globals__]
        out += list(fn.__defaults__ or ())
    return out


def _bound(cell):
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def _frame_values(frame, names):
    """The values of `names` as the kernel's frame sees them (unbound ones skipped)."""
    local, glob = frame.f_locals, frame.f_globals
    out = []
    for n in names:
        if n in local:
            out.append(local[n])
        elif n in glob:
            out.append(glob[n])
    return out


@on_loop
def kernel_loop(engine, start, stop, body):
    """A library loop over arrays in a kernel (`array.engine.run_loop`): like a
    kernel's own `for` over a static range, traced once where the body allows."""
    if not isinstance(engine, PointerEngine) or stop - start < 2:
        return False
    loop = for_loop(range(start, stop), (), (), roots=_reachable(body))
    while loop.attempt():
        try:
            for k in loop:
                body(k)
                loop.next(())
        except TRACE_ERRORS:
            if not loop.retry():
                raise
    return True


def _too_long(what):
    return KernelError(f"{what}; a loop unrolled while tracing may run at most "
                       f"{STATIC_UNROLL_LIMIT} times (moye.compiler.control.STATIC_UNROLL_LIMIT). "
                       "For a loop that stays a loop in the kernel, write range(n) or "
                       "moye.range(n, unroll=1)")


def _write_slots(slots, values):
    b = current()
    for s, v in zip(slots, values):
        if s.kind == "static":
            s.check_static(v)
        elif s.kind != "temp":
            b.instr("write", (s.var, s.encode(v)))


def _jump(loop, kind, values):
    """`break` or `continue` (kind) in a for_loop's or while_loop's body,
    its carried names then holding `values`: True where Python jumps (a
    loop run while tracing), False where the IR loop does (its variables
    written, then an ir.Jump). Refused from inside a run-time `if` opened
    in the body of a loop run while tracing: Python would leave the loop
    on every path (the other iterations never traced)."""
    b = current()
    if not loop.dynamic:
        if b.dynamic_ifs > loop.ifs:
            why = getattr(loop, "why", None)
            raise KernelError(
                f"`{kind}` under a run-time condition, in a loop that unrolls while tracing"
                + (f" ({why})" if why else "") + "; let the loop stay a loop in the kernel (a "
                "`for` over range(n) whose body needs no Python int of its variable, or "
                "moye.range(n, unroll=...)), or make the condition a variable the rest of the "
                "body tests")
        loop.values = list(values)
        return True
    _write_slots(loop.slots, values)
    loop.jumped = True
    b.emit(ir.Jump(kind))
    return False


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
            self.ifs = b.dynamic_ifs
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

    def jump(self, kind, values):
        return _jump(self, kind, values)

    def finished(self):
        return self.dynamic and self.state == "done"

    def done(self):
        if not self.dynamic:
            current().loop_kinds.pop()
            return tuple(self.values) if len(self.values) != 1 else self.values[0]
        out = tuple(OutOfScope(s.name) if s.kind == "temp" else s.decode() for s in self.slots)
        return out if len(out) != 1 else out[0]


# -- if --------------------------------------------------------------------------------

def ends_in_jump(body):
    """Whether an IR body never reaches its end: a Jump (break, continue,
    the kernel's return) at its top level, or an If both of whose sides end
    so."""
    return any(isinstance(s, ir.Jump) or isinstance(s, ir.If) and s.orelse and
               ends_in_jump(s.then) and ends_in_jump(s.orelse) for s in body)


def _open_side(body, cond, polarity):
    """Trace into `body`, the side of a run-time `if` on the IR Bool `cond`
    where it is `polarity` (until _close_side)."""
    b = current()
    b.push(body)
    b.dynamic_ifs += 1
    b.guards.append((cond, polarity))


def _close_side():
    """Leave the side _open_side opened last."""
    b = current()
    b.dynamic_ifs -= 1
    b.guards.pop()
    b.pop()


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
        _open_side(self.stmt.then, self.stmt.cond, True)
        return True

    def then_done(self, values):
        self.then_values = list(values)
        if self.dynamic:
            _close_side()

    def orelse(self):
        if not self.dynamic:
            return not self.cond
        _open_side(self.stmt.orelse, self.stmt.cond, False)
        return True

    def restore(self):
        """The values before the if of the merged names, then of the names the
        else-branch reads before assigning (the then-branch ran first)."""
        vals = self.before
        return tuple(vals) if len(vals) != 1 else vals[0]

    def else_done(self, values):
        self.else_values = list(values)
        if self.dynamic:
            _close_side()

    def result(self):
        if not self.dynamic:
            vals = self.then_values if self.cond else self.else_values
            vals = self.before if vals is None else vals
        else:
            vals = [self._merge(i) for i in builtins.range(len(self.names))]
        return tuple(vals) if len(vals) != 1 else vals[0]

    def _merge(self, i):
        """The value of the i-th merged name after the if: the sides' values
        written to one variable, of the side alone that goes on where the
        other ends in a jump (break, continue, the kernel's return)."""
        name, before = self.names[i], self.before[i]
        t = self.then_values[i] if self.then_values is not None else before
        e = self.else_values[i] if self.else_values is not None else before
        sides = [(body, v) for body, v in ((self.stmt.then, t), (self.stmt.orelse, e))
                 if not ends_in_jump(body)]
        if not sides:
            return before                   # nothing after the if runs
        t, e = sides[0][1], sides[-1][1]
        if t is e and (len(sides) == 2 or t is before):
            return t
        if t is UNBOUND or e is UNBOUND:
            return OutOfScope(name)
        slot = _Slot(name, t, merged_type(t, e) if _number(t) and _number(e) else None)
        if slot.kind == "static":
            slot.check_static(e)
            return t
        decl = ir.Instr("decl", (slot.var, None))
        self.parent.insert(self.index, decl)
        self.index += 1
        b = current()
        for body, v in sides:
            b.push(body)
            try:
                b.instr("write", (slot.var, slot.encode(v)))
            finally:
                b.pop()
        merged = slot.decode()
        if b.unrolled and slot.kind == "scalar" and len(sides) == 2:
            # cond ? t : e, if all three are known
            ops = (self.stmt.cond,) + tuple(x.value if isinstance(x, Sym) else x for x in (t, e))
            if all(not isinstance(x, ir.Value) or x.id in b.known for x in ops):
                b.known[merged.value.id] = ir.Instr("select", ops, merged.value)
        return merged


# -- expressions -------------------------------------------------------------------------

def _as_bool(x):
    if isinstance(x, Sym):
        return x if x.type is T.Bool else x != 0
    return x


def _logical(op, a, b):
    return Sym(current().instr(op, (_as_bool(a).value, _as_bool(b).value), T.Bool), T.Bool)


def and_(*thunks):
    """Python's `and` where any term may be dynamic: static terms
    short-circuit while tracing; the terms after a dynamic one run in the
    kernel only where it holds (C's &&): `i < n and x[i] > 0` reads x[i]
    only where i < n. A dynamic result is a Bool."""
    last = True
    for k, th in enumerate(thunks):
        v = th()
        if isinstance(v, Sym):
            cond, rest = _as_bool(v), thunks[k + 1:]
            if not rest:
                return cond
            return _short_circuit(cond, True, lambda: _truth(and_(*rest)))
        if not v:
            return v
        last = v
    return last


def or_(*thunks):
    """Python's `or` where any term may be dynamic: the terms after a
    dynamic one run in the kernel only where it does not hold (C's ||). A
    dynamic result is a Bool."""
    last = False
    for k, th in enumerate(thunks):
        v = th()
        if isinstance(v, Sym):
            cond, rest = _as_bool(v), thunks[k + 1:]
            if not rest:
                return cond
            return _short_circuit(cond, False, lambda: _truth(or_(*rest)))
        if v:
            return v
        last = v
    return last


def _truth(v):
    """A term's truth: a Bool of a kernel value, Python's of anything else."""
    return _as_bool(v) if isinstance(v, Sym) else builtins.bool(v)


def _short_circuit(cond, polarity, rest):
    """`cond && rest()` (polarity True) or `cond || rest()` (False), rest()
    a Bool or a Python bool traced as the side of `cond` where it is
    `polarity`: inline where its instructions can run anyway (_inline),
    else under an IR If."""
    side = _traced_apart(cond, polarity, rest)
    value = side.value
    if _inline(side.body):
        _splice(side)
        if not isinstance(value, Sym):
            return cond if value == polarity else not polarity
        return _logical("and" if polarity else "or", cond, value)
    if polarity:
        return _merged_sides(cond, side, _Side([], 0, {}), T.Bool)
    return _merged_sides(cond, _Side([], 1, {}), side, T.Bool)


def not_(x):
    if isinstance(x, Sym):
        return Sym(current().instr("not", (_as_bool(x).value,), T.Bool), T.Bool)
    return not x


def ifexp(cond, a, b):
    """Python's `a if cond else b`: of a run-time cond, each side runs in
    the kernel only where it is taken (C's ?:), `x[i] if i < n else 0.0`
    reading x[i] only where i < n: a select where neither side has an
    instruction that could fault or act (_inline), else an IR If."""
    if not isinstance(cond, Sym):
        return a() if cond else b()
    cond = _as_bool(cond)
    then, orelse = _traced_apart(cond, True, a), _traced_apart(cond, False, b)
    t, e = then.value, orelse.value
    # values that are not numbers (arrays, layouts) cannot be merged: both sides run
    if _inline(then.body) and _inline(orelse.body) or not (_number(t) and _number(e)):
        _splice(then)
        _splice(orelse)
        return sym_select(cond, t, e)
    return _merged_sides(cond, then, orelse, merged_type(t, e))


class _Side:
    """A side traced apart: its body, its value and the pure instructions it
    emitted (Builder.memo's entries)."""
    __slots__ = ("body", "value", "memo")

    def __init__(self, body, value, memo):
        self.body, self.value, self.memo = body, value, memo


def _traced_apart(cond, polarity, thunk):
    """thunk() traced into a body of its own (a _Side), as the side of a
    run-time `if` on the Bool `cond` where it is `polarity`."""
    body = []
    _open_side(body, cond.value, polarity)
    try:
        value = thunk()
        memo = current().memo[-1]
    finally:
        _close_side()
    return _Side(body, value, memo)


def _splice(side):
    """A side traced apart, run where it stands: its instructions, and the
    reuse of its pure ones, join the current body."""
    b = current()
    b.bodies[-1].extend(side.body)
    b.memo[-1].update(side.memo)


_INLINE = (ir.Binary, ir.Compare, ir.Unary, ir.Select, ir.Cast, ir.Call, ir.Special, ir.Bits,
           ir.Approx, ir.Read, ir.Addr, ir.Offset)


def _inline(body):
    """Whether a body traced apart may run where its side is not taken (so
    inline, without a branch): arithmetic, comparisons, casts, math and
    reads of variables, none of which faults or acts; not a load (it may
    be out of bounds there), an integer division by a run-time value (by
    zero), anything else."""
    return all(isinstance(s, _INLINE) and not (s.op in ("div", "mod") and s.result.type.is_integer
                                                and not (type(s.args[1]) is int and s.args[1]))
               for s in body)


def _merged_sides(cond, then, orelse, type):
    """The value of two sides traced apart (_Side) under an IR If on
    `cond`, each writing its value, as `type`, to one variable."""
    b = current()
    var = ir.Var(type, "x")
    b.instr("decl", (var, None))
    for side in (then, orelse):
        b.push(side.body)
        try:
            b.instr("write", (var, coerce(side.value, type)))
        finally:
            b.pop()
    b.emit(ir.If(cond.value, then.body, orelse.body))
    return Sym(b.instr("read", (var,), type, hint="x"), type)


def assert_(cond, message=None):
    """Python's `assert cond, message` in a kernel: of a static condition,
    Python's (an AssertionError while tracing, the message made only
    then); of a run-time one, checked by every thread when the kernel runs
    (ir.Assert; the message, made now, must not need run-time values)."""
    if not isinstance(cond, Sym):
        if not cond:
            raise AssertionError(*(() if message is None else (message(),)))
        return
    text = "" if message is None else message()
    if not isinstance(text, str):
        text = repr(text)
    current().instr("assert", (_as_bool(cond).value,), message=text)


def _fold(op, args, kw):
    """Python's min or max of kernel values, two or more or one sequence of
    them (no key): a chain of the kernel's min or max, left to right."""
    values = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    if kw or len(values) < 2 or not any(isinstance(v, Sym) for v in values):
        return (builtins.min if op == "min" else builtins.max)(*args, **kw)
    out = values[0]
    for v in values[1:]:
        out = sym_minmax(op, out, v)
    return out


def min_(*args, **kw):
    return _fold("min", args, kw)


def max_(*args, **kw):
    return _fold("max", args, kw)


def int_(*args, **kw):
    """Python's int() of a kernel value: an integer unchanged, a float
    truncated toward zero as Python's int() (C's cast) to Int32, a Bool 0
    or 1; of anything else, Python's."""
    if len(args) == 1 and not kw and isinstance(args[0], Sym):
        x = args[0]
        return x if x.type.is_integer else Sym.cast(x, T.Int32)
    return builtins.int(*args, **kw)


def float_(*args, **kw):
    """Python's float() of a kernel value: Float32 (as a float literal beside
    it), a Float64 unchanged; of anything else, Python's."""
    if len(args) == 1 and not kw and isinstance(args[0], Sym):
        x = args[0]
        return x if x.type in (T.Float32, T.Float64) else Sym.cast(x, T.Float32)
    return builtins.float(*args, **kw)


def bool_(*args, **kw):
    """Python's bool() of a kernel value: `x != 0`, a Bool; of anything
    else, Python's."""
    if len(args) == 1 and not kw and isinstance(args[0], Sym):
        x = args[0]
        return x if x.type is T.Bool else x != 0
    return builtins.bool(*args, **kw)


def len_(*args, **kw):
    """Python's len() of an array whose extents are kernel values: its
    number of elements (MoYeArray's len), a kernel value; of anything
    else, Python's."""
    if len(args) == 1 and not kw and isinstance(args[0], MoYeArray) and \
            type(args[0].size) is not int:
        return args[0].size
    return builtins.len(*args, **kw)


def thread_print(*values, fmt=None):
    """printf of `values` from every thread that runs it (moye.cushow):
    kernel values as %f (floats, in Float64) or %lld (integers), anything
    else as its str; `fmt` a printf format of its own."""
    parts, args = [], []
    for v in values:
        if isinstance(v, Sym):
            parts.append("%f" if v.type.is_float else "%lld")
            args.append(coerce(v, T.Float64 if v.type.is_float else T.Int64))
        else:
            parts.append(str(v).replace("%", "%%"))
    current().instr("print", tuple(args), fmt=(fmt or " ".join(parts)) + "\n")


def print_(*args, **kw):
    """Python's print() in a kernel: of values known while tracing, Python's
    (once, as the kernel is traced); with a kernel value among them, every
    thread that runs it prints (thread_print, CUDA's printf), as Triton's
    print does. Only the default `sep` and `end` then."""
    if not any(isinstance(a, Sym) for a in args):
        return builtins.print(*args, **kw)
    if set(kw) - {"sep", "end"} or kw.get("sep", " ") != " " or kw.get("end", "\n") != "\n":
        raise KernelError("print() of kernel values prints from every thread (CUDA's printf) "
                          f"with the default sep and end; got {', '.join(sorted(kw))}")
    return thread_print(*args)


CONVERSIONS = {"int": "int_", "float": "float_", "bool": "bool_", "min": "min_", "max": "max_",
               "len": "len_", "print": "print_"}
"""Python builtins whose calls the rewrite sends here: name -> this module's function."""


def math_(func, *args, **kw):
    """`func(*args)`; where `func` is a function of Python's math module and
    an argument is a kernel value, the kernel's function of that name
    (tracer.MATH_FUNCTIONS): math.sqrt(x) is moye.sqrt(x), math.log(x, b)
    log(x) / log(b). math.floor, ceil and trunc are Python's: Sym's
    dunders give an Int32."""
    if kw or getattr(func, "__module__", None) != "math" or \
            not any(isinstance(a, Sym) for a in args):
        return func(*args, **kw)
    name = func.__name__
    fn = MATH_FUNCTIONS.get(name)
    if name == "log" and len(args) == 2:
        return fn(args[0]) / fn(args[1])
    if fn is None:
        if name in ("floor", "ceil", "trunc"):
            return func(*args)
        raise KernelError(f"math.{name} of a kernel value is not a kernel function; see "
                          "docs/builtins.md for what a kernel body can call")
    return fn(*args)


def jump_base():
    """The dynamic control flow open when a function inside a kernel is
    called: its `return` may leave only what it opened itself."""
    b = current()
    return len(b.loop_kinds), b.dynamic_ifs


def kernel_return():
    """A kernel's own `return`: True where Python returns (no run-time
    control flow is open, so every thread ends there), False where only the
    threads that reach it end: an ir.Jump("return"), C++'s `return;`, and
    tracing goes on with the rest of the kernel. As on the GPU, a
    sync_threads after it waits only for the threads that have not ended
    (PTX's bar.sync counts exited threads as arrived)."""
    b = current()
    if "dynamic" not in b.loop_kinds and not b.dynamic_ifs:
        return True
    b.emit(ir.Jump("return"))
    return False


def check_return(base=None):
    """Refuse a `return` inside dynamic control flow opened since `base`
    (jump_base: the function's call; None: the kernel's start)."""
    b = current()
    loops, ifs = base or (0, 0)
    if "dynamic" in b.loop_kinds[loops:] or b.dynamic_ifs > ifs:
        raise KernelError("`return` inside dynamic control flow is not supported; "
                          + ("let the kernel body end instead" if base is None else
                             "assign the result to a variable there and return it at "
                             "the function's end (a helper's returns under run-time ifs are "
                             "moved there for you when none is inside a loop, every path "
                             "returns, and all give one value or tuples of one length)"))


"""The control-flow rewrite: plain Python `for`, `if` and `while` in a kernel
become calls into `moye.compiler.control`, which decides while tracing
whether each is static (run by Python: loops unroll, branches fold) or
dynamic (emitted as IR control flow).

For every loop and branch the rewrite names the variables it assigns that
live across it (read before being assigned in a loop body, or read after
the statement). Dynamic control flow turns those into loop-carried or merged
values: the seeds' `smem_read, smem_write = smem_write, smem_read` in a
dynamic loop swaps two pointers held in registers.

That liveness is read from the kernel as written: each statement's summary
(the names it may read before assigning them, the names it surely assigns)
is computed once, before anything is rewritten, and each statement list is
folded from its end, so the rewrite takes time linear in the kernel.

    for i in ITER:                          L = rt.for_loop(ITER, NAMES, VALUES, ...)
        BODY                    ==>         while L.attempt():
                                                try:
                                                    for i in L:
                                                        a, b = L.carried()
                                                        BODY
                                                        L.next(VALUES)
                                                except Exception:
                                                    if not L.retry():
                                                        raise
                                            a, b = L.done()

(`attempt` and `retry` let a static range traced once as a loop fall back
to unrolling while tracing: control.for_loop.)

`and`/`or`/`not`, `x if c else y`, chained comparisons, `min`/`max`,
`int`/`float`/`bool`/`len` and calls of Python's math functions (`math.sqrt(x)`)
are rewritten so they work on dynamic values too, and so is `assert`: of a
run-time condition it is checked when the kernel runs. `break` and
`continue` become `if LOOP.jump(kind, carried values): break`: Python's
jump in a loop run while tracing, the kernel's (C++'s) in a loop that stays
one, anywhere in its body. The kernel's own bare `return` becomes `if
rt.kernel_return(): return`: Python's return where no run-time control
flow is open, else the kernel's (the threads that reach it end). A
helper's `return`s under `if`s are first lifted to its end
(_lift_returns), so that a run-time `if` may hold them; any other `return`
inside dynamic control flow is an error (a helper function's, only inside
the control flow it opened itself).
After a loop its variable is as Python leaves it if the loop was static,
and has no value if it was dynamic.

What a kernel cannot run as written is refused, naming the line: `try`,
`with`, `yield`, `async`, `global`, `nonlocal`, `for`/`while ... else`,
lambda kernels. A function whose source cannot be read (made by `exec`,
typed at a prompt) is not rewritten: the caller traces it as it is. The
source is read when the function is first traced: a file edited since its
module was imported no longer holds the code that runs, and is refused
(`_stale`) until the module is imported again.
"""
import __future__
import ast
import copy
import functools
import inspect
import linecache
import operator
import os
import textwrap
import types

from ..errors import KernelError
from . import control
from .tracer import MATH_FUNCTIONS

RT = "__moye_rt"


def _walk(node):
    """Every node under `node`, `node` first, in ast.walk's (breadth-first)
    order, as a list, but for the contexts and operators (Load, Add, ...):
    leaves that nothing here looks for. ast.walk's generators cost several
    times more."""
    out, i = [node], 0
    while i < len(out):
        n = out[i]
        i += 1
        for field in _branches(type(n)):
            v = getattr(n, field, None)
            if type(v) is list:
                for x in v:
                    if isinstance(x, ast.AST):
                        out.append(x)
            elif isinstance(v, ast.AST):
                out.append(v)
    return out


_LEAVES = ("ctx", "op", "ops")      # the fields holding contexts and operators
_BRANCHES = {}


def _branches(cls):
    """The fields of node class `cls` that may hold nodes other than leaves."""
    fields = _BRANCHES.get(cls)
    if fields is None:
        fields = _BRANCHES[cls] = tuple(f for f in cls._fields if f not in _LEAVES)
    return fields


def _names_stored(nodes):
    out = []
    for node in nodes:
        for n in _walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in out:
                out.append(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.Lambda)):
                pass
    return [n for n in out if not n.startswith("__moye")]


def _names_loaded(nodes):
    """The names `nodes` read, an augmented assignment's target included."""
    out = set()
    for node in nodes:
        for n in _walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                out.add(n.id)
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                out.add(n.target.id)
    return out


def _loaded_in(stmts, memo):
    """The names `stmts` load anywhere, each statement's set remembered in
    `memo` (by node): a loop's reads are read from its rewritten body, whose
    inner loops are the statements their own rewrite made and read."""
    out = set()
    for stmt in stmts:
        got = memo.get(id(stmt))
        if got is None or got[0] is not stmt:
            names = set()
            for field in _branches(type(stmt)):
                v = getattr(stmt, field, None)
                if type(v) is list and v and isinstance(v[0], ast.stmt):
                    names |= _loaded_in(v, memo)
                elif type(v) is list:
                    names |= _names_loaded([x for x in v if isinstance(x, ast.AST)])
                elif isinstance(v, ast.AST):
                    names |= _names_loaded([v])
            got = memo[id(stmt)] = (stmt, names)     # the node too: its id stays its own
        out |= got[1]
    return out


def _read_first(stmts, memo=None):
    """Names that `stmts` may read before assigning them, on some path: an
    assignment inside a loop or a branch may not run, so it does not hide
    the reads after it, but inside that loop or branch it does. One pass:
    each statement's own (reads, writes) summary (memoized in `memo`, by
    node, when given) and a fold from the last statement to the first."""
    early = set()
    for stmt in reversed(stmts):
        reads, writes = _summary(stmt, memo)
        early = reads | (early - writes)
    return early


def _summary(stmt, memo=None):
    """(names `stmt` may read before assigning them, names it assigns for
    sure). A loop or branch assigns nothing for sure."""
    if memo is not None:
        got = memo.get(id(stmt))
        if got is not None and got[0] is stmt:
            return got[1]
    if isinstance(stmt, ast.For):
        targets = set(_names_stored([stmt.target]))
        out = (_names_loaded([stmt.iter]) | (_read_first(stmt.body, memo) - targets)
               | _read_first(stmt.orelse, memo), frozenset())
    elif isinstance(stmt, ast.While):
        out = (_names_loaded([stmt.test]) | _read_first(stmt.body + stmt.orelse, memo),
               frozenset())
    elif isinstance(stmt, ast.If):
        out = (_names_loaded([stmt.test]) | _read_first(stmt.body, memo)
               | _read_first(stmt.orelse, memo), frozenset())
    elif isinstance(stmt, (ast.Break, ast.Continue)):
        out = (getattr(stmt, _JUMP_READS, frozenset()), frozenset())
    else:
        # in `x = x + 1` the read happens first; names bound by loop targets and
        # comprehensions inside `stmt` are assigned before their uses there
        loaded, stored, bound = set(), set(), set()
        for n in _walk(stmt):
            if isinstance(n, ast.Name):
                if isinstance(n.ctx, ast.Load):
                    loaded.add(n.id)
                elif isinstance(n.ctx, ast.Store) and not n.id.startswith("__moye"):
                    stored.add(n.id)
            elif isinstance(n, (ast.For, ast.comprehension)):
                bound.update(x.id for x in _walk(n.target) if isinstance(x, ast.Name))
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                loaded.add(n.target.id)             # `c += 1` reads c first
        out = (loaded - bound, stored)
    if memo is not None:
        memo[id(stmt)] = (stmt, out)        # the node too: its id stays its own
    return out


RESULT = "_moye_result"              # a lifted return's value (not __moye: it is merged)


def _lift_returns(fdef, helper):
    """Move the `return`s inside `if`s of the functions defined in `fdef`,
    and of `fdef` itself if it is a `helper` (a kernel's `return` would end
    its threads, which a barrier after it must not wait for), to the
    function's end, where run-time control flow can reach them: `if c:
    return a` followed by `rest` becomes `if c: R = a` `else: rest`, with
    `return R` (R: RESULT, or RESULT0, RESULT1, ... for a tuple) at the end.
    Only where no `return` lies in a loop, the values are alike (all bare;
    or all one value; or all tuples of one length), and a value-returning
    function returns on every path. Anything else is left as written (a
    run-time `if` around its `return` is then refused by
    control.check_return)."""
    nodes = _walk(fdef)
    if not any(type(n) is ast.Return for n in nodes):
        return
    for node in nodes:
        if isinstance(node, ast.FunctionDef) and (helper or node is not fdef):
            returns = _own_returns(node)
            if returns and any(r is not node.body[-1] for r in returns):
                _lift_function(node, returns)


_SCOPES = (ast.FunctionDef, ast.Lambda, ast.ClassDef)


def _own_nodes(stmts, stop=_SCOPES):
    """The nodes of `stmts`, those inside a node of the types `stop` (a
    function or class defined there, by default) left out."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, stop):
            stack.extend(ast.iter_child_nodes(node))


def _own_returns(fdef):
    """The Return nodes of `fdef` itself (not of functions defined in it)."""
    return [n for n in _own_nodes(fdef.body) if isinstance(n, ast.Return)]


def _lift_function(fdef, returns):
    values = [r.value for r in returns]
    if all(v is None for v in values):
        names = []
    elif all(isinstance(v, ast.Tuple) for v in values) and \
            len({len(v.elts) for v in values}) == 1:
        names = [f"{RESULT}{i}" for i in range(len(values[0].elts))]
    elif not any(v is None or isinstance(v, ast.Tuple) for v in values):
        names = [RESULT]
    else:
        return
    body, always = _lifted(fdef.body, names)
    if body is None or names and not always:
        return
    if names:
        value = ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load()) \
            if values[0].__class__ is ast.Tuple else ast.Name(names[0], ast.Load())
        body.append(_at(ast.Return(value), fdef.body[-1]))
    fdef.body = body or [ast.copy_location(ast.Pass(), fdef.body[0])]


def _at(node, where):
    """`node` and every node in it without a position, at `where`'s."""
    for n in ast.walk(node):
        if "lineno" in n._attributes and not hasattr(n, "lineno"):
            ast.copy_location(n, where)
    return node


def _lifted(stmts, names, after=()):
    """(`stmts`, then the statements `after` them, with their returns
    lifted, whether every path returns); (None, False) where that cannot be
    done (_lift_returns says when). A side of an `if` that does not return
    takes its own copy of what follows the `if`."""
    out = []
    for i, st in enumerate(stmts):
        if isinstance(st, ast.Return):
            if names:
                values = st.value.elts if isinstance(st.value, ast.Tuple) else [st.value]
                out += [_at(ast.Assign([ast.Name(n, ast.Store())], v), st)
                        for n, v in zip(names, values)]
            return out, True
        if not any(isinstance(n, ast.Return) for n in _own_nodes([st])):
            out.append(st)
            continue
        if not isinstance(st, ast.If):
            return None, False                  # a return inside a loop
        following = list(stmts[i + 1:]) + list(after)
        sides = [_lifted(side, names, copy.deepcopy(following)) for side in (st.body, st.orelse)]
        if sides[0][0] is None or sides[1][0] is None:
            return None, False
        (then, t_always), (orelse, e_always) = sides
        out.append(ast.copy_location(ast.If(st.test, then or [ast.copy_location(ast.Pass(), st)],
                                            orelse), st))
        return out, t_always and e_always
    if after:
        rest, always = _lifted(list(after), names)
        return (None, False) if rest is None else (out + rest, always)
    return out, False


_JUMP_READS = "_moye_jump_reads"
_BREAKS = "_moye_breaks"            # on a loop with a break of its own


def _mark_jumps(fdef):
    """Give each `break` and `continue` of `fdef` the names it reads
    (_summary), before any summary is made: it writes the carried names of
    its loop, which are among the names the loop assigns that are read
    anywhere. Inside a run-time `if`, so that each holds its value there."""
    nodes = _walk(fdef)
    if not any(type(n) is ast.Break or type(n) is ast.Continue for n in nodes):
        return
    loaded = _names_loaded([fdef])
    for loop in nodes:
        if not isinstance(loop, (ast.For, ast.While)):
            continue
        bound = set(_names_stored([loop.target])) if isinstance(loop, ast.For) else set()
        reads = frozenset(n for n in _names_stored(loop.body) if n in loaded and n not in bound)
        for node in _own_nodes(loop.body, _SCOPES + (ast.For, ast.While)):  # not inner loops'
            if isinstance(node, (ast.Break, ast.Continue)):
                setattr(node, _JUMP_READS, reads)
                if isinstance(node, ast.Break):
                    setattr(loop, _BREAKS, True)


def _rt(attr):
    return ast.Attribute(ast.Name(RT, ast.Load()), attr, ast.Load())


def _call(attr, *args):
    return ast.Call(_rt(attr), list(args), [])


def _getters(names):
    """(rt.get(lambda: a), rt.get(lambda: b), ...) tolerating unbound names."""
    return ast.Tuple([_call("get", ast.Lambda(_no_args(), ast.Name(n, ast.Load())))
                      for n in names], ast.Load())


def _no_args():
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[])


def _assign(names, value):
    if not names:
        return ast.Expr(value)
    if len(names) == 1:
        return ast.Assign([ast.Name(names[0], ast.Store())], value)
    target = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
    return ast.Assign([target], value)


def _strs(names):
    return ast.Tuple([ast.Constant(n) for n in names], ast.Load())


class _Rewriter(ast.NodeTransformer):
    def __init__(self, where, first, helper=False):
        self.where = where       # where(node, message): the KernelError naming node's line
        self.first = first       # the file's line of the kernel's `def`
        self.helper = helper     # a @moye.func: its own `return` is checked from its call
        self.counter = 0
        # _summary of each statement as written: a list is summarised (folded) before
        # any statement in it is rewritten, and a loop's own summary is read from here
        self.summaries = {}
        self.loads = {}          # _loaded_in of each rewritten statement
        self.kept = set()        # ids of the statements left as they were written
        self.live = set()        # names the statements after the current one may read first
        self.bases = []          # per function being rewritten: the name of its jump base
        self.loops = []          # the loops around the current statement: (name, carried)

    def generic_visit(self, node):
        """ast.NodeTransformer's, over the fields _walk reads: the leaves
        (contexts, operators) hold nothing to rewrite."""
        for field in _branches(type(node)):
            old = getattr(node, field, None)
            if type(old) is list:
                new = []
                for value in old:
                    if isinstance(value, ast.AST):
                        value = self.visit(value)
                        if value is None:
                            continue
                        if not isinstance(value, ast.AST):
                            new.extend(value)
                            continue
                    new.append(value)
                old[:] = new
            elif isinstance(old, ast.AST):
                new = self.visit(old)
                if new is None:
                    delattr(node, field)
                else:
                    setattr(node, field, new)
        return node

    def _fresh(self, kind):
        self.counter += 1
        return f"__moye_{kind}{self.counter}"

    # statement lists: track what the statements after each one may read first
    def _visit_body(self, body, live_after_body):
        live = [None] * len(body)
        later = live_after_body
        for i in range(len(body) - 1, -1, -1):
            live[i] = later
            reads, writes = _summary(body[i], self.summaries)
            later = reads | (later - writes)
        out = []
        for stmt, live_after in zip(body, live):
            if _as_written(stmt):
                self.kept.add(id(stmt))
                out.append(stmt)
                continue
            saved = self.live
            self.live = live_after
            new = self.visit(stmt)
            self.live = saved
            out.extend(new if isinstance(new, list) else [new])
        return out

    def _live_in_loop(self, node, following):
        """What may be read first after a statement of `node`'s body: the
        loop again (as written), then what follows it."""
        return _summary(node, self.summaries)[0] | following

    def visit_FunctionDef(self, node):
        # a function inside the kernel: its `return` is checked against the control flow
        # opened since it was called, not the kernel's
        base = self._fresh("base") if self.bases or self.helper else None
        self.bases.append(base)
        self.loops.append(None)         # its `break` is its own loops'
        node.body = self._visit_body(node.body, set())
        self.loops.pop()
        self.bases.pop()
        if base is not None:
            node.body.insert(0, ast.copy_location(
                ast.Assign([ast.Name(base, ast.Store())], _call("jump_base")), node.body[0]))
        return node

    def _live_after(self, names):
        return [n for n in names if n in self.live]

    def visit_For(self, node):
        following = self.live
        in_loop = self._live_in_loop(node, following)   # before node.iter is rewritten
        # read from the body as written: rewritten, its inner loops are `try` statements,
        # whose reads all count as reads before assignments
        bound = _names_stored([node.target])
        assigned = [n for n in _names_stored(node.body) if n not in bound]
        early = _read_first(node.body, self.summaries)
        node.iter = self.visit(node.iter)
        if isinstance(node.iter, ast.Call) and isinstance(node.iter.func, ast.Name) \
                and node.iter.func.id == "range":
            # range() of a dynamic bound must not reach Python's range
            node.iter.func = ast.copy_location(_rt("range"), node.iter.func)
        if node.orelse:
            raise self.where(node, "`for ... else` is not supported in a kernel")
        carried = [n for n in assigned if n in early or n in self.live]
        loop = self._fresh("for")
        self.loops.append((loop, carried))
        node.body = self._visit_body(node.body, in_loop)
        self.loops.pop()
        live = [n for n in carried if n in self.live]
        reads = sorted(n for n in _loaded_in(node.body, self.loads) if not n.startswith("__moye"))
        setup = ast.Assign([ast.Name(loop, ast.Store())],
                           _call("for_loop", node.iter, _strs(carried), _getters(carried),
                                 ast.Constant(f"{loop}:{node.lineno - self.first + 1}"), _strs(live),
                                 _strs(reads)))
        head = _assign(carried, ast.Call(ast.Attribute(ast.Name(loop, ast.Load()), "carried",
                                                       ast.Load()), [], []))
        tail = ast.Expr(ast.Call(ast.Attribute(ast.Name(loop, ast.Load()), "next", ast.Load()),
                                 [_getters(carried)], []))
        inner = ast.For(node.target, ast.Name(loop, ast.Load()), [head] + node.body + [tail],
                        [], None)
        # an unrolled attempt whose body raises falls back to unrolling while tracing
        retry = ast.If(ast.UnaryOp(ast.Not(), ast.Call(ast.Attribute(
            ast.Name(loop, ast.Load()), "retry", ast.Load()), [], [])), [ast.Raise()], [])
        guarded = ast.Try([inner], [ast.ExceptHandler(_rt("TRACE_ERRORS"), None, [retry])], [],
                          [])
        new_for = ast.While(ast.Call(ast.Attribute(ast.Name(loop, ast.Load()), "attempt",
                                                   ast.Load()), [], []), [guarded], [])
        done = _assign(carried, ast.Call(ast.Attribute(ast.Name(loop, ast.Load()), "done",
                                                       ast.Load()), [], []))
        targets = self._live_after(bound)
        after = _assign(targets, ast.Call(ast.Attribute(ast.Name(loop, ast.Load()), "targets",
                                                        ast.Load()),
                                          [_strs(targets), _getters(targets)], []))
        out = (setup, new_for, done) + ((after,) if targets else ())
        return [ast.copy_location(s, node) for s in out]

    def visit_While(self, node):
        if isinstance(node.test, ast.Constant) and node.test.value in (True, 1) and \
                getattr(node, _BREAKS, False):
            # `while True:` that a break ends: a `for` over control.forever, traced once as
            # a kernel loop where its body allows (Python's loop while tracing otherwise)
            target = ast.Name(self._fresh("forever"), ast.Store())
            loop = ast.For(target, _call("forever"), node.body, [], None)
            return self.visit_For(ast.copy_location(loop, node))
        assigned = _names_stored(node.body)         # as written (visit_For says why)
        early = _read_first(node.body, self.summaries) | _names_loaded([node.test])
        if node.orelse:
            raise self.where(node, "`while ... else` is not supported in a kernel")
        if any(isinstance(n, ast.NamedExpr) for n in _walk(node.test)):
            raise self.where(node, "`:=` in a `while` condition is not supported in a kernel "
                                   "(the condition is traced apart from the body): assign the "
                                   "name before the loop and at the end of its body")
        carried = [n for n in assigned if n in early or n in self.live]
        w = self._fresh("while")
        self.loops.append((w, carried))
        node.body = self._visit_body(node.body, self._live_in_loop(node, self.live))
        self.loops.pop()
        node.test = self.visit(node.test)
        wl = ast.Name(w, ast.Load())
        setup = ast.Assign([ast.Name(w, ast.Store())],
                           _call("while_loop", _strs(carried), _getters(carried),
                                 ast.Lambda(_no_args(), copy.deepcopy(node.test))))
        head = _assign(carried, ast.Call(ast.Attribute(wl, "carried", ast.Load()), [], []))
        test = ast.If(ast.UnaryOp(ast.Not(), ast.Call(ast.Attribute(wl, "test", ast.Load()),
                                                      [node.test], [])), [ast.Break()], [])
        nxt = ast.Expr(ast.Call(ast.Attribute(wl, "next", ast.Load()), [_getters(carried)], []))
        fin = ast.If(ast.Call(ast.Attribute(wl, "finished", ast.Load()), [], []), [ast.Break()], [])
        loop = ast.While(ast.Constant(True), [head, test] + node.body + [nxt, fin], [])
        done = _assign(carried, ast.Call(ast.Attribute(wl, "done", ast.Load()), [], []))
        return [ast.copy_location(s, node) for s in (setup, loop, done)]

    def visit_If(self, node):
        following = self.live
        assigned = _names_stored(node.body + node.orelse)      # as written (visit_For says why)
        merged = self._live_after(assigned)
        # names the then-branch assigns and the else-branch reads first: at trace time
        # both branches run, so the else-branch must see them as they were before the if
        seen = [n for n in _names_stored(node.body) if n not in merged]
        reread = _read_first(node.orelse, self.summaries)
        node.test = self.visit(node.test)
        node.body = self._visit_body(node.body, following)
        node.orelse = self._visit_body(node.orelse, following)
        restored = merged + [n for n in seen if n in reread]
        b = self._fresh("if")
        bl = ast.Name(b, ast.Load())
        setup = ast.Assign([ast.Name(b, ast.Store())],
                           _call("if_", node.test, _strs(merged), _getters(restored)))
        then_done = ast.Expr(ast.Call(ast.Attribute(bl, "then_done", ast.Load()),
                                      [_getters(merged)], []))
        then = ast.If(ast.Call(ast.Attribute(bl, "then", ast.Load()), [], []),
                      node.body + [then_done], [])
        out = [setup, then]
        if node.orelse:
            restore = _assign(restored, ast.Call(ast.Attribute(bl, "restore", ast.Load()), [],
                                                 []))
            else_done = ast.Expr(ast.Call(ast.Attribute(bl, "else_done", ast.Load()),
                                          [_getters(merged)], []))
            out.append(ast.If(ast.Call(ast.Attribute(bl, "orelse", ast.Load()), [], []),
                              [restore] + node.orelse + [else_done], []))
        out.append(_assign(merged, ast.Call(ast.Attribute(bl, "result", ast.Load()), [], [])))
        return [ast.copy_location(s, node) for s in out]

    def visit_Break(self, node):
        return self._jump(node, "break")

    def visit_Continue(self, node):
        return self._jump(node, "continue")

    def _jump(self, node, kind):
        """`if LOOP.jump(kind, carried values): break` (or continue): Python
        jumps in a loop it runs while tracing, the kernel's loop otherwise."""
        loop, carried = self.loops[-1]
        test = ast.Call(ast.Attribute(ast.Name(loop, ast.Load()), "jump", ast.Load()),
                        [ast.Constant(kind), _getters(carried)], [])
        return ast.copy_location(ast.If(test, [node], []), node)

    def visit_Return(self, node):
        base = self.bases[-1]
        if base is None:        # the kernel's own: the threads that reach it end
            if not (node.value is None or isinstance(node.value, ast.Constant) and
                    node.value.value is None):
                raise self.where(node, "a kernel returns nothing (a CUDA __global__ function "
                                       "is void): store its results in an output array")
            return ast.copy_location(ast.If(_call("kernel_return"), [node], []), node)
        check = _call("check_return", ast.Name(base, ast.Load()) if base else ast.Constant(None))
        return [ast.copy_location(ast.Expr(check), node), self.generic_visit(node)]

    def visit_Assert(self, node):
        self.generic_visit(node)
        message = ast.Lambda(_no_args(), node.msg) if node.msg is not None else \
            ast.Constant(None)
        return ast.copy_location(ast.Expr(_call("assert_", node.test, message)), node)

    # expressions ---------------------------------------------------------
    def visit_BoolOp(self, node):
        self.generic_visit(node)
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        return ast.copy_location(_call(fn, *[ast.Lambda(_no_args(), v) for v in node.values]), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_call("not_", node.operand), node)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return ast.copy_location(_call("ifexp", node.test, ast.Lambda(_no_args(), node.body),
                                       ast.Lambda(_no_args(), node.orelse)), node)

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        parts, left = [], node.left
        for op, right in zip(node.ops, node.comparators):
            parts.append(ast.Lambda(_no_args(), ast.Compare(left, [op], [right])))
            left = copy.deepcopy(right)         # one node in two places would move twice
        return ast.copy_location(_call("and_", *parts), node)

    def visit_Call(self, node):
        self.generic_visit(node)
        if type(node.func) is ast.Name and node.func.id in control.CONVERSIONS:
            node.func = ast.copy_location(_rt(control.CONVERSIONS[node.func.id]), node.func)
        elif _math_call(node):          # rt.math_(f, args): of kernel values, the kernel's
            node.args.insert(0, node.func)
            node.func = ast.copy_location(_rt("math_"), node.func)
        return node


def _math_call(node):
    """Whether a Call may be of a function of Python's math module (math.f(x),
    or by a name the kernel can run: sqrt(x)), which control.math_ tells
    when tracing."""
    f = node.func
    if type(f) is ast.Attribute:
        return type(f.value) is ast.Name and f.value.id == "math" or f.attr in MATH_FUNCTIONS
    return type(f) is ast.Name and f.id in MATH_FUNCTIONS


# statements that hold no statements, and so are rewritten only in expressions
_SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Assert, ast.Raise, ast.Pass,
           ast.Delete)


def _as_written(stmt):
    """Whether the rewrite leaves `stmt` as it is: a simple statement none of
    whose expressions the visit_ methods above change (and, or, not, x if c
    else y, chained comparisons, min, max, int, float, bool, len and the
    math functions), which need not be visited."""
    if not isinstance(stmt, _SIMPLE) or type(stmt) is ast.Assert:
        return False
    for n in _walk(stmt):
        t = type(n)
        if t is ast.BoolOp or t is ast.IfExp or t is ast.UnaryOp and type(n.op) is ast.Not \
                or t is ast.Compare and len(n.ops) > 1 \
                or t is ast.Call and (type(n.func) is ast.Name and n.func.id in
                                      control.CONVERSIONS or _math_call(n)):
            return False
    return True


_REFUSED = {
    ast.Try: "`try` is not supported in a kernel: its faults happen when the kernel runs, "
             "where no handler can catch them",
    ast.With: "`with` is not supported in a kernel",
    ast.AsyncWith: "`async with` is not supported in a kernel",
    ast.AsyncFor: "`async for` is not supported in a kernel",
    ast.AsyncFunctionDef: "`async def` is not supported in a kernel: a kernel is a plain def",
    ast.Global: "`global` is not supported in a kernel: a kernel cannot assign Python "
                "variables outside itself; pass values as arguments and write results to arrays",
    ast.Nonlocal: "`nonlocal` is not supported in a kernel: a kernel cannot assign Python "
                  "variables outside itself; pass values as arguments and write results to "
                  "arrays",
}
if hasattr(ast, "TryStar"):
    _REFUSED[ast.TryStar] = _REFUSED[ast.Try]
_GENERATOR = "a kernel cannot be a generator (`yield`): its body would never run"
_CO_GENERATOR = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _refuse(fdef, where, code):
    """Raise for the first construct a kernel cannot run as written (`code`:
    its code object, whose flags say whether it yields)."""
    refused = [n for n in _walk(fdef) if type(n) in _REFUSED]
    if refused:
        node = min(refused, key=lambda n: n.lineno)
        raise where(node, _REFUSED[type(node)])
    if not code.co_flags & (inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR):
        return
    for node in _own_nodes(fdef.body):      # its own yields, not a nested function's
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            raise where(node, _GENERATOR)


_AT_END = {"next", "done", "then_done", "else_done", "result", "targets"}


def _place(node, lineno, col, end_lineno, end_col, kept):
    """ast.fix_missing_locations (a node without a position takes its
    parent's), and the position of our method calls: Python puts a method
    call on the line its attribute ends on, and our calls span the whole
    statement: those that open a loop or branch name its first line, those
    that end it (writing the carried values) its last. The statements whose
    ids are in `kept` are as parsed, positions and all: passed over."""
    if id(node) in kept:
        return
    got = node.__dict__         # read there: a getattr that misses raises and costs more
    if "lineno" in node._attributes:
        if got.get("lineno") is None:
            node.lineno = lineno
        else:
            lineno = got["lineno"]
        if got.get("end_lineno") is None:
            node.end_lineno = end_lineno
        else:
            end_lineno = got["end_lineno"]
        if got.get("col_offset") is None:
            node.col_offset = col
        else:
            col = got["col_offset"]
        if got.get("end_col_offset") is None:
            node.end_col_offset = end_col
        else:
            end_col = got["end_col_offset"]
    for field in _branches(type(node)):
        v = got.get(field)
        if isinstance(v, ast.AST):
            _place(v, lineno, col, end_lineno, end_col, kept)
        elif type(v) is list:
            for x in v:
                if isinstance(x, ast.AST):
                    _place(x, lineno, col, end_lineno, end_col, kept)
    if type(node) is ast.Attribute and type(node.value) is ast.Name and \
            node.value.id.startswith("__moye") and node.attr not in _AT_END:
        node.end_lineno, node.end_col_offset = node.lineno, node.col_offset + len(node.attr)


def _code_named(code, name):
    return next(c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == name)


def _compiled(fdef, freevars, file, flags, kept):
    """The module code defining the function `fdef`, compiled with the
    __future__ `flags` of its module: where it has `freevars`, inside a
    factory taking them, so that they stay free variables (cells shared
    with the original's closure). `kept`: the ids of its statements the
    rewrite left as parsed."""
    if freevars:                            # defined in a function that gives the closure
        factory = ast.FunctionDef("__moye_factory", ast.arguments(
            posonlyargs=[], args=[ast.arg(v) for v in freevars], vararg=None, kwonlyargs=[],
            kw_defaults=[], kwarg=None, defaults=[]), [fdef, ast.Return(ast.Name(fdef.name,
                                                                                 ast.Load()))],
            [], None)
        module = ast.Module([ast.copy_location(factory, fdef)], [])
    else:
        module = ast.Module([fdef], [])
    _place(module, 1, 0, 1, 0, kept)
    return compile(module, file, "exec", flags=flags, dont_inherit=True)


_FUTURE_FLAGS = functools.reduce(operator.or_, (getattr(__future__, f).compiler_flag
                                               for f in __future__.all_feature_names))


def _stale(fn):
    """Whether fn's source file, as it reads now, no longer compiles to fn's
    code (where its module was loaded by pytest's assertion rewriting, whose
    asserts compile to other code than the source's: never). The whole file
    is compiled: a function's bytecode depends on its module (a method of an
    imported module is called another way)."""
    code = fn.__code__
    if type(fn.__globals__.get("__loader__")).__name__ == "AssertionRewritingHook":
        return False
    try:
        module = _file_code(code.co_filename, "".join(linecache.getlines(code.co_filename)))
    except (SyntaxError, ValueError):
        return True
    return not any(_same_code(c, code) for c in _codes(module)
                   if c.co_name == code.co_name and c.co_firstlineno == code.co_firstlineno)


@functools.lru_cache(maxsize=16)
def _file_code(file, text):
    return compile(text, file, "exec", dont_inherit=True)


def _codes(code):
    """Every code object inside module code `code`, nested ones too."""
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield c
            yield from _codes(c)


def _same_code(a, b):
    """Whether code objects `a` and `b` are the same code (line numbers
    aside): their bytecode, names and constants, nested code compared alike."""
    if (a.co_code, a.co_names, a.co_varnames, a.co_freevars, a.co_cellvars) != \
            (b.co_code, b.co_names, b.co_varnames, b.co_freevars, b.co_cellvars) or \
            len(a.co_consts) != len(b.co_consts):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, types.CodeType):
            if not (isinstance(y, types.CodeType) and _same_code(x, y)):
                return False
        elif type(x) is not type(y) or repr(x) != repr(y):     # repr: -0.0 is not 0.0
            return False
    return True


def source_stamp(fn):
    """(mtime, size) of fn's source file now, or None where there is none:
    taken when a kernel or helper is decorated, so that rewrite_function
    compiles the file to compare its code (_stale) only where the file
    changed since."""
    try:
        st = os.stat(fn.__code__.co_filename)
    except (OSError, AttributeError, TypeError, ValueError):
        return None
    return st.st_mtime_ns, st.st_size


def _definition(fn):
    """(fn's source lines, decorators first; the file line of the first; the
    statement they parse to, its nodes at the file's line numbers): the
    lines _block finds where they parse, else inspect.getsourcelines's
    (whose tokenizer costs milliseconds)."""
    block = _block(fn)
    if block is not None:
        try:
            return (*block, _parse(*block))
        except SyntaxError:
            pass
    lines, first = inspect.getsourcelines(fn)
    return lines, first, _parse(lines, first)


def _parse(lines, first):
    # blank lines first: the nodes carry the file's line numbers
    return ast.parse("\n" * (first - 1) + textwrap.dedent("".join(lines))).body[0]


def _block(fn):
    """(fn's source lines, the first's number) read without a tokenizer: from
    its first line (a decorator or the def) to the last line of its code,
    nested code included, then on over the lines indented deeper than that
    first line (a `pass` or a closing bracket has no code of its own), and
    the blank lines and comments among them. None where the first line is
    neither a decorator nor a def (a lambda), or a tab or form feed could
    make indentation read otherwise than Python reads it, or fn wraps
    another."""
    if hasattr(fn, "__wrapped__"):          # inspect reads the wrapped function's
        return None
    code = fn.__code__
    file, first = code.co_filename, code.co_firstlineno
    linecache.checkcache(file)
    lines = linecache.getlines(file, fn.__globals__)
    if not 0 < first <= len(lines) or not lines[first - 1].lstrip().startswith(("@", "def ")):
        return None
    indent = len(lines[first - 1]) - len(lines[first - 1].lstrip())
    end = last = max(first, _last_line(code))
    while end < len(lines):
        text = lines[end].lstrip()
        end += 1
        if text and text[0] != "#":
            if len(lines[end - 1]) - len(text) <= indent:
                break
            last = end
    block = lines[first - 1:last]
    return None if any("\t" in x or "\f" in x for x in block) else (block, first)


def _last_line(code):
    """The last source line of `code`'s instructions and its nested code's."""
    last = max((line for _, _, line in code.co_lines() if line is not None), default=0)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            last = max(last, _last_line(c))
    return last


def rewrite_function(fn, helper=False, stamp=None):
    """`fn` with its control flow rewritten; it sees the same globals and
    closure. None if its source cannot be read (made by `exec`, typed at an
    interactive prompt): the caller traces it as it is. Raises a KernelError
    naming the line for what a kernel cannot run as written. A `helper` (a
    @moye.func) may be a lambda (None: it runs as it is), and its `return`
    is checked against the control flow opened since it was called.
    `stamp`: fn's source_stamp when it was defined; where the file changed
    since (or no stamp is given), a file that no longer holds fn's code is
    refused."""
    file, name = fn.__code__.co_filename, fn.__name__
    what_kind = "moye.func" if helper else "kernel"

    def where(line, what):
        text = linecache.getline(file, line).strip()
        err = KernelError(f"in {what_kind} '{name}', {file}:{line}: {text}\n  {what}")
        err.located = True
        return err

    if name == "<lambda>" and helper:
        return None
    if name == "<lambda>":
        raise where(fn.__code__.co_firstlineno, "a kernel is a function defined with def, "
                                                "not a lambda")
    lines, first = None, fn.__code__.co_firstlineno
    try:
        lines, first, fdef = _definition(fn)
    except (OSError, TypeError, SyntaxError, IndexError):
        fdef = None
    if lines is not None and (stamp is None or source_stamp(fn) != stamp) and _stale(fn):
        raise where(first, f"{file} changed after Python compiled this {what_kind}: the "
                           "source there is not the code that runs. Reload its module "
                           "(importlib.reload) or restart Python.")
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)) or fdef.name != name:
        if fn.__code__.co_flags & _CO_GENERATOR:
            raise where(fn.__code__.co_firstlineno, _GENERATOR if fn.__code__.co_flags &
                        (inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR) else
                        _REFUSED[ast.AsyncFunctionDef])
        return None                         # no source, or not this function's
    at = lambda node, what: where(node.lineno, what)  # noqa: E731
    _refuse(fdef, at, fn.__code__)
    _lift_returns(fdef, helper)
    _mark_jumps(fdef)
    fdef.decorator_list = []
    freevars = fn.__code__.co_freevars
    rewriter = _Rewriter(at, first, helper)
    fdef = rewriter.visit(fdef)
    code = _compiled(fdef, freevars, file, fn.__code__.co_flags & _FUTURE_FLAGS, rewriter.kept)
    namespace = fn.__globals__
    namespace[RT] = control
    if freevars:                            # the new function shares the original's cells
        code = _code_named(_code_named(code, "__moye_factory"), name)
        cells = dict(zip(freevars, fn.__closure__))
        new = types.FunctionType(code, namespace, name, fn.__defaults__,
                                 tuple(cells[v] for v in code.co_freevars))
    else:
        local = {}
        exec(code, namespace, local)
        new = local[name]
        new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    return new

"""Transformations of a traced kernel."""
from .instr import Instr, children, operands_of
from .values import Value


def eliminate_dead_code(kernel):
    """Drop pure instructions whose results are never used, and then those
    whose results only they used, and so on (in place). One walk counts
    each value's uses; dropping an instruction takes back its operands'
    uses; one more walk removes what was dropped."""
    uses, pure = {}, {}             # value id -> its uses; -> the pure instruction defining it

    def count(body):
        for s in body:
            for a in _values(operands_of(s)):
                uses[a.id] = uses.get(a.id, 0) + 1
            if isinstance(s, Instr):
                if s.pure and s.result is not None:
                    pure[s.result.id] = s
            else:
                for child in children(s):
                    count(child)
    count(kernel.body)
    dead = set()
    todo = [s for i, s in pure.items() if i not in uses]
    while todo:
        s = todo.pop()
        dead.add(id(s))
        for a in _values(s.args):
            uses[a.id] -= 1
            if not uses[a.id] and a.id in pure:
                todo.append(pure[a.id])
    if dead:
        _sweep(kernel.body, dead)
    return kernel


def _values(operands):
    """The Values among `operands`, those inside tuples included."""
    for a in operands:
        if isinstance(a, Value):
            yield a
        elif isinstance(a, tuple):
            yield from _values(a)


def _sweep(body, dead):
    """Remove the statements whose ids are in `dead` from `body` and its
    nested bodies (each list kept, its contents replaced)."""
    body[:] = [s for s in body if id(s) not in dead]
    for s in body:
        if not isinstance(s, Instr):
            for child in children(s):
                _sweep(child, dead)

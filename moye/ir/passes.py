"""Transformations of a traced kernel."""
from .instr import Instr, children, operands_of
from .values import Value


def eliminate_dead_code(kernel):
    """Drop pure instructions whose results are never used (in place)."""
    while True:
        used = set()

        def count(body):
            for s in body:
                for a in operands_of(s):
                    if isinstance(a, Value):
                        used.add(a.id)
                for child in children(s):
                    count(child)
        count(kernel.body)
        removed = [False]

        def sweep(body):
            keep = []
            for s in body:
                if isinstance(s, Instr) and s.pure and s.result is not None \
                        and s.result.id not in used:
                    removed[0] = True
                    continue
                for child in children(s):
                    child[:] = sweep(child)
                keep.append(s)
            return keep
        kernel.body[:] = sweep(kernel.body)
        if not removed[0]:
            return kernel

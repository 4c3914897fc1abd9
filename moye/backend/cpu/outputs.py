"""Which array arguments a kernel writes, and the refusal of a NumPy array
that cannot take the writes: a read-only one, or a broadcast view (a mode
of extent > 1 with stride 0, whose elements alias each other, so the
threads writing them would race).

A parameter is written when an instruction that writes memory (its class
names the operand it `writes` through: a store's pointer, a TMA store's
tensor map) goes to an address that derives from its pointer (through pointer
offsets, casts and the variables that hold them)."""
import numpy as np

from ...errors import LaunchError
from ... import ir


def written_params(kernel):
    """The names of the parameters whose memory the kernel writes."""
    roots = {id(p.value): {p.name} for p in kernel.params
             if isinstance(p.type, ir.PtrType) or p.type is ir.TENSOR_MAP}
    instrs = list(ir.instructions(kernel.body))
    changed = True
    while changed:                  # a pointer variable written in a loop feeds itself
        changed = False
        for s in instrs:
            if isinstance(s, (ir.Write, ir.Decl)):
                target, sources = s.args[0], s.args[1:2]
            elif s.result is not None and isinstance(s.result.type, ir.PtrType):
                target, sources = s.result, s.args
            else:
                continue
            got = set().union(*(roots.get(id(a), ()) for a in sources))
            if got - roots.get(id(target), set()):
                roots.setdefault(id(target), set()).update(got)
                changed = True
    out = set()
    for s in instrs:
        if s.writes is not None:
            out |= roots.get(id(getattr(s, s.writes)), set())
    return out


def check_writable(kernel_name, name, arr):
    """Refuse NumPy array `arr`, argument `name`, as a written one if it is
    read-only or broadcast."""
    if not isinstance(arr, np.ndarray):
        return
    if not arr.flags.writeable:
        raise LaunchError(f"kernel '{kernel_name}' writes argument '{name}', but it is a "
                        "read-only NumPy array; pass a writable one (e.g. a copy)")
    for k, (n, d) in enumerate(zip(arr.shape, arr.strides)):
        if d == 0 and n > 1:
            raise LaunchError(f"kernel '{kernel_name}' writes argument '{name}', but it is a "
                            f"broadcast NumPy array (shape {arr.shape}, strides {arr.strides}: "
                            f"mode {k} repeats one element {n} times); pass a writable copy")

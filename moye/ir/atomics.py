"""Atomic read-modify-write instructions on global memory. The function
kernels call is `moye.atomic_add` (`device/builtins.py`); each class's C++
and CPU rules follow it (`lowering.py` states their contract)."""
import numpy as np

from .. import types as T
from .instr import Instr, is_integer, type_of
from .lowering import lowering
from .values import PtrType


class AtomicAdd(Instr):
    """atomicAdd(&ptr[index], value): adds `value` to an `elem` element of
    global memory, atomically, and gives the element's value before."""
    op = "atomic_add"
    operands = ("ptr", "index", "value")
    attributes = {"elem": None}
    writes = "ptr"
    TYPES = (T.Int32, T.UInt32, T.UInt64, T.Float32, T.Float64)     # those atomicAdd takes

    def result_type(self):
        return self.elem

    def check(self):
        t = type_of(self.ptr)
        if not isinstance(t, PtrType) or t.space != "global":
            return f"the base {self.ptr!r} is not a pointer to global memory"
        if self.elem not in self.TYPES:
            return f"atomicAdd takes {', '.join(map(str, self.TYPES))}, not {self.elem}"
        tv = type_of(self.value)
        if tv is not None and tv is not self.elem:
            return f"the value is {tv}, not {self.elem}"
        return None if is_integer(self.index) else f"the index {self.index!r} is not an integer"


@lowering("cuda", AtomicAdd)
def _emit_atomic_add(w, s, ind, decl):
    w.emit(ind, f"{decl}atomicAdd(&{w.operand(s.ptr)}[{w.operand(s.index)}], "
                f"{w.arg(s.value, s.elem)});")


@lowering("cpu", AtomicAdd)
def _run_atomic_add(b, s, mask):
    """The active lanes add one after another, in lane order (one order the
    GPU may take), each reading the sum of those before it."""
    kind, buf, index, rows = b.index(s.ptr, s.index, s, mask, 1)
    values = b.vec(s.value).astype(buf.dtype)
    old = np.zeros(b.n, buf.dtype)
    with np.errstate(all="ignore"):
        for lane in np.nonzero(mask)[0]:
            i = index[lane]
            old[lane] = buf[i]
            buf[i:i + 1] += values[lane]
    b.set_result(s, old, mask)

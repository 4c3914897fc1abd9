"""What a kernel body can call besides the array and layout functions:
thread and block indices, barriers, shared arrays, selection, math and
printing. All ids are 0-based.
"""
import math

from .. import types as T
from ..array import MoYeArray
from ..layout import Layout, cosize
from . import ir
from .memory import PointerEngine
from .tracer import (KernelError, Sym, _coerce, current, special, sym_minmax, sym_select,
                     user_location)


class _Dim3:
    """`.x`, `.y`, `.z` of a CUDA special register (0-based ids)."""

    def __init__(self, name):
        self._name = name

    @property
    def x(self):
        return special(f"{self._name}.x")

    @property
    def y(self):
        return special(f"{self._name}.y")

    @property
    def z(self):
        return special(f"{self._name}.z")

    def __repr__(self):
        return f"moye.{self._name}"


thread_idx = _Dim3("threadIdx")
block_idx = _Dim3("blockIdx")
block_dim = _Dim3("blockDim")
grid_dim = _Dim3("gridDim")


def sync_threads():
    """Barrier for all threads of the block (CUDA's __syncthreads)."""
    current().instr("barrier", ())


def shared_array(dtype, layout, align=128):
    """A block's shared-memory array of `dtype` with `layout` (MoYe's
    MoYeSharedArray). Blocks beyond 48 KB in total use dynamic shared memory."""
    dtype = T.as_element_type(dtype)
    layout = layout if isinstance(layout, Layout) or hasattr(layout, "inner") else Layout(layout)
    n = cosize(layout)
    if not isinstance(n, int):
        raise KernelError(f"shared_array: layout {layout} has a dynamic size; shared memory "
                          "needs a static layout")
    arr = ir.Array(dtype, n, "shared", align)
    b = current()
    b.kernel.arrays.append(arr)
    b.kernel.array_locs[arr.id] = user_location()
    return MoYeArray.view_of(PointerEngine(arr, dtype, "shared", 0, align), layout)


def register_allocate(dtype, size):
    """The kernel's allocator for owning arrays: a register array."""
    if not isinstance(size, int):
        raise KernelError(f"a register fragment needs a static size, got {size!r}")
    arr = ir.Array(dtype, size, "local", 16)
    current().kernel.arrays.append(arr)
    return PointerEngine(arr, dtype, "local", 0, 16)


def ifelse(cond, a, b):
    """`cond ? a : b` on dynamic or static values."""
    return sym_select(cond, a, b)


def minimum(a, b):
    return sym_minmax("min", a, b)


def maximum(a, b):
    return sym_minmax("max", a, b)


def _math(fn, pyfn):
    def f(*args):
        if not any(isinstance(a, Sym) for a in args):
            return pyfn(*args)
        t = T.Float32
        for a in args:
            if isinstance(a, Sym) and a.type.is_float and a.type.bits > t.bits:
                t = a.type
        ops = tuple(_coerce(a if isinstance(a, Sym) else float(a), t) for a in args)
        return Sym(current().instr("call", ops, t, fn=fn), t)
    f.__name__ = fn
    f.__doc__ = f"{fn} of dynamic or static floats."
    return f


exp = _math("exp", math.exp)
exp2 = _math("exp2", lambda x: 2.0 ** x)
log = _math("log", math.log)
log2 = _math("log2", math.log2)
sqrt = _math("sqrt", math.sqrt)
rsqrt = _math("rsqrt", lambda x: 1.0 / math.sqrt(x))
sin = _math("sin", math.sin)
cos = _math("cos", math.cos)
tanh = _math("tanh", math.tanh)
fma = _math("fma", lambda a, b, c: a * b + c)


def cast(x, dtype):
    """`x` converted to `dtype`."""
    dtype = T.as_element_type(dtype)
    if isinstance(x, Sym):
        return Sym.cast(x, dtype)
    return dtype(x) if dtype.numpy is not None else x


def cushow(*values, fmt=None):
    """Print from every thread of the kernel (MoYe's @cushow): numbers and
    dynamic values; arrays print their layout."""
    parts, args = [], []
    for v in values:
        if isinstance(v, Sym):
            parts.append("%f" if v.type.is_float else "%lld")
            args.append(_coerce(v, T.Float64 if v.type.is_float else T.Int64))
        else:
            parts.append(str(v).replace("%", "%%"))
    current().instr("print", tuple(args), fmt=(fmt or " ".join(parts)) + "\n")


class Constexpr:
    """Marks a kernel argument (or a parameter annotation) as compile-time:
    its value is baked into the kernel and part of its specialization."""

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Constexpr({self.value!r})"


__all__ = ["thread_idx", "block_idx", "block_dim", "grid_dim", "sync_threads", "shared_array",
           "ifelse", "minimum", "maximum", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin",
           "cos", "tanh", "fma", "cast", "cushow", "Constexpr"]

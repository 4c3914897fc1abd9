"""What a kernel body can call besides the array and layout functions:
thread and block indices, barriers, shared arrays, selection, math and
printing. All ids are 0-based.
"""
import math
import numbers

import numpy as np

from .. import types as T
from ..array import MoYeArray
from ..errors import MoyeTypeError
from ..layout import Layout, cosize, size
from .. import ir
from ..compiler.control import thread_print
from ..compiler.memory import PointerEngine, copy_elements, index_operand, vector_split
from ..compiler.tracer import (MATH_FUNCTIONS, UFUNCS, KernelError, Sym, coerce, current,
                               special, sym_minmax, sym_select, tracing, user_location)
from .fastmath import FAST_FORMS, exp2_host, exp_host


class Dim3:
    """`.x`, `.y`, `.z` of a special register (0-based ids), read by `read`
    (the CUDA builtins' by default), shown as moye.`label`."""

    def __init__(self, name, read=special, label=None):
        self._name, self._read, self._label = name, read, label or name

    @property
    def x(self):
        return self._read(f"{self._name}.x")

    @property
    def y(self):
        return self._read(f"{self._name}.y")

    @property
    def z(self):
        return self._read(f"{self._name}.z")

    def __repr__(self):
        return f"moye.{self._label}"


thread_idx = Dim3("threadIdx")
block_idx = Dim3("blockIdx")
block_dim = Dim3("blockDim")
grid_dim = Dim3("gridDim")


def sync_threads():
    """Barrier for all threads of the block (CUDA's __syncthreads)."""
    current().instr("barrier", ())


def sync_warp():
    """Barrier for the threads of this warp (CUDA's __syncwarp() with the full
    mask), which every thread of the warp calls: a warp's threads do not run
    in lock-step, so one lane's shared-memory writes reach another lane
    after it (or a wider barrier).
        >>> import moye
        >>> @moye.kernel
        ... def rotate(out, x):
        ...     t = moye.thread_idx.x
        ...     s = moye.shared_array(moye.Float32, 64)
        ...     s[t] = x[t]
        ...     moye.sync_warp()                    # each warp reads its own lanes
        ...     out[t] = s[t // 32 * 32 + (t + 1) % 32]
        >>> out = np.zeros(64, np.float32)
        >>> rotate[1, 64](out, np.arange(64, dtype=np.float32))
        >>> out[[0, 31, 32, 63]]
        array([ 1.,  0., 33., 32.], dtype=float32)
    """
    current().instr("sync_warp", ())


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


def cp_async_commit():
    """Close this thread's group of cp.async copies issued so far
    (cp.async.commit_group). MoYe: cp_async_commit; CuTe: cp_async_fence."""
    current().instr("cp_async_commit", ())


def cp_async_wait(n=None):
    """Wait until at most `n` committed cp.async groups of this thread are
    pending (cp.async.wait_group n); with no `n`, wait for every copy issued
    (cp.async.wait_all). Follow it with sync_threads() before other threads
    read the data. MoYe: cp_async_wait; CuTe: cp_async_wait<N>."""
    if n is not None and (not isinstance(n, int) or n < 0):
        raise KernelError(f"cp_async_wait: n must be a static int >= 0, got {n!r}")
    current().instr("cp_async_wait", (), n=n)


def cucopyto(dst, src):
    """copyto for kernels choosing the instruction: cp.async for global to
    shared memory (the widest of 16, 8 or 4 bytes the layouts allow; wait
    with cp_async_wait), otherwise the widest aligned vector loads and
    stores. MoYe: cucopyto!.
    """
    d, s_ = dst.engine, src.engine
    if not isinstance(d, PointerEngine) or not isinstance(s_, PointerEngine):
        raise KernelError("cucopyto: both arrays must be kernel arrays (global, shared or "
                          "registers)")
    n = size(dst.layout)
    if size(src.layout) != n:
        raise KernelError(f"cucopyto: dst {dst.layout} and src {src.layout} differ in size")
    if s_.space == "global" and d.space == "shared":
        split = vector_split(d, dst.layout, s_, src.layout, n)
        vec = split[0] if split else 1
        nbytes = vec * d.dtype.bits // 8
        if nbytes >= 4:
            b = current()
            for j in range(n // vec):
                if split:
                    di, si = d.offset + split[1]((0, j)), s_.offset + split[2]((0, j))
                else:       # no common vector: one cp.async per element of 4 or 8 bytes
                    di, si = d.offset + dst.layout(j), s_.offset + src.layout(j)
                b.instr("cp_async", (d.base, index_operand(di), s_.base, index_operand(si)),
                        bytes=nbytes, cache="cg" if nbytes == 16 else "ca")
            return dst
    copy_elements(d, dst.layout, s_, src.layout)
    return dst


def _index(i):
    return coerce(i, T.Int32) if isinstance(i, Sym) else i


def _shfl(mode, doc):
    def f(x, lane, width=32):
        if not isinstance(x, Sym):
            raise KernelError(f"shuffle of {x!r}: only dynamic values travel between lanes")
        if x.type.bits not in (32, 64):
            raise KernelError(f"shuffle of a {x.type}: 32- or 64-bit values only")
        if isinstance(width, int) and (width < 1 or width > 32 or width & (width - 1)):
            raise KernelError(f"shuffle width must be a power of two up to 32, got {width}")
        v = current().instr("shfl", (x.value, _index(lane), _index(width)), x.type, mode=mode)
        return Sym(v, x.type)
    f.__doc__ = doc
    return f


shfl_sync = _shfl("idx", "The value `x` of lane `lane` of the warp (CUDA __shfl_sync).")
shfl_up_sync = _shfl("up", "`x` of lane id - delta, or one's own below 0 (__shfl_up_sync).")
shfl_down_sync = _shfl("down", "`x` of lane id + delta, or one's own past the width "
                               "(__shfl_down_sync).")
shfl_xor_sync = _shfl("bfly", "`x` of lane id ^ mask (__shfl_xor_sync), for butterfly "
                              "reductions.")


def lane_idx():
    """This thread's lane in its warp (0..31), from the linear thread id."""
    t = thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z)
    return t % 32


def ifelse(cond, a, b):
    """`cond ? a : b` on dynamic or static values."""
    return sym_select(cond, a, b)


def minimum(a, b):
    return sym_minmax("min", a, b)


def maximum(a, b):
    return sym_minmax("max", a, b)


# math functions of more than one argument (the others take one)
_ARITY = {"atan2": 2, "hypot": 2, "copysign": 2, "fma": 3}


def _math(fn, pyfn, cuda):
    def f(*args):
        n = _ARITY.get(fn, 1)
        if len(args) != n:
            raise MoyeTypeError(f"{fn} takes {n} argument{'s' if n > 1 else ''}, got "
                                f"{len(args)}")
        for a in args:
            if isinstance(a, bool) or not isinstance(a, (Sym, numbers.Real)):
                raise MoyeTypeError(f"{fn}: its arguments are numbers or kernel values, got "
                                    f"{a!r}")
        if not any(isinstance(a, Sym) for a in args):
            return pyfn(*args)
        t = T.Float32
        for a in args:
            if isinstance(a, Sym) and a.type.is_float and a.type.bits > t.bits:
                t = a.type
        if t is T.Float32 and fn in FAST_FORMS and current().fast_math:
            return FAST_FORMS[fn](*args)
        ops = tuple(coerce(a if isinstance(a, Sym) else float(a), t) for a in args)
        return Sym(current().instr("call", ops, t, fn=fn), t)
    f.__name__ = fn
    fast = f"; its PTX approximation in a fast_math kernel ({FAST_FORMS[fn].__name__})" \
        if fn in FAST_FORMS else ""
    f.__doc__ = (f"{fn} of dynamic or static floats, in Float32 (Float64 for a Float64). "
                 f"CUDA: {cuda}, accurate{fast}.")
    return f


exp = _math("exp", exp_host, "expf")
exp2 = _math("exp2", exp2_host, "exp2f")
log = _math("log", math.log, "logf")
log2 = _math("log2", math.log2, "log2f")
sqrt = _math("sqrt", math.sqrt, "sqrtf")
rsqrt = _math("rsqrt", lambda x: 1.0 / math.sqrt(x), "rsqrtf")
sin = _math("sin", math.sin, "sinf")
cos = _math("cos", math.cos, "cosf")
tanh = _math("tanh", math.tanh, "tanhf")
erf = _math("erf", math.erf, "erff")
exp10 = _math("exp10", lambda x: 10.0 ** x, "exp10f")
expm1 = _math("expm1", math.expm1, "expm1f")
log10 = _math("log10", math.log10, "log10f")
log1p = _math("log1p", math.log1p, "log1pf")
cbrt = _math("cbrt", lambda x: float(np.cbrt(x)), "cbrtf")
tan = _math("tan", math.tan, "tanf")
asin = _math("asin", math.asin, "asinf")
acos = _math("acos", math.acos, "acosf")
atan = _math("atan", math.atan, "atanf")
atan2 = _math("atan2", math.atan2, "atan2f")
sinh = _math("sinh", math.sinh, "sinhf")
cosh = _math("cosh", math.cosh, "coshf")
erfc = _math("erfc", math.erfc, "erfcf")
hypot = _math("hypot", math.hypot, "hypotf")
copysign = _math("copysign", math.copysign, "copysignf")
fma = _math("fma", lambda a, b, c: a * b + c, "fmaf")
floor = _math("floor", lambda x: float(np.floor(x)), "floorf")
ceil = _math("ceil", lambda x: float(np.ceil(x)), "ceilf")
trunc = _math("trunc", lambda x: float(np.trunc(x)), "truncf")
rint = _math("rint", lambda x: float(np.rint(x)), "rintf (the nearest integer, halves to even)")


# NumPy's ufuncs of kernel values call these (tracer.Sym.__array_ufunc__)
UFUNCS.update(exp=exp, exp2=exp2, log=log, log2=log2, log10=log10, log1p=log1p, expm1=expm1,
              sqrt=sqrt, cbrt=cbrt, sin=sin, cos=cos, tan=tan, arcsin=asin, arccos=acos,
              arctan=atan, arctan2=atan2, sinh=sinh, cosh=cosh, tanh=tanh, hypot=hypot,
              copysign=copysign, floor=floor, ceil=ceil, trunc=trunc, rint=rint)


def isnan(x):
    """Whether x is a NaN (Bool; False for an integer). CUDA: isnan.
        >>> import moye
        >>> moye.isnan(float("nan")), moye.isnan(1.0)
        (True, False)
    """
    return _float_test("isnan", x, math.isnan, lambda v: v != v)


def isinf(x):
    """Whether x is an infinity, either sign (Bool; False for an integer).
    CUDA: isinf.
        >>> import moye
        >>> moye.isinf(-math.inf), moye.isinf(float("nan"))
        (True, False)
    """
    return _float_test("isinf", x, math.isinf, lambda v: abs(v) == math.inf)


def isfinite(x):
    """Whether x is neither an infinity nor a NaN (Bool; True for an
    integer). CUDA: isfinite.
        >>> import moye
        >>> moye.isfinite(1e38), moye.isfinite(math.inf)
        (True, False)
    """
    return _float_test("isfinite", x, math.isfinite, lambda v: abs(v) < math.inf)


UFUNCS.update(isnan=isnan, isinf=isinf, isfinite=isfinite)
MATH_FUNCTIONS.update(exp=exp, exp2=exp2, log=log, log2=log2, log10=log10, log1p=log1p,
                      expm1=expm1, sqrt=sqrt, cbrt=cbrt, sin=sin, cos=cos, tan=tan, asin=asin,
                      acos=acos, atan=atan, atan2=atan2, sinh=sinh, cosh=cosh, tanh=tanh,
                      erf=erf, erfc=erfc, hypot=hypot, copysign=copysign, fabs=abs,
                      pow=pow, isnan=isnan, isinf=isinf, isfinite=isfinite)


def _float_test(fn, x, pyfn, test):
    if isinstance(x, Sym):
        return test(x) if x.type.is_float else fn == "isfinite"
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise MoyeTypeError(f"{fn}: x must be a number, got {x!r}")
    return pyfn(x)


def cast(x, dtype):
    """`x` converted to `dtype`: in a kernel, a value of that type (a
    number included, so `cast(0.0, Float64)` starts a float64 sum); outside,
    the NumPy scalar. CUDA: static_cast.
        >>> import moye, numpy as np
        >>> @moye.kernel
        ... def total(out, x):
        ...     s = moye.cast(0.0, moye.Float64)       # the loop carries a float64
        ...     for i in range(moye.size(x)):
        ...         s = s + x[i]
        ...     out[0] = s
        >>> out = np.zeros(1)
        >>> total[1, 1](out, np.array([1.0, 2.0**-30]))  # 1 + 2^-30 is 1.0 in float32
        >>> out[0] == 1 + 2.0**-30, moye.cast(2.5, moye.Int32)
        (np.True_, np.int32(2))
    """
    dtype = T.as_element_type(dtype)
    if isinstance(x, Sym):
        return Sym.cast(x, dtype)
    if tracing() and isinstance(x, numbers.Number):
        return Sym.cast(x, dtype)
    return dtype(x) if dtype.numpy is not None else x


def cushow(*values, fmt=None):
    """Print from every thread of the kernel (MoYe's @cushow): numbers and
    dynamic values; arrays print their layout. Python's print() of a kernel
    value in a kernel body does the same."""
    thread_print(*values, fmt=fmt)


def _bits(fn, cuda, meaning, example):
    def f(x):
        if isinstance(x, bool) or not isinstance(x, (numbers.Integral, Sym)) or \
                isinstance(x, Sym) and not x.type.is_integer:
            raise MoyeTypeError(f"{fn}: x must be an integer, got "
                                f"{x.type if isinstance(x, Sym) else type(x).__name__} {x!r}")
        if not isinstance(x, Sym):              # a number: its 32 bits (64 if it needs them)
            t = T.Int32 if -2 ** 31 <= x < 2 ** 32 else T.Int64
            if not -2 ** 63 <= x < 2 ** 64:
                raise MoyeTypeError(f"{fn}: {x} has more than 64 bits")
            u = np.array([x % 2 ** t.bits], np.dtype(f"uint{t.bits}"))
            return int(ir.bits.evaluate(fn, u)[0])
        t = x.type if x.type.bits >= 32 else T.Int32    # C's promotion: the value, in 32 bits
        rt = t if fn == "brev" else T.Int32
        return Sym(current().instr("bits", (coerce(x, t),), rt, fn=fn), rt)
    f.__name__ = fn
    f.__doc__ = (f"{meaning} of an integer's 32 bits (64 for a 64-bit one; narrower ones "
                 f"are widened as C does). CUDA: {cuda} ({cuda}ll).\n"
                 f"        >>> import moye\n        >>> {example}")
    return f


popc = _bits("popc", "__popc", "The number of bits set (Int32)",
             "moye.popc(0b1011), moye.popc(-1)\n        (3, 32)")
clz = _bits("clz", "__clz", "The number of zeros above the highest set bit (Int32; 32 for 0)",
            "moye.clz(1), moye.clz(0)\n        (31, 32)")
ffs = _bits("ffs", "__ffs", "The position of the lowest set bit, counted from 1 (Int32; 0 "
            "for 0)", "moye.ffs(0b1000), moye.ffs(0)\n        (4, 0)")
brev = _bits("brev", "__brev", "The bits in reverse order (of x's type)",
             "hex(moye.brev(1)), moye.brev(0x80000000)\n        ('0x80000000', 1)")


def ballot(pred):
    """The UInt32 mask of the lanes of this warp whose `pred` is true (bit i
    for lane i); every thread of the warp calls it. CUDA: __ballot_sync with
    the full mask (PTX vote.sync.ballot.b32).
        >>> import moye
        >>> @moye.kernel
        ... def votes(out, x):
        ...     t = moye.thread_idx.x
        ...     out[t] = moye.ballot(x[t] > 0)
        >>> out = np.zeros(40, np.uint32)
        >>> votes[1, 40](out, np.arange(40, dtype=np.int32) % 4 - 2)
        >>> hex(out[0]), hex(out[39])
        ('0x88888888', '0x88')
    """
    return Sym(current().instr("ballot", (_predicate("ballot", pred),), T.UInt32), T.UInt32)


def _predicate(fn, pred):
    """`pred` as a Bool operand: a Bool, or a number (true where non-zero)."""
    if isinstance(pred, Sym):
        return (pred if pred.type is T.Bool else pred != 0).value
    if isinstance(pred, numbers.Number):
        return int(bool(pred))
    raise MoyeTypeError(f"{fn}: pred must be a Bool or a number, got {pred!r}")


def vote_any(pred):
    """Whether `pred` is true in any thread of this warp; every thread of the
    warp calls it. CUDA: __any_sync with the full mask (PTX vote.sync.any.pred).
        >>> import moye
        >>> @moye.kernel
        ... def any_negative(out, x):
        ...     t = moye.thread_idx.x
        ...     out[t] = moye.vote_any(x[t] < 0)
        >>> out = np.zeros(64, np.int32)
        >>> any_negative[1, 64](out, np.arange(64, dtype=np.int32) - 20)
        >>> out[0], out[32]
        (np.int32(1), np.int32(0))
    """
    return Sym(current().instr("vote", (_predicate("vote_any", pred),), T.Bool, mode="any"),
               T.Bool)


def vote_all(pred):
    """Whether `pred` is true in every thread of this warp; every thread of
    the warp calls it. CUDA: __all_sync with the full mask (PTX vote.sync.all.pred).
        >>> import moye
        >>> @moye.kernel
        ... def all_positive(out, x):
        ...     t = moye.thread_idx.x
        ...     out[t] = moye.vote_all(x[t] > 0)
        >>> out = np.zeros(64, np.int32)
        >>> all_positive[1, 64](out, np.arange(64, dtype=np.int32) - 20)
        >>> out[0], out[32]
        (np.int32(0), np.int32(1))
    """
    return Sym(current().instr("vote", (_predicate("vote_all", pred),), T.Bool, mode="all"),
               T.Bool)


def match_any(value):
    """The UInt32 mask of the threads of this warp whose `value` (Int32,
    UInt32, Int64 or UInt64) equals this thread's; every thread of the warp
    calls it. CUDA: __match_any_sync with the full mask (sm_70).
        >>> import moye
        >>> @moye.kernel
        ... def peers(out, keys):
        ...     t = moye.thread_idx.x
        ...     out[t] = moye.match_any(keys[t])
        >>> out = np.zeros(32, np.uint32)
        >>> peers[1, 32](out, np.arange(32, dtype=np.int32) % 3)
        >>> hex(out[0]), hex(out[1])
        ('0x49249249', '0x92492492')
    """
    if not isinstance(value, Sym):
        raise MoyeTypeError(f"match_any: value must be a dynamic Int32, UInt32, Int64 or "
                            f"UInt64, got {value!r}")
    if value.type not in ir.MatchAny.TYPES:
        raise MoyeTypeError(f"match_any: value is {value.type}; match_any takes "
                            f"{', '.join(map(str, ir.MatchAny.TYPES))} (compare floats as "
                            "their bits, or cast them)")
    return Sym(current().instr("match_any", (value.value,), T.UInt32), T.UInt32)


__all__ = ["thread_idx", "block_idx", "block_dim", "grid_dim", "sync_threads", "sync_warp",
           "shared_array",
           "cp_async_commit", "cp_async_wait", "cucopyto", "shfl_sync", "shfl_up_sync",
           "shfl_down_sync", "shfl_xor_sync", "lane_idx",
           "ifelse", "minimum", "maximum", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin",
           "cos", "tanh", "erf", "exp10", "expm1", "log10", "log1p", "cbrt", "tan", "asin", "acos",
           "atan", "atan2", "sinh", "cosh", "erfc", "hypot", "copysign", "isnan", "isinf",
           "isfinite", "fma", "floor", "ceil", "trunc", "rint", "cast", "cushow",
           "ballot", "vote_any", "vote_all", "match_any", "popc", "clz", "ffs", "brev"]

"""Reductions: across the lanes of a warp (`warp_reduce`), across the threads
of a block (`block_reduce`), and of a fragment along chosen modes (`reduce`,
on host arrays and register fragments alike).

An `op` is a name, "sum", "max", "min", "and", "or" or "xor", or a function
of two values returning one (a plain function or a @moye.func: it is called
with the control-flow rewrite, so a run-time `if` works in it); the
reduction assumes it is associative and commutative.

Values narrower than 32 bits are reduced in 32 bits (Float16 and BFloat16 in
Float32, small integers and Bool in Int32, as C promotes them; a warp
shuffle moves 32 or 64 bits) and the result is cast back to their type, so
a half-precision sum accumulates in single precision.

How the warp reduces: a butterfly of shuffles (`shfl.sync.bfly`) where every
group of `width` lanes exists; in a block whose last warp is partial (48
threads), a tree of `shfl.sync.down` that skips the lanes the warp lacks,
then a broadcast from the group's first lane. The block: each warp's result
goes through a small shared array (one element per warp) between two
barriers, and every thread reduces those; a third barrier follows where the
call sits in a loop, so that the next iteration does not overwrite the
array while a slow warp still reads it.
"""
import math
import weakref

import numpy as np

from .. import types as T
from ..array import MoYeArray
from ..errors import KernelError, MoyeTypeError, ShapeError
from ..layout import Layout, size
from ..layout import inttuple as IT
from ..compiler.control import if_
from ..compiler.device_function import DeviceFunction, func
from ..compiler.tracer import Sym, current, sym_minmax, sym_select, tracing, type_of
from ..ir.targets import MAX_CLUSTER_BLOCKS
from .builtins import shared_array, shfl_down_sync, shfl_sync, shfl_xor_sync, thread_idx
from .cluster import cluster_size, cluster_sync
from .dsmem import peer_shared

WARP = 32
OPS = ("sum", "max", "min", "and", "or", "xor")
_BITWISE = ("and", "or", "xor")


# -- the op ----------------------------------------------------------------------------------

class _Op:
    """A reduction op: `combine(a, b)` on kernel values or NumPy scalars, and
    `identity(dtype)` (None for a user function)."""

    def __init__(self, op, what):
        self.user = None
        if isinstance(op, str):
            if op not in OPS:
                raise KernelError(f"{what}: op must be one of {', '.join(map(repr, OPS))} or a "
                                  f"function of two values, got {op!r}")
            self.name = op
        elif isinstance(op, DeviceFunction) or callable(op) and hasattr(op, "__code__"):
            self.name, self.user = None, _as_func(op)
        else:
            raise MoyeTypeError(f"{what}: op must be one of {', '.join(map(repr, OPS))} or a "
                                f"function of two values, got {type(op).__name__} {op!r}")
        self.what = what

    def check(self, dtype):
        """An error if the op cannot reduce values of `dtype`."""
        if self.name in _BITWISE and dtype.is_float:
            raise MoyeTypeError(f"{self.what}: op {self.name!r} takes integers or Bool, got "
                                f"{dtype} values")
        if self.name == "sum" and dtype is T.Bool:
            raise MoyeTypeError(f"{self.what}: op 'sum' of Bool values: cast them to Int32 "
                                "first to count them")

    def combine(self, a, b, carrier):
        if self.user is not None:
            r = self.user(a, b)
            what = f"{self.what}: op {self.user.__name__} returned"
            if not isinstance(a, Sym) and not isinstance(b, Sym):        # on the host
                if not isinstance(r, (bool, int, float, np.number, np.bool_)):
                    raise MoyeTypeError(f"{what} {r!r}, not a number")
                return np.asarray(r).astype(carrier.numpy)[()]
            return _as_carrier(r, carrier, what)
        if self.name == "sum":
            return a + b
        if self.name in ("max", "min"):
            if isinstance(a, Sym) or isinstance(b, Sym):
                return sym_minmax(self.name, a, b)
            return np.maximum(a, b) if self.name == "max" else np.minimum(a, b)
        if self.name == "and":
            return a & b
        return a | b if self.name == "or" else a ^ b

    def identity(self, carrier, bool_values):
        """The value that leaves others unchanged under the op, in `carrier`."""
        if self.user is not None:
            return None
        if self.name in ("sum", "or", "xor"):
            return 0.0 if carrier.is_float else 0
        if self.name == "and":
            return 1 if bool_values else -1 if carrier.name.startswith("Int") else \
                (1 << carrier.bits) - 1
        big = math.inf if carrier.is_float else (
            np.iinfo(carrier.numpy).max if self.name == "min" else np.iinfo(carrier.numpy).min)
        return big if self.name == "min" else (-big if carrier.is_float else int(big))


_WRAPPED = weakref.WeakKeyDictionary()


def _as_func(op):
    """A user op as a device function (its control flow rewritten), once."""
    if isinstance(op, DeviceFunction):
        return op
    try:
        wrapped = _WRAPPED.get(op)
    except TypeError:
        return op
    if wrapped is None:
        wrapped = func(op) if hasattr(op, "__code__") and not isinstance(op, type) else op
        _WRAPPED[op] = wrapped
    return wrapped


def _carrier(dtype):
    """The type a value of `dtype` is reduced in (see the module doc)."""
    if dtype.is_float:
        return T.Float32 if dtype.bits < 32 else dtype
    if dtype.bits < 32:
        return T.Int32
    return dtype


def _as_carrier(v, carrier, what):
    if isinstance(v, Sym):
        return Sym.cast(v, carrier) if v.type is not carrier else v
    if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
        return Sym.cast(carrier.numpy.type(v).item(), carrier)
    if isinstance(v, (bool, np.bool_)):
        return Sym.cast(int(v), carrier)
    raise MoyeTypeError(f"{what} {v!r}, not a number")


def _scalar(x, what):
    """`x` as a kernel value (a Sym), checked to be one number."""
    if isinstance(x, Sym):
        return x
    if isinstance(x, (bool, int, float, np.number)):
        v = x.item() if isinstance(x, np.number) else x
        return Sym.cast(v, type_of(v))
    kind = "an array" if isinstance(x, MoYeArray) else type(x).__name__
    hint = "; reduce a fragment with moye.reduce first" if isinstance(x, MoYeArray) else ""
    raise MoyeTypeError(f"{what}: x must be one number per thread (a kernel value or a Python "
                        f"number), got {kind} {x!r}{hint}")


# -- warps and blocks ------------------------------------------------------------------------

def _block(what):
    b = current()
    block = getattr(b, "block", None)
    if block is None:
        raise KernelError(f"{what} needs the block's size, which this trace does not know")
    return block


def _thread_id(block):
    """The linear thread id in the block (x fastest)."""
    t = thread_idx.x
    if block[1] > 1 or block[2] > 1:
        t = t + block[0] * thread_idx.y
    if block[2] > 1:
        t = t + block[0] * block[1] * thread_idx.z
    return t


def _butterfly(v, op, carrier, width):
    """Every lane of each group of `width` (all existing) lanes gets the
    reduction of the group."""
    k = width // 2
    while k >= 1:
        v = op.combine(v, shfl_xor_sync(v, k, width), carrier)
        k //= 2
    return v


def _tree(v, op, carrier, width, lane, valid, broadcast=True):
    """Every lane of a group of `width` lanes gets the reduction of the
    group's first `valid` lanes (`lane` is the lane in the group): a tree of
    shuffles down that skips the others, then a broadcast of the first
    (without `broadcast`, only the first lane has it)."""
    k = width // 2
    while k >= 1:
        other = shfl_down_sync(v, k, width)
        v = sym_select(lane + k < valid, op.combine(v, other, carrier), v)
        k //= 2
    return shfl_sync(v, 0, width) if broadcast else v


def _warp(v, op, carrier, width, block, broadcast=True):
    threads = block[0] * block[1] * block[2]
    if threads % width == 0:
        return _butterfly(v, op, carrier, width)
    tid = _thread_id(block)
    lane = tid & (width - 1)
    valid = sym_minmax("min", threads - (tid - lane), width)
    return _tree(v, op, carrier, width, lane, valid, broadcast)


def _begin(x, op, what):
    op = _Op(op, what)
    x = _scalar(x, what)
    op.check(x.type)
    carrier = _carrier(x.type)
    return op, x, carrier, Sym.cast(x, carrier)


def _end(v, x):
    return Sym.cast(v, x.type) if v.type is not x.type else v


def warp_reduce(x, op, width=32):
    """The reduction of `x` over the lanes of this thread's warp (or of its
    group of `width` lanes, a power of two), returned to every lane. `op`:
    "sum", "max", "min", "and", "or", "xor" or a function of two values.
    Every thread of the warp calls it. CUDA: a butterfly of __shfl_xor_sync
    (CUB's WarpReduce; CuTe DSL's warp_reduction).
        >>> import moye, numpy as np
        >>> @moye.kernel
        ... def row_max(out, x):
        ...     t = moye.thread_idx.x
        ...     out[t] = moye.warp_reduce(x[t], "max")
        >>> out = np.zeros(64, np.float32)
        >>> row_max[1, 64](out, np.arange(64, dtype=np.float32))
        >>> out[0], out[63]
        (np.float32(31.0), np.float32(63.0))
    """
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or \
            not 1 <= width <= WARP or width & (width - 1):
        raise KernelError(f"warp_reduce: width must be a power of two from 1 to 32 (a static "
                          f"int), got {width!r}")
    op, x, carrier, v = _begin(x, op, "warp_reduce")
    block = _block("warp_reduce")
    if width == 1:
        return x
    return _end(_warp(v, op, carrier, int(width), block), x)


def block_reduce(x, op):
    """The reduction of `x` over all the threads of the block, returned to
    every thread. `op`: "sum", "max", "min", "and", "or", "xor" or a function
    of two values. Every thread of the block calls it (it holds barriers);
    any block size works, a partial last warp included. CUDA: CUB's
    BlockReduce, warp shuffles then a shared-memory step.
        >>> import moye, numpy as np
        >>> @moye.kernel
        ... def total(out, x):
        ...     t = moye.thread_idx.x
        ...     out[t] = moye.block_reduce(x[t], "sum")
        >>> out = np.zeros(48, np.int32)
        >>> total[1, 48](out, np.arange(48, dtype=np.int32))
        >>> int(out[0]), int(out[47])
        (1128, 1128)
    """
    op, x, carrier, v = _begin(x, op, "block_reduce")
    return _end(_block_reduce(v, op, carrier, x.type is T.Bool, _block("block_reduce")), x)


def _block_reduce(v, op, carrier, bool_values, block):
    """block_reduce of `v` (in `carrier`), in `carrier`."""
    threads = block[0] * block[1] * block[2]
    if threads <= WARP:
        return _warp(v, op, carrier, WARP, block)
    b = current()
    warps = -(-threads // WARP)
    v = _warp(v, op, carrier, WARP, block, broadcast=False)     # lane 0 writes it
    tid = _thread_id(block)
    lane, warp = tid & (WARP - 1), tid >> 5
    scratch = shared_array(carrier, Layout(warps), align=16)
    first = if_(lane == 0, (), ())
    first.then()
    scratch[warp] = v
    first.then_done(())
    first.result()
    b.instr("barrier", ())
    identity = op.identity(carrier, bool_values)
    if threads % WARP or warps <= 8:
        # few warps, or a partial one: each thread reads them all (broadcasts)
        values = [scratch[i] for i in range(warps)]
        v = _pairwise(values, lambda a, c: op.combine(a, c, carrier))
    else:
        width = 1 << (warps - 1).bit_length()
        mine = lane & (width - 1)
        v = scratch[sym_minmax("min", mine, warps - 1)]
        if identity is not None:
            v = _butterfly(sym_select(mine < warps, v, identity), op, carrier, width)
        else:
            v = _tree(v, op, carrier, width, mine, warps)
    if "dynamic" in b.loop_kinds:
        b.instr("barrier", ())          # the next iteration writes the scratch again
    return v


def cluster_reduce(x, op):
    """The reduction of `x` over all the threads of all the blocks of this
    block's thread-block cluster, returned to every thread (bitwise the same
    in every block). `op`: as block_reduce's. Every thread of every block
    of the cluster calls it (it holds block and cluster barriers); outside a
    cluster launch it is block_reduce. sm_90. CUDA: block reductions, then
    each block's partial read from the others through distributed shared
    memory (cluster.map_shared_rank), between two cluster.sync().
        >>> import moye, numpy as np
        >>> @moye.kernel
        ... def total(out, x):
        ...     i = moye.block_idx.x * 64 + moye.thread_idx.x
        ...     out[i] = moye.cluster_reduce(x[i], "sum")
        >>> out = np.zeros(256, np.int32)
        >>> total[4, 64, 2](out, np.arange(256, dtype=np.int32))
        >>> int(out[0]), int(out[127]), int(out[128]), int(out[255])
        (8128, 8128, 24512, 24512)

    How: each block reduces (block_reduce), thread 0 writes the block's
    partial into a one-element shared array, cluster_sync; every thread then
    reads the partials of ranks 0 .. cluster_size() - 1 through DSMEM and
    combines them in rank order, the same in every block; a second
    cluster_sync keeps each block's partial (and the block itself) alive
    until every block has read it, and lets a call in a loop write it again.
    """
    op, x, carrier, v = _begin(x, op, "cluster_reduce")
    block = _block("cluster_reduce")
    v = _block_reduce(v, op, carrier, x.type is T.Bool, block)
    partial = shared_array(carrier, Layout(1), align=16)
    first = if_(_thread_id(block) == 0, (), ())
    first.then()
    partial[0] = v
    first.then_done(())
    first.result()
    cluster_sync()
    n = cluster_size()
    total = peer_shared(partial, 0)[0]
    for r in range(1, MAX_CLUSTER_BLOCKS):
        other = peer_shared(partial, sym_minmax("min", n - 1, r))[0]
        total = sym_select(n > r, op.combine(total, other, carrier), total)
    cluster_sync()
    return _end(total, x)


def _pairwise(values, combine):
    """The values combined as a balanced tree (short dependency chains)."""
    values = list(values)
    while len(values) > 1:
        paired = [combine(values[i], values[i + 1]) for i in range(0, len(values) - 1, 2)]
        values = paired + values[len(values) - len(values) % 2:]
    return values[0]


# -- fragments -------------------------------------------------------------------------------

def reduce(frag, op, modes=None):
    """`frag` reduced along `modes` (an int or a tuple of its top-level
    modes; None: all): a new fragment of the remaining modes, or one value
    when all are reduced. On host arrays and, in kernels, on register
    fragments (per thread, no communication). CuTe DSL: TensorSSA.reduce.
        >>> import moye, numpy as np
        >>> a = moye.MoYeArray(np.arange(6.0), (2, 3))
        >>> moye.reduce(a, "sum", modes=1).numpy().tolist(), float(moye.reduce(a, "max"))
        ([6.0, 9.0], 5.0)
    """
    if not isinstance(frag, MoYeArray):
        raise MoyeTypeError(f"reduce: frag must be a MoYeArray, got {type(frag).__name__} "
                            f"{frag!r}")
    op = _Op(op, "reduce")
    op.check(frag.dtype)
    shape = frag.shape
    rank = len(shape) if type(shape) is tuple else 1
    modes = _modes(modes, rank)
    sizes = [size(frag.layout, m) if rank > 1 else size(frag.layout) for m in range(rank)]
    if not all(type(s) is int for s in sizes):
        raise ShapeError(f"reduce: frag has shape {IT.fmt(shape)} with a dynamic size; a "
                         "fragment reduce needs static extents")
    keep = [m for m in range(rank) if m not in modes]
    dtype = frag.dtype
    carrier = _carrier(dtype)
    host = not tracing() or frag.engine.space == "host"

    def element(coord):
        v = frag[coord if rank > 1 else coord[0]]
        if host:
            return np.asarray(v).astype(carrier.numpy)[()]
        return Sym.cast(v, carrier) if isinstance(v, Sym) else _as_carrier(v, carrier, "reduce:")

    def combine(a, c):
        r = op.combine(a, c, carrier)
        if host:
            return np.asarray(r).astype(carrier.numpy)[()]
        return r

    def cast_back(v):
        if host:
            return np.asarray(v).astype(dtype.numpy)[()]
        return Sym.cast(v, dtype) if v.type is not dtype else v

    reduced = list(np.ndindex(*[sizes[m] for m in modes][::-1]))
    kept = list(np.ndindex(*[sizes[m] for m in keep][::-1]))

    def value_at(kc):
        coords = []
        for rc in reduced:
            c = [0] * rank
            for m, i in zip(keep, kc[::-1]):
                c[m] = i
            for m, i in zip(modes, rc[::-1]):
                c[m] = i
            coords.append(tuple(c))
        return cast_back(_pairwise([element(c) for c in coords], combine))

    if not keep:
        return value_at(())
    kept_shape = tuple(shape[m] for m in keep) if rank > 1 else shape
    layout = Layout(kept_shape[0] if len(kept_shape) == 1 else kept_shape)
    out = MoYeArray.empty(dtype, layout)
    for kc in kept:
        out[kc[::-1] if len(keep) > 1 else kc[0]] = value_at(kc)
    return out


def _modes(modes, rank):
    """The modes to reduce as a sorted tuple, checked against the rank."""
    if modes is None:
        return tuple(range(rank))
    given = modes
    if isinstance(modes, (int, np.integer)) and not isinstance(modes, bool):
        modes = (modes,)
    if not isinstance(modes, (tuple, list)) or not all(
            isinstance(m, (int, np.integer)) and not isinstance(m, bool) for m in modes):
        raise MoyeTypeError(f"reduce: modes must be an int or a tuple of ints (top-level "
                            f"modes), or None for all, got {given!r}")
    out = tuple(int(m) + rank if m < 0 else int(m) for m in modes)
    if any(not 0 <= m < rank for m in out) or len(set(out)) != len(out) or not out:
        raise ShapeError(f"reduce: modes {given!r} must be distinct modes of a rank-{rank} "
                         f"fragment (0..{rank - 1})")
    return tuple(sorted(out))


__all__ = ["warp_reduce", "block_reduce", "cluster_reduce", "reduce"]

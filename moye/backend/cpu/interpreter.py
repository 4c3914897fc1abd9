"""The CPU backend: the kernel IR interpreted with NumPy.

The threads of a block run in lock-step, and several blocks side by side:
every IR value is a vector with one lane per thread (lane = block in the
batch * threads + thread), divergent branches and loops run under a mask of
active lanes. Shared memory is one row per block, register arrays one row
per thread. Integer division and remainder follow C (truncation), 32-bit
integers wrap as on the GPU.

A dynamic `if` with active lanes on both sides runs its then-side first;
if that side blocks (an mbarrier wait whose phase has not completed, a
named barrier or a sync_threads the other side has not reached), the
else-side starts as an execution context of its own and the two make
progress in turns, switching only where one blocks, until the join after
the `if` (contexts.py). So a warp-specialized kernel, a producer warp and
consumer warpgroups in the two sides of one `if`, each looping on
mbarriers the other side arrives on, runs as on the GPU, deterministically;
when no context can go on, the run raises a deadlock error naming each
waiting line. Kernels whose sides never block run exactly as in plain
lock-step, at the same speed. Named barriers count whole warps per block
(named_barrier.py); setmaxnreg does nothing here.

cp.async copies wait in per-thread groups until a cp.async.wait retires
them (async_copy.py); TMA loads land when a thread waits on their mbarrier
(tma.py); warp-collective instructions (ldmatrix, stmatrix,
mma.sync, shfl.sync) run per warp of 32 consecutive threads, emulated from
the PTX ISA (collectives.py), and need every lane of the warp active.

Checks the GPU does not make: a load or store out of an array's bounds
raises with the kernel's source line, the block and thread ids and the
index; `race_check=True` reports shared-memory accesses by different
threads to the same address that no barrier orders (sync_threads, or the
phases of mbarriers and named barriers, tracked with vector clocks), and
accesses to shared memory a cp.async or TMA load has not finished writing
(with both lines; race.py).
"""
import numpy as np

from ...errors import MoyeError
from ... import ir
from .collectives import Collectives
from .async_copy import AsyncCopies
from .cluster import Cluster, cluster_order
from .contexts import Scheduler, joined
from .conversions import convert
from .errors import ArgumentName, KernelRuntimeError, where as _where
from .named_barrier import NamedBarriers
from .race import RaceCheck
from .tma import Hopper
from .wgmma import Warpgroups


class Pointer:
    """A pointer: a buffer and per-lane element offsets into it."""
    __slots__ = ("buf", "off", "name")

    def __init__(self, buf, off, name):
        self.buf, self.off, self.name = buf, off, name


def _np(t):
    if isinstance(t, ir.PtrType):
        return None
    if t.name == "UInt128":
        return np.dtype((np.void, 16))
    return t.numpy


def _cdiv(a, b):
    if a.dtype.kind in "iu" and np.asarray(b).dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
        return (q * np.sign(a) * np.sign(b)).astype(a.dtype)
    return a / b


def _cmod(a, b):
    if a.dtype.kind in "iu" and np.asarray(b).dtype.kind in "iu":
        return (a - _cdiv(a, b) * b).astype(a.dtype)
    return np.fmod(a, b)


_BIN = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _cdiv, "mod": _cmod,
        "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
        "shl": np.left_shift, "shr": np.right_shift, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal,
        "min": np.minimum, "max": np.maximum}


def _leave_loop(mask, returned, gone):
    """A loop's lanes after its body, where the lanes `gone` left it
    (_Block.run): those of a break or the kernel's return leave the loop,
    and the latter are added to `returned`, the lanes it reports."""
    for kind in ("break", "return"):
        if kind in gone:
            mask = mask & ~gone[kind]
    if "return" in gone:
        returned = {"return": gone["return"] | (returned["return"] if returned else False)}
    return mask, returned


class _Block:
    """A batch of blocks running together; lane = block_in_batch * threads + thread."""

    def __init__(self, kernel, params, block_ids, grid, block, race_check):
        self.kernel = kernel
        nt = block[0] * block[1] * block[2]
        nb = len(block_ids)
        n = self.n = nb * nt
        self.threads = nt
        lane = np.arange(n)
        thread = lane % nt
        self.block_of_lane = lane // nt
        ids = np.array(block_ids)[self.block_of_lane]
        self.thread_of_lane = thread
        tx, ty, tz = thread % block[0], (thread // block[0]) % block[1], thread // (block[0] * block[1])
        self.specials = {
            "threadIdx.x": tx, "threadIdx.y": ty, "threadIdx.z": tz,
            "blockIdx.x": ids[:, 0], "blockIdx.y": ids[:, 1], "blockIdx.z": ids[:, 2],
            "blockDim.x": np.full(n, block[0]), "blockDim.y": np.full(n, block[1]),
            "blockDim.z": np.full(n, block[2]),
            "gridDim.x": np.full(n, grid[0]), "gridDim.y": np.full(n, grid[1]),
            "gridDim.z": np.full(n, grid[2])}
        self.block_ids, self.block = block_ids, block
        self.exited = np.zeros(n, bool)     # the lanes that ran the kernel's `return`
        self.env = {k: (Pointer(v.buf, np.zeros(n, np.int64), v.name) if isinstance(v, Pointer) else v)
                    for k, v in params.items()}
        for a in kernel.arrays:
            rows = nb if a.space == "shared" else n
            self.env[a.id] = (a.space, np.zeros((rows, a.size), dtype=_np(a.elem)))
        self.race = RaceCheck(self) if race_check else None
        self.copies = AsyncCopies(self)
        self.hopper = Hopper(self)
        self.sched = Scheduler(self)
        self.named = NamedBarriers(self)
        self.collectives = Collectives(self)
        self.warpgroups = Warpgroups(self)

    # values ----------------------------------------------------------------
    def get(self, x):
        if isinstance(x, (ir.Value, ir.Var)):
            return self.env[id(x)]
        if isinstance(x, ir.Array):
            return self.env[x.id]
        return x

    def set(self, value, data):
        self.env[id(value)] = data

    def vec(self, x, dtype=None):
        v = self.get(x)
        if isinstance(v, Pointer):
            return v
        a = np.asarray(v)
        if a.ndim == 0:
            a = np.full(self.n, a, dtype=dtype if dtype is not None else a.dtype)
        return a

    # execution ---------------------------------------------------------------
    def run(self, body, mask):
        """Run `body` in the lanes of `mask`; return the lanes that left it by
        a Jump, {"break": lanes, "continue": lanes, "return": lanes} (None
        if none did): they skip the rest of the body; a loop's own break and
        continue end at the loop, the kernel's `return` at the kernel."""
        left = None
        for s in body:
            if not mask.any():
                break
            if isinstance(s, ir.Instr):
                self.instr(s, mask)
                continue
            if isinstance(s, ir.For):
                gone = self.loop(s, mask)
            elif isinstance(s, ir.While):
                gone = self.while_loop(s, mask)
            elif isinstance(s, ir.Jump):
                gone = {s.kind: mask}
                if s.kind == "return":
                    self.exited |= mask
            else:                                       # an If
                c = self.vec(s.cond).astype(bool)
                then, other = mask & c, mask & ~c
                if s.orelse and then.any() and other.any():
                    gone = self.sched.fork(s, then, other)  # the sides may wait for each other
                else:
                    gone = joined(self.run(s.then, then),
                                  self.run(s.orelse, other) if s.orelse else None)
            if gone:
                left = joined(left, gone)
                for lanes in gone.values():
                    mask = mask & ~lanes
        return left

    def while_loop(self, s, mask):
        """Run a While in the lanes of `mask`; return its lanes that ran the
        kernel's `return` ({"return": lanes}), or None."""
        active, returned = mask.copy(), None
        while True:
            self.run(s.cond_body, active)
            active = active & self.vec(s.cond).astype(bool)
            if not active.any():
                break
            gone = self.run(s.body, active)
            if gone:
                active, returned = _leave_loop(active, returned, gone)
        return returned

    def loop(self, s, mask):
        """Run a For in the lanes of `mask`; return its lanes that ran the
        kernel's `return` ({"return": lanes}), or None."""
        returned = None
        t = _np(s.var.type)
        iv = self.vec(s.start).astype(t).copy()
        stop, step = self.vec(s.stop).astype(t), self.vec(s.step).astype(t)
        zero = mask & (step == 0)
        if zero.any():
            lane = int(np.nonzero(zero)[0][0])
            raise KernelRuntimeError(f"{_where(s.loc)}\n  range() step is 0 in thread "
                                     f"{self._tid(lane)} of block {self._bid(lane)}; the loop "
                                     "would never end")
        up = step > 0                   # Python's range: the step's sign picks the test
        key = id(s.var)
        while True:
            active = mask & np.where(up, iv < stop, iv > stop)
            if not active.any():
                break
            self.env[key] = iv
            gone = self.run(s.body, active)
            if gone:
                mask, returned = _leave_loop(mask, returned, gone)
            iv = (iv + step).astype(t)
        return returned

    def _check_divisor(self, s, y, mask):
        """Integer division or remainder by zero is undefined on the GPU: an
        error here, for the active threads that divide."""
        zero = mask & (y == 0)
        if zero.any():
            lane = int(np.nonzero(zero)[0][0])
            more = int(zero.sum()) - 1
            raise KernelRuntimeError(
                f"{_where(s.loc)}\n  integer {'division' if s.op == 'div' else 'remainder'} by "
                f"zero by thread {self._tid(lane)} of block {self._bid(lane)}"
                + (f" (and {more} more threads)" if more else ""))

    def masked_set(self, value, data, mask, t):
        """`value` becomes `data` (of NumPy type `t`) in the lanes of `mask`."""
        old = self.env.get(id(value))
        data = np.asarray(data)
        if data.ndim == 0:
            data = np.full(self.n, data)
        if t is not None and data.dtype != t:
            data = data.astype(t)
        if old is None or isinstance(old, Pointer) or isinstance(data, Pointer):
            self.env[id(value)] = data
        else:
            self.env[id(value)] = np.where(mask, data, old)

    def set_result(self, s, data, mask):
        """The result of `s` becomes `data` in the lanes of `mask`, in its type."""
        self.masked_set(s.result, data, mask, _result_dtype(s))

    def instr(self, s, mask):
        run = IMPLEMENTATIONS.get(type(s))
        if run is None:
            raise MoyeError(f"CPU backend: no rule for IR op {s.op!r}")
        run(self, s, mask)

    # memory ---------------------------------------------------------------------
    def _target(self, base):
        """(kind, buffer, array-or-None, base offsets) for a pointer or array operand."""
        if isinstance(base, ir.Array):
            kind, buf = self.env[base.id]
            return kind, buf, base, np.zeros(self.n, np.int64), \
                f"{'register' if kind == 'local' else 'shared'} array"
        p = self.get(base)
        if isinstance(p.buf, tuple):
            kind, buf, arr = p.buf
            return kind, buf, arr, p.off, p.name
        return "global", p.buf, None, p.off, p.name

    def index(self, base, idx, s, mask, width, atomic=False, rows=None, write=None):
        """(kind, buffer, index, rows) of the access base[idx] of `width`
        elements by the active lanes, bounds-checked and seen by the race
        check: buffer[index] in global memory, buffer[rows, index] in shared
        and register arrays; the inactive lanes' index is 0. An `atomic`
        access reads and writes, and races only with plain accesses. `rows`
        (per lane) names another block's shared memory (a cluster peer's);
        `write` says whether it writes (default: a store)."""
        kind, buf, arr, off, name = self._target(base)
        index = off + self.vec(idx).astype(np.int64)
        n_elem = buf.shape[-1]
        bad = mask & ((index < 0) | (index + width > n_elem))
        if bad.any():
            lane = int(np.nonzero(bad)[0][0])
            self.out_of_bounds(s, s.op, name, lane, index[lane], f"{width} element(s)", n_elem,
                               buf.itemsize)
        if rows is not None:
            assert kind == "shared", "only shared memory is reached in another block"
        elif kind == "local":
            rows = np.arange(self.n)
        elif kind == "shared":
            rows = self.block_of_lane
        index = np.where(mask, index, 0)
        if self.race is not None and kind == "shared":
            lanes = np.nonzero(mask)[0]
            self.race.access(s, arr, lanes, rows[lanes], index[lanes] * buf.itemsize,
                             width * buf.itemsize, buf.itemsize,
                             write=s.op == "store" if write is None else write,
                             atomic=atomic)
        return kind, buf, index, rows

    def out_of_bounds(self, s, what, name, lane, index, size, n_elem, itemsize=None):
        """Raise the error of an access at `index` (of `size`, in elements of
        `itemsize` bytes) by `lane`; in an array argument, name the coordinate too."""
        coord = name.coordinate(int(index) * itemsize) \
            if itemsize and isinstance(name, ArgumentName) else None
        at = f", coordinate {coord} of shape {name.shape}" if coord is not None else ""
        raise KernelRuntimeError(
            f"{_where(s.loc)}\n  out-of-bounds {what} of {name} (index {int(index)}{at}, {size}; "
            f"the buffer has {n_elem}) by thread {self._tid(lane)} of block {self._bid(lane)}")

    def _tid(self, lane):
        t = int(self.thread_of_lane[lane])
        b = self.block
        return (t % b[0], (t // b[0]) % b[1], t // (b[0] * b[1]))

    def _bid(self, lane):
        return tuple(int(x) for x in self.block_ids[int(self.block_of_lane[lane])])

    def load(self, base, idx, s, mask, r):
        width = s.attrs.get("width", 1)
        kind, buf, index, rows = self.index(base, idx, s, mask, width)
        if rows is not None:
            if width == 1:
                return buf[rows, index]
            return _pack(np.stack([buf[rows, index + k] for k in range(width)], axis=1),
                         _np(r.type))
        if width == 1:
            return buf[index]
        return _pack(np.stack([buf[index + k] for k in range(width)], axis=1), _np(r.type))

    def store(self, base, idx, value, s, mask):
        width = s.attrs.get("width", 1)
        kind, buf, index, rows = self.index(base, idx, s, mask, width)
        v = self.vec(value)
        lanes = np.nonzero(mask)[0]
        if width == 1:
            vals = v.astype(buf.dtype) if v.dtype != buf.dtype else v
            if rows is not None:
                buf[rows[lanes], index[lanes]] = vals[lanes]
            else:
                buf[index[lanes]] = vals[lanes]
            return
        parts = _unpack(v, buf.dtype, width)
        for k in range(width):
            if rows is not None:
                buf[rows[lanes], index[lanes] + k] = parts[lanes, k]
            else:
                buf[index[lanes] + k] = parts[lanes, k]


# -- the implementations, one per instruction class ----------------------------------------
IMPLEMENTATIONS = ir.LOWERINGS["cpu"]     # ir instruction class -> run(block, instr, mask)


def implements(*classes):
    """Register the decorated function as the CPU implementation of these IR
    instruction classes (`ir.lowering("cpu", ...)`, whose docstring states
    the contract and what an implementation may use of the block)."""
    return ir.lowering("cpu", *classes)


def _result_dtype(s):
    r = s.result
    return _np(r.type) if r is not None and not isinstance(r.type, ir.PtrType) else None


@implements(ir.Add, ir.Sub, ir.Mul, ir.Div, ir.Mod, ir.And, ir.Or, ir.Xor, ir.Shl, ir.Shr,
            ir.Min, ir.Max)
def _binary(b, s, mask):
    t = _result_dtype(s)
    x, y = b.vec(s.a), b.vec(s.b)
    if s.op in ("div", "mod") and np.dtype(t).kind in "iu":
        b._check_divisor(s, y, mask)
    with np.errstate(all="ignore"):
        out = _BIN[s.op](x.astype(t), y.astype(t))
    b.set(s.result, np.asarray(out).astype(t))


@implements(ir.Lt, ir.Le, ir.Gt, ir.Ge, ir.Eq, ir.Ne)
def _compare(b, s, mask):
    t = _result_dtype(s)
    with np.errstate(all="ignore"):
        out = _BIN[s.op](b.vec(s.a), b.vec(s.b))
    b.set(s.result, np.asarray(out).astype(t))


@implements(ir.Neg)
def _neg(b, s, mask):
    b.set(s.result, (-b.vec(s.x)).astype(_result_dtype(s)))


@implements(ir.Not)
def _not(b, s, mask):
    b.set(s.result, ~b.vec(s.x).astype(bool))


@implements(ir.Abs)
def _abs(b, s, mask):
    b.set(s.result, np.abs(b.vec(s.x)).astype(_result_dtype(s)))


@implements(ir.Select)
def _select(b, s, mask):
    t = _result_dtype(s)
    c = b.vec(s.cond).astype(bool)
    b.set(s.result, np.where(c, b.vec(s.a).astype(t), b.vec(s.b).astype(t)))


@implements(ir.Cast)
def _cast(b, s, mask):
    r = s.result
    if s.ptr:
        old = getattr(s.x, "type", None)
        if isinstance(old, ir.PtrType) and (old.elem.bits < 8) != (r.type.elem.bits < 8):
            raise KernelRuntimeError(
                f"{_where(s.loc)}\n  the CPU backend stores {old.elem} elements one "
                f"per byte, not packed as on the GPU, so it cannot see them as "
                f"{r.type.elem}; pass packed words (UInt32) instead")
        b.set(r, _recast_ptr(b.get(s.x), r.type))
    else:
        b.set(r, convert(np.asarray(b.vec(s.x)), np.dtype(_result_dtype(s))))


@implements(ir.Call)
def _call(b, s, mask):
    with np.errstate(all="ignore"):
        args = [b.vec(x).astype(np.float64) for x in s.xs]
        b.set(s.result, ir.arith.MATH[s.fn][2](*args).astype(_result_dtype(s)))


@implements(ir.Special)
def _special(b, s, mask):
    b.set(s.result, b.specials[s.name].astype(np.int32))


@implements(ir.Read)
def _read(b, s, mask):
    b.set(s.result, b.env[id(s.var)])


@implements(ir.Write, ir.Decl)
def _write(b, s, mask):
    var, decl = s.args[0], isinstance(s, ir.Decl)
    if decl and s.args[1] is None:
        b.env[id(var)] = np.zeros(b.n, dtype=_np(var.type)) \
            if not isinstance(var.type, ir.PtrType) else None
        return
    data = b.get(s.args[1])
    if isinstance(data, Pointer):
        old = b.env.get(id(var))
        if isinstance(old, Pointer) and not decl:
            b.env[id(var)] = Pointer(data.buf, np.where(mask, data.off, old.off), data.name)
        else:
            b.env[id(var)] = data
    else:
        b.masked_set(var, data, np.ones(b.n, bool) if decl else mask, _np(var.type))


@implements(ir.Addr)
def _addr(b, s, mask):
    kind, buf = b.get(s.array)
    name = f"{'register' if kind == 'local' else 'shared'} array"
    b.set(s.result, Pointer((kind, buf, s.array), np.zeros(b.n, np.int64), name))


@implements(ir.Offset)
def _offset(b, s, mask):
    p = b.get(s.ptr)
    b.set(s.result, Pointer(p.buf, p.off + b.vec(s.k).astype(np.int64), p.name))


@implements(ir.Load)
def _load(b, s, mask):
    b.set(s.result, b.load(s.ptr, s.index, s, mask, s.result))


@implements(ir.Store)
def _store(b, s, mask):
    b.store(s.ptr, s.index, s.value, s, mask)


@implements(ir.Barrier)
def _barrier(b, s, mask):
    b.sched.sync_threads(s, mask)


@implements(ir.Print)
def _print(b, s, mask):
    vals = [b.vec(x) for x in s.xs]
    for lane in np.nonzero(mask)[0]:
        print(s.fmt.replace("%lld", "%d") % tuple(v[lane] for v in vals), end="")


@implements(ir.Assert)
def _assert(b, s, mask):
    failed = mask & ~b.vec(s.cond).astype(bool)
    if failed.any():
        lane, more = int(np.nonzero(failed)[0][0]), int(failed.sum()) - 1
        raise KernelRuntimeError(
            f"{_where(s.loc)}\n  assertion failed" + (f": {s.message}" if s.message else "")
            + f" (thread {b._tid(lane)} of block {b._bid(lane)}"
            + (f", and {more} more thread{'s' if more > 1 else ''})" if more else ")"))


@implements(ir.Comment)
def _comment(b, s, mask):
    pass


@implements(ir.Asm)
def _asm(b, s, mask):
    raise MoyeError(f"{_where(s.loc)}\n  the CPU backend cannot run inline assembly "
                    f"({s.text!r})")


def _pack(parts, dtype):
    """Per-lane element vectors (n, width) as one wide value per lane."""
    raw = np.ascontiguousarray(parts).view(np.uint8).reshape(parts.shape[0], -1)
    return raw.view(dtype).reshape(parts.shape[0])


def _unpack(v, elem_dtype, width):
    raw = np.ascontiguousarray(v).view(np.uint8).reshape(v.shape[0], -1)
    return raw.view(elem_dtype).reshape(v.shape[0], width)


def _recast_ptr(p, new_type):
    """A pointer seen as another element type: the same bytes, new offsets."""
    old = p.buf[1] if isinstance(p.buf, tuple) else p.buf
    new = _np(new_type.elem)
    ratio_num, ratio_den = old.dtype.itemsize, new.itemsize
    if isinstance(p.buf, tuple):
        kind, buf, arr = p.buf
        view = buf.view(new) if kind == "shared" else buf.view(new)
        return Pointer((kind, view, arr), p.off * ratio_num // ratio_den, p.name)
    return Pointer(p.buf.view(new), p.off * ratio_num // ratio_den, p.name)


LANES_PER_BATCH = 8192


def run_kernel(kernel, grid, block, params, race_check=False, cluster=None):
    """Run an IR kernel over `grid` blocks of `block` threads; `params` maps
    each parameter's Value id to its value (a buffer Pointer or a scalar).
    Blocks run in batches side by side (one at a time with `race_check`, so
    that each block's writes are seen as the GPU could order them, or where
    the kernel waits on mbarriers: one block's waiting lanes would hold
    another's, in lock-step with them, from the arrivals they owe); with
    `cluster` (x, y, z), whole clusters (one at a time likewise;
    cluster.py)."""
    ids = cluster_order(grid, cluster)         # the blocks of a cluster run in one batch
    threads = block[0] * block[1] * block[2]
    body = list(ir.instructions(kernel.body))
    alone = race_check or any(isinstance(s, (ir.MbarrierWait, ir.MbarrierTryWait)) for s in body)
    # named barriers at run-time ids (a warpgroup's own, CUTLASS's way): each warp a context
    # of its own from the start, which goes on while the others wait at theirs; each
    # warpgroup where the kernel has wgmma (its four warps issue one together)
    apart = any(isinstance(s, (ir.NamedBarrier, ir.NamedBarrierArrive))
                and not isinstance(s.args[0], int) for s in body)
    group = 128 if any(isinstance(s, ir.Wgmma) for s in body) else 32
    per_batch = 1 if alone else max(1, LANES_PER_BATCH // threads)
    csize = cluster[0] * cluster[1] * cluster[2] if cluster else 1
    per_batch = max(1, per_batch // csize) * csize
    for i in range(0, len(ids), per_batch):
        b = _Block(kernel, params, ids[i:i + per_batch], grid, block, race_check)
        b.cluster = Cluster(b, grid, cluster)
        try:
            if apart:
                b.sched.apart(kernel.body, [b.thread_of_lane // group == g
                                            for g in range(-(-threads // group))])
            else:
                b.run(kernel.body, np.ones(b.n, bool))
        finally:
            b.sched.close()

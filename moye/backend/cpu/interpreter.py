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
from ...kernel import ir
from . import collectives, wgmma
from .async_copy import AsyncCopies
from .cluster import OPS as _CLUSTER_OPS, Cluster, cluster_order
from .contexts import Scheduler
from .errors import ArgumentName, KernelRuntimeError, where as _where
from .named_barrier import NamedBarriers
from .race import RaceCheck
from .tma import Hopper


class _Ptr:
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
_MATH = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
         "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
         "fma": lambda a, b, c: a * b + c}


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
        self.env = {k: (_Ptr(v.buf, np.zeros(n, np.int64), v.name) if isinstance(v, _Ptr) else v)
                    for k, v in params.items()}
        for a in kernel.arrays:
            rows = nb if a.space == "shared" else n
            self.env[a.id] = (a.space, np.zeros((rows, a.size), dtype=_np(a.elem)))
        self.race = RaceCheck(self) if race_check else None
        self.copies = AsyncCopies(self)
        self.hopper = Hopper(self)
        self.sched = Scheduler(self)
        self.named = NamedBarriers(self)

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
        if isinstance(v, _Ptr):
            return v
        a = np.asarray(v)
        if a.ndim == 0:
            a = np.full(self.n, a, dtype=dtype if dtype is not None else a.dtype)
        return a

    # execution ---------------------------------------------------------------
    def run(self, body, mask):
        for s in body:
            if not mask.any():
                return
            if isinstance(s, ir.Instr):
                self.instr(s, mask)
            elif isinstance(s, ir.For):
                self.loop(s, mask)
            elif isinstance(s, ir.If):
                c = self.vec(s.cond).astype(bool)
                then = mask & c
                if not s.orelse:
                    self.run(s.then, then)
                    continue
                other = mask & ~c
                if then.any() and other.any():
                    self.sched.fork(s, then, other)     # the sides may wait for each other
                else:
                    self.run(s.then, then)
                    self.run(s.orelse, other)
            elif isinstance(s, ir.While):
                active = mask.copy()
                while True:
                    self.run(s.cond_body, active)
                    active = active & self.vec(s.cond).astype(bool)
                    if not active.any():
                        break
                    self.run(s.body, active)

    def loop(self, s, mask):
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
            self.run(s.body, active)
            iv = (iv + step).astype(t)

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

    def _masked_set(self, value, data, mask, t):
        old = self.env.get(id(value))
        data = np.asarray(data)
        if data.ndim == 0:
            data = np.full(self.n, data)
        if t is not None and data.dtype != t:
            data = data.astype(t)
        if old is None or isinstance(old, _Ptr) or isinstance(data, _Ptr):
            self.env[id(value)] = data
        else:
            self.env[id(value)] = np.where(mask, data, old)

    def instr(self, s, mask):
        op, a, r = s.op, s.args, s.result
        t = _np(r.type) if r is not None and not isinstance(r.type, ir.PtrType) else None
        if op in _BIN:
            x, y = self.vec(a[0]), self.vec(a[1])
            if op in ("div", "mod") and np.dtype(t).kind in "iu":
                self._check_divisor(s, y, mask)
            with np.errstate(all="ignore"):
                out = _BIN[op](x.astype(t) if t is not None and op not in _CMP else x,
                               y.astype(t) if t is not None and op not in _CMP else y)
            self.set(r, np.asarray(out).astype(t) if t is not None else out)
        elif op == "neg":
            self.set(r, (-self.vec(a[0])).astype(t))
        elif op == "not":
            self.set(r, ~self.vec(a[0]).astype(bool))
        elif op == "abs":
            self.set(r, np.abs(self.vec(a[0])).astype(t))
        elif op == "select":
            c = self.vec(a[0]).astype(bool)
            self.set(r, np.where(c, self.vec(a[1]).astype(t), self.vec(a[2]).astype(t)))
        elif op == "cast":
            src = self.get(a[0])
            if s.attrs.get("ptr"):
                old = getattr(a[0], "type", None)
                if isinstance(old, ir.PtrType) and (old.elem.bits < 8) != (r.type.elem.bits < 8):
                    raise KernelRuntimeError(
                        f"{_where(s.loc)}\n  the CPU backend stores {old.elem} elements one "
                        f"per byte, not packed as on the GPU, so it cannot see them as "
                        f"{r.type.elem}; pass packed words (UInt32) instead")
                self.set(r, _recast_ptr(src, r.type))
            else:
                with np.errstate(all="ignore"):
                    self.set(r, self.vec(a[0]).astype(t))
        elif op == "call":
            with np.errstate(all="ignore"):
                args = [self.vec(x).astype(np.float64) for x in a]
                self.set(r, _MATH[s.attrs["fn"]](*args).astype(t))
        elif op == "special":
            self.set(r, self.specials[s.attrs["name"]].astype(np.int32))
        elif op == "read":
            self.set(r, self.env[id(a[0])])
        elif op in ("write", "decl"):
            var = a[0]
            if op == "decl" and a[1] is None:
                self.env[id(var)] = np.zeros(self.n, dtype=_np(var.type)) \
                    if not isinstance(var.type, ir.PtrType) else None
                return
            data = self.get(a[1])
            if isinstance(data, _Ptr):
                old = self.env.get(id(var))
                if isinstance(old, _Ptr) and op == "write":
                    self.env[id(var)] = _Ptr(data.buf, np.where(mask, data.off, old.off), data.name)
                else:
                    self.env[id(var)] = data
            else:
                self._masked_set(var, data, mask if op == "write" else np.ones(self.n, bool),
                                 _np(var.type))
        elif op == "addr":
            kind, buf = self.get(a[0])
            name = f"{'register' if kind == 'local' else 'shared'} array"
            self.set(r, _Ptr((kind, buf, a[0]), np.zeros(self.n, np.int64), name))
        elif op == "offset":
            p = self.get(a[0])
            self.set(r, _Ptr(p.buf, p.off + self.vec(a[1]).astype(np.int64), p.name))
        elif op == "load":
            self.set(r, self.load(a[0], a[1], s, mask, r))
        elif op == "store":
            self.store(a[0], a[1], a[2], s, mask)
        elif op == "barrier":
            self.sched.sync_threads(s, mask)
        elif op == "cp_async":
            self.copies.issue(s, mask)
        elif op == "cp_async_commit":
            self.copies.commit(mask)
        elif op == "cp_async_wait":
            self.copies.wait(s, mask)
        elif op in _COLLECTIVES:
            _COLLECTIVES[op](self, s, mask)
        elif op in _HOPPER:
            out = _HOPPER[op](self.hopper, s, mask)
            if r is not None:
                self._masked_set(r, out, mask, t)
        elif op == "print":
            vals = [self.vec(x) for x in a]
            for lane in np.nonzero(mask)[0]:
                print(s.attrs["fmt"].replace("%lld", "%d") % tuple(v[lane] for v in vals), end="")
        elif op == "comment":
            pass
        else:
            raise MoyeError(f"CPU backend: no rule for IR op {op!r}")

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

    def _index(self, base, idx, s, mask, width):
        kind, buf, arr, off, name = self._target(base)
        index = off + self.vec(idx).astype(np.int64)
        n_elem = buf.shape[-1]
        bad = mask & ((index < 0) | (index + width > n_elem))
        if bad.any():
            lane = int(np.nonzero(bad)[0][0])
            self.out_of_bounds(s, s.op, name, lane, index[lane], f"{width} element(s)", n_elem,
                               buf.itemsize)
        rows = None
        if kind == "local":
            rows = np.arange(self.n)
        elif kind == "shared":
            rows = self.block_of_lane
        index = np.where(mask, index, 0)
        if self.race is not None and kind == "shared":
            lanes = np.nonzero(mask)[0]
            self.race.access(s, arr, lanes, rows[lanes], index[lanes] * buf.itemsize,
                             width * buf.itemsize, buf.itemsize, write=s.op == "store")
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
        kind, buf, index, rows = self._index(base, idx, s, mask, width)
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
        kind, buf, index, rows = self._index(base, idx, s, mask, width)
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


_CMP = {"lt", "le", "gt", "ge", "eq", "ne"}
_COLLECTIVES = {"ldmatrix": collectives.ldmatrix, "stmatrix": collectives.stmatrix,
                "mma": collectives.mma, "shfl": collectives.shfl, "wgmma": wgmma.wgmma,
                # a wgmma completes when issued (wgmma.py): nothing to fence or wait for
                "wgmma_fence": lambda b, s, mask: None, "wgmma_commit": lambda b, s, mask: None,
                "wgmma_wait": lambda b, s, mask: None,
                "wgmma_fence_operand": lambda b, s, mask: None}


def _fence_proxy_async(h, s, mask):
    if h.block.race is not None:
        h.block.race.fence_proxy_async(np.nonzero(mask)[0])


_HOPPER = {"mbarrier_init": Hopper.init, "mbarrier_arrive": Hopper.arrive,
           "mbarrier_arrive_expect_tx": lambda h, s, mask: h.arrive(s, mask, tx=True),
           "mbarrier_try_wait": Hopper.try_wait, "mbarrier_wait": Hopper.wait,
           "fence_proxy_async": _fence_proxy_async, "fence_barrier_init": lambda h, s, mask: None,
           "tma_load": Hopper.load, "tma_store": Hopper.store,
           "tma_store_commit": lambda h, s, mask: h.commit(mask),
           "tma_store_wait": Hopper.store_wait,
           "named_barrier": lambda h, s, mask: h.block.named.sync(s, mask),
           "named_barrier_arrive": lambda h, s, mask: h.block.named.arrive(s, mask),
           "setmaxnreg": lambda h, s, mask: None,       # registers are not a limit here
           **_CLUSTER_OPS}


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
        return _Ptr((kind, view, arr), p.off * ratio_num // ratio_den, p.name)
    return _Ptr(p.buf.view(new), p.off * ratio_num // ratio_den, p.name)


LANES_PER_BATCH = 8192


def run_kernel(kernel, grid, block, params, race_check=False, cluster=None):
    """Run an IR kernel over `grid` blocks of `block` threads; `params` maps
    each parameter's Value id to its value (a buffer _Ptr or a scalar).
    Blocks run in batches side by side (one at a time with `race_check`, so
    that each block's writes are seen as the GPU could order them); with
    `cluster` (x, y, z), whole clusters (one at a time with `race_check`;
    cluster.py)."""
    ids = cluster_order(grid, cluster)         # the blocks of a cluster run in one batch
    threads = block[0] * block[1] * block[2]
    per_batch = 1 if race_check else max(1, LANES_PER_BATCH // threads)
    csize = cluster[0] * cluster[1] * cluster[2] if cluster else 1
    per_batch = max(1, per_batch // csize) * csize
    for i in range(0, len(ids), per_batch):
        b = _Block(kernel, params, ids[i:i + per_batch], grid, block, race_check)
        b.cluster = Cluster(b, grid, cluster)
        try:
            b.run(kernel.body, np.ones(b.n, bool))
        finally:
            b.sched.close()

"""Hopper (sm_90) in kernels: mbarriers, the async-proxy fences and the bulk
tensor copy engine (TMA).

On the host, `make_tma_copy(TMA_LOAD, a, smem_layout)` describes copies of
tiles of the global array `a` (torch, CuPy, DLPack or NumPy) to or from
shared memory laid out as `smem_layout` (CuTe: make_tma_copy). It is a
kernel argument: its kind (op, element type, tile layout) specializes the
kernel, its tensor map (cuTensorMapEncodeTiled's 128 bytes) is a
`const __grid_constant__` parameter. In the kernel:

    smem = moye.shared_array(tma.dtype, tma.smem_layout, align=1024)
    bar = moye.mbarrier()                   # one UInt64 in shared memory
    if moye.thread_idx.x == 0:
        moye.mbarrier_init(bar, 1)
    moye.sync_threads()
    if moye.thread_idx.x == 0:
        moye.mbarrier_arrive_expect_tx(bar, tma.bytes)
        moye.tma_load(tma, smem, (m0, n0), bar)   # the tile at element (m0, n0)
    moye.mbarrier_wait(bar, 0)              # every thread: phase 0 complete, data in smem

and back with `tma_store(tma, (m0, n0), smem)`, `tma_store_commit()`,
`tma_store_wait(0)` (after `fence_proxy_async()` and a barrier when threads
wrote the tile). Coordinates are element offsets in the array's own mode
order; parts of the tile outside the array read as zeros and are not
written. An mbarrier's phase parity starts at 0 and flips each time its
arrivals and transaction bytes complete.
"""
import functools

import numpy as np

from .. import types as T
from ..atom.arch.tma import (REDUCE_ADD_TYPES, TMA_LOAD, TMA_REDUCE_ADD, TMA_STORE, TMAOp,
                             layout_offsets, tensor_map_args)
from ..errors import MoyeError
from ..layout.swizzle import ComposedLayout
from .. import ir
from ..compiler.arguments import as_array_arg
from ..compiler.binder import TensorMapArgument
from .builtins import block_dim, shfl_sync, thread_idx
from .cluster import __all__ as _cluster_all
from .cluster import *  # noqa: F401,F403  (exported with hopper's names)
from .cluster import cta_operand, multicast_operand
from ..compiler.memory import PointerEngine
from ..compiler.tracer import KernelError, Sym, coerce, divisor_of, current, user_location


# -- the host side ----------------------------------------------------------------------
class TMACopy(TensorMapArgument):
    """Copies by the TMA between tiles of one global array and shared memory
    laid out as `smem_layout`; made by make_tma_copy, passed to kernels.
    `tile` is the tile's shape in the array's mode order, `bytes` what one
    copy moves, `args` the tensor map's encoding arguments."""

    def __init__(self, op, array, smem_layout, args, perm):
        self.op, self.array, self.smem_layout = op, array, smem_layout
        self.args, self.perm = args, perm
        self.dtype = array.dtype
        self.device = array.device
        self.tile = tuple(args.box_dim[perm.index(k)] for k in range(args.rank))
        self.bytes = args.box_bytes
        self._offsets = None
        self.spec = (self.op.name, self.dtype.name, self.perm, self.tile, self.args.swizzle,
                     _layout_text(self.smem_layout), self.device)

    def key(self):
        """What a kernel specialized for this copy depends on (and its device)."""
        return self.spec

    def traced(self, param):
        return TMADescriptor(self, param)

    def smem_offsets(self):
        if self._offsets is None:
            self._offsets = layout_offsets(self.smem_layout, self.tile)
        return self._offsets

    def __repr__(self):
        return (f"TMACopy({self.op}, {self.dtype}, tile {self.tile}, smem {self.smem_layout}, "
                f"swizzle {self.args.swizzle})")


@functools.lru_cache(maxsize=256)
def _layout_text(layout):
    """repr of a (static, hashable) layout, remembered: a TMACopy's key
    holds it, and a kernel launch may make several copies."""
    return repr(layout)


def make_tma_copy(op, gmem, smem_layout):
    """A TMACopy of tiles of the global array `gmem` (one per launch: the
    tensor map holds its address) to or from shared memory laid out as
    `smem_layout`, one mode per array mode, whose mode sizes are the tile
    (CuTe: make_tma_copy, with the tile being the layout's shape). The
    layout must be where the engine puts each element: contiguous along the
    array's contiguous mode, plain or swizzled by one of TMA's swizzles
    (Swizzle(3, 4 - log2(element bytes), 3) for 128 bytes).
        >>> import numpy as np
        >>> from moye import Layout, Swizzle, composition
        >>> a = np.zeros((100, 64), np.float16)
        >>> make_tma_copy(TMA_LOAD, a, composition(Swizzle(3, 3, 3), Layout((8, 64), (64, 1))))
        TMACopy(TMA_LOAD, Float16, tile (8, 64), smem Sw<3,3,3> o 0 o (8,64):(64,1), swizzle 128B)
    """
    if not isinstance(op, TMAOp):
        raise MoyeError(f"make_tma_copy: op must be TMA_LOAD, TMA_STORE or TMA_REDUCE_ADD, got "
                        f"{op!r}")
    arr = as_array_arg(gmem, "gmem")
    if arr is None:
        raise MoyeError(f"make_tma_copy: gmem must be an array (torch, CuPy, DLPack, NumPy), "
                        f"got {type(gmem).__name__}")
    if op is TMA_REDUCE_ADD and arr.dtype.name not in REDUCE_ADD_TYPES:
        raise MoyeError(f"make_tma_copy: TMA_REDUCE_ADD adds {', '.join(REDUCE_ADD_TYPES)} "
                        f"elements; gmem is {arr.dtype}")
    args, perm = tensor_map_args(arr.dtype, arr.shape, arr.strides, arr.ptr, smem_layout)
    return TMACopy(op, arr, smem_layout, args, perm)


# -- in kernels ---------------------------------------------------------------------------
class TMADescriptor:
    """A TMACopy inside a kernel: its static description and the parameter
    holding its tensor map."""

    def __init__(self, copy, param):
        self.copy, self.param = copy, param
        self.op, self.dtype, self.smem_layout = copy.op, copy.dtype, copy.smem_layout
        self.tile, self.bytes = copy.tile, copy.bytes

    def __repr__(self):
        return f"TMADescriptor({self.copy!r})"


class MBarrier:
    """One mbarrier: a UInt64 element of a shared array (made by
    moye.mbarrier or moye.mbarrier_array)."""
    __slots__ = ("base", "index")

    def __init__(self, base, index):
        self.base, self.index = base, index

    def __repr__(self):
        return f"MBarrier({self.base!r}[{self.index!r}])"


class MBarrierArray:
    """`n` mbarriers in shared memory; `bars[i]` (i static or dynamic) is one."""

    def __init__(self, base, n):
        self.base, self.n = base, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if isinstance(i, int) and not 0 <= i < self.n:
            raise KernelError(f"mbarrier {i} of an array of {self.n}")
        return MBarrier(self.base, i)


def mbarrier_array(n):
    """`n` mbarriers in shared memory (8 bytes each, CuTe's uint64_t
    ClusterBarrier); initialize each with mbarrier_init before use."""
    if not isinstance(n, int) or n < 1:
        raise KernelError(f"mbarrier_array: n must be a static int >= 1, got {n!r}")
    arr = ir.Array(T.UInt64, n, "shared", 8)
    b = current()
    b.kernel.arrays.append(arr)
    b.kernel.array_locs[arr.id] = user_location()
    return MBarrierArray(arr, n)


def mbarrier():
    """One mbarrier in shared memory (mbarrier_array(1)[0])."""
    return mbarrier_array(1)[0]


def _bar(bar, what):
    if not isinstance(bar, MBarrier):
        raise KernelError(f"{what}: expected an mbarrier (moye.mbarrier() or "
                          f"moye.mbarrier_array(n)[i]), got {bar!r}")
    return bar.base, _int(bar.index)


def _int(x):
    if isinstance(x, Sym):
        return coerce(x, T.Int32)
    if isinstance(x, bool) or not isinstance(x, int):
        raise KernelError(f"expected an int, got {x!r}")
    return x


def mbarrier_init(bar, count):
    """Initialize `bar` to expect `count` arrivals per phase, at phase 0
    (mbarrier.init; CuTe: ClusterBarrier::init). One thread does it; a
    sync_threads after it makes it visible to the others."""
    if isinstance(count, int) and count < 1:
        raise KernelError(f"mbarrier_init: count must be >= 1, got {count}")
    current().instr("mbarrier_init", (*_bar(bar, "mbarrier_init"), _int(count)))


def mbarrier_arrive(bar, cta=None):
    """Each executing thread arrives on `bar` once (mbarrier.arrive; CuTe:
    ClusterBarrier::arrive). With `cta`, on the mbarrier at bar's offset in
    the cluster's block of that rank instead (mapa.shared::cluster, then
    mbarrier.arrive.shared::cluster; CuTe: ClusterBarrier::arrive(cta_id));
    sm_90. Like CuTe's, the remote arrival releases at CTA scope: it says
    "done reading", as a pipeline's consumers do; the cluster-scope form
    costs a MEMBAR.ALL.GPU per arrival, which halved the Hopper GEMM."""
    what = "mbarrier_arrive"
    if cta is None:
        current().instr("mbarrier_arrive", _bar(bar, what))
    else:
        current().instr("mbarrier_arrive_cluster", (*_bar(bar, what), cta_operand(cta, what)))


def mbarrier_arrive_expect_tx(bar, nbytes):
    """Each executing thread adds `nbytes` to the bytes the current phase
    waits for, then arrives (mbarrier.arrive.expect_tx; CuTe:
    ClusterTransactionBarrier::arrive_and_expect_tx). sm_90."""
    if isinstance(nbytes, int) and nbytes < 0:
        raise KernelError(f"mbarrier_arrive_expect_tx: nbytes must be >= 0, got {nbytes}")
    current().instr("mbarrier_arrive_expect_tx",
                    (*_bar(bar, "mbarrier_arrive_expect_tx"), _int(nbytes)))


def mbarrier_try_wait(bar, phase):
    """Whether the phase of parity `phase` (0 or 1) of `bar` has completed
    (mbarrier.try_wait.parity; CuTe: ClusterBarrier::try_wait). sm_90."""
    v = current().instr("mbarrier_try_wait", (*_bar(bar, "mbarrier_try_wait"), _int(phase)),
                        T.Bool)
    return Sym(v, T.Bool)


def mbarrier_wait(bar, phase):
    """Wait until the phase of parity `phase` (0 or 1) of `bar` has
    completed: try_wait.parity in a loop (CuTe: ClusterBarrier::wait). The
    data of TMA loads that completed on it is then visible. sm_90."""
    current().instr("mbarrier_wait", (*_bar(bar, "mbarrier_wait"), _int(phase)))


def fence_proxy_async():
    """Order this thread's ordinary shared-memory accesses before later
    accesses by the async proxy (TMA, wgmma): fence.proxy.async.shared::cta.
    Writers of a tile that a TMA store reads do this before the barrier.
    CuTe: fence_view_async_shared. sm_90."""
    current().instr("fence_proxy_async", ())


def fence_barrier_init():
    """Make mbarrier_init visible to the cluster's async proxy
    (fence.mbarrier_init.release.cluster; CuTe: fence_barrier_init). sm_90."""
    current().instr("fence_barrier_init", ())


def _descriptor(tma, kind, what):
    """`tma`, checked to be a TMACopy kernel argument (made for `kind`, unless None)."""
    if not isinstance(tma, TMADescriptor):
        raise KernelError(f"{what}: expected a TMACopy kernel argument (make_tma_copy), got "
                          f"{tma!r}")
    if kind is not None and tma.op.kind != kind:
        wanted = {"load": TMA_LOAD, "store": TMA_STORE, "reduce_add": TMA_REDUCE_ADD}[kind]
        raise KernelError(f"{what}: {tma.copy!r} was made for {tma.op}; make one with {wanted}")
    return tma


def _coords(tma, coords, what):
    rank = len(tma.tile)
    coords = tuple(coords) if isinstance(coords, (tuple, list)) else (coords,)
    if len(coords) != rank:
        raise KernelError(f"{what}: {len(coords)} coordinates for a rank-{rank} array")
    return tuple(_int(coords[k]) for k in tma.copy.perm)


def _smem(tma, arr, what):
    """(base, index) of a shared tile for a TMA copy, checked against the
    copy's layout and alignment."""
    e = getattr(arr, "engine", None)
    if not isinstance(e, PointerEngine) or e.space != "shared":
        raise KernelError(f"{what}: the tile must be a shared-memory array, got {arr!r}")
    if e.dtype.bits != tma.dtype.bits:
        raise KernelError(f"{what}: the tile holds {e.dtype}, the copy moves {tma.dtype}")
    layout, offset = arr.layout, e.offset
    if isinstance(layout, ComposedLayout) and not (isinstance(layout.offset, int)
                                                   and layout.offset == 0):
        raise KernelError(f"{what}: the tile's layout {layout} starts inside its swizzle; "
                          "a TMA tile starts at the swizzle's period")
    try:
        got = layout_offsets(layout, tma.tile)
    except Exception:
        got = None
    if got is None or got.shape != tma.copy.smem_offsets().shape or \
            not np.array_equal(got, tma.copy.smem_offsets()):
        raise KernelError(f"{what}: the tile's layout {layout} is not the copy's "
                          f"{tma.smem_layout}")
    ebytes = tma.dtype.bits // 8
    need = 128 << tma.copy.args.swizzle_bits       # the swizzle's period, in bytes
    if e.align % need or (divisor_of(offset) * ebytes) % need:
        raise KernelError(f"{what}: the tile must start {need}-byte aligned in shared memory "
                          f"(make it with moye.shared_array(dtype, layout, align={need})); its "
                          f"array is {e.align}-byte aligned, offset {offset!r} elements")
    return e.base, _int(offset)


def tma_load(tma, dst, coords, bar, multicast=None):
    """The TMA load of the tile at element `coords` of the copy's array into
    the shared tile `dst`, completing its bytes (tma.bytes) on mbarrier
    `bar` (cp.async.bulk.tensor...mbarrier::complete_tx::bytes; CuTe:
    copy(tma.with(bar), gA, sA)). One thread issues it. sm_90.

    With `multicast`, a 16-bit mask of block ranks in the cluster (bit r
    for block_rank_in_cluster() == r), the tile lands at dst's offset in
    every block of the mask and completes its bytes on the mbarrier at
    bar's offset in each (....multicast::cluster; CuTe:
    SM90_TMA_LOAD_MULTICAST). Those mbarriers must be initialized first
    (fence_barrier_init, then cluster_sync)."""
    what = "tma_load"
    tma = _descriptor(tma, "load", what)
    c = _coords(tma, coords, what)
    base, idx = _smem(tma, dst, what)
    if multicast is None:
        current().instr("tma_load", (base, idx, *_bar(bar, what), tma.param, *c),
                        rank=len(c), bytes=tma.bytes)
        return
    mask = multicast_operand(multicast, what)
    current().instr("tma_load_multicast", (base, idx, *_bar(bar, what), tma.param, mask, *c),
                    rank=len(c), bytes=tma.bytes)


def prefetch_tma_descriptor(tma):
    """Prefetch the tensor map of TMA copy `tma` (any kind) into the cache,
    so that its first copy does not wait for it (prefetch.tensormap; CuTe:
    prefetch_tma_descriptor). One thread issues it, early in the kernel.
    sm_90.
        if moye.thread_idx.x == 0:
            moye.prefetch_tma_descriptor(load_a)"""
    tma = _descriptor(tma, None, "prefetch_tma_descriptor")
    current().instr("tma_prefetch_descriptor", (tma.param,))


def tma_store(tma, coords, src):
    """The TMA store of the shared tile `src` to the tile at element
    `coords` of the copy's array, in this thread's open bulk group
    (cp.async.bulk.tensor...global.shared::cta.bulk_group; CuTe:
    copy(tma, sA, gA)). Commit with tma_store_commit. sm_90."""
    what = "tma_store"
    tma = _descriptor(tma, "store", what)
    c = _coords(tma, coords, what)
    base, idx = _smem(tma, src, what)
    current().instr("tma_store", (tma.param, base, idx, *c), rank=len(c), bytes=tma.bytes)


def tma_reduce_add(tma, coords, src):
    """Add the shared tile `src` to the tile at element `coords` of the
    copy's array (made with TMA_REDUCE_ADD), each element atomically, in
    this thread's open bulk group, as tma_store stores
    (cp.reduce.async.bulk.tensor...add.tile.bulk_group; CuTe:
    SM90_TMA_REDUCE_ADD). Commit with tma_store_commit; tma_store_wait
    waits for src to be read. Float32, Int32, UInt32, UInt64. sm_90."""
    what = "tma_reduce_add"
    tma = _descriptor(tma, "reduce_add", what)
    c = _coords(tma, coords, what)
    base, idx = _smem(tma, src, what)
    current().instr("tma_reduce_add", (tma.param, base, idx, *c), rank=len(c),
                    bytes=tma.bytes)


def tma_store_commit():
    """Close this thread's group of TMA stores (cp.async.bulk.commit_group;
    CuTe: tma_store_arrive). sm_90."""
    current().instr("tma_store_commit", ())


def tma_store_wait(n=0):
    """Wait until the TMA stores of all but the newest `n` committed groups
    have read their shared memory (cp.async.bulk.wait_group.read n; CuTe:
    tma_store_wait<N>). sm_90."""
    if not isinstance(n, int) or n < 0:
        raise KernelError(f"tma_store_wait: n must be a static int >= 0, got {n!r}")
    current().instr("tma_store_wait", (), n=n)


# -- warp specialization ---------------------------------------------------------------
def _barrier_operands(barrier_id, threads, what):
    if isinstance(barrier_id, int) and not 0 <= barrier_id < 16:
        raise KernelError(f"{what}: barrier_id must be 0..15 (0 is sync_threads'), got "
                          f"{barrier_id}")
    if isinstance(threads, int) and (threads < 32 or threads % 32):
        raise KernelError(f"{what}: threads must be a positive multiple of 32 (whole warps), "
                          f"got {threads}")
    return _int(barrier_id), _int(threads)


def named_barrier_sync(barrier_id, threads):
    """Wait at hardware barrier `barrier_id` (1..15; 0 is sync_threads') until
    `threads` threads (whole warps) have arrived or synced on it (bar.sync id,
    threads; CuTe: NamedBarrier::sync). Lets a subset of the block, such as
    the consumer warpgroups, synchronize without the producer."""
    current().instr("named_barrier", _barrier_operands(barrier_id, threads,
                                                       "named_barrier_sync"))


def named_barrier_arrive(barrier_id, threads):
    """Arrive at hardware barrier `barrier_id` without waiting (bar.arrive id,
    threads; CuTe: NamedBarrier::arrive): the waiters there count this
    thread's warp among their `threads`."""
    current().instr("named_barrier_arrive", _barrier_operands(barrier_id, threads,
                                                              "named_barrier_arrive"))


def _setmaxnreg(n, inc):
    what = f"setmaxnreg_{'inc' if inc else 'dec'}"
    if not isinstance(n, int) or not 24 <= n <= 256 or n % 8:
        raise KernelError(f"{what}: n must be a static multiple of 8 in 24..256, got {n!r}")
    current().instr("setmaxnreg", (), n=n, inc=inc)


def setmaxnreg_inc(n):
    """Raise this warpgroup's register limit to `n` per thread
    (setmaxnreg.inc.sync.aligned.u32 n; CuTe: warpgroup_reg_alloc<n>). The
    consumer warpgroups of a warp-specialized kernel take the registers the
    producer gave back. All threads of the warpgroup execute it, as one branch
    of an if/else on the warpgroup index. sm_90a; the kernel is then compiled
    with __launch_bounds__(threads, 1), which setmaxnreg needs."""
    _setmaxnreg(n, True)


def setmaxnreg_dec(n):
    """Lower this warpgroup's register limit to `n` per thread
    (setmaxnreg.dec.sync.aligned.u32 n; CuTe: warpgroup_reg_dealloc<n>), as a
    producer warpgroup that only issues TMA does. sm_90a."""
    _setmaxnreg(n, False)


def warp_idx():
    """This thread's warp in the block, as a value the compiler knows is the
    same across the warp (the warp's lane 0 broadcasts it; CuTe:
    canonical_warp_idx_sync). Branch on warp_idx() // 4 for warpgroup roles."""
    t = thread_idx.x + block_dim.x * (thread_idx.y + block_dim.y * thread_idx.z)
    return shfl_sync(t // 32, 0)


__all__ = ["TMACopy", "make_tma_copy", "TMADescriptor", "MBarrier", "mbarrier", "mbarrier_array",
           "mbarrier_init", "mbarrier_arrive", "mbarrier_arrive_expect_tx", "mbarrier_try_wait",
           "mbarrier_wait", "fence_proxy_async", "fence_barrier_init", "tma_load",
           "prefetch_tma_descriptor", "tma_store",
           "tma_reduce_add", "tma_store_commit", "tma_store_wait", "named_barrier_sync",
           "named_barrier_arrive", "setmaxnreg_inc", "setmaxnreg_dec", "warp_idx"] + _cluster_all

"""Distributed shared memory (sm_90): the shared memory of another block of
the cluster, seen as an array.

`peer_shared(smem, rank)` is the copy of the shared array `smem` that the
cluster's block of rank `rank` holds: the same layout, the same offsets,
its loads and stores reaching that block's shared memory (PTX `mapa`, then
`ld.shared::cluster` / `st.shared::cluster`). It composes with layouts:
tile it, index it, `copyto` into or out of it, element by element.

    partial = moye.shared_array(moye.Float32, 4)
    ...                                  # each block fills its own
    moye.cluster_sync()                  # every block's partial is written
    other = moye.peer_shared(partial, (moye.block_rank_in_cluster() + 1) % moye.cluster_size())
    x = other[moye.thread_idx.x]         # the next block's element
    moye.cluster_sync()                  # before anyone writes partial again

As for any shared memory, the cluster barrier orders the accesses: a
block's writes are visible to the others after a cluster_sync (release
and acquire), and a block must not exit while another may still reach its
shared memory (a cluster_sync after the last remote access). The CPU
backend checks ranks at run time and, with `race_check`, sees remote
accesses as accesses by this thread to the other block's shared memory.
"""
from .. import types as T
from ..array import MoYeArray
from ..errors import MoyeTypeError
from ..layout.layout import norm_coord
from ..compiler.memory import Loaded, PointerEngine
from ..compiler.tracer import KernelError, Sym, coerce, current
from .hopper import _bar

SPACE = "shared::cluster"


class PeerEngine:
    """The elements of a shared-memory engine (`local`, a PointerEngine of
    this block) in the shared memory of the cluster's block of rank `cta`.
    Element by element: no vector accesses, no atoms."""
    __slots__ = ("local", "cta")
    space = SPACE

    def __init__(self, local, cta):
        self.local, self.cta = local, cta

    dtype = property(lambda self: self.local.dtype)
    base = property(lambda self: self.local.base)
    offset = property(lambda self: self.local.offset)

    @property
    def align(self):
        return max(1, self.dtype.bits // 8)     # one element at a time (see copy_elements)

    def offset_by(self, k):
        return self if isinstance(k, int) and k == 0 else PeerEngine(self.local.offset_by(k),
                                                                     self.cta)

    def recast(self, dtype):
        return PeerEngine(self.local.recast(dtype), self.cta)

    def _index(self, i):
        """Element i's index operand (an Int32 where it is dynamic)."""
        idx = self.local._index(i)
        return coerce(idx, T.Int32) if isinstance(idx, Sym) else idx

    def load(self, i, width=1):
        assert width == 1, "a peer's shared memory is read element by element"
        idx = self._index(i)
        v = current().instr("dsmem_load", (self.base, idx, self.cta), self.dtype, elem=self.dtype)
        return Sym(v, self.dtype)

    def store(self, i, value, width=1):
        assert width == 1, "a peer's shared memory is written element by element"
        idx = self._index(i)
        if not isinstance(value, (Sym, int, float)) or isinstance(value, bool) and \
                self.dtype is not T.Bool:
            raise MoyeTypeError(f"cannot store {value!r} in a peer's shared array of "
                                f"{self.dtype}; store a number")
        current().instr("dsmem_store", (self.base, idx, self.cta, coerce(value, self.dtype)),
                        elem=self.dtype)

    def store_async(self, i, value, bar, what):
        if self.dtype.bits not in (32, 64):
            raise MoyeTypeError(f"{what}: st.async moves 32- or 64-bit elements; the peer's "
                                f"array holds {self.dtype} (recast it to a 32-bit type)")
        if not isinstance(value, (Sym, int, float)) or isinstance(value, bool):
            raise MoyeTypeError(f"{what}: value must be a number, got {value!r}")
        idx = self._index(i)
        current().instr("dsmem_store_async", (self.base, idx, self.cta, coerce(value, self.dtype),
                                              *_bar(bar, what)), elem=self.dtype)

    def read(self, layout):
        return Loaded(self, layout)

    def write(self, layout, values):
        PointerEngine.write(self, layout, values)

    def _no_atoms(self, *args):
        raise KernelError("copy or gemm with an atom on a peer's shared memory "
                          "(peer_shared): distributed shared memory is reached element by "
                          "element; copy it with copyto(dst, src), without an atom")

    atom_copy = atom_copy_if = atom_mma = _no_atoms

    def __repr__(self):
        return f"PeerEngine({self.local!r}, rank {self.cta!r})"


def peer_shared(array, rank):
    """The shared array `array` as held by the cluster's block of rank `rank`
    (0 .. cluster_size() - 1; an int or a dynamic integer): an array of the
    same layout whose loads and stores reach that block's shared memory
    (distributed shared memory, sm_90). CUDA: cluster.map_shared_rank; PTX
    mapa.shared::cluster with ld/st.shared::cluster.
        >>> import moye, numpy as np
        >>> @moye.kernel
        ... def swap(out):
        ...     t, r = moye.thread_idx.x, moye.block_rank_in_cluster()
        ...     mine = moye.shared_array(moye.Int32, 4)
        ...     mine[t] = 10 * r + t
        ...     moye.cluster_sync()
        ...     out[4 * r + t] = moye.peer_shared(mine, 1 - r)[t]
        ...     moye.cluster_sync()
        >>> out = np.zeros(8, np.int32)
        >>> swap[2, 4, 2](out)
        >>> out.tolist()
        [10, 11, 12, 13, 0, 1, 2, 3]
    """
    if isinstance(array, MoYeArray) and isinstance(array.engine, PeerEngine):
        raise MoyeTypeError("peer_shared: array is already a peer's view (peer_shared of a "
                            "peer_shared); pass the block's own shared array")
    if not isinstance(array, MoYeArray) or not isinstance(array.engine, PointerEngine) or \
            array.engine.space != "shared":
        where = f"an array in {array.engine.space} memory" if isinstance(array, MoYeArray) \
            else f"{type(array).__name__} {array!r}"
        raise MoyeTypeError(f"peer_shared: array must be a shared array of this block "
                            f"(moye.shared_array or a view of one), got {where}")
    if array.engine.dtype.bits < 8:
        raise MoyeTypeError(f"peer_shared: {array.engine.dtype} elements are sub-byte; recast "
                            "the shared array to a wider type first")
    if isinstance(rank, Sym):
        if not rank.type.is_integer:
            raise MoyeTypeError(f"peer_shared: rank must be an integer block rank, got a "
                                f"{rank.type} value")
        cta = coerce(rank, T.Int32)
    elif isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 16:
        raise KernelError(f"peer_shared: rank must be a block rank in the cluster (an int "
                          f"0..15, a cluster has at most 16 blocks, or a dynamic integer), got "
                          f"{rank!r}")
    else:
        cta = rank
    return MoYeArray.view_of(PeerEngine(array.engine, cta), array.layout)


def store_async(dst, index, value, bar):
    """`dst[index] = value` in a peer block's shared memory, its arrival
    signalled on that block's copy of the mbarrier `bar` (the mbarrier at
    bar's offset there) as 4 or 8 transaction bytes: the peer's waiter on
    `bar` sees the value once the phase completes, with no fence and no
    cluster barrier. `dst` is a peer_shared view of 32- or 64-bit elements;
    the receiving block arms `bar` with mbarrier_arrive_expect_tx for every
    byte its peers send it. sm_90. PTX: st.async.shared::cluster.mbarrier::
    complete_tx::bytes (QuACK's store_shared_remote).
        >>> import moye, numpy as np
        >>> @moye.kernel
        ... def pass_on(out):
        ...     r, n = moye.block_rank_in_cluster(), moye.cluster_size()
        ...     got = moye.shared_array(moye.Float32, 1)
        ...     bar = moye.mbarrier()
        ...     moye.mbarrier_init(bar, 1)
        ...     moye.fence_barrier_init()
        ...     moye.cluster_sync()
        ...     moye.mbarrier_arrive_expect_tx(bar, 4)
        ...     moye.store_async(moye.peer_shared(got, (r + 1) % n), 0, 1.5 * r, bar)
        ...     moye.mbarrier_wait(bar, 0)
        ...     out[r] = got[0]
        >>> out = np.zeros(3, np.float32)
        >>> pass_on[3, 1, 3](out)
        >>> out.tolist()
        [3.0, 0.0, 1.5]
    """
    what = "store_async"
    if not isinstance(dst, MoYeArray) or not isinstance(dst.engine, PeerEngine):
        raise MoyeTypeError(f"{what}: dst must be a peer block's shared array (peer_shared(smem, "
                            f"rank)), got {type(dst).__name__} {dst!r}")
    dst.engine.store_async(dst._offset(norm_coord(index)), value, bar, what)


__all__ = ["peer_shared", "store_async"]

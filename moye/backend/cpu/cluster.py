"""Thread-block clusters on the CPU backend, from the PTX ISA.

The blocks of one cluster always run in the same batch (run_kernel orders
the grid cluster by cluster, each cluster's blocks by rank, x fastest), so
a block reaches another block of its cluster as another row of the
batch's shared memory: the row of rank r is the cluster's first row + r.

- The cluster special registers (%clusterid, %cluster_ctarank, ...) are
  computed from the block ids and the cluster shape; a launch without a
  cluster is one of 1x1x1 clusters, as on the GPU.
- barrier.cluster: each thread counts its arrivals; a wait completes when
  every thread of its cluster that has not returned has arrived as often
  as the waiter has waited, plus one. In lock-step that is every thread
  of the cluster executing cluster_arrive before any executes
  cluster_wait; a wait
  that can never complete raises. With race_check (one cluster per batch)
  a completed wait is a barrier for the race check.
- A remote mbarrier arrival and a multicast TMA load act on the mbarrier
  (and tile) at the same offset in another row. Each target block's
  mbarrier must have been initialized before the last cluster barrier
  (mbarrier_init, fence_barrier_init, cluster_sync): on the GPU another
  block may otherwise reach it before its initialization, so here it is
  an error. A multicast load lands in each target block when a thread of
  that block waits on its mbarrier, completing the box's bytes there.
"""
import numpy as np

from .errors import KernelRuntimeError, where
from .tma import PendingLoad


def cluster_order(grid, cluster):
    """The grid's block ids, cluster by cluster, each cluster's by rank."""
    cx, cy, cz = cluster or (1, 1, 1)
    gx, gy, gz = grid
    if cluster is None or cluster == (1, 1, 1):
        return [(bx, by, bz) for bz in range(gz) for by in range(gy) for bx in range(gx)]
    return [(kx * cx + x, ky * cy + y, kz * cz + z)
            for kz in range(gz // cz) for ky in range(gy // cy) for kx in range(gx // cx)
            for z in range(cz) for y in range(cy) for x in range(cx)]


class Cluster:
    """The cluster state of a batch of blocks (whole clusters)."""

    def __init__(self, block, grid, shape):
        self.block = block
        shape = tuple(shape) if shape is not None else (1, 1, 1)
        self.size = shape[0] * shape[1] * shape[2]
        ids = np.array(block.block_ids, np.int64).reshape(-1, 3)
        c = np.array(shape, np.int64)
        local = ids % c
        rank = local[:, 0] + shape[0] * (local[:, 1] + shape[1] * local[:, 2])
        rows = np.arange(len(ids))
        self.first_row = rows - rank
        assert (rank == rows % self.size).all(), "run_kernel batches whole clusters in rank order"
        lane_row = block.block_of_lane
        n = block.n
        cid, nid = ids // c, np.array(grid, np.int64) // c
        self.specials = {"cluster_ctarank": rank[lane_row],
                         "cluster_nctarank": np.full(n, self.size)}
        for k, axis in enumerate("xyz"):
            self.specials[f"clusterid.{axis}"] = cid[lane_row, k]
            self.specials[f"nclusterid.{axis}"] = np.full(n, nid[k])
            self.specials[f"cluster_ctaid.{axis}"] = local[lane_row, k]
            self.specials[f"cluster_nctaid.{axis}"] = np.full(n, shape[k])
        self.cluster_of_lane = self.first_row[lane_row]
        self.arrived = np.zeros(n, np.int64)
        self.waited = np.zeros(n, np.int64)
        self.synced = {}        # mbarrier key -> its state at the last completed cluster wait

    # the instructions, as their IR rules call them: `b.cluster.arrive(s, mask)`
    def special(self, s, mask):
        return special(self.block.hopper, s, mask)

    def arrive(self, s, mask):
        arrive(self.block.hopper, s, mask)

    def wait(self, s, mask):
        wait(self.block.hopper, s, mask)

    def remote_arrive(self, s, mask):
        remote_arrive(self.block.hopper, s, mask)

    def multicast_load(self, s, mask):
        multicast_load(self.block.hopper, s, mask)

    def peer_access(self, s, mask):
        """dsmem_load(ptr, index, cta) / dsmem_store(ptr, index, cta, value)
        (and dsmem_store_async's store):
        the element at the same offset in the shared memory of the block of
        rank cta, bounds-checked and seen by the race check as an access to
        that block's row by this thread."""
        b = self.block
        cta = b.vec(s.args[2]).astype(np.int64)
        bad = mask & ((cta < 0) | (cta >= self.size))
        if bad.any():
            lane = int(np.nonzero(bad)[0][0])
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  {s.op} by thread {b._tid(lane)} of block {b._bid(lane)} "
                f"names block rank {int(cta[lane])} of a cluster of {self.size} blocks (a peer's "
                f"shared memory needs a rank 0..{self.size - 1})")
        rows = np.where(mask, self.first_row[b.block_of_lane] + np.where(bad, 0, cta), 0)
        store = s.op != "dsmem_load"
        kind, buf, index, rows = b.index(s.args[0], s.args[1], s, mask, 1, rows=rows, write=store)
        lanes = np.nonzero(mask)[0]
        if store:
            v = b.vec(s.args[3])
            buf[rows[lanes], index[lanes]] = v[lanes].astype(buf.dtype)
        else:
            b.set_result(s, buf[rows, index], mask)

    def store_async(self, s, mask):
        """dsmem_store_async(ptr, index, cta, value, bar, bar_idx): the store
        of peer_access, then its bytes completed on the mbarrier at bar's
        offset in that block, which releases the store to that mbarrier's
        waiters (st.async ... mbarrier::complete_tx::bytes)."""
        self.peer_access(s, mask)
        h = self.block.hopper
        nbytes = s.attrs["elem"].bits // 8
        for lane, target, st in _released_remote_bars(h, s, mask, 4):
            st[2] -= nbytes
            h._complete(target, st)

    def row_of_rank(self, s, row, rank, lane):
        """The batch row of the block of `rank` in the cluster of `row`."""
        if not 0 <= rank < self.size:
            b = self.block
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  {s.op} by thread {b._tid(lane)} of block {b._bid(lane)} "
                f"names block rank {rank} of a cluster of {self.size} blocks")
        return int(self.first_row[row]) + rank

    def remote_state(self, h, s, key, lane):
        """The state of the mbarrier `key` for an access by `lane`, checked
        to be initialized before the last cluster barrier if in another block."""
        st = h._state(s, key, lane)
        b = self.block
        if key[1] != b.block_of_lane[lane] and self.synced.get(key) is not st:
            target = b.block_ids[key[1]]
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  {s.op} by thread {b._tid(lane)} of block {b._bid(lane)} "
                f"reaches mbarrier {key[2]} of block {tuple(target)}, which was initialized "
                "after the last cluster barrier: another block may use an mbarrier only after "
                "mbarrier_init, fence_barrier_init and a cluster_sync")
        return st


def _cluster(h):
    return h.block.cluster


def special(h, s, mask):
    return _cluster(h).specials[s.attrs["name"]]


def arrive(h, s, mask):
    cl = _cluster(h)
    twice = mask & (cl.arrived > cl.waited)
    if twice.any():
        lane = int(np.nonzero(twice)[0][0])
        b = h.block
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  thread {b._tid(lane)} of block {b._bid(lane)} arrives at the "
            "cluster barrier again before waiting on it (cluster_wait)")
    cl.arrived[mask] += 1


def wait(h, s, mask):
    cl, b = _cluster(h), h.block

    def missing():
        """(a waiting lane, a lane not arrived, how many) or None."""
        for first in np.unique(cl.cluster_of_lane[mask]):
            members = cl.cluster_of_lane == first
            waiting = np.nonzero(mask & members)[0]
            need = cl.waited[waiting].max() + 1
            late = np.nonzero(members & (cl.arrived < need) & ~b.exited)[0]
            if late.size:
                return int(waiting[0]), int(late[0]), late.size
        return None

    def what(lane, other, n):
        return (f"thread {b._tid(lane)} of block {b._bid(lane)} waits at the cluster barrier, "
                f"which {n} threads of its cluster (thread {b._tid(other)} of block "
                f"{b._bid(other)} first) have not arrived at")

    if missing() is not None and b.sched.concurrent:     # other contexts may still arrive
        b.sched.block_until(lambda: missing() is None, s.loc, lambda: what(*missing()))
    late = missing()
    if late is not None:
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  deadlock: {what(*late)} (every thread of every block of the "
            "cluster arrives: cluster_arrive or cluster_sync; the CPU backend runs threads in "
            "lock-step, so arrivals in another branch of a divergent `if` come only after it)")
    cl.waited[mask] += 1
    cl.synced = dict(h.bars)
    if b.race is not None:
        b.race.barrier()


def _released_remote_bars(h, s, mask, at):
    """(lane, target key, state) for each active lane of the mbarrier
    operand at `at` of `s` as held by the cluster's block of rank s.args[2],
    the lane's earlier accesses released to it (what a remote arrival and a
    st.async's completion share)."""
    cl, b = _cluster(h), h.block
    keys, lanes = h._bars(s, mask, at)
    cta = b.vec(s.args[2]).astype(np.int64)
    for key, lane in zip(keys, lanes):
        target = (key[0], cl.row_of_rank(s, key[1], int(cta[lane]), lane), key[2])
        st = cl.remote_state(h, s, target, lane)
        if b.race is not None:
            b.race.release(target, [lane])
        yield lane, target, st


def remote_arrive(h, s, mask):
    """mbarrier_arrive_cluster(bar, bar_idx, cta)"""
    b = h.block
    for lane, target, st in _released_remote_bars(h, s, mask, 0):
        st[1] -= 1
        if st[1] < 0:
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  thread {b._tid(lane)} of block {b._bid(lane)} arrives on "
                f"mbarrier {target[2]} of block {tuple(b.block_ids[target[1]])} whose phase "
                f"already has all its {st[0]} arrivals")
        h._complete(target, st)


def multicast_load(h, s, mask):
    """tma_load_multicast(dst, dst_idx, bar, bar_idx, tmap, mask, c...)"""
    cl, b = _cluster(h), h.block
    tmap = b.get(s.args[4])
    keys, lanes = h._bars(s, mask, 2)
    ctas = b.vec(s.args[5]).astype(np.int64) & 0xFFFF
    for key, lane in zip(keys, lanes):
        bits = int(ctas[lane])
        if bits == 0 or bits >> cl.size:
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  tma_load by thread {b._tid(lane)} of block {b._bid(lane)}: "
                f"the multicast mask {bits:#b} must name blocks of its cluster of {cl.size} "
                f"(bits 0..{cl.size - 1}, at least one)")
        raw, arr, row, pos = h._tile(s, 0, 1, lane, tmap)
        inside, index = tmap.elements(h._coords(s, 6, lane))
        src = tmap.buf.view(np.uint8).reshape(-1, tmap.args.element_bytes)
        data = np.zeros(pos.shape, np.uint8)
        data[inside] = src[index[inside]]
        for rank in range(cl.size):
            if not bits >> rank & 1:
                continue
            trow = cl.row_of_rank(s, row, rank, lane)
            target = (key[0], trow, key[2])
            cl.remote_state(h, s, target, lane)
            if b.race is not None:
                b.race.async_issue_bytes(s, arr, lane, trow, pos.ravel(),
                                         tmap.args.element_bytes)
            h.loads.append(PendingLoad(bar=target, arr=arr, dst=raw, row=trow, bytes=pos, data=data,
                                 lane=lane, loc=s.loc))


"""Thread-block clusters (sm_90) in kernels: the cluster's ids, its
barrier, and arrivals on another block's mbarrier.

A launch `kern[grid, block, cluster](*args)` groups the grid's blocks into
clusters of `cluster` blocks (at most 8 portably; 16 where the device
allows it, as the H100 does), which run at the same time on one GPC and
can reach each other's shared memory. In the kernel:

    rank = moye.block_rank_in_cluster()     # 0 .. blocks in the cluster - 1
    if moye.thread_idx.x == 0:
        moye.mbarrier_init(bar, 1)
        moye.fence_barrier_init()           # visible to the cluster
    moye.cluster_sync()                     # every block's barrier is initialized
    if moye.thread_idx.x == 0:
        moye.mbarrier_arrive_expect_tx(bar, tma.bytes)
        moye.tma_load(tma, smem[rank part], coords, bar, multicast=0b11)

A multicast TMA load (hopper.tma_load's `multicast=`) writes its box at
the same shared-memory offset in every block of the mask and completes its
bytes on the mbarrier at the same offset in each. `mbarrier_arrive(bar,
cta=r)` arrives on block r's mbarrier at bar's offset.
"""
from .. import types as T
from .builtins import Dim3
from ..compiler.tracer import KernelError, Sym, coerce, current, special, user_location


def _cluster_special(name):
    """A cluster special register (%clusterid.x, ...), defined once at the
    top of the kernel beside threadIdx and friends."""
    return special(name, "cluster_special", user_location())


cluster_idx = Dim3("clusterid", _cluster_special, "cluster_idx")
cluster_idx.__doc__ = ("This block's cluster in the grid of clusters (%clusterid; CuTe: "
                       "cluster_id_in_grid).")
cluster_grid_dim = Dim3("nclusterid", _cluster_special, "cluster_grid_dim")
cluster_grid_dim.__doc__ = ("Clusters in the grid, per dimension (%nclusterid; CuTe: "
                            "cluster_grid_dims).")
cluster_dim = Dim3("cluster_nctaid", _cluster_special, "cluster_dim")
cluster_dim.__doc__ = ("Blocks in a cluster, per dimension: the launch's `cluster` "
                       "(%cluster_nctaid; CuTe: cluster_shape).")
block_idx_in_cluster = Dim3("cluster_ctaid", _cluster_special, "block_idx_in_cluster")
block_idx_in_cluster.__doc__ = ("This block's position in its cluster (%cluster_ctaid; CuTe: "
                                "block_id_in_cluster).")


def block_rank_in_cluster():
    """This block's rank in its cluster, x fastest: the `cta` of
    mbarrier_arrive and the bit of a multicast mask (%cluster_ctarank;
    CuTe: block_rank_in_cluster). sm_90."""
    return _cluster_special("cluster_ctarank")


def cluster_size():
    """Blocks in this block's cluster (%cluster_nctarank; CuTe: size of
    cluster_shape). sm_90."""
    return _cluster_special("cluster_nctarank")


def cluster_arrive(relaxed=False):
    """Arrive at the cluster barrier without waiting
    (barrier.cluster.arrive.release.aligned; with `relaxed`,
    barrier.cluster.arrive.relaxed.aligned, which orders no memory; CuTe:
    cluster_arrive, cluster_arrive_relaxed). Every thread of every block of
    the cluster arrives once, then waits with cluster_wait. sm_90."""
    if not isinstance(relaxed, bool):
        raise KernelError(f"cluster_arrive: relaxed must be a static bool, got {relaxed!r}")
    current().instr("cluster_arrive", (), relaxed=relaxed)


def cluster_wait():
    """Wait until every thread of the cluster has arrived at the cluster
    barrier (barrier.cluster.wait.acquire.aligned; CuTe: cluster_wait). sm_90."""
    current().instr("cluster_wait", ())


def cluster_sync():
    """Barrier for all threads of all blocks of the cluster: cluster_arrive
    then cluster_wait (CuTe: cluster_sync). After mbarrier_init and
    fence_barrier_init it makes the mbarriers usable by the cluster's other
    blocks. sm_90."""
    cluster_arrive()
    cluster_wait()


def cta_operand(cta, what):
    """The Int32 operand of a block rank in the cluster."""
    if isinstance(cta, Sym):
        if not cta.type.is_integer:
            raise KernelError(f"{what}: cta must be an integer block rank, got a {cta.type} value")
        return coerce(cta, T.Int32)
    if isinstance(cta, bool) or not isinstance(cta, int) or not 0 <= cta < 16:
        raise KernelError(f"{what}: cta must be a block rank in the cluster (an int 0..15 or a "
                          f"dynamic integer), got {cta!r}")
    return cta


def multicast_operand(mask, what):
    """The UInt16 operand of a multicast mask: bit r for the block of rank r."""
    if isinstance(mask, Sym):
        if not mask.type.is_integer:
            raise KernelError(f"{what}: multicast must be an integer mask of block ranks (bit r "
                              f"for rank r), got a {mask.type} value")
        return coerce(mask, T.UInt16)
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 < mask < 1 << 16:
        raise KernelError(f"{what}: multicast must be a 16-bit mask of block ranks (bit r for "
                          f"rank r), a nonzero int below 2**16 or a dynamic integer, got "
                          f"{mask!r}")
    return mask


__all__ = ["cluster_idx", "cluster_grid_dim", "cluster_dim", "block_idx_in_cluster",
           "block_rank_in_cluster", "cluster_size", "cluster_arrive", "cluster_wait",
           "cluster_sync"]

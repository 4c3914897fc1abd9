"""Thread-block clusters (sm_90). A block's rank in its cluster (`cta`) is an
Int32, x fastest; a multicast mask is a UInt16 with bit r for the block of
rank r. The device library's side is `device/cluster.py`."""
from .. import types as T
from .instr import Instr


class ClusterSpecial(Instr):
    """A cluster special register, defined at the top like `special`:
    clusterid.{x,y,z} (the cluster in the grid), nclusterid.* (clusters in
    the grid), cluster_ctaid.* (the block in its cluster), cluster_nctaid.*
    (blocks per cluster), cluster_ctarank, cluster_nctarank."""
    op = "cluster_special"
    attributes = {"name": None}
    pure = True
    arch = "sm_90"

    def result_type(self):
        return T.Int32


class ClusterArrive(Instr):
    """barrier.cluster.arrive.release.aligned (relaxed: .relaxed instead of
    .release, orders no memory)."""
    op = "cluster_arrive"
    attributes = {"relaxed": False}
    arch = "sm_90"


class ClusterWait(Instr):
    """barrier.cluster.wait.acquire.aligned: every thread of the cluster has arrived."""
    op = "cluster_wait"
    arch = "sm_90"


class MbarrierArriveCluster(Instr):
    """mapa.shared::cluster, then mbarrier.arrive.shared::cluster (release, CTA
    scope): one arrival, per executing thread, on the mbarrier at bar's offset
    in the cluster's block of rank cta."""
    op = "mbarrier_arrive_cluster"
    operands = ("bar", "bar_idx", "cta")
    arch = "sm_90"


class TmaLoadMulticast(Instr):
    """tma_load with .multicast::cluster: the box lands at dst's offset in each
    block of the mask and completes `bytes` on the mbarrier at bar's offset in
    each (PTX advises sm_90a for performance; sm_90 assembles it)."""
    op = "tma_load_multicast"
    operands = ("dst", "dst_idx", "bar", "bar_idx", "tmap", "mask", "*coords")
    attributes = {"rank": 1, "bytes": 0}
    arch = "sm_90"

"""Thread-block clusters (sm_90). A block's rank in its cluster (`cta`) is an
Int32, x fastest; a multicast mask is a UInt16 with bit r for the block of
rank r. The device library's side is `device/cluster.py`. Each class's C++
and CPU rules follow it (`lowering.py` states their contract); the CPU
semantics, from the PTX ISA, are `backend/cpu/cluster.py`."""
from .. import types as T
from .hopper import memory_asm_with, tensor_map
from .instr import Instr
from .lowering import lowering


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


@lowering("cuda", ClusterSpecial)
def _emit_cluster_special(w, s, ind, decl):
    raw = w.name(s.result) + "_u"
    w.emit(ind, f"uint32_t {raw};")
    w.emit(ind, f'asm("mov.u32 %0, %%{s.name};" : "=r"({raw}));')
    w.emit(ind, f"{decl}static_cast<int>({raw});")


@lowering("cpu", ClusterSpecial)
def _run_cluster_special(b, s, mask):
    b.set_result(s, b.cluster.special(s, mask), mask)


class ClusterArrive(Instr):
    """barrier.cluster.arrive.release.aligned (relaxed: .relaxed instead of
    .release, orders no memory)."""
    op = "cluster_arrive"
    attributes = {"relaxed": False}
    arch = "sm_90"


@lowering("cuda", ClusterArrive)
def _emit_cluster_arrive(w, s, ind, decl):
    w.memory_asm(ind, f"barrier.cluster.arrive.{'relaxed' if s.relaxed else 'release'}.aligned")


@lowering("cpu", ClusterArrive)
def _run_cluster_arrive(b, s, mask):
    b.cluster.arrive(s, mask)


class ClusterWait(Instr):
    """barrier.cluster.wait.acquire.aligned: every thread of the cluster has arrived."""
    op = "cluster_wait"
    arch = "sm_90"


@lowering("cuda", ClusterWait)
def _emit_cluster_wait(w, s, ind, decl):
    w.memory_asm(ind, "barrier.cluster.wait.acquire.aligned")


@lowering("cpu", ClusterWait)
def _run_cluster_wait(b, s, mask):
    b.cluster.wait(s, mask)


class MbarrierArriveCluster(Instr):
    """mapa.shared::cluster, then mbarrier.arrive.shared::cluster (release, CTA
    scope): one arrival, per executing thread, on the mbarrier at bar's offset
    in the cluster's block of rank cta."""
    op = "mbarrier_arrive_cluster"
    operands = ("bar", "bar_idx", "cta")
    arch = "sm_90"


@lowering("cuda", MbarrierArriveCluster)
def _emit_mbarrier_arrive_cluster(w, s, ind, decl):
    w.emit(ind, 'asm volatile("{ .reg .b32 remote; mapa.shared::cluster.u32 remote, %0, %1; '
                'mbarrier.arrive.shared::cluster.b64 _, [remote]; }\\n" :: '
                f'"r"({w.smem_addr(s.bar, s.bar_idx)}), "r"({w.operand(s.cta)}) : "memory");')


@lowering("cpu", MbarrierArriveCluster)
def _run_mbarrier_arrive_cluster(b, s, mask):
    b.cluster.remote_arrive(s, mask)


class TmaLoadMulticast(Instr):
    """tma_load with .multicast::cluster: the box lands at dst's offset in each
    block of the mask and completes `bytes` on the mbarrier at bar's offset in
    each (PTX advises sm_90a for performance; sm_90 assembles it)."""
    op = "tma_load_multicast"
    operands = ("dst", "dst_idx", "bar", "bar_idx", "tmap", "mask", "*coords")
    attributes = {"rank": 1, "bytes": 0}
    arch = "sm_90"


@lowering("cuda", TmaLoadMulticast)
def _emit_tma_load_multicast(w, s, ind, decl):
    r = s.rank
    text = (f"cp.async.bulk.tensor.{r}d.shared::cluster.global.mbarrier::complete_tx::bytes"
            f".multicast::cluster [%0], [%1, {w.brace(4, r)}], [%2], %3")
    memory_asm_with(w, ind, text, [("r", w.smem_addr(s.dst, s.dst_idx)),
                                   ("l", tensor_map(w, s.tmap)),
                                   ("r", w.smem_addr(s.bar, s.bar_idx)),
                                   ("h", f"static_cast<uint16_t>({w.operand(s.mask)})")]
                    + [("r", w.operand(c)) for c in s.coords])


@lowering("cpu", TmaLoadMulticast)
def _run_tma_load_multicast(b, s, mask):
    b.cluster.multicast_load(s, mask)

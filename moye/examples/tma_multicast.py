"""Thread-block clusters and TMA multicast: the blocks of a cluster share
the loading of one tile. Each of the cluster's `c` blocks loads 1/c of the
tile's rows by TMA and multicasts them to every block of the cluster, so
each block's shared memory ends up holding the whole tile while global
memory is read once. Each block then stores its copy of the tile, by TMA,
to its own slice of dst: dst[r] = src for every rank r in the cluster.

    python -m moye.examples.tma_multicast [M N]
"""
import sys

import moye
from moye import Layout, MoYeArray, composition

from .tma_copy import padded, swizzled_tile

THREADS = 128


@moye.kernel
def tma_multicast_kernel(load, store, cluster: moye.Constexpr):
    """A cluster of `cluster` blocks along x per tile of src; block rank r
    loads the r-th slice of rows (load.tile) and multicasts it; every
    block waits for all slices, then stores the tile to dst[r]."""
    sM, bN = load.tile                        # one slice
    bM = sM * cluster                         # the tile
    smem = moye.shared_array(load.dtype, swizzled_tile(bM, load.dtype), align=1024)
    bar = moye.mbarrier()
    rank = moye.block_rank_in_cluster()
    m0, n0 = moye.cluster_idx.x * bM, moye.block_idx.y * bN
    leader = moye.thread_idx.x == 0
    if leader:
        moye.mbarrier_init(bar, 1)
        moye.fence_barrier_init()
    moye.cluster_sync()                       # every block's mbarrier is ready for the others
    if leader:
        moye.mbarrier_arrive_expect_tx(bar, cluster * load.bytes)    # all slices land here
        part = MoYeArray.view_of(smem.engine.offset_by(rank * (sM * bN)), load.smem_layout)
        moye.tma_load(load, part, (m0 + rank * sM, n0), bar, multicast=(1 << cluster) - 1)
    moye.mbarrier_wait(bar, 0)
    if leader:
        tile = MoYeArray.view_of(smem.engine, store.smem_layout)     # (1, bM, bN)
        moye.tma_store(store, (rank, m0, n0), tile)
        moye.tma_store_commit()
        moye.tma_store_wait(0)


def stacked_tile(rows, dtype):
    """(1, rows, 128 bytes) tile of a (copies, M, N) array, swizzled as
    swizzled_tile's 2-D tile."""
    t = swizzled_tile(rows, dtype)
    cols = 128 // (moye.as_element_type(dtype).bits // 8)
    return composition(t.outer, Layout((1, rows, cols), (rows * cols, cols, 1)))


def broadcast(dst, src, cluster=2, rows=64):
    """dst[r] = src for r < cluster: src (M, N) row-major, dst (cluster, M,
    N), by tiles of (rows, 128 bytes) each loaded by a cluster of blocks
    that multicast their slices (rows // cluster rows, a multiple of 8)."""
    if rows % cluster or (rows // cluster) % 8:
        raise moye.MoyeError(f"broadcast: rows={rows} must split into {cluster} slices of a "
                             f"multiple of 8 rows (the 128-byte swizzle's period)")
    load = moye.make_tma_copy(moye.TMA_LOAD, src, swizzled_tile(rows // cluster, src.dtype))
    store = moye.make_tma_copy(moye.TMA_STORE, dst, stacked_tile(rows, dst.dtype))
    M, N = src.shape
    bN = load.tile[1]
    grid = (cluster * -(-M // rows), -(-N // bN))
    tma_multicast_kernel[grid, THREADS, (cluster, 1)](load, store, cluster)


def main(M=1000, N=1000):
    from ._common import torch_cuda
    torch = torch_cuda()
    if torch is None or torch.cuda.get_device_capability() < (9, 0):
        print("tma_multicast: no Hopper GPU; see the CPU backend")
        return
    name = torch.cuda.get_device_name()
    for dtype in (torch.float16, torch.float32):
        for cluster in (2, 4):
            src = padded(torch, (M, N), dtype)
            per = 16 // src.element_size()
            dst = torch.full((cluster, M, -(-N // per) * per), float("nan"), device="cuda",
                             dtype=dtype)[:, :, :N]
            broadcast(dst, src, cluster)
            torch.cuda.synchronize()
            ok = all(torch.equal(dst[r], src) for r in range(cluster))
            print(f"tma_multicast {M}x{N} {str(dtype)[6:]}, clusters of {cluster} on {name}: "
                  f"{'exact' if ok else 'MISMATCH'}")
            assert ok


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))

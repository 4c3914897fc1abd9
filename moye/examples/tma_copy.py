"""Copy and transpose a 2-D array through shared memory with Hopper's bulk
tensor copy engine (TMA): one thread loads a tile into a 128-byte-swizzled
shared tile, completing on an mbarrier that every thread waits on, and one
thread stores a tile back. Tiles that overhang the array read zeros and
write nothing, so any M and N work (TMA needs rows whose stride is a
multiple of 16 bytes: pad the rows and pass the view, as main() does).

    python -m moye.examples.tma_copy [M N]
"""
import sys

import moye
from moye import Layout, MoYeArray, Swizzle, composition, parallelize, size

THREADS = 128


def swizzled_tile(rows, dtype):
    """(rows, 128 bytes) row-major tile, swizzled as TMA's 128B mode does."""
    ebytes = moye.as_element_type(dtype).bits // 8
    cols = 128 // ebytes
    return composition(Swizzle(3, 4 - (ebytes.bit_length() - 1), 3),
                       Layout((rows, cols), (cols, 1)))


@moye.kernel
def tma_copy_kernel(load, store):
    """dst tile = src tile: TMA load, wait, TMA store."""
    smem = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    bar = moye.mbarrier()
    bM, bN = load.tile
    m0, n0 = moye.block_idx.x * bM, moye.block_idx.y * bN
    leader = moye.thread_idx.x == 0
    if leader:
        moye.mbarrier_init(bar, 1)
        moye.fence_barrier_init()
    moye.sync_threads()
    if leader:
        moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        moye.tma_load(load, smem, (m0, n0), bar)
    moye.mbarrier_wait(bar, 0)
    if leader:
        moye.tma_store(store, (m0, n0), smem)
        moye.tma_store_commit()
        moye.tma_store_wait(0)


@moye.kernel
def tma_transpose_kernel(load, store, thread_layout):
    """dst = src^T: a (bM, bN) tile of src by TMA into sA, the threads copy
    sA^T into sB (both swizzled), a TMA store of sB to the (bN, bM) tile of dst."""
    sA = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    sB = moye.shared_array(store.dtype, store.smem_layout, align=1024)
    bar = moye.mbarrier()
    bM, bN = load.tile
    m0, n0 = moye.block_idx.x * bM, moye.block_idx.y * bN
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(bar, 1)
        moye.fence_barrier_init()
    moye.sync_threads()
    if tid == 0:
        moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        moye.tma_load(load, sA, (m0, n0), bar)
    moye.mbarrier_wait(bar, 0)
    sBt = MoYeArray.view_of(sB.engine, composition(sB.layout, Layout((bM, bN), (bN, 1))))
    src = parallelize(sA, thread_layout, tid)
    dst = parallelize(sBt, thread_layout, tid)
    for i in range(size(src)):
        dst[i] = src[i]
    moye.fence_proxy_async()          # the threads' stores, before the TMA store reads them
    moye.sync_threads()
    if tid == 0:
        moye.tma_store(store, (n0, m0), sB)
        moye.tma_store_commit()
        moye.tma_store_wait(0)


def copy(dst, src, rows=64):
    """dst = src for 2-D arrays with a contiguous second mode (row-major),
    by tiles of (rows, 128 bytes)."""
    tile = swizzled_tile(rows, src.dtype)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    store = moye.make_tma_copy(moye.TMA_STORE, dst, tile)
    M, N = src.shape
    bM, bN = load.tile
    tma_copy_kernel[(-(-M // bM), -(-N // bN)), THREADS](load, store)


def transpose(dst, src):
    """dst (N, M) = src (M, N)^T, both row-major, by square tiles of 128 bytes
    a side (64 x 64 for 16-bit elements, 32 x 32 for 32-bit ones)."""
    load = moye.make_tma_copy(moye.TMA_LOAD, src, _square(src.dtype))
    store = moye.make_tma_copy(moye.TMA_STORE, dst, _square(dst.dtype))
    M, N = src.shape
    b = load.tile[0]
    tma_transpose_kernel[(-(-M // b), -(-N // b)), THREADS](load, store,
                                                            Layout((THREADS // b, b), (b, 1)))


def _square(dtype):
    ebytes = moye.as_element_type(dtype).bits // 8
    return swizzled_tile(128 // ebytes, dtype)


def padded(torch, shape, dtype):
    """A row-major CUDA tensor of `shape` whose rows are padded to 16 bytes
    (TMA's stride rule), random, as a view of the padded storage."""
    M, N = shape
    per = 16 // torch.empty((), dtype=dtype).element_size()
    base = torch.randn(M, -(-N // per) * per, device="cuda").to(dtype)
    return base[:, :N]


def main(M=1000, N=1000):
    from ._common import torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("tma_copy: no CUDA device; see the CPU backend")
        return
    name = torch.cuda.get_device_name()
    for dtype in (torch.float16, torch.float32):
        src = padded(torch, (M, N), dtype)
        dst = padded(torch, (M, N), dtype)
        dst.fill_(float("nan"))
        copy(dst, src)
        dst_t = padded(torch, (N, M), dtype)
        dst_t.fill_(float("nan"))
        transpose(dst_t, src)
        torch.cuda.synchronize()
        ok_copy, ok_t = torch.equal(dst, src), torch.equal(dst_t, src.t())
        print(f"tma_copy {M}x{N} {str(dtype)[6:]} on {name}: copy "
              f"{'exact' if ok_copy else 'MISMATCH'}, transpose "
              f"{'exact' if ok_t else 'MISMATCH'}")
        assert ok_copy and ok_t


if __name__ == "__main__":
    main(*map(int, sys.argv[1:3]))

"""A warp-specialized, persistent Hopper GEMM: TMA, mbarrier pipelines and
wgmma, written in Python with moye.

    python -m moye.examples.hopper_gemm [M N K [dtype]]

C = A @ B.T with A (M, K) and B (N, K) row-major (K-major) fp16 or bf16, C
(M, N) row-major of the same type, accumulated in fp32; any M, N, K (TMA
needs 16-byte row strides: where K or N is not a multiple of 8, matmul
runs on zero-padded copies).

One block of 384 threads per multiprocessor walks the output tiles
(BM x BN) in a grouped order (tile_coords):
- warpgroup 0 is the producer: it gives registers back (setmaxnreg) and
  one thread TMA-loads A's (BM, BK) and B's (BN, BK) tiles into a ring of
  `stages` 128-byte-swizzled shared-memory stages (TmaPipeline);
- warpgroups 1 and 2 are the consumers: each owns BM/2 rows of the tile,
  waits for a stage, issues wgmma from it, and releases the stage once the
  next k-tile's wgmma are in flight;
- the epilogue: each consumer warpgroup converts its accumulators to the
  output type and writes them with stmatrix into 64 x 64 128-byte-swizzled
  shared-memory boxes, which one of its threads TMA-stores (parts of a box
  outside C are not written), while the producer already loads the next
  tile.
With `cluster` = 2 or 4, the blocks of a cluster compute neighbouring tiles
along M that share B's tile: each loads a slice of it and multicasts it to
all (TmaPipeline with peers: a stage is free once every block's consumers
released it).
"""
import functools
import sys

import moye
from moye import BFloat16, CopyAtom, Float16, Float32, Layout, MoYeArray, Swizzle, composition, \
    copyto, make_fragment_like, make_layout, make_tiled_copy_C, make_tiled_mma, size, \
    tile_to_shape
from moye.ops.gemm_sm90 import consume_tile, tile_coords

BM, BN, BK = 128, 256, 64
STAGES = 4
EPI = 64                    # the epilogue's square box (64 x 64: 128 bytes a row)
EPI_SLOTS = 2               # boxes each consumer warpgroup has in flight
THREADS = 384
GROUP = 8                   # output tiles of one column the resident blocks share
# blocks of a cluster (along M) that share B's tiles by TMA multicast: 2 ran as fast as 1 on
# the H100 (within the card's noise), and a cluster launch costs more host time
CLUSTER = 1


@moye.kernel
def hopper_gemm_kernel(load_a, load_b, store_c, mma, box_mma, save_c, M, N, K,
                       stages: moye.Constexpr, group: moye.Constexpr, cluster: moye.Constexpr):
    bM, bK = load_a.tile
    bN = load_b.tile[0] * cluster               # each block of a cluster loads a slice of B
    dtype = store_c.dtype
    sA = moye.shared_array(load_a.dtype, tile_to_shape(load_a.smem_layout, (bM, bK, stages)),
                           align=1024)
    sB = moye.shared_array(load_b.dtype, tile_to_shape(load_b.smem_layout, (bN, bK, stages)),
                           align=1024)
    sC = moye.shared_array(dtype, tile_to_shape(store_c.smem_layout, (EPI, EPI, 2 * EPI_SLOTS)),
                           align=1024)
    # lane 0 of each consumer warp, in each block of the cluster
    pipe = moye.TmaPipeline(stages, consumers=8, peers=cluster)
    tid = moye.thread_idx.x
    if tid == 0:
        pipe.init()
    if cluster > 1:
        moye.cluster_sync()                                # the peers' barriers are ready too
    else:
        moye.sync_threads()
    # a cluster computes `cluster` tiles along M that share B's tile: walk cluster tiles
    tiles_m, tiles_n = (M + bM * cluster - 1) // (bM * cluster), (N + bN - 1) // bN
    k_tiles = (K + bK - 1) // bK
    n_tiles = tiles_m * tiles_n
    rank = moye.block_rank_in_cluster() if cluster > 1 else 0
    first, step = (moye.cluster_idx.x, moye.cluster_grid_dim.x) if cluster > 1 else \
        (moye.block_idx.x, moye.grid_dim.x)
    b_rows = bN // cluster
    warpgroup = moye.warp_idx() // 4
    stage, phase = 0, 0
    if warpgroup == 0:                                     # the producer
        moye.setmaxnreg_dec(40)
        if tid == 0:
            t = first
            while t < n_tiles:
                m, n = tile_coords(t, tiles_m, tiles_n, group)
                m = m * cluster + rank
                for k in range(k_tiles):
                    full = pipe.producer_acquire(stage, phase,
                                                 load_a.bytes + load_b.bytes * cluster)
                    moye.tma_load(load_a, sA[:, :, stage], (m * bM, k * bK), full)
                    if cluster > 1:                        # B's slice, to every block
                        part = MoYeArray.view_of(sB[:, :, stage].engine.offset_by(
                            rank * b_rows * bK), load_b.smem_layout)
                        moye.tma_load(load_b, part, (n * bN + rank * b_rows, k * bK), full,
                                      multicast=(1 << cluster) - 1)
                    else:
                        moye.tma_load(load_b, sB[:, :, stage], (n * bN, k * bK), full)
                    stage, phase = pipe.advance(stage, phase)
                t += step
    else:                                                  # the consumers
        moye.setmaxnreg_inc(232)
        ctid = tid - 128
        wg = warpgroup - 1
        lane0 = ctid % 32 == 0
        storer = ctid % 128 == 0
        thr = mma.get_slice(ctid)
        tCsA = thr.partition_A(sA)                         # ((64,16), 1, 4, stages)
        tCsB = thr.partition_B(sB)                         # ((bN,16), 1, 4, stages)
        acc = thr.partition_fragment_C(make_layout((bM, bN)))   # (bN/2 fp32, 1, 1)
        r2s = save_c.get_slice(ctid % 128)                # stmatrix into one box
        box_acc = make_fragment_like(box_mma.get_slice(ctid % 128).partition_fragment_C(
            make_layout((EPI, EPI))), dtype)               # one box's values, converted
        t = first
        while t < n_tiles:
            m, n = tile_coords(t, tiles_m, tiles_n, group)
            m = m * cluster + rank
            stage, phase = consume_tile(pipe, mma, acc, tCsA, tCsB, k_tiles, stage, phase, lane0)
            # epilogue: this warpgroup's (bM/2, bN) rows, one 64 x 64 box at a time
            per_box = size(acc) // (bN // EPI)
            for j in range(bN // EPI):
                slot = sC[:, :, wg * EPI_SLOTS + j % EPI_SLOTS]
                if storer:
                    moye.tma_store_wait(EPI_SLOTS - 1)     # the slot's last store has read it
                moye.named_barrier_sync(1 + wg, 128)
                for i in range(per_box):
                    box_acc[i] = moye.cast(acc[j * per_box + i], dtype)
                copyto(save_c, r2s.partition_D(slot), r2s.retile_S(box_acc))
                moye.fence_proxy_async()
                moye.named_barrier_sync(1 + wg, 128)
                if storer:
                    moye.tma_store(store_c, (m * bM + wg * (bM // 2), n * bN + j * EPI), slot)
                    moye.tma_store_commit()
            t += step
        if storer:
            moye.tma_store_wait(0)
    if cluster > 1:
        moye.cluster_sync()             # no block leaves while its peers may still arrive on it


def element_type(x):
    """moye's element type of an array (torch, CuPy, DLPack, NumPy)."""
    from moye.compiler.arguments import as_array_arg
    return as_array_arg(x, "array").dtype


def plan(A, B, C, cluster=1):
    """The kernel's TMA copies and TiledMMAs for C = A @ B.T, for clusters
    of `cluster` blocks along M (each loads 1/cluster of B's tile)."""
    dtype = element_type(A)
    if dtype not in (Float16, BFloat16) or element_type(B) != dtype or element_type(C) != dtype:
        raise moye.MoyeError(f"hopper_gemm: A, B and C must all be float16 or all bfloat16, got "
                             f"{element_type(A)}, {element_type(B)}, {element_type(C)}")
    smem_a, smem_b, box, mma, box_mma, save_c = _static_plan(dtype, cluster)
    load_a = moye.make_tma_copy(moye.TMA_LOAD, A, smem_a)
    load_b = moye.make_tma_copy(moye.TMA_LOAD, B, smem_b)
    store_c = moye.make_tma_copy(moye.TMA_STORE, C, box)
    return load_a, load_b, store_c, mma, box_mma, save_c


@functools.lru_cache(maxsize=8)
def _static_plan(dtype, cluster):
    """What plan makes that depends on the element type and cluster alone:
    the tiles' shared-memory layouts (A, B, C's boxes) and the MMAs."""
    smem_a = moye.gmma_smem_layout(dtype, "K", 128, (BM, BK))
    smem_b = moye.gmma_smem_layout(dtype, "K", 128, (BN // cluster, BK))
    box = composition(Swizzle(3, 3, 3), Layout((EPI, EPI), (EPI, 1)))
    mma = make_tiled_mma(moye.wgmma_op(BN, dtype, dtype, Float32), make_layout((2, 1)))
    box_mma = make_tiled_mma(moye.wgmma_op(EPI, dtype, dtype, Float32))
    save_c = make_tiled_copy_C(CopyAtom(moye.STSM_U32x4_N, dtype), box_mma)
    return smem_a, smem_b, box, mma, box_mma, save_c


def launch_args(C, A, B, blocks=None, cluster=CLUSTER):
    """(grid, cluster shape or None, kernel arguments) of C = A @ B.T: `blocks` the
    persistent grid (by default one block per multiprocessor), rounded down
    to whole clusters of `cluster` blocks along M."""
    (M, K), N = A.shape, B.shape[0]
    if tuple(B.shape) != (N, K) or tuple(C.shape) != (M, N):
        raise moye.MoyeError(f"hopper_gemm: A {tuple(A.shape)}, B {tuple(B.shape)}, C "
                             f"{tuple(C.shape)}: need A (M, K), B (N, K), C (M, N)")
    if min(M, N, K) < 1:
        raise moye.MoyeError(f"hopper_gemm: M, N, K = {M}, {N}, {K}; each must be at least 1")
    if cluster not in (1, 2, 4) or BN // cluster % 8:
        raise moye.MoyeError(f"hopper_gemm: cluster = {cluster!r}; use 1, 2 or 4 blocks")
    tiles = -(-M // (BM * cluster)) * -(-N // BN)          # one per cluster
    args = (*plan(A, B, C, cluster), M, N, K, STAGES, GROUP, cluster)
    if blocks is None:
        blocks = resident_blocks(args, cluster)
    grid = cluster * max(1, min(blocks // cluster, tiles))
    return grid, (cluster, 1, 1) if cluster > 1 else None, args


def resident_blocks(args, cluster):
    """The blocks that run at once: one per multiprocessor, in whole clusters
    (not every multiprocessor can join a cluster; a block beyond these would
    wait for a second wave)."""
    from moye.backend.cuda import driver
    if cluster == 1:
        return driver.multiprocessor_count()
    key = (args[0].key(), cluster)
    if key not in _resident:
        compiled = hopper_gemm_kernel.compile(*args, block=THREADS)
        _resident[key] = cluster * compiled.max_active_clusters((cluster, 1, 1))
    return _resident[key]


_resident = {}


def matmul(C, A, B, blocks=None, cluster=CLUSTER):
    """C = A @ B.T on the arrays' device (see launch_args). Row-major A, B
    and C whose rows TMA cannot address (K or N not a multiple of 8: rows
    not 16-byte aligned) go through zero-padded copies."""
    K, N = A.shape[1], B.shape[0]
    if K % 8 or N % 8:
        out = padded(C, cols=True)
        matmul(out, padded(A, cols=True), padded(B, rows=True, cols=True), blocks, cluster)
        if out is not C:
            C[...] = out[:, :N]
        return
    launch_function(*launch_args(C, A, B, blocks, cluster))()


def launch_function(grid, cluster, args):
    """A function of no arguments that launches the kernel as launch_args
    planned it (for timing: the plan is made once)."""
    launch = hopper_gemm_kernel[(grid, THREADS) if cluster is None else (grid, THREADS, cluster)]
    return lambda: launch(*args)


def padded(x, rows=False, cols=False):
    """`x`, or a zeroed copy whose extents (those asked for) are rounded up
    to multiples of 8, made by x's own array library (torch, NumPy, CuPy)."""
    shape = tuple(-(-n // 8) * 8 if pad else n for n, pad in zip(x.shape, (rows, cols)))
    if shape == tuple(x.shape):
        return x
    lib = sys.modules[type(x).__module__.split(".")[0]]       # numpy or cupy
    out = x.new_zeros(shape) if hasattr(x, "new_zeros") else lib.zeros(shape, dtype=x.dtype)
    out[:x.shape[0], :x.shape[1]] = x
    return out


def main(M=4096, N=4096, K=4096, dtype="float16"):
    from ._common import torch_cuda
    torch = torch_cuda()
    if torch is None:
        print("hopper_gemm: no CUDA device; see the CPU backend")
        return
    if torch.cuda.get_device_capability() < (9, 0):
        print("hopper_gemm: needs a Hopper GPU (sm_90a)")
        return
    dt = getattr(torch, dtype)
    A = torch.randn(M, K, device="cuda").to(dt)
    B = torch.randn(N, K, device="cuda").to(dt)
    C = torch.full((M, N), float("nan"), device="cuda", dtype=dt)
    matmul(C, A, B)
    torch.cuda.synchronize()
    ref = A.double() @ B.double().T
    err = ((C.double() - ref).norm() / ref.norm()).item()
    print(f"hopper_gemm {M}x{N}x{K} {dtype}: relative error {err:.2e}")
    assert err < 1e-2, err


if __name__ == "__main__":
    args = sys.argv[1:]
    main(*(int(x) for x in args[:3]), *args[3:4])

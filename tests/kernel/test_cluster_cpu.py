"""Thread-block clusters and TMA multicast: the PTX each op emits and an
NVRTC compile for sm_90a (no GPU needed), the CPU backend's cluster ids,
cluster barrier, remote mbarrier arrivals and multicast loads (exact,
batched and race-checked), and the errors: launch shapes, multicast masks,
misuse found at run time, and compiling for a GPU without clusters."""
import contextlib

import numpy as np
import pytest

import moye
from moye import Layout, MoYeArray, MoyeError
from moye.backend.cpu import KernelRuntimeError, race_checking
from moye.examples import tma_copy, tma_multicast
from moye.compiler.frontend import BACKENDS

rng = np.random.default_rng(9)


def padded(shape, dtype, fill=None):
    """A row-major array whose rows are padded to 16 bytes, as a view."""
    *lead, N = shape
    per = 16 // np.dtype(dtype).itemsize
    base = rng.standard_normal((*lead, -(-N // per) * per)).astype(dtype)
    if fill is not None:
        base[...] = fill
    return base[..., :N]


@pytest.fixture(params=["batched", "race_checked"])
def mode(request):
    with race_checking() if request.param == "race_checked" else contextlib.nullcontext():
        yield


def copies(dtype=np.float16, rows=64, cluster=2, M=100, N=72):
    src = padded((M, N), dtype)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tma_copy.swizzled_tile(rows // cluster, dtype))
    dst = padded((cluster, M, N), dtype)
    store = moye.make_tma_copy(moye.TMA_STORE, dst, tma_multicast.stacked_tile(rows, dtype))
    return load, store


# -- code generation --------------------------------------------------------------------
@moye.kernel
def every_op_kernel(out, load):
    smem = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    bar = moye.mbarrier()
    t = moye.thread_idx.x
    out[0] = moye.cluster_idx.x + moye.cluster_idx.y + moye.cluster_idx.z
    out[1] = moye.cluster_grid_dim.x + moye.cluster_grid_dim.y + moye.cluster_grid_dim.z
    out[2] = moye.cluster_dim.x + moye.cluster_dim.y + moye.cluster_dim.z
    out[3] = moye.block_idx_in_cluster.x + moye.block_idx_in_cluster.y + \
        moye.block_idx_in_cluster.z
    out[4] = moye.block_rank_in_cluster() + moye.cluster_size()
    if t == 0:
        moye.mbarrier_init(bar, 2)
        moye.fence_barrier_init()
    moye.cluster_sync()
    moye.cluster_arrive(relaxed=True)
    moye.cluster_wait()
    if t == 0:
        moye.mbarrier_arrive(bar, cta=moye.block_rank_in_cluster() ^ 1)
        moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        moye.tma_load(load, smem, (0, 0), bar, multicast=0b11)
    moye.mbarrier_wait(bar, 0)


PTX = [
    "mov.u32 %0, %%clusterid.x;", "mov.u32 %0, %%clusterid.z;", "mov.u32 %0, %%nclusterid.y;",
    "mov.u32 %0, %%cluster_nctaid.x;", "mov.u32 %0, %%cluster_ctaid.z;",
    "mov.u32 %0, %%cluster_ctarank;", "mov.u32 %0, %%cluster_nctarank;",
    "barrier.cluster.arrive.release.aligned;", "barrier.cluster.wait.acquire.aligned;",
    "barrier.cluster.arrive.relaxed.aligned;",
    "mapa.shared::cluster.u32 remote, %0, %1; "
    "mbarrier.arrive.shared::cluster.b64 _, [remote];",
    "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
    ".multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;",
    '"h"(static_cast<uint16_t>(3))',
]


def every_op_source():
    load, _ = copies()
    return every_op_kernel.cuda_source(np.zeros(8, np.int32), load, block=128)


@pytest.mark.parametrize("ptx", PTX)
def test_codegen(ptx):
    """Each op's PTX is in an asm statement (not just anywhere in the text)."""
    asm = [line for line in every_op_source().splitlines() if line.lstrip().startswith("asm")]
    assert sum(ptx in line for line in asm) >= 1, ptx


def test_cluster_sync_is_arrive_then_wait():
    src = every_op_source()
    arrive = src.index("barrier.cluster.arrive.release.aligned")
    assert src.index("barrier.cluster.wait.acquire.aligned") > arrive


@pytest.mark.parametrize("arch", ["sm_90a", "sm_90"])
def test_nvrtc_compiles(arch):
    from moye.backend.cuda import nvrtc
    load, store = copies()
    src = tma_multicast.tma_multicast_kernel.cuda_source(load, store, 2, block=128)
    for source, name, ptx in [
            (src, "moye_tma_multicast_kernel", ".multicast::cluster"),
            (every_op_source(), "moye_every_op_kernel", "barrier.cluster.arrive.release.aligned")]:
        module = nvrtc.compile_cuda(source, [name], arch, ptx=True)
        assert f".target {arch}" in module.ptx and f".entry {name}(" in module.ptx
        assert ptx in module.ptx                    # the cluster instruction reached the PTX
        assert module.cubin[:4] == b"\x7fELF" and name.encode() in module.cubin


@pytest.mark.parametrize("kernel", ["every_op", "example"])
def test_sm80_target_is_refused(kernel):
    load, store = copies()
    k = every_op_kernel.trace(np.zeros(8, np.int32), load, block=128)[0] if kernel == "every_op" \
        else tma_multicast.tma_multicast_kernel.trace(load, store, 2, block=128)[0]
    with pytest.raises(MoyeError, match="a Hopper instruction, but compiles for sm_80"):
        BACKENDS["cuda"].compile_only(k, (128, 1, 1), "sm_80")


@moye.kernel
def sync_only_kernel():
    moye.cluster_sync()


def test_sm80_names_the_cluster_op():
    k = sync_only_kernel.trace(block=32)[0]
    with pytest.raises(MoyeError, match=r"uses cluster_arrive \(test_cluster_cpu.py:\d+: "
                                        r"moye.cluster_sync\(\)\), a Hopper instruction"):
        BACKENDS["cuda"].compile_only(k, (32, 1, 1), "sm_80")


# -- the CPU backend ----------------------------------------------------------------------
@moye.kernel
def ids_kernel(out):
    """Per block (x, y, z of the grid): its cluster ids, once by thread 0."""
    b = moye.block_idx.x + moye.grid_dim.x * (moye.block_idx.y + moye.grid_dim.y *
                                              moye.block_idx.z)
    if moye.thread_idx.x == 0:
        for k, v in enumerate((moye.cluster_idx.x, moye.cluster_idx.y, moye.cluster_idx.z,
                               moye.cluster_grid_dim.x, moye.cluster_grid_dim.y,
                               moye.cluster_grid_dim.z, moye.cluster_dim.x, moye.cluster_dim.y,
                               moye.cluster_dim.z, moye.block_idx_in_cluster.x,
                               moye.block_idx_in_cluster.y, moye.block_idx_in_cluster.z,
                               moye.block_rank_in_cluster(), moye.cluster_size())):
            out[b, k] = v


@pytest.mark.parametrize("grid, cluster", [((4, 2, 2), (2, 1, 2)), ((6, 1, 1), (3, 1, 1)),
                                           ((2, 4, 1), (1, 4, 1)), ((3, 2, 1), None),
                                           ((32, 1, 1), (16, 1, 1)), ((8, 4, 1), (4, 4, 1))])
def test_cluster_ids(mode, grid, cluster):
    n = grid[0] * grid[1] * grid[2]
    out = np.full((n, 14), -1, np.int32)
    if cluster is None:
        ids_kernel[grid, 64](out)
    else:
        ids_kernel[grid, 64, cluster](out)
    c = np.array(cluster or (1, 1, 1))
    want = []
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                b = np.array((x, y, z))
                local = b % c
                rank = local[0] + c[0] * (local[1] + c[1] * local[2])
                want.append([*(b // c), *(np.array(grid) // c), *c, *local, rank, c.prod()])
    np.testing.assert_array_equal(out, np.array(want))


@moye.kernel
def ring_kernel(out):
    """Each block's thread 0 arrives on every block's mbarrier of its
    cluster (count: the cluster's size) and on its right neighbour's second
    one (count 1); every thread waits on both."""
    bars = moye.mbarrier_array(2)
    t = moye.thread_idx.x
    rank = moye.block_rank_in_cluster()
    n = moye.cluster_size()
    if t == 0:
        moye.mbarrier_init(bars[0], n)
        moye.mbarrier_init(bars[1], 1)
        moye.fence_barrier_init()
    moye.cluster_sync()
    if t == 0:
        for r in moye.range(n):
            moye.mbarrier_arrive(bars[0], cta=r)
        moye.mbarrier_arrive(bars[1], cta=(rank + 1) % n)
    moye.mbarrier_wait(bars[0], 0)
    moye.mbarrier_wait(bars[1], 0)
    out[moye.block_idx.x, t] = moye.mbarrier_try_wait(bars[0], 1) + 2 * \
        moye.mbarrier_try_wait(bars[1], 0)
    moye.cluster_sync()             # no block leaves while others may arrive on its mbarriers


@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_remote_arrivals(mode, cluster):
    out = np.full((8, 32), -1, np.int32)
    ring_kernel[8, 32, cluster](out)
    np.testing.assert_array_equal(out, np.full((8, 32), 2))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("cluster", [2, 4])
@pytest.mark.parametrize("M, N", [(100, 72), (64, 64), (130, 37), (1, 9)])
def test_multicast_example(mode, dtype, cluster, M, N):
    src = padded((M, N), dtype)
    dst = padded((cluster, M, N), dtype, np.nan)
    tma_multicast.broadcast(dst, src, cluster)
    for r in range(cluster):
        np.testing.assert_array_equal(dst[r], src)


def test_multicast_example_on_a_2d_cluster_grid():
    """Clusters along x, tiles along y too: every (cluster, tile) pair exact."""
    src = padded((200, 150), np.float32)
    dst = padded((2, 200, 150), np.float32, np.nan)
    tma_multicast.broadcast(dst, src, 2, rows=32)
    np.testing.assert_array_equal(dst[0], src)
    np.testing.assert_array_equal(dst[1], src)


@moye.kernel
def partial_mask_kernel(out, load):
    """Block rank 0 multicasts its tile to the ranks in `mask` only (0b101
    in a cluster of 4); the others expect no bytes."""
    smem = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    bar = moye.mbarrier()
    t = moye.thread_idx.x
    rank = moye.block_rank_in_cluster()
    bM, bN = load.tile
    if t == 0:
        moye.mbarrier_init(bar, 1)
        moye.fence_barrier_init()
    moye.cluster_sync()
    if t == 0:
        if rank == 0 or rank == 2:
            moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        else:
            moye.mbarrier_arrive(bar)
        if rank == 0:
            moye.tma_load(load, smem, (0, 0), bar, multicast=0b101)
    moye.mbarrier_wait(bar, 0)
    src = moye.parallelize(smem, Layout((4, 32), (32, 1)), t)
    dst = moye.parallelize(MoYeArray(out)[moye.block_idx.x, :, :], Layout((4, 32), (32, 1)), t)
    if rank == 0 or rank == 2:
        for i in range(moye.size(src)):
            dst[i] = src[i]


def test_partial_multicast_mask(mode):
    src = padded((16, 32), np.float32)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tma_copy.swizzled_tile(16, np.float32))
    out = np.full((4, 16, 32), np.nan, np.float32)
    partial_mask_kernel[4, 128, 4](out, load)
    np.testing.assert_array_equal(out[0], src)
    np.testing.assert_array_equal(out[2], src)
    assert np.isnan(out[1]).all() and np.isnan(out[3]).all()


# -- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("grid, cluster, match", [
    ((3, 1), (2, 1), r"the grid \(3, 1, 1\) is not divisible by the cluster \(2, 1, 1\)"),
    ((4, 6), (1, 4), r"the grid \(4, 6, 1\) is not divisible by the cluster \(1, 4, 1\)"),
    (32, 32, r"the cluster \(32, 1, 1\) has 32 blocks; a cluster has at most 16"),
    ((8, 8), (8, 4), r"the cluster \(8, 4, 1\) has 32 blocks"),
    (4, 0, r"cluster must be a positive int"),
])
def test_bad_cluster_shapes(grid, cluster, match):
    with pytest.raises(MoyeError, match=match):
        ids_kernel[grid, 32, cluster](np.zeros((64, 14), np.int32))
    with pytest.raises(MoyeError, match=match):
        ids_kernel.launch(grid, 32, (np.zeros((64, 14), np.int32),), cluster=cluster)


@moye.kernel
def mask_kernel(load, what: moye.Constexpr):
    smem = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    bar = moye.mbarrier()
    masks = {"float": 1.5, "bool": True, "zero": 0, "wide": 1 << 16,
             "float_value": moye.thread_idx.x * 0.5, "cta": None}
    if what == "cta":
        moye.mbarrier_arrive(bar, cta=2.0)
    else:
        moye.tma_load(load, smem, (0, 0), bar, multicast=masks[what])


@pytest.mark.parametrize("what, match", [
    ("float", r"multicast must be a 16-bit mask of block ranks .* got 1.5"),
    ("bool", r"multicast must be .* got True"),
    ("zero", r"multicast must be .* a nonzero int below 2\*\*16 .* got 0"),
    ("wide", r"multicast must be .* got 65536"),
    ("float_value", r"multicast must be an integer mask of block ranks .* got a Float32 value"),
    ("cta", r"mbarrier_arrive: cta must be a block rank in the cluster .* got 2.0"),
])
def test_bad_multicast_masks(what, match):
    load, _ = copies()
    with pytest.raises(MoyeError, match=match):
        mask_kernel.trace(load, what, block=32)


@moye.kernel
def fault_kernel(load, fault: moye.Constexpr):
    smem = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    bar = moye.mbarrier()
    t = moye.thread_idx.x
    if t == 0:
        moye.mbarrier_init(bar, 1)
        moye.fence_barrier_init()
    if fault == "no_cluster_sync":
        moye.sync_threads()
    elif fault == "divergent_sync":
        if t < 16:
            moye.cluster_arrive()
        moye.cluster_wait()
    elif fault == "arrive_twice":
        moye.cluster_arrive()
        moye.cluster_arrive()
    else:
        moye.cluster_sync()
    if t == 0:
        moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        if moye.block_rank_in_cluster() == 0:
            mask = 0b111 if fault == "mask_beyond" else 0b11
            moye.tma_load(load, smem, (0, 0), bar, multicast=mask)
        if fault == "rank_beyond":
            moye.mbarrier_arrive(bar, cta=5)
    moye.mbarrier_wait(bar, 0)


@pytest.mark.parametrize("fault, match", [
    ("no_cluster_sync", r"reaches mbarrier 0 of block \(\d, 0, 0\), which was initialized after "
                        r"the last cluster barrier"),
    ("divergent_sync", r"deadlock: thread \(0, 0, 0\) of block \(0, 0, 0\) waits at the cluster "
                       r"barrier, which 32 threads of its cluster"),
    ("arrive_twice", r"arrives at the cluster barrier again before waiting"),
    ("mask_beyond", r"the multicast mask 0b111 must name blocks of its cluster of 2"),
    ("rank_beyond", r"names block rank 5 of a cluster of 2 blocks"),
])
def test_faults_are_reported(mode, fault, match):
    load, _ = copies()
    with pytest.raises(KernelRuntimeError, match=match):
        fault_kernel[2, 32, 2](load, fault)


def test_cluster_launch_keeps_the_fast_path_of_plain_launches():
    """A cluster launch of a kernel beside plain launches of it: each exact."""
    out = np.full((4, 14), -1, np.int32)
    ids_kernel[4, 32](out)
    assert (out[:, 13] == 1).all()
    ids_kernel[4, 32, 2](out)
    assert (out[:, 13] == 2).all() and (out[:, 12] == [0, 1, 0, 1]).all()
    ids_kernel[4, 32](out)
    assert (out[:, 13] == 1).all()

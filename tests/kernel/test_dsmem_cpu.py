"""Distributed shared memory and cluster reductions on the CPU backend:
peer_shared reads and writes between the blocks of a cluster (batched and
race-checked), cluster_reduce against NumPy for cluster shapes, block
sizes and ops, the errors (bad arrays and ranks, races through DSMEM), and
the CUDA side: the PTX emitted, NVRTC for sm_90a and a refusal for sm_80."""
import contextlib

import numpy as np
import pytest

import moye
from moye.compiler import Constexpr
from moye import MoyeError
from moye.backend.cpu import KernelRuntimeError, race_checking
from moye.compiler.frontend import BACKENDS

rng = np.random.default_rng(18)


@pytest.fixture(params=["batched", "race_checked"])
def mode(request):
    with race_checking() if request.param == "race_checked" else contextlib.nullcontext():
        yield


# -- peer_shared ------------------------------------------------------------------------
@moye.kernel
def rotate(out, x):
    """Each block writes x into its shared array; each reads the next block's."""
    t = moye.thread_idx.x
    r, n = moye.block_rank_in_cluster(), moye.cluster_size()
    i = moye.block_idx.x * moye.block_dim.x + t
    mine = moye.shared_array(moye.Float32, 64)
    mine[t] = x[i]
    moye.cluster_sync()
    nxt = moye.peer_shared(mine, (r + 1) % n)
    out[i] = nxt[t] * 2.0
    moye.cluster_sync()


@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_peer_reads_the_next_blocks_shared_array(mode, cluster):
    grid = 2 * cluster
    x = rng.standard_normal(grid * 64).astype(np.float32)
    out = np.full_like(x, np.nan)
    rotate[grid, 64, cluster](out, x)
    blocks = x.reshape(-1, cluster, 64)
    expect = np.roll(blocks, -1, axis=1).reshape(-1) * 2
    np.testing.assert_array_equal(out, expect)


@moye.kernel
def scatter(out, x):
    """Each block writes its tile into the shared memory of every block of
    its cluster (peer stores, a layout-tiled copyto), then reads its own."""
    t = moye.thread_idx.x
    r, n = moye.block_rank_in_cluster(), moye.cluster_size()
    mine = moye.shared_array(moye.Int32, moye.Layout((8, 8)))
    moye.cluster_sync()
    for k in range(n):
        peer = moye.peer_shared(mine, k)
        if t < 8:
            peer[t, r] = x[moye.block_idx.x * 8 + t] + 100 * k
    moye.cluster_sync()
    if t < 8 * n:
        out[moye.block_idx.x * 64 + t] = mine[t % 8, t // 8]
    moye.cluster_sync()


def test_peer_stores_reach_every_block(mode):
    cluster = 4
    x = rng.integers(-1000, 1000, 8 * 8).astype(np.int32)
    out = np.full(8 * 64, -7, np.int32)
    scatter[8, 64, cluster](out, x)
    got = out.reshape(8, 64)[:, :8 * cluster].reshape(8, cluster, 8)
    for b in range(8):
        first = b - b % cluster
        for src in range(cluster):      # column `src` of block b came from block first + src
            np.testing.assert_array_equal(got[b, src], x[(first + src) * 8:(first + src + 1) * 8]
                                          + 100 * (b % cluster))
    assert (out.reshape(8, 64)[:, 8 * cluster:] == -7).all()


@moye.kernel
def copy_from_peer(out, x):
    """copyto between a peer's tile and a register fragment, both ways."""
    t = moye.thread_idx.x
    r = moye.block_rank_in_cluster()
    tile = moye.shared_array(moye.Float16, moye.Layout((4, 32)))
    for j in range(4):
        tile[j, t] = x[(moye.block_idx.x * 4 + j) * 32 + t]
    moye.cluster_sync()
    frag = moye.make_fragment_like(moye.Layout(4), moye.Float16)
    moye.copyto(frag, moye.peer_shared(tile, 1 - r)[None, t])
    moye.cluster_sync()
    moye.copyto(moye.peer_shared(tile, 1 - r)[None, t], frag)     # back where it was
    moye.cluster_sync()
    for j in range(4):
        out[(moye.block_idx.x * 4 + j) * 32 + t] = tile[j, t] + frag[j]
    moye.cluster_sync()


def test_copyto_through_a_peer_view_round_trips(mode):
    x = rng.standard_normal(4 * 4 * 32).astype(np.float16)
    out = np.full_like(x, np.nan)
    copy_from_peer[4, 32, 2](out, x)
    blocks = x.reshape(2, 2, 4, 32)
    swapped = blocks[:, ::-1]
    np.testing.assert_array_equal(out, (blocks + swapped).reshape(-1))


@moye.kernel
def dynamic_rank(out, ranks):
    t = moye.thread_idx.x
    mine = moye.shared_array(moye.Int32, 32)
    mine[t] = moye.block_rank_in_cluster() * 100 + t
    moye.cluster_sync()
    out[moye.block_idx.x * 32 + t] = moye.peer_shared(mine, ranks[t])[t]
    moye.cluster_sync()


def test_a_dynamic_rank_reads_that_block_and_out_of_range_is_an_error():
    ranks = rng.integers(0, 2, 32).astype(np.int32)
    out = np.full(64, -1, np.int32)
    dynamic_rank[2, 32, 2](out, ranks)
    np.testing.assert_array_equal(out, np.tile(ranks * 100 + np.arange(32), 2))
    ranks[5] = 2
    with pytest.raises(KernelRuntimeError, match="names block rank 2 of a cluster of 2 blocks"):
        dynamic_rank[2, 32, 2](out, ranks)
    ranks[5] = 1
    with pytest.raises(KernelRuntimeError, match="cluster of 1 blocks"):
        dynamic_rank[2, 32](out, ranks)       # no cluster: each block is its own


@moye.kernel
def racy_peer_read(out):
    t = moye.thread_idx.x
    mine = moye.shared_array(moye.Int32, 32)
    mine[t] = t
    moye.sync_threads()           # orders this block only: the peer may not have written
    out[moye.block_idx.x * 32 + t] = moye.peer_shared(mine, 1 - moye.block_rank_in_cluster())[t]
    moye.cluster_sync()


@moye.kernel
def racy_peer_write(out):
    t = moye.thread_idx.x
    mine = moye.shared_array(moye.Int32, 32)
    mine[t] = t
    moye.cluster_sync()
    out[moye.block_idx.x * 32 + t] = mine[t]
    if moye.block_rank_in_cluster() == 0:
        moye.peer_shared(mine, 1)[t] = 5       # block 1 may still be reading it
    moye.cluster_sync()


@pytest.mark.parametrize("kernel", [racy_peer_read, racy_peer_write])
def test_the_race_check_sees_dsmem_accesses(kernel):
    out = np.zeros(64, np.int32)
    kernel[2, 32, 2](out)                  # lock-step: no race shows
    with race_checking(), pytest.raises(KernelRuntimeError, match="race"):
        kernel[2, 32, 2](out)


@moye.kernel
def peer_of_global(out):
    out[0] = moye.peer_shared(out, 0)[0]


@moye.kernel
def peer_of_rank(out, rank: moye.Constexpr):
    mine = moye.shared_array(moye.Float32, 32)
    out[0] = moye.peer_shared(mine, rank)[0]


@moye.kernel
def peer_of_peer(out):
    mine = moye.shared_array(moye.Float32, 32)
    out[0] = moye.peer_shared(moye.peer_shared(mine, 0), 1)[0]


@moye.kernel
def peer_of_register(out):
    frag = moye.make_fragment_like(moye.Layout(4), moye.Float32)
    out[0] = moye.peer_shared(frag, 0)[0]


@moye.kernel
def peer_with_float_rank(out, f):
    mine = moye.shared_array(moye.Float32, 32)
    out[0] = moye.peer_shared(mine, f[0])[0]


def test_peer_shared_refuses_bad_arrays_and_ranks():
    out = np.zeros(4, np.float32)
    with pytest.raises(MoyeError, match="peer_shared: array must be a shared array of this "
                                        "block.*global memory"):
        peer_of_global[1, 32](out)
    with pytest.raises(MoyeError, match="register|local memory"):
        peer_of_register[1, 32](out)
    with pytest.raises(MoyeError, match="already a peer's view"):
        peer_of_peer[1, 32](out)
    with pytest.raises(MoyeError, match=r"rank must be a block rank.*0\.\.15.*got 16"):
        peer_of_rank[1, 32](out, 16)
    with pytest.raises(MoyeError, match=r"rank must be a block rank.*got -1"):
        peer_of_rank[1, 32](out, -1)
    with pytest.raises(MoyeError, match="rank must be an integer block rank, got a Float32"):
        peer_with_float_rank[1, 32](out, out)


# -- cluster_reduce ---------------------------------------------------------------------
def user_max(a, b):
    return a if a > b else b


@moye.kernel
def reduce_in_cluster(out, x, op: moye.Constexpr):
    t = moye.thread_idx.x + moye.block_dim.x * (moye.thread_idx.y + moye.block_dim.y *
                                                 moye.thread_idx.z)
    nt = moye.block_dim.x * moye.block_dim.y * moye.block_dim.z
    b = moye.block_idx.x + moye.grid_dim.x * moye.block_idx.y
    i = b * nt + t
    out[i] = moye.cluster_reduce(x[i], op)


def cluster_of_block(grid, cluster):
    """Per block (x fastest), the id of its cluster."""
    gx, gy = grid
    cx, cy = cluster
    by, bx = np.mgrid[0:gy, 0:gx]
    return ((by // cy) * (gx // cx) + bx // cx).reshape(-1)


def reference(x, grid, cluster, op):
    blocks = x.reshape(grid[0] * grid[1], -1).astype(np.float64)
    ids = cluster_of_block(grid, cluster)
    fn = {"sum": np.sum, "max": np.max, "min": np.min, user_max: np.max}[op]
    per = {c: fn(blocks[ids == c]) for c in np.unique(ids)}
    return np.repeat([per[c] for c in ids], blocks.shape[1])


@pytest.mark.parametrize("cluster", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("threads", [64, 128, 48])
def test_cluster_reduce_matches_numpy(cluster, threads):
    grid = (2 * cluster, 1)
    x = rng.standard_normal(grid[0] * threads).astype(np.float32)
    for op in ("sum", "max", "min", user_max):
        out = np.full_like(x, np.nan)
        reduce_in_cluster[grid, threads, cluster](out, x, op)
        ref = reference(x, grid, (cluster, 1), op)
        if op == "sum":
            np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-5)
            per_block = out.reshape(-1, threads)
            assert (per_block == per_block[:, :1]).all()     # bitwise the same everywhere
            assert (per_block.reshape(-1, cluster * threads) ==
                    per_block.reshape(-1, cluster * threads)[:, :1]).all()
        else:
            np.testing.assert_array_equal(out, ref.astype(np.float32))


def test_cluster_reduce_in_2x2_clusters_and_2d_blocks(mode):
    grid, cluster = (4, 2), (2, 2)
    x = rng.integers(-50, 50, 8 * 96).astype(np.int32)
    out = np.full_like(x, -12345)
    reduce_in_cluster[grid, (32, 3), cluster](out, x, "sum")
    np.testing.assert_array_equal(out, reference(x, grid, cluster, "sum"))


def test_cluster_reduce_of_halves_accumulates_in_float32(mode):
    x = (rng.standard_normal(4 * 64) * 100).astype(np.float16)
    out = np.full_like(x, np.nan)
    reduce_in_cluster[4, 64, 4](out, x, "sum")
    ref = reference(x.astype(np.float32), (4, 1), (4, 1), "sum")
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=1e-3, atol=0.5)


@moye.kernel
def reduce_twice_and_in_a_loop(out, x, steps):
    t = moye.thread_idx.x
    i = moye.block_idx.x * 64 + t
    a = moye.cluster_reduce(x[i], "sum")
    b = moye.cluster_reduce(x[i] * 2.0, "max")
    acc = 0.0
    for k in range(steps[0]):
        acc = acc + moye.cluster_reduce(x[i] + k, "min")
    out[3 * i] = a
    out[3 * i + 1] = b
    out[3 * i + 2] = acc


def test_cluster_reduce_twice_in_a_row_and_in_a_dynamic_loop(mode):
    x = rng.standard_normal(4 * 64).astype(np.float32)
    out = np.full(3 * x.size, np.nan, np.float32)
    reduce_twice_and_in_a_loop[4, 64, 2](out, x, np.array([3], np.int32))
    got = out.reshape(-1, 3)
    ref_sum = reference(x, (4, 1), (2, 1), "sum")
    ref_max = reference(x * 2, (4, 1), (2, 1), "max")
    ref_min = reference(x, (4, 1), (2, 1), "min")
    np.testing.assert_allclose(got[:, 0], ref_sum, rtol=2e-6, atol=1e-5)
    np.testing.assert_array_equal(got[:, 1], ref_max.astype(np.float32))
    np.testing.assert_allclose(got[:, 2], 3 * ref_min + 3, rtol=1e-6, atol=1e-5)


def test_cluster_reduce_refuses_bad_inputs():
    out = np.zeros(64, np.float32)
    with pytest.raises(MoyeError, match="cluster_reduce: op must be one of"):
        reduce_in_cluster[1, 64](out, out, "mean")
    with pytest.raises(MoyeError, match="cluster_reduce: op 'and' takes integers"):
        reduce_in_cluster[1, 64](out, out, "and")


# -- CUDA ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64])
def test_dsmem_compiles_for_sm_90a_and_is_refused_for_sm_80(dtype):
    x = np.zeros(128, dtype)
    kernel = reduce_in_cluster.trace(x, x, "max", block=64)[0]
    src = BACKENDS["cuda"].source(kernel, (64, 1, 1))
    assert "mapa.shared::cluster.u32" in src and "ld.shared::cluster." in src
    assert "barrier.cluster.arrive" in src
    BACKENDS["cuda"].compile_only(kernel, (64, 1, 1), "sm_90a")
    with pytest.raises(MoyeError, match="a Hopper instruction, but compiles for sm_80"):
        BACKENDS["cuda"].compile_only(kernel, (64, 1, 1), "sm_80")


def test_peer_stores_compile_for_sm_90a():
    kernel = scatter.trace(np.zeros(512, np.int32), np.zeros(64, np.int32), block=64)[0]
    src = BACKENDS["cuda"].source(kernel, (64, 1, 1))
    assert "st.shared::cluster.b32" in src
    BACKENDS["cuda"].compile_only(kernel, (64, 1, 1), "sm_90a")
    kernel = copy_from_peer.trace(np.zeros(512, np.float16), np.zeros(512, np.float16),
                                  block=32)[0]
    src = BACKENDS["cuda"].source(kernel, (32, 1, 1))
    assert "st.shared::cluster.b16" in src and "ld.shared::cluster.b16" in src
    BACKENDS["cuda"].compile_only(kernel, (32, 1, 1), "sm_90a")


@moye.kernel
def peer_view_carried(out, n):
    t = moye.thread_idx.x
    mine = moye.shared_array(moye.Int32, 32)
    mine[t] = t
    moye.cluster_sync()
    p = mine
    for i in range(n[0]):
        p = moye.peer_shared(mine, 1)
    out[t] = p[t]
    moye.cluster_sync()


def test_a_peer_view_cannot_be_carried_through_a_dynamic_loop():
    with pytest.raises(MoyeError, match="'p' is reassigned to an array in shared::cluster "
                                        "memory inside dynamic control flow"):
        peer_view_carried[2, 32, 2](np.zeros(64, np.int32), np.ones(1, np.int32))


# -- store_async: st.async with the peer's mbarrier --------------------------------------
@moye.kernel
def exchange_async(out, x, rounds):
    """Each round, thread k < n of every block sends the block's value of the
    round to block k (store_async into slot (rank, round % 2) of k's array,
    completing on k's mbarrier of that slot); each block waits on its own
    mbarrier, then writes what its n peers sent. Two slots and two
    mbarriers: a block reaches round i + 2 only after every peer has read
    round i's slot (it sent round i + 1 after that)."""
    t = moye.thread_idx.x
    r, n = moye.block_rank_in_cluster(), moye.cluster_size()
    got = moye.shared_array(x.dtype, moye.Layout((16, 2)))
    bars = moye.mbarrier_array(2)
    if t == 0:
        moye.mbarrier_init(bars[0], 1)
        moye.mbarrier_init(bars[1], 1)
        moye.fence_barrier_init()
    moye.cluster_sync()
    for i in range(rounds):
        s = i % 2
        if t == 0:
            moye.mbarrier_arrive_expect_tx(bars[s], n * (x.dtype.bits // 8))
        if t < n:
            moye.store_async(moye.peer_shared(got, t), (r, s),
                             x[moye.block_idx.x * rounds + i], bars[s])
        moye.mbarrier_wait(bars[s], (i // 2) % 2)
        if t < n:
            out[(moye.block_idx.x * rounds + i) * 16 + t] = got[t, s]


def exchanged(x, grid, cluster, rounds):
    """What exchange_async writes: block b's round i holds its cluster's blocks' values."""
    want = np.full(grid * rounds * 16, -1.0, x.dtype).reshape(grid, rounds, 16)
    v = x.reshape(grid // cluster, cluster, rounds)
    for b in range(grid):
        want[b, :, :cluster] = v[b // cluster].T
    return want.reshape(-1)


@pytest.mark.parametrize("cluster", [1, 2, 4, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_store_async_exchanges_values_round_after_round(mode, cluster, dtype):
    grid, rounds = 2 * cluster, 5
    x = rng.standard_normal(grid * rounds).astype(dtype)
    out = np.full(grid * rounds * 16, -1.0, dtype)
    exchange_async[grid, 32, cluster](out, x, rounds)
    np.testing.assert_array_equal(out, exchanged(x, grid, cluster, rounds))


@moye.kernel
def send_to_the_other(out, x, ARM: Constexpr, READ_EARLY: Constexpr):
    """Thread 0 of each of two blocks sends x[0] to the other; ARM: each
    arms its mbarrier for the 4 bytes first; READ_EARLY: it reads what it
    got before waiting on its mbarrier."""
    t = moye.thread_idx.x
    got = moye.shared_array(moye.Float32, 2)
    bar = moye.mbarrier()
    if t == 0:
        moye.mbarrier_init(bar, 1)
        moye.fence_barrier_init()
    moye.cluster_sync()
    if t == 0:
        if ARM:
            moye.mbarrier_arrive_expect_tx(bar, 4)
        moye.store_async(moye.peer_shared(got, 1 - moye.block_rank_in_cluster()), 0, x[0], bar)
    if READ_EARLY:
        out[moye.block_idx.x] = got[0]
    moye.mbarrier_wait(bar, 0)
    out[moye.block_idx.x] = got[0]


def test_store_async_errors():
    out, x = np.zeros(2, np.float32), np.ones(1, np.float32)
    # a phase with no arrival never completes: the wait is a deadlock, named
    send_to_the_other[2, 32, 2](out, x, True, False)
    assert out.tolist() == [1.0, 1.0]
    with pytest.raises(KernelRuntimeError, match="deadlock"):
        send_to_the_other[2, 32, 2](out, x, False, False)
    with race_checking(), pytest.raises(KernelRuntimeError, match="race"):
        send_to_the_other[2, 32, 2](out, x, True, True)

    @moye.kernel
    def local_dst(out):
        got = moye.shared_array(moye.Float32, 2)
        moye.store_async(got, 0, 1.0, moye.mbarrier())

    with pytest.raises(MoyeError, match=r"store_async: dst must be a peer block's shared array"):
        local_dst[2, 32, 2](out)

    @moye.kernel
    def halves(out):
        got = moye.shared_array(moye.Float16, 2)
        moye.store_async(moye.peer_shared(got, 0), 0, 1.0, moye.mbarrier())

    with pytest.raises(MoyeError, match="st.async moves 32- or 64-bit elements; the peer's "
                                        "array holds Float16"):
        halves[2, 32, 2](out)

    @moye.kernel
    def no_barrier(out):
        got = moye.shared_array(moye.Float32, 2)
        moye.store_async(moye.peer_shared(got, 0), 0, 1.0, got)

    with pytest.raises(MoyeError, match="store_async: expected an mbarrier"):
        no_barrier[2, 32, 2](out)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
def test_store_async_compiles_for_sm_90a(dtype):
    x = np.zeros(64, dtype)
    kernel = exchange_async.trace(np.zeros(64 * 16, dtype), x, 3, block=32)[0]
    src = BACKENDS["cuda"].source(kernel, (32, 1, 1))
    bits = 8 * np.dtype(dtype).itemsize
    assert f"st.async.shared::cluster.mbarrier::complete_tx::bytes.b{bits}" in src
    BACKENDS["cuda"].compile_only(kernel, (32, 1, 1), "sm_90a")
    with pytest.raises(MoyeError, match="a Hopper instruction, but compiles for sm_80"):
        BACKENDS["cuda"].compile_only(kernel, (32, 1, 1), "sm_80")

"""mbarriers and TMA on the CPU backend: phases and parities, transaction
bytes, out-of-bounds zeros, the TMA example at awkward sizes (exact,
batched and race-checked), and the errors: deadlocks, races with TMA,
bad tiles, and compiling for a GPU without TMA."""
import contextlib

import numpy as np
import pytest

import moye
from moye import Layout, MoyeError, Swizzle, composition
from moye.backend.cpu import KernelRuntimeError, race_checking
from moye.examples import tma_copy

rng = np.random.default_rng(8)


def padded(shape, dtype):
    """A row-major array whose rows are padded to 16 bytes, as a view."""
    M, N = shape
    per = 16 // np.dtype(dtype).itemsize
    return rng.standard_normal((M, -(-N // per) * per)).astype(dtype)[:, :N]


@pytest.fixture(params=["batched", "race_checked"])
def mode(request):
    with race_checking() if request.param == "race_checked" else contextlib.nullcontext():
        yield


@moye.kernel
def phases_kernel(out):
    bars = moye.mbarrier_array(3)
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(bars[0], 64)
        moye.mbarrier_init(bars[1], 32)
        moye.mbarrier_init(bars[2], 32)
    moye.sync_threads()
    out[tid, 0] = moye.mbarrier_try_wait(bars[0], 0)      # nobody arrived yet
    moye.mbarrier_arrive(bars[0])
    out[tid, 1] = moye.mbarrier_try_wait(bars[0], 0)      # phase 0 complete
    out[tid, 2] = moye.mbarrier_try_wait(bars[0], 1)      # phase 1 is not
    moye.mbarrier_arrive(bars[0])
    moye.mbarrier_wait(bars[0], 1)
    out[tid, 3] = moye.mbarrier_try_wait(bars[0], 0)      # phase 2 (parity 0) is not
    moye.mbarrier_arrive_expect_tx(bars[1 + tid % 2], 4)  # 4 bytes each, never delivered
    out[tid, 4] = moye.mbarrier_try_wait(bars[1 + tid % 2], 0)


def test_mbarrier_phases(mode):
    out = np.full((64, 5), 7, np.int32)
    phases_kernel[1, 64](out)
    np.testing.assert_array_equal(out, np.tile([0, 1, 0, 0, 0], (64, 1)))


@moye.kernel
def tx_kernel(out, load, thread_layout):
    """The tile at (m0, n0) (may overhang the array) to out through shared memory."""
    smem = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    bar = moye.mbarrier()
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(bar, 1)
    moye.sync_threads()
    if tid == 0:
        moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        moye.tma_load(load, smem, (-8, 60), bar)
    moye.mbarrier_wait(bar, 0)
    dst = moye.parallelize(moye.MoYeArray(out), thread_layout, tid)
    src = moye.parallelize(smem, thread_layout, tid)
    for i in range(moye.size(src)):
        dst[i] = src[i]


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_tma_load_fills_out_of_bounds_with_zeros(mode, dtype):
    src = padded((20, 70), dtype)
    tile = tma_copy.swizzled_tile(16, dtype)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    bN = load.tile[1]
    out = np.full((16, bN), np.nan, dtype)
    tx_kernel[1, 128](out, load, Layout((128 // bN, bN), (bN, 1)))
    want = np.zeros((16, bN), dtype)
    want[8:16, 0:10] = src[0:8, 60:70]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("M, N", [(100, 72), (130, 37), (64, 64), (1, 9)])
def test_tma_copy_example(mode, dtype, M, N):
    src = padded((M, N), dtype)
    dst = padded((M, N), dtype)
    dst[...] = np.nan
    tma_copy.copy(dst, src)
    np.testing.assert_array_equal(dst, src)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("M, N", [(100, 72), (33, 130)])
def test_tma_transpose_example(mode, dtype, M, N):
    src = padded((M, N), dtype)
    dst = padded((N, M), dtype)
    dst[...] = np.nan
    tma_copy.transpose(dst, src)
    np.testing.assert_array_equal(dst, src.T)


@moye.kernel
def copy3d_kernel(load, store):
    smem = moye.shared_array(load.dtype, load.smem_layout)
    bar = moye.mbarrier()
    b0, b1, b2 = load.tile
    at = (moye.block_idx.z * b0, moye.block_idx.y * b1, moye.block_idx.x * b2)
    if moye.thread_idx.x == 0:
        moye.mbarrier_init(bar, 1)
        moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        moye.tma_load(load, smem, at, bar)
        moye.mbarrier_wait(bar, 0)
        moye.tma_store(store, at, smem)
        moye.tma_store_commit()
        moye.tma_store_wait(0)


@moye.kernel
def prefetched_copy_kernel(load, store):
    """copy3d_kernel's copy of one 2-D tile, both tensor maps prefetched first."""
    smem = moye.shared_array(load.dtype, load.smem_layout)
    bar = moye.mbarrier()
    if moye.thread_idx.x == 0:
        moye.prefetch_tma_descriptor(load)
        moye.prefetch_tma_descriptor(store)
        moye.mbarrier_init(bar, 1)
        moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        moye.tma_load(load, smem, (8 * moye.block_idx.x, 0), bar)
        moye.mbarrier_wait(bar, 0)
        moye.tma_store(store, (8 * moye.block_idx.x, 0), smem)
        moye.tma_store_commit()
        moye.tma_store_wait(0)


def test_prefetch_tma_descriptor(mode):
    """A cache hint: the copies it precedes are exact on the CPU backend, and
    the CUDA source prefetches each map's address; NVRTC takes it for sm_90a."""
    from moye.compiler.frontend import BACKENDS
    src = rng.standard_normal((20, 32)).astype(np.float16)
    dst = np.full_like(src, np.nan)
    tile = Layout((8, 32), (32, 1))
    args = (moye.make_tma_copy(moye.TMA_LOAD, src, tile),
            moye.make_tma_copy(moye.TMA_STORE, dst, tile))
    prefetched_copy_kernel[3, 32](*args)
    np.testing.assert_array_equal(dst, src)
    source = prefetched_copy_kernel.cuda_source(*args, block=32)
    assert source.count("prefetch.tensormap [%0]") == 2
    module = BACKENDS["cuda"].compile_only(prefetched_copy_kernel.trace(*args, block=32)[0],
                                           (32, 1, 1), "sm_90a")
    assert module.cubin[:4] == b"\x7fELF"


@moye.kernel
def prefetch_an_array_kernel(x):
    moye.prefetch_tma_descriptor(x)


def test_prefetch_tma_descriptor_takes_a_tma_copy():
    with pytest.raises(MoyeError, match=r"(?s)test_hopper_cpu.py:\d+.*prefetch_tma_descriptor: "
                                        r"expected a TMACopy kernel argument"):
        prefetch_an_array_kernel[1, 32](np.zeros(4, np.float32))


def test_tma_3d(mode):
    src = rng.standard_normal((3, 40, 64)).astype(np.float16)
    dst = np.full_like(src, np.nan)
    tile = Layout((2, 8, 32), (256, 32, 1))
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    store = moye.make_tma_copy(moye.TMA_STORE, dst, tile)
    copy3d_kernel[(2, 5, 2), 32](load, store)
    np.testing.assert_array_equal(dst, src)


@moye.kernel
def pipelined_kernel(dst, load, ring_layout, thread_layout, stages: moye.Constexpr):
    """Block b copies column tile b of src, its tiles down the rows in a
    run-time loop, through `stages` shared tiles that TMA loads fill
    stages - 1 tiles ahead, each on its own mbarrier whose phase flips."""
    bM, bN = load.tile
    ring = moye.shared_array(load.dtype, ring_layout, align=1024)
    bars = moye.mbarrier_array(stages)
    tid = moye.thread_idx.x
    n0 = moye.block_idx.x * bN
    ntiles = (dst.shape[0] + bM - 1) // bM
    if tid == 0:
        for s in range(stages):
            moye.mbarrier_init(bars[s], 1)
    moye.sync_threads()
    if tid == 0:
        for s in range(stages - 1):
            if s < ntiles:
                moye.mbarrier_arrive_expect_tx(bars[s], load.bytes)
                moye.tma_load(load, ring[:, :, s], (s * bM, n0), bars[s])
    for t in range(ntiles):
        ahead = t + stages - 1
        if tid == 0:
            if ahead < ntiles:
                moye.mbarrier_arrive_expect_tx(bars[ahead % stages], load.bytes)
                moye.tma_load(load, ring[:, :, ahead % stages], (ahead * bM, n0),
                              bars[ahead % stages])
        s = t % stages
        moye.mbarrier_wait(bars[s], (t // stages) % 2)
        src = moye.parallelize(ring[:, :, s], thread_layout, tid)
        out = moye.parallelize(moye.tile(moye.MoYeArray(dst), (bM, bN), (t, moye.block_idx.x)),
                               thread_layout, tid)
        for i in range(moye.size(src)):
            out[i] = src[i]
        moye.sync_threads()


def test_pipelined_loads_flip_phases(mode):
    src = rng.standard_normal((7 * 16, 64)).astype(np.float32)
    dst = np.full_like(src, np.nan)
    stages = 3
    ring = composition(Swizzle(3, 2, 3), Layout((16, 32, stages), (32, 1, 16 * 32)))
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tma_copy.swizzled_tile(16, np.float32))
    pipelined_kernel[2, 128](dst, load, ring, Layout((4, 32), (32, 1)), stages)
    np.testing.assert_array_equal(dst, src)


# -- errors ---------------------------------------------------------------------------------
@moye.kernel
def faulty_kernel(load, store, fault: moye.Constexpr):
    sA = moye.shared_array(load.dtype, load.smem_layout, align=1024)
    bar = moye.mbarrier()
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(bar, 2 if fault == "deadlock" else 1)
    moye.sync_threads()
    if tid == 0:
        moye.mbarrier_arrive_expect_tx(bar, load.bytes + (2 if fault == "tx" else 0))
        moye.tma_load(load, sA, (0, 0), bar)
    t = moye.parallelize(sA, Layout((4, 32), (32, 1)), tid)
    if fault == "no_wait":
        t[0] = t[0] + 1.0
    moye.mbarrier_wait(bar, 0)
    for i in range(moye.size(t)):
        t[i] = t[i] + 1.0
    if fault != "no_fence":
        moye.fence_proxy_async()
    moye.sync_threads()
    if tid == 0:
        moye.tma_store(store, (0, 0), sA)
        moye.tma_store_commit()
        if fault != "overwrite":
            moye.tma_store_wait(0)
    moye.sync_threads()
    t[0] = 0.0


@pytest.mark.parametrize("fault, match", [
    ("deadlock", "deadlock: thread .* waits for phase 0 of mbarrier 0, which can never "
     "complete: 1 of its 2 arrivals missing"),
    ("tx", "deadlock: .* 2 transaction bytes expected that no pending TMA load brings"),
    ("no_wait", "reads shared memory .* that a TMA load by thread .* has not finished "
     "writing: wait on its mbarrier first"),
    ("no_fence", "the TMA store .* reads shared memory .* that thread .* wrote at .* with "
     "ordinary stores: the writer must call fence_proxy_async"),
    ("overwrite", "writes shared memory .* that a TMA store by thread .* may still be "
     "reading: tma_store_wait first"),
])
def test_faults_are_reported(fault, match):
    src = padded((64, 32), np.float32)
    dst = np.zeros_like(src)
    tile = tma_copy.swizzled_tile(64, np.float32)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    store = moye.make_tma_copy(moye.TMA_STORE, dst, tile)
    with race_checking(), pytest.raises(KernelRuntimeError, match=match):
        faulty_kernel[1, 128](load, store, fault)


@moye.kernel
def spin_kernel(out):
    bar = moye.mbarrier()
    if moye.thread_idx.x == 0:
        moye.mbarrier_init(bar, 1)
    moye.sync_threads()
    while not moye.mbarrier_try_wait(bar, 0):
        out[0] = 1


def test_spinning_on_try_wait_raises():
    with pytest.raises(KernelRuntimeError, match="after 1000 fruitless mbarrier_try_wait"):
        spin_kernel[1, 32](np.zeros(1, np.int32))


@moye.kernel
def uninitialized_kernel(out):
    moye.mbarrier_arrive(moye.mbarrier())


def test_uninitialized_mbarrier():
    with pytest.raises(KernelRuntimeError, match="before mbarrier_init"):
        uninitialized_kernel[1, 32](np.zeros(1, np.int32))


@moye.kernel
def misuse_kernel(load, store, what: moye.Constexpr):
    smem = moye.shared_array(load.dtype, load.smem_layout, align=128 if what == "align" else 1024)
    other = moye.shared_array(load.dtype, Layout(load.tile), align=1024)
    bar = moye.mbarrier()
    if what == "op":
        moye.tma_load(store, smem, (0, 0), bar)
    elif what == "layout":
        moye.tma_load(load, other, (0, 0), bar)
    elif what == "coords":
        moye.tma_load(load, smem, (0,), bar)
    elif what == "bar":
        moye.tma_load(load, smem, (0, 0), smem)
    else:
        moye.tma_load(load, smem, (0, 0), bar)


@pytest.mark.parametrize("what, match", [
    ("op", "was made for TMA_STORE; make one with TMA_LOAD"),
    ("layout", "the tile's layout .* is not the copy's"),
    ("coords", "1 coordinates for a rank-2 array"),
    ("bar", "expected an mbarrier"),
    ("align", r"must start 1024-byte aligned .* align=1024"),
])
def test_tracing_errors(what, match):
    src = padded((64, 64), np.float16)
    tile = tma_copy.swizzled_tile(64, np.float16)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    store = moye.make_tma_copy(moye.TMA_STORE, src, tile)
    with pytest.raises(MoyeError, match=match):
        misuse_kernel.trace(load, store, what, block=32)


def test_sm80_target_is_refused():
    from moye.compiler.frontend import BACKENDS
    src = padded((64, 64), np.float16)
    tile = tma_copy.swizzled_tile(64, np.float16)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    store = moye.make_tma_copy(moye.TMA_STORE, src, tile)
    kernel = tma_copy.tma_copy_kernel.trace(load, store, block=128)[0]
    with pytest.raises(MoyeError, match="uses fence_barrier_init .* a Hopper "
                                         "instruction, but compiles for sm_80"):
        BACKENDS["cuda"].compile_only(kernel, (128, 1, 1), "sm_80")


@moye.kernel
def add_tiles_kernel(load, add, copies: moye.Constexpr):
    """Each block loads its tile of `load`'s array and adds it, `copies`
    times, to the same tile of `add`'s: blocks of one grid x add to one tile."""
    smem = moye.shared_array(load.dtype, load.smem_layout)
    bar = moye.mbarrier()
    at = (moye.block_idx.y * load.tile[0], 0)
    if moye.thread_idx.x == 0:
        moye.mbarrier_init(bar, 1)
        moye.mbarrier_arrive_expect_tx(bar, load.bytes)
        moye.tma_load(load, smem, (moye.block_idx.x * 8 + at[0], 0), bar)
        moye.mbarrier_wait(bar, 0)
        for _ in range(copies):
            moye.tma_reduce_add(add, at, smem)
        moye.tma_store_commit()
        moye.tma_store_wait(0)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_tma_reduce_add_sums_every_block(mode, dtype):
    """tma_reduce_add adds each block's tile to the global one (blocks of a
    grid row onto one tile, twice each), every element; rows past the array
    are dropped, as a store drops them."""
    src = (rng.standard_normal((48, 16)) * 100).astype(dtype)
    dst = (rng.standard_normal((13, 16)) * 100).astype(dtype)           # the second tile ragged
    tile = Layout((8, 16), (16, 1))
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    add = moye.make_tma_copy(moye.TMA_REDUCE_ADD, dst, tile)
    want = dst.astype(np.float64)                   # block (x, y) loads rows 8x + 8y.. of src
    for y in range(2):
        for x in range(3):
            part = src[x * 8 + y * 8:x * 8 + y * 8 + 8].astype(np.float64)
            n = min(8, 13 - y * 8)
            want[y * 8:y * 8 + n] += 2 * part[:n]
    add_tiles_kernel[(3, 2), 32](load, add, 2)
    if dtype == np.int32:
        np.testing.assert_array_equal(dst, want.astype(dtype))
    else:           # 7 float32 additions in some order: each rounds by half an ulp of a sum
        bound = 7 * 2.0 ** -24 * (np.abs(want) + 6 * np.abs(src).max())
        assert (np.abs(dst - want) <= bound).all(), np.abs(dst - want).max()


def test_tma_reduce_add_bad_inputs():
    """A type TMA cannot add, and a copy made for another direction."""
    tile = Layout((8, 16), (16, 1))
    with pytest.raises(MoyeError, match="TMA_REDUCE_ADD adds Float32.*gmem is Float16"):
        moye.make_tma_copy(moye.TMA_REDUCE_ADD, np.zeros((8, 16), np.float16), tile)
    src = np.zeros((8, 16), np.float32)
    store = moye.make_tma_copy(moye.TMA_STORE, src, tile)
    with pytest.raises(MoyeError, match="was made for TMA_STORE; make one with TMA_REDUCE_ADD"):
        add_tiles_kernel[1, 32](moye.make_tma_copy(moye.TMA_LOAD, src, tile), store, 1)


def test_tma_reduce_add_compiles_for_sm90a():
    """NVRTC takes the PTX: cp.reduce.async.bulk.tensor.2d...add.tile.bulk_group."""
    from moye.compiler.frontend import BACKENDS
    src, dst = np.zeros((48, 16), np.float32), np.zeros((13, 16), np.float32)
    tile = Layout((8, 16), (16, 1))
    args = (moye.make_tma_copy(moye.TMA_LOAD, src, tile),
            moye.make_tma_copy(moye.TMA_REDUCE_ADD, dst, tile), 2)
    source = add_tiles_kernel.cuda_source(*args, block=32)
    assert "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group" in source
    module = BACKENDS["cuda"].compile_only(add_tiles_kernel.trace(*args, block=32)[0],
                                           (32, 1, 1), "sm_90a")
    assert module.cubin[:4] == b"\x7fELF"

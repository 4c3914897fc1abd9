"""Warp-specialized Hopper kernels on the CPU backend: a producer warp and
consumer warpgroups in the two sides of one `if`, waiting on mbarriers the
other side arrives on (a ring of TMA-loaded stages, plain and persistent),
named barriers, and what goes wrong: deadlocks and races."""
import contextlib
import inspect
import re

import numpy as np
import pytest

import moye
from moye import Layout, MoYeArray, Swizzle, composition, parallelize, tile
from moye.backend.cpu import KernelRuntimeError, race_checking
from moye.examples import tma_copy

rng = np.random.default_rng(90)

BM, BK = 16, 32                 # a (16, 32) float32 tile: rows of 128 bytes
CONSUMERS = 256                 # warpgroups 1 and 2; warpgroup 0 produces
THREADS = 128 + CONSUMERS


@pytest.fixture(params=["batched", "race_checked"])
def mode(request):
    with race_checking() if request.param == "race_checked" else contextlib.nullcontext():
        yield


def ring_layout(stages):
    """`stages` (16, 32) float32 tiles, each swizzled as TMA's 128B mode."""
    return composition(Swizzle(3, 2, 3), Layout((BM, BK, stages), (BK, 1, BM * BK)))


def problem(m_tiles, k_tiles):
    """A random (m_tiles * 16, k_tiles * 32) array, its TMA copy, and the fold
    of its K tiles (out[m, j] = sum over k of A[m, k * 32 + j], in k order)."""
    A = rng.standard_normal((m_tiles * BM, k_tiles * BK)).astype(np.float32)
    load = moye.make_tma_copy(moye.TMA_LOAD, A, tma_copy.swizzled_tile(BM, np.float32))
    want = np.zeros((m_tiles * BM, BK), np.float32)
    for k in range(k_tiles):
        want += A[:, k * BK:(k + 1) * BK]
    return load, want


def line_of(kern, text):
    """`test_warp_specialized_cpu.py:N: text` (a pattern), N the line of `kern`
    that holds `text`."""
    lines, first = inspect.getsourcelines(kern.fn)
    n = next(first + i for i, line in enumerate(lines) if line.strip() == text)
    return re.escape(f"test_warp_specialized_cpu.py:{n}: {text}")


@moye.kernel
def ring_kernel(out, load, k_tiles, ring_layout, stages: moye.Constexpr, fault: moye.Constexpr):
    """Block b folds the K tiles of rows b*16.. of A into out: thread 0 TMA-loads
    them through a ring of `stages` tiles (full[s]: loaded, empty[s]: released by
    all 256 consumer threads), each consumer thread adds two elements of every
    tile into its registers."""
    ring = moye.shared_array(load.dtype, ring_layout, align=1024)
    full = moye.mbarrier_array(stages)
    empty = moye.mbarrier_array(stages)
    tid = moye.thread_idx.x
    m0 = moye.block_idx.x * BM
    if tid == 0:
        for s in range(stages):
            moye.mbarrier_init(full[s], 1)
            moye.mbarrier_init(empty[s], CONSUMERS)
    moye.sync_threads()
    if moye.warp_idx() // 4 == 0:
        moye.setmaxnreg_dec(40)
        if tid == 0:
            stage = 0
            phase = 0
            for k in range(k_tiles):
                moye.mbarrier_wait(empty[stage], phase ^ 1)
                moye.mbarrier_arrive_expect_tx(full[stage], load.bytes)
                moye.tma_load(load, ring[:, :, stage], (m0, k * BK), full[stage])
                stage += 1
                if stage == stages:
                    stage = 0
                    phase ^= 1
    else:
        moye.setmaxnreg_inc(232)
        c = tid - 128
        thr = Layout((8, 32), (32, 1))
        acc = MoYeArray.zeros(moye.Float32, 2)
        stage = 0
        phase = 0
        for k in range(k_tiles):
            if fault == "one_group_waits":
                if c < 128:
                    moye.mbarrier_wait(full[stage], phase)
            elif fault != "no_full_wait":
                moye.mbarrier_wait(full[stage], phase)
            if fault == "release_before_read":
                moye.mbarrier_arrive(empty[stage])
            part = parallelize(ring[:, :, stage], thr, c)
            for i in range(2):
                acc[i] = acc[i] + part[i]
            if fault != "release_before_read":
                moye.mbarrier_arrive(empty[stage])
            stage += 1
            if stage == stages:
                stage = 0
                phase ^= 1
        moye.named_barrier_sync(1, CONSUMERS)
        dst = parallelize(tile(MoYeArray(out), (BM, BK), (moye.block_idx.x, 0)), thr, c)
        for i in range(2):
            dst[i] = acc[i]


@pytest.mark.parametrize("stages, k_tiles", [(2, 7), (3, 9), (4, 13)])
def test_producer_consumer_ring(mode, stages, k_tiles):
    """Phases wrap several times; three blocks share a batch (unless race-checked)."""
    load, want = problem(3, k_tiles)
    out = np.full_like(want, np.nan)
    ring_kernel[3, THREADS](out, load, k_tiles, ring_layout(stages), stages, "")
    np.testing.assert_array_equal(out, want)


@moye.kernel
def persistent_kernel(out, load, k_tiles, n_tiles, ring_layout, stages: moye.Constexpr):
    """ring_kernel over n_tiles row tiles, block b taking tiles b, b + grid, ...,
    written with TmaPipeline: the ring's stages and phases run on from tile to
    tile."""
    ring = moye.shared_array(load.dtype, ring_layout, align=1024)
    pipe = moye.TmaPipeline(stages, CONSUMERS)
    tid = moye.thread_idx.x
    if tid == 0:
        pipe.init()
    moye.sync_threads()
    stage, phase = 0, 0
    if moye.warp_idx() // 4 == 0:
        moye.setmaxnreg_dec(40)
        if tid == 0:
            t = moye.block_idx.x
            while t < n_tiles:
                for k in range(k_tiles):
                    full = pipe.producer_acquire(stage, phase, load.bytes)
                    moye.tma_load(load, ring[:, :, stage], (t * BM, k * BK), full)
                    stage, phase = pipe.advance(stage, phase)
                t += moye.grid_dim.x
    else:
        moye.setmaxnreg_inc(232)
        c = tid - 128
        thr = Layout((8, 32), (32, 1))
        acc = MoYeArray.zeros(moye.Float32, 2)
        t = moye.block_idx.x
        while t < n_tiles:
            for i in range(2):
                acc[i] = 0.0
            for k in range(k_tiles):
                pipe.consumer_wait(stage, phase)
                part = parallelize(ring[:, :, stage], thr, c)
                for i in range(2):
                    acc[i] = acc[i] + part[i]
                pipe.consumer_release(stage)
                stage, phase = pipe.advance(stage, phase)
            dst = parallelize(tile(MoYeArray(out), (BM, BK), (t, 0)), thr, c)
            for i in range(2):
                dst[i] = acc[i]
            t += moye.grid_dim.x


@pytest.mark.parametrize("grid, n_tiles", [(3, 7), (4, 5)])
def test_persistent_ring(mode, grid, n_tiles):
    """Blocks take different numbers of tiles (7 over 3 blocks: 3, 2, 2)."""
    load, want = problem(n_tiles, 5)
    out = np.full_like(want, np.nan)
    persistent_kernel[grid, THREADS](out, load, 5, n_tiles, ring_layout(3), 3)
    np.testing.assert_array_equal(out, want)


@moye.kernel
def consumers_exchange_kernel(out, x, sync: moye.Constexpr):
    """The consumers write x to shared memory, sync on named barrier 1 (256
    threads), read a neighbour's value; the producer warpgroup spins apart."""
    buf = moye.shared_array(moye.Float32, CONSUMERS)
    tid = moye.thread_idx.x
    if moye.warp_idx() // 4 == 0:
        moye.setmaxnreg_dec(40)
        for i in range(tid % 3):
            out[moye.block_idx.x, CONSUMERS + tid] = -1.0
        out[moye.block_idx.x, CONSUMERS + tid] = 1.0
    else:
        c = tid - 128
        buf[c] = x[moye.block_idx.x, c]
        if sync:
            moye.named_barrier_sync(1, CONSUMERS)
        out[moye.block_idx.x, c] = buf[(c + 37) % CONSUMERS]


def test_named_barrier_among_consumers(mode):
    x = rng.standard_normal((2, CONSUMERS)).astype(np.float32)
    out = np.full((2, CONSUMERS + 128), np.nan, np.float32)
    consumers_exchange_kernel[2, THREADS](out, x, True)
    np.testing.assert_array_equal(out[:, :CONSUMERS], np.roll(x, -37, axis=1))
    np.testing.assert_array_equal(out[:, CONSUMERS:], 1.0)


def test_named_barrier_left_out_is_a_race():
    x = rng.standard_normal((1, CONSUMERS)).astype(np.float32)
    out = np.zeros((1, CONSUMERS + 128), np.float32)
    read = line_of(consumers_exchange_kernel, "out[moye.block_idx.x, c] = buf[(c + 37) % "
                                              "CONSUMERS]")
    with race_checking(), pytest.raises(KernelRuntimeError,
                                        match=r"race \(read-after-write\) .* at " + read):
        consumers_exchange_kernel[1, THREADS](out, x, False)


@moye.kernel
def arrive_sync_kernel(out, x, producer_then: moye.Constexpr, deadlock: moye.Constexpr):
    """Warp 0 writes x to shared memory and arrives at named barrier 2; warpgroup
    1 syncs there (32 + 128 threads) and reads it. producer_then: the producer
    is the `if`'s then-side (it arrives first), else the consumers are (they
    wait first)."""
    buf = moye.shared_array(moye.Float32, 32)
    tid = moye.thread_idx.x
    warp = moye.warp_idx()
    if (warp == 0) if producer_then else (warp != 0):
        if producer_then:
            buf[tid] = x[tid]
            if not deadlock:
                moye.named_barrier_arrive(2, 160)
        elif warp // 4 == 1:
            moye.named_barrier_sync(2, 160)
            out[tid - 128] = buf[tid % 32] * 2.0
    else:
        if not producer_then:
            if warp == 0:
                buf[tid] = x[tid]
                if not deadlock:
                    moye.named_barrier_arrive(2, 160)
        elif warp // 4 == 1:
            moye.named_barrier_sync(2, 160)
            out[tid - 128] = buf[tid % 32] * 2.0


@pytest.mark.parametrize("producer_then", [True, False])
def test_named_barrier_arrive_and_sync(mode, producer_then):
    x = rng.standard_normal(32).astype(np.float32)
    out = np.full(128, np.nan, np.float32)
    arrive_sync_kernel[1, 256](out, x, producer_then, False)
    np.testing.assert_array_equal(out, np.tile(x, 4) * 2)


def test_named_barrier_deadlock():
    sync = line_of(arrive_sync_kernel, "moye.named_barrier_sync(2, 160)")
    with pytest.raises(KernelRuntimeError, match=sync + r"\n  deadlock: thread \(128, 0, 0\) of "
                       r"block \(0, 0, 0\) and 127 more wait at named barrier 2 for 160 threads, "
                       r"of which 128 have arrived"):
        arrive_sync_kernel[1, 256](np.zeros(128, np.float32), np.zeros(32, np.float32), False,
                                   True)


@moye.kernel
def deadlock_kernel(out):
    """The consumers wait on `full`, which nobody arrives on; the producer on
    `empty`, which the consumers never release."""
    full = moye.mbarrier()
    empty = moye.mbarrier()
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(full, 1)
        moye.mbarrier_init(empty, 128)
    moye.sync_threads()
    if moye.warp_idx() // 4 == 0:
        if tid == 0:
            moye.mbarrier_wait(empty, 0)
    else:
        moye.mbarrier_wait(full, 0)
        moye.mbarrier_arrive(empty)
    out[tid] = 1


def test_deadlock_names_every_waiting_line():
    consumer = line_of(deadlock_kernel, "moye.mbarrier_wait(full, 0)")
    producer = line_of(deadlock_kernel, "moye.mbarrier_wait(empty, 0)")
    with pytest.raises(KernelRuntimeError) as e:
        deadlock_kernel[2, 256](np.zeros(256, np.int32))
    assert re.match(
        consumer + r"\n  deadlock: thread \(128, 0, 0\) of block \(0, 0, 0\) waits for phase 0 "
        r"of mbarrier 0, which can never complete: 1 of its 1 arrivals missing\n"
        r"  and at " + producer + r": thread \(0, 0, 0\) of block \(0, 0, 0\) waits for phase 0 "
        r"of mbarrier 0, which can never complete: 128 of its 128 arrivals missing", str(e.value))


@pytest.mark.parametrize("fault, match", [
    ("no_full_wait", r"thread \(128, 0, 0\) of block \(0, 0, 0\) reads shared memory .* that a "
                     r"TMA load by thread \(0, 0, 0\) at .* has not finished writing: wait on its "
                     r"mbarrier first"),
    ("one_group_waits", r"race \(read-after-write\) on element \d+ between thread \(0, 0, 0\) at "
                        r"{tma} and thread \(256, 0, 0\) at {read}"),
    ("release_before_read", r"race \(write-after-read\) on element \d+ between thread "
                            r"\(128, 0, 0\) at {read} and thread \(0, 0, 0\) at {tma}"),
])
def test_pipeline_faults_are_races(fault, match):
    """A consumer that reads a stage its full barrier has not ordered, or one
    that releases the stage (empty) before reading it, is reported."""
    tma = line_of(ring_kernel, "moye.tma_load(load, ring[:, :, stage], (m0, k * BK), "
                               "full[stage])")
    read = line_of(ring_kernel, "acc[i] = acc[i] + part[i]")
    load, want = problem(1, 4)
    out = np.zeros_like(want)
    ring_kernel[1, THREADS](out, load, 4, ring_layout(2), 2, "")
    with race_checking(), pytest.raises(KernelRuntimeError,
                                        match=match.format(tma=tma, read=read)):
        ring_kernel[1, THREADS](out, load, 4, ring_layout(2), 2, fault)


@moye.kernel
def spin_kernel(out):
    """Warp 1 (the `if`'s then-side, so it runs first) spins on try_wait until
    thread 0 has completed two phases."""
    bar = moye.mbarrier()
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(bar, 1)
    moye.sync_threads()
    if tid >= 32:
        while not moye.mbarrier_try_wait(bar, 1):
            out[tid] = out[tid] + 1
        out[tid] = 100
    else:
        if tid == 0:
            moye.mbarrier_arrive(bar)
            moye.mbarrier_wait(bar, 0)
            moye.mbarrier_arrive(bar)
    out[tid] = out[tid] + 1


def test_try_wait_in_a_loop():
    out = np.zeros(64, np.int32)
    spin_kernel[1, 64](out)
    np.testing.assert_array_equal(out, [1] * 32 + [101] * 32)


@moye.kernel
def sync_across_sides_kernel(out, x):
    """Warp 0 waits for warp 1's arrival, then both sides meet at sync_threads
    and warp 0 reads what warp 1 wrote before it."""
    buf = moye.shared_array(moye.Float32, 32)
    bar = moye.mbarrier()
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(bar, 1)
    moye.sync_threads()
    if tid < 32:
        moye.mbarrier_wait(bar, 0)
        moye.sync_threads()
        out[tid] = buf[31 - tid]
    else:
        buf[tid - 32] = x[tid - 32]
        if tid == 32:
            moye.mbarrier_arrive(bar)
        moye.sync_threads()


def test_sync_threads_across_sides(mode):
    x = rng.standard_normal(32).astype(np.float32)
    out = np.full(32, np.nan, np.float32)
    sync_across_sides_kernel[2, 64](out, x)
    np.testing.assert_array_equal(out, x[::-1])


@moye.kernel
def nested_kernel(out):
    """Contexts within contexts: warp 0 waits for warp 1, which waits for warp 2,
    warps 1 and 2 being the two sides of an `if` inside the outer else-side."""
    a = moye.mbarrier()
    b = moye.mbarrier()
    tid = moye.thread_idx.x
    if tid == 0:
        moye.mbarrier_init(a, 32)
        moye.mbarrier_init(b, 1)
    moye.sync_threads()
    if tid < 32:
        moye.mbarrier_wait(b, 0)
        out[tid] = 1
    else:
        if tid < 64:
            moye.mbarrier_wait(a, 0)
            if tid == 32:
                moye.mbarrier_arrive(b)
            out[tid] = 2
        else:
            moye.mbarrier_arrive(a)
            out[tid] = 3


def test_nested_sides_wait_for_each_other(mode):
    out = np.zeros(96, np.int32)
    nested_kernel[3, 96](out)
    np.testing.assert_array_equal(out, [1] * 32 + [2] * 32 + [3] * 32)


@moye.kernel
def uneven_kernel(out, load, groups, k_tiles, ring_layout, stages: moye.Constexpr):
    """persistent_kernel's fold where block b takes K tiles b.. of each of
    `groups` passes (the later blocks fewer), the producer in a loop of
    loops and the consumers in one flat loop over the same tiles."""
    ring = moye.shared_array(load.dtype, ring_layout, align=1024)
    pipe = moye.TmaPipeline(stages, CONSUMERS)
    tid = moye.thread_idx.x
    first = moye.block_idx.x
    if tid == 0:
        pipe.init()
    moye.sync_threads()
    stage, phase = 0, 0
    if moye.warp_idx() // 4 == 0:
        if tid == 0:
            for g in range(groups):
                for k in range(first, k_tiles):
                    full = pipe.producer_acquire(stage, phase, load.bytes)
                    moye.tma_load(load, ring[:, :, stage], (moye.block_idx.x * BM, k * BK), full)
                    stage, phase = pipe.advance(stage, phase)
    else:
        c = tid - 128
        thr = Layout((8, 32), (32, 1))
        acc = MoYeArray.zeros(moye.Float32, 2)
        for t in range(groups * (k_tiles - first)):
            pipe.consumer_wait(stage, phase)
            part = parallelize(ring[:, :, stage], thr, c)
            for i in range(2):
                acc[i] = acc[i] + part[i]
            pipe.consumer_release(stage)
            stage, phase = pipe.advance(stage, phase)
        dst = parallelize(tile(MoYeArray(out), (BM, BK), (moye.block_idx.x, 0)), thr, c)
        for i in range(2):
            dst[i] = acc[i]


@pytest.mark.parametrize("blocks, stages", [(4, 2), (3, 3)])
def test_blocks_of_uneven_rings(mode, blocks, stages):
    """Blocks whose producers take different numbers of stages do not hold
    each other up (each runs in a batch of its own, as a kernel that waits
    on mbarriers must: in one batch, lanes of one block waiting on its ring
    stop the lock-step lanes of another that owe it arrivals)."""
    A = rng.standard_normal((blocks * BM, 5 * BK)).astype(np.float32)
    load = moye.make_tma_copy(moye.TMA_LOAD, A, tma_copy.swizzled_tile(BM, np.float32))
    want = np.zeros((blocks * BM, BK), np.float32)
    for b in range(blocks):
        rows = slice(b * BM, (b + 1) * BM)
        for k in [*range(b, 5)] * 2:
            want[rows] += A[rows, k * BK:(k + 1) * BK]
    out = np.full_like(want, np.nan)
    uneven_kernel[blocks, THREADS](out, load, 2, 5, ring_layout(stages), stages)
    np.testing.assert_array_equal(out, want)


WARPS = 4


@moye.kernel
def turns_kernel(out, rounds: moye.Constexpr, first_goes: moye.Constexpr):
    """The warps take turns in a ring, CUTLASS's way: warp w waits at named
    barrier 1 + w, a run-time id, and then lets warp w + 1 go (64 threads a
    barrier: the waiter and the one arriving). On its turn a warp's lane 0
    writes the shared counter's value and adds one: out[r, w] = r * WARPS +
    w, in order, only if each warp goes on while the others wait at theirs."""
    counter = moye.shared_array(moye.Int32, 1)
    warp = moye.warp_idx()
    if moye.thread_idx.x == 0:
        counter[0] = 0
    moye.sync_threads()
    if first_goes and warp == WARPS - 1:
        moye.named_barrier_arrive(1, 64)                # warp 0 goes first
    for r in range(rounds):
        moye.named_barrier_sync(1 + warp, 64)
        if moye.lane_idx() == 0:
            out[r, warp] = counter[0]
            counter[0] = counter[0] + 1
        if r < rounds - 1 or warp < WARPS - 1:
            moye.named_barrier_arrive(1 + (warp + 1) % WARPS, 64)


def test_warps_take_turns_at_named_barriers_of_run_time_ids(mode):
    """Each warp is a context of its own where named barriers take run-time
    ids: the ring completes in order (in lock-step the warps would wait for
    each other at once, a false deadlock), race-checked too."""
    out = np.full((3, WARPS), -1, np.int32)
    turns_kernel[2, 32 * WARPS](out, 3, True)
    np.testing.assert_array_equal(out, np.arange(3 * WARPS).reshape(3, WARPS))


def test_a_ring_nobody_starts_is_a_deadlock():
    """Without the last warp's first arrival every warp waits at its own
    barrier: the error names each."""
    sync = line_of(turns_kernel, "moye.named_barrier_sync(1 + warp, 64)")
    with pytest.raises(KernelRuntimeError, match=sync + r"\n  deadlock: ") as e:
        turns_kernel[1, 32 * WARPS](np.zeros((2, WARPS), np.int32), 2, False)
    for w in range(WARPS):
        assert re.search(r"thread \(%d, 0, 0\) of block \(0, 0, 0\) and 31 more wait at named "
                         r"barrier %d for 64 threads, of which 32 have arrived" % (32 * w, w + 1),
                         str(e.value)), str(e.value)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_run_time_barrier_ids_compile(arch):
    """bar.sync and bar.arrive take the id from a register."""
    from moye.backend.cuda import nvrtc
    source = turns_kernel.cuda_source(np.zeros((2, WARPS), np.int32), 2, True, block=128)
    assert re.search(r'bar\.sync %0, %1;\\n" :: "r"\(\w+ \+ 1\)', source) or \
        re.search(r'bar\.sync %0, %1;\\n" :: "r"\((?!1\))', source), source
    module = nvrtc.compile_cuda(source, ["moye_turns_kernel"], arch)
    assert module.cubin[:4] == b"\x7fELF"

"""Hostile inputs of the CPU backend and of launches on both backends: the
driver's launch limits, smem= and stream= of the wrong kind, the target
architecture's shared memory and instructions, barriers not every thread
reaches, reads of shared memory nothing wrote, integer division by zero,
and outputs NumPy cannot take writes into (issue 16, outcome 3)."""
import numpy as np
import pytest

import moye
from moye import KernelError, KernelRuntimeError, LaunchError, Layout
from moye.backend.cpu import race_checking

from .hostile import Hostile, check, ids


@moye.kernel
def copy_kernel(out, x):
    t = moye.thread_idx.x
    out[t] = x[t] * 2


def out_x(n=32, dtype=np.float32):
    rng = np.random.default_rng(16)
    return np.full(n, np.nan, dtype), rng.standard_normal(n).astype(dtype)


def copy(grid=1, block=32, smem=0, stream=None, out=None):
    o, x = out_x()
    copy_kernel[grid, block](o if out is None else out, x, smem=smem, stream=stream)


@moye.kernel
def big_shared_kernel(out, n: moye.Constexpr):
    s = moye.shared_array(moye.Float32, Layout(n))
    t = moye.thread_idx.x
    s[t] = 1.0
    moye.sync_threads()
    out[t] = s[t]


@moye.kernel
def hopper_kernel(out):
    bar = moye.mbarrier()
    if moye.thread_idx.x == 0:
        moye.mbarrier_init(bar, 32)
    moye.sync_threads()
    moye.mbarrier_arrive(bar)
    moye.mbarrier_wait(bar, 0)
    out[moye.thread_idx.x] = 1.0


@moye.kernel
def setmaxnreg_kernel(out):
    moye.setmaxnreg_dec(40)
    out[moye.thread_idx.x] = 1.0


def cpu_compile(kernel, *args, arch, block=32):
    return kernel.compile(*args, block=block, backend="cpu", arch=arch)


@moye.kernel
def barrier_kernel(out, what: moye.Constexpr):
    t = moye.thread_idx.x
    if what == "then_only":
        if t < 16:
            moye.sync_threads()
    elif what == "else_without":
        if t < 16:
            moye.sync_threads()
        else:
            out[t] = 2.0
    elif what == "twice_once":
        if t < 32:
            moye.sync_threads()
            moye.sync_threads()
        else:
            moye.sync_threads()
    elif what == "loop":
        for i in moye.range(t % 3):
            moye.sync_threads()
    elif what == "named_half":
        if t < 32:
            moye.named_barrier_sync(1, 64)
    out[t] = 1.0


def barrier(what):
    barrier_kernel[1, 64](np.zeros(64, np.float32), what)


@moye.kernel
def uninit_kernel(out, what: moye.Constexpr):
    s = moye.shared_array(moye.Float32, Layout(64))
    t = moye.thread_idx.x
    if what == "half":
        if t < 16:
            s[t] = 1.0
    elif what == "offset":
        s[t] = 1.0
    moye.sync_threads()
    out[t] = s[t + 32] if what == "offset" else s[t]


def uninit(what):
    with race_checking():
        uninit_kernel[1, 32](np.zeros(32, np.float32), what)


@moye.kernel
def div_kernel(out, x, d, what: moye.Constexpr):
    t = moye.thread_idx.x
    if what == "div":
        out[t] = x[t] // d
    elif what == "mod_some":
        out[t] = x[t] % (t - 3)


def divide(what, d):
    div_kernel[1, 16](np.zeros(16, np.int32), np.arange(1, 17, dtype=np.int32), d, what)


@moye.kernel
def store2d_kernel(out):
    t = moye.thread_idx.x
    out[t % 4, t // 4] = t


def read_only():
    o, x = out_x()
    o.flags.writeable = False
    copy_kernel[1, 32](o, x)


def broadcast():
    o = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (32,), (0,))
    copy_kernel[1, 32](o, out_x()[1])


def broadcast_2d():
    base = np.zeros((4, 1), np.int32)
    store2d_kernel[1, 32](np.lib.stride_tricks.as_strided(base, (4, 8), (4, 0)))


def compiled_call(**kw):
    o, x = out_x()
    ck = copy_kernel.compile(o, x, block=32, backend="cpu")
    ck(o, x, **{"grid": 1, **kw})


CASES = [
    # the driver's launch limits
    Hostile("a 0-d array indexed by the thread", lambda: copy(out=np.zeros((), np.float32)),
            KernelRuntimeError, r"out\[t\] = x\[t\] \* 2\n  out-of-bounds store of 'out' "
            r"\(index 1, 1 element\(s\); the buffer has 1\) by thread \(1, 0, 0\)"),
    Hostile("block of 2048 threads", lambda: copy(block=(32, 32, 2)), LaunchError,
            r"block \(32, 32, 2\) has 2048 threads; a block has at most 1024"),
    Hostile("block x of 1025", lambda: copy(block=1025), LaunchError,
            r"block \(1025, 1, 1\) has 1025 threads along x; .* at most \(1024, 1024, 64\)"),
    Hostile("block z of 65", lambda: copy(block=(1, 1, 65)), LaunchError,
            r"block \(1, 1, 65\) has 65 threads along z"),
    Hostile("grid x of 2**31", lambda: copy(grid=2 ** 31), LaunchError,
            r"grid \(2147483648, 1, 1\) has 2147483648 blocks along x; .* \(2147483647, "),
    Hostile("grid y of 65536", lambda: copy(grid=(1, 65536)), LaunchError,
            r"grid \(1, 65536, 1\) has 65536 blocks along y; .* 65535"),
    Hostile("grid z of 65536", lambda: copy(grid=(1, 1, 65536)), LaunchError,
            r"65536 blocks along z"),
    Hostile("grid of 0 blocks", lambda: copy(grid=0), LaunchError,
            r"grid must be a positive int .* got \(0,\)"),
    Hostile("launch config not (grid, block)", lambda: copy_kernel[4], LaunchError,
            r"copy_kernel\[grid, block\]\(\*args\) .* got copy_kernel\[4\]"),
    Hostile("launch() with a block of 2048", lambda: copy_kernel.launch(
        1, (1024, 2), out_x()), LaunchError, r"block \(1024, 2, 1\) has 2048 threads"),
    Hostile("compiled kernel called with a grid y of 70000", lambda: compiled_call(
        grid=(1, 70000)), LaunchError, r"grid \(1, 70000, 1\) has 70000 blocks along y"),
    # smem= and stream=
    Hostile("negative smem", lambda: copy(smem=-1), LaunchError, r"smem must be >= 0 .* got -1"),
    Hostile("float smem", lambda: copy(smem=1.5), LaunchError,
            r"smem must be an int .* got float 1.5"),
    Hostile("str smem", lambda: copy(smem="1024"), LaunchError, r"smem must be an int .* str"),
    Hostile("compiled kernel called with a negative smem", lambda: compiled_call(smem=-8),
            LaunchError, r"smem must be >= 0 .* got -8"),
    Hostile("str stream", lambda: copy(stream="default"), LaunchError,
            r"stream must be None, an int handle.* got str 'default'"),
    Hostile("float stream", lambda: copy(stream=0.0), LaunchError, r"stream must be .* float"),
    Hostile("smem beyond sm_90a's 227 KB", lambda: copy(smem=240 * 1024), LaunchError,
            r"needs 245760 bytes of shared memory \(0 in its shared arrays \+ smem=245760\), "
            r"more than the 232448 an sm_90a block may use"),
    # the target architecture
    Hostile("shared arrays beyond sm_90a", lambda: big_shared_kernel[1, 32](
        np.zeros(32, np.float32), 60000), LaunchError,
        r"needs 240000 bytes .* more than the 232448 an sm_90a block .*\n .*240000 bytes at "
        r"test_cpu_backend.py:\d+"),
    Hostile("shared arrays beyond an sm_86 target", lambda: cpu_compile(
        big_shared_kernel, np.zeros(32, np.float32), 30000, arch="sm_86"), LaunchError,
        r"needs 120000 bytes .* than the 101376 an sm_86 block"),
    Hostile("Hopper instruction on an sm_80 target", lambda: cpu_compile(
        hopper_kernel, np.zeros(32, np.float32), arch="sm_80"), KernelError,
        r"uses mbarrier_wait \(test_cpu_backend.py:\d+: moye.mbarrier_wait\(bar, 0\)\), a Hopper "
        r"instruction, but compiles for sm_80"),
    Hostile("setmaxnreg on sm_90 without a", lambda: cpu_compile(
        setmaxnreg_kernel, np.zeros(32, np.float32), arch="sm_90"), KernelError,
        r"uses setmaxnreg \(test_cpu_backend.py:\d+: .*\), which needs .* sm_90a, not sm_90"),
    Hostile("unknown target arch", lambda: cpu_compile(
        copy_kernel, *out_x(), arch="sm_99"), LaunchError, r"arch 'sm_99' is not one moye knows"),
    # barriers
    Hostile("sync_threads in an if without else", lambda: barrier("then_only"),
            KernelRuntimeError, r"test_cpu_backend.py:\d+: moye.sync_threads\(\)\n  sync_threads "
            r"is not reached by every thread of block \(0, 0, 0\): 16 of its 64 threads arrived "
            r"\(thread \(0, 0, 0\) .* 15 more\), thread \(16, 0, 0\) .* 47 more did not"),
    Hostile("sync_threads on one side of an if-else", lambda: barrier("else_without"),
            KernelRuntimeError, r"sync_threads\(\)\n  sync_threads is not reached .* 16 of its 64"),
    Hostile("sync_threads twice on one side, once on the other", lambda: barrier("twice_once"),
            KernelRuntimeError, r":\d+: moye.sync_threads\(\)\n  sync_threads is not reached by "
            r"every thread of block \(0, 0, 0\): 32 of its 64 threads arrived"),
    Hostile("sync_threads in a loop of per-thread trips", lambda: barrier("loop"),
            KernelRuntimeError, r"sync_threads is not reached .* 42 of its 64 threads arrived "
            r"\(thread \(1, 0, 0\)"),
    Hostile("named barrier half the threads reach", lambda: barrier("named_half"),
            KernelRuntimeError, r"named_barrier_sync\(1, 64\)\n  deadlock: thread \(0, 0, 0\) .* "
            r"wait at named barrier 1 for 64 threads, of which 32 have arrived"),
    # shared memory nothing wrote
    Hostile("read of shared memory nothing wrote", lambda: uninit("none"), KernelRuntimeError,
            r"thread \(0, 0, 0\) of block \(0, 0, 0\) reads element 0 of the shared array at "
            r"test_cpu_backend.py:\d+: .*shared_array.*, which no thread wrote"),
    Hostile("read of shared memory half the threads wrote", lambda: uninit("half"),
            KernelRuntimeError, r"thread \(16, 0, 0\) .* reads element 16 of the shared array"),
    Hostile("read past the written half of a shared array", lambda: uninit("offset"),
            KernelRuntimeError, r"thread \(0, 0, 0\) .* reads element 32 .* no thread wrote"),
    # integer division by zero
    Hostile("integer division by a zero argument", lambda: divide("div", 0), KernelRuntimeError,
            r"test_cpu_backend.py:\d+: out\[t\] = x\[t\] // d\n  integer division by zero by "
            r"thread \(0, 0, 0\) of block \(0, 0, 0\) \(and 15 more threads\)"),
    Hostile("integer remainder by zero in one thread", lambda: divide("mod_some", 1),
            KernelRuntimeError, r"x\[t\] % \(t - 3\)\n  integer remainder by zero by thread "
            r"\(3, 0, 0\) of block \(0, 0, 0\)$"),
    # outputs NumPy cannot take writes into
    Hostile("read-only output", read_only, LaunchError,
            r"kernel 'copy_kernel' writes argument 'out', but it is a read-only NumPy array"),
    Hostile("broadcast output", broadcast, LaunchError,
            r"writes argument 'out', but it is a broadcast NumPy array \(shape \(32,\), strides "
            r"\(0,\): mode 0 repeats one element 32 times\)"),
    Hostile("output broadcast along its second mode", broadcast_2d, LaunchError,
            r"'store2d_kernel' writes argument 'out', .* broadcast .* mode 1 repeats one element "
            r"8 times"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)


# -- edges that must work ----------------------------------------------------------------
@pytest.mark.parametrize("block", [1024, (1, 1024), (1, 16, 64)])
def test_blocks_at_the_limits_launch(block):
    @moye.kernel
    def count(out):
        t = moye.thread_idx.x + moye.block_dim.x * (moye.thread_idx.y + moye.block_dim.y *
                                                    moye.thread_idx.z)
        out[t] = t
    out = np.full(1024, -1, np.int32)
    count[1, block](out)
    np.testing.assert_array_equal(out, np.arange(1024))


def test_smem_and_stream_of_the_right_kinds_launch():
    o, x = out_x()
    copy_kernel[1, 32](o, x, smem=np.int64(1024), stream=0)
    np.testing.assert_array_equal(o, x * 2)


def test_read_only_input_is_fine():
    o, x = out_x()
    x.flags.writeable = False
    copy_kernel[1, 32](o, x)
    np.testing.assert_array_equal(o, x * 2)


@moye.kernel
def masked_div_kernel(out, x, d):
    t = moye.thread_idx.x
    if d[t] != 0:
        out[t] = x[t] // d[t]
    else:
        out[t] = x[t]


def test_division_by_zero_only_in_masked_out_threads_is_fine():
    rng = np.random.default_rng(3)
    x = rng.integers(-1000, 1000, 32).astype(np.int32)
    d = rng.integers(-5, 6, 32).astype(np.int32)
    d[::4] = 0
    out = np.full(32, -1, np.int32)
    masked_div_kernel[1, 32](out, x, d)
    safe = np.where(d == 0, 1, d)
    q = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)     # C's truncation
    np.testing.assert_array_equal(out, np.where(d == 0, x, q))


@moye.kernel
def fdiv_kernel(out, x, d: float):
    t = moye.thread_idx.x
    out[t] = x[t] / d


def test_float_division_by_zero_keeps_ieee():
    o, x = out_x()
    fdiv_kernel[1, 32](o, x, 0.0)
    np.testing.assert_array_equal(o, np.copysign(np.inf, x).astype(np.float32))


def test_a_hopper_kernel_runs_on_the_default_target():
    out = np.full(32, np.nan, np.float32)
    hopper_kernel[1, 32](out)
    np.testing.assert_array_equal(out, np.ones(32, np.float32))

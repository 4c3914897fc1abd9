"""`break` and `continue` in kernels: in loops that stay loops (run-time
bounds, static ranges traced once, `while`), in loops unrolled while
tracing, nested, in device functions, under divergent branches of a warp
and of warps that wait for each other; the values a loop carries out of a
jump; `while True` ended by a break; the C++ they become; the one case
refused."""
import numpy as np
import pytest

import moye
from moye import KernelError


def python_scan(row, stop_above, skip_below):
    """The reference of scan_kernel: sum and count of a row's values,
    skipping those below skip_below, stopping at the first above stop_above."""
    s, k = 0.0, 0
    for v in row:
        if v < skip_below:
            continue
        if v > stop_above:
            break
        s += float(v)
        k += 1
    return s, k


@moye.kernel
def scan_kernel(sums, counts, x, n, stop_above, skip_below):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    s = 0.0
    k = 0
    for j in range(n):                  # run-time bound: an IR loop
        if x[i, j] < skip_below:
            continue
        if x[i, j] > stop_above:
            break
        s += x[i, j]
        k += 1
    sums[i] = s
    counts[i] = k


@pytest.mark.parametrize("n", [0, 1, 17])
def test_break_and_continue_in_a_run_time_loop(n):
    x = np.random.default_rng(n).standard_normal((64, max(n, 1))).astype(np.float32)
    sums, counts = np.full(64, np.nan, np.float32), np.full(64, -1, np.int32)
    scan_kernel[2, 32](sums, counts, x, n, 1.2, -0.5)
    want = [python_scan(row[:n], 1.2, -0.5) for row in x]
    np.testing.assert_allclose(sums, [s for s, _ in want], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(counts, [k for _, k in want])


@moye.kernel
def static_range_kernel(sums, counts, x):
    i = moye.thread_idx.x
    s = 0.0
    k = 0
    for j in range(8):                  # a static range traced once: #pragma unroll
        if x[i, j] < -0.5:
            continue
        if x[i, j] > 1.2:
            break
        s += x[i, j]
        k += 1
    sums[i] = s
    counts[i] = k


def test_a_static_range_with_jumps_stays_one_loop():
    x = np.random.default_rng(1).standard_normal((32, 8)).astype(np.float32)
    sums, counts = np.full(32, np.nan, np.float32), np.full(32, -1, np.int32)
    static_range_kernel[1, 32](sums, counts, x)
    want = [python_scan(row, 1.2, -0.5) for row in x]
    np.testing.assert_allclose(sums, [s for s, _ in want], rtol=1e-6)
    np.testing.assert_array_equal(counts, [k for _, k in want])
    ir = static_range_kernel.ir(sums, counts, x, block=32)
    assert ir.count("for $") == 1 and "unroll=full" in ir
    assert ir.count("    break") == 1 and ir.count("    continue") == 1
    assert "unrolled while tracing" not in ir


@moye.kernel
def python_list_kernel(out, x):
    i = moye.thread_idx.x
    s = 0.0
    row = [x[i, 0], x[i, 1], x[i, 2], x[i, 3]]
    for j in range(4):                  # a Python list indexed by j: unrolled while tracing
        s = s + row[j]
        if j == 2:                      # a static condition: Python's own break
            break
    out[i] = s


def test_a_break_in_a_loop_unrolled_while_tracing_keeps_its_iterations_values():
    """The iteration that breaks counts: s holds x[0] + x[1] + x[2]."""
    x = np.random.default_rng(2).standard_normal((32, 4)).astype(np.float32)
    out = np.full(32, np.nan, np.float32)
    python_list_kernel[1, 32](out, x)
    np.testing.assert_array_equal(out, (x[:, 0] + x[:, 1]) + x[:, 2])


@moye.kernel
def python_list_continue_kernel(out, x):
    i = moye.thread_idx.x
    s = 0.0
    row = [x[i, 0], x[i, 1], x[i, 2], x[i, 3]]
    for j in range(4):
        s = s + row[j]
        if j % 2 == 1:
            continue
        s = s * 2.0
    out[i] = s


def test_a_continue_in_a_loop_unrolled_while_tracing_keeps_its_iterations_values():
    x = np.random.default_rng(3).standard_normal((32, 4)).astype(np.float32)
    out = np.full(32, np.nan, np.float32)
    python_list_continue_kernel[1, 32](out, x)
    want = np.zeros(32, np.float32)
    for j in range(4):
        want = want + x[:, j]
        if j % 2 == 0:
            want = want * np.float32(2.0)
    np.testing.assert_array_equal(out, want)


@moye.kernel
def run_time_break_in_unrolled_kernel(out, x):
    i = moye.thread_idx.x
    s = 0.0
    row = [x[i, 0], x[i, 1], x[i, 2], x[i, 3]]
    for j in range(4):
        if row[j] > 0.0:
            break
        s = s + row[j]
    out[i] = s


def test_a_run_time_break_in_a_loop_unrolled_while_tracing_is_refused():
    with pytest.raises(KernelError, match=r"(?s)test_jumps_cpu\.py:\d+: +break\n.*`break` under "
                       r"a run-time condition, in a loop that unrolls while tracing"):
        run_time_break_in_unrolled_kernel[1, 32](np.zeros(32, np.float32),
                                                 np.zeros((32, 4), np.float32))


@moye.kernel
def while_kernel(out, steps, x):
    """Collatz from x: steps to 1, stopping at 100 (break); odd values are
    counted twice (continue past the count of even ones)."""
    i = moye.thread_idx.x
    v = x[i]
    n = 0
    while v != 1:
        if n >= 100:
            break
        n += 1
        if v % 2 == 1:
            v = 3 * v + 1
            n += 1
            continue
        v = v // 2
    out[i] = v
    steps[i] = n


def test_break_and_continue_in_a_while():
    x = np.array([1, 2, 3, 6, 7, 27, 97, 871] * 4, np.int32)
    out, steps = np.full(32, -1, np.int32), np.full(32, -1, np.int32)
    while_kernel[1, 32](out, steps, x)
    for i, v in enumerate(x.tolist()):
        n = 0
        while v != 1:
            if n >= 100:
                break
            n += 1
            if v % 2 == 1:
                v, n = 3 * v + 1, n + 1
                continue
            v //= 2
        assert (out[i], steps[i]) == (v, n), i


@moye.kernel
def nested_kernel(out, x, n):
    """For each row, the first column index whose value exceeds the row's
    first value, searched in an inner loop; the outer loop stops after the
    first row with none (-1 for the rows after it)."""
    t = moye.thread_idx.x
    for r in range(n):
        out[t, r] = -1
    for r in range(n):
        found = -1
        for c in range(1, n):
            if x[t, r, c] > x[t, r, 0]:
                found = c
                break                       # the inner loop's
        out[t, r] = found
        if found < 0:
            break                           # the outer loop's


def nested_reference(x):
    """nested_kernel's result for x (threads, n, n)."""
    threads, n = x.shape[:2]
    want = np.full((threads, n), -1, np.int32)
    for t in range(threads):
        for r in range(n):
            hits = [c for c in range(1, n) if x[t, r, c] > x[t, r, 0]]
            want[t, r] = hits[0] if hits else -1
            if not hits:
                break
    return want


def test_nested_loops_jump_out_of_their_own_loop():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((32, 6, 6)).astype(np.float32)
    x[::3, 2, 1:] = -9                      # rows with no greater value
    out = np.full((32, 6), -7, np.int32)
    nested_kernel[1, 32](out, x, 6)
    np.testing.assert_array_equal(out, nested_reference(x))


@moye.func
def first_negative(x, i, n):
    """The first j with x[i, j] < 0, or n."""
    at = n
    for j in range(n):
        if x[i, j] < 0.0:
            at = j
            break
    return at


@moye.kernel
def device_function_kernel(out, x, n):
    i = moye.thread_idx.x
    out[i] = first_negative(x, i, n)


def test_a_break_in_a_device_function():
    x = np.abs(np.random.default_rng(5).standard_normal((32, 9))).astype(np.float32)
    for i in range(0, 32, 4):
        x[i, i % 9] = -1.0
    out = np.full(32, -1, np.int32)
    device_function_kernel[1, 32](out, x, 9)
    np.testing.assert_array_equal(out, [i % 9 if i % 4 == 0 else 9 for i in range(32)])


@moye.kernel
def assigned_in_a_branch_kernel(out, x, n):
    """A carried value last assigned inside a branch nested in the one that
    breaks: the value at the break is the inner branch's."""
    i = moye.thread_idx.x
    last = 0.0
    for j in range(n):
        v = x[i, j]
        if v > 0.5:
            if v > 1.0:
                last = v * 2.0
            else:
                last = v
            break
        last = -v
    out[i] = last


def test_a_value_assigned_in_an_inner_branch_before_a_break():
    x = np.random.default_rng(6).standard_normal((32, 5)).astype(np.float32)
    out = np.full(32, np.nan, np.float32)
    assigned_in_a_branch_kernel[1, 32](out, x, 5)
    want = []
    for row in x:
        last = np.float32(0.0)
        for v in row:
            if v > 0.5:
                last = v * np.float32(2.0) if v > 1.0 else v
                break
            last = -v
        want.append(last)
    np.testing.assert_array_equal(out, want)


@moye.kernel
def waiting_warps_kernel(out, n):
    """Warp 0 waits at a named barrier for warp 1's arrival in every
    iteration (the CPU backend runs the branches' sides as contexts of their
    own); warp 1 leaves the loop at iteration 2 (its side's break), warp 0
    after its barrier there."""
    t = moye.thread_idx.x
    s = 0
    for j in range(n):
        if moye.warp_idx() == 0:
            moye.named_barrier_sync(1, 64)
            s += 1
            if j == 2:
                break
        else:
            moye.named_barrier_arrive(1, 64)
            if j == 2:
                break
            s += 10
    out[t] = s


def test_a_break_on_the_side_of_a_branch_that_runs_as_its_own_context():
    out = np.full(64, -1, np.int32)
    waiting_warps_kernel[1, 64](out, 6)
    np.testing.assert_array_equal(out, [3] * 32 + [20] * 32)


@moye.kernel
def work_queue_kernel(out, counter, n):
    """Blocks take tiles from a global counter until none is left (`while
    True` that a run-time break ends: a kernel loop)."""
    t = moye.thread_idx.x
    s = moye.shared_array(moye.Int32, 1)
    while True:
        if t == 0:
            s[0] = moye.atomic_add(counter, 0, 1)
        moye.sync_threads()
        tile = s[0]
        moye.sync_threads()
        if tile >= n:
            break
        out[tile, t] = out[tile, t] + tile * 10 + t + 1


def test_while_true_that_a_run_time_break_ends_is_a_kernel_loop():
    out, counter = np.zeros((40, 32), np.int32), np.zeros(1, np.int32)
    work_queue_kernel[3, 32](out, counter, 40)
    np.testing.assert_array_equal(out, np.arange(40)[:, None] * 10 + np.arange(32) + 1)
    assert counter[0] == 43                  # 40 tiles, then one look past the end a block
    ir = work_queue_kernel.ir(out, counter, 40, block=32)
    assert "for $" in ir and "    break" in ir and "unrolled while tracing" not in ir


@moye.kernel
def static_while_true_kernel(out):
    seen = []
    k = 0
    while True:
        seen.append(k)
        k += 1
        if k == 3:
            break
    out[0] = len(seen) * 100 + seen[-1] * 10 + k


def test_while_true_whose_body_changes_python_objects_runs_while_tracing():
    out = np.zeros(1, np.int32)
    static_while_true_kernel[1, 1](out)
    assert out[0] == 323
    assert "unrolled while tracing: the body changes Python objects" in \
        static_while_true_kernel.ir(out, block=1)


@moye.kernel
def ping_pong_kernel(out, x, n):
    """`while True` swapping two shared buffers until a run-time count: the
    arrays it carries stay pointers of a kernel loop."""
    i = moye.thread_idx.x
    a = moye.shared_array(moye.Float32, 64)
    b = moye.shared_array(moye.Float32, 64)
    a[i] = x[i]
    moye.sync_threads()
    src, dst = a, b
    rounds = 0
    while True:
        dst[(i + 1) % 64] = src[i] * 2.0
        moye.sync_threads()
        src, dst = dst, src
        rounds += 1
        if rounds >= n:
            break
    out[i] = src[i]


@pytest.mark.parametrize("n", [1, 5])
def test_while_true_carries_swapped_arrays(n):
    x = np.arange(64, dtype=np.float32)
    out = np.full(64, np.nan, np.float32)
    ping_pong_kernel[1, 64](out, x, n)
    np.testing.assert_array_equal(out, np.roll(x, n) * 2.0 ** n)
    assert "unrolled while tracing" not in ping_pong_kernel.ir(out, x, n, block=64)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_source_and_nvrtc(arch):
    from moye.backend.cuda import nvrtc
    x = np.zeros((64, 4), np.float32)
    args = (np.zeros(64, np.float32), np.zeros(64, np.int32), x, 4, 1.0, 0.0)
    source = scan_kernel.cuda_source(*args, block=32)
    body = source[source.index("moye_scan_kernel"):]
    assert body.count("continue;") == 1 and body.count("break;") == 1
    assert nvrtc.compile_cuda(source, ["moye_scan_kernel"], arch).cubin[:4] == b"\x7fELF"


def test_the_verifier_refuses_a_jump_outside_a_loop():
    from moye import ir
    from moye.types import Int32
    kernel = ir.Kernel("k", [], [ir.If(ir.Value(Int32, "c"), [ir.Jump("break")], [])])
    kernel.body[0].cond = True
    with pytest.raises(KernelError, match="a break outside any loop"):
        ir.verify(kernel)
    with pytest.raises(KernelError, match="a Jump is a break, a continue or a return"):
        ir.verify(ir.Kernel("k", [], [ir.For(ir.Var(Int32, "i"), 0, 4, 1, [ir.Jump("goto")])]))
    ir.verify(ir.Kernel("k", [], [ir.If(True, [ir.Jump("return")], [])]))  # anywhere

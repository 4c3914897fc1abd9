"""A kernel's own `return` under run-time conditions: the threads that reach
it end (C++'s `return;`), the others go on; a sync_threads or cluster
barrier after it waits only for the threads still running (PTX's bar.sync
and barrier.cluster count exited threads as arrived); a warp-wide
instruction that would read a returned lane is an error naming it. Guards,
returns inside run-time loops, static loops and `while True`, the value a
name has after an `if` whose other side returned, and the C++."""
import numpy as np
import pytest

import moye
from moye import KernelRuntimeError, Layout

POISON = -12345.0


@moye.kernel
def guarded_scale(out, x, n, scale):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    if i >= n:
        return
    out[i] = x[i] * scale


@pytest.mark.parametrize("n", [1, 37, 64, 95])
def test_a_guard_ends_the_threads_past_n(n):
    x = np.random.default_rng(n).standard_normal(96).astype(np.float32)
    out = np.full(96, POISON, np.float32)
    guarded_scale[3, 32](out, x, n, 1.5)
    np.testing.assert_array_equal(out[:n], x[:n] * np.float32(1.5))
    assert (out[n:] == POISON).all()                # the threads past n stored nothing


@moye.kernel
def reverse_chunks(x, n):
    # each block reverses its chunk of 32 through shared memory; the barrier
    # after the guard waits only for the threads that did not return
    s = moye.shared_array(moye.Float32, Layout(32))
    t = moye.thread_idx.x
    i = moye.block_idx.x * 32 + t
    if i >= n:
        return
    s[t] = x[i]
    moye.sync_threads()
    last = min(n - moye.block_idx.x * 32, 32) - 1
    x[i] = s[last - t]


@pytest.mark.parametrize("n", [32, 40, 63, 96])
def test_sync_threads_after_a_guard_waits_for_the_threads_left(n):
    x = np.random.default_rng(n).standard_normal(96).astype(np.float32)
    want = np.concatenate([x[k:min(k + 32, n)][::-1] for k in range(0, n, 32)] + [x[n:]])
    with moye.backend.cpu.race_checking():
        reverse_chunks[3, 32](x, n)
    np.testing.assert_array_equal(x, want)


@moye.kernel
def barrier_beside_a_return(x, n):
    # the threads past n return on the else side while the others wait at
    # a barrier on the then side (the CPU backend runs the sides apart)
    s = moye.shared_array(moye.Float32, Layout(8))
    t = moye.thread_idx.x
    if t < n:
        s[t] = x[t]
        moye.sync_threads()
        x[t] = s[n - 1 - t]
    else:
        return


def test_a_barrier_on_one_side_of_an_if_whose_other_side_returns():
    x = np.arange(8, dtype=np.float32) + 0.5
    with moye.backend.cpu.race_checking():
        barrier_beside_a_return[1, 8](x, 5)
    assert x.tolist() == [4.5, 3.5, 2.5, 1.5, 0.5, 5.5, 6.5, 7.5]


@moye.kernel
def first_negative(out, x, n):
    # each thread walks its row; at the first negative value it stores the
    # prefix sum so far and ends; a row without one stores its sum + 1000
    t = moye.thread_idx.x
    acc = 0.0
    for k in range(n):                  # a run-time loop
        v = x[t, k]
        if v < 0.0:
            out[t] = acc
            return
        acc += v
    out[t] = acc + 1000.0


def test_return_inside_a_run_time_loop():
    rng = np.random.default_rng(3)
    x = rng.uniform(0.5, 1.0, (8, 6)).astype(np.float32)
    x[1, 0] = x[2, 3] = x[5, 5] = x[5, 2] = -1.0
    out = np.full(8, POISON, np.float32)
    first_negative[1, 8](out, x, 6)
    want = []
    for row in x:
        neg = np.nonzero(row < 0)[0]
        want.append(row[:neg[0]].sum(dtype=np.float32) if neg.size else
                    row.sum(dtype=np.float32) + 1000)
    np.testing.assert_allclose(out, want, rtol=1e-6)


@moye.kernel
def first_zero(out, x):
    t = moye.thread_idx.x
    for k in moye.range_constexpr(4):   # unrolled while tracing: each `return` is C++'s
        if x[t, k] == 0.0:
            out[t] = k
            return
    out[t] = -1


@moye.kernel
def first_zero_while(out, x):
    t = moye.thread_idx.x
    k = 0
    while True:
        if x[t, k] == 0.0:
            out[t] = k
            return
        k += 1
        if k == 4:
            break
    out[t] = -1


@pytest.mark.parametrize("kernel", [first_zero, first_zero_while], ids=["static", "while"])
def test_return_inside_static_and_while_loops(kernel):
    x = np.ones((5, 4), np.float32)
    x[0, 1] = x[2, 0] = x[2, 2] = x[3, 3] = 0.0
    out = np.full(5, -99, np.int32)
    kernel[1, 5](out, x)
    assert out.tolist() == [1, -1, 0, 3, -1]


@moye.kernel
def value_of_the_side_that_goes_on(out, x, n):
    t = moye.thread_idx.x
    if t >= n:
        return
    else:
        v = x[t] * 3.0                  # assigned only on the side that goes on
    out[t] = v


def test_a_name_takes_the_value_of_the_side_that_goes_on():
    x = np.arange(8, dtype=np.float32) + 0.5
    out = np.full(8, POISON, np.float32)
    value_of_the_side_that_goes_on[1, 8](out, x, 5)
    assert out.tolist() == [1.5, 4.5, 7.5, 10.5, 13.5] + [POISON] * 3
    source = value_of_the_side_that_goes_on.cuda_source(out, x, 5, block=8)
    body = source[source.index("moye_value_of_the_side_that_goes_on"):]
    assert body.count("return;") == 1


@moye.kernel
def break_or_keep(out, x, n):
    t = moye.thread_idx.x
    last = -1.0
    for k in range(n):
        if x[t, k] > 10.0:
            break
        else:
            w = x[t, k] * 2.0           # a break's other side: the loop goes on with it
        last = w
    out[t] = last


def test_a_break_side_leaves_the_name_to_the_other_side():
    x = np.array([[1, 2, 30, 4], [5, 6, 7, 8]], np.float32)
    out = np.full(2, POISON, np.float32)
    break_or_keep[1, 2](out, x, 4)
    assert out.tolist() == [4.0, 16.0]


@moye.kernel
def sync_in_one_branch(x, n):
    t = moye.thread_idx.x
    if t >= n:
        return
    if t == 0:
        moye.sync_threads()
    x[t] = 1.0


def test_a_barrier_the_running_threads_miss_names_them():
    with pytest.raises(KernelRuntimeError, match=r"test_kernel_return_cpu\.py:\d+: "
                       r"moye\.sync_threads\(\)\n.*1 of its 8 threads arrived .*, 4 had "
                       r"returned, thread \(1, 0, 0\) of block \(0, 0, 0\) and 2 more did not"):
        sync_in_one_branch[1, 8](np.zeros(8, np.float32), 4)


@moye.kernel
def reduce_after_return(out, x, n):
    t = moye.thread_idx.x
    if t >= n:
        return
    out[t] = moye.warp_reduce(x[t], "sum")


def test_a_warp_collective_after_a_return_is_an_error():
    with pytest.raises(KernelRuntimeError, match=r"lanes 20-31 are inactive \(they returned: "
                       r"what the instruction reads of a returned lane is undefined"):
        reduce_after_return[1, 32](np.zeros(32, np.float32), np.ones(32, np.float32), 20)
    out = np.full(32, POISON, np.float32)
    reduce_after_return[1, 32](out, np.ones(32, np.float32), 32)   # no lane returned
    assert (out == 32.0).all()


@moye.kernel
def cluster_after_return(out, n):
    t = moye.thread_idx.x
    if t >= n:
        return
    moye.cluster_sync()
    out[moye.block_idx.x * 4 + t] = moye.block_rank_in_cluster() + 1


def test_a_cluster_barrier_waits_for_the_threads_left():
    out = np.full(8, -1, np.int32)
    cluster_after_return[2, 4, 2](out, 3)
    assert out.tolist() == [1, 1, 1, -1, 2, 2, 2, -1]


@moye.kernel
def static_return(out, early: moye.Constexpr):
    out[0] = 1
    if early:                           # static: Python's return, tracing ends here
        return
    out[1] = 2


def test_a_static_return_ends_tracing():
    out = np.zeros(2, np.int32)
    static_return[1, 1](out, True)
    assert out.tolist() == [1, 0]
    static_return[1, 1](out, False)
    assert out.tolist() == [1, 2]
    lines = [line.strip() for line in static_return.ir(out, True).splitlines()]
    assert "return" not in lines and len(lines) == 2      # the header and one store


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ir_and_cuda_source(arch):
    from moye.backend.cuda import nvrtc
    x = np.zeros(96, np.float32)
    text = reverse_chunks.ir(x, 40)
    assert "\n    return\n" in text
    source = reverse_chunks.cuda_source(x, 40, block=32)
    body = source[source.index("moye_reverse_chunks"):]
    assert body.count("return;") == 1 and body.count("__syncthreads()") == 1
    assert nvrtc.compile_cuda(source, ["moye_reverse_chunks"], arch).cubin[:4] == b"\x7fELF"


@moye.kernel
def votes_after_return(out, x, n):
    t = moye.thread_idx.x
    if t >= n:
        return
    big = x[t] > 0.5
    out[t, 0] = moye.ballot(big)
    out[t, 1] = moye.vote_any(big)
    out[t, 2] = moye.vote_all(big)
    out[t, 3] = moye.match_any(t % 3)


def test_votes_after_returns_leave_the_returned_lanes_out():
    """Exited lanes take no part in a vote, a ballot or a match (PTX: the
    non-exited threads of the mask), as the lanes a partial warp lacks."""
    x = np.zeros(32, np.float32)
    x[[1, 4, 30]] = 1.0                         # lane 30 returns: it does not vote
    out = np.full((32, 4), -1, np.int64)
    votes_after_return[1, 32](out, x, 20)
    live = out[:20]
    assert (live[:, 0] == (1 << 1) | (1 << 4)).all()
    assert (live[:, 1] == 1).all() and (live[:, 2] == 0).all()
    for t in range(20):
        assert live[t, 3] == sum(1 << u for u in range(20) if u % 3 == t % 3)
    assert (out[20:] == -1).all()
    x[:20] = 1.0
    votes_after_return[1, 32](out, x, 20)
    assert (out[:20, 2] == 1).all()             # every lane that did not return: all

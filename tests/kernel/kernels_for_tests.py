"""Kernels used by the kernel tests (kept in a file: the rewrite reads source)."""
import moye
from moye import Layout, MoYeArray, make_fragment_like, size


@moye.kernel
def scale_loop(out, x, n):
    acc = 0.0
    for i in range(n):
        acc = acc + x[i]
    out[0] = acc


@moye.kernel
def static_unroll(out, x):
    total = 0.0
    for i in range(4):
        total = total + x[i]
    out[0] = total


@moye.kernel
def static_unroll_constexpr(out, x):
    total = 0.0
    for i in moye.range_constexpr(4):
        total = total + x[i]
    out[0] = total


@moye.kernel
def swap_buffers(out, x, n):
    read = moye.shared_array(x.dtype, Layout(32))
    write = moye.shared_array(x.dtype, Layout(32))
    t = moye.thread_idx.x
    read[t] = x[t]
    for k in range(n):
        write[t] = read[t] * 2.0
        moye.sync_threads()
        read, write = write, read
    out[t] = read[t]


@moye.kernel
def branch(out, x):
    t = moye.thread_idx.x
    if t < 16:
        v = x[t] * 2.0
    else:
        v = x[t] + 1.0
    out[t] = v


@moye.kernel
def roles(out, n):
    """Both branches start from `k` as it was before the if, although only the
    then-branch's change of it is (not) used after (the warp-specialized shape)."""
    t = moye.thread_idx.x
    k = 1
    if t < 16:
        for i in range(n):
            k = k * 2
        out[t] = k
    else:
        for i in range(n):
            k = k + 3
        out[t] = k


@moye.kernel
def while_loop(out, n):
    i = 0
    s = 0
    while i < n:
        s = s + i
        i = i + 1
    out[0] = s


@moye.kernel
def bad_shape(out, x):
    a = moye.shared_array(x.dtype, Layout((4, 8)))
    b = moye.shared_array(x.dtype, Layout((8, 4)))
    moye.copyto(a, b)


@moye.kernel
def dynamic_fragment_index(out, x):
    frag = make_fragment_like(Layout(4), moye.Float32)
    frag[moye.thread_idx.x] = 1.0
    out[0] = frag[0]


@moye.kernel
def and_or(out, x, n):
    t = moye.thread_idx.x
    if t < n and t % 2 == 0:
        out[t] = x[t]


@moye.kernel
def array_ops(out, x):
    from moye import copyto, fill_, tile
    t = moye.thread_idx.x
    g = tile(MoYeArray(x), (4, 8), (0, t))
    r = make_fragment_like(g)
    copyto(r, g)
    r[:] = r * 2.0 + 1.0
    copyto(tile(MoYeArray(out), (4, 8), (0, t)), r)
    s = moye.shared_array(x.dtype, Layout((8, 4)))
    fill_(s, 0.0)
    moye.cushow("thread", t, "first", r[0])


# global atomics (tests/kernel/test_atomics_cpu.py, tests/gpu/test_atomics_gpu.py)
@moye.kernel
def histogram(counts, keys, n):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    if i < n:
        moye.atomic_add(counts, keys[i], 1)


@moye.kernel
def tickets(counter, order, n):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    if i < n:
        order[i] = moye.atomic_add(counter, 0, 1)


@moye.kernel
def vote(out, x):
    """out[i] = the ballot of x > 0 over thread i's warp."""
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    out[i] = moye.ballot(x[i] > 0)

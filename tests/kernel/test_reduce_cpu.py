"""moye.warp_reduce, moye.block_reduce and moye.reduce on the CPU backend:
every thread's result against a NumPy reference (float64 sums), for block
sizes with whole and partial warps, each op, user functions, sub-warp
widths, repeated and looped calls under the race checker, fragments on the
host and in kernels, bad inputs; and NVRTC compiling them."""
import numpy as np
import pytest

import moye
from moye.backend.cpu import race_checking
from moye.compiler.frontend import BACKENDS

from . import helpers_for_func as h


@moye.kernel
def reduce_both(out_w, out_b, x, op: moye.Constexpr):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    v = x[i]
    out_w[i] = moye.warp_reduce(v, op)
    out_b[i] = moye.block_reduce(v, op)


def absmax(a, b):
    """A user op with a run-time `if` (rewritten: a plain def)."""
    r = b
    if abs(a) > abs(b):
        r = a
    return r


@moye.func
def smaller(a, b):
    return moye.minimum(a, b)


NUMPY = {"sum": np.sum, "max": np.max, "min": np.min,
         "and": np.bitwise_and.reduce, "or": np.bitwise_or.reduce,
         "xor": np.bitwise_xor.reduce,
         absmax: lambda v: v[np.argmax(np.abs(v))], smaller: np.min}


def reference(x, block, group, op):
    """Each group of `group` consecutive threads of each block (the last
    one of a block may be shorter) reduced with NumPy, in float64 for sums."""
    want = np.empty(x.size, np.float64 if x.dtype.kind == "f" else x.dtype)
    for start in range(0, x.size, block):
        for g in range(start, start + block, group):
            stop = min(g + group, start + block)
            part = x[g:stop].astype(np.float64) if x.dtype.kind == "f" else x[g:stop]
            want[g:stop] = NUMPY[op](part)
    return want


def data(dtype, n, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-4.0, 4.0, n).astype(dtype)
    return rng.integers(-2**30, 2**30, n).astype(dtype)


def check(out, want, x):
    if x.dtype.kind == "f":
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-5, atol=1e-4)
    else:
        np.testing.assert_array_equal(out, want)


OP_TYPES = [("sum", np.float32), ("max", np.float32), ("min", np.float32), ("and", np.int32),
            ("or", np.int32), ("xor", np.int32), (absmax, np.float32), (smaller, np.float32)]


@pytest.mark.parametrize("block", [32, 64, 96, 128, 48, 1000, 1024])
@pytest.mark.parametrize("op,dtype", OP_TYPES, ids=lambda p: getattr(p, "__name__", str(p)))
def test_warp_and_block_reduce_match_numpy(block, op, dtype):
    grid = 2
    x = data(dtype, grid * block, block)
    poison = np.nan if np.dtype(dtype).kind == "f" else -12345
    out_w = np.full(x.size, poison, dtype)
    out_b = np.full(x.size, poison, dtype)
    reduce_both[grid, block](out_w, out_b, x, op)
    check(out_w, reference(x, block, 32, op), x)
    check(out_b, reference(x, block, block, op), x)


@pytest.mark.parametrize("dtype,op", [(np.float64, "sum"), (np.float16, "sum"),
                                      (np.int64, "max"), (np.uint32, "min"), (np.uint32, "and"),
                                      (np.int8, "sum"), (np.float16, "max")])
def test_other_element_types_reduce_in_32_bits_or_more(dtype, op):
    block = 96
    x = data(dtype, block, 7)
    if np.dtype(dtype) == np.int8:
        x = np.random.default_rng(7).integers(-3, 4, block).astype(np.int8)
    out_w = np.zeros(block, dtype)
    out_b = np.zeros(block, dtype)
    reduce_both[1, block](out_w, out_b, x, op)
    if dtype == np.float16:         # summed in float32, rounded once to half
        want = reference(x, block, block, op).astype(np.float16)
        np.testing.assert_allclose(out_b.astype(np.float64), want.astype(np.float64),
                                   rtol=2e-3, atol=2e-3)
    else:
        check(out_b, reference(x, block, block, op).astype(dtype), x)
        check(out_w, reference(x, block, 32, op).astype(dtype), x)


@moye.kernel
def by_width(out, x, width: moye.Constexpr, op: moye.Constexpr):
    i = moye.thread_idx.x
    out[i] = moye.warp_reduce(x[i], op, width=width)


@pytest.mark.parametrize("block", [64, 48, 40])
@pytest.mark.parametrize("width", [1, 2, 4, 8, 16, 32])
@pytest.mark.parametrize("op", ["sum", absmax])
def test_warp_reduce_over_groups_of_width_lanes(block, width, op):
    x = data(np.float32, block, width)
    out = np.full(block, np.nan, np.float32)
    by_width[1, block](out, x, width, op)
    check(out, reference(x, block, width, op), x)


def test_booleans_reduce_with_and_or_xor_max():
    @moye.kernel
    def votes(out, x):
        t = moye.thread_idx.x
        p = x[t] > 0
        out[0, t] = moye.block_reduce(p, "and")
        out[1, t] = moye.block_reduce(p, "or")
        out[2, t] = moye.warp_reduce(p, "xor")
        out[3, t] = moye.warp_reduce(x[t] > -100, "and")

    x = data(np.float32, 80, 3)
    out = np.full((4, 80), 7, np.int32)
    votes[1, 80](out, x)
    p = x > 0
    assert (out[0] == 0).all() and (out[1] == 1).all()
    want = [np.bitwise_xor.reduce(p[g:g + 32]) for g in (0, 32, 64)]
    np.testing.assert_array_equal(out[2], np.repeat(want, 32)[:80])
    assert (out[3] == 1).all()


@moye.kernel
def repeated(out, x, n):
    t = moye.thread_idx.x
    v = x[t]
    out[0, t] = moye.block_reduce(v, "sum")
    out[1, t] = moye.block_reduce(v * 2.0, "max")           # right after: its own scratch
    acc = 0.0
    big = -1000.0
    for i in range(n):                                       # a run-time loop
        acc = acc + moye.block_reduce(v + i, "sum")
        big = moye.maximum(big, moye.block_reduce(v - i, absmax))
    out[2, t] = acc
    out[3, t] = big


@pytest.mark.parametrize("block", [64, 48, 1024])
def test_reductions_in_a_row_and_in_a_run_time_loop_are_race_free(block):
    x = data(np.float32, block, 11)
    out = np.full((4, block), np.nan, np.float32)
    n = 3
    with race_checking():
        repeated[1, block](out, x, n)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out[0], x64.sum(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out[1], 2 * x64.max(), rtol=1e-6)
    np.testing.assert_allclose(out[2], sum((x64 + i).sum() for i in range(n)), rtol=1e-5,
                               atol=1e-3)
    want = max(NUMPY[absmax](x64 - i) for i in range(n))
    np.testing.assert_allclose(out[3], want, rtol=1e-6)


def test_the_loop_needs_its_closing_barrier(monkeypatch):
    """Without the barrier that ends a looped call, the race checker sees the
    next iteration's write of the scratch against this one's reads."""
    from moye.device import reductions as red
    real = red.current

    class NoLoops:
        def __init__(self, b):
            self.b = b

        def __getattr__(self, name):
            return [] if name == "loop_kinds" else getattr(self.b, name)

    monkeypatch.setattr(red, "current", lambda: NoLoops(real()))

    @moye.kernel
    def looped(out, x, n):
        t = moye.thread_idx.x
        acc = 0.0
        for i in range(n):
            acc = acc + moye.block_reduce(x[t] + i, "sum")
        out[t] = acc

    with race_checking(), pytest.raises(moye.KernelRuntimeError, match="race"):
        looped[1, 64](np.zeros(64, np.float32), np.ones(64, np.float32), 3)


def test_a_missing_source_lane_of_a_partial_warp_reads_a_poison():
    @moye.kernel
    def across(out, x):
        t = moye.thread_idx.x
        out[t] = moye.shfl_xor_sync(x[t], 16)

    x = data(np.float32, 48, 5)
    out = np.zeros(48, np.float32)
    across[1, 48](out, x)
    np.testing.assert_array_equal(out[:32], x[np.arange(32) ^ 16])
    np.testing.assert_array_equal(out[32:], np.full(16, np.nan, np.float32))


# -- fragments -------------------------------------------------------------------------------

@pytest.mark.parametrize("modes", [None, 0, 1, 2, (0, 2), (1, 2), -1, [0, 1, 2]])
@pytest.mark.parametrize("op", ["sum", "max", "min", absmax])
def test_fragment_reduce_on_the_host(modes, op):
    a = moye.MoYeArray(data(np.float32, 24, 1), ((2, 2), 3, 2))
    values = a.numpy().astype(np.float64)                   # (4, 3, 2)
    axes = (0, 1, 2) if modes is None else (modes,) if isinstance(modes, int) else tuple(modes)
    axes = tuple(m % 3 for m in axes)
    if op == absmax:
        moved = np.moveaxis(values, axes, tuple(range(-len(axes), 0)))
        flat = moved.reshape(moved.shape[:moved.ndim - len(axes)] + (-1,))
        want = np.take_along_axis(flat, np.abs(flat).argmax(-1)[..., None], -1)[..., 0]
    else:
        want = NUMPY[op](values, axis=axes)
    got = moye.reduce(a, op, modes=modes)
    if len(axes) == 3:
        assert np.ndim(got) == 0 and np.asarray(got).dtype == np.float32
        np.testing.assert_allclose(float(got), want, rtol=1e-6)
    else:
        assert isinstance(got, moye.MoYeArray) and got.dtype == moye.Float32
        values = np.reshape(got.numpy(), want.shape, order="F")     # a kept (2,2) mode: 4
        np.testing.assert_allclose(values.astype(np.float64), want, rtol=1e-6)
    if modes == 1:
        assert got.shape == ((2, 2), 2)


def test_fragment_reduce_of_integers_and_halves_on_the_host():
    a = moye.MoYeArray(np.arange(1, 13, dtype=np.int32), (3, 4))
    assert moye.reduce(a, "xor", 0).numpy().tolist() == [
        int(np.bitwise_xor.reduce(a.numpy()[:, j])) for j in range(4)]
    h16 = moye.MoYeArray(np.full(8, 0.1, np.float16), (8,))
    s = moye.reduce(h16, "sum")
    assert s.dtype == np.float16 and abs(float(s) - 0.8) < 1e-3      # summed in float32


@moye.kernel
def fragment_rows(out, row_max, total, x):
    t = moye.thread_idx.x
    mine = moye.tile(moye.MoYeArray(x), (4, 8), (0, t))         # a (4, 8) tile per thread
    frag = moye.make_fragment_like(mine)
    moye.copyto(frag, mine)
    sums = moye.reduce(frag, "sum", modes=1)                     # (4,) per thread
    maxes = moye.reduce(frag, absmax, modes=1)
    for i in range(4):
        out[i, t] = sums[i]
        row_max[i, t] = maxes[i]
    total[t] = moye.block_reduce(moye.reduce(frag, "sum"), "sum")


def test_fragment_reduce_in_a_kernel_then_across_the_block():
    threads = 48
    x = data(np.float32, 4 * 8 * threads, 9).reshape(4, 8 * threads, order="F")
    out = np.full((4, threads), np.nan, np.float32)
    row_max = np.full((4, threads), np.nan, np.float32)
    total = np.full(threads, np.nan, np.float32)
    fragment_rows[1, threads](out, row_max, total, x)
    x64 = x.astype(np.float64).reshape(4, threads, 8)
    tiles = np.stack([x.astype(np.float64)[:, 8 * t:8 * t + 8] for t in range(threads)], 1)
    np.testing.assert_allclose(out, tiles.sum(-1), rtol=1e-5, atol=1e-5)
    want = np.take_along_axis(tiles, np.abs(tiles).argmax(-1)[..., None], -1)[..., 0]
    np.testing.assert_array_equal(row_max, want.astype(np.float32))
    np.testing.assert_allclose(total, x64.sum(), rtol=1e-5)


# -- bad inputs ------------------------------------------------------------------------------

def trace_with(body, block=32):
    @moye.kernel
    def k(out, x):
        body(out, x, moye.thread_idx.x)
    return lambda: k[1, block](np.zeros(block, np.float32), np.ones(block, np.float32))


@pytest.mark.parametrize("body,match", [
    (lambda o, x, t: moye.warp_reduce(x[t], "mean"), "op must be one of 'sum'.*got 'mean'"),
    (lambda o, x, t: moye.block_reduce(x[t], 3), "op must be one of.*got int 3"),
    (lambda o, x, t: moye.block_reduce(x, "sum"), "x must be one number per thread.*an array"
                                                   ".*moye.reduce first"),
    (lambda o, x, t: moye.warp_reduce("a", "sum"), "x must be one number per thread.*str"),
    (lambda o, x, t: moye.warp_reduce(x[t], "and"), "op 'and' takes integers or Bool, got "
                                                    "Float32"),
    (lambda o, x, t: moye.warp_reduce(x[t] > 0, "sum"), "'sum' of Bool.*cast them to Int32"),
    (lambda o, x, t: moye.warp_reduce(x[t], "sum", width=3), "width must be a power of two"),
    (lambda o, x, t: moye.warp_reduce(x[t], "sum", width=64), "width must be a power of two"),
    (lambda o, x, t: moye.warp_reduce(x[t], "sum", width=t), "width must be a power of two"),
    (lambda o, x, t: moye.block_reduce(x[t], lambda a, b: "no"), "op <lambda> returned 'no', "
                                                                 "not a number"),
])
def test_bad_reduction_inputs_are_clear_errors_naming_the_line(body, match):
    with pytest.raises(moye.MoyeError, match=r"(?s)in kernel 'k'.*test_reduce_cpu.py.*" + match):
        trace_with(body)()


def test_bad_fragment_reductions_are_clear_errors():
    a = moye.MoYeArray(np.arange(6.0, dtype=np.float32), (2, 3))
    with pytest.raises(moye.ShapeError, match=r"modes 2 must be distinct modes of a rank-2"):
        moye.reduce(a, "sum", modes=2)
    with pytest.raises(moye.ShapeError, match=r"modes \(0, 0\) must be distinct"):
        moye.reduce(a, "sum", modes=(0, 0))
    with pytest.raises(moye.ShapeError, match=r"modes \(\) must be distinct"):
        moye.reduce(a, "sum", modes=())
    with pytest.raises(moye.MoyeTypeError, match="modes must be an int or a tuple of ints"):
        moye.reduce(a, "sum", modes="rows")
    with pytest.raises(moye.MoyeTypeError, match="frag must be a MoYeArray, got ndarray"):
        moye.reduce(np.zeros(3), "sum")
    with pytest.raises(moye.MoyeTypeError, match="op 'or' takes integers"):
        moye.reduce(a, "or")
    with pytest.raises(moye.MoyeError, match="op must be one of"):
        moye.reduce(a, "avg")


def test_warp_reduce_outside_a_kernel_says_so():
    with pytest.raises(moye.MoyeError, match="only exists inside a @moye.kernel"):
        moye.warp_reduce(1.0, "sum")
    assert h.clamp_low(1.0, 2.0) == 2.0


# -- NVRTC -----------------------------------------------------------------------------------

@moye.kernel
def every_path(out, x):
    t = moye.thread_idx.x
    v = x[t]
    out[0, t] = moye.warp_reduce(v, "sum")
    out[1, t] = moye.warp_reduce(v, absmax, width=8)
    out[2, t] = moye.block_reduce(v, "max")
    out[3, t] = moye.block_reduce(v, smaller)
    out[4, t] = moye.block_reduce(moye.cast(v, moye.Int32), "xor")
    out[5, t] = moye.reduce(moye.tile(moye.MoYeArray(x), (4,), (t,)), "sum")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("block", [1024, 48, 96])
def test_reductions_compile_with_nvrtc(arch, block):
    pytest.importorskip("cuda.bindings")
    x, out = np.ones(4 * block, np.float32), np.zeros((6, block), np.float32)
    kernel = every_path.trace(out, x, block=block)[0]
    assert BACKENDS["cuda"].compile_only(kernel, (block, 1, 1), arch)
    source = BACKENDS["cuda"].source(kernel, (block, 1, 1))
    assert "__shfl_xor_sync" in source and "__syncthreads" in source
    if block == 48:
        assert "__shfl_down_sync" in source


@pytest.mark.parametrize("block", [(16, 6), (8, 3, 2), (4, 4, 3)])
def test_blocks_of_two_and_three_dimensions_reduce_by_linear_thread_id(block):
    @moye.kernel
    def k(out_w, out_b, x):
        t = moye.thread_idx.x + moye.block_dim.x * (moye.thread_idx.y +
                                                     moye.block_dim.y * moye.thread_idx.z)
        out_w[t] = moye.warp_reduce(x[t], "sum")
        out_b[t] = moye.block_reduce(x[t], absmax)

    n = int(np.prod(block))
    x = data(np.float32, n, n)
    out_w, out_b = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    k[1, block](out_w, out_b, x)
    check(out_w, reference(x, n, 32, "sum"), x)
    check(out_b, reference(x, n, n, absmax), x)

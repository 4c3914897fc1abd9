"""moye's atomics (atomic_add, _min, _max, _exch, _cas, _and, _or, _xor and
red_*) on global and shared memory: on the CPU backend against NumPy run in
thread order, with the race check on; the old values against order-free
invariants; bad inputs; and every instruction compiled by NVRTC for sm_80
and sm_90a."""
import ml_dtypes
import numpy as np
import pytest

import moye
from moye.compiler.frontend import BACKENDS

from .kernels_for_tests import histogram, tickets

BLOCK, BINS = 96, 5         # three warps onto five elements: many threads per address
INTS = [np.int32, np.uint32, np.int64, np.uint64]
FLOATS = [np.float32, np.float64]
ATOMICS = {"add": moye.atomic_add, "min": moye.atomic_min, "max": moye.atomic_max,
           "exch": moye.atomic_exch, "and": moye.atomic_and, "or": moye.atomic_or,
           "xor": moye.atomic_xor}
REDS = {"add": moye.red_add, "min": moye.red_min, "max": moye.red_max, "and": moye.red_and,
        "or": moye.red_or, "xor": moye.red_xor}
BITWISE = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@moye.kernel
def everywhere(out, sout, old, sold, idx, x, y, op: moye.Constexpr, red: moye.Constexpr):
    """The atomic `op` of x[t] (y[t] the compare of a cas) at out[idx[t]] and at
    the same element of a shared copy of sout, the values before in old and sold."""
    t = moye.thread_idx.x
    smem = moye.shared_array(out.dtype, BINS)
    if t < BINS:
        smem[t] = sout[t]
    moye.sync_threads()
    i = idx[t]
    if red:
        REDS[op](out, i, x[t])
        REDS[op](smem, i, x[t])
    elif op == "cas":
        old[t] = moye.atomic_cas(out, i, y[t], x[t])
        sold[t] = moye.atomic_cas(smem, i, y[t], x[t])
    else:
        old[t] = ATOMICS[op](out, i, x[t])
        sold[t] = ATOMICS[op](smem, i, x[t])
    moye.sync_threads()
    if t < BINS:
        sout[t] = smem[t]


def in_thread_order(op, init, idx, x, y=None):
    """The final elements and the values before of op applied thread by thread."""
    final, old = init.copy(), np.zeros_like(x)
    with np.errstate(all="ignore"):
        for t in range(len(idx)):
            i = idx[t]
            old[t] = cur = final[i]
            final[i] = {"add": lambda: cur + x[t], "min": lambda: np.fmin(cur, x[t]),
                        "max": lambda: np.fmax(cur, x[t]), "exch": lambda: x[t],
                        "cas": lambda: x[t] if cur == y[t] else cur,
                        **{k: lambda f=f: f(cur, x[t]) for k, f in BITWISE.items()}}[op]()
    return final, old


def random_values(rng, dtype, n, op):
    """Non-zero values; for a float add, multiples of 1/8 that sum exactly in any order."""
    if np.dtype(dtype).kind not in "iu":            # floats, bfloat16 among them
        if op == "add":
            return (rng.integers(1, 64, n) / 8 + 1 / 16).astype(dtype)
        return rng.standard_normal(n).astype(dtype) * 100
    info = np.iinfo(dtype)
    lo, hi = (1, 200) if op == "add" else (max(info.min, -2**40), min(info.max, 2**40))
    return rng.integers(lo, hi, n, dtype=np.int64 if info.min < 0 else np.uint64).astype(dtype)


def run_everywhere(op, dtype, red=False, seed=0):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, BINS, BLOCK).astype(np.int32)
    x = random_values(rng, dtype, BLOCK, op)
    init = random_values(rng, dtype, BINS, op)
    y = x.copy()
    if op == "cas":     # compare with the element as it was, or as the last thread left it
        last = {}
        for t in range(BLOCK):
            y[t] = init[idx[t]] if rng.random() < 0.3 else last.get(idx[t], x[t])
            last[idx[t]] = x[t]
    out, sout = init.copy(), init.copy()
    poison = np.array(-7 if np.dtype(dtype).kind != "u" else 7, dtype)
    old, sold = np.full(BLOCK, poison), np.full(BLOCK, poison)
    with moye.backend.cpu.race_checking():
        everywhere[1, BLOCK](out, sout, old, sold, idx, x, y, op, red)
    return idx, x, y, init, out, sout, old, sold


@pytest.mark.parametrize("dtype", INTS + FLOATS)
@pytest.mark.parametrize("op", ["add", "min", "max", "exch", "cas"])
def test_every_atomic_matches_numpy_in_thread_order(op, dtype):
    idx, x, y, init, out, sout, old, sold = run_everywhere(op, dtype)
    final, want_old = in_thread_order(op, init, idx, x, y)
    for got, got_old in ((out, old), (sout, sold)):             # global, shared
        np.testing.assert_array_equal(got, final)
        np.testing.assert_array_equal(got_old, want_old)
    check_order_free(op, init, idx, x, out, old)


@pytest.mark.parametrize("dtype", INTS + FLOATS)
@pytest.mark.parametrize("op", ["add", "min", "max"])
def test_red_matches_numpy(op, dtype):
    idx, x, y, init, out, sout, old, sold = run_everywhere(op, dtype, red=True, seed=1)
    final, _ = in_thread_order(op, init, idx, x)
    np.testing.assert_array_equal(out, final)
    np.testing.assert_array_equal(sout, final)
    assert (old == old[0]).all() and old[0] != 0            # red returns nothing: untouched


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", list(BITWISE))
@pytest.mark.parametrize("red", [False, True])
def test_bitwise_atomics_match_numpy_in_thread_order(op, dtype, red):
    """and, or and xor of integers (the values before too, for the atomics);
    in any order the element ends as its value combined with every thread's."""
    idx, x, y, init, out, sout, old, sold = run_everywhere(op, dtype, red=red, seed=2)
    final, want_old = in_thread_order(op, init, idx, x)
    np.testing.assert_array_equal(out, final)
    np.testing.assert_array_equal(sout, final)
    if not red:
        np.testing.assert_array_equal(old, want_old)
        np.testing.assert_array_equal(sold, want_old)
    for i in range(BINS):
        assert out[i] == BITWISE[op].reduce(np.concatenate([[init[i]], x[idx == i]]))


def check_order_free(op, init, idx, x, final, old):
    """What holds in any order the atomics take (the GPU's): per element, the
    values before and after are those of some order of its threads."""
    for i in range(len(init)):
        mine = np.nonzero(idx == i)[0]
        if op == "add":         # x > 0: the values before rise along the order taken
            order = mine[np.argsort(old[mine], kind="stable")]
            chain = np.concatenate([[init[i]], old[order][1:], [final[i]]])
            np.testing.assert_array_equal(chain[1:], old[order].astype(chain.dtype) + x[order])
            assert old[order][0] == init[i]
        elif op in ("min", "max"):
            pick = np.fmin if op == "min" else np.fmax
            assert final[i] == pick.reduce(np.concatenate([[init[i]], x[mine]]))
            seen = set(np.concatenate([[init[i]], x[mine]]).tolist())
            assert set(old[mine].tolist()) <= seen
        elif op == "exch":      # the values before and the last are a permutation
            np.testing.assert_array_equal(np.sort(np.concatenate([old[mine], [final[i]]])),
                                          np.sort(np.concatenate([[init[i]], x[mine]])))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_scalar_half_add_rounds_each_step_as_the_gpu(dtype):
    idx, x, y, init, out, sout, old, sold = run_everywhere("add", dtype, seed=2)
    final, want_old = in_thread_order("add", init, idx, x)
    for got, got_old in ((out, old), (sout, sold)):
        np.testing.assert_array_equal(got.astype(np.float64), final.astype(np.float64))
        np.testing.assert_array_equal(got_old.astype(np.float64), want_old.astype(np.float64))


@moye.kernel
def pairs(out, sout, old, idx, x, red: moye.Constexpr):
    """Packed adds of (x[2t], x[2t+1]) at the pair idx[t] of out and of a
    shared copy of sout; the pair before in old[2t], old[2t+1]."""
    t = moye.thread_idx.x
    smem = moye.shared_array(out.dtype, 2 * BINS)
    if t < 2 * BINS:
        smem[t] = sout[t]
    moye.sync_threads()
    i = 2 * idx[t]
    if red:
        moye.red_add(out, i, (x[2 * t], x[2 * t + 1]))
        moye.red_add(smem, i, (x[2 * t], x[2 * t + 1]))
    else:
        lo, hi = moye.atomic_add(out, i, (x[2 * t], x[2 * t + 1]))
        moye.atomic_add(smem, i, (x[2 * t], x[2 * t + 1]))
        old[2 * t] = lo
        old[2 * t + 1] = hi
    moye.sync_threads()
    if t < 2 * BINS:
        sout[t] = smem[t]


@pytest.mark.parametrize("red", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_packed_pairs_add_both_halves(dtype, red):
    rng = np.random.default_rng(3)
    idx = rng.integers(0, BINS, BLOCK).astype(np.int32)
    x = (rng.standard_normal(2 * BLOCK) * 4).astype(dtype)
    init = (rng.standard_normal(2 * BINS) * 4).astype(dtype)
    out, sout = init.copy(), init.copy()
    old = np.full(2 * BLOCK, np.nan, dtype)
    with moye.backend.cpu.race_checking():
        pairs[1, BLOCK](out, sout, old, idx, x, red)
    # each half is its own atomic add, rounded to the half type after each step
    pair_idx = np.stack([2 * idx, 2 * idx + 1], axis=1).ravel()      # thread by thread
    final, want_old = in_thread_order("add", init, pair_idx, x)
    np.testing.assert_array_equal(out.astype(np.float64), final.astype(np.float64))
    np.testing.assert_array_equal(sout.astype(np.float64), final.astype(np.float64))
    if red:
        assert np.isnan(old.astype(np.float64)).all()
    else:
        np.testing.assert_array_equal(old.astype(np.float64), want_old.astype(np.float64))


def test_float_min_max_ignore_nan_as_fminf():
    @moye.kernel
    def extremes(lo, hi, x):
        t = moye.thread_idx.x
        moye.atomic_min(lo, t % 2, x[t])
        moye.red_max(hi, t % 2, x[t])

    x = np.array([np.nan, 3.0, -2.0, np.nan, 5.0, 1.0], np.float32)
    lo, hi = np.array([np.nan, 0.5], np.float32), np.array([0.0, np.nan], np.float32)
    extremes[1, 6](lo, hi, x)
    np.testing.assert_array_equal(lo, [-2.0, 0.5])
    np.testing.assert_array_equal(hi, [5.0, 3.0])


@moye.kernel
def multiply(total, factors, n):
    """total[0] *= factors[i] for every i, by a compare-and-swap loop."""
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    if i < n:
        seen = total[0]
        before = moye.atomic_cas(total, 0, seen, seen * factors[i])
        while before != seen:           # another thread came first: try again from its value
            seen = before
            before = moye.atomic_cas(total, 0, seen, seen * factors[i])


def test_a_compare_and_swap_loop_multiplies():
    rng = np.random.default_rng(4)
    factors = 2.0 ** rng.integers(-3, 4, 300)               # exact in any order
    total = np.array([1.5])
    multiply[3, 128](total, factors, 300)
    assert total[0] == 1.5 * np.prod(factors)


def test_compare_and_swap_compares_floats_bit_for_bit():
    @moye.kernel
    def swap(a, old, compare):
        t = moye.thread_idx.x
        old[t] = moye.atomic_cas(a, t, compare[t], 9.0)

    a = np.array([0.0, -0.0, np.nan, 1.0], np.float32)
    old = np.full(4, 7.0, np.float32)
    swap[1, 4](a, old, np.array([-0.0, -0.0, np.nan, 1.0], np.float32))
    np.testing.assert_array_equal(a, [0.0, 9.0, 9.0, 9.0])
    assert not np.signbit(a[0]) and np.signbit(old[1]) and np.isnan(old[2])


def test_histogram_in_shared_memory_over_many_blocks():
    @moye.kernel
    def shared_histogram(counts, keys, n):
        t = moye.thread_idx.x
        bins = moye.shared_array(moye.Int32, 16)
        if t < 16:
            bins[t] = 0
        moye.sync_threads()
        i = moye.block_idx.x * moye.block_dim.x + t
        if i < n:
            moye.atomic_add(bins, keys[i], 1)
        moye.sync_threads()
        if t < 16:
            moye.red_add(counts, t, bins[t])

    rng = np.random.default_rng(5)
    keys = rng.integers(0, 16, 1000).astype(np.int32)
    counts = rng.integers(1, 9, 16).astype(np.int32)
    want = counts + np.bincount(keys, minlength=16)
    with moye.backend.cpu.race_checking():
        shared_histogram[8, 128](counts, keys, 1000)
    np.testing.assert_array_equal(counts, want)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
def test_histogram_over_many_blocks_matches_numpy_exactly(dtype):
    rng = np.random.default_rng(7)
    n, bins = 1000, 13                       # 8 blocks of 128 threads, the last one partial
    keys = rng.integers(0, bins, n).astype(np.int32)
    counts = rng.integers(1, 50, bins).astype(dtype)      # not zero: atomics add to it
    want = counts.astype(np.int64) + np.bincount(keys, minlength=bins)
    histogram[8, 128](counts, keys, n)
    np.testing.assert_array_equal(counts.astype(np.int64), want)


def test_integer_adds_wrap_as_on_the_gpu():
    counts = np.array([2**31 - 2, 3], np.int32)
    histogram[1, 4](counts, np.zeros(4, np.int32), 4)
    assert counts[0] == -2**31 + 2 and counts[1] == 3


def test_atomic_add_returns_the_old_value():
    n = 500
    counter = np.array([10], np.int32)
    order = np.full(n, -1, np.int32)
    tickets[4, 128](counter, order, n)
    assert counter[0] == 10 + n
    np.testing.assert_array_equal(np.sort(order), 10 + np.arange(n))


# -- the race check ---------------------------------------------------------------------
def test_atomics_of_many_threads_on_one_address_are_no_race():
    keys = np.zeros(256, np.int32)
    counts = np.zeros(1, np.int32)
    with moye.backend.cpu.race_checking():
        histogram[2, 128](counts, keys, 256)
    assert counts[0] == 256


@moye.kernel
def mixed(out, plain: moye.Constexpr):
    t = moye.thread_idx.x
    s = moye.shared_array(moye.Int32, 4)
    if t == 0:
        s[0] = 5
    moye.sync_threads()
    if plain == "store" and t == 1:
        s[0] = 7
    if plain == "load" and t == 1:
        out[1] = s[0]
    moye.atomic_add(s, 0, 1)
    if plain == "load after" and t == 1:
        out[1] = s[0]
    moye.sync_threads()
    if t == 0:
        out[0] = s[0]


@pytest.mark.parametrize("plain, kind", [("store", "atomic-after-write"),
                                         ("load", "atomic-after-read"),
                                         ("load after", "read-after-atomic")])
def test_an_atomic_and_a_plain_access_unordered_are_a_race(plain, kind):
    with moye.backend.cpu.race_checking():
        with pytest.raises(moye.KernelRuntimeError, match=f"shared-memory race \\({kind}\\)"):
            mixed[1, 32](np.zeros(2, np.int32), plain)


def test_an_atomic_and_plain_accesses_a_barrier_orders_are_no_race():
    out = np.full(2, -1, np.int32)
    with moye.backend.cpu.race_checking():
        mixed[1, 32](out, "none")
    assert out[0] == 5 + 32


def test_an_atomic_on_uninitialized_shared_memory_is_an_error():
    @moye.kernel
    def garbage(out):
        s = moye.shared_array(moye.Int32, 4)
        moye.atomic_add(s, 0, 1)
        moye.sync_threads()
        out[0] = s[0]

    with moye.backend.cpu.race_checking():
        with pytest.raises(moye.KernelRuntimeError, match="which no thread wrote"):
            garbage[1, 32](np.zeros(1, np.int32))


# -- bad inputs -------------------------------------------------------------------------
def _on_fragment(a, x):
    f = moye.make_fragment_like(moye.Layout(4), moye.Int32)
    f[0] = 1
    moye.atomic_add(f, 0, 1)


MISUSES = {
    "int16 add": lambda a, x: moye.atomic_add(a, 0, 1),
    "half min": lambda a, x: moye.atomic_min(a, 0, 1.0),
    "half exch": lambda a, x: moye.atomic_exch(a, 0, 1.0),
    "float pair": lambda a, x: moye.atomic_add(a, 0, (1.0, 2.0)),
    "pair max": lambda a, x: moye.red_max(a, 0, (1.0, 2.0)),
    "int8 red": lambda a, x: moye.red_min(a, 0, 1),
    "string": lambda a, x: moye.atomic_add(a, 0, "yes"),
    "bool": lambda a, x: moye.atomic_max(a, 0, True),
    "float literal": lambda a, x: moye.atomic_exch(a, 0, 1.5),
    "float value": lambda a, x: moye.atomic_add(a, 0, x[0]),
    "too large": lambda a, x: moye.atomic_cas(a, 0, 2**32, 1),
    "negative": lambda a, x: moye.red_add(a, 0, -1),
    "three": lambda a, x: moye.atomic_add(a, 0, (1.0, 2.0, 3.0)),
    "fragment": _on_fragment,
    "number": lambda a, x: moye.atomic_cas(3, 0, 1, 2),
    "odd pair": lambda a, x: moye.atomic_add(a, 3, (1.0, 2.0)),
    "dynamic pair": lambda a, x: moye.atomic_add(a, x[0], (1.0, 2.0)),
    "red pair": lambda a, x: moye.red_add(a, 0, (1.0, 2.0)),
    "float and": lambda a, x: moye.atomic_and(a, 0, 1.0),
    "float red xor": lambda a, x: moye.red_xor(a, 0, 1.0),
}


@moye.kernel
def misuse(a, x, case: moye.Constexpr):
    MISUSES[case](a, x)


@pytest.mark.parametrize("case, dtype, message", [
    ("int16 add", np.int16, "the array holds Int16; atomic_add takes Int32, UInt32, Int64"),
    ("half min", np.float16, "holds Float16; atomic_min takes Int32, UInt32, Int64, UInt64, "
                             "Float32, Float64$"),
    ("half exch", np.float16, "holds Float16; atomic_exch takes Int32"),
    ("float pair", np.float32, "holds Float32; atomic_add takes packed pairs of Float16, "
                               "BFloat16$"),
    ("pair max", np.float16, "red_max: packed pairs are for red_add only"),
    ("int8 red", np.int8, "holds Int8; red_min takes Int32"),
    ("float and", np.float32, "holds Float32; atomic_and takes Int32, UInt32, Int64, UInt64$"),
    ("float red xor", np.float64, "holds Float64; red_xor takes Int32, UInt32, Int64, UInt64$"),
    ("string", np.int32, "atomic_add: value must be a number, got 'yes'"),
    ("bool", np.int32, "atomic_max: value must be a number, got True"),
    ("float literal", np.int32, "atomic_exch: value is the float 1.5, but the array holds "
                                "Int32"),
    ("float value", np.int32, r"atomic_add: value is Float32, but the array holds Int32; cast "
                              r"it with moye.cast\(value, moye.Int32\)"),
    ("too large", np.int32, "atomic_cas: compare = 4294967296 does not fit in Int32"),
    ("negative", np.uint32, "red_add: value = -1 does not fit in UInt32"),
    ("three", np.float16, r"atomic_add: value of a packed pair must be two numbers, got "
                          r"\(1.0, 2.0, 3.0\)"),
    ("fragment", np.int32, "atomic_add: array is a register fragment; atomics act on global "
                           "memory"),
    ("number", np.int32, "atomic_cas: array must be an array in global memory .*, got 3"),
    ("odd pair", np.float16, "atomic_add: a packed pair starts at an even element .*, but "
                             "index 3 is element 3"),
])
def test_bad_inputs_are_refused_naming_the_argument_and_line(case, dtype, message):
    with pytest.raises(moye.KernelError, match=message) as e:
        misuse[1, 32](np.zeros(8, dtype), np.ones(4, np.float32), case)
    assert "in kernel 'misuse', " in str(e.value) and "test_atomics_cpu.py:" in str(e.value)


def test_a_packed_pair_must_be_aligned_at_run_time():
    with pytest.raises(moye.KernelRuntimeError, match="atomic_add of a packed pair at element "
                                                      "1, which is not 4-byte aligned"):
        misuse[1, 32](np.zeros(8, np.float16), np.ones(4, np.int32), "dynamic pair")
    with pytest.raises(moye.KernelRuntimeError, match="red of a packed pair at element 0, "
                                                      "which is not 4-byte aligned"):
        misuse[1, 32](np.zeros(9, np.float16)[1:], np.ones(4, np.int32), "red pair")


def test_read_only_arrays_are_refused():
    read_only = np.zeros(8, np.int32)
    read_only.flags.writeable = False
    with pytest.raises(moye.LaunchError, match="read-only"):
        histogram[1, 4](read_only, np.zeros(4, np.int32), 4)
    with pytest.raises(moye.LaunchError, match="read-only"):
        misuse[1, 4](read_only, np.ones(4, np.float32), "negative")


def test_atomic_add_out_of_bounds_is_reported():
    with pytest.raises(moye.KernelRuntimeError, match="out-of-bounds atomic_add"):
        histogram[1, 4](np.zeros(2, np.int32), np.array([0, 1, 2, 1], np.int32), 4)


# -- NVRTC ------------------------------------------------------------------------------
@moye.kernel
def all_ops(out, old, x, pair: moye.Constexpr):
    """Every operation the element type takes, on global and shared memory."""
    t = moye.thread_idx.x
    smem = moye.shared_array(out.dtype, 64)
    smem[t] = out[t]
    moye.sync_threads()
    for dst in (out, smem):
        if pair:
            lo, hi = moye.atomic_add(dst, t // 4 * 2, (x[t], x[t + 1]))
            moye.red_add(dst, t // 4 * 2, (lo, hi))
            old[t] = lo
        elif out.dtype in (moye.Float16, moye.BFloat16):
            old[t] = moye.atomic_add(dst, t, x[t])
            moye.red_add(dst, t, x[t])
        else:
            for name, op in ATOMICS.items():
                if name not in BITWISE or out.dtype.is_integer:
                    old[t] = op(dst, t // 4, x[t])
            old[t] = moye.atomic_cas(dst, t // 4, x[t + 1], x[t])
            for name, op in REDS.items():
                if name not in BITWISE or out.dtype.is_integer:
                    op(dst, t // 4, x[t])
    moye.sync_threads()
    out[t] = smem[t]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype, pair", [(t, False) for t in INTS + FLOATS] + [
    (np.float16, False), (ml_dtypes.bfloat16, False), (np.float16, True),
    (ml_dtypes.bfloat16, True)])
def test_every_atomic_compiles_with_nvrtc(arch, dtype, pair):
    kernel = all_ops.trace(np.zeros(64, dtype), np.zeros(64, dtype), np.ones(65, dtype), pair,
                           block=64)[0]
    src = BACKENDS["cuda"].source(kernel, (64, 1, 1))
    assert "atomicAdd(" in src
    if not pair and dtype in INTS:
        assert "atomicMin(" in src and "atomicCAS(" in src and "red.relaxed.gpu.shared.add" in src
        bits = np.dtype(dtype).itemsize * 8
        for op in BITWISE:
            assert f"atomic{op.capitalize()}(" in src
            assert f"red.relaxed.gpu.shared.{op}.b{bits}" in src
            assert f"red.relaxed.gpu.global.{op}.b{bits}" in src
    BACKENDS["cuda"].compile_only(kernel, (64, 1, 1), arch)


@moye.kernel
def last_block_sums(out, partial, tickets, x):
    """Each block writes its sum, fences and takes a ticket; the block with
    the last ticket fences and adds up every block's sum."""
    b, t = moye.block_idx.x, moye.thread_idx.x
    if t == 0:
        partial[b] = x[2 * b] + x[2 * b + 1]
        moye.threadfence()
        if moye.atomic_add(tickets, 0, 1) == moye.grid_dim.x - 1:
            moye.threadfence()
            s = 0.0
            for i in range(moye.grid_dim.x):
                s += partial[i]
            out[0] = s


def test_threadfence_orders_a_last_block_reduction():
    x = np.random.default_rng(11).standard_normal(16).astype(np.float32)
    out, tickets = np.full(1, np.nan, np.float32), np.zeros(1, np.int32)
    last_block_sums[8, 32](out, np.zeros(8, np.float32), tickets, x)
    assert tickets[0] == 8
    np.testing.assert_allclose(out[0], x.astype(np.float64).sum(), rtol=1e-5)
    kernel = last_block_sums.trace(out, np.zeros(8, np.float32), tickets, x, block=32)[0]
    src = BACKENDS["cuda"].source(kernel, (32, 1, 1))
    assert src.count("__threadfence();") == 2
    for arch in ("sm_80", "sm_90a"):
        BACKENDS["cuda"].compile_only(kernel, (32, 1, 1), arch)


def test_threadfence_outside_a_kernel_is_refused():
    with pytest.raises(moye.MoyeError, match="only exists inside a @moye.kernel"):
        moye.threadfence()

"""Approximate math (moye.exp2_approx and friends, @moye.kernel(fast_math=True)):
the CPU backend within the PTX ISA's bounds against float64 NumPy, the C++
and the cache key the switch changes, NVRTC for sm_80 and sm_90a, and the
refusals."""
import numpy as np
import pytest

import moye
from moye.compiler.frontend import BACKENDS

N = 512


@moye.kernel
def approximations(out, x, y):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    out[0, i] = moye.exp2_approx(x[i])
    out[1, i] = moye.exp_approx(x[i])
    out[2, i] = moye.rsqrt_approx(y[i])
    out[3, i] = moye.rcp_approx(y[i])
    out[4, i] = moye.tanh_approx(x[i])
    out[5, i] = moye.div_approx(x[i], y[i])


def _math(out, x, y):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    out[0, i] = moye.exp2(x[i])
    out[1, i] = moye.exp(x[i])
    out[2, i] = moye.rsqrt(y[i])
    out[3, i] = 1.0 / y[i]
    out[4, i] = moye.tanh(x[i])
    out[5, i] = x[i] / y[i]


accurate = moye.kernel(_math)
fast = moye.kernel(_math, fast_math=True)


def inputs(seed=18, n=N):
    """x over exp2's whole Float32 range (and tanh's interesting one), y
    positive over 2^-120 .. 2^120, both random and non-zero."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(-126, 127, n // 2), rng.uniform(-6, 6, n - n // 2)])
    y = 2.0 ** rng.uniform(-120, 120, n) * rng.uniform(1, 2, n)
    return x.astype(np.float32), y.astype(np.float32)


def ulps(got, exact):
    """|got - exact| in units of the Float32 spacing at exact (float64)."""
    with np.errstate(over="ignore"):
        spacing = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - exact) / spacing


def check_bounds(out, x, y):
    """Each row of `out` within its PTX ISA bound of the float64 truth."""
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    assert not np.isnan(out).any()
    assert ulps(out[0], np.exp2(x64)).max() <= 2 + 0.5             # ex2: 2 ulp of the rounded
    t = (x * np.float32(1.4426950408889634)).astype(np.float64)     # __expf: 2 + |1.173 x| ulp
    small = np.abs(x64) < 80                                        # e^x within Float32
    assert (ulps(out[1], np.exp(x64))[small] <= 2 + np.floor(np.abs(1.173 * x64))[small]).all()
    inside = np.abs(t) < 127
    assert ulps(out[1], np.exp2(t))[inside].max() <= 2 + 0.5        # what it is: ex2 of x log2(e)
    assert (np.abs(out[2] / (1 / np.sqrt(y64)) - 1) <= 2 ** -22.9).all()    # rsqrt: relative
    assert ulps(out[3], 1 / y64).max() <= 1                          # rcp: 1 ulp
    assert (np.abs(out[4] - np.tanh(x64)) <= 2 ** -11 * np.abs(np.tanh(x64))).all()
    q = x64 / y64
    normal = np.abs(q) >= 2.0 ** -126
    assert (ulps(out[5], q)[normal] <= 2).all()                      # div: 2 ulp
    assert (np.abs(out[5] - q)[~normal] <= 2.0 ** -148).all()


def test_each_approximation_is_within_its_ptx_bound_on_the_cpu():
    x, y = inputs()
    out = np.full((6, N), np.nan, np.float32)
    approximations[N // 128, 128](out, x, y)
    check_bounds(out, x, y)


def test_the_cpu_gives_no_more_precision_than_the_bound():
    """tanh.approx keeps 10 fraction bits on the CPU: most results differ
    from the correctly rounded ones, none by more than the bound."""
    x, y = inputs(5)
    out = np.full((6, N), np.nan, np.float32)
    approximations[N // 128, 128](out, x, y)
    rounded = np.tanh(x.astype(np.float64)).astype(np.float32)
    assert (out[4] != rounded).mean() > 0.5
    assert (np.abs(out[0] - np.exp2(x.astype(np.float64)).astype(np.float32))
            <= np.spacing(np.abs(out[0]))).all()


def test_the_special_values_of_the_ptx_tables():
    inf, nan = np.inf, np.nan
    x = np.array([-inf, inf, 0.0, -0.0, nan, 1.0, -1.0, 3.0], np.float32)
    y = np.array([0.0, -0.0, inf, 2.0 ** 127, nan, -(2.0 ** 127), 0.5, 1.0], np.float32)
    out = np.full((6, 8), 7.0, np.float32)
    approximations[1, 8](out, x, y)
    np.testing.assert_array_equal(out[0, :5], [0, inf, 1, 1, nan])           # ex2
    np.testing.assert_array_equal(out[2, :3], [inf, -inf, 0])                # rsqrt(+-0, inf)
    np.testing.assert_array_equal(out[4, :5], [-1, 1, 0, -0.0, nan])         # tanh
    assert np.signbit(out[4, 3]) and not np.signbit(out[4, 2])
    np.testing.assert_array_equal(out[5, 3], 0.0)                            # 0 / 2^127
    np.testing.assert_array_equal(out[5, 5:7], [-0.0, -2.0])                 # beyond 2^126: 0
    assert np.signbit(out[5, 5])


def test_fast_math_gives_the_approximations_on_the_cpu():
    x, y = inputs(7, 256)
    want = np.full((6, 256), np.nan, np.float32)
    approximations[2, 128](want, x, y)
    got = np.full((6, 256), np.nan, np.float32)
    fast[2, 128](got, x, y)
    np.testing.assert_array_equal(got[[0, 1, 2, 4, 5]], want[[0, 1, 2, 4, 5]])
    check_bounds(np.stack([got[0], got[1], got[2], want[3], got[4], got[5]]), x, y)
    assert ulps(got[3], 1 / y.astype(np.float64)).max() <= 2      # 1.0 / y: div.approx
    exact = np.full((6, 256), np.nan, np.float32)
    accurate[2, 128](exact, x, y)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(exact[[0, 2, 4, 5]], [np.exp2(x64), 1 / np.sqrt(y64),
                                                     np.tanh(x64), x64 / y64], rtol=2 ** -23)


def _source(kern, *args):
    """The kernel's C++ without the prelude and the source-line comments."""
    src = kern.cuda_source(*args, block=128)
    lines = src[src.index('extern "C"'):].splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("//"))


def test_fast_math_changes_the_cpp():
    x, y = inputs(1, 128)
    out = np.zeros((6, 128), np.float32)
    slow, quick = _source(accurate, out, x, y), _source(fast, out, x, y)
    for name in ("exp2f(", "expf(", "rsqrtf(", "tanhf(", " / "):
        assert name in slow and name not in quick.replace("tanhf(v", "")
    for ptx in ("ex2.approx.f32", "rsqrt.approx.f32", "tanh.approx.f32", "div.approx.f32"):
        assert ptx in quick and ptx not in slow
    assert "__expf" not in slow                         # the default exp is the accurate one


def test_fast_math_is_part_of_the_cache_key():
    x, y = inputs(1, 128)
    out = np.zeros((6, 128), np.float32)
    key_slow = accurate.specialization_text(accurate.trace(out, x, y, block=128)[1], (128, 1, 1))
    key_fast = fast.specialization_text(fast.trace(out, x, y, block=128)[1], (128, 1, 1))
    assert key_fast == key_slow + "|fast_math"
    assert fast.fast_math and not accurate.fast_math
    built = {}
    for kern, key in ((accurate, key_slow), (fast, key_fast)):
        built[kern.fast_math] = BACKENDS["cuda"].build_specialization(
            key, lambda: kern.trace(out, x, y, block=128)[0], (128, 1, 1), "sm_80", fresh=True)
    assert "ex2.approx.f32" in built[True].source and "ex2.approx.f32" not in built[False].source
    assert built[True].cubin != built[False].cubin


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_nvrtc_compiles_each_approximation(arch):
    x, y = inputs(1, 128)
    out = np.zeros((6, 128), np.float32)
    for kern in (approximations, fast):
        kernel = kern.trace(out, x, y, block=128)[0]
        assert BACKENDS["cuda"].compile_only(kernel, (128, 1, 1), arch)


def test_fast_math_leaves_float64_and_float16_accurate():
    @moye.kernel(fast_math=True)
    def wide(out, d, h):
        out[0] = moye.exp(d[0])                 # Float64: exp
        out[1] = d[0] / d[1]                    # Float64 division
        out[2] = h[0] / h[1]                    # Float16 division, rounded once
        out[3] = moye.log(d[0] + 0.0) + moye.sin(h[0])   # no fast form: accurate

    d = np.array([0.75, 3.0])
    h = np.array([1.5, 2.0], np.float16)
    out = np.full(4, np.nan)
    src = _source(wide, out, d, h)
    assert "approx" not in src and "exp(" in src and "sinf(" in src
    wide[1, 1](out, d, h)
    np.testing.assert_allclose(out, [np.exp(0.75), 0.25, 0.75, np.log(0.75) + np.sin(1.5)],
                               rtol=1e-7)


def test_float16_and_integer_operands_compute_in_float32():
    @moye.kernel
    def mixed(out, h, n):
        out[0] = moye.exp2_approx(h[0])
        out[1] = moye.div_approx(n[0], 4)
        out[2] = moye.rcp_approx(2)            # static: Python's value

    out = np.full(3, np.nan, np.float32)
    mixed[1, 1](out, np.array([2.5], np.float16), np.array([7], np.int32))
    np.testing.assert_allclose(out, [2 ** 2.5, 1.75, 0.5], rtol=2 ** -21)


def test_fast_math_must_be_a_bool():
    for bad in ("yes", 1, None):
        with pytest.raises(moye.MoyeTypeError, match="fast_math"):
            moye.kernel(_math, fast_math=bad)
        with pytest.raises(moye.MoyeTypeError, match="fast_math"):
            moye.kernel(fast_math=bad)


def test_approximations_refuse_float64_and_non_numbers():
    @moye.kernel
    def doubles(out, d):
        out[0] = moye.exp2_approx(d[0])

    with pytest.raises(moye.KernelError, match=r"exp2_approx: x is a Float64.*Float32 only"):
        doubles[1, 1](np.zeros(1), np.ones(1))

    @moye.kernel
    def divisor(out, d):
        out[0] = moye.div_approx(1.0, d[0])

    with pytest.raises(moye.KernelError, match="div_approx: y is a Float64"):
        divisor[1, 1](np.zeros(1, np.float32), np.ones(1))

    @moye.kernel
    def flags(out, x):
        out[0] = moye.tanh_approx(x[0] > 0)

    with pytest.raises(moye.KernelError, match="tanh_approx: x must be an integer or a float"):
        flags[1, 1](np.zeros(1, np.float32), np.ones(1, np.float32))

    @moye.kernel
    def array(out, x):
        out[0] = moye.rsqrt_approx(x)

    with pytest.raises(moye.KernelError, match="rsqrt_approx: x must be a number"):
        array[1, 1](np.zeros(1, np.float32), np.ones(1, np.float32))
    with pytest.raises(moye.MoyeTypeError, match="rcp_approx: x must be a number"):
        moye.rcp_approx("2")


# -- ex2.approx.ftz.f32: subnormal inputs and results flushed to zero ----------------

@moye.kernel
def ftz_powers(out, x):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    out[0, i] = moye.exp2_approx(x[i], ftz=True)
    out[1, i] = moye.exp2_approx(x[i])


def ftz_inputs(seed=3, n=N):
    """x over exp2's range and past its bottom, with the special values:
    -inf, +inf, NaN, a subnormal x (2^x is 1), -130 and -149 (subnormal
    results: 0 with ftz, kept without)."""
    x = np.random.default_rng(seed).uniform(-160, 127, n).astype(np.float32)
    x[:6] = [-np.inf, np.inf, np.nan, 2.0 ** -140, -130.0, -149.0]
    return x


def check_ftz(out, x):
    """ftz: within 1 ulp where 2^x is normal, 0 where it is not; without
    ftz, the subnormal results are kept."""
    exact = np.exp2(x.astype(np.float64))
    assert out[0, 0] == 0.0 and out[0, 1] == np.inf and np.isnan(out[0, 2])
    assert out[0, 3] == 1.0
    assert out[0, 4] == 0.0 and out[0, 5] == 0.0 and out[1, 4] > 0 and out[1, 5] > 0
    normal = (exact >= 2.0 ** -126) & np.isfinite(exact)
    normal[:6] = False
    assert ulps(out[0][normal], exact[normal]).max() <= 2
    assert (out[0][6:][exact[6:] < 2.0 ** -126] == 0.0).all()
    assert (exact[6:] < 2.0 ** -126).sum() > 10          # the flushed range is exercised


def test_exp2_ftz_flushes_subnormals_on_the_cpu():
    x = ftz_inputs()
    out = np.full((2, N), np.nan, np.float32)           # poison
    ftz_powers[N // 128, 128](out, x)
    check_ftz(out, x)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_exp2_ftz_compiles_to_its_instruction(arch):
    kernel = ftz_powers.trace(np.zeros((2, 128), np.float32), np.zeros(128, np.float32),
                              block=128)[0]
    src = BACKENDS["cuda"].source(kernel, (128, 1, 1))
    assert "ex2.approx.ftz.f32" in src and "ex2.approx.f32" in src
    assert BACKENDS["cuda"].compile_only(kernel, (128, 1, 1), arch)


def test_exp2_ftz_refusals():
    with pytest.raises(moye.MoyeTypeError, match="exp2_approx: ftz must be a bool"):
        moye.exp2_approx(1.0, ftz=1)
    assert moye.exp2_approx(-140.0, ftz=True) == 0.0 and moye.exp2_approx(-140.0) > 0
    from moye import ir
    bad = ir.Approx(1.0, fn="rsqrt", ftz=True)
    assert "ftz is for ex2 only" in bad.check()

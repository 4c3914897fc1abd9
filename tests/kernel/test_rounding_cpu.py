"""moye.floor, ceil, trunc and rint against NumPy on every element (halves,
signed zeros, values past 2^23 and 2^52, infinities, NaN), on numbers while
tracing, in C++; and `//` with a float refused, `%` of floats C's fmod."""
import math

import numpy as np
import pytest

import moye

FNS = {"floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint}


def samples(dtype):
    rng = np.random.default_rng(7)
    edges = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 2.0 ** 23 + 1,
             -(2.0 ** 23) - 1, 2.0 ** 52 + 1, 1e30, -1e30, np.inf, -np.inf, np.nan]
    with np.errstate(over="ignore"):                   # 1e30 and 2^52 + 1: inf in Float16
        return np.concatenate([np.array(edges, dtype),
                               (rng.standard_normal(46) * 50).astype(dtype)])


@moye.kernel
def rounding_kernel(out, x, fn: moye.Constexpr):
    t = moye.thread_idx.x
    out[t] = getattr(moye, fn)(x[t])


@pytest.mark.parametrize("fn", FNS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_element(fn, dtype):
    x = samples(dtype)
    out = np.full(x.size, 7.0, dtype)
    rounding_kernel[1, x.size](out, x, fn)
    want = FNS[fn](x)
    assert np.array_equal(out, want, equal_nan=True)
    assert np.array_equal(np.signbit(out), np.signbit(want))      # -0.0 stays -0.0


@pytest.mark.parametrize("fn", FNS)
def test_half_and_integer_operands_compute_in_float32(fn):
    x16 = samples(np.float16)
    out = np.zeros(x16.size, np.float32)
    rounding_kernel[1, x16.size](out, x16, fn)
    assert np.array_equal(out, FNS[fn](x16.astype(np.float32)), equal_nan=True)
    xi = np.arange(-5, 5, dtype=np.int32)
    outi = np.zeros(10, np.float32)
    rounding_kernel[1, 10](outi, xi, fn)
    assert np.array_equal(outi, xi.astype(np.float32))


@pytest.mark.parametrize("fn, value, want", [
    ("floor", -2.5, -3.0), ("ceil", -2.5, -2.0), ("trunc", -2.7, -2.0), ("rint", 2.5, 2.0),
    ("rint", 3.5, 4.0), ("rint", -0.5, -0.0), ("ceil", -0.5, -0.0), ("trunc", -0.5, -0.0),
    ("floor", 3, 3.0), ("floor", -math.inf, -math.inf)])
def test_numbers_give_python_floats(fn, value, want):
    got = getattr(moye, fn)(value)
    assert isinstance(got, float) and got == want and math.copysign(1, got) == \
        math.copysign(1, want)


@pytest.mark.parametrize("dtype, names", [(np.float32, ("floorf(", "ceilf(", "truncf(", "rintf(")),
                                          (np.float64, ("floor(", "ceil(", "trunc(", "rint("))])
def test_cuda_source_and_nvrtc(dtype, names):
    from moye.backend.cuda import nvrtc
    for fn, name in zip(FNS, names):
        source = rounding_kernel.cuda_source(np.zeros(4, dtype), np.zeros(4, dtype), fn, block=4)
        assert name in source, source
        assert nvrtc.compile_cuda(source, ["moye_rounding_kernel"], "sm_80").cubin[:4] == \
            b"\x7fELF"


@moye.kernel
def floor_div_kernel(out, x, which: moye.Constexpr):
    t = moye.thread_idx.x
    if which == 0:
        out[t] = x[t] // 2.0
    elif which == 1:
        out[t] = 7 // x[t]
    else:
        out[t] = x[t] // x[t]


@pytest.mark.parametrize("which, shown", [(0, r"a Float32 value // 2\.0"),
                                          (1, r"7 // a Float32 value"),
                                          (2, r"a Float32 value // a Float32 value")])
def test_floor_division_of_floats_is_refused(which, shown):
    """C has no `//` of floats and Python's floors: a float operand is an
    error that names the line and both ways to write it, never a silent /."""
    with pytest.raises(moye.MoyeError, match=r"test_rounding_cpu\.py:\d+: out\[t\] = .*//[\s\S]*"
                       + shown + r": // divides integers \(toward zero, as in C\)[\s\S]*"
                       r"moye\.floor\(a / b\)[\s\S]*moye\.trunc\(a / b\)"):
        floor_div_kernel[1, 2](np.zeros(2, np.float32), np.ones(2, np.float32), which)


@moye.kernel
def int_div_mod_kernel(q, r, fr, a, b, fa, fb):
    t = moye.thread_idx.x
    q[t] = a[t] // b[t]
    r[t] = a[t] % b[t]
    fr[t] = fa[t] % fb[t]


def test_integer_division_truncates_and_float_remainder_is_fmod():
    """As documented (docs/kernels.md): C's division and remainder of
    integers, C's fmodf of floats (the dividend's sign), not Python's."""
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    fa, fb = a.astype(np.float32) + 0.5, b.astype(np.float32)
    q, r, fr = np.zeros(4, np.int32), np.zeros(4, np.int32), np.zeros(4, np.float32)
    int_div_mod_kernel[1, 4](q, r, fr, a, b, fa, fb)
    assert q.tolist() == [3, -3, -3, 3] and r.tolist() == [1, -1, 1, -1]
    assert fr.tolist() == np.fmod(fa, fb).tolist() == [1.5, -0.5, 1.5, -0.5]


@moye.kernel
def python_rounding_kernel(fl, ce, tr, ro, x):
    """Python's math.floor, math.ceil, math.trunc and round of kernel values."""
    t = moye.thread_idx.x
    fl[t] = math.floor(x[t])
    ce[t] = math.ceil(x[t])
    tr[t] = math.trunc(x[t])
    ro[t] = round(x[t])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_python_rounding_gives_integers(dtype):
    """As in Python: an integer (Int32), round's halves to even; an
    integer operand is itself."""
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.7, -3.7, 7.0], dtype)
    outs = [np.full(x.size, -99, np.int64) for _ in range(4)]
    python_rounding_kernel[1, x.size](*outs, x)
    for out, fn in zip(outs, (math.floor, math.ceil, math.trunc, round)):
        assert out.tolist() == [fn(float(v)) for v in x], fn
    traced = python_rounding_kernel.ir(*outs, x, block=x.size)
    assert ("call" in traced and "Int32 = cast" in traced) == (dtype != np.int32), traced


@moye.kernel
def power_kernel(out, x, n: moye.Constexpr):
    t = moye.thread_idx.x
    out[t] = x[t] ** n


@pytest.mark.parametrize("dtype, n", [(np.float32, 3), (np.int32, 5), (np.float64, 0),
                                      (np.float32, 16), (np.float32, 2.5), (np.float64, -1),
                                      (np.float32, -2)])
def test_powers(dtype, n):
    """x ** n of a static n from 0 to 16: multiplications, in x's type (an
    integer stays one, as in Python); any other exponent: powf (pow)."""
    x = np.array([1.5, 2.0, 3.0, 0.5, 7.0], dtype) if dtype != np.int32 else \
        np.array([1, 2, -3, 4, 5], dtype)
    out = np.zeros(x.size, np.float64)
    power_kernel[1, x.size](out, x, n)
    want = x.astype(np.float64) ** n
    np.testing.assert_allclose(out, want, rtol=2e-7 if dtype == np.float32 else 1e-15)
    traced = power_kernel.ir(out, x, n, block=x.size)
    assert ("fn='pow'" in traced) == (not isinstance(n, int) or not 0 <= n <= 16), traced


@moye.kernel
def float_power_of_kernel(out, x):
    t = moye.thread_idx.x
    out[t] = 2.0 ** x[t]


def test_a_number_to_a_kernel_value():
    x = np.array([0.5, -1.0, 3.0], np.float32)
    out = np.zeros(3, np.float32)
    float_power_of_kernel[1, 3](out, x)
    np.testing.assert_allclose(out, 2.0 ** x, rtol=2e-7)


@moye.kernel
def refused_kernel(out, x, which: moye.Constexpr):
    t = moye.thread_idx.x
    if which == 0:
        out[t] = 2 ** x[t]
    elif which == 1:
        out[t] = x[t] ** -1
    elif which == 2:
        out[t] = round(x[t], 2)
    elif which == 3:
        out[t] = plain_float(x[t])
    else:
        out[t] = plain_int(x[t])


def plain_float(v):
    """Python's float() in a plain function (the rewrite sends a kernel's own
    float() and int() calls to the kernel's conversions)."""
    return float(v)


def plain_int(v):
    return int(v)


@pytest.mark.parametrize("which, dtype, match", [
    (0, np.int32, r"2 \*\* an Int32 value of integers: .*1 << n for powers of two"),
    (1, np.int32, r"an Int32 value \*\* -1 of integers"),
    (2, np.float32, r"round\(\) of the dynamic value .* to 2 digits"),
    (3, np.float32, r"float\(\) of the dynamic value .*moye\.cast\(x, moye\.Float32\).*"
                    r"from a kernel body or a @moye\.func helper"),
    (4, np.float32, r"int\(\) of the dynamic value .*moye\.cast\(x, moye\.Int32\) converts "
                    r"it in the kernel; int\(x\) does too in a kernel body"),
])
def test_what_a_kernel_cannot_compute_is_refused(which, dtype, match):
    with pytest.raises(moye.MoyeError, match=r"test_rounding_cpu\.py:\d+: [\s\S]*" + match):
        refused_kernel[1, 2](np.zeros(2, np.float32), np.ones(2, dtype), which)

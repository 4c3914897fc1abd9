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

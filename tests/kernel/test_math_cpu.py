"""Every accurate math function (ir.arith.MATH) on the CPU backend against
NumPy in float64 rounded once, in Float32 and Float64; on numbers while
tracing against Python's math; the CUDA function each calls, compiled by
NVRTC; and isnan, isinf, isfinite."""
import math

import numpy as np
import pytest

import moye
from moye import ir

ARITY = {"atan2": 2, "hypot": 2, "copysign": 2, "pow": 2, "fma": 3}
DOMAIN = {"log": (0.1, 9), "log2": (0.1, 9), "log10": (0.1, 9), "log1p": (-0.9, 9),
          "sqrt": (0, 9), "rsqrt": (0.1, 9), "asin": (-1, 1), "acos": (-1, 1),
          "pow": (0.1, 4), "exp": (-9, 9), "exp2": (-9, 9), "exp10": (-5, 5),
          "expm1": (-9, 9), "sinh": (-9, 9), "cosh": (-9, 9)}
FUNCTIONS = sorted(ir.arith.MATH)


@moye.kernel
def math_kernel(out, a, b, c, fn: moye.Constexpr, n: moye.Constexpr):
    t = moye.thread_idx.x
    if fn == "pow":
        out[t] = a[t] ** b[t]                   # powf: moye has no pow of its own
    else:
        f = getattr(moye, fn)
        out[t] = f(a[t]) if n == 1 else f(a[t], b[t]) if n == 2 else f(a[t], b[t], c[t])


def operands(fn, dtype, size=48):
    lo, hi = DOMAIN.get(fn, (-20, 20))
    rng = np.random.default_rng(len(fn))
    return [rng.uniform(lo, hi, size).astype(dtype) for _ in range(3)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", FUNCTIONS)
def test_every_function_against_numpy(fn, dtype):
    a, b, c = operands(fn, dtype)
    n = ARITY.get(fn, 1)
    out = np.full(a.size, np.nan, dtype)
    math_kernel[1, a.size](out, a, b, c, fn, n)
    args = [x.astype(np.float64) for x in (a, b, c)[:n]]
    want = ir.arith.MATH[fn][2](*args).astype(dtype)
    np.testing.assert_array_equal(out, want)
    reference = {"exp10": lambda x: 10.0 ** x, "rsqrt": lambda x: 1 / np.sqrt(x),
                 "fma": lambda x, y, z: x * y + z, "rint": np.rint}.get(fn) or \
        getattr(np, {"asin": "arcsin", "acos": "arccos", "atan": "arctan",
                     "atan2": "arctan2", "pow": "power"}.get(fn, fn), None) or \
        np.vectorize(getattr(math, fn))
    np.testing.assert_allclose(out, reference(*args), rtol=2e-7 if dtype == np.float32 else
                               1e-15, atol=1e-37)


@pytest.mark.parametrize("fn", [f for f in FUNCTIONS if f not in ("pow", "rsqrt")])
def test_numbers_while_tracing_are_python_floats(fn):
    n = ARITY.get(fn, 1)
    args = [0.5, 0.25, 2.0][:n]
    got = getattr(moye, fn)(*args)
    want = ir.arith.MATH[fn][2](*(np.float64(x) for x in args))
    assert isinstance(got, float) and got == pytest.approx(float(want), rel=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_cuda_functions_compile(dtype):
    from moye.backend.cuda import nvrtc
    for fn in FUNCTIONS:
        n = ARITY.get(fn, 1)
        arrays = [np.zeros(4, dtype) for _ in range(4)]
        source = math_kernel.cuda_source(*arrays, fn, n, block=4)
        name = ir.arith.MATH[fn][0 if dtype == np.float32 else 1]
        assert f"{name}(" in source, (fn, source)
        assert nvrtc.compile_cuda(source, ["moye_math_kernel"], "sm_80").cubin[:4] == b"\x7fELF"


@moye.kernel
def float_tests_kernel(nan, inf, fin, x):
    t = moye.thread_idx.x
    nan[t] = moye.isnan(x[t])
    inf[t] = moye.isinf(x[t])
    fin[t] = moye.isfinite(x[t])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32])
def test_isnan_isinf_isfinite(dtype):
    x = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 3e4], np.float64)
    if np.dtype(dtype).kind == "i":
        x = np.array([0, -1, 7, 2 ** 31 - 1, -2 ** 31, 5], np.int64)
    x = x.astype(dtype)
    outs = [np.zeros(x.size, np.bool_) for _ in range(3)]
    float_tests_kernel[1, x.size](*outs, x)
    for out, want in zip(outs, (np.isnan(x), np.isinf(x), np.isfinite(x))):
        np.testing.assert_array_equal(out, want)


def test_float_tests_of_numbers_and_bad_arguments():
    assert (moye.isnan(math.nan), moye.isinf(3), moye.isfinite(-math.inf)) == (True, False, False)
    with pytest.raises(moye.MoyeTypeError, match=r"isnan: x must be a number, got 'x'"):
        moye.isnan("x")


@moye.kernel
def min_max_kernel(lo, hi, seq, x, y, z):
    t = moye.thread_idx.x
    lo[t] = min(x[t], y[t], z[t])
    hi[t] = max(x[t], 0.5, z[t])
    seq[t] = max([x[t], y[t]]) - min((y[t], z[t], 1.0))


def test_python_min_and_max_of_many_kernel_values():
    """Python's min and max of two or more kernel values, or of one list or
    tuple of them, chain the kernel's min and max."""
    rng = np.random.default_rng(9)
    x, y, z = (rng.standard_normal(40).astype(np.float32) for _ in range(3))
    lo, hi, seq = (np.full(40, np.nan, np.float32) for _ in range(3))
    min_max_kernel[1, 40](lo, hi, seq, x, y, z)
    np.testing.assert_array_equal(lo, np.minimum(np.minimum(x, y), z))
    np.testing.assert_array_equal(hi, np.maximum(np.maximum(x, 0.5), z))
    np.testing.assert_array_equal(seq, np.maximum(x, y) - np.minimum(np.minimum(y, z), 1.0))


@pytest.mark.parametrize("fn, args, match", [
    ("floor", ("x",), r"floor: its arguments are numbers or kernel values, got 'x'"),
    ("exp", (None,), r"exp: its arguments are numbers or kernel values, got None"),
    ("sqrt", (True,), r"sqrt: its arguments are numbers or kernel values, got True"),
    ("atan2", (1.0,), r"atan2 takes 2 arguments, got 1"),
    ("hypot", (1.0, 2.0, 3.0), r"hypot takes 2 arguments, got 3"),
    ("tan", (), r"tan takes 1 argument, got 0"),
    ("fma", (1.0, 2.0), r"fma takes 3 arguments, got 2"),
])
def test_bad_arguments_are_refused(fn, args, match):
    """On numbers and in kernels alike (a third hypot operand would reach the
    C++ and fail there)."""
    with pytest.raises(moye.MoyeTypeError, match=match):
        getattr(moye, fn)(*args)

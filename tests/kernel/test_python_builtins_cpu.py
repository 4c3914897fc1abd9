"""Python's int(), float(), bool() and the math module's functions on kernel
values: the rewrite sends their calls to moye.compiler.control, which runs
the kernel's conversions and functions on kernel values and Python's on
anything else."""
import math
from math import exp

import numpy as np
import pytest

import moye
from moye import KernelError

POISON = -777.0


@moye.kernel
def conversions(ints, floats, bools, x, k):
    i = moye.thread_idx.x
    ints[i] = int(x[i]) + int(k > i) * 100     # truncation toward zero; a Bool is 0 or 1
    floats[i] = float(i) / 4.0                  # an Int32 as Float32: 0.25, not 0
    bools[i] = int(bool(i % 3))


def test_int_float_bool_of_kernel_values():
    x = np.array([-2.75, -0.5, 0.0, 0.5, 2.75, 1e6, -7.0, 3.999], np.float32)
    ints, floats, bools = (np.full(8, -99, np.int32), np.full(8, POISON, np.float32),
                           np.full(8, -99, np.int32))
    conversions[1, 8](ints, floats, bools, x, 3)
    assert ints.tolist() == [int(v) + 100 * (3 > i) for i, v in enumerate(x.tolist())]
    assert floats.tolist() == [i / 4 for i in range(8)]
    assert bools.tolist() == [int(bool(i % 3)) for i in range(8)]


def test_the_conversions_types_in_the_ir():
    text = conversions.ir(np.zeros(8, np.int32), np.zeros(8, np.float32), np.zeros(8, np.int32),
                          np.zeros(8, np.float32), 3)
    assert ": Float32 = cast(%threadIdx" in text          # float(i)


@moye.kernel
def double_to_int(out, x):
    out[0] = int(x[0])                          # Float64 -> Int32 as well
    out[1] = int(float(x[1]))                   # a Float64 stays Float64 under float()


def test_float64_conversions():
    out = np.zeros(2, np.int32)
    double_to_int[1, 1](out, np.array([-1234567.9, 99.99]))
    assert out.tolist() == [-1234567, 99]


ONE_ARG = ["sqrt", "cbrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin",
           "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "erf", "erfc", "fabs"]


@moye.kernel
def math_one(out, x, which: moye.Constexpr):
    i = moye.thread_idx.x
    v = x[i]
    if which == "sqrt":
        out[i] = math.sqrt(v)
    elif which == "cbrt":
        out[i] = math.cbrt(v)
    elif which == "exp":
        out[i] = math.exp(v)
    elif which == "exp2":
        out[i] = math.exp2(v)
    elif which == "expm1":
        out[i] = math.expm1(v)
    elif which == "log":
        out[i] = math.log(v)
    elif which == "log2":
        out[i] = math.log2(v)
    elif which == "log10":
        out[i] = math.log10(v)
    elif which == "log1p":
        out[i] = math.log1p(v)
    elif which == "sin":
        out[i] = math.sin(v)
    elif which == "cos":
        out[i] = math.cos(v)
    elif which == "tan":
        out[i] = math.tan(v)
    elif which == "asin":
        out[i] = math.asin(v)
    elif which == "acos":
        out[i] = math.acos(v)
    elif which == "atan":
        out[i] = math.atan(v)
    elif which == "sinh":
        out[i] = math.sinh(v)
    elif which == "cosh":
        out[i] = math.cosh(v)
    elif which == "tanh":
        out[i] = math.tanh(v)
    elif which == "erf":
        out[i] = math.erf(v)
    elif which == "erfc":
        out[i] = math.erfc(v)
    else:
        out[i] = math.fabs(v - 1.0)


@pytest.mark.parametrize("name", ONE_ARG)
def test_math_functions_of_kernel_values(name):
    x = np.linspace(0.05, 0.95, 32).astype(np.float32)   # inside every function's domain
    out = np.full(32, POISON, np.float32)
    math_one[1, 32](out, x, name)
    want = [getattr(math, name)(float(v) - (name == "fabs")) for v in x]
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-7)


@moye.kernel
def math_forms(out, rounded, x, y):
    i = moye.thread_idx.x
    out[i, 0] = math.atan2(x[i], y[i])
    out[i, 1] = math.hypot(x[i], y[i])
    out[i, 2] = math.copysign(x[i], y[i])
    out[i, 3] = math.pow(math.fabs(x[i]), 1.5)
    out[i, 4] = math.log(math.fabs(x[i]) + 1.0, 2.0)
    out[i, 5] = exp(y[i])                       # from math import exp
    out[i, 6] = math.sqrt(2.0) * x[i]           # of a Python float: Python's, a constant
    rounded[i, 0] = math.floor(x[i]) * 10       # an Int32, as Python's int
    rounded[i, 1] = math.ceil(x[i])
    rounded[i, 2] = math.trunc(x[i])
    rounded[i, 3] = int(math.isnan(x[i] / y[i]))


def test_two_argument_math_functions_and_rounding_to_int():
    rng = np.random.default_rng(5)
    x = rng.uniform(-3, 3, 16).astype(np.float32)
    y = rng.uniform(-2, 2, 16).astype(np.float32)
    y[3] = 0.0
    x[3] = 0.0                                  # 0 / 0: NaN
    out, rounded = np.full((16, 7), POISON, np.float32), np.full((16, 4), -99, np.int32)
    math_forms[1, 16](out, rounded, x, y)
    X, Y = x.astype(np.float64), y.astype(np.float64)
    want = np.stack([np.arctan2(X, Y), np.hypot(X, Y), np.copysign(X, Y), np.abs(X) ** 1.5,
                     np.log2(np.abs(X) + 1), np.exp(Y), math.sqrt(2.0) * X], axis=1)
    np.testing.assert_allclose(out, want, rtol=3e-6, atol=1e-6)
    assert rounded[:, 0].tolist() == [math.floor(v) * 10 for v in x.tolist()]
    assert rounded[:, 1].tolist() == [math.ceil(v) for v in x.tolist()]
    assert rounded[:, 2].tolist() == [math.trunc(v) for v in x.tolist()]
    assert rounded[:, 3].tolist() == [int(k == 3) for k in range(16)]


@moye.kernel
def not_a_kernel_function(out, x):
    out[0] = math.gamma(x[0])


def test_a_math_function_the_kernel_lacks_names_itself():
    with pytest.raises(KernelError, match=r"math\.gamma\(x\[0\]\)\n.*math\.gamma of a kernel value "
                                          r"is not a kernel function; see docs/builtins\.md"):
        not_a_kernel_function[1, 1](np.zeros(1, np.float32), np.ones(1, np.float32))


def sqrt(v):
    """A user's function that shares a math function's name: called as it is."""
    return v * 3.0


@moye.kernel
def own_sqrt(out, x):
    out[0] = sqrt(x[0])


def test_a_function_named_like_a_math_function_is_called_as_written():
    out = np.zeros(1, np.float32)
    own_sqrt[1, 1](out, np.array([2.0], np.float32))
    assert out.tolist() == [6.0]
    assert "sqrt" not in own_sqrt.ir(out, np.ones(1, np.float32)).replace("own_sqrt", "")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_source(arch):
    from moye.backend.cuda import nvrtc
    out, rounded = np.zeros((16, 7), np.float32), np.zeros((16, 4), np.int32)
    x = np.zeros(16, np.float32)
    source = math_forms.cuda_source(out, rounded, x, x, block=16)
    body = source[source.index("moye_math_forms"):]
    assert "atan2f(" in body and "hypotf(" in body and "floorf(" in body
    assert nvrtc.compile_cuda(source, ["moye_math_forms"], arch).cubin[:4] == b"\x7fELF"


@moye.kernel
def lengths(out, x, y):
    i = moye.thread_idx.x
    if i < len(x):                              # a kernel value: x's extent is a run-time one
        out[i] = x[i] + len(y)                  # a 2-D array's len is its element count


def test_len_of_arrays_with_run_time_extents():
    x = np.arange(20, dtype=np.float32)
    out = np.full(32, POISON, np.float32)
    lengths[1, 32](out, x, np.zeros((3, 4), np.float32))
    assert out.tolist() == (x + 12).tolist() + [POISON] * 12


@moye.kernel
def shape_as_numpy(out, x):
    out[0] = x.shape[0]


def test_a_1d_shape_indexed_as_numpys_says_it_is_a_number():
    with pytest.raises(KernelError, match=r"out\[0\] = x\.shape\[0\]\n.*is a number, not an "
                       r"array.*a 1-D array's shape is its extent, as CuTe's: x\.shape is n, "
                       r"not \(n,\)"):
        shape_as_numpy[1, 1](np.zeros(1, np.int32), np.zeros(5, np.int32))


@moye.kernel
def weighted_sum(out, x):
    s = 0.0
    k = 0
    for v in x:                                 # x's extents are run-time values: a kernel loop
        s += v * (k + 1)
        k += 1
    out[0] = s


def test_iterating_an_array_with_run_time_extents():
    out = np.full(1, POISON, np.float32)
    weighted_sum[1, 1](out, np.array([1.0, 2.0, 3.0], np.float32))
    assert out.tolist() == [1.0 + 4.0 + 9.0]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)      # CuTe's order: the first mode fastest
    weighted_sum[1, 1](out, x)
    assert out.tolist() == [sum(v * (k + 1) for k, v in enumerate([0, 3, 1, 4, 2, 5]))]
    text = weighted_sum.ir(out, np.zeros(3, np.float32))
    assert "for " in text                       # one loop, not unrolled


@moye.kernel
def printing(out, x):
    i = moye.thread_idx.x
    print("thread", i, "holds", x[i])           # a kernel value: every thread prints
    print("tracing printing")                   # static: printed once, while tracing
    out[i] = x[i]


def test_print_of_kernel_values_prints_from_every_thread(capsys):
    printing._traces.clear()
    printing._compiled.clear()
    out = np.zeros(3, np.float32)
    printing[1, 3](out, np.array([0.5, 1.5, 2.5], np.float32))
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["tracing printing", "thread 0 holds 0.500000", "thread 1 holds 1.500000",
                     "thread 2 holds 2.500000"]
    source = printing.cuda_source(out, out, block=3)
    assert 'printf("thread %lld holds %f\\n"' in source


@moye.kernel
def printing_with_sep(out, x):
    print(x[0], x[1], sep=", ")


def test_print_of_kernel_values_takes_the_default_sep_and_end():
    with pytest.raises(KernelError, match=r"print\(x\[0\], x\[1\], sep=\", \"\)\n.*prints from "
                                          r"every thread .* default sep and end; got sep"):
        printing_with_sep[1, 1](np.zeros(1, np.float32), np.ones(2, np.float32))

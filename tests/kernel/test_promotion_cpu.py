"""Numeric promotion in kernels (docs/kernels.md, "Numbers and promotion"):
the result type of each kind of mixed operation, read from the traced IR,
and the half-precision accumulator of issue 18 run on the CPU backend."""
import ml_dtypes
import numpy as np

import moye
from moye import ir


def _result_types(kernel, *args):
    """The result types of the traced kernel's arithmetic, in order."""
    traced = kernel.trace(*args, block=1)[0]
    return [s.result.type for s in ir.instructions(traced.body)
            if isinstance(s, (ir.Binary, ir.Compare)) and s.result is not None]


@moye.kernel
def literal_sum(out, h, n: moye.Constexpr):
    s = 0.0
    for i in moye.range_constexpr(n):
        s = s + h[i] * h[i]
    out[0] = s


def test_a_float_literal_accumulator_over_halves_adds_in_float32():
    rng = np.random.default_rng(18)
    h = (1 + rng.random(256)).astype(np.float16)            # squares in [1, 4): a sum near 600
    out = np.full(1, np.nan, np.float32)
    literal_sum[1, 1](out, h, h.size)
    squares = (h * h).astype(np.float64)                    # h * h is Float16, as in C++
    want = squares.sum()
    assert abs(out[0] - want) <= 1e-6 * want                # Float32 accumulation
    fp16_sum = np.float16(0)
    for q in (h * h):
        fp16_sum = np.float16(fp16_sum + q)
    assert abs(float(fp16_sum) - want) > 0.1                # what the old Float16 sum lost


@moye.kernel
def mixed(out, h, b, f, d, i):
    out[0] = h[0] + 0.5           # Float16 with a float literal -> Float32
    out[1] = b[0] * 2.0           # BFloat16 with a float literal -> Float32
    out[2] = f[0] - 1.5           # Float32 stays Float32
    out[3] = d[0] / 3.0           # Float64 stays Float64
    out[4] = h[0] + 1             # an int literal takes the value's type: Float16
    out[5] = i[0] + 0.25          # an integer with a float literal -> Float32
    out[6] = h[0] + f[0]          # Float16 with Float32 -> Float32
    out[7] = h[0] * b[0]          # Float16 with BFloat16 -> Float32
    out[8] = i[0] + h[0]          # an integer with a float -> the float's type: Float16
    out[9] = f[0] + d[0]          # Float32 with Float64 -> Float64


def test_the_result_type_of_each_mixed_operation():
    h = np.array([1.25], np.float16)
    b = np.array([3.0], ml_dtypes.bfloat16)
    f = np.array([3.5], np.float32)
    d = np.array([7.0], np.float64)
    i = np.array([9], np.int32)
    out = np.full(10, np.nan, np.float64)
    F16, F32, F64 = moye.Float16, moye.Float32, moye.Float64
    assert _result_types(mixed, out, h, b, f, d, i) == [F32, F32, F32, F64, F16, F32, F32, F32,
                                                         F16, F64]
    mixed[1, 1](out, h, b, f, d, i)
    want = [1.75, 6.0, 2.0, 7 / 3, 2.25, 9.25, 4.75, 3.75, 10.25, 10.5]
    np.testing.assert_allclose(out, want, rtol=1e-15)


def test_mixed_operations_compute_in_the_promoted_type_on_the_cpu():
    h = np.array([1.0 + 2 ** -10], np.float16)          # 1 + one half-precision ulp
    out = np.full(3, np.nan, np.float32)

    e = np.array([2.0 ** -12], np.float16)

    @moye.kernel
    def halves(out, h, e):
        out[0] = h[0] + 2.0 ** -12              # Float32: the small term survives
        out[1] = h[0] + e[0]                    # Float16: it rounds away
        out[2] = (h[0] < 1.0 + 2 ** -11) + 0    # compared in Float32: False

    halves[1, 1](out, h, e)
    assert out[0] == np.float32(1 + 2 ** -10 + 2 ** -12)
    assert out[1] == np.float32(1 + 2 ** -10)
    assert out[2] == 0


# -- names that run-time control flow carries: their types --------------------------------

@moye.kernel
def branch_int_or_float(out, x):
    i = moye.thread_idx.x
    if x[i] > 0:
        r = 0
    else:
        r = x[i] * 1.5                  # Python's r would be a float here
    out[i] = r


def test_a_run_time_if_leaving_an_int_or_a_float_makes_the_name_a_float():
    x = np.array([1.0, -1.0, -0.3, 2.0], np.float32)
    out = np.full(4, np.nan, np.float32)
    branch_int_or_float[1, 4](out, x)
    np.testing.assert_array_equal(out, [0.0, -1.5, np.float32(-0.3) * np.float32(1.5), 0.0])
    traced = branch_int_or_float.trace(out, x, block=4)[0]
    assert [s.args[0].type for s in ir.instructions(traced.body) if s.op == "decl"] == \
        [moye.Float32]


@moye.kernel
def branch_half_or_double(out, h, d):
    i = moye.thread_idx.x
    if i % 2 == 0:
        r = h[i]
    else:
        r = d[i]                        # Float16 or Float64: Float64
    out[i] = r


def test_a_run_time_if_leaving_two_kernel_types_takes_the_wider():
    h = np.array([1 / 3] * 4, np.float16)
    d = np.array([1 / 3] * 4, np.float64)
    out = np.full(4, np.nan, np.float64)
    branch_half_or_double[1, 4](out, h, d)
    np.testing.assert_array_equal(out, [np.float64(h[0]), 1 / 3] * 2)


@moye.kernel
def int_sum_of_floats(out, x, n):
    s = 0
    for j in range(n):                  # a run-time loop: s keeps one type
        s += x[j]
    out[0] = s


@moye.kernel
def wide_into_narrow(out, x, n):
    s = moye.cast(0, moye.Int32)
    for j in range(n):
        s = s + x[j]                    # x is Int64
    out[0] = s


def test_a_loop_carried_name_that_would_be_cut_is_an_error_naming_it():
    """s = 0 then s += a float, in a loop that stays one, would truncate s
    every iteration (C's `int s`); Python's s becomes a float. The loop
    cannot change a variable's type: an error, with the way out."""
    import pytest
    with pytest.raises(moye.KernelError, match=r"test_promotion_cpu\.py:\d+: s \+= x\[j\]\n.*'s' "
                       r"changes type from Int32 to Float32 in the body of a loop that stays a "
                       r"loop.*s = 0\.0 for a float"):
        int_sum_of_floats[1, 1](np.zeros(1, np.float32), np.ones(4, np.float32), 4)
    with pytest.raises(moye.KernelError, match=r"'s' changes type from Int32 to Int64"):
        wide_into_narrow[1, 1](np.zeros(1, np.int64), np.ones(4, np.int64), 4)


@moye.kernel
def float_sum(out, x, n):
    s = 0.0
    m = -float("inf")
    k = 0
    for j in range(n):                  # Float32, Float32, Int32 throughout: no error
        s += x[j]
        m = moye.maximum(m, x[j])
        k += 1
    out[0] = s + m + k


def test_a_loop_whose_names_keep_their_types_runs():
    x = np.random.default_rng(2).standard_normal(9).astype(np.float32)
    out = np.full(1, np.nan, np.float32)
    float_sum[1, 1](out, x, 9)
    np.testing.assert_allclose(out, [x.astype(np.float64).sum() + x.max() + 9], rtol=1e-5)

"""16-bit floats (Float16 and BFloat16) in kernels: conversions from and to
every number type and arithmetic, bit for bit against a one-rounding
reference in exact rationals, NumPy and ml_dtypes, on the CPU backend; and
the C++ that spells them for NVRTC (backend/cuda/float16.PRELUDE, in place
of CUDA's headers) compiled for every architecture. tests/gpu/test_float16_gpu.py
runs the same kernels on a GPU over every 16-bit value."""
import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import moye
from moye.backend.cuda.float16 import PRELUDE, needs_float16
from moye.compiler.frontend import BACKENDS

HALVES = [np.float16, ml_dtypes.bfloat16]
BLOCK = 256


@moye.kernel
def convert(out, x):
    """out[i] = x[i] in out's type (C++ static_cast)."""
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    out[i] = moye.cast(x[i], out.dtype)


@moye.kernel
def arithmetic(out, flags, a, b):
    """The four operations and negation of two 16-bit values, in their type,
    and the six comparisons, as Int32 0 or 1."""
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    x, y = a[i], b[i]
    out[0, i] = x + y
    out[1, i] = x - y
    out[2, i] = x * y
    out[3, i] = x / y
    out[4, i] = -x
    for k, truth in enumerate((x < y, x <= y, x > y, x >= y, x == y, x != y)):
        flags[k, i] = moye.cast(truth, moye.Int32)


def launch(kern, *args):
    n = args[-1].shape[-1]
    kern[n // BLOCK, BLOCK](*args)


# -- references --------------------------------------------------------------------------
def nearest(value, dtype):
    """`value` (an int or a float) rounded once to the nearest `dtype` (ties
    to even), from its exact rational value: IEEE's rule for one rounding."""
    if isinstance(value, float) and not math.isfinite(value):
        return dtype(value)
    info = ml_dtypes.finfo(dtype)
    q = Fraction(value)
    if q == 0:
        return dtype(math.copysign(0.0, value) if isinstance(value, float) else 0.0)
    size = abs(q)
    e = size.numerator.bit_length() - size.denominator.bit_length()
    if Fraction(2) ** e > size:
        e -= 1
    ulp = Fraction(2) ** (max(e, info.minexp) - info.nmant)
    rounded = round(q / ulp) * ulp            # Fraction rounds half to even
    if abs(rounded) > Fraction(float(info.max)):
        return dtype(math.copysign(math.inf, q))
    return dtype(math.copysign(float(rounded), q))


def truncated(values, dtype):
    """Float values as the integer `dtype`: toward zero, clamped to its
    range (PTX cvt.rzi); NaN 0, or 1 << (bits - 1) into a 64-bit integer or
    from a float64, as the PTX ISA states; below 32 bits, the 32-bit value
    clamped."""
    info = np.iinfo(dtype)
    if info.bits < 32:
        wide = truncated(values, np.int32 if info.min else np.uint32)
        return np.clip(wide, info.min, info.max).astype(dtype)
    nan = (info.min or 1 << info.bits - 1) if info.bits == 64 or values.itemsize == 8 else 0
    with np.errstate(invalid="ignore"):         # ml_dtypes warns on NaN, which stays NaN
        wide = values.astype(np.float64)
    out = []
    for v in wide:
        out.append(nan if math.isnan(v) else
                   max(info.min, min(info.max, int(v) if math.isfinite(v) else
                                     (info.max if v > 0 else info.min))))
    return np.array(out, dtype)


def float_edges(source, seed=4):
    """Float32 or float64 values at and past every integer type's ends,
    fractions either side of zero, infinities, NaN and random ones."""
    ends = [float(e) + d for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                   np.int64, np.uint64)
            for e in (np.iinfo(t).min, np.iinfo(t).max) for d in (-1.5, -0.5, 0, 0.5, 1.5)]
    rng = np.random.default_rng(seed)
    special = [math.nan, math.inf, -math.inf, 0.0, -0.0, 0.7, -0.7, 1e30, -1e30]
    return padded(np.array(ends + special + list(rng.standard_normal(200) * 10.0 **
                                                 rng.integers(0, 20, 200)), source))


def bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def same_bits(got, want):
    """Equal bit for bit, where any NaN equals any NaN."""
    got = np.asarray(got)
    want = np.asarray(want, got.dtype) if isinstance(want, list) else np.asarray(want)
    nan = np.isnan(want.astype(np.float32))
    assert (np.isnan(got.astype(np.float32)) == nan).all()
    assert got.dtype == want.dtype
    wrong = np.flatnonzero((bits(got) != bits(want)) & ~nan)
    assert not wrong.size, (wrong[:8], got[wrong[:8]], want[wrong[:8]])


# -- inputs: values near and on the 16-bit rounding boundaries ---------------------------
def every_value(dtype):
    """All 65536 bit patterns of a 16-bit float type."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)


def doubles_near_ties(dtype, n, seed=0):
    """Float64 values on, just above and just below the midpoints between
    neighbouring finite `dtype` values, and random ones across its range."""
    rng = np.random.default_rng(seed)
    v = every_value(dtype)[rng.integers(0, 1 << 16, n)]
    v = v[np.isfinite(v.astype(np.float32))].astype(np.float64)
    up = np.nextafter(v.astype(dtype), np.array(np.inf, dtype)).astype(np.float64)
    mid = (v + up) / 2
    wiggle = np.abs(mid) * 2.0 ** -40 + 1e-300
    out = np.concatenate([mid, mid + wiggle, mid - wiggle,
                          rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)])
    return out[np.isfinite(out)]


def floats_near_ties(dtype, n, seed=1):
    """Float32 values as doubles_near_ties, rounded to float32 (its ties
    survive: float32 holds every midpoint of a 16-bit type)."""
    return doubles_near_ties(dtype, n, seed).astype(np.float32)


def ints_near_ties(dtype, int_type, n, seed=2):
    """Integers of `int_type` on and around the 16-bit midpoints that
    integers can hit, and random ones over the whole type."""
    info = np.iinfo(int_type)
    rng = np.random.default_rng(seed)
    bits_ = 64 if info.bits == 64 else info.bits
    scale = 2 ** rng.integers(0, bits_ - 1, n).astype(object)
    odd = rng.integers(0, 1 << 12, n).astype(object) * 2 + 1
    ties = [int(o * s // 2 ** (ml_dtypes.finfo(dtype).nmant + 1)) for o, s in zip(odd, scale)]
    wide = [int(x) for x in rng.integers(info.min, info.max, n, dtype=np.int64 if
                                         info.min < 0 else np.uint64)]
    vals = [t + d for t in ties for d in (-1, 0, 1)] + wide
    return np.array([v for v in vals if info.min <= v <= info.max], int_type)


def padded(x):
    """x with its length a multiple of BLOCK (repeats of its first element)."""
    return np.concatenate([x, np.repeat(x[:1], -len(x) % BLOCK)])


# -- checks, shared with the GPU test --------------------------------------------------------
def check_widening(run, dtype):
    x = every_value(dtype)
    same_bits(run(convert, np.float32, x), x.astype(np.float32))


def check_round_trip(run, dtype):
    x = every_value(dtype)
    same_bits(run(convert, dtype, x.astype(np.float32)), x)


def check_narrowing(run, dtype, source, n):
    x = padded({np.float32: floats_near_ties, np.float64: doubles_near_ties}[source](dtype, n))
    same_bits(run(convert, dtype, x), [nearest(float(v), dtype) for v in x])


def check_from_ints(run, dtype, int_type, n):
    x = padded(ints_near_ties(dtype, int_type, n))
    same_bits(run(convert, dtype, x), [nearest(int(v), dtype) for v in x])


def check_to_ints(run, int_type, x):
    got, want = run(convert, int_type, x), truncated(x, int_type)
    wrong = np.flatnonzero(got != want)
    assert not wrong.size, (x[wrong[:8]], got[wrong[:8]], want[wrong[:8]])


def check_arithmetic(run, dtype, n, seed=3):
    rng = np.random.default_rng(seed)
    pool = every_value(dtype)
    a, b = (pool[rng.integers(0, 1 << 16, n)] for _ in range(2))
    out, flags = run(arithmetic, dtype, a, b)
    with np.errstate(all="ignore"):     # NumPy and ml_dtypes round float32 results once
        f, g = a.astype(np.float32), b.astype(np.float32)
        for row, exact in zip(out, (f + g, f - g, f * g, f / g, -f)):
            same_bits(row, exact.astype(dtype))
        truths = (f < g, f <= g, f > g, f >= g, f == g, f != g)
    assert (flags == np.array(truths, np.int32)).all()


def run_cpu(kern, out_type, *args):
    """The kernel on the CPU backend, outputs poisoned; gives them back."""
    n = len(args[0])
    if kern is arithmetic:
        out, flags = np.full((5, n), np.nan, out_type), np.full((6, n), -7, np.int32)
        launch(kern, out, flags, *args)
        return out, flags
    out = np.zeros(n, out_type)
    out[:] = 99 if np.dtype(out_type).kind in "iu" else np.nan
    launch(kern, out, *args)
    return out


@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_every_value_widens_exactly_and_narrows_back(dtype):
    check_widening(run_cpu, dtype)
    check_round_trip(run_cpu, dtype)


@pytest.mark.parametrize("source", [np.float32, np.float64])
@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_narrowing_rounds_once_to_nearest_even(dtype, source):
    check_narrowing(run_cpu, dtype, source, 200)


@pytest.mark.parametrize("int_type", [np.int16, np.int32, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_integers_round_once(dtype, int_type):
    check_from_ints(run_cpu, dtype, int_type, 150)


@pytest.mark.parametrize("int_type", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.int64,
                                      np.uint64])
@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_every_value_truncates_to_integers_saturating(dtype, int_type):
    check_to_ints(run_cpu, int_type, every_value(dtype))


@pytest.mark.parametrize("int_type", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                      np.int64, np.uint64])
@pytest.mark.parametrize("source", [np.float32, np.float64])
def test_wider_floats_truncate_to_integers_saturating(source, int_type):
    check_to_ints(run_cpu, int_type, float_edges(source))


@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_arithmetic_rounds_once_and_compares_as_floats(dtype):
    check_arithmetic(run_cpu, dtype, 1024)


@moye.kernel
def store(out, x):
    """out[i] = x[i], converted by the store alone."""
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    out[i] = x[i]


@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_a_store_converts_between_the_16_bit_types(dtype):
    """Float16 and BFloat16 have the same size and kind but not the same
    bits: a store of one into the other converts (rounding once), on the
    CPU and in the C++ that NVRTC compiles."""
    other = HALVES[1 - HALVES.index(dtype)]
    x = every_value(other)
    out = np.full(len(x), np.nan, dtype)
    launch(store, out, x)
    with np.errstate(invalid="ignore", over="ignore"):      # NaN stays NaN, bfloat16's range
        same_bits(out, x.astype(np.float32).astype(dtype))     # overflows half
    assert f"static_cast<{'half' if dtype is np.float16 else '__nv_bfloat16'}>" in \
        store.cuda_source(out, x, block=BLOCK)
    for arch in ("sm_80", "sm_90a"):
        assert BACKENDS["cuda"].compile_only(store.trace(out, x, block=BLOCK)[0],
                                             (BLOCK, 1, 1), arch)


# -- the C++ -------------------------------------------------------------------------------
def sources(dtype):
    """The C++ of convert from and to every number type, and of arithmetic."""
    n = BLOCK
    x16 = np.zeros(n, dtype)
    out = [convert.cuda_source(np.zeros(n, t), x16, block=BLOCK)
           for t in (np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32,
                     np.uint32, np.int64, np.uint64, *HALVES)]
    out += [convert.cuda_source(x16, np.zeros(n, t), block=BLOCK)
            for t in (np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32,
                      np.uint32, np.int64, np.uint64, *HALVES)]
    out.append(arithmetic.cuda_source(np.zeros((5, n), dtype), np.zeros((6, n), np.int32),
                                      x16, x16, block=BLOCK))
    return out


@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_the_cpp_defines_its_16_bit_types_without_cuda_headers(dtype):
    for source in sources(dtype):
        assert "#include" not in source
        assert source.startswith(PRELUDE)
    plain = convert.cuda_source(np.zeros(8, np.float32), np.zeros(8, np.int32), block=8)
    assert not needs_float16(plain) and "moye_float16" not in plain


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", HALVES, ids=["half", "bfloat16"])
def test_nvrtc_compiles_every_conversion_and_operation(dtype, arch):
    """Every constructor, conversion and operator the kernels use, for an
    architecture below bfloat16's hardware conversions (sm_75), at them
    (sm_80) and with bfloat16 arithmetic and atomics (sm_90a)."""
    n = BLOCK
    x16 = np.zeros(n, dtype)
    cases = [(np.zeros(n, t), x16) for t in (np.float32, np.int8, np.uint64, *HALVES)]
    cases += [(x16, np.zeros(n, t)) for t in (np.float64, np.int32, np.int64, np.uint64)]
    for out, x in cases:
        assert BACKENDS["cuda"].compile_only(convert.trace(out, x, block=n)[0], (n, 1, 1), arch)
    traced = arithmetic.trace(np.zeros((5, n), dtype), np.zeros((6, n), np.int32), x16, x16,
                              block=n)[0]
    assert BACKENDS["cuda"].compile_only(traced, (n, 1, 1), arch)


def test_every_prelude_function_compiles_alone():
    """The prelude by itself, with a kernel calling each of its functions:
    NVRTC compiles what no generated kernel happens to use yet."""
    from moye.backend.cuda import nvrtc
    body = PRELUDE + r"""
extern "C" __global__ void every_function(half* h, __nv_bfloat16* b, __half2* h2,
                                          __nv_bfloat162* b2,
                               float* f, long long* l, unsigned long long* u, char* c) {
  half x = h[0];
  __nv_bfloat16 y = b[0];
  x += half(l[0]); x -= half(u[0]); x *= half(2.0); x /= half(static_cast<short>(3));
  y += __nv_bfloat16(l[1]); y -= __nv_bfloat16(u[1]); y *= __nv_bfloat16(2.0);
  y = static_cast<__nv_bfloat16>(x) + +y;
  f[0] = static_cast<float>(static_cast<half>(y)) + static_cast<double>(x);
  c[0] = static_cast<char>(x) + static_cast<unsigned char>(y) + static_cast<bool>(x);
  l[0] = static_cast<long>(x) + static_cast<unsigned long>(y) + static_cast<unsigned short>(x);
  h[1] = __ushort_as_half(__half_as_ushort(atomicAdd(h, x)));
  b[1] = __ushort_as_bfloat16(__bfloat16_as_ushort(atomicAdd(b, y)));
  atomicAdd(h2, h2[1]);
  atomicAdd(b2, b2[1]);
}
"""
    for arch in ("sm_75", "sm_80", "sm_90a"):
        assert nvrtc.compile_cuda(body, ["every_function"], arch).cubin

"""Number conversions as a GPU makes them (C++ static_cast on CUDA), where
NumPy's `astype` differs:
- float to integer truncates toward zero and saturates (PTX cvt.rzi), where
  NumPy's out-of-range casts are undefined; NaN gives 0, or 1 << (bits - 1)
  from a float64 or into a 64-bit integer, as the PTX ISA states. An
  integer narrower than 32 bits is the 32-bit one clamped to its range, as
  the generated C++ computes it (codegen's Cast, float16.PRELUDE);
- to bfloat16, a float64 or an integer rounds once to the nearest, where
  ml_dtypes goes through float32 and can round twice.

    >>> import numpy as np, ml_dtypes
    >>> convert(np.array([300.7, -1e9, np.nan], np.float32), np.dtype(np.int8))
    array([ 127, -128,    0], dtype=int8)
    >>> x = np.array([1 + 2.0**-8 + 2.0**-30])     # just above a bfloat16 midpoint
    >>> float(convert(x, np.dtype(ml_dtypes.bfloat16))[0]), float(x.astype(ml_dtypes.bfloat16)[0])
    (1.0078125, 1.0)
"""
import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def convert(values, dtype):
    """`values` (a NumPy array) as `dtype`, as CUDA converts them."""
    source = values.dtype
    with np.errstate(all="ignore"):
        if dtype.kind in "iu" and (source.kind == "f" or source == BFLOAT16):
            if dtype.itemsize < 4:
                info = np.iinfo(dtype)
                wide = convert(values, np.dtype(f"{dtype.kind}4"))
                return np.clip(wide, info.min, info.max).astype(dtype)
            nan = 1 << dtype.itemsize * 8 - 1 if source.itemsize == 8 or dtype.itemsize == 8 else 0
            return _truncated(values.astype(np.float64), dtype, nan)
        if dtype == BFLOAT16 and (source.kind in "iu" or source == np.float64):
            return _rounded_once(values).astype(BFLOAT16)
        return values.astype(dtype)


def _truncated(x, dtype, nan):
    info = np.iinfo(dtype)
    t = np.nan_to_num(np.trunc(x), nan=0.0)
    inside = t.astype(dtype) if dtype.itemsize < 8 else np.where(
        (t > info.min) & (t < info.max), t, 0).astype(dtype)
    out = np.where(t >= info.max, info.max, np.where(t <= info.min, info.min, inside))
    return np.where(np.isnan(x), np.array(nan).astype(dtype), out).astype(dtype)


def _rounded_once(x):
    """x as float32 rounded to odd (toward zero, its last bit set where bits
    were dropped): rounding that float32 to bfloat16 rounds as x itself would.
    Integers beyond 2^53, which float64 would round, go bit by bit."""
    if x.dtype.kind in "iu" and x.size and np.abs(x.astype(np.float64)).max() >= 2.0**53:
        return np.array([_odd_float32(int(v)) for v in x.ravel()], np.float32).reshape(x.shape)
    d = x.astype(np.float64)
    f = d.astype(np.float32)
    f = np.where(np.abs(f.astype(np.float64)) > np.abs(d), np.nextafter(f, np.float32(0)), f)
    inexact = (f.astype(np.float64) != d) & ~np.isnan(d)
    return np.where(inexact, (f.view(np.uint32) | 1).view(np.float32), f)


def _odd_float32(n):
    """The integer n as float32 rounded to odd."""
    size = abs(n)
    drop = max(size.bit_length() - 24, 0)
    kept = size >> drop
    if kept << drop != size:
        kept |= 1
    return np.float32(float(kept << drop) * (-1 if n < 0 else 1))

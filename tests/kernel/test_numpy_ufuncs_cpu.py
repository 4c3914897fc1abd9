"""NumPy's ufuncs of kernel values: np.exp(x) is moye.exp(x) (the same IR,
so the same bits), operators with NumPy scalars and arrays work element by
element, and what has no kernel form (a ufunc's reduce, a math function
without a kernel twin) is an error naming the kernel's line and the way
out."""
import math
import re

import numpy as np
import pytest

import moye
from moye import KernelError

UNARY = {"exp": moye.exp, "exp2": moye.exp2, "log": moye.log, "log2": moye.log2,
         "log10": moye.log10, "log1p": moye.log1p, "expm1": moye.expm1, "sqrt": moye.sqrt,
         "cbrt": moye.cbrt, "sin": moye.sin, "cos": moye.cos, "tan": moye.tan,
         "arcsin": moye.asin, "arccos": moye.acos, "arctan": moye.atan, "sinh": moye.sinh,
         "cosh": moye.cosh, "tanh": moye.tanh, "floor": moye.floor, "ceil": moye.ceil,
         "trunc": moye.trunc, "rint": moye.rint}


@moye.kernel
def unary_kernel(out, x, name: moye.Constexpr, numpy: moye.Constexpr):
    i = moye.thread_idx.x
    v = x[i]
    out[i] = getattr(np, name)(v) if numpy else UNARY[name](v)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_a_numpy_math_ufunc_is_the_kernel_function(name):
    x = np.random.default_rng(0).uniform(0.05, 0.95, 32).astype(np.float32)
    got, want = (np.full(32, np.nan, np.float32) for _ in range(2))
    unary_kernel[1, 32](got, x, name, True)
    unary_kernel[1, 32](want, x, name, False)
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got).all()
    same = [re.sub(r"\d+|numpy=\w+", "", unary_kernel.ir(got, x, name, numpy, block=32))
            for numpy in (True, False)]
    assert same[0] == same[1]                               # but for the values' numbers


WEIGHTS = np.array([1.0, 2.0, 3.0], np.float32)


@moye.kernel
def mixed_kernel(out, x):
    i = moye.thread_idx.x
    v = x[i]
    w = WEIGHTS * v                                         # a NumPy array of kernel values
    out[i, 0] = np.float32(2.0) * v + np.float64(0.5)
    out[i, 1] = np.maximum(v, 0.0) + np.minimum(v, np.float32(-0.25))
    out[i, 2] = w[0] + w[2] - np.abs(v)
    out[i, 3] = np.arctan2(v, 2.0) + np.hypot(v, 3.0) + np.copysign(1.0, v)
    out[i, 4] = 1.0 if np.isnan(v) or np.isinf(v) else (2.0 if np.isfinite(v) else 3.0)


def test_operators_and_two_argument_ufuncs_with_numpy_scalars_and_arrays():
    x = np.array([0.5, -1.0, 2.0, 0.0, np.nan, -np.inf] + [1.5] * 26, np.float32)
    out = np.full((32, 5), np.nan, np.float32)
    mixed_kernel[1, 32](out, x)
    v = x.astype(np.float64)
    want = np.stack([2 * v + 0.5, np.maximum(v, 0.0) + np.minimum(v, -0.25), 4 * v - np.abs(v),
                     np.arctan2(v, 2.0) + np.hypot(v, 3.0) + np.copysign(1.0, v),
                     np.where(np.isfinite(v), 2.0, 1.0)], 1)
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-6)


@moye.kernel
def reduce_kernel(out, x):
    out[0] = np.add.reduce(x[0])


@moye.kernel
def math_module_kernel(out, x):
    out[0] = math.gamma(x[0])


def test_what_has_no_kernel_form_is_an_error_naming_the_line():
    with pytest.raises(KernelError, match=r"test_numpy_ufuncs_cpu\.py:\d+: out\[0\] = "
                       r"np\.add\.reduce\(x\[0\]\)\n.*NumPy's add\.reduce of a kernel value is "
                       r"not a kernel function"):
        reduce_kernel[1, 1](np.zeros(1, np.float32), np.ones(1, np.float32))
    with pytest.raises(KernelError, match=r"math\.gamma\(x\[0\]\)\n.*math\.gamma of a kernel "
                       r"value is not a kernel function"):
        math_module_kernel[1, 1](np.zeros(1, np.float32), np.ones(1, np.float32))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_source_and_nvrtc(arch):
    from moye.backend.cuda import nvrtc
    source = mixed_kernel.cuda_source(np.zeros((32, 5), np.float32), np.zeros(32, np.float32),
                                      block=32)
    assert "atan2f(" in source and "hypotf(" in source
    assert nvrtc.compile_cuda(source, ["moye_mixed_kernel"], arch).cubin[:4] == b"\x7fELF"

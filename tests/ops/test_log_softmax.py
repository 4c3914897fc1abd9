"""moye.ops.log_softmax and log_softmax_backward on the CPU backend: every
element against a float64 NumPy reference, each kernel path (registers,
loop, cluster), ragged rows, races, bad inputs, and NVRTC compiles of each
kernel."""
import ml_dtypes
import numpy as np
import pytest

import moye
from moye.backend.cpu import race_checking
from moye.ops import log_softmax, log_softmax_backward, rows
from moye.ops import log_softmax_op as module

from .nvrtc import compile_variants

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
# tolerance on log-probabilities (tens in magnitude): the output type's rounding
ATOL = {np.float32: 1e-5, np.float16: 2e-3, ml_dtypes.bfloat16: 1.6e-2, np.float64: 1e-12}
RTOL = {np.float32: 2e-6, np.float16: 1e-3, ml_dtypes.bfloat16: 8e-3, np.float64: 1e-13}


def reference(x, axis=-1):
    xd = np.asarray(x, np.float64)
    m = xd.max(axis, keepdims=True)
    return xd - m - np.log(np.exp(xd - m).sum(axis, keepdims=True))


def reference_backward(y, dy, axis=-1):
    yd, dyd = np.asarray(y, np.float64), np.asarray(dy, np.float64)
    return dyd - np.exp(yd) * dyd.sum(axis, keepdims=True)


def data(rng, shape, dtype, scale):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def check_backward(dx, y, dy, dtype, axis=-1):
    """dx against the reference, within the output type's rounding of the
    largest term (dy, or exp(y) sum(dy))."""
    want = reference_backward(y, dy, axis)
    scale = np.abs(dy.astype(np.float64)).max() + np.abs(want).max()
    np.testing.assert_allclose(dx.astype(np.float64), want, atol=ATOL[dtype] / 4 * scale,
                               rtol=RTOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 33, 1000, 4097])
def test_forward_and_backward(dtype, n):
    rng = np.random.default_rng(n)
    m = 3 if n < 1000 else 2
    x = data(rng, (m, n), dtype, 4.0)
    y = log_softmax(x)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_allclose(y.astype(np.float64), reference(x), atol=ATOL[dtype],
                               rtol=RTOL[dtype])
    dy = data(rng, (m, n), dtype, 1.0)
    dx = log_softmax_backward(y, dy)
    assert dx.dtype == y.dtype and dx.shape == y.shape
    check_backward(dx, y, dy, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 700), (2, 3, 301), (5, 1024)])
def test_each_kernel_path(path, dtype, shape):
    """Rows of a few hundred take each kernel under its plan options."""
    rng = np.random.default_rng(sum(shape))
    x = data(rng, shape, dtype, 10.0)
    p = rows.plan_for(x, np.dtype(dtype).name, shape[-1])
    assert p.kernel == ("loop" if path == "loop" else "registers")
    assert (p.cluster > 1) == path.startswith("cluster")
    assert bool(rows.staged(p, x, 1)) == path.endswith("staged")
    y = log_softmax(x)
    np.testing.assert_allclose(y.astype(np.float64), reference(x), atol=ATOL[dtype] * 4,
                               rtol=RTOL[dtype])
    dy = data(rng, shape, dtype, 1.0)
    check_backward(log_softmax_backward(y, dy), y, dy, dtype)


def test_large_magnitudes_are_stable(path):
    """exp of 1e4 overflows float32: the max is subtracted first. -inf
    elements stay -inf; rows of the largest float32 stay finite."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 2000)) * 1e4).astype(np.float32)
    x[1, 5:50] = -np.inf
    x[2] = 3e38
    y = log_softmax(x)
    assert np.isfinite(np.delete(y, 1, 0)).all() and np.isfinite(y[1, 50:]).all()
    assert (y[1, 5:50] == -np.inf).all()
    np.testing.assert_allclose(y, reference(x), atol=1e-5, rtol=2e-6)


def test_float64_beyond_float32_range(path):
    """float64 rows far below float32's lowest: the max's identity is
    float64's."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 700)) - 1e300
    np.testing.assert_allclose(log_softmax(x), reference(x), atol=1e-12 * 1e300)
    x = rng.standard_normal((3, 700)) * 50
    np.testing.assert_allclose(log_softmax(x), reference(x), atol=1e-12, rtol=1e-13)


@pytest.mark.parametrize("shape,dim", [((5, 7, 33), 0), ((5, 7, 33), -2), ((40,), 0)])
def test_other_dims(shape, dim):
    rng = np.random.default_rng(len(shape) + dim)
    x = data(rng, shape, np.float32, 3.0)
    y = log_softmax(x, dim)
    np.testing.assert_allclose(y, reference(x, dim), atol=1e-5, rtol=2e-6)
    dy = data(rng, shape, np.float32, 1.0)
    check_backward(log_softmax_backward(y, dy, dim), y, dy, np.float32, dim)


@pytest.mark.parametrize("m", [1, 9])
@pytest.mark.parametrize("n", [5, 500])
def test_short_rows_share_a_block(m, n):
    p = rows.plan("float32", n, "cpu")
    assert p.kernel == "registers" and p.rows > 1
    rng = np.random.default_rng(m * n)
    x = data(rng, (m, n), np.float32, 3.0)
    y = log_softmax(x)
    np.testing.assert_allclose(y, reference(x), atol=1e-5, rtol=2e-6)
    dy = data(rng, (m, n), np.float32, 1.0)
    check_backward(log_softmax_backward(y, dy), y, dy, np.float32)


@pytest.mark.parametrize("n", [40, 3000])
def test_no_races(path, n):
    rng = np.random.default_rng(n)
    x = data(rng, (5, n), np.float32, 2.0)
    with race_checking():
        y = log_softmax(x)
        np.testing.assert_allclose(y, reference(x), atol=1e-5, rtol=2e-6)
        check_backward(log_softmax_backward(y, x), y, x, np.float32)


def test_empty_rows_and_zero_rows():
    assert log_softmax(np.zeros((0, 8), np.float32)).shape == (0, 8)
    assert log_softmax(np.zeros((3, 0), np.float32)).shape == (3, 0)
    assert log_softmax_backward(np.zeros((3, 0)), np.zeros((3, 0))).shape == (3, 0)


# -- bad inputs ------------------------------------------------------------------------------

def test_bad_inputs():
    f = np.ones((2, 3), np.float32)
    with pytest.raises(moye.MoyeTypeError, match="log_softmax: x must be float32, float16, "
                                                 "bfloat16 or float64, got int32"):
        log_softmax(np.ones((2, 3), np.int32))
    with pytest.raises(moye.MoyeTypeError, match="log_softmax: x must be a NumPy array"):
        log_softmax([[1.0, 2.0]])
    with pytest.raises(moye.ShapeError, match="log_softmax: x is 0-d"):
        log_softmax(np.ones((), np.float32))
    with pytest.raises(moye.ShapeError, match="log_softmax: dim 2 is out of range for x"):
        log_softmax(f, 2)
    with pytest.raises(moye.MoyeTypeError, match="log_softmax: dim must be an int, got str"):
        log_softmax(f, "last")
    with pytest.raises(moye.ShapeError, match="log_softmax: x must be contiguous"):
        log_softmax(np.ones((4, 6), np.float32)[:, ::2])
    with pytest.raises(moye.ShapeError, match="at most 262144"):
        log_softmax(np.ones((1, 262_145), np.float16))
    with pytest.raises(moye.MoyeTypeError, match="log_softmax_backward: dy is float16 but y "
                                                 "is float32"):
        log_softmax_backward(f, f.astype(np.float16))
    with pytest.raises(moye.MoyeTypeError, match="log_softmax_backward: y must be float32"):
        log_softmax_backward(np.ones((2, 3), np.int64), f)
    with pytest.raises(moye.ShapeError, match=r"log_softmax_backward: dy has shape \(2, 4\) "
                                              r"but y has \(2, 3\)"):
        log_softmax_backward(f, np.ones((2, 4), np.float32))
    with pytest.raises(moye.ShapeError, match="log_softmax_backward: dy must be contiguous"):
        log_softmax_backward(f[:, :2].copy(), np.ones((2, 4), np.float32)[:, ::2])


# -- CUDA C++ ----------------------------------------------------------------------------------

def _variants():
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64):
        a = np.ones((4, 65536), dtype)
        for options in ({}, {"max_cluster": 8}, {"elements": 64}):
            p = rows.plan(np.dtype(dtype).name, 65536, "cuda", **options)
            if p.kernel == "registers":
                yield module.log_softmax_registers, (a, a, p.work, p.cluster > 1), p
                yield module.log_softmax_backward_registers, (a, a, a, p.work, p.cluster > 1), p
            else:
                yield module.log_softmax_loop, (a, a, p.vec, p.threads), p
                yield module.log_softmax_backward_loop, (a, a, a, p.vec, p.threads), p


def test_variants_cover_every_path():
    assert {(p.kernel, p.cluster > 1) for _, _, p in _variants()} == {
        ("registers", False), ("registers", True), ("loop", False)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_compile_with_nvrtc(arch):
    compile_variants(_variants(), arch)

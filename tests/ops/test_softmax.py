"""moye.ops.softmax and softmax_backward on the CPU backend: every element
against a float64 NumPy reference, each kernel path (registers, loop,
cluster), ragged rows, the plan cache, bad inputs, and NVRTC compiles of
each kernel."""
import ml_dtypes
import numpy as np
import pytest

import moye
from moye.backend.cpu import race_checking
from moye.ops import rows
from moye.ops.softmax_op import softmax, softmax_backward
from moye.ops import softmax_op as softmax_module

from .nvrtc import compile_variants

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
# tolerance on probabilities (at most 1): the output type's rounding
ATOL = {np.float32: 2e-6, np.float16: 1e-3, ml_dtypes.bfloat16: 8e-3, np.float64: 1e-14}
RTOL = {np.float32: 1e-5, np.float16: 2e-3, ml_dtypes.bfloat16: 1.6e-2, np.float64: 1e-12}


def reference(x, axis=-1):
    xd = np.asarray(x, np.float64)
    e = np.exp(xd - xd.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def reference_backward(y, dy, axis=-1):
    yd, dyd = np.asarray(y, np.float64), np.asarray(dy, np.float64)
    return yd * (dyd - (yd * dyd).sum(axis, keepdims=True))


def data(rng, shape, dtype, scale):
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 31, 33, 100, 1000, 4097])
def test_forward(dtype, n):
    rng = np.random.default_rng(n)
    m = 3 if n < 1000 else 2
    x = data(rng, (m, n), dtype, 4.0)
    y = softmax(x)
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_allclose(y.astype(np.float64), reference(x), atol=ATOL[dtype],
                               rtol=RTOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 33, 1000, 4097])
def test_backward(dtype, n):
    rng = np.random.default_rng(n + 1)
    m = 3 if n < 1000 else 2
    y = softmax(data(rng, (m, n), dtype, 3.0))
    dy = data(rng, (m, n), dtype, 1.0)
    dx = softmax_backward(y, dy)
    assert dx.dtype == y.dtype and dx.shape == y.shape
    want = reference_backward(y, dy)
    scale = np.abs(dy.astype(np.float64)).max()
    np.testing.assert_allclose(dx.astype(np.float64), want, atol=ATOL[dtype] * scale,
                               rtol=RTOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 700), (1, 2000), (2, 3, 301), (5, 1024)])
def test_each_kernel_path(path, dtype, shape):
    """Rows of a few thousand take each kernel under its plan options."""
    rng = np.random.default_rng(sum(shape))
    x = data(rng, shape, dtype, 10.0)
    p = rows.plan_for(x, np.dtype(dtype).name, shape[-1])
    assert p.kernel == ("loop" if path == "loop" else "registers")
    assert (p.cluster > 1) == path.startswith("cluster")
    assert bool(rows.staged(p, x, 1)) == path.endswith("staged")
    y = softmax(x)
    np.testing.assert_allclose(y.astype(np.float64), reference(x), atol=ATOL[dtype],
                               rtol=RTOL[dtype])
    dy = data(rng, shape, dtype, 1.0)
    dx = softmax_backward(y, dy)
    np.testing.assert_allclose(dx.astype(np.float64), reference_backward(y, dy),
                               atol=ATOL[dtype] * 4, rtol=RTOL[dtype])


def test_large_magnitudes_are_stable(path):
    """exp of 1e4 overflows float32: the max is subtracted first. Rows with
    -inf elements give them 0."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 2000)) * 1e4).astype(np.float32)
    x[1, 5:50] = -np.inf
    x[2] = 3e38
    y = softmax(x)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, reference(x), atol=2e-6, rtol=1e-5)
    assert (y[1, 5:50] == 0).all()


@pytest.mark.parametrize("shape,dim", [((5, 7, 33), 0), ((5, 7, 33), 1), ((5, 7, 33), -2),
                                        ((40,), 0), ((4, 1, 6), 1)])
def test_other_dims(shape, dim):
    rng = np.random.default_rng(len(shape) + dim)
    x = data(rng, shape, np.float32, 3.0)
    y = softmax(x, dim)
    np.testing.assert_allclose(y, reference(x, dim), atol=2e-6, rtol=1e-5)
    dy = data(rng, shape, np.float32, 1.0)
    np.testing.assert_allclose(softmax_backward(y, dy, dim), reference_backward(y, dy, dim),
                               atol=4e-6, rtol=1e-5)


@pytest.mark.parametrize("m", [1, 4, 9, 33])
@pytest.mark.parametrize("n", [5, 128, 500])
def test_short_rows_share_a_block(m, n):
    """Short rows take a few lanes each, several rows per block; the spare
    lanes of the last block (past row m - 1) store nothing."""
    p = rows.plan("float32", n, "cpu")
    assert p.kernel == "registers" and p.rows > 1 and p.tpr * p.rows == p.threads
    rng = np.random.default_rng(m * n)
    x = data(rng, (m, n), np.float32, 3.0)
    y = softmax(x)
    np.testing.assert_allclose(y, reference(x), atol=2e-6, rtol=1e-5)
    dy = data(rng, (m, n), np.float32, 1.0)
    np.testing.assert_allclose(softmax_backward(y, dy), reference_backward(y, dy), atol=4e-6,
                               rtol=1e-5)


@pytest.mark.parametrize("n", [40, 3000])
def test_no_races(path, n):
    """The race check of the CPU backend finds nothing in any kernel."""
    rng = np.random.default_rng(n)
    x = data(rng, (5, n), np.float32, 2.0)
    with race_checking():
        y = softmax(x)
        np.testing.assert_allclose(y, reference(x), atol=2e-6, rtol=1e-5)
        dx = softmax_backward(y, x)
        np.testing.assert_allclose(dx, reference_backward(y, x), atol=2e-5, rtol=1e-5)


def test_empty_rows_and_zero_rows():
    assert softmax(np.zeros((0, 8), np.float32)).shape == (0, 8)
    assert softmax(np.zeros((3, 0), np.float32)).shape == (3, 0)


def test_plan_is_cached():
    a = rows.plan("float32", 4097, "cpu")
    assert rows.plan("float32", 4097, "cpu") is a
    assert a.kernel == "registers" and a.vec == 1 and a.threads * a.chunks >= 4097
    assert rows.plan("bfloat16", 262_144, "cuda").kernel == "loop"
    assert rows.plan("bfloat16", 65_536, "cuda", rows.MAX_CLUSTER).cluster > 1
    for n in (1, 31, 33, 100, 4096, 4097, 32_768, 65_536, 262_144):
        for dtype in ("float32", "float16", "bfloat16", "float64"):
            for clusters in (1, rows.MAX_CLUSTER):
                p = rows.plan(dtype, n, "cuda", clusters)
                assert p.threads <= 1024 and n % p.vec == 0 and p.vec * rows._SIZES[dtype] <= 16
                assert p.threads % 32 == 0 or p.rows > 1
                assert p.cluster <= clusters and p.tpr * p.rows == p.threads * p.cluster
                assert p.kernel == "loop" or p.tpr * p.vec * p.chunks >= n


def test_repeat_call_does_no_planning(monkeypatch):
    x = np.ones((2, 50), np.float32)
    softmax(x)
    info = rows.plan.cache_info()
    softmax(x)
    assert rows.plan.cache_info().hits == info.hits + 1
    assert rows.plan.cache_info().misses == info.misses


# -- bad inputs ------------------------------------------------------------------------------

def test_bad_dtypes():
    with pytest.raises(moye.MoyeTypeError, match="softmax: x must be float32, float16, "
                                                 "bfloat16 or float64, got int32"):
        softmax(np.ones((2, 3), np.int32))
    with pytest.raises(moye.MoyeTypeError, match="got complex64"):
        softmax(np.ones((2, 3), np.complex64))
    with pytest.raises(moye.MoyeTypeError, match="x must be a NumPy array or a torch tensor, "
                                                 "got list"):
        softmax([[1.0, 2.0]])
    y = np.ones((2, 3), np.float32)
    with pytest.raises(moye.MoyeTypeError, match="dy is float16 but y is float32"):
        softmax_backward(y, np.ones((2, 3), np.float16))
    with pytest.raises(moye.MoyeTypeError, match="softmax_backward: y must be float32"):
        softmax_backward(np.ones((2, 3), np.int64), y)


def test_bad_shapes_and_dims():
    with pytest.raises(moye.ShapeError, match="softmax: x is 0-d"):
        softmax(np.ones((), np.float32))
    with pytest.raises(moye.ShapeError, match="dim 2 is out of range for x of 2 dimensions"):
        softmax(np.ones((2, 3), np.float32), 2)
    with pytest.raises(moye.ShapeError, match="dim -3 is out of range"):
        softmax(np.ones((2, 3), np.float32), -3)
    with pytest.raises(moye.MoyeTypeError, match="dim must be an int, got float"):
        softmax(np.ones((2, 3), np.float32), 1.0)
    with pytest.raises(moye.ShapeError, match=r"dy has shape \(2, 4\) but y has \(2, 3\)"):
        softmax_backward(np.ones((2, 3), np.float32), np.ones((2, 4), np.float32))
    with pytest.raises(moye.ShapeError, match="at most 262144"):
        softmax(np.ones((1, 262_145), np.float16))


def test_non_contiguous_rows_are_refused():
    x = np.ones((4, 6), np.float32)
    with pytest.raises(moye.ShapeError, match="x must be contiguous"):
        softmax(x[:, ::2])
    with pytest.raises(moye.ShapeError, match="dy must be contiguous"):
        softmax_backward(x[:, :3].copy(), x[:, ::2])
    np.testing.assert_allclose(softmax(x.T, 0), reference(x.T, 0), atol=1e-7)   # moved: a copy


# -- CUDA C++ ----------------------------------------------------------------------------------

def _variants():
    m = softmax_module
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64):
        a = np.ones((4, 65536), dtype)
        for options in ({}, {"max_cluster": 8}, {"elements": 64}):
            p = rows.plan(np.dtype(dtype).name, 65536, "cuda", **options)
            if p.kernel == "registers":
                yield m.softmax_registers, (a, a, p.work, p.cluster > 1), p
                yield m.softmax_backward_registers, (a, a, a, p.work, p.cluster > 1), p
            else:
                yield m.softmax_loop, (a, a, p.vec, p.threads), p
                yield m.softmax_backward_loop, (a, a, a, p.vec, p.threads), p


def test_variants_cover_every_path():
    assert {(p.kernel, p.cluster > 1) for _, _, p in _variants()} == {
        ("registers", False), ("registers", True), ("loop", False)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_compile_with_nvrtc(arch):
    compile_variants(_variants(), arch)


def test_tensors_on_different_devices_are_refused():
    """Two torch tensors must share a device, not only a kind (a meta
    tensor stands in for a second GPU)."""
    torch = pytest.importorskip("torch")
    y = torch.ones(2, 3)
    with pytest.raises(moye.MoyeTypeError, match="softmax_backward: y and dy must be on the "
                                                 "same device"):
        softmax_backward(y, torch.ones(2, 3, device="meta"))

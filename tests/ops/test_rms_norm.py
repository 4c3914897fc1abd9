"""moye.ops.rms_norm, rms_norm_forward and rms_norm_backward on the CPU
backend: every element against a float64 NumPy reference, weight or none,
each kernel path (registers, loop and the backward's slabs, cluster; the
backward's inputs staged in shared memory or not), ragged rows, races, bad
inputs, and NVRTC compiles of each kernel."""
import dataclasses

import ml_dtypes
import numpy as np
import pytest

import moye
from moye.backend.cpu import race_checking
from moye.ops import rms_norm_op, rows
from moye.ops.rms_norm_op import rms_norm, rms_norm_backward, rms_norm_forward

from .nvrtc import compile_variants

BF16 = ml_dtypes.bfloat16
DTYPES = [np.float32, np.float16, BF16, np.float64]
# relative to the outputs' scale: the output type's rounding
TOL = {np.float32: 2e-5, np.float16: 2e-3, BF16: 1.6e-2, np.float64: 1e-12}


def reference(x, w, eps):
    xd = np.asarray(x, np.float64)
    rstd = 1 / np.sqrt((xd * xd).mean(-1, keepdims=True) + eps)
    y = xd * rstd * (1 if w is None else np.asarray(w, np.float64))
    return y, rstd[..., 0]


def reference_backward(dy, x, w, rstd):
    xd, dyd = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    rs = np.asarray(rstd, np.float64)[..., None]
    xhat = xd * rs
    g = dyd * (1 if w is None else np.asarray(w, np.float64))
    dx = rs * (g - xhat * (g * xhat).mean(-1, keepdims=True))
    dw = None if w is None else (dyd * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dw


def data(rng, shape, dtype, scale=1.0, offset=0.0):
    return (rng.standard_normal(shape) * scale + offset).astype(dtype)


def close(got, want, dtype, scale=1.0):
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got, np.float64), want,
                               atol=TOL[dtype] * scale, rtol=TOL[dtype])


def check(x, w, eps=1e-6, dtype=None):
    """Forward and backward of x (weight w) against the references."""
    dtype = dtype or x.dtype.type
    rng = np.random.default_rng(x.size)
    y, rstd = rms_norm_forward(x, w, eps)
    assert y.dtype == x.dtype and rstd.shape == x.shape[:-1]
    assert rstd.dtype == (np.float64 if dtype == np.float64 else np.float32)
    want, want_rstd = reference(x, w, eps)
    close(y, want, dtype, np.abs(want).max())
    close(rstd, want_rstd, np.float32 if dtype != np.float64 else dtype)
    dy = data(rng, x.shape, x.dtype)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    want_dx, want_dw = reference_backward(dy, x, w, rstd)
    assert dx.dtype == x.dtype
    # dx is a difference of terms of about rstd * g: their size sets the error
    terms = np.abs(want_rstd).max() * np.abs(dy.astype(np.float64)).max() * \
        (1 if w is None else np.abs(w.astype(np.float64)).max())
    close(dx, want_dx, dtype, terms)
    if w is None:
        assert dw is None
    else:
        assert dw.dtype == w.dtype and dw.shape == w.shape
        # float32 accumulation over rows, then the weight's rounding
        close(dw, want_dw, w.dtype.type if w.dtype != np.float32 or dtype == np.float64
              else np.float32, np.abs(want_dw).max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 33, 100, 1000, 4097])
@pytest.mark.parametrize("m", [1, 3, 37])
def test_forward_and_backward(dtype, n, m):
    if m == 37 and n > 100:
        m = 5                                   # keep the CPU runs short
    rng = np.random.default_rng(n * m)
    x = data(rng, (m, n), dtype, 2.0, 0.5)
    check(x, data(rng, (n,), dtype, 1.0, 1.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_without_weight(dtype):
    rng = np.random.default_rng(2)
    check(data(rng, (37, 50), dtype, 3.0), None)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
def test_float32_weight_with_other_inputs(dtype):
    rng = np.random.default_rng(3)
    check(data(rng, (7, 96), dtype), data(rng, (96,), np.float32, 1.0, 1.0))


def test_float32_weight_beside_bfloat16_rows_on_each_path(path):
    """A float32 weight kept in shared memory beside bfloat16 rows: its
    chunks of eight take two 16-byte pieces (row_kernels.thread_chunks)."""
    rng = np.random.default_rng(4)
    check(data(rng, (5, 704), BF16), data(rng, (704,), np.float32, 1.0, 1.0))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("shape", [(3, 700), (1, 2000), (2, 3, 301), (37, 96)])
@pytest.mark.parametrize("weighted", [True, False])
def test_each_kernel_path(path, dtype, shape, weighted):
    rng = np.random.default_rng(sum(shape))
    x = data(rng, shape, dtype, 4.0, -1.0)
    p = rows.plan_for(x, np.dtype(dtype).name, shape[-1])
    if shape[-1] > 300:
        assert p.kernel == ("loop" if path == "loop" else "registers")
        assert (p.cluster > 1) == path.startswith("cluster")
        assert bool(rows.staged(p, x, 2)) == path.endswith("staged")
    check(x, data(rng, shape[-1:], dtype, 1.0, 1.0) if weighted else None, 1e-5)



def test_clusters_take_uneven_numbers_of_rows():
    """Two clusters over five rows: three trips for one, two for the other,
    around the cluster reductions."""
    rng = np.random.default_rng(9)
    x = data(rng, (5, 301), np.float32)
    with rows.plan_options(elements=8, max_threads=32, max_cluster=8):
        p = rows.plan_for(x, "float32", 301)
        assert p.cluster == 2 and rows.group_count(p, x, 5, 4) == 2
        check(x, data(rng, (301,), np.float32, 1.0, 1.0))

def test_many_rows_per_block_group():
    """More row groups than blocks: each block loops over several, adding
    their dweight columns in registers (and in shared memory across the
    rows of a block)."""
    rng = np.random.default_rng(4)
    for shape in [(700, 8), (41, 3000)]:
        x = data(rng, shape, np.float32)
        p = rows.plan_for(x, "float32", shape[1])
        assert rows.group_count(p, x, shape[0]) * p.rows < shape[0]
        check(x, data(rng, shape[1:], np.float32, 1.0, 1.0))


def test_rows_of_constants_and_large_magnitudes():
    x = np.full((3, 64), 7.0, np.float32)
    x[1] = 1e18
    x[2, ::2] = -1e-20
    check(x, np.linspace(-2, 2, 64).astype(np.float32))


@pytest.mark.parametrize("n", [40, 3000])
def test_no_races(path, n):
    rng = np.random.default_rng(n)
    x = data(rng, (5, n), np.float32, 2.0)
    with race_checking():
        check(x, data(rng, (n,), np.float32, 1.0, 1.0))


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 70, generator=g)
    w = torch.randn(70, generator=g)
    y = rms_norm(x, w, 1e-5)
    assert isinstance(y, torch.Tensor) and y.shape == x.shape
    torch.testing.assert_close(y.double(), torch.nn.functional.rms_norm(
        x.double(), (70,), w.double(), 1e-5), atol=1e-5, rtol=1e-5)
    y, rstd = rms_norm_forward(x, w, 1e-5)
    dy = torch.randn(4, 3, 70, generator=g)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    torch.nn.functional.rms_norm(xd, (70,), wd, 1e-5).backward(dy.double())
    torch.testing.assert_close(dx.double(), xd.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dw.double(), wd.grad, atol=1e-5, rtol=1e-5)


def test_empty():
    y, rstd = rms_norm_forward(np.ones((0, 8), np.float32), np.ones(8, np.float32), 1e-6)
    assert y.shape == (0, 8) and rstd.shape == (0,)
    dx, dw = rms_norm_backward(y, y, np.ones(8, np.float32), rstd)
    assert dx.shape == (0, 8) and (dw == 0).all()
    y, rstd = rms_norm_forward(np.ones((3, 0), np.float32), None, 0.25)
    assert y.shape == (3, 0) and (rstd == 2).all()


def test_plan_is_cached():
    x = np.ones((2, 50), np.float32)
    rms_norm(x, None)
    info = rows.plan.cache_info()
    rms_norm(x, None)
    assert rows.plan.cache_info().misses == info.misses


# -- bad inputs ------------------------------------------------------------------------------

def test_bad_inputs():
    x = np.ones((2, 3), np.float32)
    w = np.ones(3, np.float32)
    with pytest.raises(moye.MoyeTypeError, match="rms_norm: x must be float32, float16, "
                                                 "bfloat16 or float64, got int32"):
        rms_norm(np.ones((2, 3), np.int32), None)
    with pytest.raises(moye.ShapeError, match="rms_norm: x is 0-d"):
        rms_norm(np.ones((), np.float32), None)
    with pytest.raises(moye.ShapeError, match=r"weight has shape \(4,\); rows of x have 3 "
                                              r"elements, so it must have shape \(3,\)"):
        rms_norm(x, np.ones(4, np.float32))
    with pytest.raises(moye.MoyeTypeError, match="weight is float16 but x is float32; weight "
                                                 "must be float32$"):
        rms_norm(x, np.ones(3, np.float16))
    with pytest.raises(moye.MoyeTypeError, match="weight must be a NumPy array"):
        rms_norm(x, [1.0, 1.0, 1.0])
    with pytest.raises(moye.ShapeError, match="weight must be contiguous"):
        rms_norm(x, np.ones(6, np.float32)[::2])
    with pytest.raises(moye.ShapeError, match="x must be contiguous"):
        rms_norm(np.ones((2, 6), np.float32)[:, ::2], w)
    for eps in (0.0, -1e-6, float("nan"), "1e-6", None, True):
        with pytest.raises(moye.MoyeTypeError, match="eps must be a positive finite number"):
            rms_norm(x, w, eps)
    y, rstd = rms_norm_forward(x, w, 1e-6)
    with pytest.raises(moye.ShapeError, match=r"rstd has shape \(3,\) but x has \(2, 3\); it "
                                              r"must have x's shape without the last"):
        rms_norm_backward(x, x, w, np.ones(3, np.float32))
    with pytest.raises(moye.MoyeTypeError, match="rstd is float16; for float32 x it must be "
                                                 "float32"):
        rms_norm_backward(x, x, w, rstd.astype(np.float16))
    with pytest.raises(moye.MoyeTypeError, match="dy is float16 but x is float32"):
        rms_norm_backward(x.astype(np.float16), x, w, rstd)
    with pytest.raises(moye.ShapeError, match=r"dy has shape \(2, 4\) but x has \(2, 3\)"):
        rms_norm_backward(np.ones((2, 4), np.float32), x, w, rstd)
    with pytest.raises(moye.ShapeError, match="dy must be contiguous"):
        rms_norm_backward(np.ones((2, 6), np.float32)[:, ::2], x, w, rstd)


def test_mixed_devices_are_refused():
    torch = pytest.importorskip("torch")
    x = np.ones((2, 3), np.float32)
    with pytest.raises(moye.MoyeTypeError, match="weight is a cpu tensor but x is a NumPy "
                                                 "array; they must be on the same device"):
        rms_norm(x, torch.ones(3))


# -- CUDA C++ ----------------------------------------------------------------------------------

def _variants():
    m = rms_norm_op
    for j, (dtype, wdtype) in enumerate(((np.float32, np.float32), (np.float16, np.float16),
                                         (BF16, np.float32), (np.float64, np.float64))):
        a = np.ones((4, 65536), dtype)
        w = np.ones(65536, wdtype)
        s = np.ones(4, np.float64 if dtype == np.float64 else np.float32)
        part = np.ones((4, 65536), s.dtype)
        for i, options in enumerate(({}, {"max_cluster": 8}, {"elements": 64},
                                     {"elements": 4096})):
            p = rows.plan(np.dtype(dtype).name, 65536 if options != {"elements": 4096} else 96,
                          "cuda", **options)
            for has_w in (True, False)[(i + j) % 2:(i + j) % 2 + 1]:   # each on half
                if p.kernel == "registers":
                    yield m.rms_norm_registers, (a, s, a, w, 1e-6, 1e-3, has_w, p.work,
                                                 p.cluster > 1, j % 2 == 1), p
                    yield m.rms_norm_backward_registers, (a, part, a, a, w, s, 1e-3, has_w,
                                                          p.work, j % 2 == 0, (i + j) % 2 == 1), p
                else:
                    yield m.rms_norm_loop, (a, s, a, w, 1e-6, 1e-3, has_w, p.vec, p.threads), p
                    work, slabs, _ = rows.slab_plan(p, a, 4, 65536, rms_norm_op.FRAGMENTS)
                    sums = np.ones((4, slabs), s.dtype)
                    p = dataclasses.replace(p, threads=work[2])     # the slab kernels' blocks
                    yield m.rms_norm_backward_sums, (sums, a, a, w, has_w, work), p
                    yield m.rms_norm_backward_slabs, (a, part, a, a, w, s, sums, 1e-3, has_w,
                                                      work), p


def test_variants_cover_every_path():
    assert {(p.kernel, p.cluster > 1, p.rows > 1) for _, _, p in _variants()} == {
        ("registers", False, False), ("registers", True, False), ("loop", False, False),
        ("registers", False, True)}
    staged = {(p.cluster > 1, args[-2]) for k, args, p in _variants()
              if k is rms_norm_op.rms_norm_backward_registers}
    assert staged == {(False, False), (False, True), (True, False), (True, True)}
    for kernel in (rms_norm_op.rms_norm_registers, rms_norm_op.rms_norm_backward_registers):
        kept = {(p.cluster > 1, args[-1]) for k, args, p in _variants() if k is kernel}
        assert kept == {(False, False), (False, True), (True, False), (True, True)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_compile_with_nvrtc(arch):
    compile_variants(_variants(), arch)

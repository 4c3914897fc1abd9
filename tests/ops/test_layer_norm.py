"""moye.ops.layer_norm, layer_norm_forward and layer_norm_backward on the
CPU backend: every element against a float64 NumPy reference, weight and
bias or none, each kernel path (registers, loop and the backward's slabs,
cluster; the backward's inputs staged in shared memory or not), ragged
rows, races, bad inputs, and NVRTC compiles of each kernel."""
import dataclasses

import numpy as np
import pytest

import moye
from moye.backend.cpu import race_checking
from moye.ops import layer_norm_op, rows
from moye.ops.layer_norm_op import layer_norm, layer_norm_backward, layer_norm_forward

from .nvrtc import compile_variants

from .test_rms_norm import BF16, DTYPES, close, data


def reference(x, w, b, eps):
    xd = np.asarray(x, np.float64)
    mean = xd.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((xd - mean) ** 2).mean(-1, keepdims=True) + eps)
    y = (xd - mean) * rstd
    if w is not None:
        y = y * np.asarray(w, np.float64)
    if b is not None:
        y = y + np.asarray(b, np.float64)
    return y, mean[..., 0], rstd[..., 0]


def reference_backward(dy, x, w, mean, rstd):
    xd, dyd = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    xhat = (xd - np.asarray(mean, np.float64)[..., None]) * np.asarray(rstd, np.float64)[..., None]
    g = dyd * (1 if w is None else np.asarray(w, np.float64))
    dx = np.asarray(rstd, np.float64)[..., None] * (
        g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    n = x.shape[-1]
    dw = None if w is None else (dyd * xhat).reshape(-1, n).sum(0)
    return dx, dw, dyd.reshape(-1, n).sum(0)


def check(x, w, b, eps=1e-5):
    dtype = x.dtype.type
    stat = np.float64 if dtype == np.float64 else np.float32
    rng = np.random.default_rng(x.size + 1)
    y, mean, rstd = layer_norm_forward(x, w, b, eps)
    assert y.dtype == x.dtype and mean.dtype == stat and rstd.dtype == stat
    want, want_mean, want_rstd = reference(x, w, b, eps)
    close(y, want, dtype, np.abs(want).max())
    close(mean, want_mean, stat, np.abs(want_mean).max() + 1)
    close(rstd, want_rstd, stat)
    dy = data(rng, x.shape, x.dtype)
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd)
    want_dx, want_dw, want_db = reference_backward(dy, x, w, mean, rstd)
    assert dx.dtype == x.dtype
    terms = np.abs(want_rstd).max() * np.abs(dy.astype(np.float64)).max() * \
        (1 if w is None else np.abs(w.astype(np.float64)).max())
    close(dx, want_dx, dtype, terms)
    pdtype = x.dtype if w is None else w.dtype
    if w is None:
        assert dw is None
    else:
        assert dw.dtype == w.dtype and dw.shape == w.shape
        close(dw, want_dw, w.dtype.type, np.abs(want_dw).max())
    assert db.dtype == pdtype and db.shape == x.shape[-1:]
    close(db, want_db, pdtype.type, np.abs(want_db).max())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 33, 100, 1000, 4097])
@pytest.mark.parametrize("m", [1, 3, 37])
def test_forward_and_backward(dtype, n, m):
    if m == 37 and n > 100:
        m = 5                                   # keep the CPU runs short
    rng = np.random.default_rng(n * m + 1)
    x = data(rng, (m, n), dtype, 2.0, 3.0)      # an offset: the variance is two-pass
    check(x, data(rng, (n,), dtype, 1.0, 1.0), data(rng, (n,), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weighted,biased", [(False, False), (True, False), (False, True)])
def test_without_weight_or_bias(dtype, weighted, biased):
    rng = np.random.default_rng(5)
    x = data(rng, (37, 50), dtype, 3.0)
    check(x, data(rng, (50,), dtype, 1.0, 1.0) if weighted else None,
          data(rng, (50,), dtype) if biased else None)


@pytest.mark.parametrize("dtype", [np.float16, BF16, np.float64])
def test_float32_parameters_with_other_inputs(dtype):
    rng = np.random.default_rng(6)
    check(data(rng, (7, 96), dtype), data(rng, (96,), np.float32, 1.0, 1.0),
          data(rng, (96,), np.float32))


def test_float32_parameters_beside_bfloat16_rows_on_each_path(path):
    """Float32 weight and bias (and, kept, the float32 dbias sums) in shared
    memory beside bfloat16 rows: chunks of eight in two 16-byte pieces
    (row_kernels.thread_chunks)."""
    rng = np.random.default_rng(7)
    check(data(rng, (5, 704), BF16), data(rng, (704,), np.float32, 1.0, 1.0),
          data(rng, (704,), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("shape", [(3, 700), (1, 2000), (2, 3, 301), (37, 96)])
@pytest.mark.parametrize("affine", [True, False])
def test_each_kernel_path(path, dtype, shape, affine):
    rng = np.random.default_rng(sum(shape))
    x = data(rng, shape, dtype, 4.0, -1.0)
    p = rows.plan_for(x, np.dtype(dtype).name, shape[-1])
    if shape[-1] > 300:
        assert p.kernel == ("loop" if path == "loop" else "registers")
        assert (p.cluster > 1) == path.startswith("cluster")
        assert bool(rows.staged(p, x, 2)) == path.endswith("staged")
        kept = rows.backward_plan(x, np.dtype(dtype).name, shape[-1], layer_norm_op.FRAGMENTS,
                                  np.ones(1, np.float32), sums=2)[1]
        assert kept == {"cluster_staged": 1, "cluster_sums_staged": 3}.get(path, 0)
    n = shape[-1]
    check(x, data(rng, (n,), dtype, 1.0, 1.0) if affine else None,
          data(rng, (n,), dtype) if affine else None)



def test_the_backward_loads_mean_and_rstd_ahead_only_with_the_weight_alone_kept(
        path, monkeypatch):
    """layer_norm_backward_registers's KEEP and AHEAD as backward_plan's kept
    gives them on each path: AHEAD only where kept is 1 (the weight alone in
    shared memory); dx and the sums right either way."""
    tails = []
    launch = rows.launch_groups
    monkeypatch.setattr(rows, "launch_groups",
                        lambda p, kernel, *a, tail=(), **k: tails.append((kernel, tail))
                        or launch(p, kernel, *a, tail=tail, **k))
    rng = np.random.default_rng(12)
    x = data(rng, (9, 700), np.float32)
    check(x, data(rng, (700,), np.float32, 1.0, 1.0), data(rng, (700,), np.float32))
    kept = {"cluster_staged": 1, "cluster_sums_staged": 3}.get(path, 0)
    backward = [t for kernel, t in tails if kernel is layer_norm_op.layer_norm_backward_registers]
    assert backward == ([] if path == "loop" else [(kept, kept == 1)])


@pytest.mark.parametrize("kept", [2, 3])
def test_the_backward_keeps_its_sums_in_shared_memory(kept, monkeypatch):
    """KEEP 2 (the dbias sums in shared memory beside the weight: the
    default where the weight alone leaves no registers plan, and in the
    wide plan) and 3 (the dweight sums too: plan_options(keep="sums")) on
    the staged cluster path, float32 parameters beside bfloat16 rows: dx and
    both sums right."""
    plan, launch, tails = rows.backward_plan, rows.launch_groups, []
    monkeypatch.setattr(rows, "backward_plan", lambda *a, **k: (plan(*a, **k)[0], kept))
    monkeypatch.setattr(rows, "launch_groups",
                        lambda p, kernel, *a, tail=(), **k: tails.append((kernel, tail))
                        or launch(p, kernel, *a, tail=tail, **k))
    rng = np.random.default_rng(kept)
    with rows.plan_options(elements=4, max_threads=32, max_cluster=16, staged=2, keep=True):
        check(data(rng, (7, 704), BF16), data(rng, (704,), np.float32, 1.0, 1.0),
              data(rng, (704,), np.float32))
    assert (layer_norm_op.layer_norm_backward_registers, (kept, False)) in tails


def test_clusters_take_uneven_numbers_of_rows():
    """Two clusters over five rows: three trips for one, two for the other,
    around the cluster reductions."""
    rng = np.random.default_rng(9)
    x = data(rng, (5, 301), np.float32)
    with rows.plan_options(elements=8, max_threads=32, max_cluster=8):
        p = rows.plan_for(x, "float32", 301)
        assert p.cluster == 2 and rows.group_count(p, x, 5, 4) == 2
        check(x, data(rng, (301,), np.float32, 1.0, 1.0), data(rng, (301,), np.float32))

def test_many_rows_per_block_group():
    rng = np.random.default_rng(7)
    for shape in [(700, 8), (41, 3000)]:
        x = data(rng, shape, np.float32)
        p = rows.plan_for(x, "float32", shape[1])
        assert rows.group_count(p, x, shape[0]) * p.rows < shape[0]
        check(x, data(rng, shape[1:], np.float32, 1.0, 1.0), data(rng, shape[1:], np.float32))


@pytest.mark.parametrize("n", [512, 2000])
def test_variance_is_two_pass(path, n):
    """A large offset and a small spread: E[x^2] - E[x]^2 would lose every
    digit in float32; (x - mean)^2 keeps them, and so does merging the
    blocks' (count, mean, deviations) in a cluster, whose means differ here
    (a ramp along the row)."""
    rng = np.random.default_rng(8)
    x = (1e4 + np.linspace(0, 3, n) + rng.standard_normal((4, n))).astype(np.float32)
    y, mean, rstd = layer_norm_forward(x, None, None, 1e-5)
    want, _, want_rstd = reference(x, None, None, 1e-5)
    np.testing.assert_allclose(rstd, want_rstd, rtol=1e-4)
    np.testing.assert_allclose(y, want, atol=2e-3)


def test_rows_of_constants():
    x = np.full((2, 64), 7.0, np.float32)
    y, mean, rstd = layer_norm_forward(x, None, np.ones(64, np.float32), 1e-5)
    assert (y == 1).all() and (mean == 7).all()
    np.testing.assert_allclose(rstd, 1e-5 ** -0.5, rtol=1e-5)


@pytest.mark.parametrize("n", [40, 3000])
def test_no_races(path, n):
    rng = np.random.default_rng(n)
    x = data(rng, (5, n), np.float32, 2.0)
    with race_checking():
        check(x, data(rng, (n,), np.float32, 1.0, 1.0), data(rng, (n,), np.float32))


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 70, generator=g) + 2
    w, b = torch.randn(70, generator=g), torch.randn(70, generator=g)
    y = layer_norm(x, w, b)
    assert isinstance(y, torch.Tensor) and y.shape == x.shape
    torch.testing.assert_close(y.double(), torch.nn.functional.layer_norm(
        x.double(), (70,), w.double(), b.double(), 1e-5), atol=1e-5, rtol=1e-5)
    y, mean, rstd = layer_norm_forward(x, w, b, 1e-5)
    dy = torch.randn(4, 3, 70, generator=g)
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd)
    xd, wd, bd = (t.double().requires_grad_() for t in (x, w, b))
    torch.nn.functional.layer_norm(xd, (70,), wd, bd, 1e-5).backward(dy.double())
    for got, want in ((dx, xd.grad), (dw, wd.grad), (db, bd.grad)):
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-5)


def test_empty():
    w = np.ones(8, np.float32)
    y, mean, rstd = layer_norm_forward(np.ones((0, 8), np.float32), w, w, 1e-6)
    assert y.shape == (0, 8) and mean.shape == rstd.shape == (0,)
    dx, dw, db = layer_norm_backward(y, y, w, mean, rstd)
    assert dx.shape == (0, 8) and (dw == 0).all() and (db == 0).all()


# -- bad inputs ------------------------------------------------------------------------------

def test_bad_inputs():
    x = np.ones((2, 3), np.float32)
    w = np.ones(3, np.float32)
    with pytest.raises(moye.MoyeTypeError, match="layer_norm: x must be float32"):
        layer_norm(np.ones((2, 3), np.int8), None, None)
    with pytest.raises(moye.ShapeError, match=r"layer_norm: bias has shape \(2, 3\); rows of "
                                              r"x have 3 elements"):
        layer_norm(x, w, x)
    with pytest.raises(moye.MoyeTypeError, match="bias is float64 but x is float32"):
        layer_norm(x, w, np.ones(3))
    with pytest.raises(moye.MoyeTypeError, match="weight is bfloat16 but x is float16; weight "
                                                 "must be float16 or float32"):
        layer_norm(x.astype(np.float16), w.astype(BF16), None)
    with pytest.raises(moye.MoyeTypeError, match="eps must be a positive finite number, got 0"):
        layer_norm(x, w, w, 0)
    with pytest.raises(moye.ShapeError, match="x must be contiguous"):
        layer_norm(np.ones((2, 6), np.float32)[:, ::2], w, w)
    y, mean, rstd = layer_norm_forward(x, w, w, 1e-5)
    with pytest.raises(moye.ShapeError, match=r"mean has shape \(2, 1\) but x has \(2, 3\)"):
        layer_norm_backward(x, x, w, mean[:, None], rstd)
    with pytest.raises(moye.MoyeTypeError, match="rstd is float64; for float32 x it must be "
                                                 "float32"):
        layer_norm_backward(x, x, w, mean, rstd.astype(np.float64))
    with pytest.raises(moye.ShapeError, match=r"weight has shape \(2,\)"):
        layer_norm_backward(x, x, w[:2], mean, rstd)
    with pytest.raises(moye.MoyeTypeError, match="dy is bfloat16 but x is float32"):
        layer_norm_backward(x.astype(BF16), x, w, mean, rstd)


# -- CUDA C++ ----------------------------------------------------------------------------------

def _variants():
    m = layer_norm_op
    for j, (dtype, wdtype) in enumerate(((np.float32, np.float32), (np.float16, np.float16),
                                         (BF16, np.float32), (np.float64, np.float64))):
        a = np.ones((4, 65536), dtype)
        w = np.ones(65536, wdtype)
        s = np.ones(4, np.float64 if dtype == np.float64 else np.float32)
        part = np.ones((4, 65536), s.dtype)
        flags = ((True, True), (False, False), (False, True))
        for i, options in enumerate(({}, {"max_cluster": 8}, {"elements": 64},
                                     {"elements": 4096})):
            p = rows.plan(np.dtype(dtype).name, 65536 if options != {"elements": 4096} else 96,
                          "cuda", **options)
            for has_w, has_b in flags[(i + j) % 3:(i + j) % 3 + 1]:    # each on some paths
                if p.kernel == "registers":
                    yield m.layer_norm_registers, (a, s, s, a, w, w, 1e-5, 1e-3, has_w, has_b,
                                                   p.work, p.cluster > 1, j % 2 == 1), p
                    yield m.layer_norm_backward_registers, (a, part, part, a, a, w, s, s,
                                                            1e-3, has_w, has_b, p.work,
                                                            j % 2 == 0, (i + j) % 4,
                                                            (i + j) % 4 == 1), p
                else:
                    yield m.layer_norm_loop, (a, s, s, a, w, w, 1e-5, 1e-3, has_w, has_b, p.vec,
                                              p.threads), p
                    work, slabs, _ = rows.slab_plan(p, a, 4, 65536, layer_norm_op.FRAGMENTS)
                    sums = np.ones((4, slabs), s.dtype)
                    p = dataclasses.replace(p, threads=work[2])     # the slab kernels' blocks
                    yield m.layer_norm_backward_sums, (sums, sums, a, a, w, s, s, has_w, work), p
                    yield m.layer_norm_backward_slabs, (a, part, part, a, a, w, s, s, sums, sums,
                                                        1e-3, has_w, has_b, work), p


def test_variants_cover_every_path():
    assert {(p.kernel, p.cluster > 1, p.rows > 1) for _, _, p in _variants()} == {
        ("registers", False, False), ("registers", True, False), ("loop", False, False),
        ("registers", False, True)}
    staged = {(p.cluster > 1, args[-3]) for k, args, p in _variants()
              if k is layer_norm_op.layer_norm_backward_registers}
    assert staged == {(False, False), (False, True), (True, False), (True, True)}
    kept = {(p.cluster > 1, args[-1]) for k, args, p in _variants()
            if k is layer_norm_op.layer_norm_registers}
    assert kept == {(False, False), (False, True), (True, False), (True, True)}
    kept = {(p.cluster > 1, args[-2], args[-1]) for k, args, p in _variants()
            if k is layer_norm_op.layer_norm_backward_registers}
    assert kept == {(c, k, k == 1) for c in (False, True) for k in (0, 1, 2, 3)}  # the host's


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_compile_with_nvrtc(arch):
    compile_variants(_variants(), arch)

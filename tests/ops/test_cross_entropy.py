"""moye.ops.cross_entropy, cross_entropy_forward and cross_entropy_backward
on the CPU backend: every element against a float64 NumPy reference, each
kernel path (registers, loop, cluster), ignored rows, targets at 0 and
N - 1, the reductions, races, bad inputs, and NVRTC compiles of each
kernel."""
import ml_dtypes
import numpy as np
import pytest

import moye
from moye.backend.cpu import race_checking
from moye.ops import cross_entropy, cross_entropy_backward, cross_entropy_forward, rows
from moye.ops import cross_entropy_op as module

from .nvrtc import compile_variants

DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
# the gradient is in the logits' type: its rounding of values at most 1 (times dloss)
ATOL = {np.float32: 2e-6, np.float16: 1e-3, ml_dtypes.bfloat16: 8e-3, np.float64: 1e-14}
RTOL = {np.float32: 1e-5, np.float16: 2e-3, ml_dtypes.bfloat16: 1.6e-2, np.float64: 1e-12}
IGNORE = -100
REDUCTIONS = ("none", "sum", "mean")


def reference(x, t, ignore_index=IGNORE):
    """(loss, lse) in float64."""
    xd = np.asarray(x, np.float64).reshape(-1, x.shape[-1])
    shape, t = t.shape, t.reshape(-1)
    m = xd.max(-1)
    log_sum = np.log(np.exp(xd - m[:, None]).sum(-1))
    kept = t != ignore_index
    picked = xd[np.arange(len(t)), np.where(kept, t, 0)]
    loss = np.where(kept, (m - picked) + log_sum, 0.0)         # m apart: exact for huge logits
    lse = m + log_sum
    return loss.reshape(shape), lse


def reference_backward(dloss, x, t, ignore_index=IGNORE):
    xd = np.asarray(x, np.float64).reshape(-1, x.shape[-1])
    t, dl = t.reshape(-1), np.asarray(dloss, np.float64).reshape(-1)
    _, lse = reference(x, t.reshape(x.shape[:-1]), ignore_index)
    g = np.exp(xd - lse[:, None])
    kept = t != ignore_index
    g[np.arange(len(t))[kept], t[kept]] -= 1
    g *= np.where(kept, dl, 0.0)[:, None]
    return g.reshape(x.shape)


def data(rng, shape, dtype, scale):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def targets(rng, m, n, dtype=np.int64):
    """Random classes, with the first row at class 0, the second at N - 1 and
    every fifth row ignored."""
    t = rng.integers(0, n, m)
    t[0] = 0
    if m > 1:
        t[1] = n - 1
    t[2::5] = IGNORE
    return t.astype(dtype)


def loss_type(dtype):
    return np.float64 if dtype == np.float64 else np.float32


def check(x, t, dtype, ignore_index=IGNORE):
    """Forward and backward of (x, t) against the references."""
    loss, lse = cross_entropy_forward(x, t, ignore_index)
    assert loss.dtype == lse.dtype == loss_type(dtype) and loss.shape == lse.shape == t.shape
    want_loss, want_lse = reference(x, t, ignore_index)
    tol = 1e-13 if dtype == np.float64 else 2e-6
    scale = 1 + np.abs(x.astype(np.float64)).max()
    np.testing.assert_allclose(loss, want_loss, atol=tol * scale, rtol=tol)
    np.testing.assert_allclose(lse.reshape(-1), want_lse, atol=tol * scale, rtol=tol)
    assert (loss[t == ignore_index] == 0).all()
    dloss = (np.random.default_rng(3).standard_normal(t.shape) + 2).astype(loss.dtype)
    dx = cross_entropy_backward(dloss, x, t, lse, ignore_index)
    assert dx.dtype == x.dtype and dx.shape == x.shape
    np.testing.assert_allclose(dx.astype(np.float64), reference_backward(dloss, x, t,
                                                                        ignore_index),
                               atol=ATOL[dtype] * 4, rtol=RTOL[dtype])
    assert (dx.reshape(-1, x.shape[-1])[t.reshape(-1) == ignore_index] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 33, 1000, 4097])
def test_forward_and_backward(dtype, n):
    rng = np.random.default_rng(n)
    m = 7 if n < 1000 else 3
    check(data(rng, (m, n), dtype, 4.0), targets(rng, m, n), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(6, 700), (2, 3, 301), (3, 1024)])
def test_each_kernel_path(path, dtype, shape):
    """Rows of a few hundred take each kernel under its plan options."""
    rng = np.random.default_rng(sum(shape))
    x = data(rng, shape, dtype, 10.0)
    p = rows.plan_for(x, np.dtype(dtype).name, shape[-1])
    assert p.kernel == ("loop" if path == "loop" else "registers")
    assert (p.cluster > 1) == path.startswith("cluster")
    assert bool(rows.staged(p, x, 1)) == path.endswith("staged")
    t = targets(rng, int(np.prod(shape[:-1])), shape[-1]).reshape(shape[:-1])
    check(x, t, dtype)


@pytest.mark.parametrize("m", [1, 9, 33])
def test_short_rows_share_a_block(m):
    """Short rows take a few lanes each, several rows per block; the spare
    lanes of the last block write nothing."""
    assert rows.plan("float32", 20, "cpu").rows > 1
    rng = np.random.default_rng(m)
    check(data(rng, (m, 20), np.float32, 3.0), targets(rng, m, 20), np.float32)


def test_the_forward_streams_rows_that_would_need_a_cluster(monkeypatch):
    clustered = rows.plan("bfloat16", 262144, "cuda", 8, elements=64)
    assert clustered.kernel == "registers" and clustered.cluster > 1
    streamed = rows.streamed(clustered)
    assert (streamed.kernel, streamed.vec, streamed.threads, streamed.cluster) == \
        ("loop", 8, 1024, 1)
    whole_block = rows.plan("bfloat16", 65536, "cuda", 8, elements=64)
    assert (whole_block.kernel, whole_block.cluster, whole_block.threads) == ("registers", 1, 1024)
    assert rows.streamed(whole_block).kernel == "loop"
    one_block = rows.plan("float32", 16384, "cuda", 8)
    assert one_block.cluster == 1 and rows.streamed(one_block) is one_block
    with rows.plan_options(max_cluster=8):           # a plan chosen by hand stays
        assert rows.streamed(clustered) is clustered
    # the forward launches the streamed plan: on a device with clusters, the loop kernel
    launched = []
    monkeypatch.setattr(rows, "max_cluster", lambda x: 8)
    monkeypatch.setattr(rows, "launch", lambda p, *args: launched.append(p))
    logits, target = np.zeros((2, 262144), np.float32), np.zeros(2, np.int64)
    module.cross_entropy_forward.__wrapped__(logits, target)
    assert [p.kernel for p in launched] == ["loop"]


def test_int32_targets_and_other_ignore_indices():
    rng = np.random.default_rng(5)
    x = data(rng, (9, 50), np.float32, 3.0)
    t = targets(rng, 9, 50, np.int32)
    check(x, t, np.float32)
    t[3], t[t == IGNORE] = 7, 7
    check(x, t, np.float32, ignore_index=7)                 # a class that is ignored
    t = targets(rng, 9, 50)
    t[2::5] = 2**40                                         # past int32: an Int64 argument
    check(x, t, np.float32, ignore_index=2**40)


def test_large_magnitudes_are_stable(path):
    """exp of 1e4 overflows float32: the max is subtracted first; -inf
    logits (not the target) are allowed; 3e38 everywhere stays finite."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((4, 2000)) * 1e4).astype(np.float32)
    x[1, 5:50] = -np.inf
    x[2] = 3e38
    t = np.array([1, 60, 3, 1999])
    loss, lse = cross_entropy_forward(x, t)
    want_loss, want_lse = reference(x, t)
    assert np.isfinite(loss).all() and np.isfinite(lse).all()
    np.testing.assert_allclose(loss, want_loss, rtol=2e-6, atol=0.1)   # 1e4 * eps(float32)
    np.testing.assert_allclose(lse, want_lse, rtol=2e-6)
    assert loss[2] == pytest.approx(np.log(2000), rel=1e-6)
    dx = cross_entropy_backward(np.ones(4, np.float32), x, t, lse)
    np.testing.assert_allclose(dx, reference_backward(np.ones(4), x, t), atol=4e-6)


@pytest.mark.parametrize("n", [40, 3000])
def test_no_races(path, n):
    rng = np.random.default_rng(n)
    x = data(rng, (5, n), np.float32, 2.0)
    t = targets(rng, 5, n)
    with race_checking():
        check(x, t, np.float32)


def test_reductions():
    rng = np.random.default_rng(11)
    x = data(rng, (4, 5, 30), np.float32, 3.0)
    t = targets(rng, 20, 30).reshape(4, 5)
    loss, _ = reference(x, t)
    none = cross_entropy(x, t, reduction="none")
    assert none.shape == (4, 5) and none.dtype == np.float32
    np.testing.assert_allclose(none, loss, rtol=1e-5, atol=1e-6)
    total = cross_entropy(x, t, reduction="sum")
    assert total.dtype == np.float32 and total == pytest.approx(loss.sum(), rel=1e-5)
    mean = cross_entropy(x, t)
    assert mean.dtype == np.float32
    assert mean == pytest.approx(loss.sum() / (t != IGNORE).sum(), rel=1e-5)
    assert cross_entropy(x.astype(np.float64), t).dtype == np.float64


def test_all_ignored_rows():
    """mean over no rows is 0/0: NaN, as torch; sum is 0; lse is still
    computed."""
    x = data(np.random.default_rng(12), (3, 8), np.float32, 1.0)
    t = np.full(3, IGNORE)
    assert np.isnan(cross_entropy(x, t))
    assert cross_entropy(x, t, reduction="sum") == 0
    loss, lse = cross_entropy_forward(x, t)
    assert (loss == 0).all()
    np.testing.assert_allclose(lse, reference(x, t)[1], rtol=1e-6)


def test_no_rows():
    x, t = np.zeros((0, 8), np.float32), np.zeros(0, np.int64)
    loss, lse = cross_entropy_forward(x, t)
    assert loss.shape == lse.shape == (0,)
    assert cross_entropy(x, t, reduction="sum") == 0 and np.isnan(cross_entropy(x, t))
    assert cross_entropy_backward(loss, x, t, lse).shape == (0, 8)


def test_one_dimensional_logits():
    """(N,) logits with a 0-d target: one row, as torch."""
    x = np.array([0.5, -1.0, 2.0], np.float32)
    loss, lse = cross_entropy_forward(x, np.array(1))
    assert loss.shape == ()
    want = np.log(np.exp(x.astype(np.float64)).sum()) + 1.0
    assert float(loss) == pytest.approx(want, rel=1e-6)


def test_torch_cpu_tensors_against_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16):     # bfloat16: torch's .numpy() refuses it
        x = (torch.randn(9, 300, generator=g) * 3).to(dtype)
        t = torch.randint(0, 300, (9,), generator=g)
        t[2::4] = IGNORE
        for reduction in REDUCTIONS:
            got = cross_entropy(x, t, reduction=reduction)
            want = F.cross_entropy(x.double(), t, reduction=reduction)
            assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
            torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=2e-6)
        loss, lse = cross_entropy_forward(x, t)
        xd = x.double().requires_grad_()
        F.cross_entropy(xd, t, reduction="none").backward(torch.ones(9, dtype=torch.float64))
        dx = cross_entropy_backward(torch.ones(9), x, t, lse)
        assert dx.dtype == dtype
        tol = 2e-6 if dtype == torch.float32 else 1e-3
        torch.testing.assert_close(dx.double(), xd.grad, atol=tol, rtol=tol * 2)
    t = torch.full((9,), IGNORE)
    assert torch.isnan(cross_entropy(x, t))
    assert torch.isnan(F.cross_entropy(x.float(), t))


# -- bad inputs ------------------------------------------------------------------------------

X = np.ones((4, 10), np.float32)
T = np.array([1, 2, 3, 4])


def test_bad_targets():
    with pytest.raises(moye.MoyeTypeError, match="cross_entropy: target must hold class "
                                                 "indices as int64 or int32, got float32"):
        cross_entropy(X, T.astype(np.float32))
    with pytest.raises(moye.MoyeTypeError, match="got int16"):
        cross_entropy(X, T.astype(np.int16))
    with pytest.raises(moye.MoyeTypeError, match="target must be a NumPy array, as logits "
                                                 "is; got list"):
        cross_entropy(X, [1, 2, 3, 4])
    with pytest.raises(moye.ShapeError, match=r"target has shape \(3,\) but logits has "
                                              r"\(4, 10\); target must be logits' shape "
                                              r"without its last \(class\) dimension, \(4,\)"):
        cross_entropy(X, T[:3])
    with pytest.raises(moye.ShapeError, match=r"target has shape \(4, 1\)"):
        cross_entropy(X, T[:, None])
    with pytest.raises(moye.BoundsError, match=r"cross_entropy: target\[2\] is 10, outside "
                                               r"the 10 classes \[0, 10\) \(and not "
                                               r"ignore_index, -100\)"):
        cross_entropy(X, np.array([0, 9, 10, 1]))
    with pytest.raises(moye.BoundsError, match=r"target\[1, 0\] is -1"):
        cross_entropy(np.ones((2, 2, 10), np.float32), np.array([[0, 9], [-1, 1]]))
    with pytest.raises(moye.BoundsError, match=r"target\[0\] is -100, outside"):
        cross_entropy(X, np.array([-100, 1, 2, 3]), ignore_index=-1)


def test_bad_arguments():
    with pytest.raises(moye.MoyeTypeError, match="cross_entropy: reduction must be 'none', "
                                                 "'sum' or 'mean', got 'avg'"):
        cross_entropy(X, T, reduction="avg")
    with pytest.raises(moye.MoyeTypeError, match="got None"):
        cross_entropy(X, T, reduction=None)
    with pytest.raises(moye.MoyeTypeError, match="ignore_index must be an int, got float"):
        cross_entropy(X, T, ignore_index=-100.0)
    with pytest.raises(moye.MoyeTypeError, match="ignore_index must be an int, got bool"):
        cross_entropy_forward(X, T, True)
    with pytest.raises(moye.MoyeTypeError, match="cross_entropy: logits must be float32, "
                                                 "float16, bfloat16 or float64, got int64"):
        cross_entropy(X.astype(np.int64), T)
    with pytest.raises(moye.ShapeError, match=r"logits has 0 classes \(shape \(4, 0\)\)"):
        cross_entropy(np.ones((4, 0), np.float32), T)
    with pytest.raises(moye.ShapeError, match="logits is 0-d"):
        cross_entropy(np.array(1.0, np.float32), np.array(0))
    with pytest.raises(moye.ShapeError, match="logits must be contiguous"):
        cross_entropy(np.ones((4, 20), np.float32)[:, ::2], T)
    with pytest.raises(moye.ShapeError, match="at most 262144"):
        cross_entropy(np.ones((1, 262_145), np.float16), np.array([0]))


def test_bad_backward_arguments():
    loss, lse = cross_entropy_forward(X, T)
    with pytest.raises(moye.MoyeTypeError, match="cross_entropy_backward: dloss must be "
                                                 "float32 for float32 logits, got float64"):
        cross_entropy_backward(loss.astype(np.float64), X, T, lse)
    with pytest.raises(moye.MoyeTypeError, match="lse must be float64 for float64 logits, "
                                                 "got float32"):
        cross_entropy_backward(loss.astype(np.float64), X.astype(np.float64), T, lse)
    with pytest.raises(moye.ShapeError, match=r"lse has shape \(3,\) but target has \(4,\)"):
        cross_entropy_backward(loss, X, T, lse[:3])
    with pytest.raises(moye.MoyeTypeError, match="dloss must be a NumPy array or a torch"):
        cross_entropy_backward([1.0] * 4, X, T, lse)
    with pytest.raises(moye.BoundsError, match=r"cross_entropy_backward: target\[3\] is 10"):
        cross_entropy_backward(loss, X, np.array([1, 2, 3, 10]), lse)


def test_bad_torch_devices():
    torch = pytest.importorskip("torch")
    x = torch.ones(4, 10)
    with pytest.raises(moye.MoyeTypeError, match="cross_entropy: target is a ndarray, but other "
                                                 "arguments are torch tensors"):
        cross_entropy(x, T)
    with pytest.raises(moye.MoyeTypeError, match="target is on meta but logits is on cpu"):
        cross_entropy(x, torch.ones(4, dtype=torch.long, device="meta"))
    with pytest.raises(moye.MoyeTypeError, match="target must hold class indices as int64 "
                                                 "or int32, got float32"):
        cross_entropy(x, torch.ones(4))
    loss, lse = cross_entropy_forward(x, torch.tensor(T))
    with pytest.raises(moye.MoyeTypeError, match="cross_entropy_backward: dloss is a ndarray, but "
                                                 "other arguments are torch tensors"):
        cross_entropy_backward(loss.numpy(), x, torch.tensor(T), lse)


# -- CUDA C++ ----------------------------------------------------------------------------------

def _variants():
    m = module
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, np.float64):
        a = np.ones((4, 65536), dtype)
        out = np.ones(4, loss_type(dtype))
        for t in (np.ones(4, np.int64), np.ones(4, np.int32)):
            for options in ({}, {"max_cluster": 8}, {"elements": 64}):
                p = rows.plan(np.dtype(dtype).name, 65536, "cuda", **options)
                if p.kernel == "registers":
                    yield m.cross_entropy_registers, (out, out, a, t, IGNORE, p.work,
                                                       p.cluster > 1), p
                    yield (m.cross_entropy_backward_registers, (a, a, t, out, out, IGNORE,
                                                                p.work, p.cluster > 1), p)
                else:
                    yield m.cross_entropy_loop, (out, out, a, t, IGNORE, p.vec, p.threads), p
                    yield (m.cross_entropy_backward_loop, (a, a, t, out, out, IGNORE, p.vec,
                                                           p.threads), p)


def test_variants_cover_every_path():
    assert {(p.kernel, p.cluster > 1) for _, _, p in _variants()} == {
        ("registers", False), ("registers", True), ("loop", False)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_compile_with_nvrtc(arch):
    compile_variants(_variants(), arch)


def test_kernels_give_nan_for_bad_targets(monkeypatch, path):
    """Where the host does not check (CUDA tensors), the kernels do: a target
    outside [0, N) gives that row a NaN loss and NaN gradient, the others
    are right; no read outside the row."""
    monkeypatch.setattr(module, "_check_range", lambda *args: None)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 700)).astype(np.float32)
    t = np.array([5, 700, -3, 699])
    loss, lse = cross_entropy_forward(x, t)
    assert np.isnan(loss[1]) and np.isnan(loss[2]) and np.isfinite(loss[[0, 3]]).all()
    dx = cross_entropy_backward(np.ones(4, np.float32), x, t, lse)
    assert np.isnan(dx[1:3]).all() and np.isfinite(dx[[0, 3]]).all()

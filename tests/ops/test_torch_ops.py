"""moye.ops on CPU torch tensors: the torch.library custom ops, their fakes
and autograd, torch.compile and gradcheck, against torch's own ops in
float64.

Each test runs on two sets of raw host functions ("kernels"): moye's
(the CPU backend) and stand-ins written in torch to the op contract
(docs/ops.md), which test the torch layer alone."""
import numpy as np
import pytest

import moye
from moye.ops import rows

torch = pytest.importorskip("torch")
from moye.ops import torch_ops  # noqa: E402  (imports torch, registers the custom ops)
F = torch.nn.functional

OPS = ["softmax", "log_softmax", "rms_norm", "layer_norm", "cross_entropy"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TOL = {torch.float32: (2e-5, 2e-5), torch.float16: (2e-3, 4e-3),
       torch.bfloat16: (1.6e-2, 2e-2), torch.float64: (1e-10, 1e-10)}


# -- stand-in raw functions: the op contract in torch, float64 math ------------------------------

def _rowwise_standin(f):
    def forward(x, dim):
        d = rows.check_dim(x, dim, "x", "stand-in")
        y = f(rows.to_last(x, d).double()).to(x.dtype)
        return rows.from_last(y, d, x.dim())
    return forward


def _rowwise_backward_standin(f):
    def backward(y, dy, dim):
        d = rows.check_dim(y, dim, "y", "stand-in")
        yl, dyl = rows.to_last(y, d).double(), rows.to_last(dy, d).double()
        return rows.from_last(f(yl, dyl).to(y.dtype), d, y.dim())
    return backward


def _stats_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _rms_norm_forward(x, weight, eps):
    xd = x.double()
    rstd = torch.rsqrt(xd.square().mean(-1) + eps)
    y = xd * rstd[..., None] * (1 if weight is None else weight.double())
    return y.to(x.dtype), rstd.to(_stats_dtype(x))


def _rms_norm_backward(dy, x, weight, rstd):
    xd, dyd, r = x.double(), dy.double(), rstd.double()[..., None]
    g = dyd * (1 if weight is None else weight.double())
    dx = r * (g - xd * r * r * (g * xd).mean(-1, keepdim=True))
    dw = None if weight is None else (dyd * xd * r).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
    return dx.to(x.dtype), dw


def _layer_norm_forward(x, weight, bias, eps):
    xd = x.double()
    mean = xd.mean(-1)
    rstd = torch.rsqrt(xd.var(-1, unbiased=False) + eps)
    y = (xd - mean[..., None]) * rstd[..., None]
    y = y * (1 if weight is None else weight.double()) + (0 if bias is None else bias.double())
    return y.to(x.dtype), mean.to(_stats_dtype(x)), rstd.to(_stats_dtype(x))


def _layer_norm_backward(dy, x, weight, mean, rstd):
    xd, dyd, r = x.double(), dy.double(), rstd.double()[..., None]
    xhat = (xd - mean.double()[..., None]) * r
    g = dyd * (1 if weight is None else weight.double())
    dx = r * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    if weight is None:
        return dx.to(x.dtype), None, None
    n = x.shape[-1]
    return (dx.to(x.dtype), (dyd * xhat).reshape(-1, n).sum(0).to(weight.dtype),
            dyd.reshape(-1, n).sum(0).to(weight.dtype))


def _cross_entropy_forward(logits, target, ignore_index):
    ld = logits.double()
    lse = torch.logsumexp(ld, -1)
    keep = target != ignore_index
    picked = ld.gather(1, torch.where(keep, target, 0)[:, None])[:, 0]
    t = _stats_dtype(logits)
    return torch.where(keep, lse - picked, 0).to(t), lse.to(t)


def _cross_entropy_backward(dloss, logits, target, lse, ignore_index):
    keep = target != ignore_index
    p = torch.exp(logits.double() - lse.double()[:, None])
    p = p - F.one_hot(torch.where(keep, target, 0), logits.shape[1]).double()
    return (p * torch.where(keep, dloss.double(), 0)[:, None]).to(logits.dtype)


STANDINS = {
    "softmax": _rowwise_standin(lambda x: torch.softmax(x, -1)),
    "softmax_backward": _rowwise_backward_standin(
        lambda y, dy: y * (dy - (y * dy).sum(-1, keepdim=True))),
    "log_softmax": _rowwise_standin(lambda x: torch.log_softmax(x, -1)),
    "log_softmax_backward": _rowwise_backward_standin(
        lambda y, dy: dy - y.exp() * dy.sum(-1, keepdim=True)),
    "rms_norm_forward": _rms_norm_forward, "rms_norm_backward": _rms_norm_backward,
    "layer_norm_forward": _layer_norm_forward, "layer_norm_backward": _layer_norm_backward,
    "cross_entropy_forward": _cross_entropy_forward,
    "cross_entropy_backward": _cross_entropy_backward,
}


def torch_ops_table():
    return torch_ops.OPS


@pytest.fixture(params=["moye", "stand-in"])
def kernels(request, monkeypatch):
    """Which raw host functions the custom ops call; the outputs moye's
    kernels write start as NaN (rows.empty_like poisoned)."""
    if request.param == "stand-in":
        monkeypatch.setattr(rows, "raw", STANDINS.__getitem__)
        monkeypatch.setattr(rows, "_TORCH_DTYPES", rows._TORCH_DTYPES + ("torch.float64",))
    else:
        monkeypatch.setattr(rows, "empty_like", lambda x: torch.full_like(
            x, float("nan"), memory_format=torch.contiguous_format))
    return request.param


# -- each op: inputs, moye's call, torch's call ------------------------------------------------

def inputs(op, shape, dtype, seed, weights=True):
    """The op's tensor inputs (the floating ones require grad) and keyword args."""
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]

    def randn(*s, scale=1.0):
        return (torch.randn(*s, generator=g, dtype=torch.float64) * scale).to(dtype)

    if op == "cross_entropy":
        m = int(np.prod(shape[:-1]))
        target = torch.randint(0, n, (m,), generator=g)
        target[::3] = -100
        return [randn(m, n, scale=3).requires_grad_(), target], {}
    x = randn(*shape, scale=3).requires_grad_()
    if op in ("softmax", "log_softmax"):
        return [x], {}
    w = (1 + randn(n, scale=0.5)).requires_grad_() if weights else None
    b = randn(n).requires_grad_() if weights else None
    return ([x, w], {}) if op == "rms_norm" else ([x, w, b], {})


def call_moye(op, args, dim=-1):
    if op in ("softmax", "log_softmax"):
        return getattr(moye.ops, op)(args[0], dim)
    return getattr(moye.ops, op)(*args)


def call_torch(op, args, dim=-1):
    """torch's op in float64, then rounded to the input's type (as moye
    stores it), except cross_entropy's float32 loss."""
    a = [t.double() if t is not None and t.is_floating_point() else t for t in args]
    n = args[0].shape[-1]
    out = {"softmax": lambda: torch.softmax(a[0], dim),
           "log_softmax": lambda: torch.log_softmax(a[0], dim),
           "rms_norm": lambda: F.rms_norm(a[0], (n,), a[1], 1e-6),
           "layer_norm": lambda: F.layer_norm(a[0], (n,), a[1], a[2], 1e-5),
           "cross_entropy": lambda: F.cross_entropy(a[0], a[1], ignore_index=-100)}[op]()
    return out


def close(got, want, dtype, scale=1.0):
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(got.double(), want.double(), atol=atol * scale, rtol=rtol)


# -- forward -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_forward(kernels, op, dtype):
    args, _ = inputs(op, (2, 3, 37), dtype, seed=OPS.index(op))
    before = [None if t is None else t.detach().clone() for t in args]
    out = call_moye(op, args)
    want = call_torch(op, args)
    assert out.device == args[0].device
    assert out.dtype == (torch.float32 if op == "cross_entropy" else dtype)
    assert out.shape == want.shape
    close(out, want, dtype, scale=4.0)
    for t, b in zip(args, before):                  # inputs untouched, output fresh
        if t is not None:
            assert torch.equal(t.detach(), b)
            assert out.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


@pytest.mark.parametrize("dim", [0, 1, -2])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_other_dims(kernels, op, dim):
    args, _ = inputs(op, (4, 5, 6), torch.float32, seed=dim + 5)
    out = call_moye(op, args, dim)
    close(out, call_torch(op, args, dim), torch.float32)
    w = torch.randn(out.shape, dtype=torch.float64).float()
    (gx,) = torch.autograd.grad((out * w).sum(), args)
    xr = args[0].detach().double().requires_grad_()
    (want,) = torch.autograd.grad((call_torch(op, [xr], dim) * w).sum(), [xr])
    close(gx, want, torch.float32, scale=4.0)


def test_cross_entropy_reductions(kernels):
    args, _ = inputs("cross_entropy", (7, 11), torch.float32, seed=3)
    logits, target = args
    ref = {r: F.cross_entropy(logits.double(), target, reduction=r) for r in ("none", "sum",
                                                                             "mean")}
    for r, want in ref.items():
        got = moye.ops.cross_entropy(logits, target, reduction=r)
        assert got.dtype == torch.float32 and got.shape == want.shape
        close(got, want, torch.float32)
    ignored = torch.full_like(target, 5)
    got = moye.ops.cross_entropy(logits, ignored, ignore_index=5)
    assert torch.isnan(got) and torch.isnan(F.cross_entropy(logits.double(), ignored,
                                                            ignore_index=5))


# -- autograd ----------------------------------------------------------------------------------

@pytest.mark.parametrize("weights", [True, False])
@pytest.mark.parametrize("op", OPS)
def test_autograd(kernels, op, weights):
    """loss.backward() through the op gives torch's gradients for x, weight, bias."""
    if not weights and op not in ("rms_norm", "layer_norm"):
        pytest.skip("no weights")
    args, _ = inputs(op, (2, 3, 29), torch.float32, seed=11, weights=weights)
    out = call_moye(op, args)
    w = torch.randn(out.shape, dtype=torch.float64).float()
    (out * w).sum().backward()
    ref = [t.detach().double().requires_grad_() if t is not None and t.requires_grad else t
           for t in args]
    (call_torch(op, ref) * w.double()).sum().backward()
    for t, r in zip(args, ref):
        if t is not None and t.requires_grad:
            assert t.grad is not None and t.grad.dtype == t.dtype and t.grad.shape == t.shape
            close(t.grad, r.grad, torch.float32, scale=8.0)


def test_bias_without_weight(kernels):
    x, _, b = inputs("layer_norm", (3, 16), torch.float32, seed=2)[0]
    y = moye.ops.layer_norm(x, None, b)
    w = torch.randn(3, 16)
    (y * w).sum().backward()
    torch.testing.assert_close(b.grad, w.sum(0), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op", OPS)
def test_gradcheck(kernels, op):
    """torch.autograd.gradcheck in float64 (the moye kernels: on the CPU
    backend, once they take float64 inputs)."""
    args, _ = inputs(op, (2, 6), torch.float64, seed=4)

    def f(*a):
        return call_moye(op, list(a))
    assert torch.autograd.gradcheck(f, tuple(args), eps=1e-6, atol=1e-5)


# -- torch.compile and opcheck -----------------------------------------------------------------

def _available(kernels):
    if kernels == "stand-in":
        return OPS
    have = []
    for op in OPS:
        try:
            rows.raw(torch_ops_table()[op].forward)
            have.append(op)
        except moye.MoyeError:
            pass
    return have


class Model(torch.nn.Module):
    """Every available op once, on a (rows, N) activation."""

    def __init__(self, ops, n):
        super().__init__()
        self.ops = ops
        self.w = torch.nn.Parameter(1 + 0.1 * torch.randn(n))
        self.b = torch.nn.Parameter(0.1 * torch.randn(n))

    def forward(self, x, target):
        h = x * self.w + self.b
        if "rms_norm" in self.ops:
            h = moye.ops.rms_norm(h, self.w)
        if "layer_norm" in self.ops:
            h = moye.ops.layer_norm(h, self.w, self.b)
        if "softmax" in self.ops:
            h = h + moye.ops.softmax(h, 0)
        if "log_softmax" in self.ops:
            h = h + moye.ops.log_softmax(h, -1)
        if "cross_entropy" in self.ops:
            return moye.ops.cross_entropy(h, target)
        return (h * h).mean()


def _run(model, x, target):
    x = x.detach().clone().requires_grad_()
    loss = model(x, target)
    loss.backward()
    grads = [x.grad] + [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return loss.detach(), grads


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_fullgraph(kernels, backend):
    if backend == "inductor" and kernels == "moye":
        pytest.skip("one inductor run (slow on the CPU): the stand-ins'")
    ops = _available(kernels)
    if not ops:
        pytest.skip("no op's kernels on this branch")
    torch.manual_seed(0)
    model = Model(ops, 24)
    x, target = torch.randn(6, 24), torch.randint(0, 24, (6,))
    target[1] = -100
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x, target)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    want_loss, want_grads = _run(model, x, target)
    got_loss, got_grads = _run(compiled, x, target)
    torch.testing.assert_close(got_loss, want_loss, atol=1e-5, rtol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def _op_samples(op):
    """(custom op name, args) for the op's forward and backward custom ops."""
    spec = torch_ops_table()[op]
    args, _ = inputs(op, (3, 20), torch.float32, seed=8)
    args = [t.detach() if t is not None else None for t in args]
    if op in ("softmax", "log_softmax"):
        y = getattr(moye.ops, op)(args[0], 0)
        return [(spec.forward, (args[0], 0)), (spec.backward, (y, torch.randn(3, 20), 0))]
    if op == "rms_norm":
        y, rstd = torch_ops.op(spec.forward)(*args, 1e-6)
        return [(spec.forward, (*args, 1e-6)), (spec.backward, (torch.randn(3, 20), args[0],
                                                               args[1], rstd))]
    if op == "layer_norm":
        y, mean, rstd = torch_ops.op(spec.forward)(*args, 1e-5)
        return [(spec.forward, (*args, 1e-5)),
                (spec.backward, (torch.randn(3, 20), args[0], args[1], mean, rstd))]
    loss, lse = torch_ops.op(spec.forward)(*args, -100)
    return [(spec.forward, (*args, -100)),
            (spec.backward, (torch.rand(3), args[0], args[1], lse, -100))]


@pytest.mark.parametrize("op", OPS)
def test_opcheck(kernels, op):
    """torch.library.opcheck: schema, autograd registration, fake tensors
    (the fakes' shapes, dtypes and strides equal the real outputs'), AOT
    dispatch with dynamic shapes."""
    for name, args in _op_samples(op):
        if name == torch_ops_table()[op].forward:
            args = tuple(a.clone().requires_grad_() if isinstance(a, torch.Tensor)
                         and a.is_floating_point() else a for a in args)
        torch.library.opcheck(torch_ops.op(name), args)


# -- bad inputs --------------------------------------------------------------------------------

def test_bad_inputs_through_torch():
    x = torch.randn(3, 5)
    with pytest.raises(moye.MoyeTypeError, match="x must be float32, float16, bfloat16 or float64, "
                                                 "got int64"):
        moye.ops.softmax(torch.ones(3, 5, dtype=torch.int64))
    with pytest.raises(moye.MoyeTypeError, match="dy is on meta but y is on cpu"):
        moye.ops.softmax_backward(x, torch.empty(3, 5, device="meta"))
    with pytest.raises(moye.MoyeTypeError, match="dy is a ndarray, but other arguments are "
                                                 "torch tensors"):
        moye.ops.softmax_backward(x, np.ones((3, 5), np.float32))
    with pytest.raises(moye.ShapeError, match="dim 2 is out of range"):
        moye.ops.softmax(x, 2)
    with pytest.raises(moye.MoyeTypeError, match="dim must be an int"):
        moye.ops.softmax(x, 1.0)


def test_bad_inputs_of_the_other_ops():
    x = torch.randn(3, 5)
    with pytest.raises(moye.MoyeTypeError, match="weight is on meta but x is on cpu"):
        moye.ops.rms_norm(x, torch.ones(5, device="meta"))
    with pytest.raises(moye.MoyeTypeError, match="eps must be a number, got str"):
        moye.ops.layer_norm(x, None, None, "1e-5")
    with pytest.raises(moye.MoyeTypeError, match="reduction must be 'none', 'sum' or 'mean'"):
        moye.ops.cross_entropy(x, torch.zeros(3, dtype=torch.int64), reduction="avg")
    with pytest.raises(moye.MoyeTypeError, match="target must hold class indices as int64 or "
                                                 "int32, got float32"):
        moye.ops.cross_entropy(x, torch.zeros(3))
    with pytest.raises(moye.ShapeError, match=r"target has shape \(4,\) but logits has"):
        moye.ops.cross_entropy(x, torch.zeros(4, dtype=torch.int64))
    with pytest.raises(moye.MoyeTypeError, match="ignore_index must be an int"):
        moye.ops.cross_entropy(x, torch.zeros(3, dtype=torch.int64), ignore_index=1.5)


def test_target_out_of_range():
    x = torch.randn(3, 5)
    for bad in (5, -1):
        with pytest.raises(moye.MoyeError, match="target"):
            moye.ops.cross_entropy(x, torch.tensor([0, bad, 1]))


def test_import_moye_does_not_import_torch():
    import subprocess
    import sys
    code = ("import sys, numpy as np, moye; moye.ops.softmax(np.ones((1, 2), np.float32)); "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)

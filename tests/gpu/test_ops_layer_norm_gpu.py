"""moye.ops layer_norm forward and backward on torch CUDA tensors: every
element against torch's own op in float64 (autograd for the gradients),
every kernel path, with and without weight and bias, on torch's current
stream."""
import pytest

from moye.ops import rows
from moye.ops.layer_norm_op import layer_norm, layer_norm_backward, layer_norm_forward

from .test_ops_rms_norm_gpu import NS, TOL

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("poisoned_ops_outputs")]


def check(torch, x, w, b, eps=1e-5):
    name = str(x.dtype)[len("torch."):]
    tol = TOL[name]
    n = x.shape[-1]
    y, mean, rstd = layer_norm_forward(x, w, b, eps)
    g = torch.Generator(device="cuda").manual_seed(n)
    dy = torch.randn(x.shape, device="cuda", generator=g).to(x.dtype)
    dx, dw, db = layer_norm_backward(dy, x, w, mean, rstd)
    torch.cuda.synchronize()
    xd = x.double().requires_grad_()
    wd = None if w is None else w.double().requires_grad_()
    bd = None if b is None else b.double().requires_grad_()
    ref = torch.nn.functional.layer_norm(xd, (n,), wd, bd, eps)
    ref.backward(dy.double())
    scale = ref.abs().max().item()
    torch.testing.assert_close(y.double(), ref.detach(), atol=tol * scale, rtol=tol)
    var, mu = torch.var_mean(xd.detach(), -1, unbiased=False)
    torch.testing.assert_close(mean.double(), mu, atol=tol * (mu.abs().max().item() + 1),
                               rtol=tol)
    torch.testing.assert_close(rstd.double(), (var + eps).rsqrt(), atol=0, rtol=max(tol, 2e-5))
    terms = (var + eps).rsqrt().max().item() * dy.double().abs().max().item() * \
        (1 if w is None else w.double().abs().max().item())
    torch.testing.assert_close(dx.double(), xd.grad, atol=tol * terms, rtol=tol)
    for got, want in ((dw, None if wd is None else wd.grad), (db, None if bd is None else bd.grad)):
        if want is not None:
            torch.testing.assert_close(got.double(), want, atol=tol * want.abs().max().item()
                                       + 1e-5 * x.shape[0] ** 0.5, rtol=tol)
    if w is None:
        assert dw is None


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("affine", [True, False])
def test_forward_and_backward(torch, dtype, n, affine):
    dt = getattr(torch, dtype)
    m = max(1, min(300, 2 ** 22 // n))
    g = torch.Generator(device="cuda").manual_seed(n)
    x = (torch.randn(m, n, device="cuda", generator=g) * 3 + 5).to(dt)
    w = (torch.randn(n, device="cuda", generator=g) + 1).to(dt) if affine else None
    b = torch.randn(n, device="cuda", generator=g).to(dt) if affine else None
    check(torch, x, w, b)


@pytest.mark.parametrize("n", [4096, 65536, 262144])
def test_float32_parameters_with_bfloat16_input(torch, n):
    """At 65,536 on sm_90 in a cluster, whose backward keeps the float32
    weight in shared memory (rows.backward_plan); at 262,144 in the wide
    plan, the dbias sums kept too."""
    x = torch.randn(77, n, device="cuda").bfloat16()
    check(torch, x, torch.randn(n, device="cuda") + 1, torch.randn(n, device="cuda"))


@pytest.mark.parametrize("options,kernel,clustered", [
    ({"elements": 8, "max_threads": 32, "max_cluster": 8}, "registers", True),
    ({"elements": 8, "max_threads": 32, "max_cluster": 8, "staged": False}, "registers", True),
    ({"elements": 8, "max_threads": 32, "max_cluster": 8, "keep": True}, "registers", True),
    ({"elements": 8, "max_threads": 32, "max_cluster": 8, "keep": "sums", "staged": 3},
     "registers", True),
    ({"staged": 2}, "registers", False),
    ({"keep": True}, "registers", False),
    ({"elements": 4, "max_threads": 32, "max_cluster": 1}, "loop", False),
    ({}, "registers", False)])
@pytest.mark.parametrize("n", [700, 2000])
@pytest.mark.parametrize("m", [1, 3, 2000])
def test_every_path(torch, options, kernel, clustered, n, m):
    if clustered and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("clusters are sm_90")
    x = torch.randn(m, n, device="cuda") * 10 + 3
    w, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    with rows.plan_options(**options):
        p = rows.plan_for(x, "float32", n)
        assert p.kernel == kernel and (p.cluster > 1) == clustered
        check(torch, x, w, b)


def test_runs_on_the_current_stream(torch):
    x = torch.randn(256, 4096, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = layer_norm(x, None, None)
        z = y * 1.0
    s.synchronize()
    torch.testing.assert_close(z, torch.nn.functional.layer_norm(x, (4096,), None, None, 1e-5),
                               atol=1e-5, rtol=1e-5)

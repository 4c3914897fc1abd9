"""moye.ops.cross_entropy and its forward and backward on torch CUDA tensors:
every element against torch's own op in float64, every kernel path, ignored
rows, out-of-range targets."""
import pytest

import moye
from moye.ops import cross_entropy, cross_entropy_backward, cross_entropy_forward, rows

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("poisoned_ops_outputs")]

# the gradient, in the logits' type: the rounding of values at most 1
TOL = {"float32": (2e-6, 1e-5), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2),
       "float64": (1e-14, 1e-12)}
NS = [1, 33, 1000, 4097, 16_384, 65_536, 262_144]
IGNORE = -100



def check(torch, x, t, dtype):
    import torch.nn.functional as F
    m = x.shape[0]
    loss, lse = cross_entropy_forward(x, t, IGNORE)
    torch.cuda.synchronize()
    want_type = torch.float64 if dtype == "float64" else torch.float32
    assert loss.dtype == lse.dtype == want_type and loss.shape == lse.shape == (m,)
    xd = x.double().requires_grad_()
    want = F.cross_entropy(xd, t, ignore_index=IGNORE, reduction="none")
    tol = 1e-12 if dtype == "float64" else 2e-6
    scale = 1 + float(x.double().abs().max())
    torch.testing.assert_close(loss.double(), want.detach(), atol=tol * scale, rtol=tol)
    torch.testing.assert_close(lse.double(), torch.logsumexp(x.double(), -1), atol=tol * scale,
                               rtol=tol)
    dloss = torch.rand(m, device="cuda", dtype=want_type) + 0.5
    want.backward(dloss.double())
    dx = cross_entropy_backward(dloss, x, t, lse, IGNORE)
    assert dx.dtype == x.dtype and dx.shape == x.shape
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(dx.double(), xd.grad, atol=atol * 4, rtol=rtol)
    for reduction in ("sum", "mean"):
        got = cross_entropy(x, t, IGNORE, reduction)
        ref = F.cross_entropy(x.double(), t, ignore_index=IGNORE, reduction=reduction)
        torch.testing.assert_close(got.double(), ref, atol=tol * scale * m, rtol=1e-5)


def targets(torch, m, n, g):
    t = torch.randint(0, n, (m,), device="cuda", generator=g)
    t[0] = 0
    t[-1] = n - 1
    t[1::5] = IGNORE
    return t


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("n", NS)
def test_forward_and_backward(torch, dtype, n):
    dt = getattr(torch, dtype)
    m = max(2, min(64, 2 ** 22 // n))
    g = torch.Generator(device="cuda").manual_seed(n)
    x = (torch.randn(m, n, device="cuda", generator=g) * 4).to(dt)
    check(torch, x, targets(torch, m, n, g), dtype)


@pytest.mark.parametrize("options,kernel,clustered", [
    ({"elements": 8, "max_threads": 32}, "registers", True),
    ({"elements": 4, "max_threads": 32, "max_cluster": 1}, "loop", False)])
@pytest.mark.parametrize("n", [700, 2000])
def test_cluster_and_loop_kernels(torch, options, kernel, clustered, n):
    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(6, n, device="cuda", generator=g) * 10
    with rows.plan_options(**options):
        p = rows.plan_for(x, "float32", n)
        assert p.kernel == kernel and (p.cluster > 1) == clustered
        check(torch, x, targets(torch, 6, n, g), "float32")


def test_int32_targets_all_ignored_and_errors(torch):
    x = torch.randn(8, 100, device="cuda")
    t = torch.randint(0, 100, (8,), device="cuda", dtype=torch.int32)
    torch.testing.assert_close(cross_entropy(x, t), torch.nn.functional.cross_entropy(
        x, t.long()), atol=1e-5, rtol=1e-5)
    assert torch.isnan(cross_entropy(x, torch.full((8,), IGNORE, device="cuda")))
    # on CUDA the kernels check the targets: a bad one's loss and gradient are NaN
    for bad_value in (100, -5):
        bad = torch.tensor([0, 1, 2, bad_value, 4, 5, 6, 7], device="cuda")
        loss = cross_entropy(x, bad, reduction="none")
        assert torch.isnan(loss[3]) and not torch.isnan(loss[torch.arange(8) != 3]).any()
        _, lse = cross_entropy_forward(x, bad)
        dx = cross_entropy_backward(torch.ones(8, device="cuda"), x, bad, lse)
        assert torch.isnan(dx[3]).all() and not torch.isnan(dx[torch.arange(8) != 3]).any()
    with pytest.raises(moye.MoyeTypeError, match="target is on cpu but logits is on cuda"):
        cross_entropy(x, t.cpu())

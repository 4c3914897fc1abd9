"""moye.ops rms_norm forward and backward on torch CUDA tensors: every
element against torch's own op in float64 (autograd for the gradients),
every kernel path, with and without weight, on torch's current stream."""
import pytest

import numpy as np

from moye.ops import rms_norm_op, rows
from moye.ops.rms_norm_op import rms_norm, rms_norm_backward, rms_norm_forward

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("poisoned_ops_outputs")]

TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2, "float64": 1e-12}
NS = [1, 33, 1000, 4097, 16_384, 65_536, 131_071, 262_144]



def check(torch, x, w, eps=1e-6):
    name = str(x.dtype)[len("torch."):]
    tol = TOL[name]
    n = x.shape[-1]
    y, rstd = rms_norm_forward(x, w, eps)
    g = torch.Generator(device="cuda").manual_seed(n)
    dy = torch.randn(x.shape, device="cuda", generator=g).to(x.dtype)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    torch.cuda.synchronize()
    xd = x.double().requires_grad_()
    wd = None if w is None else w.double().requires_grad_()
    ref = torch.nn.functional.rms_norm(xd, (n,), wd, eps)
    ref.backward(dy.double())
    assert y.dtype == x.dtype and y.device == x.device
    scale = ref.abs().max().item()
    torch.testing.assert_close(y.double(), ref.detach(), atol=tol * scale, rtol=tol)
    want_rstd = (xd.detach().pow(2).mean(-1) + eps).rsqrt()
    torch.testing.assert_close(rstd.double(), want_rstd, atol=0, rtol=max(tol, 2e-6))
    terms = want_rstd.max().item() * dy.double().abs().max().item() * \
        (1 if w is None else w.double().abs().max().item())
    torch.testing.assert_close(dx.double(), xd.grad, atol=tol * terms, rtol=tol)
    if w is None:
        assert dw is None
    else:
        assert dw.dtype == w.dtype
        torch.testing.assert_close(dw.double(), wd.grad, atol=tol * wd.grad.abs().max().item()
                                   + 1e-5 * x.shape[0] ** 0.5, rtol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("weighted", [True, False])
def test_forward_and_backward(torch, dtype, n, weighted):
    dt = getattr(torch, dtype)
    m = max(1, min(300, 2 ** 22 // n))
    g = torch.Generator(device="cuda").manual_seed(n)
    x = (torch.randn(m, n, device="cuda", generator=g) * 3 + 0.5).to(dt)
    w = (torch.randn(n, device="cuda", generator=g) + 1).to(dt) if weighted else None
    check(torch, x, w)


@pytest.mark.parametrize("n", [4096, 65536])
def test_float32_weight_with_bfloat16_input(torch, n):
    """At 65,536 on sm_90 in a cluster, whose backward keeps the float32
    weight in shared memory (rows.backward_plan)."""
    x = torch.randn(77, n, device="cuda").bfloat16()
    check(torch, x, torch.randn(n, device="cuda") + 1)


@pytest.mark.parametrize("options,kernel,clustered", [
    ({"elements": 8, "max_threads": 32, "max_cluster": 8}, "registers", True),
    ({"elements": 8, "max_threads": 32, "max_cluster": 8, "staged": False}, "registers", True),
    ({"elements": 8, "max_threads": 32, "max_cluster": 8, "keep": True}, "registers", True),
    ({"elements": 8, "max_threads": 32, "max_cluster": 8, "keep": True, "staged": 3},
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
    x = torch.randn(m, n, device="cuda") * 10
    w = torch.randn(n, device="cuda")
    with rows.plan_options(**options):
        p = rows.plan_for(x, "float32", n)
        assert p.kernel == kernel and (p.cluster > 1) == clustered
        check(torch, x, w)


def test_runs_on_the_current_stream(torch):
    x = torch.randn(256, 4096, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = rms_norm(x, None)
        z = y * 1.0
    s.synchronize()
    torch.testing.assert_close(z, torch.nn.functional.rms_norm(x, (4096,), None, 1e-6),
                               atol=1e-5, rtol=1e-5)


def test_cluster_groups_are_the_clusters_that_fit(torch):
    """The backward's persistent grid takes no more clusters than run at once
    (on an H100, 15 of 8 blocks where 132 SMs would suggest 16: the 16th would
    wait for the others), and its rows are all done."""
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("clusters are sm_90")
    n, m = 65_536, 512
    x = torch.randn(m, n, device="cuda")
    dy, w = torch.randn_like(x), torch.randn(n, device="cuda")
    _, rstd = rms_norm_forward(x, w, 1e-6)
    p = rows.plan_fitting(x, "float32", n, rms_norm_op.FRAGMENTS)
    assert p.cluster > 1
    dx, part = torch.full_like(x, float("nan")), torch.zeros(m, n, device="cuda")
    args = (part, dy, x, w, rstd, np.float32(1 / n), True)
    used = rows.launch_groups(p, rms_norm_op.rms_norm_backward_registers, m, dx, *args,
                              staged=True, tail=(False,))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert used <= sms // p.cluster and used == rows.resident_clusters(
        rms_norm_op.rms_norm_backward_registers, p, dx, *args, p.work, True, False)
    want, want_dw = rms_norm_backward(dy, x, w, rstd)
    torch.testing.assert_close(dx, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(part[:used].sum(0), want_dw, atol=1e-3, rtol=1e-4)

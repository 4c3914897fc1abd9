"""moye.ops.log_softmax and log_softmax_backward on torch CUDA tensors: every
element against torch's own op in float64, every kernel path."""
import pytest

from moye.ops import log_softmax, log_softmax_backward, rows

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("poisoned_ops_outputs")]

# on log-probabilities (tens in magnitude): the output type's rounding
TOL = {"float32": (1e-5, 2e-6), "float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 8e-3),
       "float64": (1e-12, 1e-13)}
NS = [1, 33, 1000, 4097, 16_384, 65_536, 262_144]



def check(torch, x, dy, dtype):
    atol, rtol = TOL[dtype]
    y = log_softmax(x)
    torch.cuda.synchronize()
    assert y.dtype == x.dtype and y.shape == x.shape and y.device == x.device
    torch.testing.assert_close(y.double(), torch.log_softmax(x.double(), -1), atol=atol,
                               rtol=rtol)
    dx = log_softmax_backward(y, dy)
    yd, dyd = y.double(), dy.double()
    want = torch._log_softmax_backward_data(dyd, yd, -1, torch.float64)
    scale = float(dyd.abs().max() + want.abs().max())
    torch.testing.assert_close(dx.double(), want, atol=atol / 4 * scale, rtol=rtol)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("n", NS)
def test_forward_and_backward(torch, dtype, n):
    dt = getattr(torch, dtype)
    m = max(1, min(64, 2 ** 22 // n))
    g = torch.Generator(device="cuda").manual_seed(n)
    x = (torch.randn(m, n, device="cuda", generator=g) * 4).to(dt)
    dy = torch.randn(m, n, device="cuda", generator=g).to(dt)
    check(torch, x, dy, dtype)


@pytest.mark.parametrize("options,kernel,clustered", [
    ({"elements": 8, "max_threads": 32}, "registers", True),
    ({"elements": 4, "max_threads": 32, "max_cluster": 1}, "loop", False)])
@pytest.mark.parametrize("n", [700, 2000])
def test_cluster_and_loop_kernels(torch, options, kernel, clustered, n):
    x = torch.randn(5, n, device="cuda") * 10
    dy = torch.randn(5, n, device="cuda")
    with rows.plan_options(**options):
        p = rows.plan_for(x, "float32", n)
        assert p.kernel == kernel and (p.cluster > 1) == clustered
        check(torch, x, dy, "float32")


def test_other_dim_and_stream(torch):
    x = torch.randn(6, 33, 5, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = log_softmax(x, 1)
        z = y * 1.0                        # ordered after the kernel on s
    s.synchronize()
    torch.testing.assert_close(z.double(), torch.log_softmax(x.double(), 1), atol=1e-5,
                               rtol=2e-6)

"""moye.ops.softmax and softmax_backward on torch CUDA tensors: every element
against a float64 reference, every kernel path, on torch's current stream."""
import pytest

from moye.ops import rows
from moye.ops.softmax_op import softmax, softmax_backward

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("poisoned_ops_outputs")]

TOL = {"float32": (2e-6, 1e-5), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2),
       "float64": (1e-14, 1e-12)}
NS = [1, 2, 31, 33, 100, 1000, 4097, 8192, 32_768, 32_769, 65_536, 262_144]



def _tol(torch, dtype):
    return TOL[str(dtype)[len("torch."):]]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("n", NS)
def test_forward_and_backward(torch, dtype, n):
    dt = getattr(torch, dtype)
    m = max(1, min(64, 2 ** 22 // n))
    g = torch.Generator(device="cuda").manual_seed(n)
    x = (torch.randn(m, n, device="cuda", generator=g) * 4).to(dt)
    y = softmax(x)
    torch.cuda.synchronize()
    assert y.dtype == dt and y.shape == x.shape and y.device == x.device
    atol, rtol = _tol(torch, dt)
    ref = torch.softmax(x.double(), -1)
    torch.testing.assert_close(y.double(), ref, atol=atol, rtol=rtol)
    dy = torch.randn(m, n, device="cuda", generator=g).to(dt)
    dx = softmax_backward(y, dy)
    yd, dyd = y.double(), dy.double()
    want = yd * (dyd - (yd * dyd).sum(-1, keepdim=True))
    torch.testing.assert_close(dx.double(), want, atol=atol * 4, rtol=rtol)


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
        y = softmax(x)
        dx = softmax_backward(y, dy)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=2e-6, rtol=1e-5)
    yd, dyd = y.double(), dy.double()
    torch.testing.assert_close(dx.double(), yd * (dyd - (yd * dyd).sum(-1, keepdim=True)),
                               atol=1e-5, rtol=1e-5)


def test_backward_in_clusters_of_16(torch):
    """On an H100 a float32 row of 262,144 that 8 blocks of 1,024 threads
    would spill takes the non-portable cluster of 16 blocks of 512."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("clusters of 16 blocks are sm_90's (non-portable)")
    g = torch.Generator(device="cuda").manual_seed(16)
    x = torch.randn(40, 262_144, device="cuda", generator=g) * 4
    dy = torch.randn(40, 262_144, device="cuda", generator=g)
    p = rows.pair_plan(x, rows.plan_for(x, "float32", 262_144))
    assert (p.cluster, p.threads) == (16, 512) and rows.persists(p, x, 2, True)
    y = softmax(x)
    dx = softmax_backward(y, dy)
    yd, dyd = y.double(), dy.double()
    torch.testing.assert_close(dx.double(), yd * (dyd - (yd * dyd).sum(-1, keepdim=True)),
                               atol=8e-6, rtol=1e-5)


def test_runs_on_the_current_stream(torch):
    x = torch.randn(256, 4096, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = softmax(x)
        z = y * 1.0                        # ordered after the kernel on s
    s.synchronize()
    torch.testing.assert_close(z.double(), torch.softmax(x.double(), -1), atol=2e-6, rtol=1e-5)


def test_cpu_tensors_run_on_the_cpu_backend(torch):
    x = torch.randn(3, 100)
    y = softmax(x)
    assert y.device.type == "cpu"
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), -1), atol=2e-6, rtol=1e-5)
    assert rows.backend_of(x) == "cpu" and rows.backend_of(x.cuda()) == "cuda"


def test_other_dim_and_errors(torch):
    import moye
    x = torch.randn(6, 33, 5, device="cuda")
    torch.testing.assert_close(softmax(x, 1).double(), torch.softmax(x.double(), 1),
                               atol=2e-6, rtol=1e-5)
    with pytest.raises(moye.ShapeError, match="x must be contiguous"):
        softmax(x[:, :, ::2])
    with pytest.raises(moye.MoyeTypeError, match="got int64"):
        softmax(torch.ones(3, 4, dtype=torch.int64, device="cuda"))
    with pytest.raises(moye.MoyeTypeError, match="same device"):
        softmax_backward(x, x.cpu())

"""Thread-block clusters and TMA multicast on a Hopper GPU against torch:
the multicast example at awkward sizes (outputs poisoned, every copy of
every element checked), the cluster ids of every block, arrivals on other
blocks' mbarriers, and a launch error for a grid the cluster does not divide."""
import pytest

import moye

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper_only")]


def padded(torch, shape, dtype, fill=None):
    """A CUDA tensor of `shape` whose last mode is padded to 16 bytes, as a view."""
    *lead, N = shape
    per = 16 // torch.empty((), dtype=dtype).element_size()
    base = torch.randn(*lead, -(-N // per) * per, device="cuda").to(dtype)
    if fill is not None:
        base.fill_(fill)
    return base[..., :N]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("cluster", [2, 4])
@pytest.mark.parametrize("M, N", [(1000, 1000), (130, 37), (64, 64), (4096, 2048)])
def test_tma_multicast_example(torch, dtype, cluster, M, N):
    from moye.examples import tma_multicast
    dt = getattr(torch, dtype)
    src = padded(torch, (M, N), dt)
    dst = padded(torch, (cluster, M, N), dt, float("nan"))
    tma_multicast.broadcast(dst, src, cluster)
    torch.cuda.synchronize()
    for r in range(cluster):
        assert torch.equal(dst[r], src), r


@pytest.mark.parametrize("grid, cluster", [((4, 2, 2), (2, 1, 2)), ((6, 1, 1), (3, 1, 1)),
                                           ((8, 1, 1), (8, 1, 1)), ((3, 2, 1), None)])
def test_cluster_ids(torch, grid, cluster):
    import numpy as np
    from tests.kernel.test_cluster_cpu import ids_kernel
    n = grid[0] * grid[1] * grid[2]
    out = torch.full((n, 14), -1, dtype=torch.int32, device="cuda")
    if cluster is None:
        ids_kernel[grid, 64](out)
    else:
        ids_kernel[grid, 64, cluster](out)
    torch.cuda.synchronize()
    want = np.full((n, 14), -1, np.int32)         # the CPU backend's ids, checked there
    if cluster is None:
        ids_kernel[grid, 64](want)
    else:
        ids_kernel[grid, 64, cluster](want)
    assert (out.cpu().numpy() == want).all()


@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_remote_arrivals(torch, cluster):
    from tests.kernel.test_cluster_cpu import ring_kernel
    out = torch.full((8, 32), -1, dtype=torch.int32, device="cuda")
    ring_kernel[8, 32, cluster](out)
    torch.cuda.synchronize()
    assert (out == 2).all()


def test_grid_not_divisible(torch):
    from tests.kernel.test_cluster_cpu import ids_kernel
    out = torch.zeros((8, 14), dtype=torch.int32, device="cuda")
    with pytest.raises(moye.MoyeError, match="not divisible by the cluster"):
        ids_kernel[(3, 1), 32, (2, 1)](out)


def test_example_main(torch, capsys):
    from moye.examples import tma_multicast
    tma_multicast.main(200, 300)
    assert "MISMATCH" not in capsys.readouterr().out

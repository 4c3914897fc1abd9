"""Distributed shared memory and cluster reductions on a Hopper GPU: the
kernels of tests/kernel/test_dsmem_cpu.py, outputs poisoned, every element
checked against NumPy (and the CPU backend, which checks them there)."""
import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper_only")]

rng = np.random.default_rng(180)


@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_peer_reads(torch, cluster):
    from tests.kernel.test_dsmem_cpu import rotate
    grid = 4 * cluster
    x = rng.standard_normal(grid * 64).astype(np.float32)
    out = torch.full((grid * 64,), float("nan"), device="cuda")
    rotate[grid, 64, cluster](out, torch.from_numpy(x).cuda())
    torch.cuda.synchronize()
    expect = np.roll(x.reshape(-1, cluster, 64), -1, axis=1).reshape(-1) * 2
    np.testing.assert_array_equal(out.cpu().numpy(), expect)


def test_peer_stores_and_copies(torch):
    from tests.kernel.test_dsmem_cpu import copy_from_peer, scatter
    x = rng.integers(-1000, 1000, 64).astype(np.int32)
    out = torch.full((512,), -7, dtype=torch.int32, device="cuda")
    scatter[8, 64, 4](out, torch.from_numpy(x).cuda())
    want = np.full(512, -7, np.int32)
    scatter[8, 64, 4](want, x)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), want)
    h = rng.standard_normal(512).astype(np.float16)
    out = torch.full((512,), float("nan"), dtype=torch.float16, device="cuda")
    copy_from_peer[4, 32, 2](out, torch.from_numpy(h).cuda())
    torch.cuda.synchronize()
    blocks = h.reshape(2, 2, 4, 32)
    np.testing.assert_array_equal(out.cpu().numpy(), (blocks + blocks[:, ::-1]).reshape(-1))


@pytest.mark.parametrize("cluster", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("threads", [48, 128, 1024])
@pytest.mark.parametrize("op", ["sum", "max", "min", "user"])
def test_cluster_reduce(torch, cluster, threads, op):
    if cluster > 8 and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("clusters of 16 blocks are sm_90's (non-portable)")
    from tests.kernel.test_dsmem_cpu import reduce_in_cluster, reference, user_max
    op = user_max if op == "user" else op
    grid = (3 * cluster, 1)
    x = rng.standard_normal(grid[0] * threads).astype(np.float32)
    out = torch.full((x.size,), float("nan"), device="cuda")
    reduce_in_cluster[grid, threads, cluster](out, torch.from_numpy(x).cuda(), op)
    torch.cuda.synchronize()
    got = out.cpu().numpy()
    ref = reference(x, grid, (cluster, 1), op)
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-5)
    per_cluster = got.reshape(-1, cluster * threads)
    assert (per_cluster == per_cluster[:, :1]).all()        # bitwise the same in every block


def test_cluster_reduce_2x2_and_in_a_loop(torch):
    from tests.kernel.test_dsmem_cpu import reduce_in_cluster, reduce_twice_and_in_a_loop
    x = rng.integers(-50, 50, 8 * 96).astype(np.int32)
    out = torch.full((x.size,), -12345, dtype=torch.int32, device="cuda")
    reduce_in_cluster[(4, 2), (32, 3), (2, 2)](out, torch.from_numpy(x).cuda(), "sum")
    want = np.full_like(x, -12345)
    reduce_in_cluster[(4, 2), (32, 3), (2, 2)](want, x, "sum")
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), want)
    x = rng.standard_normal(8 * 64).astype(np.float32)
    steps = np.array([5], np.int32)
    out = torch.full((3 * x.size,), float("nan"), device="cuda")
    reduce_twice_and_in_a_loop[8, 64, 4](out, torch.from_numpy(x).cuda(),
                                         torch.from_numpy(steps).cuda())
    want = np.full(3 * x.size, np.nan, np.float32)
    reduce_twice_and_in_a_loop[8, 64, 4](want, x, steps)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cluster", [2, 8, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_store_async_exchange(torch, cluster, dtype):
    from tests.kernel.test_dsmem_cpu import exchange_async, exchanged
    grid, rounds = 4 * cluster, 9
    x = rng.standard_normal(grid * rounds).astype(dtype)
    out = torch.full((grid * rounds * 16,), -1.0, dtype=getattr(torch, np.dtype(dtype).name),
                     device="cuda")
    exchange_async[grid, 32, cluster](out, torch.from_numpy(x).cuda(), rounds)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), exchanged(x, grid, cluster, rounds))

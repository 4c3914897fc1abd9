"""moye.warp_reduce, block_reduce and fragment reduce on a GPU, against the
NumPy references of the CPU tests: whole and partial warps (the partial
last warp's shuffles are what only hardware can confirm), every op, user
ops, widths, and looped calls."""
import numpy as np
import pytest

from ..kernel.test_reduce_cpu import (OP_TYPES, by_width, check, data, fragment_rows, reduce_both,
                                      reference, repeated, absmax, NUMPY)

pytestmark = pytest.mark.gpu


def _on_gpu(torch, a):
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


@pytest.mark.parametrize("block", [32, 64, 96, 128, 48, 1000, 1024])
@pytest.mark.parametrize("op,dtype", OP_TYPES, ids=lambda p: getattr(p, "__name__", str(p)))
def test_warp_and_block_reduce(torch, block, op, dtype):
    grid = 5
    x = data(dtype, grid * block, block)
    poison = np.nan if np.dtype(dtype).kind == "f" else -12345
    out_w = _on_gpu(torch, np.full(x.size, poison, dtype))
    out_b = _on_gpu(torch, np.full(x.size, poison, dtype))
    reduce_both[grid, block](out_w, out_b, _on_gpu(torch, x), op)
    torch.cuda.synchronize()
    check(out_w.cpu().numpy(), reference(x, block, 32, op), x)
    check(out_b.cpu().numpy(), reference(x, block, block, op), x)


@pytest.mark.parametrize("block", [64, 48, 40])
@pytest.mark.parametrize("width", [2, 8, 16, 32])
@pytest.mark.parametrize("op", ["sum", absmax])
def test_widths(torch, block, width, op):
    x = data(np.float32, block, width)
    out = _on_gpu(torch, np.full(block, np.nan, np.float32))
    by_width[1, block](out, _on_gpu(torch, x), width, op)
    torch.cuda.synchronize()
    check(out.cpu().numpy(), reference(x, block, width, op), x)


@pytest.mark.parametrize("block", [64, 48, 1024])
def test_in_a_row_and_in_a_loop(torch, block):
    x = data(np.float32, block, 11)
    out = _on_gpu(torch, np.full((4, block), np.nan, np.float32))
    n = 5
    repeated[1, block](out, _on_gpu(torch, x), n)
    torch.cuda.synchronize()
    got, x64 = out.cpu().numpy(), x.astype(np.float64)
    np.testing.assert_allclose(got[0], x64.sum(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1], 2 * x64.max(), rtol=1e-6)
    np.testing.assert_allclose(got[2], sum((x64 + i).sum() for i in range(n)), rtol=1e-5,
                               atol=1e-3)
    np.testing.assert_allclose(got[3], max(NUMPY[absmax](x64 - i) for i in range(n)), rtol=1e-6)


def test_fragment_reduce(torch):
    threads = 48
    x = data(np.float32, 4 * 8 * threads, 9).reshape(4, 8 * threads, order="F")
    out = _on_gpu(torch, np.full((4, threads), np.nan, np.float32))
    row_max = _on_gpu(torch, np.full((4, threads), np.nan, np.float32))
    total = _on_gpu(torch, np.full(threads, np.nan, np.float32))
    xg = torch.from_numpy(x.T.copy()).cuda().T          # the same column-major strides as x
    fragment_rows[1, threads](out, row_max, total, xg)
    torch.cuda.synchronize()
    tiles = np.stack([x.astype(np.float64)[:, 8 * t:8 * t + 8] for t in range(threads)], 1)
    np.testing.assert_allclose(out.cpu().numpy(), tiles.sum(-1), rtol=1e-5, atol=1e-5)
    want = np.take_along_axis(tiles, np.abs(tiles).argmax(-1)[..., None], -1)[..., 0]
    np.testing.assert_array_equal(row_max.cpu().numpy(), want.astype(np.float32))
    np.testing.assert_allclose(total.cpu().numpy(), x.astype(np.float64).sum(), rtol=1e-5)


def test_device_functions(torch):
    from ..kernel.test_func import calls_helpers, helpers_reference
    x = np.random.default_rng(3).uniform(-3.0, 10.0, 64).astype(np.float32)
    out = _on_gpu(torch, np.full((5, 64), np.nan, np.float32))
    calls_helpers[1, 64](out, _on_gpu(torch, x), 3)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), helpers_reference(x, 3), rtol=1e-5)

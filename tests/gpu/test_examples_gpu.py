"""The seed kernels on a GPU against torch: outputs poisoned first, every
element checked (exact for copies, float32 tolerance for matmuls)."""
import pytest

from .arrays import colmajor

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("padded", [False, True])
def test_copy(torch, padded):
    from moye.examples import copy_kernel
    src, dst = colmajor(torch, 2048, 1024), colmajor(torch, 2048, 1024, float("nan"))
    copy_kernel.launch(dst, src, padded)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


@pytest.mark.parametrize("n", [2048, 8192])
def test_transpose(torch, n):
    from moye.examples import transpose
    src, dst = colmajor(torch, n, n), colmajor(torch, n, n, float("nan"))
    transpose.launch(dst, src)
    torch.cuda.synchronize()
    assert torch.equal(dst, src.t())


@pytest.mark.parametrize("name", ["matmul_smem", "tiled_matmul"])
def test_matmuls(torch, name):
    import importlib
    ex = importlib.import_module(f"moye.examples.{name}")
    A, B = colmajor(torch, 2048, 256), colmajor(torch, 2048, 256)
    C = colmajor(torch, 2048, 2048, float("nan"))
    ex.launch(A, B, C)
    torch.cuda.synchronize()
    ref = A.double() @ B.double().t()
    err = float((C.double() - ref).norm() / ref.norm())
    assert err < 1e-6, err


def test_torch_row_major_arguments_and_scalars(torch):
    import moye
    from moye import MoYeArray, Layout, parallelize, size, tile

    @moye.kernel
    def axpy(y, x, alpha):
        t = moye.thread_idx.x
        gy = tile(MoYeArray(y), (1, 256), (moye.block_idx.y, moye.block_idx.x))
        gx = tile(MoYeArray(x), (1, 256), (moye.block_idx.y, moye.block_idx.x))
        py, px = parallelize(gy, Layout((1, 64)), t), parallelize(gx, Layout((1, 64)), t)
        for i in range(size(py)):
            py[i] = py[i] + alpha * px[i]

    x = torch.randn(64, 1024, device="cuda")
    y = torch.randn(64, 1024, device="cuda")
    expect = y + 0.25 * x
    axpy[(4, 64), 64](y, x, 0.25)
    torch.cuda.synchronize()
    assert torch.allclose(y, expect, rtol=1e-6, atol=1e-6)

"""Seeds 000/001's vectorized copies and cp.async matmuls, and the
double-buffered TF32 tensor-core matmul, on a GPU against torch: outputs
poisoned first, every element checked."""
import pytest

from .arrays import colmajor

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["float64 (4,1)", "float64 (2,1)", "uint128 (4,1)"])
def test_vectorized_copies(torch, name):
    from moye.examples import vectorized_copy
    src, dst = colmajor(torch, 2048, 1024), colmajor(torch, 2048, 1024, float("nan"))
    vectorized_copy.launch(name, dst, src)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


@pytest.mark.parametrize("variant", ["async", "async_vec", "overlap", "double"])
def test_async_matmuls(torch, variant):
    from moye.examples import async_matmul
    A, B = colmajor(torch, 1024, 256), colmajor(torch, 512, 256)
    C = colmajor(torch, 1024, 512, float("nan"))
    async_matmul.launch(variant, A, B, C)
    torch.cuda.synchronize()
    ref = A.double() @ B.double().t()
    assert torch.allclose(C.double(), ref, rtol=1e-5, atol=1e-4)


def test_tensor_core_double_buffer(torch):
    from moye.examples import tensor_core_double_buffer
    A = colmajor(torch, 1024, 256)                           # M-major
    B = torch.randn(512, 256, device="cuda")                 # K-major
    C = colmajor(torch, 1024, 512, float("nan"))
    tensor_core_double_buffer.launch(A, B, C)
    torch.cuda.synchronize()
    # mma.sync reads TF32: the low 13 bits of each float are dropped
    tf32 = lambda x: (x.view(torch.int32) & -8192).view(torch.float32)   # noqa: E731
    ref = tf32(A).double() @ tf32(B).double().t()
    assert torch.allclose(C.double(), ref, rtol=1e-5, atol=1e-4)

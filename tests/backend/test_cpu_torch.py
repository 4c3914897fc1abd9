"""The CPU backend on CPU torch tensors: it reads and writes their memory in
place, bfloat16 (which NumPy lacks) and strided views included."""
import numpy as np
import pytest

import moye
from moye.types import Float32

torch = pytest.importorskip("torch")


@moye.kernel
def scale_rows(y, x):
    i, j = moye.block_idx.x, moye.thread_idx.x
    y[i, j] = moye.cast(moye.cast(x[i, j], Float32) * 2.0 + 1.0, y.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_cpu_tensors_in_place(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 5, generator=g).to(dtype)
    y = torch.full((5, 6), float("nan"), dtype=dtype).t()        # strided: written in place
    scale_rows[6, 5](y, x, backend="cpu")
    torch.testing.assert_close(y, (x.double() * 2 + 1).to(dtype), atol=0, rtol=0)
    assert y.dtype == dtype

"""wgmma on a Hopper GPU against torch: the wgmma_matmul example at every
tile width (outputs poisoned, every element checked), gemm with a wgmma
TiledMMA for every swizzle of the GMMA layouts and bf16 (the kernel of
tests/kernel/test_wgmma_cpu.py), and HGMMA in the example's SASS."""
import os
import shutil
import subprocess

import pytest

import moye
from moye import BFloat16, Float16, Float32

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper_only")]


def rel_error(torch, C, A, B):
    want = A.double() @ B.double().T
    return ((C.double() - want).abs().max() / want.abs().max()).item()


@pytest.mark.parametrize("M, N, K, bN", [(64, 64, 64, 64), (512, 512, 512, 128),
                                         (256, 1024, 1024, 256), (1024, 768, 2048, 128)])
def test_wgmma_matmul(torch, M, N, K, bN):
    from moye.examples import wgmma_matmul
    A = torch.randn(M, K, device="cuda").half()
    B = torch.randn(N, K, device="cuda").half()
    C = torch.full((M, N), float("nan"), device="cuda")
    wgmma_matmul.matmul(C, A, B, bN)
    torch.cuda.synchronize()
    assert not C.isnan().any()
    assert rel_error(torch, C, A, B) < 1e-3


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("n", [64, 256])
def test_gemm_every_swizzle(torch, dtype, swizzle, n):
    from moye.atom.arch.sm90 import gmma_smem_layout
    from tests.kernel.test_wgmma_cpu import wgmma_kernel
    t = Float16 if dtype == "float16" else BFloat16
    A = torch.randn(64, 128, device="cuda").to(getattr(torch, dtype))
    B = torch.randn(n, 128, device="cuda").to(getattr(torch, dtype))
    C = torch.full((64, n), float("nan"), device="cuda")
    mma = moye.make_tiled_mma(moye.wgmma_op(n, t, t, Float32))
    wgmma_kernel[1, 128](A, B, C, gmma_smem_layout(t, "K", swizzle, (64, 64)),
                         gmma_smem_layout(t, "K", swizzle, (n, 64)), mma, 2, "")
    torch.cuda.synchronize()
    assert rel_error(torch, C, A, B) < 1e-3


def test_sass_has_hgmma(torch, tmp_path):
    from moye.examples import wgmma_matmul
    from moye.kernel.frontend import BACKENDS
    cuobjdump = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(cuobjdump):
        pytest.skip("no cuobjdump")
    A = torch.randn(128, 128, device="cuda").half()
    load_a, load_b, mma = wgmma_matmul.tiles(A, A, 128)
    kernel = wgmma_matmul.wgmma_matmul_kernel.trace(torch.empty(128, 128, device="cuda"), load_a,
                                                    load_b, mma, 2, block=128)[0]
    exe = BACKENDS["cuda"].compile(kernel, (128, 1, 1))
    path = tmp_path / "wgmma_matmul.cubin"
    path.write_bytes(exe.cubin)
    sass = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True).stdout
    print("\n".join(line for line in sass.splitlines() if "GMMA" in line or "LDL" in line
                    or "STL" in line))
    assert "HGMMA.64x128x16.F32" in sass, sass

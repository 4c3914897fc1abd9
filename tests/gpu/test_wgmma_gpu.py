"""wgmma on a Hopper GPU against torch: the wgmma_matmul example at every
tile width (outputs poisoned, every element checked), gemm with a wgmma
TiledMMA for every swizzle of the GMMA layouts and bf16 (the kernel of
tests/kernel/test_wgmma_cpu.py), and HGMMA in the example's SASS."""
import os
import shutil
import subprocess

import pytest

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
    from tests.kernel.test_wgmma_cpu import wgmma_ab_kernel, wgmma_case
    t = Float16 if dtype == "float16" else BFloat16
    _, args, K = wgmma_case(t, t, Float32, n, swizzle=swizzle)      # (64, n, 128)
    A = torch.randn(64, K, device="cuda").to(getattr(torch, dtype))
    B = torch.randn(n, K, device="cuda").to(getattr(torch, dtype))
    C = torch.full((64, n), float("nan"), device="cuda")
    wgmma_ab_kernel[1, 128](A, B, C, *args)
    torch.cuda.synchronize()
    assert rel_error(torch, C, A, B) < 1e-3


def test_sass_has_hgmma(torch, tmp_path):
    from moye.examples import wgmma_matmul
    from moye.compiler.frontend import BACKENDS
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


# -- RS, MN-major, tf32, fp8, f16 accumulators: the kernels of tests/kernel/test_wgmma_cpu.py --
def run_case(torch, a_name, b_name, c_name, n, **kw):
    """The relative error of C (64, n) computed on the GPU against A * B^T in
    float64 (inputs as the tensor cores read them)."""
    import ml_dtypes
    import numpy as np

    from moye import types as T
    from moye.atom.mma import round_inputs
    from tests.kernel.test_wgmma_cpu import wgmma_ab_kernel, wgmma_case
    a_type, b_type, c_type = (getattr(T, t) for t in (a_name, b_name, c_name))
    mma, args, K = wgmma_case(a_type, b_type, c_type, n, **kw)
    storage = {"Float16": torch.float16, "BFloat16": torch.bfloat16, "TFloat32": torch.float32,
               "Float32": torch.float32, "Float8E4M3": torch.float8_e4m3fn,
               "Float8E5M2": torch.float8_e5m2}
    host = {"Float8E4M3": ml_dtypes.float8_e4m3fn, "Float8E5M2": ml_dtypes.float8_e5m2,
            "BFloat16": ml_dtypes.bfloat16}

    def numpy(x, t):
        if t.name in host:
            return x.cpu().view(torch.uint8 if t.bits == 8 else torch.int16).numpy() \
                .view(host[t.name])
        return x.cpu().numpy()

    A = torch.randn(64, K, device="cuda").to(storage[a_name])
    B = torch.randn(n, K, device="cuda").to(storage[b_name])
    C = torch.full((64, n), float("nan"), device="cuda").to(storage[c_name])
    wgmma_ab_kernel[1, 128](A, B, C, *args)
    torch.cuda.synchronize()
    assert not C.isnan().any()
    want = round_inputs(numpy(A, a_type), a_type) @ round_inputs(numpy(B, b_type), b_type).T
    got = C.double().cpu().numpy()
    return np.abs(got - want).max() / np.abs(want).max()


# f32 accumulators: the hardware's sums differ from one rounding of the exact sum by a
# few ulps of f32; f16 accumulators round each partial sum
TOLERANCE = {"Float32": 1e-5, "Float16": 3e-3}
# fp8 inputs: Hopper adds fp8 products in an accumulator narrower than f32 before they reach
# the f32 registers (measured on the H100: 3e-4 to 6e-4 of max |C| at K = 64 and 128, where
# the CPU backend's exact emulation is within 1e-6), as DeepSeek-V3's report describes
FP8_F32 = 2e-3


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("a_major, b_major", [("MN", "K"), ("K", "MN"), ("MN", "MN")])
def test_gemm_mn_major(torch, a_major, b_major, swizzle):
    assert run_case(torch, "Float16", "Float16", "Float32", 64, a_major=a_major,
                    b_major=b_major, swizzle=swizzle) < TOLERANCE["Float32"]


@pytest.mark.parametrize("dtype, c_type, n", [("BFloat16", "Float32", 128),
                                              ("Float16", "Float16", 64)])
def test_gemm_mn_major_bf16_and_f16_accumulators(torch, dtype, c_type, n):
    assert run_case(torch, dtype, dtype, c_type, n, a_major="MN", b_major="MN", swizzle=64) < \
        TOLERANCE[c_type]


@pytest.mark.parametrize("dtype, c_type, b_major", [
    ("Float16", "Float32", "K"), ("BFloat16", "Float32", "K"), ("TFloat32", "Float32", "K"),
    ("Float16", "Float16", "K"), ("Float16", "Float32", "MN"), ("Float8E4M3", "Float32", "K"),
    ("Float8E5M2", "Float16", "K")])
def test_gemm_rs(torch, dtype, c_type, b_major):
    tol = FP8_F32 if dtype.startswith("Float8") and c_type == "Float32" else TOLERANCE[c_type]
    assert run_case(torch, dtype, dtype, c_type, 64, source="RS", b_major=b_major) < tol


@pytest.mark.parametrize("a_type, b_type", [("Float8E4M3", "Float8E4M3"),
                                            ("Float8E5M2", "Float8E5M2"),
                                            ("Float8E4M3", "Float8E5M2")])
@pytest.mark.parametrize("c_type", ["Float32", "Float16"])
def test_gemm_fp8(torch, a_type, b_type, c_type):
    tol = FP8_F32 if c_type == "Float32" else TOLERANCE[c_type]
    assert run_case(torch, a_type, b_type, c_type, 128) < tol


@pytest.mark.parametrize("swizzle", [0, 32, 64])
def test_gemm_fp8_every_swizzle(torch, swizzle):
    assert run_case(torch, "Float8E4M3", "Float8E4M3", "Float32", 64, swizzle=swizzle) < FP8_F32


@pytest.mark.parametrize("dtype, c_type", [("TFloat32", "Float32"), ("Float16", "Float16")])
def test_gemm_tf32_and_f16_accumulators(torch, dtype, c_type):
    assert run_case(torch, dtype, dtype, c_type, 256, swizzle=128) < TOLERANCE[c_type]

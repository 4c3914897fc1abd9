"""The GEMM and tensor-core examples at sizes their tiles do not divide, on
the CPU backend against float64: operands inside NaN-padded buffers (a read
outside A or B, or a k-residue not zero-filled, poisons the result), D
NaN-poisoned inside a padded buffer whose padding must stay NaN. Bad
shapes raise a MoyeError naming the extent. Compile-only: the predicated
GEMM has no spills."""
import re

import ml_dtypes
import numpy as np
import pytest

from moye.backend.cpu import race_checking
from moye.errors import MoyeError
from moye.examples import gemm, tensor_core_matmul
from moye.examples._common import rel_error
from moye import ir
from moye.backend.cuda import codegen
from moye.backend.cuda.float16 import PRELUDE

rng = np.random.default_rng(17)


def padded(rows, cols, dtype, pad=(3, 8)):
    """A random (rows, cols) view into a NaN buffer larger by `pad`."""
    buf = np.full((rows + pad[0], cols + pad[1]), np.nan, dtype)
    buf[:rows, :cols] = rng.standard_normal((rows, cols))
    return buf[:rows, :cols]


def operand(rows, K, major, dtype):
    """(rows, K), K-major (row-major) or the transposed view of a (K, rows)."""
    return padded(rows, K, dtype) if major == "K" else padded(K, rows, dtype).T


CASES = [  # M, N, K, A major, B major
    (100, 72, 40, "K", "K"),
    (129, 130, 72, "K", "K"),          # 2x2 blocks, 3 k-tiles, all of them ragged
    (136, 77, 40, "MN", "K"),          # N odd: the epilogue stores element by element
    (104, 72, 37, "MN", "MN"),         # K odd: allowed when both operands are M/N-major
    (64, 48, 24, "K", "MN"),           # K below one k-tile
]


@pytest.mark.parametrize("M, N, K, a_major, b_major", CASES)
def test_gemm_at_sizes_the_tiles_do_not_divide(M, N, K, a_major, b_major):
    dtype = np.float16
    A, B = operand(M, K, a_major, dtype), operand(N, K, b_major, dtype)
    C = padded(M, N, dtype)
    D = np.full((M + 3, N + 8), np.nan, dtype)
    gemm.launch(A, B, D[:M, :N], C, 0.5, -1.5)
    ref = 0.5 * (A.astype(np.float64) @ B.astype(np.float64).T) - 1.5 * C.astype(np.float64)
    assert rel_error(D[:M, :N], ref) < 2e-3
    assert np.isnan(D[M:]).all() and np.isnan(D[:, N:]).all()


def test_gemm_residue_race_checked_in_bfloat16_without_c():
    M, N, K = 72, 40, 56
    A, B = operand(M, K, "K", ml_dtypes.bfloat16), operand(N, K, "MN", ml_dtypes.bfloat16)
    D = np.full((M, N), np.nan, ml_dtypes.bfloat16)
    with race_checking():
        gemm.launch(A, B, D, alpha=1.25)
    ref = 1.25 * (A.astype(np.float64) @ B.astype(np.float64).T)
    assert rel_error(D, ref) < 1e-2


def test_divisible_shapes_run_the_unpredicated_kernel():
    args, _ = gemm.make_config("Float16")
    assert args[-2] is False                                   # residue
    A, B = operand(128, 64, "K", np.float16), operand(128, 64, "K", np.float16)
    D = np.full((128, 128), np.nan, np.float16)
    gemm.launch(A, B, D)
    assert rel_error(D, A.astype(np.float64) @ B.astype(np.float64).T) < 2e-3


@pytest.mark.parametrize("M, N, K, a_major, b_major, message", [
    (64, 64, 36, "K", "K", r"K = 36 must be a multiple of 8 because A is K-major"),
    (100, 64, 32, "MN", "K", r"M = 100 must be a multiple of 8 because A is M-major"),
    (64, 60, 37, "MN", "MN", r"N = 60 must be a multiple of 8 because B is N-major"),
])
def test_gemm_names_an_extent_that_is_not_a_multiple_of_the_vector(M, N, K, a_major, b_major,
                                                                    message):
    A, B = operand(M, K, a_major, np.float16), operand(N, K, b_major, np.float16)
    with pytest.raises(MoyeError, match=message):
        gemm.launch(A, B, np.zeros((M, N), np.float16))


def test_gemm_names_mismatched_shapes():
    A, B = operand(64, 32, "K", np.float16), operand(64, 40, "K", np.float16)
    with pytest.raises(MoyeError, match=r"A is 64x32 and B is 64x40"):
        gemm.launch(A, B, np.zeros((64, 64), np.float16))
    B = operand(64, 32, "K", np.float16)
    with pytest.raises(MoyeError, match=r"D has shape \(64, 63\); expected \(M, N\) = \(64, 64\)"):
        gemm.launch(A, B, np.zeros((64, 63), np.float16))


@pytest.mark.parametrize("variant", list(tensor_core_matmul.VARIANTS))
@pytest.mark.parametrize("M, N, K", [(100, 72, 40), (65, 130, 24)])
def test_tensor_core_matmul_at_sizes_the_tiles_do_not_divide(variant, M, N, K):
    dtype = np.float32 if variant == "tf32" else np.float16
    A, B = padded(M, K, dtype), padded(N, K, dtype)
    if variant == "tf32":                   # exact in tf32: only the accumulation rounds
        A[...] = (A.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
        B[...] = (B.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    C = np.full((N + 8, M + 3), np.nan, np.float32).T                 # column-major (M, N)
    tensor_core_matmul.launch(variant, A, B, C[:M, :N])
    assert rel_error(C[:M, :N], A.astype(np.float64) @ B.astype(np.float64).T) < 1e-5
    assert np.isnan(C[M:]).all() and np.isnan(C[:, N:]).all()


def test_tensor_core_matmul_names_k():
    A = np.zeros((64, 42), np.float32)
    with pytest.raises(MoyeError, match="K = 42 must be a multiple of 4"):
        tensor_core_matmul.launch("tf32", A, A, np.zeros((64, 64), np.float32))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("a_major, d_vector", [("K", 8), ("MN", 1)])
def test_predicated_gemm_compiles_without_spills(a_major, d_vector, arch):
    from moye.backend.cuda import nvrtc
    from moye.compiler.frontend import BACKENDS
    args, threads = gemm.make_config("Float16", a_major, "K", residue=True, d_vector=d_vector)
    A = np.ones((256, 128), np.float16) if a_major == "K" else np.ones((128, 256), np.float16).T
    D = np.zeros((256, 256), np.float16)
    kernel, _, _ = gemm.gemm_kernel.trace(A, np.ones((256, 128), np.float16), D, D, 1.0, 0.0,
                                          *args, block=threads)
    source = BACKENDS["cuda"].source(kernel, (threads, 1, 1))
    assert 'cp.async.cg.shared.global [%0], [%1], 16, %2;' in source
    module = nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], arch,
                                options=("--ptxas-options=-v",))
    log = module.log or ""
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log
    assert int(re.search(r"Used (\d+) registers", log).group(1)) <= 255, log


def test_fused_epilogue_stays_one_loop():
    """The epilogue's 128 accumulators of a thread pass through one C++ loop
    that NVRTC unrolls (C read under a predicate, alpha, beta), not 128
    copies of its body: the kernel stays near a thousand lines."""
    args, threads = gemm.make_config("Float16", "K", "K")
    A, D = np.ones((256, 128), np.float16), np.zeros((256, 256), np.float16)
    kernel, _, _ = gemm.gemm_kernel.trace(A, A, D, D, 1.0, 0.0, *args, block=threads)
    source = codegen.generate(kernel, threads).removeprefix(PRELUDE)     # the kernel's own
    assert len(source.splitlines()) <= 1100, len(source.splitlines())
    loops = re.findall(r"#pragma unroll\n  for \(int (i_\d+) = 0; \1 < (\d+);", source)
    assert [n for _, n in loops][-1] == "128", loops
    assert len(re.findall(r"p_C_\d+\[", source)) == 1          # C read at one site


# -- on a GPU (skipped without one) ---------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("M, N, K, a_major, b_major", CASES + [
    (1000, 1000, 1000, "K", "K"), (1000, 1000, 1000, "MN", "MN"),
    (4095, 4097, 4104, "K", "K"), (129, 4096, 8, "K", "K")])
def test_gemm_residue_on_the_gpu(torch, M, N, K, a_major, b_major):
    def operand_gpu(rows, major):
        if major == "K":
            return torch.randn(rows, K, device="cuda", dtype=torch.float16)
        return torch.randn(K, rows, device="cuda", dtype=torch.float16).t()
    A, B = operand_gpu(M, a_major), operand_gpu(N, b_major)
    C = torch.randn(M, N, device="cuda", dtype=torch.float16)
    D = torch.full((M + 3, N + 8), float("nan"), device="cuda", dtype=torch.float16)
    gemm.launch(A, B, D[:M, :N], C, 0.5, -1.5)
    torch.cuda.synchronize()
    ref = 0.5 * (A.double() @ B.double().t()) - 1.5 * C.double()
    assert rel_error(D[:M, :N].cpu().numpy(), ref.cpu().numpy()) < 2e-3
    assert torch.isnan(D[M:]).all() and torch.isnan(D[:, N:]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", list(tensor_core_matmul.VARIANTS))
def test_tensor_core_matmul_residue_on_the_gpu(torch, variant):
    M, N, K = 1000, 700, 200
    dt = torch.float32 if variant == "tf32" else torch.float16
    A = torch.randn(M, K, device="cuda").to(dt)
    B = torch.randn(N, K, device="cuda").to(dt)
    C = torch.full((N, M), float("nan"), device="cuda").t()
    tensor_core_matmul.launch(variant, A, B, C)
    torch.cuda.synchronize()
    ref = A.double() @ B.double().t()
    assert rel_error(C.cpu().numpy(), ref.cpu().numpy()) < 1e-3

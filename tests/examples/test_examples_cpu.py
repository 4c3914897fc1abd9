"""Every example kernel of moye/examples/ on the CPU backend, at small sizes,
against NumPy: exactly for the copies, against float64 for the matmuls.
Each kernel runs twice: blocks batched side by side, and race-checked (one
block at a time, shared-memory races and unretired cp.async reported).

Covered elsewhere, not repeated here: copy_kernel's plain and padded
variants, transpose with (32, 32) tiles, matmul_smem and tiled_matmul
(tests/kernel/test_run_cpu.py); cpu_matmul in float64
(tests/examples/test_cpu_matmul.py).
"""
import ml_dtypes
import numpy as np
import pytest

from moye.backend.cpu import race_checking
from moye.examples import copy_kernel, cpu_matmul, gemm, tensor_core_matmul, transpose
from moye.examples._common import rel_error

rng = np.random.default_rng(11)


def colmajor(shape, dtype=np.float32):
    return np.asfortranarray(rng.standard_normal(shape).astype(dtype))


def poisoned(shape, dtype=np.float32, order="F"):
    return np.full(shape, np.nan, dtype, order=order)


@pytest.fixture(params=["batched", "race_checked"])
def mode(request):
    """Run the test's kernels with blocks batched, or race-checked."""
    if request.param == "batched":
        yield
    else:
        with race_checking():
            yield


def test_copy_kernel_16_byte_vectors(mode):
    src, dst = colmajor((256, 128)), poisoned((256, 128))       # 2x2 blocks of (128, 64)
    copy_kernel.launch_vec(dst, src)
    np.testing.assert_array_equal(dst, src)


@pytest.mark.parametrize("tile, diagonal", [((32, 64), False), ((32, 32), True)])
def test_transpose_other_tiles_and_diagonal_order(mode, tile, diagonal):
    src = colmajor((64, 128) if not diagonal else (96, 96))
    dst = poisoned(src.shape[::-1])
    transpose.launch(dst, src, tile, diagonal)
    np.testing.assert_array_equal(dst, src.T)


def test_cpu_matmul_in_float32():
    A, B = colmajor((32, 24)), colmajor((16, 24))
    C = np.zeros((32, 16), np.float32, order="F")
    cpu_matmul.matmul(A, B, C)
    assert rel_error(C, A.astype(np.float64) @ B.astype(np.float64).T) < 1e-6


def tf32(x):
    """x with the low 13 mantissa bits cleared: exact as the tensor cores read it."""
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("variant", list(tensor_core_matmul.VARIANTS))
def test_tensor_core_matmul(mode, variant):
    dtype = tensor_core_matmul.VARIANTS[variant][2]
    M, N, K = 128, 128, 64                      # 2x2 blocks of 64x64, 4 or 2 k-tiles
    A = rng.standard_normal((M, K)).astype(dtype)           # K-major, as torch's row-major
    B = rng.standard_normal((N, K)).astype(dtype)
    if variant == "tf32":
        A, B = tf32(A), tf32(B)
    C = poisoned((M, N))
    tensor_core_matmul.launch(variant, A, B, C)
    # inputs exact in the MMA's type: only the fp32 accumulation rounds
    assert rel_error(C, A.astype(np.float64) @ B.astype(np.float64).T) < 1e-5


def gemm_numpy(A, B, D, C, alpha, beta):
    """gemm.launch on NumPy arrays (the CPU backend)."""
    gemm.launch(A, B, D, C, alpha=alpha, beta=beta)


def operand(rows, K, major, dtype):
    return rng.standard_normal((rows, K)).astype(dtype) if major == "K" else \
        rng.standard_normal((K, rows)).astype(dtype).T


# unit roundoff of each type: D's own rounding dominates the error
UNIT_ROUNDOFF = {np.float16: 2.0 ** -11, ml_dtypes.bfloat16: 2.0 ** -8}


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("a_major, b_major", [("K", "K"), ("MN", "K"), ("K", "MN"),
                                              ("MN", "MN")])
def test_gemm(mode, dtype, a_major, b_major):
    M, N, K = 128, 128, 64
    A, B = operand(M, K, a_major, dtype), operand(N, K, b_major, dtype)
    C = rng.standard_normal((M, N)).astype(dtype)
    D = poisoned((M, N), dtype, order="C")
    gemm_numpy(A, B, D, C, 0.5, -1.5)
    ref = 0.5 * (A.astype(np.float64) @ B.astype(np.float64).T) - 1.5 * C.astype(np.float64)
    assert rel_error(D, ref) < UNIT_ROUNDOFF[dtype]


@pytest.mark.parametrize("K", [32, 96])
def test_gemm_several_blocks_short_k_and_no_c(mode, K):
    """2x2 blocks; fewer k-tiles (1, 3) than the pipeline's 4 stages; beta = 0
    with C = D poisoned, so the branch that reads C must be skipped."""
    M, N = 256, 256
    A, B = operand(M, K, "MN", np.float16), operand(N, K, "K", np.float16)
    D = poisoned((M, N), np.float16, order="C")
    gemm_numpy(A, B, D, D, 1.25, 0.0)
    ref = 1.25 * (A.astype(np.float64) @ B.astype(np.float64).T)
    assert rel_error(D, ref) < UNIT_ROUNDOFF[np.float16]


def test_demo_runs_tiled_matmul_on_the_cpu_backend(capsys):
    from moye.examples import demo
    demo.main()
    out = capsys.readouterr().out
    assert "float32 on the CPU backend (no GPU): relative error" in out

"""The warp-specialized Hopper GEMM on the CPU backend: producer and consumer
warpgroups run as separate contexts that meet at mbarriers and named
barriers; TMA, wgmma and stmatrix are emulated. Ragged shapes, fewer blocks
than tiles (the persistent loop and the pipeline's phases wrap), clusters
of 2 with B multicast; against float64, plain and race-checked."""
import ml_dtypes
import numpy as np
import pytest

from moye.backend.cpu import race_checking
from moye.examples import hopper_gemm as hg

rng = np.random.default_rng(11)


def operands(M, N, K, dtype):
    A = rng.standard_normal((M, K)).astype(dtype)
    B = rng.standard_normal((N, K)).astype(dtype)
    C = np.full((M, N), np.nan, dtype)
    return A, B, C


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("M, N, K, blocks, cluster", [(128, 256, 64, 1, 1),
                                                      (200, 296, 328, 2, 1),
                                                      (300, 264, 136, 2, 2),
                                                      (70, 45, 37, 1, 1)])   # padded copies
def test_hopper_gemm_on_the_cpu_backend(dtype, M, N, K, blocks, cluster):
    A, B, C = operands(M, N, K, dtype)
    hg.matmul(C, A, B, blocks=blocks, cluster=cluster)
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    err = np.linalg.norm(C.astype(np.float64) - ref) / np.linalg.norm(ref)
    assert err < (2e-3 if dtype is np.float16 else 1e-2), err


def test_hopper_gemm_is_race_free():
    A, B, C = operands(136, 256, 200, np.float16)
    with race_checking():
        hg.matmul(C, A, B, blocks=1)
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < 2e-3

"""The SIMT SGEMM example on the CPU backend, at small sizes, against NumPy
in float64; and its CUDA source for sm_90a: 16-byte shared and global
accesses, no dynamic register indexing."""
import re

import numpy as np
import pytest

from moye.backend.cuda import codegen
from moye.examples import sgemm


def run_cpu(M, N, K, seed=0, **config):
    gen = np.random.default_rng(seed)
    A = np.asfortranarray(gen.standard_normal((M, K)).astype(np.float32))
    B = np.asfortranarray(gen.standard_normal((N, K)).astype(np.float32))
    C = np.asfortranarray(np.full((M, N), np.nan, np.float32))
    args, threads = sgemm.make_config(**config)
    bM, bN = config.get("bM", 128), config.get("bN", 128)
    sgemm.sgemm_kernel[(M // bM, N // bN), threads](A, B, C, *args, backend="cpu")
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    return C, ref


def rel_error(C, ref):
    return np.linalg.norm(C - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("M,N,K,config", [
    (128, 128, 128, {}),                                # 4 k-tiles through 3 stages
    (256, 128, 96, {}),                                 # non-square, 3 k-tiles
    (256, 128, 40, {"bK": 8}),                          # bK = 8, 5 k-tiles
    (128, 256, 32, {"bK": 16, "stages": 2}),            # two stages, two blocks along N
    (128, 256, 48, {"bN": 256, "bK": 16, "stages": 4}),  # 8x16 per thread, more stages than tiles
    (128, 128, 32, {"warp": (8, 4)}),                   # one k-tile; the other warp shape
])
def test_sgemm_matches_numpy(M, N, K, config):
    C, ref = run_cpu(M, N, K, **config)
    assert not np.isnan(C).any()
    assert rel_error(C, ref) < 1e-5


def test_launch_checks_the_tile():
    with pytest.raises(ValueError, match="multiples of the tile"):
        sgemm.launch(np.zeros((100, 8), np.float32), np.zeros((128, 8), np.float32),
                     np.zeros((100, 128), np.float32))


def test_cuda_source_moves_16_byte_vectors():
    args, threads = sgemm.make_config()
    A = np.asfortranarray(np.ones((256, 64), np.float32))
    C = np.asfortranarray(np.ones((256, 256), np.float32))
    kernel, _, _ = sgemm.sgemm_kernel.trace(A, A, C, *args, block=threads)
    src = codegen.generate(kernel, threads)
    assert len(src.splitlines()) <= 1500
    # the k-block loop stays one loop that NVRTC unrolls; each k-block loads the next
    # one's fragments: two 16-byte loads of A and two of B (the last k-block from the
    # next stage, the others from this one: the two branches)
    head = "#pragma unroll\n    for (int i_"
    loop = src[src.index(head):]
    assert re.match(r"#pragma unroll\n    for \(int (i_\d+) = 0; \1 < 32; \1 \+= 1\)", loop)
    body = loop[:loop.index("\n    }\n")]
    assert len(re.findall(r"uint4 v\d+ = \*reinterpret_cast<uint4\*>\(&smem", body)) == 2 * 4
    assert not re.search(r"const float v\d+ = smem", body)          # no scalar shared loads
    assert "cp.async.cg.shared.global [%0], [%1], 16" in loop
    # the epilogue: 16 stores of 4 floats to C
    assert len(re.findall(r"\*reinterpret_cast<uint4\*>\(&p_C_\w+\[", src)) == 16

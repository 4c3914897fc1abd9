"""Seeds 000/001 and MoYe's async and tensor-core manuals: the vectorized
copies, the cp.async matmuls (plain, overlapped, double-buffered) and the
double-buffered TF32 tensor-core matmul, on the CPU backend at small sizes
against NumPy. Random data, outputs poisoned with NaN, every element
checked."""
import numpy as np
import pytest

from moye.backend.cpu import race_checking
from moye.examples import async_matmul, tensor_core_double_buffer, vectorized_copy

rng = np.random.default_rng(2024)


def colmajor(shape, fill=None):
    a = np.asfortranarray(rng.standard_normal(shape).astype(np.float32))
    if fill is not None:
        a[...] = fill
    return a


@pytest.mark.parametrize("name", list(vectorized_copy.COPIES))
def test_vectorized_copies(name):
    src, dst = colmajor((256, 128)), colmajor((256, 128), np.nan)
    vectorized_copy.launch(name, dst, src)
    np.testing.assert_array_equal(dst, src)


def test_vectorized_copies_use_the_atom_width():
    src, dst = colmajor((128, 64)), colmajor((128, 64), np.nan)
    for name, vector in (("float64 (4,1)", "uint64_t"), ("float64 (2,1)", "uint64_t"),
                         ("uint128 (4,1)", "uint4")):
        tiled_copy = vectorized_copy.COPIES[name]
        src_text = vectorized_copy.copy_vec_kernel.cuda_source(dst, src, tiled_copy,
                                                               vectorized_copy.BLOCK, block=256)
        loads = [ln for ln in src_text.splitlines() if "= *reinterpret_cast" in ln]
        assert loads and all(f"<{vector}*>" in ln for ln in loads), name
        # 128x64 floats over 256 threads: 32 each, in 8- or 16-byte pieces, loaded and stored
        assert len(loads) == 2 * 32 * 4 // (8 if vector == "uint64_t" else 16)


@pytest.mark.parametrize("variant", list(async_matmul.KERNELS))
def test_async_matmuls(variant):
    # three k-tiles (the last one has no successor to prefetch), two blocks along N
    A, B, C = colmajor((128, 24)), colmajor((256, 24)), colmajor((128, 256), np.nan)
    async_matmul.launch(variant, A, B, C)
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    np.testing.assert_allclose(C, ref, rtol=1e-5, atol=1e-5)


def test_double_buffer_swaps_in_a_run_time_loop():
    """The seed's swap of smem_read and smem_write is a loop-carried value of the
    k_tile loop, merged out of the `if` that issues the next tile's copy."""
    A, B, C = colmajor((128, 8)), colmajor((128, 8)), colmajor((128, 128))
    args = async_matmul.make_config("double")
    src = async_matmul.double_buffer_kernel.cuda_source(
        A, args[0], args[1], B, args[2], args[3], C, args[4], block=256)
    assert "for (int " in src and "smem_read, smem_write = smem_write, smem_read" in src
    assert src.count("cp.async.ca.shared.global") == 8      # 2 x (A, B) x 2 atoms each


def tf32(x):
    """x rounded to TF32 as mma.sync reads it: the low 13 bits dropped."""
    return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def test_tensor_core_double_buffer():
    M, N, K = 128, 256, 48                           # three k-tiles of 16, two blocks
    A = colmajor((M, K))                              # M-major
    B = np.ascontiguousarray(rng.standard_normal((N, K)).astype(np.float32))   # K-major
    C = colmajor((M, N), np.nan)
    tensor_core_double_buffer.launch(A, B, C)
    exact = A.astype(np.float64) @ B.astype(np.float64).T
    np.testing.assert_allclose(C, exact, rtol=1e-2, atol=5e-2)
    assert np.linalg.norm(C - exact) / np.linalg.norm(exact) < 1e-3
    # against the TF32-rounded inputs the only error left is float32 accumulation
    ref = tf32(A).astype(np.float64) @ tf32(B).astype(np.float64).T
    np.testing.assert_allclose(C, ref, rtol=1e-5, atol=1e-5)


def test_mains_without_a_gpu(capsys, monkeypatch):
    from moye.examples import _common
    monkeypatch.setattr(_common, "torch_cuda", lambda: None)
    vectorized_copy.main()
    async_matmul.main()
    tensor_core_double_buffer.main()
    out = capsys.readouterr().out
    assert out.count("no CUDA device") == 2 + len(async_matmul.KERNELS)


@pytest.mark.parametrize("variant", list(async_matmul.KERNELS))
def test_async_matmuls_have_no_shared_memory_races(variant):
    """cp.async writes into one stage while other threads read the other: the
    barriers must separate every write from the reads around it."""
    A, B, C = colmajor((128, 24)), colmajor((128, 24)), colmajor((128, 128), np.nan)
    with race_checking():
        async_matmul.launch(variant, A, B, C)
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    np.testing.assert_allclose(C, ref, rtol=1e-5, atol=1e-5)


def test_tensor_core_double_buffer_has_no_shared_memory_races():
    A = colmajor((128, 48))
    B = np.ascontiguousarray(rng.standard_normal((128, 48)).astype(np.float32))
    C = colmajor((128, 128), np.nan)
    with race_checking():
        tensor_core_double_buffer.launch(A, B, C)
    ref = tf32(A).astype(np.float64) @ tf32(B).astype(np.float64).T
    np.testing.assert_allclose(C, ref, rtol=1e-5, atol=1e-5)

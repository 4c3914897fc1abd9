"""wgmma in kernels on the CPU backend: the descriptors moye derives from
GMMA layouts, decoded as the PTX ISA defines them, address the layouts'
own elements; gemm with a wgmma TiledMMA against NumPy for every swizzle
and N, bf16, tf32 and f16 accumulators; the wgmma_matmul example
(TMA, mbarrier phases); and the errors."""
import contextlib

import ml_dtypes
import numpy as np
import pytest

import moye
from moye import (BFloat16, Float16, Float32, Layout, MoyeError, MoYeArray, TFloat32,
                  composition, gemm, size)
from moye.layout.swizzle import ComposedLayout
from moye.atom.mma import round_inputs
from moye.atom.arch.sm90 import descriptor_bits, gmma_descriptor, gmma_smem_layout
from moye.atom.arch.tma import layout_offsets
from moye.backend.cpu import race_checking
from moye.backend.cpu.wgmma import tile_bytes
from moye.examples import wgmma_matmul

rng = np.random.default_rng(90)
NUMPY = {"Float16": np.float16, "BFloat16": ml_dtypes.bfloat16}


@pytest.fixture(params=["batched", "race_checked"])
def mode(request):
    with race_checking() if request.param == "race_checked" else contextlib.nullcontext():
        yield


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("rows", [64, 128, 256])
def test_decoded_descriptors_address_the_layout(swizzle, rows):
    """Each k-step's descriptor, decoded by the CPU's reading of the ISA,
    reads exactly the elements the layout puts at those coordinates."""
    layout = gmma_smem_layout(Float16, "K", swizzle, (rows, 64))
    offsets = layout_offsets(layout, (rows, 64))
    composed = isinstance(layout, ComposedLayout)
    inner = layout.inner if composed else layout
    for step in range(4):
        at = inner(rows * 16 * step)                        # column 16 * step
        first = composition(inner, Layout((rows, 16), (1, rows)))
        sub = ComposedLayout(layout.outer, layout.offset + at, first) if composed else first
        start, lbo, sbo, width = gmma_descriptor(sub, Float16, rows, 16)
        assert width == (swizzle or 16)
        start += 0 if composed else at
        desc = descriptor_bits(lbo, sbo, width) | ((start * 2) >> 4)
        got = tile_bytes(desc, rows, 16, 2)[..., 0] // 2
        np.testing.assert_array_equal(got, offsets[:, 16 * step:16 * step + 16])


@pytest.mark.parametrize("layout, match", [
    (Layout((64, 64), (64, 1)), "with no swizzle it must be K-major in 8-row core matrices"),
    (Layout((64, 16), (1, 64)), "no wgmma descriptor reads"),                   # M-major
    (moye.composition(moye.Swizzle(2, 4, 3), Layout((64, 64), (64, 1))), "is swizzled by"),
])
def test_descriptor_errors(layout, match):
    with pytest.raises(MoyeError, match=match):
        gmma_descriptor(layout, Float16, 64, 16)


def test_smem_layout_errors():
    with pytest.raises(MoyeError, match="only K-major"):
        gmma_smem_layout(Float16, "MN", 128, (64, 64))
    with pytest.raises(MoyeError, match="k of 64"):
        gmma_smem_layout(Float16, "K", 128, (64, 32))


@moye.kernel
def wgmma_kernel(A, B, C, sA_layout, sB_layout, mma, k_tiles: moye.Constexpr,
                 fault: moye.Constexpr):
    """C = A * B^T for one (64, N) tile: the threads copy each (., 64)
    k-tile of A and B into shared memory, then one gemm."""
    sA = moye.shared_array(A.dtype, sA_layout, align=1024)
    sB = moye.shared_array(B.dtype, sB_layout, align=1024)
    tid = moye.thread_idx.x
    mA, mB = MoYeArray(A), MoYeArray(B)
    thr = mma.get_slice(tid)
    tCsA, tCsB = thr.partition_A(sA), thr.partition_B(sB)
    gC = moye.tile(MoYeArray(C), (64, size(sB_layout, 0)), (0, 0))
    tCgC = thr.partition_C(gC)
    acc = thr.partition_fragment_C(gC)
    other = thr.partition_fragment_C(gC)
    for i in range(size(acc)):
        acc[i] = 0.0
    for k in range(k_tiles):
        gA = moye.tile(mA, (64, 64), (0, k))
        gB = moye.tile(mB, (size(sB_layout, 0), 64), (0, k))
        for x, g in ((sA, gA), (sB, gB)):
            src = moye.parallelize(g, Layout((2, 64), (64, 1)), tid)
            dst = moye.parallelize(x, Layout((2, 64), (64, 1)), tid)
            for i in range(size(src)):
                dst[i] = src[i]
        moye.fence_proxy_async()            # generic-proxy writes, read by wgmma
        moye.sync_threads()
        if fault == "c":
            gemm(mma, acc, tCsA, tCsB, other)
        else:
            gemm(mma, acc, tCsA, tCsB, acc)
        moye.wgmma_wait(0)
        moye.sync_threads()
    moye.copyto(tCgC, acc)


def run_gemm(dtype, n, swizzle, k_tiles=2):
    M, K = 64, 64 * k_tiles
    A = rng.standard_normal((M, K)).astype(NUMPY[dtype.name])
    B = rng.standard_normal((n, K)).astype(NUMPY[dtype.name])
    C = np.full((M, n), np.nan, np.float32)
    mma = moye.make_tiled_mma(moye.wgmma_op(n, dtype, dtype, Float32))
    wgmma_kernel[1, 128](A, B, C, gmma_smem_layout(dtype, "K", swizzle, (64, 64)),
                         gmma_smem_layout(dtype, "K", swizzle, (n, 64)), mma, k_tiles, "")
    want = A.astype(np.float64) @ B.astype(np.float64).T
    return np.abs(C - want).max() / np.abs(want).max()


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("n", [64, 128, 256])
def test_gemm_every_swizzle_and_n(swizzle, n):
    assert run_gemm(Float16, n, swizzle) < 1e-6


def test_gemm_tfloat32_reads_the_inputs_truncated():
    n = 128
    A = rng.standard_normal((64, 64)).astype(np.float32)
    B = rng.standard_normal((n, 64)).astype(np.float32)
    C = np.full((64, n), np.nan, np.float32)
    mma = moye.make_tiled_mma(moye.wgmma_op(n, TFloat32, TFloat32, Float32))
    wgmma_kernel[1, 128](A, B, C, gmma_smem_layout(TFloat32, "K", 128, (64, 64)),
                         gmma_smem_layout(TFloat32, "K", 128, (n, 64)), mma, 1, "")
    want = round_inputs(A, TFloat32).astype(np.float64) @ \
        round_inputs(B, TFloat32).astype(np.float64).T
    assert np.abs(C - want).max() / np.abs(want).max() < 1e-6


def test_gemm_float16_accumulators():
    n = 64
    A = rng.standard_normal((64, 128)).astype(np.float16)
    B = rng.standard_normal((n, 128)).astype(np.float16)
    C = np.full((64, n), np.nan, np.float16)
    mma = moye.make_tiled_mma(moye.wgmma_op(n, Float16, Float16, Float16))
    wgmma_kernel[1, 128](A, B, C, gmma_smem_layout(Float16, "K", 64, (64, 64)),
                         gmma_smem_layout(Float16, "K", 64, (n, 64)), mma, 2, "")
    want = A.astype(np.float64) @ B.astype(np.float64).T
    assert np.abs(C - want).max() / np.abs(want).max() < 2e-3


def test_gemm_bfloat16_race_checked():
    with race_checking():
        assert run_gemm(BFloat16, 128, 128) < 1e-6


@pytest.mark.parametrize("M, N, K, bN", [(64, 64, 64, 64), (128, 256, 192, 128),
                                         (192, 256, 128, 256)])
def test_wgmma_matmul_example(mode, M, N, K, bN):
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((N, K)).astype(np.float16)
    C = np.full((M, N), np.nan, np.float32)
    wgmma_matmul.matmul(C, A, B, bN)
    want = A.astype(np.float64) @ B.astype(np.float64).T
    assert np.abs(C - want).max() / np.abs(want).max() < 1e-3


def test_tracing_errors():
    A = np.ones((64, 64), np.float16)
    C = np.zeros((64, 64), np.float32)
    mma = moye.make_tiled_mma(moye.wgmma_op(64, Float16, Float16, Float32))
    good = gmma_smem_layout(Float16, "K", 128, (64, 64))
    with pytest.raises(MoyeError, match="accumulates into D in place"):
        wgmma_kernel.trace(A, A, C, good, good, mma, 1, "c", block=128)
    with pytest.raises(MoyeError, match=r"no wgmma descriptor reads .* \(A, block \(0,0\)\)"):
        wgmma_kernel.trace(A, A, C, Layout((64, 64), (64, 1)), good, mma, 1, "", block=128)


def test_sm90_without_a_is_refused():
    from moye.kernel.frontend import BACKENDS
    A = np.ones((64, 64), np.float16)
    load_a, load_b, mma = wgmma_matmul.tiles(A, A, 64)
    kernel = wgmma_matmul.wgmma_matmul_kernel.trace(np.zeros((64, 64), np.float32), load_a,
                                                    load_b, mma, 1, block=128)[0]
    with pytest.raises(MoyeError, match="needs the arch-specific target sm_90a, not sm_90"):
        BACKENDS["cuda"].compile_only(kernel, (128, 1, 1), "sm_90")

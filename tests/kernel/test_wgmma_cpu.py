"""wgmma in kernels on the CPU backend: the descriptors moye derives from
GMMA layouts, decoded as the PTX ISA defines them, address the layouts'
own elements; gemm with a wgmma TiledMMA against NumPy for every swizzle
and N, bf16, tf32 and f16 accumulators; the wgmma_matmul example
(TMA, mbarrier phases); and the errors."""
import contextlib
import re

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
    with pytest.raises(MoyeError, match="use 'K'"):
        gmma_smem_layout(Float16, "M", 128, (64, 64))
    with pytest.raises(MoyeError, match="k of 64"):
        gmma_smem_layout(Float16, "K", 128, (64, 32))
    with pytest.raises(MoyeError, match="rows must be a multiple of 64"):
        gmma_smem_layout(Float16, "MN", 128, (32, 64))


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("n", [64, 128, 256])
def test_gemm_every_swizzle_and_n(swizzle, n):
    assert run_case(Float16, Float16, Float32, n, swizzle=swizzle) < 1e-6


def test_gemm_tfloat32_reads_the_inputs_truncated():
    assert run_case(TFloat32, TFloat32, Float32, 128, swizzle=128, k_tiles=1) < 1e-6


def test_gemm_float16_accumulators():
    assert run_case(Float16, Float16, Float16, 64, swizzle=64) < 2e-3


def test_gemm_bfloat16_race_checked():
    with race_checking():
        assert run_case(BFloat16, BFloat16, Float32, 128, swizzle=128) < 1e-6


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
        wgmma_ab_kernel.trace(A, A, C, good, good, mma, 64, 1, False, "c", block=128)
    with pytest.raises(MoyeError, match=r"no wgmma descriptor reads .* \(A, block \(0,0\)\)"):
        wgmma_ab_kernel.trace(A, A, C, Layout((64, 64), (64, 1)), good, mma, 64, 1, False,
                              block=128)


def test_sm90_without_a_is_refused():
    from moye.compiler.frontend import BACKENDS
    A = np.ones((64, 64), np.float16)
    load_a, load_b, mma = wgmma_matmul.tiles(A, A, 64)
    kernel = wgmma_matmul.wgmma_matmul_kernel.trace(np.zeros((64, 64), np.float32), load_a,
                                                    load_b, mma, 1, block=128)[0]
    with pytest.raises(MoyeError, match="needs the arch-specific target sm_90a, not sm_90"):
        BACKENDS["cuda"].compile_only(kernel, (128, 1, 1), "sm_90")


# -- RS, MN-major, fp8 ---------------------------------------------------------------------
NUMPY.update({"Float8E4M3": ml_dtypes.float8_e4m3fn, "Float8E5M2": ml_dtypes.float8_e5m2,
              "TFloat32": np.float32, "Float32": np.float32})
FP8 = (moye.Float8E4M3, moye.Float8E5M2)


@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
@pytest.mark.parametrize("rows", [64, 128, 256])
def test_decoded_mn_major_descriptors_address_the_layout(swizzle, rows):
    """As above for MN-major tiles: the CPU decodes the descriptor with the
    ISA's MN-major canonical layouts (the transpose immediate set)."""
    layout = gmma_smem_layout(Float16, "MN", swizzle, (rows, 64))
    offsets = layout_offsets(layout, (rows, 64))
    composed = isinstance(layout, ComposedLayout)
    inner = layout.inner if composed else layout
    for step in range(4):
        at = inner(rows * 16 * step)
        first = composition(inner, Layout((rows, 16), (1, rows)))
        sub = ComposedLayout(layout.outer, layout.offset + at, first) if composed else first
        start, lbo, sbo, width = gmma_descriptor(sub, Float16, rows, 16, major="MN")
        start += 0 if composed else at
        desc = descriptor_bits(lbo, sbo, width) | ((start * 2) >> 4)
        got = tile_bytes(desc, rows, 16, 2, mn_major=True)[..., 0] // 2
        np.testing.assert_array_equal(got, offsets[:, 16 * step:16 * step + 16])


def test_mn_major_descriptor_fields():
    """LBO and SBO swap roles between MN-major layouts without and with a
    swizzle (CuTe: make_gmma_desc<Major::MN>)."""
    # no swizzle: SBO = 128 bytes along M (core matrices of 8 k-rows x 16 bytes), LBO = 8 k-rows
    assert gmma_descriptor(gmma_smem_layout(Float16, "MN", 0, (128, 16)), Float16, 128, 16,
                           major="MN") == (0, 2048, 128, 16)
    # 32-byte swizzle: LBO = 256 bytes to the next 16 rows of M, SBO = 8 k-rows of the 128 rows
    assert gmma_descriptor(gmma_smem_layout(Float16, "MN", 32, (128, 16)), Float16, 128, 16,
                           major="MN") == (0, 256, 2048, 32)
    with pytest.raises(MoyeError, match="no wgmma descriptor reads the MN-major"):
        gmma_descriptor(gmma_smem_layout(Float16, "K", 0, (64, 16)), Float16, 64, 16, major="MN")


@moye.kernel
def wgmma_ab_kernel(A, B, C, sA_layout, sB_layout, mma, bk: moye.Constexpr,
                    k_tiles: moye.Constexpr, rs: moye.Constexpr, fault: moye.Constexpr = ""):
    """C = A * B^T for one (64, N) tile, (., bk) k-tiles copied by the
    threads into shared tiles of any layout; with rs, A copied from
    shared memory into the thread's A fragment before each gemm; fault
    "c": a gemm whose C is not its D (refused)."""
    sA = moye.shared_array(A.dtype, sA_layout, align=1024)
    sB = moye.shared_array(B.dtype, sB_layout, align=1024)
    tid = moye.thread_idx.x
    mA, mB = MoYeArray(A), MoYeArray(B)
    thr = mma.get_slice(tid)
    tCsA, tCsB = thr.partition_A(sA), thr.partition_B(sB)
    tCrA = thr.partition_fragment_A(sA)
    gC = moye.tile(MoYeArray(C), (64, size(sB_layout, 0)), (0, 0))
    tCgC = thr.partition_C(gC)
    acc = thr.partition_fragment_C(gC)
    for i in range(size(acc)):
        acc[i] = 0.0
    for k in range(k_tiles):
        gA = moye.tile(mA, (64, bk), (0, k))
        gB = moye.tile(mB, (size(sB_layout, 0), bk), (0, k))
        for x, g in ((sA, gA), (sB, gB)):
            src = moye.parallelize(g, Layout((2, 64), (64, 1)), tid)
            dst = moye.parallelize(x, Layout((2, 64), (64, 1)), tid)
            for i in range(size(src)):
                dst[i] = src[i]
        moye.fence_proxy_async()
        moye.sync_threads()
        if rs:
            moye.copyto(tCrA, tCsA)
            gemm(mma, acc, tCrA, tCsB, acc)
        elif fault == "c":
            gemm(mma, acc, tCsA, tCsB, thr.partition_fragment_C(gC))
        else:
            gemm(mma, acc, tCsA, tCsB, acc)
        moye.wgmma_wait(0)
        moye.sync_threads()
    moye.copyto(tCgC, acc)


def wgmma_case(a_type, b_type, c_type, n, source="SS", a_major="K", b_major="K", swizzle=128,
               k_tiles=2):
    """(mma, kernel arguments but A, B, C) of one configuration, and K."""
    mma = moye.make_tiled_mma(moye.wgmma_op(n, a_type, b_type, c_type, source, a_major, b_major))
    bk = max(64, 128 // (a_type.bits // 8)) if swizzle else 64
    sA = gmma_smem_layout(a_type, a_major, swizzle, (64, bk))
    sB = gmma_smem_layout(b_type, b_major, swizzle, (n, bk))
    return mma, (sA, sB, mma, bk, k_tiles, source == "RS"), bk * k_tiles


def host_inputs(a_type, b_type, n, K):
    A = rng.standard_normal((64, K)).astype(NUMPY[a_type.name])
    B = rng.standard_normal((n, K)).astype(NUMPY[b_type.name])
    return A, B


def run_case(a_type, b_type, c_type, n, **kw):
    """The relative error of C (64, n) against A * B^T in float64 (inputs as
    the tensor cores read them)."""
    mma, args, K = wgmma_case(a_type, b_type, c_type, n, **kw)
    A, B = host_inputs(a_type, b_type, n, K)
    C = np.full((64, n), np.nan, NUMPY[c_type.name])
    wgmma_ab_kernel[1, 128](A, B, C, *args)
    assert not np.isnan(C).any()
    want = round_inputs(A, a_type) @ round_inputs(B, b_type).T
    return np.abs(C.astype(np.float64) - want).max() / np.abs(want).max()


# f32 accumulators: exact products, one rounding per wgmma; f16 accumulators round each sum
TOLERANCE = {"Float32": 1e-6, "Float16": 2e-3}

MN_CASES = [(a, b, s) for a, b in (("MN", "K"), ("K", "MN"), ("MN", "MN"))
            for s in (0, 32, 64, 128)]


@pytest.mark.parametrize("a_major, b_major, swizzle", MN_CASES)
def test_gemm_mn_major(a_major, b_major, swizzle):
    assert run_case(Float16, Float16, Float32, 64, a_major=a_major, b_major=b_major,
                    swizzle=swizzle) < 1e-6


@pytest.mark.parametrize("dtype, c_type, n", [(BFloat16, Float32, 128), (Float16, Float16, 64)])
def test_gemm_mn_major_bf16_and_f16_accumulators(dtype, c_type, n):
    assert run_case(dtype, dtype, c_type, n, a_major="MN", b_major="MN", swizzle=64) < \
        TOLERANCE[c_type.name]


@pytest.mark.parametrize("dtype, c_type, b_major", [
    (Float16, Float32, "K"), (BFloat16, Float32, "K"), (TFloat32, Float32, "K"),
    (Float16, Float16, "K"), (Float16, Float32, "MN"), (moye.Float8E4M3, Float32, "K"),
    (moye.Float8E5M2, Float16, "K")])
def test_gemm_rs(dtype, c_type, b_major):
    """A from registers: each thread's A fragment, copied from shared memory."""
    assert run_case(dtype, dtype, c_type, 64, source="RS", b_major=b_major) < \
        TOLERANCE[c_type.name]


@pytest.mark.parametrize("a_type, b_type", [(FP8[0], FP8[0]), (FP8[1], FP8[1]),
                                            (FP8[0], FP8[1])])
@pytest.mark.parametrize("c_type", [Float32, Float16])
def test_gemm_fp8(a_type, b_type, c_type):
    assert run_case(a_type, b_type, c_type, 128) < TOLERANCE[c_type.name]


@pytest.mark.parametrize("swizzle", [0, 32, 64])
def test_gemm_fp8_every_swizzle(swizzle):
    assert run_case(FP8[0], FP8[0], Float32, 64, swizzle=swizzle) < 1e-6


@pytest.mark.parametrize("source", ["SS", "RS"])
def test_gemm_tf32_swizzle_32_race_checked(source):
    with race_checking():
        assert run_case(TFloat32, TFloat32, Float32, 64, source=source, swizzle=32) < 1e-6


def trace_case(a_type, b_type, c_type, n, **kw):
    mma, args, K = wgmma_case(a_type, b_type, c_type, n, **kw)
    A = np.zeros((64, K), NUMPY[a_type.name])
    B = np.zeros((n, K), NUMPY[b_type.name])
    C = np.zeros((64, n), NUMPY[c_type.name])
    return wgmma_ab_kernel.trace(A, B, C, *args, block=128)[0]


def test_rs_errors():
    """An RS op given A in shared memory; an SS op given a register fragment;
    A fragments of the wrong type or size."""
    mma = moye.make_tiled_mma(moye.wgmma_op(64, Float16, Float16, Float32, "RS"))
    ss = moye.make_tiled_mma(moye.wgmma_op(64, Float16, Float16, Float32))

    @moye.kernel
    def bad_a(C, mma, a_kind: moye.Constexpr):
        sA = moye.shared_array(Float16, gmma_smem_layout(Float16, "K", 128, (64, 64)), align=1024)
        sB = moye.shared_array(Float16, gmma_smem_layout(Float16, "K", 128, (64, 64)), align=1024)
        thr = mma.get_slice(moye.thread_idx.x)
        acc = thr.partition_fragment_C(moye.tile(MoYeArray(C), (64, 64), (0, 0)))
        for i in range(size(acc)):
            acc[i] = 0.0
        if a_kind == "shared":
            a = thr.partition_A(sA)
        elif a_kind == "f32":
            a = moye.make_fragment_like(thr.partition_fragment_A(sA), Float32)
        elif a_kind == "16 values":
            a = moye.make_fragment_like(Layout((16, 1, 4)), Float16)
        else:
            a = thr.partition_fragment_A(sA)
        gemm(mma, acc, a, thr.partition_B(sB), acc)

    C = np.zeros((64, 64), np.float32)
    with pytest.raises(MoyeError, match=r"takes A from registers \(RS\); A must be a register"):
        bad_a.trace(C, mma, "shared", block=128)
    with pytest.raises(MoyeError, match="must be a shared-memory tile .* use an RS op"):
        bad_a.trace(C, ss, "fragment", block=128)
    with pytest.raises(MoyeError, match=r"A holds Float32, the op multiplies Float16"):
        bad_a.trace(C, mma, "f32", block=128)
    with pytest.raises(MoyeError, match=r"A's fragment \(16,1,4\).* holds 16 values per "
                                        r"instruction; the op's A layout .* gives each thread 8"):
        bad_a.trace(C, mma, "16 values", block=128)


def test_major_errors():
    for a, b in ((TFloat32, TFloat32), (FP8[0], FP8[1])):
        with pytest.raises(MoyeError, match="must be K-major .* only 16-bit types may be MN"):
            moye.wgmma_op(64, a, b, Float32, "SS", "K", "MN")
    with pytest.raises(MoyeError, match="A from registers is K-major"):
        moye.wgmma_op(64, Float16, Float16, Float32, "RS", "MN")
    with pytest.raises(MoyeError, match="no wgmma multiplies Float8E4M3 by Float16"):
        moye.wgmma_op(64, FP8[0], Float16, Float32)
    # a K-major tile for an MN-major op (and the reverse): the descriptor cannot read it
    mma, args, K = wgmma_case(Float16, Float16, Float32, 64, b_major="MN")
    args = (args[0], gmma_smem_layout(Float16, "K", 128, (64, 64))) + args[2:]
    with pytest.raises(MoyeError, match=r"no wgmma descriptor reads the MN-major .*\(B, block"):
        wgmma_ab_kernel.trace(np.zeros((64, K), np.float16), np.zeros((64, K), np.float16),
                              np.zeros((64, 64), np.float32), *args, block=128)
    mma, args, K = wgmma_case(Float16, Float16, Float32, 64, a_major="K")
    args = (gmma_smem_layout(Float16, "MN", 128, (64, 64)),) + args[1:]
    with pytest.raises(MoyeError, match=r"no wgmma descriptor reads the K-major .*\(A, block"):
        wgmma_ab_kernel.trace(np.zeros((64, K), np.float16), np.zeros((64, K), np.float16),
                              np.zeros((64, 64), np.float32), *args, block=128)


# -- wgmma_fence_operand -----------------------------------------------------------------
@moye.kernel
def two_products_kernel(C1, C2, A, B, sA_layout, mma, kind: moye.Constexpr):
    """C1 = C2 = A A^T, both accumulators cleared first, and with kind
    "fenced" the second fenced before the first gemm is issued ("unfenced":
    not; "shared", "16-bit", "scalar": a bad operand to fence)."""
    sA = moye.shared_array(Float16, sA_layout, align=1024)
    thr = mma.get_slice(moye.thread_idx.x)
    for i in range(size(sA)):
        if i % 128 == moye.thread_idx.x:
            sA[i] = A[i % 64, i // 64]
    moye.fence_proxy_async()
    moye.sync_threads()
    acc1 = thr.partition_fragment_C(moye.tile(MoYeArray(C1), (64, 64), (0, 0)))
    acc2 = thr.partition_fragment_C(moye.tile(MoYeArray(C2), (64, 64), (0, 0)))
    for i in range(size(acc1)):
        acc1[i] = 0.0
        acc2[i] = 0.0
    if kind == "shared":
        moye.wgmma_fence_operand(sA)
    elif kind == "16-bit":
        moye.wgmma_fence_operand(moye.make_fragment_like(acc1, Float16))
    elif kind == "scalar":
        moye.wgmma_fence_operand(acc1[0])
    elif kind == "fenced":
        moye.wgmma_fence_operand(acc2)
    gemm(mma, acc1, thr.partition_A(sA), thr.partition_B(sA), acc1)
    gemm(mma, acc2, thr.partition_A(sA), thr.partition_B(sA), acc2)
    moye.wgmma_wait(0)
    c1 = thr.partition_C(moye.tile(MoYeArray(C1), (64, 64), (0, 0)))
    c2 = thr.partition_C(moye.tile(MoYeArray(C2), (64, 64), (0, 0)))
    for i in range(size(acc1)):
        c1[i] = acc1[i]
        c2[i] = acc2[i]


def test_wgmma_fence_operand_pins_a_cleared_accumulator():
    """The fence is an empty asm over each of the fragment's registers,
    emitted where it is called (between acc2's clearing and the first
    wgmma); it changes nothing on the CPU backend."""
    from moye.compiler.frontend import BACKENDS
    A = rng.standard_normal((64, 64)).astype(np.float16)
    mma = moye.make_tiled_mma(moye.wgmma_op(64, Float16, Float16, Float32))
    layout = gmma_smem_layout(Float16, "K", 128, (64, 64))
    C1, C2 = (np.full((64, 64), np.nan, np.float32) for _ in range(2))
    two_products_kernel[1, 128](C1, C2, A, A, layout, mma, "fenced")
    want = A.astype(np.float64) @ A.astype(np.float64).T
    for C in (C1, C2):
        assert np.abs(C - want).max() < 1e-3 * np.abs(want).max()
    before = {}
    for kind in ("fenced", "unfenced"):
        kernel = two_products_kernel.trace(C1, C2, A, A, layout, mma, kind, block=128)[0]
        source = BACKENDS["cuda"].source(kernel, (128, 1, 1))
        head = source[:source.index('asm volatile("wgmma.fence')]
        before[kind] = re.findall(r'asm volatile\("" : "\+f"\((\w+)\[', head)
    # acc1's fence (gemm's own), and with the call acc2's as well, another register array
    assert len(before["unfenced"]) == 1 and len(before["fenced"]) == 2, before
    assert before["fenced"][0] != before["fenced"][1]


@pytest.mark.parametrize("kind, match", [
    ("shared", "register fragment of 32-bit values, got"),
    ("16-bit", "register fragment of 32-bit values, got"),
    ("scalar", "register fragment of 32-bit values, got"),
])
def test_wgmma_fence_operand_errors(kind, match):
    A = np.ones((64, 64), np.float16)
    C = np.zeros((64, 64), np.float32)
    mma = moye.make_tiled_mma(moye.wgmma_op(64, Float16, Float16, Float32))
    with pytest.raises(MoyeError, match=r"wgmma_fence_operand: the fragment must be a " + match):
        two_products_kernel.trace(C, C, A, A, gmma_smem_layout(Float16, "K", 128, (64, 64)), mma,
                                  kind, block=128)

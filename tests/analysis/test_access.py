"""The access report against the seeds' claims about coalescing and bank
conflicts, and against hand counts for swizzled, padded, wide and
collective accesses."""
import pytest

from moye import (CPOP_ASYNC_CACHEGLOBAL, LDSM_U32x1_N, LDSM_U32x4_N, MMAOP_16x8x8_F16F16F16F16_TN,
                  MMAOP_16x8x16_F32F16F16F32_TN, STSM_U32x2_N, CopyAtom, Float16, Float32,
                  Float64, Layout, MoyeError, Swizzle, UInt128, UniversalCopy, analyze,
                  composition, make_tiled_copy, make_tiled_copy_A, make_tiled_copy_B,
                  make_tiled_copy_C, make_tiled_mma, transpose)


def tiled(op, dtype, thr, val):
    return make_tiled_copy(CopyAtom(op, dtype), thr, val)


# -- seed 000: vectorized copies of A (Float32, 2048 x 256, column-major) by 32 x 8 threads --
def _copy_A(op, val, dtype=Float32):
    tc = tiled(op, dtype, (32, 8), val)
    m, n = tc.tiler_mn
    return analyze(tc, Layout((m, n), (1, 2048)), None).src     # gA tile -> registers


def test_seed_float64_vectors_of_4_values_are_uncoalesced():
    """Thread 0 loads [0],[1] while thread 1 loads [4],[5]: half of each sector is wasted."""
    src = _copy_A(UniversalCopy(Float64), (4, 1))
    assert src.access_bytes == 8 and src.num_requests == 8 * 2     # 8 warps x 2 instructions
    assert (src.sectors_per_request, src.ideal_sectors_per_request) == (16, 8)
    assert (src.lines_per_request, src.ideal_lines / src.num_requests) == (4, 2)
    assert src.efficiency == 0.5 and not src.optimal
    assert "uncoalesced: 50% of the fetched bytes are used" in str(src)


def test_seed_float64_vectors_of_2_values_are_coalesced():
    src = _copy_A(UniversalCopy(Float64), (2, 1))
    assert (src.sectors_per_request, src.ideal_sectors_per_request) == (8, 8)
    assert src.lines_per_request == 2 and src.optimal and "coalesced" in str(src)


def test_seed_uint128_vectors_of_4_values_are_coalesced():
    src = _copy_A(UniversalCopy(UInt128), (4, 1))
    assert src.access_bytes == 16 and src.num_requests == 8
    assert (src.sectors_per_request, src.ideal_sectors_per_request) == (16, 16)
    assert src.lines_per_request == 4 and src.efficiency == 1.0 and src.optimal


def test_seed_scalar_copy_and_float64_elements():
    assert _copy_A(UniversalCopy(Float32), (1, 1)).sectors_per_request == 4
    # Float64 elements, one per access, 4 per thread: a quarter of each sector used
    src = _copy_A(UniversalCopy(Float64), (4, 1), Float64)
    assert (src.sectors_per_request, src.ideal_sectors_per_request) == (32, 8)


# -- seed 003: the transpose's 32 x 32 shared tile, read column-wise by 32 x 8 threads --------
def _transpose_read(smem):
    tc = tiled(UniversalCopy(Float32), Float32, (32, 8), (1, 1))
    gdst = Layout((32, 32), (1, 2048))
    return analyze(tc, transpose(smem), gdst, src_space="shared", dst_space="global")


def test_transpose_read_conflicts_32_way():
    report = _transpose_read(Layout((32, 32)))
    smem = report.src
    assert smem.num_requests == 8 * 4
    assert (smem.wavefronts_per_request, smem.ideal_wavefronts_per_request) == (32, 1)
    assert smem.conflict_ways == 32 and smem.wavefronts == 32 * 32
    assert report.dst.sectors_per_request == 4 and report.dst.optimal
    assert "32-way bank conflicts" in str(report)


def test_padding_removes_the_conflicts():
    smem = _transpose_read(Layout((32, 32), (1, 33))).src
    assert (smem.wavefronts_per_request, smem.conflict_ways) == (1, 1) and smem.optimal
    assert "no bank conflicts" in str(smem)


def test_writing_the_tile_row_by_row_is_conflict_free():
    tc = tiled(UniversalCopy(Float32), Float32, (32, 8), (1, 1))
    report = analyze(tc, Layout((32, 32), (1, 2048)), Layout((32, 32)))
    assert report.src.optimal and report.dst.wavefronts_per_request == 1


# -- swizzles: 16-byte rows of 8 rows x 128 bytes, read a column of chunks at a time ----------
@pytest.mark.parametrize("dtype,cols,swizzle", [(Float32, 32, Swizzle(3, 2, 3)),
                                                (Float16, 64, Swizzle(3, 3, 3))])
def test_swizzle_makes_16_byte_stores_conflict_free(dtype, cols, swizzle):
    tc = tiled(UniversalCopy(UInt128), dtype, (8, 4), (1, 128 // dtype.bits))
    gmem, smem = Layout((8, cols), (1024, 1)), Layout((8, cols), (cols, 1))
    plain = analyze(tc, gmem, smem).dst
    assert (plain.wavefronts_per_request, plain.ideal_wavefronts_per_request) == (32, 4)
    assert plain.conflict_ways == 8
    swizzled = analyze(tc, gmem, composition(swizzle, smem)).dst
    assert (swizzled.wavefronts_per_request, swizzled.conflict_ways) == (4, 1) and swizzled.optimal


def test_swizzle_makes_ldmatrix_conflict_free():
    copy_a = make_tiled_copy_A(CopyAtom(LDSM_U32x4_N, Float16),
                               make_tiled_mma(MMAOP_16x8x16_F32F16F16F32_TN))
    k_major = Layout((16, 64), (64, 1))                    # 128-byte rows
    plain = analyze(copy_a, k_major, None)
    assert plain.dst.space == "register" and plain.src.space == "shared"
    assert plain.src.wavefronts_per_request == 32 and plain.src.conflict_ways == 8
    swizzled = analyze(copy_a, composition(Swizzle(3, 3, 3), k_major), None).src
    assert swizzled.wavefronts_per_request == 4 and swizzled.optimal


def test_cp_async_into_swizzled_smem():
    tc = tiled(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float16, Layout((16, 8), (8, 1)), (1, 8))
    report = analyze(tc, Layout((16, 64), (1024, 1)),
                     composition(Swizzle(3, 3, 3), Layout((16, 64), (64, 1))))
    assert report.src.space == "global" and report.dst.space == "shared"
    assert report.src.sectors_per_request == 16 and report.src.optimal
    assert report.dst.wavefronts_per_request == 4 and report.dst.optimal


# -- the phases of wide accesses and of ldmatrix / stmatrix -----------------------------------
def test_ldmatrix_x1_reads_eight_rows():
    copy_b = make_tiled_copy_B(CopyAtom(LDSM_U32x1_N, Float16),
                               make_tiled_mma(MMAOP_16x8x8_F16F16F16F16_TN))
    src = analyze(copy_b, Layout((8, 8), (8, 1)), None).src
    assert (src.num_requests, src.wavefronts, src.ideal_wavefronts) == (1, 1, 1)


def test_stmatrix_x2_writes_sixteen_rows():
    copy_c = make_tiled_copy_C(CopyAtom(STSM_U32x2_N, Float16),
                               make_tiled_mma(MMAOP_16x8x16_F32F16F16F32_TN))
    report = analyze(copy_c, None, Layout((16, 8), (8, 1)))
    assert report.src.space == "register" and report.dst.wavefronts == 2 and report.dst.optimal


def test_8_byte_accesses_go_in_half_warps():
    tc = tiled(UniversalCopy(Float64), Float64, (32, 1), (1, 1))
    dense = analyze(tc, Layout((32, 1)), Layout((32, 1)), src_space="shared").src
    assert (dense.wavefronts, dense.ideal_wavefronts) == (2, 2)
    # every other 8-byte word: lanes i and i+8 of a half warp share banks
    strided = analyze(tc, Layout((32, 1), (2, 0)), None, src_space="shared").src
    assert (strided.wavefronts, strided.ideal_wavefronts, strided.conflict_ways) == (4, 2, 2)


def test_a_broadcast_costs_one_wavefront_and_one_sector():
    tc = tiled(UniversalCopy(Float32), Float32, (32, 1), (1, 1))
    same = Layout((32, 1), (0, 0))
    assert analyze(tc, same, same).dst.wavefronts == 1
    assert analyze(tc, same, None).src.sectors == 1


def test_fewer_threads_than_a_warp():
    """Seed 004's six threads, one 8-byte value at a time, over a 4 x 9 column-major tile."""
    tc = make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float64), Layout((2, 3), (3, 1)),
                         Layout((2, 3), (1, 2)))
    src = analyze(tc, Layout((4, 9)), None).src
    assert src.num_requests == 6 and {r.warp for r in src.requests} == {0}
    assert src.requests[0].cost == 3        # threads 0..5 read 0, 18, 2, 20, 34, 6 (x 8 bytes)


def test_vectors_must_be_contiguous_and_aligned():
    tc = tiled(UniversalCopy(UInt128), Float32, (8, 4), (1, 4))
    with pytest.raises(MoyeError, match=r"lie at offsets \[0, 8, 16, 24\].*4 contiguous Float32"):
        analyze(tc, Layout((8, 32)), None)
    tc = tiled(UniversalCopy(UInt128), Float32, (8, 4), (4, 1))
    with pytest.raises(MoyeError, match="starts at offset 33 .* not aligned to its 16 bytes"):
        analyze(tc, Layout((32, 4), (1, 33)), None)


def test_bad_arguments():
    tc = tiled(UniversalCopy(Float32), Float32, (32, 1), (1, 1))
    with pytest.raises(MoyeError, match="src_space must be one of"):
        analyze(tc, Layout(32), None, src_space="texture")
    with pytest.raises(TypeError, match="expected a TiledCopy"):
        analyze(CopyAtom(UniversalCopy(Float32), Float32), Layout(32), None)

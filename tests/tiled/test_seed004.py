"""Seed 004's tiled copy, exactly as the issue writes it (0-based: the seed's
thread 2 is thread 1 here), and seed 000's TiledMMA on the host."""
import numpy as np
import pytest

from moye import (CopyAtom, Float32, Float64, Layout, MoYeArray, UInt128, UniversalCopy,
                  UniversalFMA, copyto, gemm, get_slice, make_fragment_C, make_fragment_like,
                  make_layout, make_tiled_copy, make_tiled_mma, partition_A, partition_B,
                  partition_C, partition_D, partition_S, size, zeros_)
from moye.errors import MoyeError


def seed_arrays():
    src = MoYeArray(np.arange(1, 37) * 0.1, make_layout((4, 9)))
    dst = MoYeArray(np.zeros(36), make_layout((4, 9)))
    return src, dst


def seed_copy(atom_type=Float64):
    return make_tiled_copy(CopyAtom(UniversalCopy(atom_type), Float64),
                           Layout((2, 3), (3, 1)), Layout((2, 3), (1, 2)))


def test_tiled_copy_repr():
    assert repr(seed_copy()) == "\n".join([
        "TiledCopy",
        "  Tiler_MN:       (4,9)",
        "  TiledLayout_TV: ((3,2),(2,3)):((12,2),(1,4))",
        "CopyAtom",
        "  ThrID:        1:0",
        "  ValLayoutSrc: (1,1):(0,1)",
        "  ValLayoutDst: (1,1):(0,1)",
        "  ValLayoutRef: (1,1):(0,1)",
        "  ValueType:    64b"])


def test_thread_1_partitions_and_copy():
    src, dst = seed_arrays()
    tiled_copy = seed_copy()
    thr_copy = get_slice(tiled_copy, 1)
    dst_t, src_t = partition_D(thr_copy, dst), partition_S(thr_copy, src)
    assert str(dst_t.layout) == "((1,(2,3)),1,1):((0,(1,4)),0,0)"
    assert str(src_t.layout) == "((1,(2,3)),1,1):((0,(1,4)),0,0)"
    copyto(tiled_copy, dst_t, src_t)
    assert str(dst) == "\n".join([
        "4×9 MoYeArray{Float64} with layout (4,9):(1,4):",
        " 0.0  0.0  0.0  1.3  1.7  2.1  0.0  0.0  0.0",
        " 0.0  0.0  0.0  1.4  1.8  2.2  0.0  0.0  0.0",
        " 0.0  0.0  0.0  0.0  0.0  0.0  0.0  0.0  0.0",
        " 0.0  0.0  0.0  0.0  0.0  0.0  0.0  0.0  0.0"])


def test_thread_2_copies_through_a_register_fragment():
    src, dst = seed_arrays()
    tiled_copy = seed_copy()
    for thread in (1, 2):
        thr_copy = get_slice(tiled_copy, thread)
        dst_t, src_t = partition_D(thr_copy, dst), partition_S(thr_copy, src)
        if thread == 1:
            copyto(tiled_copy, dst_t, src_t)
            continue
        r = make_fragment_like(dst_t)
        assert str(r.layout) == "((1,(2,3)),1,1):((0,(1,2)),0,0)"
        copyto(tiled_copy, r, src_t)
        copyto(tiled_copy, dst_t, r)
    assert dst.numpy()[:2, 3:].round(1).tolist() == [[1.3, 1.7, 2.1, 2.5, 2.9, 3.3],
                                                      [1.4, 1.8, 2.2, 2.6, 3.0, 3.4]]
    assert not dst.numpy()[2:].any() and not dst.numpy()[:, :3].any()


def test_every_thread_covers_its_cells_of_the_seed_picture():
    # the seed's picture: rows 0-1 belong to threads 0,1,2 by column thirds; rows 2-3 to 3,4,5
    owner = np.full((4, 9), -1)
    tiled_copy = seed_copy()
    for t in range(size(tiled_copy)):
        coords = MoYeArray(np.arange(36), make_layout((4, 9)))
        part = partition_D(get_slice(tiled_copy, t), coords)
        for idx in part:
            m, n = int(idx) % 4, int(idx) // 4
            assert owner[m, n] == -1
            owner[m, n] = t
    expect = np.array([[0] * 3 + [1] * 3 + [2] * 3] * 2 + [[3] * 3 + [4] * 3 + [5] * 3] * 2)
    np.testing.assert_array_equal(owner, expect)


def test_vectorized_variant_with_uint128():
    src, dst = seed_arrays()
    tiled_copy = seed_copy(UInt128)
    assert str(tiled_copy.atom.val_layout_src) == "(1,2):(0,1)"
    thr = get_slice(tiled_copy, 1)
    dst_t, src_t = partition_D(thr, dst), partition_S(thr, src)
    assert str(dst_t.layout) == "((2,3),1,1):((1,4),0,0)"
    copyto(tiled_copy, dst_t, src_t)
    assert dst.numpy()[:2, 3:6].round(1).tolist() == [[1.3, 1.7, 2.1], [1.4, 1.8, 2.2]]


def test_a_val_layout_that_splits_a_vector_is_refused():
    with pytest.raises(MoyeError, match="not a multiple of the 2"):
        make_tiled_copy(CopyAtom(UniversalCopy(UInt128), Float64), Layout((2, 3)), Layout((1, 3)))


def test_seed000_tiled_mma_on_the_host():
    rng = np.random.default_rng(3)
    M, N, K = 128, 128, 8
    A = MoYeArray(rng.standard_normal(M * K).astype(np.float32), (M, K))
    B = MoYeArray(rng.standard_normal(N * K).astype(np.float32), (N, K))
    C = MoYeArray(np.full(M * N, np.nan, np.float32), (M, N))
    mma = make_tiled_mma(UniversalFMA(Float32, Float32, Float32), Layout((32, 8)))
    thr = get_slice(mma, 0)
    assert str(partition_A(thr, A).layout) == "(1,4,8):(0,32,128)"
    assert str(partition_B(thr, B).layout) == "(1,16,8):(0,8,128)"
    assert str(partition_C(thr, C).layout) == "(1,4,16):(0,32,1024)"
    for t in range(size(mma)):
        thr = get_slice(mma, t)
        rC = make_fragment_C(thr, partition_C(thr, C))
        zeros_(rC)
        gemm(mma, rC, partition_A(thr, A), partition_B(thr, B), rC)
        copyto(partition_C(thr, C), rC)
    ref = A.numpy().astype(np.float64) @ B.numpy().astype(np.float64).T
    assert np.linalg.norm(C.numpy() - ref) / np.linalg.norm(ref) < 1e-6

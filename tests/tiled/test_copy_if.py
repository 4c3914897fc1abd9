"""copy_if on the host: element-wise and atom by atom (a plain copy skips
an atom whose predicate is false, cp.async zero-fills it), predicates from
identity arrays (make_copy_predicate), and the errors."""
import numpy as np
import pytest

from moye import (CPOP_ASYNC_CACHEALWAYS, Bool, CopyAtom, Float64, Layout, MoYeArray,
                  UniversalCopy, copy_if, elem_less, get_slice, make_copy_predicate,
                  make_identity_array, make_tiled_copy, partition_D, partition_S, tile)
from moye.errors import ShapeError

rng = np.random.default_rng(5)


def test_element_wise_copy_if_copies_where_the_predicate_holds():
    src = MoYeArray(rng.standard_normal((4, 6)))
    dst = MoYeArray(np.full((4, 6), np.nan))
    pred = MoYeArray(rng.random((4, 6)) < 0.5)
    assert copy_if(pred, dst, src) is dst
    expected = np.where(pred.numpy(), src.numpy(), np.nan)
    np.testing.assert_array_equal(dst.numpy(), expected)


def tiled_copy(async_copy):
    op = CPOP_ASYNC_CACHEALWAYS(Float64) if async_copy else UniversalCopy(Float64)
    # 4x2 threads, each a column of 2 values: a (8, 2) tile
    return make_tiled_copy(CopyAtom(op, Float64), Layout((4, 2)), Layout((2, 1)))


@pytest.mark.parametrize("async_copy", [False, True], ids=["copy", "cp.async"])
def test_an_overhanging_tile_copied_by_every_thread(async_copy):
    """A (6, 3) array in (8, 2) tiles: tile (0, 1) overhangs both extents.
    A plain copy leaves what lies outside as it was; cp.async zero-fills it."""
    M, N = 6, 3
    src = MoYeArray(rng.standard_normal((M + 2) * (N + 1)), Layout((M, N)))   # room to overhang
    out = MoYeArray(np.full((8, 2), np.nan))
    copy = tiled_copy(async_copy)
    g = tile(src, (8, 2), (0, 1))
    c = tile(make_identity_array((M, N)), (8, 2), (0, 1))
    for t in range(8):
        thr = get_slice(copy, t)
        pred = make_copy_predicate(partition_S(thr, c), (M, N))
        copy_if(copy, pred, partition_D(thr, out), partition_S(thr, g))
    inside = np.array([[elem_less((m, 2 + n), (M, N)) for n in range(2)] for m in range(8)])
    ref = np.where(inside, np.array([[src[m, 2 + n] if inside[m, n] else 0.0 for n in range(2)]
                                     for m in range(8)]), 0.0 if async_copy else np.nan)
    np.testing.assert_array_equal(out.numpy(), ref)


def test_make_copy_predicate_reads_each_atom_s_first_coordinate():
    copy = tiled_copy(False)
    c = tile(make_identity_array((5, 3)), (8, 2), (0, 1))       # rows 0..7, columns 2..3
    thr = get_slice(copy, 2)                                    # rows 4, 5
    coords = partition_S(thr, c)
    assert coords.numpy().reshape(-1).tolist() == [(4, 2), (5, 2)]
    pred = make_copy_predicate(coords, (5, 3))
    assert pred.dtype is Bool and pred.numpy().reshape(-1).tolist() == [True]   # (4, 2) inside
    assert make_copy_predicate(coords, (4, 3)).numpy().reshape(-1).tolist() == [False]


def test_errors_name_the_shapes():
    copy = tiled_copy(False)
    thr = get_slice(copy, 0)
    a = partition_S(thr, MoYeArray(np.zeros((8, 4))))            # (2, 1, 2): two atoms
    with pytest.raises(ShapeError,
                       match=r"pred has shape 3 \(3 values\) but dst \(\(1,2\),1,2\) holds 2"):
        copy_if(copy, MoYeArray(np.ones(3, bool)), a, a)
    with pytest.raises(ShapeError, match="must hold as many elements"):
        copy_if(MoYeArray(np.ones(4, bool)), MoYeArray(np.zeros(4)), MoYeArray(np.zeros(5)))
    with pytest.raises(TypeError, match="copy_if takes"):
        copy_if(a, a)

"""retile_S/D against the MMA's own partition, permutations of a TiledMMA,
and make_tiled_copy_C."""
import numpy as np

from moye import (CopyAtom, Float32, Layout, MoYeArray, UniversalCopy, UniversalFMA, copyto,
                  get_slice, make_fragment_C, make_tiled_copy_C, make_tiled_mma, partition_C,
                  partition_D, retile_S, size, tiles)


def test_retiled_fragment_copies_like_the_mma_partition():
    mma = make_tiled_mma(UniversalFMA(Float32), Layout((8, 4)))
    copy_c = make_tiled_copy_C(CopyAtom(UniversalCopy(Float32), Float32), mma)
    M, N = 32, 16
    via_mma = MoYeArray(np.full(M * N, np.nan, np.float32), (M, N))
    via_copy = MoYeArray(np.full(M * N, np.nan, np.float32), (M, N))
    for t in range(size(mma)):
        thr_mma, thr_copy = get_slice(mma, t), get_slice(copy_c, t)
        frag = make_fragment_C(thr_mma, partition_C(thr_mma, via_mma))
        vals = np.arange(size(frag), dtype=np.float32) + 100 * t
        for i in range(size(frag)):
            frag[i] = vals[i]
        copyto(partition_C(thr_mma, via_mma), frag)
        copyto(copy_c, partition_D(thr_copy, via_copy), retile_S(thr_copy, frag))
    np.testing.assert_array_equal(via_copy.numpy(), via_mma.numpy())
    assert not np.isnan(via_mma.numpy()).any()


def test_permutation_changes_the_tile_and_keeps_each_thread_one_element():
    plain = make_tiled_mma(UniversalFMA(Float32), Layout((4, 4)))
    assert plain.tile_shape == (4, 4, 1)
    perm = make_tiled_mma(UniversalFMA(Float32), Layout((4, 4)),
                          permutation=(Layout((4, 2), (2, 1)), None, None))
    assert perm.tile_shape == (8, 4, 1)
    C = MoYeArray(np.arange(32, dtype=np.float32), (8, 4))
    seen = []
    for t in range(size(perm)):
        part = partition_C(get_slice(perm, t), C)
        seen.extend(int(x) for x in part)
    assert sorted(seen) == list(range(32))          # every element, once
    part0 = [int(x) for x in partition_C(get_slice(perm, 0), C)]
    assert part0 == [0, 1]                         # rows 0 and 1 via the permutation


def test_tile_iterator_visits_every_tile_in_order():
    a = MoYeArray(np.arange(24), (4, 6))
    got = [t.numpy() for t in tiles(a, (2, 3))]
    assert len(got) == 4
    full = a.numpy()
    expect = [full[0:2, 0:3], full[2:4, 0:3], full[0:2, 3:6], full[2:4, 3:6]]
    for g, e in zip(got, expect):
        np.testing.assert_array_equal(g, e)

"""Identity arrays on the host: printed as CuTe prints them, and tiled,
partitioned and sliced exactly as a data array of the same shape (each
element's coordinate names the data element at the same place)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moye import (CopyAtom, Float64, Layout, MMAOP_16x8x8_F32TF32TF32F32_TN, MoYeArray,
                  UniversalCopy, UniversalFMA, elem_less, get_slice, make_identity_array,
                  make_identity_tensor, make_tiled_copy, make_tiled_mma, parallelize,
                  partition_A, partition_B, partition_C, partition_D, partition_S, size, tile,
                  zipped_divide)
from moye.array.identity import ArithTuple
from moye.errors import MoyeError


def test_printed_like_cute():
    assert str(make_identity_array((2, 3))) == (
        "2×3 MoYeArray{ArithTuple} with layout (2,3):(1@0,1@1):\n"
        " (0,0)  (0,1)  (0,2)\n"
        " (1,0)  (1,1)  (1,2)")
    # a tile at block (1, 1) of a 5x6 array: coordinates past the extent 5 included
    assert str(tile(make_identity_array((5, 6)), (4, 3), (1, 1))) == (
        "4×3 MoYeArray{ArithTuple} with layout (4,3):(1@0,1@1):\n"
        " (4,3)  (4,4)  (4,5)\n"
        " (5,3)  (5,4)  (5,5)\n"
        " (6,3)  (6,4)  (6,5)\n"
        " (7,3)  (7,4)  (7,5)")
    assert str(make_identity_array(((2, 2), 2))) == (
        "4×2 MoYeArray{ArithTuple} with layout ((2,2),2):((1@0,2@0),1@1):\n"
        " ((0,0),0)  ((0,0),1)\n"
        " ((1,0),0)  ((1,0),1)\n"
        " ((0,1),0)  ((0,1),1)\n"
        " ((1,1),0)  ((1,1),1)")


def test_elements_indexing_and_slicing():
    c = make_identity_array((4, 6))
    assert c[3, 5] == (3, 5) and isinstance(c[3, 5], ArithTuple)
    assert c[7] == (3, 1)                                   # 1-D index, colexicographic
    assert [c[2, :][j] for j in range(6)] == [(2, j) for j in range(6)]
    assert c[:, 4].numpy().tolist() == [(i, 4) for i in range(4)]
    assert make_identity_array(8)[5] == 5                   # an int shape: int coordinates
    assert make_identity_tensor is make_identity_array


def test_partitions_of_the_seed_004_copy_and_the_tiled_copy_layout():
    """Thread 1's share of seed 004's (4, 9) copy tile: its coordinates are the
    ones the TiledCopy's thread-value layout names."""
    copy = make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float64),
                           Layout((2, 3), (3, 1)), Layout((2, 3), (1, 2)))
    tc = partition_S(get_slice(copy, 1), make_identity_array((4, 9)))
    assert tc.numpy().reshape(-1).tolist() == [(0, 3), (1, 3), (0, 4), (1, 4), (0, 5), (1, 5)]
    tv = copy.get_layoutS_TV()
    assert [tv(1, v) for v in range(6)] == [m + 4 * n for m, n in tc.numpy().reshape(-1)]


def test_arith_tuple_arithmetic_and_elem_less():
    a = ArithTuple((1, 2))
    assert a + (3, 4) == (4, 6) and (3, 4) + a == (4, 6) and a - (1, 1) == (0, 1)
    assert str(ArithTuple((1, ArithTuple((2, 3))))) == "(1,(2,3))"
    assert elem_less(a, (2, 3)) and not elem_less(a, (2, 2)) and not elem_less(a, (1, 3))
    with pytest.raises(MoyeError, match="not coordinates of one rank"):
        a + (1, 2, 3)


def test_read_only_and_capacity_errors():
    c = make_identity_array((4, 4))
    with pytest.raises(MoyeError, match="read-only"):
        c[1, 1] = (0, 0)
    with pytest.raises(MoyeError, match="extent 40000 of mode 1 of shape"):
        make_identity_array((4, 40000, 3))                  # 3 modes: 16-bit digits
    make_identity_array((2 ** 30, 2 ** 30))                 # 2 modes: 31 bits each
    with pytest.raises(MoyeError, match="extent 2147483648 of mode 1 of shape"):
        make_identity_array((4, 2 ** 31))                   # 32-bit in a kernel: refused


# -- the law: an identity array is transformed exactly as a data array ----------------

def data_like(shape, room=16):
    """A data array of `shape` whose element at coordinate c is c's
    colexicographic index (column-major strides, size-1 modes included, so
    that an overhanging tile reads on), over a buffer with room for that."""
    stride = tuple(int(np.prod(shape[:i])) for i in range(len(shape)))
    return MoYeArray(np.arange(int(np.prod([s + room for s in shape]))), Layout(shape, stride))


def index_of(coord, shape):
    """The colexicographic index of a (flat) coordinate."""
    idx, scale = 0, 1
    for c, s in zip(coord, shape):
        idx, scale = idx + c * scale, scale * s
    return idx


def assert_same_places(coords, data, shape):
    assert coords.shape == data.shape
    got = [index_of(coords[i], shape) for i in range(size(coords))]
    assert got == [int(data[i]) for i in range(size(data))]


@given(st.integers(1, 40), st.integers(1, 40), st.sampled_from([(4, 8), (8, 4), (16, 16)]),
       st.integers(0, 3), st.integers(0, 3))
def test_tile_with_block_coordinates(M, N, tiler, bx, by):
    shape = (M, N)
    c, d = make_identity_array(shape), data_like(shape)
    bx, by = bx % -(-M // tiler[0]), by % -(-N // tiler[1])
    assert_same_places(tile(c, tiler, (bx, by)), tile(d, tiler, (bx, by)), shape)
    assert_same_places(tile(c, tiler, (bx, None)), tile(d, tiler, (bx, None)), shape)


COPIES = {
    "seed004": make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float64),
                               Layout((2, 3), (3, 1)), Layout((2, 3), (1, 2))),
    "rows_of_4": make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float64),
                                 Layout((8, 4), (4, 1)), Layout((1, 4))),
}


@pytest.mark.parametrize("name", list(COPIES))
@pytest.mark.parametrize("shape", [(13, 30), (32, 16), (7, 9)])
def test_partition_S_and_D_of_every_thread(name, shape):
    copy = COPIES[name]
    c, d = make_identity_array(shape), data_like(shape)
    for t in range(size(copy)):
        thr = get_slice(copy, t)
        assert_same_places(partition_S(thr, c), partition_S(thr, d), shape)
        assert_same_places(partition_D(thr, c), partition_D(thr, d), shape)
        # the partition sliced per atom, as copy_if reads it
        assert_same_places(partition_S(thr, c)[:, 0, None], partition_S(thr, d)[:, 0, None],
                           shape)


@pytest.mark.parametrize("mma, shape", [
    (make_tiled_mma(MMAOP_16x8x8_F32TF32TF32F32_TN, Layout((2, 2, 1))), (64, 48)),
    (make_tiled_mma(UniversalFMA(Float64, Float64, Float64, Float64), Layout((4, 4, 1))), (8, 12)),
])
def test_partition_A_B_C_of_a_tiled_mma(mma, shape):
    c, d = make_identity_array(shape), data_like(shape)
    for t in (0, 1, 5, size(mma) - 1):
        thr = get_slice(mma, t)
        for part in (partition_A, partition_B, partition_C):
            assert_same_places(part(thr, c), part(thr, d), shape)


def test_parallelize_and_a_nested_shape():
    shape = (6, 8)
    c, d = make_identity_array(shape), data_like(shape)
    for t in range(4):
        assert_same_places(parallelize(c, Layout((2, 2)), t), parallelize(d, Layout((2, 2)), t),
                           shape)
    nested = make_identity_array(((2, 3), 4))
    assert nested[(1, 2), 3] == ((1, 2), 3) and nested[5, 3] == ((1, 2), 3)
    assert tile(nested, (3, 2), (1, 1))[2, 1] == ((1, 2), 3)    # 3 divides the mode (2,3)
    # a 1-D tiler across modes: 8 elements of (4, 6) are two columns; the data's
    # modes coalesce into (8,3), the identity's stay apart as ((4,2),3)
    c, d = zipped_divide(make_identity_array((4, 6)), Layout(8)), \
        zipped_divide(data_like((4, 6)), Layout(8))
    assert size(c) == size(d) == 24
    assert [index_of(c[i], (4, 6)) for i in range(24)] == [int(d[i]) for i in range(24)]

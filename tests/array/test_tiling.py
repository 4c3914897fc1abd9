"""tile and parallelize on arrays (seed 002's CPU part, 0-based), the
divides and products of the layout algebra applied to arrays, and walking
over the tiles of a divided array."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moye.array import (MoYeArray, inner_partition, local_partition, local_tile,
                        outer_partition, parallelize, tile)
from moye.layout import (Layout, blocked_product, flat_divide, flat_product, logical_divide,
                         logical_product, make_layout, raked_product, size, tiled_divide,
                         tiled_product, zipped_divide, zipped_product)


# -- seed 002: C = A * B^T on the CPU ----------------------------------------------
# Julia's `reshape(1:32, (4, 8))` is column-major; MoYeArray(A, (M, K)) sees the
# NumPy vector the same way. The seed's thread k is thread k - 1 here.

M, N, K = 4, 4, 8
THREADS = make_layout((4, 4))
ROW_0 = "1×8 MoYeArray{Int64} with layout (1,8):(0,4):\n 1  5  9  13  17  21  25  29"
ROW_1 = "1×8 MoYeArray{Int64} with layout (1,8):(0,4):\n 2  6  10  14  18  22  26  30"


@pytest.fixture
def seed_arrays():
    A = np.arange(1, M * K + 1)
    B = np.arange(1, N * K + 1)
    return MoYeArray(A, (M, K)), MoYeArray(B, (N, K))


@pytest.mark.parametrize("thread, printed", [(0, ROW_0), (1, ROW_1), (4, ROW_0)])
def test_seed_002_tile_A(seed_arrays, thread, printed):
    moye_A, _ = seed_arrays
    tile_A = parallelize(moye_A, THREADS, thread, (1, None))
    assert str(tile_A) == printed
    assert tile_A.numpy().tolist() == [list(range(1 + thread % 4, 33, 4))]


@pytest.mark.parametrize("thread, printed", [(0, ROW_0), (1, ROW_0), (4, ROW_1)])
def test_seed_002_tile_B(seed_arrays, thread, printed):
    _, moye_B = seed_arrays
    tile_B = parallelize(moye_B, THREADS, thread, (None, 1))
    assert str(tile_B) == printed
    assert tile_B.numpy().tolist() == [list(range(1 + thread // 4, 33, 4))]


def test_seed_002_each_thread_computes_one_element_of_C(seed_arrays):
    moye_A, moye_B = seed_arrays
    C = np.full(M * N, -999)                                   # poisoned
    moye_C = MoYeArray(C, (M, N))
    for thread in range(size(THREADS)):
        tile_A = parallelize(moye_A, THREADS, thread, (1, None))
        tile_B = parallelize(moye_B, THREADS, thread, (None, 1))
        tile_C = parallelize(moye_C, THREADS, thread)
        assert tile_C.shape == (1, 1)
        tile_C[0, 0] = 0
        for k in range(size(tile_A, 1)):
            for n in range(size(tile_C, 1)):
                for m in range(size(tile_C, 0)):
                    tile_C[m, n] += tile_A[m, k] * tile_B[n, k]
    A = np.arange(1, 33).reshape((M, K), order="F")
    B = np.arange(1, 33).reshape((N, K), order="F")
    assert np.array_equal(C.reshape((M, N), order="F"), A @ B.T)


# -- tile ------------------------------------------------------------------------------

def test_tile_with_none_keeps_the_mode_of_tiles():
    A = np.random.default_rng(0).uniform(1, 2, (8, 16))
    mA = MoYeArray(A)
    bM, bK = 4, 2
    block = tile(mA, (bM, bK), (1, None))                      # (bM,bK,k)
    assert block.shape == (4, 2, 8) and block.engine.buffer is mA.engine.buffer
    for k in range(size(block, 2)):
        assert np.array_equal(block[None, None, k].numpy(), A[4:8, 2 * k:2 * k + 2])
    assert np.array_equal(np.asarray(block), A[4:8].reshape(4, 8, 2).transpose(0, 2, 1))


def test_tile_at_a_full_coordinate_is_one_block():
    A = np.random.default_rng(1).uniform(1, 2, (8, 12))
    block = tile(MoYeArray(A), (4, 3), (1, 2))
    assert block.shape == (4, 3)
    assert np.array_equal(block.numpy(), A[4:8, 6:9])
    block[3, 2] = -1.0                                         # a view: writes through
    assert A[7, 8] == -1.0


def test_tile_with_a_projection():
    A = np.random.default_rng(2).uniform(1, 2, (8, 8))
    # CuTe's local_tile(a, (4,2,8), (1,0,_), Step<_1,X,_1>): the tiler's and
    # coordinate's middle mode is dropped
    block = tile(MoYeArray(A), (4, 2, 8), (1, 0, None), proj=(1, None, 1))
    assert block.shape == (4, 8, 1)
    assert np.array_equal(block.numpy()[:, :, 0], A[4:8, :])


def test_local_tile_and_local_partition_are_the_cute_names():
    assert local_tile is tile and local_partition is parallelize


# -- parallelize -------------------------------------------------------------------------

@st.composite
def thread_layouts(draw):
    tm, tn = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 3]))
    row_major = draw(st.booleans())
    return Layout((tm, tn), (tn, 1) if row_major else (1, tm))


@given(thread_layouts(), st.integers(1, 3), st.integers(1, 3), st.integers(0, 10**6))
def test_parallelize_gives_each_thread_its_coordinate_in_every_tile(thr, a, b, seed):
    tm, tn = thr.shape
    gen = np.random.default_rng(seed)
    A, B = gen.uniform(1, 2, (tm * a, tn * b)), gen.uniform(1, 2, (tn * b, 5))
    mA, mB = MoYeArray(A), MoYeArray(B)
    owners = np.zeros(A.shape, dtype=int)
    for t in range(size(thr)):
        m, n = next((m, n) for m in range(tm) for n in range(tn) if thr(m, n) == t)
        part = parallelize(mA, thr, t)
        assert part.shape == (a, b)
        assert np.array_equal(part.numpy(), A[m::tm, n::tn])
        owners[m::tm, n::tn] += 1
        # projected as in seed 002: the rows of A for the thread's row coordinate,
        # the rows of B (columns of B^T) for its column coordinate
        assert np.array_equal(parallelize(mA, thr, t, (1, None)).numpy(), A[m::tm, :])
        assert np.array_equal(parallelize(mB, thr, t, (None, 1)).numpy(), B[n::tn, :])
    assert (owners == 1).all()                                 # every element, exactly once


def test_parallelize_of_a_layout_is_the_layout_of_the_partition():
    thr = Layout((4, 2))
    a = MoYeArray(np.arange(1.0, 65.0), (8, 8))
    assert parallelize(a, thr, 5).layout == parallelize(a.layout, thr, 5)
    assert str(parallelize(a.layout, thr, 5)) == "(2,4):(4,16)"


def test_inner_and_outer_partition():
    A = np.random.default_rng(3).uniform(1, 2, (6, 8))
    a = MoYeArray(A)
    assert np.array_equal(inner_partition(a, (3, 4), (1, 0)).numpy(), A[3:6, 0:4])
    assert np.array_equal(outer_partition(a, (3, 4), (2, 1)).numpy(), A[2::3, 1::4])


# -- the algebra on arrays ------------------------------------------------------------------

DIVIDES = [zipped_divide, logical_divide, tiled_divide, flat_divide]
PRODUCTS = [logical_product, zipped_product, tiled_product, flat_product, blocked_product,
            raked_product]


@pytest.mark.parametrize("divide", DIVIDES, ids=lambda f: f.__name__)
def test_a_divide_of_an_array_is_the_same_memory_through_the_divided_layout(divide):
    A = np.random.default_rng(4).uniform(1, 2, (6, 8))
    a = MoYeArray(A)
    d = divide(a, (3, 4))
    assert isinstance(d, MoYeArray) and d.engine is a.engine
    assert d.layout == divide(a.layout, (3, 4))
    assert size(d) == size(a)
    assert sorted(d) == sorted(A.ravel())                      # the same elements, re-indexed


@pytest.mark.parametrize("product", PRODUCTS, ids=lambda f: f.__name__)
def test_a_product_of_an_array_is_the_same_memory_through_the_product_layout(product):
    # a 2x2 block of a larger buffer, repeated 2x2 times stays inside the buffer
    buf = np.random.default_rng(5).uniform(1, 2, 64)
    block = MoYeArray(buf, Layout((2, 2)))
    p = product(block, Layout((2, 2)))
    assert isinstance(p, MoYeArray) and p.engine is block.engine
    assert p.layout == product(block.layout, Layout((2, 2)))
    assert p.numpy().reshape(-1, order="F").tolist() == \
        [buf[p.layout(i)] for i in range(size(p))]


def test_walking_over_the_tiles_of_a_zipped_divide():
    # There is no tile iterator: index the rest mode of zipped_divide, keeping
    # every mode of the tile with a tuple of None.
    A = np.random.default_rng(6).uniform(1, 2, (6, 8))
    tiles = zipped_divide(MoYeArray(A), (3, 4))                # ((3,4),(2,2))
    seen = []
    for j in range(size(tiles, 1)):
        block = tiles[(None, None), j]
        assert block.shape == (3, 4)
        bm, bn = j % 2, j // 2                                 # colex over the (2,2) tiles
        assert np.array_equal(block.numpy(), A[3 * bm:3 * bm + 3, 4 * bn:4 * bn + 4])
        seen.append(block.numpy())
    assert len(seen) == 4
    # tiled_divide keeps the rest modes apart: tiles[(None, None), bm, bn]
    tiled = tiled_divide(MoYeArray(A), (3, 4))
    assert np.array_equal(tiled[(None, None), 1, 1].numpy(), A[3:6, 4:8])
    # None alone keeps the tile mode as ONE mode: a rank-1 view of 12 elements
    assert tiles[None, 0].shape == ((3, 4),)

"""Int tuples: CuTe's IntTuple functions."""
import itertools

import pytest
from hypothesis import given

from moye import LayoutError
from moye.layout import inttuple as T

from .strategies import shapes


def all_coords(shape):
    """Every coordinate of `shape` in colexicographic order (naively)."""
    flat = T.flatten_to_tuple(shape)
    for idx in itertools.product(*[range(n) for n in reversed(flat)]):
        yield T.unflatten(tuple(reversed(idx)), shape) if isinstance(shape, tuple) else idx[0]


@given(shapes())
def test_index_to_coord_and_back_walks_colex_order(shape):
    coords = list(all_coords(shape))
    assert len(coords) == T.product(shape)
    for i, c in enumerate(coords):
        assert T.index_to_coord(i, shape) == c
        assert T.coord_to_index(c, shape) == i


@given(shapes())
def test_increment_visits_every_coordinate_in_order(shape):
    coords = list(all_coords(shape))
    c = coords[0]
    for expect in coords[1:]:
        c = T.increment(c, shape)
        assert c == expect


@given(shapes())
def test_flatten_unflatten_roundtrip(shape):
    flat = T.flatten(shape)
    assert T.unflatten(flat, shape) == shape
    assert T.product(flat) == T.product(shape)


@given(shapes())
def test_compact_strides_enumerate_offsets_in_order(shape):
    col = T.compact_col_major(shape)
    row = T.compact_row_major(shape)
    n = T.product(shape)
    col_offsets = [T.crd2idx(c, shape, col) for c in all_coords(shape)]
    assert col_offsets == list(range(n))
    assert sorted(T.crd2idx(c, shape, row) for c in all_coords(shape)) == list(range(n))


def test_prefix_product_and_compact_majors():
    assert T.prefix_product((2, (3, 4), 5)) == (1, (2, 6), 24)
    assert T.compact_col_major((2, (3, 1), 4)) == (1, (2, 0), 6)
    assert T.compact_row_major((2, (3, 4))) == (12, (4, 1))
    assert T.compact_order((2, 3, 4), (1, 0, 2)) == (3, 1, 6)
    assert T.compact_order((2, 2, 2, 2), (0, 2, 3, 1)) == (1, 4, 8, 2)


def test_shape_div_and_ceil_div():
    assert T.shape_div((4, 5, 6), 40) == (1, 1, 3)
    assert T.shape_div(12, 4) == 3 and T.shape_div(4, 12) == 1
    assert T.shape_div((6, 8), (2, 4)) == (3, 2)
    assert T.ceil_div((4, 5, 6), 40) == (1, 1, 3)
    assert T.ceil_div(10, 4) == 3
    assert T.ceil_div((10, 9), (4,)) == (3, 9)
    with pytest.raises(LayoutError, match="divisibility"):
        T.shape_div(6, 4)


def test_congruence_and_compatibility():
    assert T.congruent((2, (3, 4)), (5, (6, 7)))
    assert not T.congruent((2, 3), (2, (3,)))
    assert T.weakly_congruent(2, (3, 4)) and T.weakly_congruent((1, 2), ((3, 4), 5))
    assert T.compatible(24, ((2, 3), 4)) and T.compatible((6, 4), ((2, 3), 4))
    assert not T.compatible((4, 6), ((2, 3), 4))
    assert T.weakly_compatible((2, 2), (4, 6))


def test_orders():
    assert T.elem_less((1, 2), (2, 3)) and not T.elem_less((1, 3), (2, 3))
    assert T.colex_less((3, 0), (0, 1)) and not T.colex_less((0, 1), (3, 0))
    assert T.lex_less((0, 3), (1, 0))


def test_coord_to_coord_and_slicing():
    assert T.coord_to_coord((1, 2), (2, 3), ((2, 3),)) == ((1, 2),)
    assert T.coord_to_coord(5, 6, (2, 3)) == (1, 2)
    assert T.slice_((1, (None, 0), None), (2, (3, 4), 5)) == (3, 5)
    assert T.dice((1, (None, 0), None), (2, (3, 4), 5)) == (2, 4)


def test_last_mode_is_not_wrapped():
    # CuTe extends indices past the size through the last mode
    assert T.index_to_coord(7, (2, 2)) == (1, 3)
    assert T.crd2idx(7, (2, 2), (1, 10)) == 31

"""Layouts: construction, evaluation, slicing, modes, printing."""
import pytest
from hypothesis import given

from moye import (Layout, LayoutError, append, cosize, depth, flatten, get, group_modes,
                  layout_to_text, make_layout, make_layout_like, make_ordered_layout, prepend,
                  rank, replace, select, shape, size, slice_and_offset, stride, take, transpose,
                  unflatten, GenRowMajor)
from moye.layout import inttuple as T

from .strategies import any_layouts, image


def test_printing_like_cute():
    assert str(Layout((2, (2, 2)), (4, (1, 2)))) == "(2,(2,2)):(4,(1,2))"
    assert str(Layout(4)) == "4:1"
    assert str(Layout((4,))) == "(4):(1)"              # rank-1 tuple vs int
    assert str(Layout((4, 1))) == "(4,1):(1,0)"          # static size-1 modes get stride 0
    assert str(Layout((2, 3), GenRowMajor)) == "(2,3):(3,1)"


@given(any_layouts())
def test_one_d_r_d_and_h_d_coordinates_agree(L):
    n = size(L)
    for i in range(n):
        h = T.index_to_coord(i, L.shape)
        assert L(i) == L(h)
        if isinstance(L.shape, tuple):
            r = tuple(T.coord_to_index(c, s) for c, s in zip(h, L.shape))
            assert L(i) == L(r) == L(*r)


@given(any_layouts())
def test_cosize_bounds_the_image(L):
    assert max(image(L)) + 1 <= cosize(L)
    if all(d >= 0 for d in T.flatten_to_tuple(L.stride)):
        assert max(image(L)) + 1 == cosize(L)


def test_evaluation_examples():
    L = Layout((2, (2, 2)), (4, (1, 2)))
    assert (L(5), L(1, 2), L(1, (0, 1))) == (6, 6, 6)
    assert [Layout((2, 3), (3, 1))(i) for i in range(6)] == [0, 3, 1, 4, 2, 5]


def test_slicing():
    L = Layout((2, 3), (3, 1))
    assert L(1, None) == Layout((3,), (1,))
    assert L(slice(None), 2) == Layout((2,), (3,))
    assert slice_and_offset((1, None), L) == (Layout((3,), (1,)), 3)
    H = Layout(((2, 3), 4), ((1, 2), 6))
    sub, off = slice_and_offset(((None, 1), None), H)
    assert sub == Layout((2, 4), (1, 6)) and off == 2


def test_modes():
    L = Layout((2, (3, 4), 5))
    assert L[1] == Layout((3, 4), (2, 6)) and L[1, 0] == Layout(3, 2) == get(L, 1, 0)
    assert [str(m) for m in L] == ["2:1", "(3,4):(2,6)", "5:24"]
    assert len(L) == rank(L) == 3 and depth(L) == 2
    assert shape(L, 1) == (3, 4) and stride(L, 2) == 24 and size(L, 1) == 12
    assert select(L, 2, 0) == Layout((5, 2), (24, 1))
    assert take(L, 1, 3) == Layout(((3, 4), 5), ((2, 6), 24))
    assert append(Layout(4, 1), Layout(3, 4)) == Layout((4, 3), (1, 4))
    assert append(Layout((4, 3)), n=4) == Layout((4, 3, 1, 1), (1, 4, 0, 0))
    assert prepend(Layout(4, 1), Layout(2, 8)) == Layout((2, 4), (8, 1))
    assert replace(L, 1, Layout(7, 9)) == Layout((2, 7, 5), (1, 9, 24))
    assert group_modes(Layout((2, 3, 4, 5)), 1, 3) == Layout((2, (3, 4), 5), (1, (2, 6), 24))
    assert flatten(L) == Layout((2, 3, 4, 5), (1, 2, 6, 24))
    assert unflatten(flatten(L), L.shape) == L
    assert transpose(Layout((2, 3), (3, 1))) == Layout((3, 2), (1, 3))
    with pytest.raises(LayoutError, match="rank 3"):
        transpose(L)


def test_concatenation_and_construction():
    assert make_layout(Layout(2, 3), Layout(4, 1)) == Layout((2, 4), (3, 1))
    assert make_layout(Layout(2, 3)) == Layout((2,), (3,))
    assert make_ordered_layout((2, 3, 4), (1, 0, 2)) == Layout((2, 3, 4), (3, 1, 6))
    assert make_layout_like(Layout((2, 2, 2, 2), (0, 2, 4, 1))) == \
        Layout((2, 2, 2, 2), (0, 2, 4, 1))
    with pytest.raises(LayoutError, match="not congruent"):
        Layout((2, 3), (1, (2, 3)))


def test_equality_and_hashing():
    a, b = Layout((2, 3)), Layout((2, 3), (1, 2))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert Layout((2, 3)) != Layout((2, 3), (3, 1))
    assert Layout(4) != Layout((4,))


def test_print_layout_grid():
    assert layout_to_text(Layout((2, 3), (3, 1))) == "\n".join([
        "(2,3):(3,1)",
        "      0   1   2 ",
        "    +---+---+---+",
        " 0  | 0 | 1 | 2 |",
        "    +---+---+---+",
        " 1  | 3 | 4 | 5 |",
        "    +---+---+---+"])
    assert layout_to_text(Layout(4, 3)).splitlines()[3] == " 0  |  0 |  3 |  6 |  9 |"
    with pytest.raises(LayoutError, match="rank 3"):
        layout_to_text(Layout((2, 2, 2)))

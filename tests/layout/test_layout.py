"""Layouts: construction, evaluation, slicing, modes, equality and printing."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moye import (GenColMajor, GenRowMajor, Layout, LayoutError, append, cosize, depth, flatten,
                  get, group_modes, layout_to_text, make_layout, make_layout_like,
                  make_ordered_layout, prepend, print_layout, rank, replace, select, shape, size,
                  slice_and_offset, stride, take, transpose, unflatten)
from moye.layout import inttuple as T

from .strategies import (all_coords, flat_modes, image, layouts, scaled, shapes, signed_layouts)


# -- construction ------------------------------------------------------------------

@scaled(75)
@given(shapes())
def test_the_default_stride_is_compact_column_major(s):
    L = Layout(s)
    assert L.stride == T.compact_col_major(s)
    assert L == make_layout(s) == make_layout(s, GenColMajor) == Layout(s, GenColMajor)
    assert image(L) == list(range(size(L)))            # the identity on 1-D indices
    R = make_layout(s, GenRowMajor)
    assert R.stride == T.compact_row_major(s)
    assert sorted(image(R)) == list(range(size(R)))


def test_construction_examples():
    assert str(Layout((4, 3))) == "(4,3):(1,4)"
    assert str(Layout((4, 1))) == "(4,1):(1,0)"          # static size-1 modes get stride 0
    assert str(Layout((1, (4, 1), 2))) == "(1,(4,1),2):(0,(1,0),4)"
    assert str(Layout((2, 3), GenRowMajor)) == "(2,3):(3,1)"
    assert str(make_layout((2, (3, 4)), GenRowMajor)) == "(2,(3,4)):(12,(4,1))"
    assert str(Layout([2, [3, 4]], [1, [2, 6]])) == "(2,(3,4)):(1,(2,6))"   # lists are tuples
    assert Layout(4) != Layout((4,))
    with pytest.raises(LayoutError, match=r"shape \(2,3\) and stride \(1,\(2,3\)\) are not "
                                          "congruent"):
        Layout((2, 3), (1, (2, 3)))
    with pytest.raises(TypeError, match="make_layout to concatenate"):
        Layout(Layout(4))


def test_concatenation_and_ordered_construction():
    assert make_layout(Layout(2, 3), Layout(4, 1)) == Layout((2, 4), (3, 1))
    assert make_layout(Layout(2, 3)) == Layout((2,), (3,))
    assert make_layout(Layout((2, 2)), Layout(3, 4), Layout(1, 0)) == \
        Layout(((2, 2), 3, 1), ((1, 2), 4, 0))
    # CuTe's comments on make_ordered_layout / make_layout_like (layout.hpp)
    assert make_ordered_layout((2, 2, 2, 2), (0, 2, 3, 1)) == Layout((2, 2, 2, 2), (1, 4, 8, 2))
    assert make_ordered_layout((2, 3, 4), (1, 0, 2)) == Layout((2, 3, 4), (3, 1, 6))
    assert make_layout_like(Layout((2, 2, 2, 2), (0, 2, 4, 1))) == \
        Layout((2, 2, 2, 2), (0, 2, 4, 1))
    assert make_layout_like(Layout((2, 3, 4, 5), (0, 42, 1, 0))) == \
        Layout((2, 3, 4, 5), (0, 4, 1, 0))


@scaled(75)
@given(layouts())
def test_make_layout_like_is_compact_in_the_same_stride_order(L):
    R = make_layout_like(L)
    assert R.shape == L.shape
    fl, fr = flat_modes(L), flat_modes(R)
    for (s, d), (_, e) in zip(fl, fr):
        if d == 0:
            assert e == 0                                  # static 0 strides are kept
    live = [(d, e) for (s, d), (_, e) in zip(fl, fr) if d != 0 and s != 1]
    for d1, e1 in live:                                    # the stride order is kept
        for d2, e2 in live:
            if d1 < d2:
                assert e1 < e2


# -- evaluation ----------------------------------------------------------------------

@scaled(75)
@given(signed_layouts())
def test_one_d_r_d_and_h_d_coordinates_agree(L):
    for i, h in enumerate(all_coords(L.shape)):
        expect = sum(c * d for c, d in zip(T.flatten_to_tuple(h), T.flatten_to_tuple(L.stride)))
        assert L(i) == L(h) == expect
        if type(L.shape) is tuple:
            r = tuple(T.coord_to_index(c, s) for c, s in zip(h, L.shape))
            assert L(r) == L(*r) == expect


@scaled(75)
@given(signed_layouts(), st.integers(1, 40))
def test_indices_past_the_size_extend_the_last_mode(L, k):
    n, flat = size(L), flat_modes(L)
    i = n + k
    # the last flat mode takes the whole quotient (CuTe's crd2idx does not wrap it)
    q, expect = i, 0
    for s, d in flat[:-1]:
        expect += (q % s) * d
        q //= s
    expect += q * flat[-1][1]
    assert L(i) == expect


@scaled(75)
@given(signed_layouts())
def test_cosize_and_size(L):
    img = image(L)
    assert size(L) == len(img) == T.product(L.shape) == L.size()
    assert cosize(L) == 1 + sum((s - 1) * abs(d) for s, d in flat_modes(L)) == L.cosize()
    if all(d >= 0 for _, d in flat_modes(L)):
        assert max(img) + 1 == cosize(L)


def test_evaluation_examples():
    L = Layout((2, (2, 2)), (4, (1, 2)))
    assert (L(5), L(1, 2), L(1, (0, 1)), L((1, (0, 1)))) == (6, 6, 6, 6)
    assert [Layout((2, 3), (3, 1))(i) for i in range(6)] == [0, 3, 1, 4, 2, 5]
    assert Layout((3, 4), (1, -3))(2, 3) == -7
    with pytest.raises(LayoutError, match=r"coordinate \(1,2,0\) does not fit shape \(2,3\)"):
        Layout((2, 3))(1, 2, 0)


# -- slicing ---------------------------------------------------------------------------

@scaled(75)
@given(layouts(), st.data())
def test_slicing_keeps_the_free_modes_and_offsets_by_the_fixed_ones(L, data):
    if type(L.shape) is not tuple:
        assert L(None) == L and slice_and_offset(None, L) == (L, 0)
        return
    # fix a random subset of the top-level modes
    coord = tuple(None if data.draw(st.booleans()) else data.draw(st.integers(0, size(m) - 1))
                  for m in L)
    sub, off = slice_and_offset(coord, L)
    free = [i for i, c in enumerate(coord) if c is None]
    assert sub.shape == tuple(L.shape[i] for i in free)
    assert sub.stride == tuple(L.stride[i] for i in free)
    if free:
        assert L(*coord) == sub == L(coord)
    # every coordinate of the slice is a coordinate of L with the fixed values
    for h in all_coords(sub.shape):
        full, it = [], iter(h)
        for c in coord:
            full.append(next(it) if c is None else c)
        assert sub(h) + off == L(tuple(full))


def test_slicing_examples():
    L = Layout((2, 3), (3, 1))
    assert L(1, None) == Layout((3,), (1,)) and str(L(1, None)) == "(3):(1)"
    assert L(slice(None), 2) == Layout((2,), (3,))
    assert slice_and_offset((1, None), L) == (Layout((3,), (1,)), 3)
    H = Layout(((2, 3), 4), ((1, 2), 6))
    # CuTe's slice flattens one level per tuple in the coordinate
    assert slice_and_offset(((None, 1), None), H) == (Layout((2, 4), (1, 6)), 2)
    assert slice_and_offset(((None, None), 2), H) == (Layout((2, 3), (1, 2)), 12)
    assert slice_and_offset((None, 3), H) == (Layout(((2, 3),), ((1, 2),)), 18)
    assert slice_and_offset((1, None), Layout(((2, 3), 4), ((1, 2), 6))) == \
        (Layout((4,), (6,)), 1)
    with pytest.raises(LayoutError, match="only the full slice"):
        L(slice(0, 1), 1)


# -- modes -------------------------------------------------------------------------------

def test_modes():
    L = Layout((2, (3, 4), 5))
    assert L[1] == Layout((3, 4), (2, 6)) and L[1, 0] == Layout(3, 2) == get(L, 1, 0)
    assert L[-1] == Layout(5, 24) and get(L) == L
    assert [str(m) for m in L] == ["2:1", "(3,4):(2,6)", "5:24"]
    assert len(L) == rank(L) == 3 and depth(L) == 2 and rank(L, 1) == 2 and depth(L, 0) == 0
    assert shape(L, 1) == (3, 4) and stride(L, 2) == 24 and size(L, 1) == 12
    assert shape(L, 1, 0) == 3 and stride(L, 1, 1) == 6 and cosize(L, 1) == 23
    assert select(L, 2, 0) == Layout((5, 2), (24, 1)) == select(L, [2, 0])
    assert take(L, 1, 3) == Layout(((3, 4), 5), ((2, 6), 24))
    assert flatten(L) == Layout((2, 3, 4, 5), (1, 2, 6, 24))
    assert unflatten(flatten(L), L.shape) == L
    assert transpose(Layout((2, 3), (3, 1))) == Layout((3, 2), (1, 3))
    # a rank-1 int layout is its own only mode
    M = Layout(4, 2)
    assert M[0] == M and list(M) == [M] and len(M) == 1 and depth(M) == 0
    with pytest.raises(IndexError):
        M[1]
    with pytest.raises(IndexError):
        L[3]
    with pytest.raises(LayoutError, match=r"transpose: layout \(2,\(3,4\),5\):\(1,\(2,6\),24\) "
                                          "has rank 3"):
        transpose(L)


def test_append_prepend_replace_group():
    L = Layout((2, (3, 4), 5))
    assert append(Layout(4, 1), Layout(3, 4)) == Layout((4, 3), (1, 4))
    assert append(Layout((4, 3))) == Layout((4, 3, 1), (1, 4, 0))          # default 1:0
    assert append(Layout((4, 3)), n=4) == Layout((4, 3, 1, 1), (1, 4, 0, 0))
    assert append(Layout((4, 3)), n=2) == Layout((4, 3))                   # already rank 2
    assert append(Layout(4), Layout(2, 9), n=3) == Layout((4, 2, 2), (1, 9, 9))
    assert prepend(Layout(4, 1), Layout(2, 8)) == Layout((2, 4), (8, 1))
    assert prepend(Layout((4, 3)), n=3) == Layout((1, 4, 3), (0, 1, 4))
    assert replace(L, 1, Layout(7, 9)) == Layout((2, 7, 5), (1, 9, 24))
    assert group_modes(Layout((2, 3, 4, 5)), 1, 3) == Layout((2, (3, 4), 5), (1, (2, 6), 24))
    assert group_modes(Layout((2, 3, 4, 5)), 2) == Layout((2, 3, (4, 5)), (1, 2, (6, 24)))


@scaled(75)
@given(layouts())
def test_flatten_and_group_keep_the_function(L):
    F = flatten(L)
    assert depth(F) <= 1 and image(F) == image(L)
    assert unflatten(F, L.shape) == L
    if type(L.shape) is tuple and len(L) >= 2:
        G = group_modes(L, 0, 2)
        assert len(G) == len(L) - 1 and image(G) == image(L)


# -- equality and hashing --------------------------------------------------------------

@scaled(75)
@given(layouts())
def test_equality_is_structural(L):
    same = Layout(L.shape, L.stride)
    assert L == same and hash(L) == hash(same) and not (L != same)
    assert len({L, same}) == 1
    assert L != Layout((L.shape, 1), (L.stride, 0))          # a different shape, same function


def test_equality_examples():
    a, b = Layout((2, 3)), Layout((2, 3), (1, 2))
    assert a == b and hash(a) == hash(b)
    assert Layout((2, 3)) != Layout((2, 3), (3, 1))
    assert Layout(4) != Layout((4,)) and Layout(4) != "4:1" and Layout(4) != (4, 1)
    assert {Layout(4): 1}[Layout(4, 1)] == 1


# -- printing ----------------------------------------------------------------------------

def test_str_like_cute():
    assert str(Layout((2, (2, 2)), (4, (1, 2)))) == "(2,(2,2)):(4,(1,2))"
    assert str(Layout(4)) == "4:1"
    assert str(Layout((4,))) == "(4):(1)"                    # a rank-1 tuple vs an int
    assert str(Layout(((4,),))) == "((4)):((1))"
    assert str(Layout((2, (3,)), (5, (7,)))) == "(2,(3)):(5,(7))"
    assert repr(Layout((2, 3))) == "(2,3):(1,2)"
    assert str(Layout((3, 4), (1, -3))) == "(3,4):(1,-3)"


def test_print_layout_matches_cute():
    # CuTe's print_layout: cells num_digits(cosize)+2 wide
    text = "\n".join([
        "(2,3):(3,1)",
        "      0   1   2 ",
        "    +---+---+---+",
        " 0  | 0 | 1 | 2 |",
        "    +---+---+---+",
        " 1  | 3 | 4 | 5 |",
        "    +---+---+---+"])
    assert layout_to_text(Layout((2, 3), (3, 1))) == text
    # two-digit offsets widen every cell; a nested mode is drawn by its 1-D index
    assert layout_to_text(Layout((2, (2, 2)), (1, (2, 8)))) == "\n".join([
        "(2,(2,2)):(1,(2,8))",
        "       0    1    2    3 ",
        "    +----+----+----+----+",
        " 0  |  0 |  2 |  8 | 10 |",
        "    +----+----+----+----+",
        " 1  |  1 |  3 |  9 | 11 |",
        "    +----+----+----+----+"])


def test_print_layout_of_a_rank_1_layout_is_one_row(capsys):
    # CuTe only draws rank-2 layouts; moye draws a rank-1 layout as one row
    text = "\n".join([
        "4:3",
        "       0    1    2    3 ",
        "    +----+----+----+----+",
        " 0  |  0 |  3 |  6 |  9 |",
        "    +----+----+----+----+"])
    assert layout_to_text(Layout(4, 3)) == text
    assert layout_to_text(Layout((3,), (1,))) == "\n".join([
        "(3):(1)",
        "      0   1   2 ",
        "    +---+---+---+",
        " 0  | 0 | 1 | 2 |",
        "    +---+---+---+"])
    print_layout(Layout(4, 3))
    assert capsys.readouterr().out == text + "\n"
    with pytest.raises(LayoutError, match=r"print_layout: layout \(2,2,2\):\(1,2,4\) has rank 3"):
        layout_to_text(Layout((2, 2, 2)))


# -- CuTe's coordinate members -------------------------------------------------------------

def test_get_hier_coord_is_the_coordinate_of_an_offset():
    L = Layout((2, 3), (3, 1))
    assert L.get_hier_coord(1) == (0, 1)
    for i in range(6):
        assert L(L.get_hier_coord(i)) == i       # CuTe: @post crd2idx(result, shape, stride) == idx


def test_get_flat_coord_is_one_index_per_top_level_mode():
    assert Layout(((2, 2), 3)).get_flat_coord(5) == (1, 1)
    assert Layout((2, 3), (3, 1)).get_flat_coord(1) == (0, 1)

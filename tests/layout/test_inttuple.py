"""Int tuples: CuTe's IntTuple functions (int_tuple.hpp, stride.hpp)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import moye
from moye import LayoutError
from moye.layout import inttuple as T

from .strategies import (all_coords, divisors, int_tuples, scaled, shapes)


def test_the_public_int_tuple_functions_are_the_module_ones():
    for name in ("product", "shape_div", "ceil_div", "prefix_product", "compact_col_major",
                 "compact_row_major", "compact_order", "congruent", "compatible",
                 "weakly_congruent", "elem_less", "colex_less", "increment", "coord_to_index",
                 "index_to_coord", "coord_to_coord"):
        assert getattr(moye, name) is getattr(T, name), name
    assert moye.flatten((1, (2, (3,)))) == (1, 2, 3)         # flatten works on tuples too
    assert moye.flatten(5) == 5


# -- coordinates ------------------------------------------------------------------

@scaled(75)
@given(shapes())
def test_index_to_coord_and_coord_to_index_walk_colex_order(shape):
    coords = list(all_coords(shape))
    assert len(coords) == T.product(shape)
    for i, c in enumerate(coords):
        assert T.index_to_coord(i, shape) == c
        assert T.coord_to_index(c, shape) == i
        assert T.congruent(c, shape)


@scaled(75)
@given(shapes())
def test_increment_visits_every_coordinate_in_colex_order(shape):
    coords = list(all_coords(shape))
    c = coords[0]
    assert c == T.repeat_like(shape, 0)
    for expect in coords[1:]:
        c = T.increment(c, shape)
        assert c == expect
    # CuTe does not wrap the last mode: one past the end is (0,...,0,n)
    if type(shape) is tuple:
        end = T.increment(c, shape)
        assert T.flatten_to_tuple(end)[:-1] == (0,) * (len(T.flatten_to_tuple(shape)) - 1)
        assert T.flatten_to_tuple(end)[-1] == T.flatten_to_tuple(shape)[-1]


@scaled(75)
@given(shapes(), st.data())
def test_colex_order_is_the_index_order(shape, data):
    coords = list(all_coords(shape))
    i = data.draw(st.integers(0, len(coords) - 1))
    j = data.draw(st.integers(0, len(coords) - 1))
    assert T.colex_less(coords[i], coords[j]) == (i < j)
    if type(shape) is tuple:
        fi, fj = T.flatten(coords[i]), T.flatten(coords[j])
        assert T.colex_less(fi, fj) == (i < j)
        # lex order of the reversed coordinates is colex order
        assert T.lex_less(fi[::-1], fj[::-1]) == (i < j)


@scaled(75)
@given(shapes(tuple_top=True))
def test_every_coordinate_is_elementwise_below_the_shape(shape):
    for c in all_coords(shape):
        assert T.elem_less(c, shape)
    flat = T.flatten(shape)
    for k in range(len(flat)):             # reaching an extent in any mode is out of bounds
        at_extent = tuple(flat[k] if j == k else 0 for j in range(len(flat)))
        assert not T.elem_less(at_extent, flat)


def test_order_relations_on_ragged_tuples():
    # CuTe: elem_less is true when a runs out first, colex/lex compare from the end/start
    assert T.elem_less((1, 2), (2, 3)) and not T.elem_less((1, 3), (2, 3))
    assert T.elem_less((1,), (2, 3)) and not T.elem_less((1, 2, 3), (2, 3))
    assert T.colex_less((3, 0), (0, 1)) and not T.colex_less((0, 1), (3, 0))
    # ragged colex compares the last elements first; a shorter, equal tail is less
    assert T.colex_less((1,), (0, 1)) and not T.colex_less((5,), (0, 1))
    assert not T.colex_less((0, 1), (0, 1))
    assert T.lex_less((0, 3), (1, 0)) and T.lex_less((1,), (1, 0))
    assert T.colex_less(((1, 0), 2), ((0, 1), 2))        # hierarchical: last mode first


@scaled(75)
@given(shapes())
def test_coord_to_coord_through_the_index_and_mode_by_mode(a):
    n = T.product(a)
    for i, c in enumerate(all_coords(a)):
        # to an int shape: the 1-D index; and back
        assert T.coord_to_coord(c, a, n) == i
        assert T.coord_to_coord(i, n, a) == c
        if type(a) is tuple:
            # equal ranks: CuTe's crd2crd converts mode by mode
            r = T.coord_to_coord(c, a, T.product_each(a))
            assert r == tuple(T.coord_to_index(ci, ai) for ci, ai in zip(c, a))
            assert T.coord_to_coord(r, T.product_each(a), a) == c


@scaled(75)
@given(shapes(tuple_top=True))
def test_index_to_coord_with_strides_inverts_a_compact_layout(shape):
    row = T.compact_row_major(shape)
    col = T.compact_col_major(shape)
    for i in range(T.product(shape)):
        # CuTe's idx2crd(i, shape, stride): the coordinate whose offset is i
        assert T.crd2idx(T.index_to_coord(i, shape, row), shape, row) == i
        assert T.index_to_coord(i, shape, col) == T.index_to_coord(i, shape)


def test_coordinate_examples():
    assert T.index_to_coord(7, (2, (2, 3))) == (1, (1, 1))
    assert T.coord_to_index((1, (1, 1)), (2, (2, 3))) == 7
    assert T.coord_to_index((1, 2), (2, 3), (3, 1)) == 5
    assert T.coord_to_index((1, 1), ((2, 2), 3)) == 5      # an int coordinate per mode
    assert T.coord_to_coord((1, 2), (2, 3), ((2, 3),)) == ((1, 2),)
    assert T.coord_to_coord(5, 6, (2, 3)) == (1, 2)
    assert T.increment((1, 0), (2, 3)) == (0, 1)
    assert T.index_to_coord(5, (2, 3), (3, 1)) == (1, 2)    # idx2crd with strides
    assert T.index_to_coord(5, (1, 6), (4, 1)) == (0, 5)    # size-1 modes give coordinate 0


def test_the_last_mode_is_not_wrapped():
    # CuTe extends indices past the size through the last mode
    assert T.index_to_coord(7, (2, 2)) == (1, 3)
    assert T.index_to_coord(13, (2, (2, 3))) == (1, (0, 3))
    assert T.crd2idx(7, (2, 2), (1, 10)) == 31


def test_coordinates_that_do_not_fit_are_rejected():
    with pytest.raises(LayoutError, match=r"coordinate \(1,2,0\) does not fit shape \(2,3\)"):
        T.coord_to_index((1, 2, 0), (2, 3))
    with pytest.raises(LayoutError, match="does not fit"):
        T.crd2idx((1, (0, 1)), (2, 3), (1, 2))


# -- structure ------------------------------------------------------------------------

@scaled(75)
@given(int_tuples())
def test_flatten_unflatten_roundtrip(t):
    flat = T.flatten(t)
    assert T.depth(flat) <= 1
    assert T.unflatten(flat, t) == t
    assert T.product(flat) == T.product(t)
    assert T.rank(t) == (len(t) if type(t) is tuple else 1)


@scaled(75)
@given(int_tuples())
def test_congruence(t):
    zeros = T.repeat_like(t, 0)
    assert T.congruent(t, zeros) and T.congruent(zeros, t)
    assert T.weakly_congruent(t, t)
    assert T.weakly_congruent(0, t)                 # an int is coarser than anything
    if type(t) is tuple:
        assert T.weakly_congruent(tuple(0 for _ in t), t)
        assert not T.congruent(t, 0) and not T.weakly_congruent(t, 0)
        assert not T.congruent(t, t + (0,))


@scaled(75)
@given(shapes())
def test_compatibility(s):
    assert T.compatible(s, s)
    assert T.compatible(T.product(s), s)
    if type(s) is tuple:
        assert T.compatible(T.product_each(s), s)
        assert not T.compatible(s, T.product(s))
    assert not T.compatible(T.product(s) + 1, s)


def test_congruence_and_compatibility_examples():
    assert T.congruent((2, (3, 4)), (5, (6, 7)))
    assert not T.congruent((2, 3), (2, (3,)))
    assert T.weakly_congruent(2, (3, 4)) and T.weakly_congruent((1, 2), ((3, 4), 5))
    assert not T.weakly_congruent((1, 2), (3, 4, 5))
    assert T.compatible(24, ((2, 3), 4)) and T.compatible((6, 4), ((2, 3), 4))
    assert not T.compatible((4, 6), ((2, 3), 4))
    assert not T.compatible((6, 4), (6, 4, 1))


@scaled(75)
@given(shapes())
def test_prefix_product_is_the_exclusive_running_product(s):
    flat = T.flatten_to_tuple(s)
    pre = T.flatten_to_tuple(T.prefix_product(s))
    assert pre == tuple(T.product(flat[:k]) for k in range(len(flat)))
    assert T.congruent(T.prefix_product(s), s)


@scaled(75)
@given(shapes())
def test_compact_major_strides(s):
    col, row = T.compact_col_major(s), T.compact_row_major(s)
    assert T.congruent(col, s) and T.congruent(row, s)
    flat, fcol, frow = T.flatten_to_tuple(s), T.flatten_to_tuple(col), T.flatten_to_tuple(row)
    pre = T.flatten_to_tuple(T.prefix_product(s))
    rpre = tuple(T.product(flat[k + 1:]) for k in range(len(flat)))
    for k, n in enumerate(flat):
        # static size-1 modes get stride 0 (CuTe's compact_major)
        assert fcol[k] == (0 if n == 1 else pre[k])
        assert frow[k] == (0 if n == 1 else rpre[k])
    n = T.product(s)
    assert [T.crd2idx(c, s, col) for c in all_coords(s)] == list(range(n))
    assert sorted(T.crd2idx(c, s, row) for c in all_coords(s)) == list(range(n))


@scaled(75)
@given(shapes(tuple_top=True, max_depth=1), st.data())
def test_compact_order_lays_modes_out_by_increasing_order(s, data):
    order = tuple(data.draw(st.integers(0, 3)) for _ in s)
    d = T.compact_order(s, order)
    # each mode starts at the product of the modes of strictly lower order
    # (CuTe's detail::compact_order: equal orders share a starting stride)
    for i, (n, o) in enumerate(zip(s, order)):
        below = T.product(tuple(m for m, p in zip(s, order) if p < o))
        assert d[i] == (0 if n == 1 else below)
    if len(set(order)) == len(order):      # distinct orders: a bijection onto [0, size)
        assert sorted(T.crd2idx(c, s, d) for c in all_coords(s)) == list(range(T.product(s)))


def test_compact_order_examples():
    # CuTe's comments in stride.hpp / layout.hpp
    assert T.compact_order((2, 2, 2, 2), (0, 2, 3, 1)) == (1, 4, 8, 2)
    assert T.compact_order((2, 3, 4), (1, 0, 2)) == (3, 1, 6)
    assert T.compact_order((2, (3, 4)), (1, (0, 2))) == (3, (1, 6))
    assert T.compact_order((2, 3), T.GenRowMajor) == (3, 1)
    assert T.compact_order((2, 3), T.GenColMajor) == (1, 2)


def test_prefix_product_and_compact_major_examples():
    assert T.prefix_product((2, (3, 4), 5)) == (1, (2, 6), 24)
    assert T.compact_col_major((2, (3, 1), 4)) == (1, (2, 0), 6)
    assert T.compact_row_major((2, (3, 4))) == (12, (4, 1))
    assert T.compact_col_major(5) == 1 and T.compact_col_major(1) == 0


# -- division ---------------------------------------------------------------------------

@scaled(75)
@given(shapes(tuple_top=True), st.data())
def test_shape_div_by_a_prefix_divisor(s, data):
    """Dividing by (a prefix of the flat shape) * (a divisor of the next mode)
    removes exactly that many elements, left to right."""
    flat = T.flatten(s)
    k = data.draw(st.integers(0, len(flat) - 1))
    b = T.product(flat[:k]) * data.draw(st.sampled_from(divisors(flat[k])))
    q = T.shape_div(flat, b)
    assert T.product(q) * b == T.product(flat)
    assert q[:k] == (1,) * k and q[k + 1:] == flat[k + 1:]
    assert T.ceil_div(flat, b) == q                 # exact division: ceil_div agrees


@scaled(75)
@given(st.integers(0, 200), st.integers(1, 64))
def test_ceil_div_of_ints(a, b):
    assert T.ceil_div(a, b) == -(-a // b)


@scaled(75)
@given(shapes(tuple_top=True, max_depth=1), st.integers(1, 64))
def test_ceil_div_folds_the_divisor_across_the_modes(s, b):
    # CuTe: ceil_div((a0, a1, ...), b) = (ceil(a0/b), ceil_div((a1, ...), ceil(b/a0)))
    q, rest = [], b
    for a in s:
        q.append(-(-a // rest))
        rest = -(-rest // a)
    assert T.ceil_div(s, b) == tuple(q)


def test_shape_div_and_ceil_div_examples():
    assert T.shape_div((4, 5, 6), 40) == (1, 1, 3)            # CuTe's own example
    assert T.shape_div(12, 4) == 3 and T.shape_div(4, 12) == 1
    assert T.shape_div((6, 8), (2, 4)) == (3, 2)
    assert T.shape_div(24, (2, 3)) == 4
    assert T.shape_div((2, 6), 4) == (1, 3)                  # 4/2 = 2 carries to the next mode
    assert T.ceil_div((4, 5, 6), 40) == (1, 1, 3)
    assert T.ceil_div(10, 4) == 3 and T.ceil_div(12, 4) == 3
    assert T.ceil_div((10, 9), (4,)) == (3, 9)                # missing modes divide by 1
    assert T.ceil_div((3, 4), 2) == (2, 4)                    # logical_divide((3,4):(1,10),2)
    assert T.ceil_div(7, (2, 2)) == 2
    assert T.ceil_div((2, 2), 3) == (1, 1)                    # folded: does not cover 4


def test_shape_div_checks_divisibility_when_static():
    with pytest.raises(LayoutError, match="divisibility condition fails for 6 and 4"):
        T.shape_div(6, 4)
    with pytest.raises(LayoutError, match="divisibility condition fails for 6 and 4"):
        T.shape_div((6, 4), 4)                    # folded across the modes: 6 vs 4 first
    with pytest.raises(LayoutError, match="ranks"):
        T.shape_div((6, 4), (2, 2, 1))

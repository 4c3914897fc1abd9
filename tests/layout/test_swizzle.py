"""Swizzles and composed layouts."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moye import (ComposedLayout, Layout, LayoutError, Swizzle, blocked_product, coalesce,
                  composition, cosize, downcast, logical_divide, size, tiled_divide, upcast,
                  zipped_divide)
from moye.layout import inttuple as T

swizzles = st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(-5, 5)).filter(
    lambda t: abs(t[2]) >= t[0]).map(lambda t: Swizzle(*t))


@given(swizzles)
def test_swizzle_is_a_bijection_and_an_involution(sw):
    n = 1 << (sw.bits + sw.base + abs(sw.shift) + 1)
    out = [sw(i) for i in range(n)]
    assert sorted(out) == list(range(n))
    assert all(sw(sw(i)) == i for i in range(n))


def test_swizzle_bits():
    sw = Swizzle(3, 4, 3)
    assert sw.yyy_mask == 0b1110000000 and sw.zzz_mask == 0b0001110000
    assert sw(0b1000010000) == 0b1001010000
    with pytest.raises(LayoutError, match="at least B"):
        Swizzle(3, 0, 2)


def test_swizzled_8x8_rows_hit_distinct_banks():
    L = composition(Swizzle(3, 0, 3), Layout((8, 8), (8, 1)))
    assert str(L) == "Sw<3,0,3> o 0 o (8,8):(8,1)"
    for col in range(8):                          # each column spread over all 8 slots
        assert sorted(L(r, col) % 8 for r in range(8)) == list(range(8))


@given(swizzles, st.sampled_from([(8, 8), (4, 16), (16, 4)]))
def test_operations_pass_through_to_the_inner_layout(sw, shape):
    inner = Layout(shape, (shape[1], 1))
    C = composition(sw, inner)
    assert isinstance(C, ComposedLayout) and size(C) == size(inner) == size(C.inner)
    assert cosize(C) == cosize(inner)
    for op, arg in ((logical_divide, (2, 2)), (zipped_divide, (2, 4)), (tiled_divide, (4, 2)),
                    (blocked_product, Layout((1, 2))), (composition, Layout(4, 2))):
        R = op(C, arg)
        assert isinstance(R, ComposedLayout) and R.outer == sw
        plain = op(inner, arg)
        assert R.inner == plain
        assert [R(i) for i in range(size(R))] == [sw(plain(i)) for i in range(size(plain))]


def test_slicing_a_composed_layout_accumulates_the_offset():
    C = composition(Swizzle(2, 0, 2), Layout((4, 4), (4, 1)))
    row = C(2, None)
    assert isinstance(row, ComposedLayout) and row.offset == 8
    assert [row(i) for i in range(4)] == [C(2, j) for j in range(4)]


def test_upcast_and_downcast_of_swizzles():
    assert Swizzle(3, 4, 3).upcast(8) == Swizzle(3, 1, 3)
    assert Swizzle(3, 1, 3).downcast(8) == Swizzle(3, 4, 3)
    assert Swizzle(3, 1, 3).upcast(8) == Swizzle(1, 0, 3)
    C = composition(Swizzle(3, 4, 3), Layout((8, 64), (64, 1)))
    U = upcast(C, 8)
    assert U.outer == Swizzle(3, 1, 3) and U.inner == Layout((8, 8), (8, 1))
    assert downcast(U, 8).outer == Swizzle(3, 4, 3)

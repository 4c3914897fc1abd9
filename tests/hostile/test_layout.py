"""Hostile inputs to the layout algebra: extents, tilers, factors and
divisors that are zero or negative, negative strides where an operation needs
positive ones, and values that pass for ints but are not. Negative strides
in a plain layout, and a layout evaluated past its size, are CuTe's and
must keep working (the ordinary tests at the end)."""
import numpy as np
import pytest

from moye import (BoundsError, Layout, LayoutError, MoyeTypeError, Swizzle, ceil_div, complement,
                  composition, downcast, left_inverse, logical_divide, logical_product,
                  make_ordered_layout, recast_layout, right_inverse, shape_div, tile_to_shape,
                  upcast, zipped_divide)

from .hostile import Hostile, check, ids

CASES = [
    Hostile("a negative extent", lambda: Layout(-3), LayoutError, r"shape -3 has the extent -3"),
    Hostile("a zero extent in a mode", lambda: Layout((4, 0)), LayoutError,
            r"shape \(4,0\) has the extent 0"),
    Hostile("a zero extent deep in a nested shape", lambda: Layout((2, (3, 0)), (1, (2, 6))),
            LayoutError, r"shape \(2,\(3,0\)\) has the extent 0"),
    Hostile("a NumPy array as a shape", lambda: Layout(np.array([2, 3])), MoyeTypeError,
            r"Layout shape: expected an integer, got .* ndarray of shape \(2,\)"),
    Hostile("a float extent", lambda: Layout(3.0), MoyeTypeError, r"got 3\.0 of type float"),
    Hostile("a bool extent", lambda: Layout(True), MoyeTypeError, r"got True of type bool"),
    Hostile("a float stride", lambda: Layout(4, 2.5), MoyeTypeError,
            r"Layout stride: expected an integer, got 2\.5"),
    Hostile("a Layout as a shape", lambda: Layout(Layout(4)), MoyeTypeError,
            r"shape must be an int tuple, got a Layout"),
    Hostile("a stride not congruent with the shape", lambda: Layout((2, 3), (1,)), LayoutError,
            r"shape \(2,3\) and stride \(1\) are not congruent"),
    Hostile("a float swizzle parameter", lambda: Swizzle(3.0, 0, 3), MoyeTypeError,
            r"Swizzle: B: expected an integer, got 3\.0"),
    Hostile("a negative swizzle base", lambda: Swizzle(3, -1, 3), LayoutError,
            r"Swizzle\(3,-1,3\): B and M must be >= 0"),
    Hostile("logical_divide by a tiler of 0", lambda: logical_divide(Layout(8), 0), LayoutError,
            r"logical_divide: the tiler must be positive, got 0"),
    Hostile("logical_divide by a negative tiler", lambda: logical_divide(Layout(8), -2),
            LayoutError, r"logical_divide: the tiler must be positive, got -2"),
    Hostile("zipped_divide with a zero mode in the tiler",
            lambda: zipped_divide(Layout((8, 4)), (4, 0)), LayoutError,
            r"the tiler must be positive, got 0"),
    Hostile("logical_divide by a float tiler", lambda: logical_divide(Layout(8), 2.5),
            MoyeTypeError, r"logical_divide: the tiler: expected a Layout, an int or a shape, "
                           r"got 2\.5"),
    Hostile("logical_divide by a tiler with a negative stride",
            lambda: logical_divide(Layout(8), Layout(4, -1)), LayoutError,
            r"complement: layout 4:-1 has the negative stride -1"),
    Hostile("logical_product by a tiler of 0", lambda: logical_product(Layout(4), 0),
            LayoutError, r"logical_product: the tiler must be positive, got 0"),
    Hostile("composition with a negative int", lambda: composition(Layout(8), -4), LayoutError,
            r"composition: the tiler must be positive, got -4"),
    Hostile("composition with a string", lambda: composition(Layout(8), "4"), MoyeTypeError,
            r"composition: cannot compose 8:1 with '4' of type str"),
    Hostile("upcast by 0", lambda: upcast(Layout((4, 8)), 0), LayoutError,
            r"upcast: the factor must be positive, got 0"),
    Hostile("downcast by a negative factor", lambda: downcast(Layout(8), -2), LayoutError,
            r"downcast: the factor must be positive, got -2"),
    Hostile("recast_layout to 0 bits", lambda: recast_layout(Layout(8), 16, 0), LayoutError,
            r"recast_layout: a bit width must be positive, got 0"),
    Hostile("ceil_div by 0", lambda: ceil_div(6, 0), LayoutError,
            r"ceil_div: the divisor 0 must be positive"),
    Hostile("shape_div by a negative int", lambda: shape_div((4, 6), -2), LayoutError,
            r"shape_div: the divisor -2 must be positive"),
    Hostile("complement within a negative cotarget", lambda: complement(Layout(4, 2), -8),
            LayoutError, r"complement: the cotarget -8 has the extent -8"),
    Hostile("complement of a layout with a negative stride",
            lambda: complement(Layout((4, 2), (1, -4)), 16), LayoutError,
            r"complement: layout \(4,2\):\(1,-4\) has the negative stride -4"),
    Hostile("left_inverse of a layout with a negative stride",
            lambda: left_inverse(Layout((4, 2), (-2, 1))), LayoutError,
            r"left_inverse: layout \(4,2\):\(-2,1\) has the negative stride -2"),
    Hostile("tile_to_shape to a target with a zero extent",
            lambda: tile_to_shape(Layout(2), (4, 0)), LayoutError,
            r"tile_to_shape: the target shape \(4,0\) has the extent 0"),
    Hostile("make_ordered_layout with a negative extent",
            lambda: make_ordered_layout((2, -2), (0, 1)), LayoutError,
            r"shape \(2,-2\) has the extent -2"),
    Hostile("a mode past the rank", lambda: Layout((2, 3))[5], BoundsError,
            r"layout \(2,3\):\(1,2\) has no mode 5 \(rank 2\)"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)


def test_negative_strides_are_legal_in_a_plain_layout():
    """CuTe allows negative strides: a reversed layout and its algebra."""
    L = Layout((3, 4), (-1, 3))
    assert [L(i) for i in range(12)] == [0, -1, -2, 3, 2, 1, 6, 5, 4, 9, 8, 7]
    assert logical_divide(Layout(8, -1), 2) == Layout((2, 4), (-1, -2))
    assert composition(Layout(8, -1), Layout(4, 2)) == Layout(4, -2)
    assert right_inverse(Layout(4, -1)) == Layout(1, 0)      # nothing it can invert


def test_a_layout_evaluated_past_its_size_extends_its_last_mode():
    """As in CuTe: an index past the size runs on along the last mode."""
    assert Layout((8, 4))(40) == 40
    assert Layout((2, 3), (3, 1))(7) == 6      # (1, 3): 1*3 + 3*1


def test_numpy_integers_pass_for_ints():
    L = Layout((np.int64(4), np.int32(2)), (np.int16(2), np.uint8(1)))
    assert L == Layout((4, 2), (2, 1)) and all(type(e) is int for e in L.shape + L.stride)
    assert Swizzle(np.int64(3), 0, 3) == Swizzle(3, 0, 3)
    assert logical_divide(Layout(8), np.int64(2)) == logical_divide(Layout(8), 2)

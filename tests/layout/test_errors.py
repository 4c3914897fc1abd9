"""Invalid inputs: where CuTe's static_asserts fire, moye raises LayoutError
(DynamicValueError where a static value is needed, see test_dynamic), and the
message names the layouts involved."""
import re

import pytest

from moye import (DynamicValueError, Layout, LayoutError, MoyeError, coalesce, complement,
                  composition, downcast, layout_to_text, left_inverse, logical_divide,
                  logical_product, raked_product, shape_div, tile_to_shape, transpose,
                  unflatten, upcast, zipped_divide)

L = Layout


def names(*things):
    """A regex matching a message that mentions each of `things` (in order)."""
    return ".*".join(re.escape(str(t)) for t in things)


def test_the_error_hierarchy():
    assert issubclass(LayoutError, MoyeError) and issubclass(LayoutError, ValueError)
    assert issubclass(DynamicValueError, LayoutError)


# -- complement ---------------------------------------------------------------------

def test_complement_of_a_non_injective_layout():
    # CuTe: static_assert "Non-injective Layout detected in complement."
    A = L((2, 2), (1, 1))
    with pytest.raises(LayoutError, match=names("complement: layout", A, "not injective")):
        complement(A)
    with pytest.raises(LayoutError, match=names(A)):
        complement(A, 64)


def test_complement_of_modes_that_do_not_nest():
    # injective, but 3 is not a multiple of 2*2: min_stride / result_stride = 3/4 = 0
    A = L((2, 2), (2, 3))
    with pytest.raises(LayoutError, match=names("complement: layout", A)):
        complement(A, 24)


# -- composition ------------------------------------------------------------------------

def test_composition_fails_the_stride_divisibility_condition():
    # rest_stride 6 vs curr_shape 4: neither 6 % 4 == 0 nor 6 < 4
    A, B = L((4, 6), (1, 10)), L(2, 6)
    with pytest.raises(LayoutError, match=names("composition:", A, "o", B, "stride divisibility")):
        composition(A, B)
    A2, B2 = L((2, 3), (2, 8)), L((2, 3), (3, 1))
    with pytest.raises(LayoutError, match=names("composition:", A2, "o", B2)):
        composition(A2, B2)


def test_composition_fails_the_shape_divisibility_condition():
    # 3 < 4 passes the stride condition; then min(ceil(4/3), 3) = 2 does not divide 3
    A, B = L((4, 6), (1, 10)), L(3, 3)
    with pytest.raises(LayoutError, match=names("composition:", A, "o", B, "shape divisibility")):
        composition(A, B)
    with pytest.raises(LayoutError, match=names("composition:", A, "o 6", "shape divisibility")):
        composition(A, 6)                                   # an int tiler is 6:1


def test_composition_that_coalesces_first_is_not_an_error():
    # (4,6):(1,4) coalesces to 24:1 before composing, so any B works
    assert composition(L((4, 6), (1, 4)), L(3, 2)) == L(3, 2)
    assert composition(L((4, 6), (1, 4)), L(5, 7)) == L(5, 7)


def test_divides_and_products_that_fail_composition():
    A = L((4, 6), (1, 10))
    with pytest.raises(LayoutError, match=names("composition:", A, "o", "shape divisibility")):
        logical_divide(A, 6)
    with pytest.raises(LayoutError, match=names(A)):
        zipped_divide(A, L(6))
    # complement(2:2, 6) = (2,2):(1,4), and (2,2):(1,4) o 3:1 fails in CuTe too
    with pytest.raises(LayoutError, match=names("composition:", L((2, 2), (1, 4)), "o", L(3, 1))):
        logical_product(L(2, 2), L(3, 1))


# -- tilers and ranks ----------------------------------------------------------------------

@pytest.mark.parametrize("op", [composition, logical_divide, zipped_divide, logical_product])
def test_a_tiler_with_too_many_modes(op):
    # CuTe: static_assert "Too many modes in tiler."
    A = L((4, 4))
    with pytest.raises(LayoutError, match=names("the tiler (2,2,2) has 3 modes but layout", A,
                                                "has only 2")):
        op(A, (2, 2, 2))


def test_a_coalesce_profile_with_too_many_modes():
    with pytest.raises(LayoutError, match=names("(1,1,1) has 3 modes but layout", L((4, 4)))):
        coalesce(L((4, 4)), (1, 1, 1))


def test_rank_mismatches():
    with pytest.raises(LayoutError, match=names("shape (2,3) and stride (1,(2,3))",
                                                "not congruent")):
        L((2, 3), (1, (2, 3)))
    with pytest.raises(LayoutError, match=names("coordinate (1,1,1) does not fit shape (2,3)")):
        L((2, 3))(1, 1, 1)
    with pytest.raises(LayoutError, match=names("coordinate (_,_,1) does not fit (2,3)")):
        L((2, 3))(None, None, 1)
    with pytest.raises(LayoutError, match=names("transpose: layout", L((2, 2, 2)), "rank 3")):
        transpose(L((2, 2, 2)))
    with pytest.raises(LayoutError, match=names("print_layout: layout", L((2, 2, 2)), "rank 3")):
        layout_to_text(L((2, 2, 2)))
    with pytest.raises(LayoutError, match=names("unflatten: (2,3,4) has 3 elements",
                                                "profile (0,0) has 2")):
        unflatten(L((2, 3, 4)), (0, 0))
    with pytest.raises(LayoutError, match="ranks"):
        shape_div((6, 4), (2, 2, 1))


def test_zip_of_modes_of_different_ranks():
    # raked_product zips (complement o tiler) = (2,2):(1,4) with the block 2:2;
    # CuTe's zip needs equal ranks there (tuple_size of an int does not compile)
    with pytest.raises(LayoutError, match=names(L((2, 2), (1, 4)), L(2, 2), "ranks differ")):
        raked_product(L(2, 2), L(4, 1))
    # '_' in a tiler keeps a mode that must already be (tile, rest)
    with pytest.raises(LayoutError, match=names("'_' must be rank 2", "(2,4,2)")):
        zipped_divide(L(((2, 4, 2), 6)), (None, 3))


def test_tile_to_shape_needs_a_block_that_divides_the_target():
    with pytest.raises(LayoutError, match=names("tile_to_shape: block", L((2, 3)),
                                                "does not divide the target shape (4,4)")):
        tile_to_shape(L((2, 3)), (4, 4))
    with pytest.raises(LayoutError, match=names("tile_to_shape: block", L((2, 2, 2)),
                                                "more modes than the target shape (4,4)")):
        tile_to_shape(L((2, 2, 2)), (4, 4))


# -- inverses and casts ---------------------------------------------------------------------

def test_left_inverse_divisibility():
    # CuTe: "Left inverse divisibility condition": stride 3 % size(2) != 0
    A = L((2, 2), (3, 2))
    with pytest.raises(LayoutError, match=names("left_inverse: layout", A, "divisibility")):
        left_inverse(A)


def test_casts_need_divisible_strides():
    A = L((2, 2), (2, 4))
    with pytest.raises(LayoutError, match=names("downcast: layout", A, "no stride-1 mode")):
        downcast(A, 2)
    B = L((4, 4), (1, 3))
    with pytest.raises(LayoutError, match=names("upcast: stride 3 of layout", B, "factor 2")):
        upcast(B, 2)


# -- wrong kinds of arguments -----------------------------------------------------------------

def test_wrong_argument_types():
    with pytest.raises(TypeError, match=names("composition: cannot compose", L(4), "'x'")):
        composition(L(4), "x")
    with pytest.raises(TypeError, match="coordinate: expected an integer"):
        L(4)(1.5)
    with pytest.raises(LayoutError, match="only the full slice"):
        L((2, 3))(slice(0, 1), 1)
    with pytest.raises(IndexError, match=names("layout", L((2, 3)), "has no mode 2")):
        L((2, 3))[2]

"""Golden results from CuTe's documentation (media/docs/cpp/cute/02_layout_algebra.md),
the issue's facts about CuTe 4.x and the seeds' layouts.

Every value below was derived by hand from the C++ algorithms (include/cute/
layout.hpp of CuTe 4.x, copied at /tmp/cute) and cross-checked with CuTe's Python
DSL 4.8.1 (nvidia-cutlass-dsl, whose static layouts fold at trace time).
CuTe prints static integers as _N; moye prints plain numbers.
"""

from moye import (Layout, blocked_product, coalesce, complement, composition, filter,
                  flat_divide, left_inverse, logical_divide, logical_product, make_layout,
                  nullspace, raked_product, right_inverse, tile_to_shape, tiled_divide,
                  zipped_divide)

L = Layout


def s(x):
    return str(x)


def test_complement_examples_of_the_docs():
    assert s(complement(L(4, 1), 24)) == "6:4"
    assert s(complement(L(6, 4), 24)) == "4:1"
    assert s(complement(L((4, 6), (1, 4)), 24)) == "1:0"
    assert s(complement(L(4, 2), 24)) == "(2,3):(1,8)"
    assert s(complement(L((2, 4), (1, 6)), 24)) == "3:2"
    assert s(complement(L((2, 2), (1, 6)), 24)) == "(3,2):(2,12)"
    # without a cotarget: cosize(filter(layout)) = 8
    assert s(complement(L((2, 2), (1, 6)))) == "3:2"
    # stride-0 modes are filtered first; nothing left gives the cotarget itself
    assert s(complement(L((4, 3), (0, 0)), 12)) == "12:1"


def test_composition_examples_of_the_docs():
    assert s(composition(L((6, 2), (8, 2)), L((4, 3), (3, 1)))) == "((2,2),3):((24,2),8)"
    assert s(composition(L(20, 2), L((5, 4), (4, 1)))) == "(5,4):(8,2)"
    assert s(composition(L((10, 2), (16, 4)), L((5, 4), (1, 5)))) == "(5,(2,2)):(16,(80,4))"
    # (3,6,2,8):(w,x,y,z) o 16:9 = (1,2,2,4):(9w,3x,y,z), the static 1 dropped
    assert s(composition(L((3, 6, 2, 8), (1, 100, 1000, 10000)), L(16, 9))) == \
        "(2,2,4):(300,1000,10000)"
    a = L((12, (4, 8)), (59, (13, 1)))
    assert s(composition(a, (L(3, 4), L(8, 2)))) == "(3,(2,4)):(236,(26,1))"   # <3:4, 8:2>
    assert s(composition(a, (3, 8))) == "(3,(4,2)):(59,(13,1))"                   # a shape tiler
    # a tuple tiler drops the modes of A it does not reach
    assert s(composition(L((4, 6, 8)), (2, 3))) == "(2,3):(1,4)"
    # B past A's size extends A through its last mode
    assert s(composition(L(4, 2), L(8, 1))) == "8:2"


def test_composition_under_the_weak_divisibility_condition():
    # 3 < 4 passes CuTe's stride check though it does not divide 4: the result is
    # CuTe's, and it is not the function composition (A(B(2)) = A(6) = 12, R(2) = 10)
    R = composition(L((4, 3), (1, 10)), L(4, 3))
    assert s(R) == "(2,2):(3,10)"
    assert R(2) == 10 and L((4, 3), (1, 10))(6) == 12


def test_logical_divide_examples():
    # the issue: 3 is not divisible by 2, CuTe still divides
    assert s(logical_divide(L((3, 4), (1, 10)), 2)) == "(2,(2,4)):(1,(2,10))"
    # the docs' 1-D example: B* = (2,3):(1,8), (B,B*) = (4,(2,3)):(2,(1,8))
    assert s(logical_divide(L((4, 2, 3), (2, 1, 8)), L(4, 2))) == "((2,2),(2,3)):((4,1),(2,8))"


def test_the_docs_2d_divides():
    A = L((9, (4, 8)), (59, (13, 1)))
    T = (L(3, 3), L((2, 4), (1, 8)))
    assert s(logical_divide(A, T)) == "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
    assert s(zipped_divide(A, T)) == "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
    assert s(tiled_divide(A, T)) == "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
    assert s(flat_divide(A, T)) == "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))"
    # the tile: the docs' "(3,(2,4)):(177,(13,2))", the same as composition(A, T)
    assert s(zipped_divide(A, T)[0]) == "(3,(2,4)):(177,(13,2))" == s(composition(A, T))
    # the docs' offsets of the 3rd, 7th and (1,2)th tiles: zd(0,3), zd(0,7), zd(0,(1,2))
    zd = zipped_divide(A, T)
    assert (zd(0, 3), zd(0, 7), zd(0, (1, 2))) == (26, 60, 60)


def test_divide_examples():
    assert s(zipped_divide(L((4, 6)), (2, 3))) == "((2,3),(2,2)):((1,4),(2,12))"
    assert s(tiled_divide(L((4, 6)), (2, 3))) == "((2,3),2,2):((1,4),2,12)"
    assert s(flat_divide(L((4, 6)), (2, 3))) == "(2,3,2,2):(1,4,2,12)"
    # '_' keeps a mode that is already (tile, rest)
    assert s(zipped_divide(L(((2, 4), 6)), (None, 3))) == "((2,3),(4,2)):((1,8),(2,24))"


def test_inverse_examples():
    assert s(right_inverse(L((4, 2), (0, 1)))) == "2:4"               # the issue
    assert s(right_inverse(L((2, 3), (3, 1)))) == "(3,2):(2,1)"
    assert s(left_inverse(L((2, 3), (3, 1)))) == "(3,2):(2,1)"
    assert s(left_inverse(L(4, 2))) == "(2,4):(0,1)"
    assert s(right_inverse(L(4, 2))) == "1:0"
    assert s(right_inverse(L((2, 4), (4, 1)))) == "(4,2):(2,1)"
    assert s(right_inverse(L((2, 4), (8, 1)))) == "4:2"               # the gap stops the chain


def test_product_examples():
    A, B = L((2, 2), (1, 2)), L((3, 4), (4, 1))
    assert s(logical_product(A, B)) == "((2,2),(3,4)):((1,2),(16,4))"
    assert s(blocked_product(A, B)) == "((2,3),(2,4)):((1,16),(2,4))"
    assert s(raked_product(A, B)) == "((3,2),(4,2)):((16,1),(4,2))"
    # the docs' 1-D products: A* = (2,3):(2,8), and with B = (4,2):(2,1)
    assert s(logical_product(L((2, 2), (4, 1)), L(6, 1))) == "((2,2),(2,3)):((4,1),(2,8))"
    assert s(logical_product(L((2, 2), (4, 1)), L((4, 2), (2, 1)))) == \
        "((2,2),(4,2)):((4,1),(8,2))"
    # the docs' 2-D pictures: a 2x5 row-major block over a 3x4 column-major tiler
    # (CuTe 4.x's blocked_product no longer coalesces mode 0 as the picture does)
    assert s(blocked_product(L((2, 5), (5, 1)), L((3, 4), (1, 3)))) == \
        "((2,3),(5,4)):((5,10),(1,30))"
    assert s(raked_product(L((2, 5), (5, 1)), L((3, 4), (1, 3)))) == \
        "((3,2),(4,5)):((10,5),(30,1))"
    # a tuple tiler multiplies mode by mode
    assert s(logical_product(L((2, 2), (1, 2)), (L(3, 1),))) == "((2,3),2):((1,2),2)"
    # rank-1 int layouts zip into one mode ((block, tiler)), as CuTe's zip does
    assert s(blocked_product(L(4), L(3))) == "((4,3)):((1,4))"
    assert s(raked_product(L(4), L(3))) == "((3,4)):((4,1))"


def test_tile_to_shape_examples():
    assert s(tile_to_shape(L((2, 2), (2, 1)), (4, 6))) == "((2,2),(2,3)):((2,4),(1,8))"
    assert s(tile_to_shape(L((2, 2), (1, 2)), (4, 6), (1, 0))) == "((2,2),(2,3)):((1,12),(2,4))"
    assert s(tile_to_shape(L(4), 12)) == "((4,3)):((1,4))"


def test_the_seeds_tiled_copy_layouts():
    """make_tiled_copy(atom, thr, val) in copy_atom.hpp: layout_mn =
    raked_product(thr, val); layout_tv = right_inverse(layout_mn).with_shape(
    (size(thr), size(val)))."""
    thr, val = L((2, 3), (3, 1)), L((2, 3), (1, 2))
    layout_mn = raked_product(thr, val)
    assert s(layout_mn) == "((2,2),(3,3)):((6,3),(12,1))"
    assert s(right_inverse(layout_mn)) == "(3,2,2,3):(12,2,1,4)"
    layout_tv = composition(right_inverse(layout_mn), make_layout((6, 6)))
    assert s(layout_tv) == "((3,2),(2,3)):((12,2),(1,4))"
    assert layout_tv == right_inverse(layout_mn).with_shape(6, 6)
    # thread t's value v sits at the (m,n) element whose layout_mn index is t + 6 v
    assert all(layout_mn(layout_tv(t, v)) == t + 6 * v for t in range(6) for v in range(6))


def test_coalesce_filter_and_nullspace_examples():
    assert s(coalesce(L((2, (1, 6)), (1, (6, 2))))) == "12:1"                 # the docs
    assert s(coalesce(L((2, (1, 6)), (1, (6, 2))), (1, 1))) == "(2,6):(1,2)"  # by mode
    assert s(coalesce(L((4, 1), (1, 0)))) == "4:1"
    assert s(coalesce(L((1, 1), (3, 4)))) == "1:0"
    assert s(coalesce(L((2, 1, 3), (1, 7, 2)))) == "6:1"
    assert s(filter(L((2, 3, 1, 4), (0, 1, 5, 6)))) == "(3,4):(1,6)"
    assert s(nullspace(L((2, 4, 3), (1, 0, 0)))) == "(4,3):(2,8)"


def test_tied_strides_in_the_inverses():
    """Non-injective layouts with equal strides: the inverses order the tied
    modes as CuTe's Python DSL 4.8.1 does (checked). NOTE: the C++ header
    sorts with cute::exchange_sort (int_tuple.hpp), which is not stable, and
    would give right_inverse = (2,5):(15,3) and left_inverse = (2,3):(15,1)
    here; see the report."""
    T = L((3, 5, 2), (2, 2, 1))
    assert s(right_inverse(T)) == "(2,3):(15,1)"
    assert s(left_inverse(T)) == "(2,5):(15,3)"
    assert s(left_inverse(L((2, 8, 2), (32, 32, 2)))) == "(2,16,8):(0,16,2)"

"""Golden results: CuTe's documented examples, the issue's facts about CuTe
4.x and the seeds' layouts (0-based)."""
from moye import (Layout, blocked_product, coalesce, complement, composition, filter,
                  flat_divide, left_inverse, logical_divide, logical_product, make_layout,
                  raked_product, right_inverse, tile_to_shape, tiled_divide, zipped_divide)

L = Layout


def s(x):
    return str(x)


def test_complement_examples():
    assert s(complement(L(4, 2), 24)) == "(2,3):(1,8)"
    assert s(complement(L(4, 1), 24)) == "6:4"
    assert s(complement(L(6, 4), 24)) == "4:1"
    assert s(complement(L((4, 6), (1, 4)), 24)) == "1:0"
    assert s(complement(L((2, 4), (1, 6)), 24)) == "3:2"
    assert s(complement(L((2, 2), (1, 6)), 24)) == "(3,2):(2,12)"
    assert s(complement(L((2, 2), (1, 6)))) == "3:2"          # default cotarget cosize(filter)


def test_composition_examples():
    assert s(composition(L((6, 2), (8, 2)), L((4, 3), (3, 1)))) == "((2,2),3):((24,2),8)"
    assert s(composition(L((10, 2), (16, 4)), L((5, 4), (1, 5)))) == "(5,(2,2)):(16,(80,4))"
    # a tuple tiler drops the modes of A it does not reach
    assert s(composition(L((4, 6, 8)), (2, 3))) == "(2,3):(1,4)"
    # extends A past its size through its last mode
    assert s(composition(L(4, 2), L(8, 1))) == "8:2"


def test_logical_divide_facts():
    assert s(logical_divide(L((3, 4), (1, 10)), 2)) == "(2,(2,4)):(1,(2,10))"
    assert s(logical_divide(L((4, 2, 3), (2, 1, 8)), L(4, 2))) == "((2,2),(2,3)):((4,1),(2,8))"
    A = L((9, (4, 8)), (59, (13, 1)))
    T = (L(3, 3), L((2, 4), (1, 8)))
    assert s(logical_divide(A, T)) == "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
    assert s(zipped_divide(A, T)) == "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
    assert s(tiled_divide(A, T)) == "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
    assert s(flat_divide(A, T)) == "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))"


def test_none_in_a_tiler_keeps_the_mode_already_split():
    A = L(((2, 4), 6))
    assert s(zipped_divide(A, (None, 3))) == "((2,3),(4,2)):((1,8),(2,24))"


def test_inverse_facts():
    assert s(right_inverse(L((4, 2), (0, 1)))) == "2:4"
    assert s(right_inverse(L((2, 3), (3, 1)))) == "(3,2):(2,1)"
    assert s(left_inverse(L((2, 3), (3, 1)))) == "(3,2):(2,1)"
    assert s(left_inverse(L(4, 2))) == "(2,4):(0,1)"


def test_products_of_the_docs():
    A, B = L((2, 2), (1, 2)), L((3, 4), (4, 1))
    assert s(logical_product(A, B)) == "((2,2),(3,4)):((1,2),(16,4))"
    assert s(blocked_product(A, B)) == "((2,3),(2,4)):((1,16),(2,4))"
    assert s(raked_product(A, B)) == "((3,2),(4,2)):((16,1),(4,2))"
    assert s(logical_product(L((2, 2), (4, 1)), L(6, 1))) == "((2,2),(2,3)):((4,1),(2,8))"
    assert s(tile_to_shape(L((2, 2), (2, 1)), (4, 6))) == "((2,2),(2,3)):((2,4),(1,8))"


def test_the_seeds_tiled_copy_tv_layout():
    thr, val = L((2, 3), (3, 1)), L((2, 3), (1, 2))
    layout_mn = raked_product(thr, val)
    assert s(layout_mn) == "((2,2),(3,3)):((6,3),(12,1))"
    tv = composition(right_inverse(layout_mn), make_layout((6, 6)))
    assert s(tv) == "((3,2),(2,3)):((12,2),(1,4))"


def test_coalesce_and_filter():
    assert s(coalesce(L((2, (1, 6)), (1, (6, 2))))) == "12:1"
    assert s(coalesce(L((4, 1), (1, 0)))) == "4:1"
    assert s(filter(L((2, 3, 1, 4), (0, 1, 5, 6)))) == "(3,4):(1,6)"

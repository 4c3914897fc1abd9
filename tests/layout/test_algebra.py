"""The laws of the layout algebra, checked on random layouts."""
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from moye import (Layout, LayoutError, blocked_product, coalesce, complement, composition,
                  cosize, downcast, filter, flat_divide, flat_product, left_inverse,
                  logical_divide, logical_product, make_fragment_like, make_layout,
                  max_common_layout, max_common_vector, nullspace, raked_product,
                  recast_layout, right_inverse, size, tile_to_shape, tiled_divide,
                  tiled_product, upcast, zipped_divide, zipped_product)
from moye.layout import inttuple as T

from .strategies import (any_layouts, compact_layouts, divisors, exact_composition_pairs, image,
                         injective_layouts, shapes)


@given(any_layouts())
def test_coalesce_keeps_the_function_and_flattens(L):
    C = coalesce(L)
    assert size(C) == size(L) and T.depth(C.shape) <= 1
    assert image(C) == image(L)
    assert len(C) <= len(T.flatten_to_tuple(L.shape))


@given(any_layouts())
def test_coalesce_by_profile_coalesces_each_mode(L):
    assume(isinstance(L.shape, tuple))
    C = coalesce(L, tuple(1 for _ in L.shape))
    assert len(C) == len(L)
    for cm, lm in zip(C, L):
        assert image(cm) == image(lm)


@given(any_layouts())
def test_filter_keeps_the_image_without_zero_strides_or_unit_modes(L):
    F = filter(L)
    assert sorted(set(image(F))) == sorted(set(image(L)))
    assert all(d != 0 for d in T.flatten_to_tuple(F.stride)) or F == Layout(1, 0)


@given(exact_composition_pairs())
def test_composition_is_function_composition(pair):
    A, B = pair
    R = composition(A, B)
    assert T.compatible(B.shape, R.shape) or size(R) == size(B)
    assert image(R) == [A(B(i)) for i in range(size(B))]


@given(any_layouts(), st.data())
def test_composition_with_an_int_is_the_first_elements(A, data):
    # n = whole leading modes times a divisor of the next one: always admissible
    flat = T.flatten_to_tuple(A.shape)
    k = data.draw(st.integers(0, len(flat) - 1))
    n = T.product(flat[:k]) * data.draw(st.sampled_from(divisors(flat[k])))
    R = composition(A, n)
    assert image(R) == [A(i) for i in range(n)]


@given(injective_layouts(), st.sampled_from([1, 2, 3]))
def test_complement_is_disjoint_and_completes_a_bijection(L, k):
    M = cosize(L) * k
    C = complement(L, M)
    assert image(C) == sorted(image(C))                  # ordered
    assert len(set(image(C))) == size(C)                 # injective
    both = make_layout(L, C)
    assert sorted(image(both)) == list(range(size(both)))
    assert size(both) >= M


@given(any_layouts())
def test_right_inverse(L):
    R = right_inverse(L)
    assert all(L(R(i)) == i for i in range(size(R)))


@given(injective_layouts())
def test_left_inverse(L):
    assume(all(d != 0 for d in T.flatten_to_tuple(L.stride)))
    Li = left_inverse(L)
    assert all(Li(L(i)) == i for i in range(size(L)))


@given(compact_layouts())
def test_right_inverse_of_a_bijection_is_its_inverse(L):
    R = right_inverse(L)
    assert size(R) == size(L)
    assert all(R(L(i)) == i for i in range(size(L)))


@given(any_layouts(), st.data())
def test_logical_divide_is_composition_with_tiler_and_complement(A, data):
    t = data.draw(st.sampled_from(divisors(size(A))))
    T_ = Layout(t, data.draw(st.sampled_from([1, 1, 2])))
    try:
        expect = composition(A, make_layout(T_, complement(T_, coalesce(A).shape)))
    except LayoutError:
        with pytest.raises(LayoutError):
            logical_divide(A, T_)
        return
    assert logical_divide(A, T_) == expect


@given(compact_layouts(max_depth=1), st.data())
def test_divides_regroup_the_same_function(A, data):
    assume(isinstance(A.shape, tuple))
    tiler = tuple(data.draw(st.sampled_from(divisors(s))) for s in A.shape)
    lg = logical_divide(A, tiler)
    zp, td, fd = zipped_divide(A, tiler), tiled_divide(A, tiler), flat_divide(A, tiler)
    n = size(A)
    assert size(lg) == size(zp) == size(td) == size(fd) == n
    # the tile modes come first, in order, in each spelling
    tile_sizes = tuple(t for t in tiler)
    assert T.product_each(zp.shape[0]) == tile_sizes
    assert T.flatten_to_tuple(T.product_each(fd.shape))[:len(tiler)] == tile_sizes
    assert sorted(image(zp)) == sorted(image(td)) == sorted(image(fd)) == sorted(image(lg))
    # tile mode then rest mode, coordinate by coordinate
    for i in range(T.product(tile_sizes)):
        for j in range(size(zp[1])):
            assert zp((i, j)) == td((T.index_to_coord(i, td.shape[0]),)
                                    + T.index_to_coord(j, td.shape[1:]))


@given(compact_layouts(max_depth=1), compact_layouts(max_depth=1))
def test_logical_product_definition_and_structure(A, B):
    assume(size(A) * cosize(B) <= 512)
    P = logical_product(A, B)
    expect = make_layout(A, composition(complement(A, size(A) * cosize(B)), B))
    assert P == expect
    assert P[0] == A and size(P) == size(A) * size(B)
    assert sorted(image(P)) == list(range(size(P)))          # compact x compact is compact


@given(compact_layouts(max_depth=1), compact_layouts(max_depth=1))
def test_blocked_and_raked_products_reorder_the_logical_product(A, B):
    assume(size(A) * cosize(B) <= 512)
    try:
        P = logical_product(A, B)
    except LayoutError:
        return
    r = max(len(A), len(B))
    for prod in (blocked_product, raked_product, zipped_product, tiled_product, flat_product):
        try:
            R = prod(A, B)
        except LayoutError:
            continue
        assert sorted(image(R)) == sorted(image(P)), prod.__name__
    try:
        Bl, Rk = blocked_product(A, B), raked_product(A, B)
    except LayoutError:          # CuTe's zip refuses a rank-1 tuple against an int mode
        return
    if r > 1:
        assert len(Bl) == r and len(Rk) == r
        for i in range(r):
            assert size(Bl[i]) == size(Rk[i])


@given(compact_layouts(max_depth=1), st.data())
def test_tile_to_shape_reaches_the_target(block, data):
    assume(isinstance(block.shape, tuple) and size(block) <= 16)
    target = tuple(T.product(s) * data.draw(st.integers(1, 3)) for s in block.shape)
    R = tile_to_shape(block, target)
    assert T.product_each(R.shape) == target
    assert sorted(image(R)) == list(range(size(R)))


@given(compact_layouts(), st.sampled_from([2, 4]))
def test_upcast_downcast_roundtrip(L, n):
    ones = [d == 1 for d in T.flatten_to_tuple(L.stride)]
    assume(sum(ones) == 1)
    D = downcast(L, n)
    assert size(D) == size(L) * n
    assert upcast(D, n) == L or image(upcast(D, n)) == image(L)


@given(compact_layouts())
def test_max_common_vector_of_a_layout_with_itself(L):
    # a bijection shares all its elements with itself, contiguously
    assert max_common_vector(L, L) == size(L) or size(L) == 1
    cl = max_common_layout(L, L)
    assert all(L(cl(i)) == i for i in range(size(cl)))


@given(compact_layouts(), st.data())
def test_max_common_vector_elements_correspond(A, data):
    flat = T.flatten_to_tuple(A.shape)
    order = data.draw(st.permutations(range(len(flat))))
    stride, acc = [0] * len(flat), 1
    for i in order:
        stride[i] = acc
        acc *= flat[i]
    B = Layout(flat if len(flat) > 1 else flat[0], tuple(stride) if len(flat) > 1 else stride[0])
    fs = T.flatten_to_tuple(A.stride)
    A = Layout(flat if len(flat) > 1 else flat[0], fs if len(flat) > 1 else fs[0])
    v = max_common_vector(A, B)
    cl = max_common_layout(A, B)
    assert size(cl) == v
    assert all(A(cl(i)) == i and B(cl(i)) == i for i in range(v))


@given(any_layouts())
def test_nullspace_maps_to_zero(L):
    N = nullspace(L)
    zeros = [d == 0 for d in T.flatten_to_tuple(L.stride)]
    assert size(N) == T.product(tuple(s for s, z in zip(T.flatten_to_tuple(L.shape), zeros) if z))
    flatL = Layout(T.flatten(L.shape), T.flatten(L.stride)) if isinstance(L.shape, tuple) else L
    assert all(flatL(N(i)) == 0 for i in range(size(N)))


@given(injective_layouts())
def test_make_fragment_like_is_compact_with_the_same_shape(L):
    F = make_fragment_like(L)
    assert F.shape == L.shape
    assert sorted(set(image(F))) == list(range(cosize(F)))


def test_recast_layout():
    assert recast_layout(Layout((4, 8)), 32, 128) == Layout((1, 8), (1, 1))
    assert recast_layout(Layout((8, 4), (1, 8)), 16, 32) == Layout((4, 4), (1, 4))
    assert recast_layout(Layout((4, 4), (1, 4)), 32, 16) == Layout((8, 4), (1, 8))
    assert recast_layout(Layout((4, 8), (8, 1)), 32, 64) == Layout((4, 4), (4, 1))


def test_errors_name_the_layouts():
    with pytest.raises(LayoutError, match=r"complement: layout \(2,2\):\(1,1\) is not injective"):
        complement(Layout((2, 2), (1, 1)))
    with pytest.raises(LayoutError, match=r"composition: \(2,3\):\(2,8\) o \(2,3\):\(3,1\)"):
        composition(Layout((2, 3), (2, 8)), Layout((2, 3), (3, 1)))
    with pytest.raises(LayoutError, match="has 3 modes but layout .* has only 2"):
        logical_divide(Layout((4, 4)), (2, 2, 2))
    with pytest.raises(LayoutError, match="left_inverse"):
        left_inverse(Layout((2, 2), (3, 2)))
    with pytest.raises(LayoutError, match="no stride-1 mode"):
        downcast(Layout((2, 2), (2, 4)), 2)

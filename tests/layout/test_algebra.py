"""The laws of CuTe's layout algebra, checked exhaustively on random layouts,
and moye checked against a direct transcription of CuTe's C++ algorithms."""
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from moye import (Layout, LayoutError, append, blocked_product, clear_cache, coalesce,
                  complement, composition, cosize, depth, downcast, filter, filter_zeros,
                  flat_divide, flat_product, flatten, left_inverse, logical_divide, logical_product,
                  make_fragment_like, make_layout, make_ordered_layout, max_common_layout,
                  max_common_vector, nullspace, raked_product, rank, recast_layout, right_inverse,
                  size, tile_to_shape, tiled_divide, tiled_product, upcast, zipped_divide,
                  zipped_product)
from moye.layout import inttuple as T

from . import cute_cpp_model as ref
from .strategies import (all_coords, any_layouts, broadcast_layouts, compact_layouts,
                         composable_pairs, divisors, flat_modes, gapped_layouts, image,
                         is_injective, layout_tilers, layouts, leading_run, permuted_layouts,
                         scaled, shapes, signed_layouts, span, tuple_tilers)


def as_pair(L):
    return (L.shape, L.stride)


def flat_layout(modes):
    """A layout from flat (shape, stride) pairs; 1:0 when there are none."""
    if not modes:
        return Layout(1, 0)
    if len(modes) == 1:
        return Layout(*modes[0])
    return Layout(tuple(m[0] for m in modes), tuple(m[1] for m in modes))


# == coalesce ===================================================================

@scaled(60)
@given(st.one_of(layouts(), signed_layouts()))
def test_coalesce_keeps_the_function_on_the_domain(L):
    C = coalesce(L)
    assert size(C) == size(L)
    assert depth(C) <= 1
    assert image(C) == image(L)


@scaled(60)
@given(st.one_of(layouts(), signed_layouts()))
def test_coalesce_is_minimal_and_idempotent(L):
    C = coalesce(L)
    modes = flat_modes(C)
    if C != Layout(1, 0):
        assert all(s != 1 for s, _ in modes)               # no size-1 modes left
    for (s0, d0), (_, d1) in zip(modes, modes[1:]):
        assert s0 * d0 != d1                               # no mergeable neighbours left
    assert coalesce(C) == C
    assert len(modes) <= len(flat_modes(L))


@scaled(60)
@given(layouts(), st.data())
def test_coalesce_by_profile_coalesces_each_named_mode(L, data):
    if type(L.shape) is not tuple:
        assert coalesce(L, 1) == coalesce(L)
        return
    n = data.draw(st.integers(1, len(L)))
    profile = tuple(
        tuple(1 for _ in L.shape[i]) if type(L.shape[i]) is tuple and data.draw(st.booleans())
        else 1 for i in range(n))
    C = coalesce(L, profile)
    assert len(C) == len(L) and image(C) == image(L)
    for i in range(len(L)):
        if i >= n:
            assert C[i] == L[i]                            # modes past the profile are kept
        elif type(profile[i]) is tuple:
            assert C[i] == make_layout(*[coalesce(m) for m in L[i]])
        else:
            assert C[i] == coalesce(L[i])


# == filter =======================================================================

@scaled(60)
@given(st.one_of(layouts(), signed_layouts()))
def test_filter_keeps_the_function_on_the_non_zero_stride_part(L):
    F = filter(L)
    live = [(s, d) for s, d in flat_modes(L) if d != 0 and s != 1]
    assert image(F) == image(flat_layout(live))
    assert sorted(set(image(F))) == sorted(set(image(L)))
    assert size(F) * size(nullspace(L)) == size(L)
    assert depth(F) <= 1
    if F != Layout(1, 0):
        assert all(d != 0 and s != 1 for s, d in flat_modes(F))
    assert F == coalesce(filter_zeros(L))


@scaled(60)
@given(st.one_of(layouts(), signed_layouts()))
def test_filter_zeros_gives_zero_stride_modes_size_1(L):
    Z = filter_zeros(L)
    assert T.congruent(Z.shape, L.shape) and Z.stride == L.stride
    for (s, d), (zs, _) in zip(flat_modes(L), flat_modes(Z)):
        assert zs == (1 if d == 0 else s)


def test_filter_by_profile():
    L = Layout(((2, 3), (4, 5)), ((0, 1), (3, 0)))
    assert filter(L, (1, 1)) == Layout((3, 4), (1, 3))
    assert filter(L, (1,)) == Layout((3, (4, 5)), (1, (3, 0)))


# == composition ====================================================================

@scaled(60)
@given(composable_pairs())
def test_composition_is_function_composition(pair):
    """CuTe: @post compatible(B, R), R(c) == A(B(c)) for every c of B, whenever
    the (strong) divisibility conditions hold."""
    A, B = pair
    R = composition(A, B)
    assert T.compatible(B.shape, R.shape)
    assert [R(i) for i in range(size(B))] == [A(B(i)) for i in range(size(B))]
    for c in all_coords(B.shape):
        assert R(c) == A(B(c))


@scaled(60)
@given(layouts(), layouts())
def test_composition_distributes_over_concatenation(A, B):
    try:
        parts = [composition(A, m) for m in B] if type(B.shape) is tuple else None
        R = composition(A, B)
    except LayoutError:
        return
    if parts is not None:
        assert R == make_layout(*parts)


@scaled(60)
@given(shapes(no_ones=True), st.one_of(layouts(), signed_layouts()))
def test_composition_with_a_compact_layout_on_the_left_is_the_right_layout(s, B):
    """A compact column-major layout coalesces to n:1, so A o B is B itself,
    even past A's size (the last mode is extended)."""
    assert composition(Layout(s), B) == B


@scaled(60)
@given(layouts())
def test_composition_with_the_identity_of_the_shape_is_the_layout(A):
    R = composition(A, Layout(A.shape))
    assert T.compatible(A.shape, R.shape)
    assert image(R) == image(A)


@scaled(60)
@given(layouts(), st.data())
def test_composition_with_int_and_shape_tilers(A, data):
    flat = T.flatten_to_tuple(A.shape)
    k = data.draw(st.integers(0, len(flat) - 1))
    n = T.product(flat[:k]) * data.draw(st.sampled_from(divisors(flat[k])))
    R = composition(A, n)
    assert image(R) == [A(i) for i in range(n)]                  # the first n elements
    if n > 1:
        assert R == composition(A, Layout(n))
    assert composition(A, None) == A
    if type(A.shape) is tuple:
        # a shape (tuple of ints) composes mode by mode and drops the other modes
        m = data.draw(st.integers(1, len(A)))
        tiler = tuple(data.draw(st.sampled_from(divisors(size(A[i])))) for i in range(m))
        try:
            expect = make_layout(*[composition(A[i], tiler[i]) for i in range(m)])
        except LayoutError:
            return
        assert composition(A, tiler) == expect
        keep = tuple(None for _ in range(m))
        assert composition(A, keep) == make_layout(*[A[i] for i in range(m)])


# == complement ======================================================================

@scaled(60)
@given(gapped_layouts(max_size=64), st.integers(1, 3))
def test_complement_completes_a_divisible_layout_to_a_bijection(L, k):
    M = span(L) * k
    assume(M <= 2048)
    C = complement(L, M)
    both = make_layout(L, C)
    assert size(both) == M
    assert sorted(image(both)) == list(range(M))
    img = image(C)
    assert img == sorted(set(img))                              # ordered (strictly increasing)
    assert not set(img[1:]) & set(image(L))                     # disjoint


@scaled(60)
@given(broadcast_layouts(max_size=64), st.integers(1, 3))
def test_complement_ignores_stride_0_and_size_1_modes(L, k):
    F = filter(L)
    M = span(F) * k
    assume(M <= 2048)
    C = complement(L, M)
    assert C == complement(F, M)
    assert sorted(image(make_layout(F, C))) == list(range(M))


@scaled(60)
@given(any_layouts(max_size=64), st.integers(1, 200))
def test_complement_postconditions_for_any_injective_layout(L, M):
    """CuTe's @post: ordered, and disjoint from the layout, for every cotarget.
    (Without the divisibility conditions (L, C) need not be a bijection, nor
    reach M: complement((2,2):(1,9), 18) is 4:2, cosize((L, C)) = 17.)"""
    assume(is_injective(filter(L)))
    try:
        C = complement(L, M)
    except LayoutError:        # CuTe's static_assert: "Non-injective Layout detected"
        return
    img = image(C)
    assert img == sorted(set(img))
    assert not set(img[1:]) & set(image(L))


@scaled(60)
@given(gapped_layouts(max_size=64), st.data())
def test_complement_postconditions_for_any_cotarget(L, data):
    M = data.draw(st.integers(1, min(2 * span(L), 2048)))
    C = complement(L, M)
    img = image(C)
    assert img == sorted(set(img))                              # ordered
    assert not set(img[1:]) & set(image(L))                     # disjoint
    assert cosize(make_layout(L, C)) >= M                       # reaches the cotarget


@scaled(60)
@given(gapped_layouts())
def test_complement_default_cotarget_is_the_cosize_of_the_filtered_layout(L):
    assert complement(L) == complement(L, cosize(filter(L)))


@scaled(60)
@given(gapped_layouts(), st.integers(1, 3), st.data())
def test_complement_with_a_shape_cotarget(L, k, data):
    """A shape cotarget whose first mode is a multiple of the span gives the
    same complement as its size."""
    b = data.draw(st.integers(1, 3))
    M = (span(L) * k, b)
    assert complement(L, M) == complement(L, span(L) * k * b)


# == inverses ==========================================================================

@scaled(60)
@given(st.one_of(layouts(), signed_layouts()))
def test_right_inverse(L):
    R = right_inverse(L)
    assert all(L(R(i)) == i for i in range(size(R)))
    assert size(R) <= leading_run(L)


@scaled(60)
@given(st.one_of(gapped_layouts(), permuted_layouts(), any_layouts()))
def test_right_inverse_is_as_large_as_possible_for_injective_layouts(L):
    assume(is_injective(L))
    assert size(right_inverse(L)) == leading_run(L)


@scaled(60)
@given(permuted_layouts())
def test_the_inverses_of_a_bijection(L):
    R, Li = right_inverse(L), left_inverse(L)
    assert size(R) == size(L) == size(Li)
    assert all(R(L(i)) == i and L(R(i)) == i for i in range(size(L)))
    assert image(R) == image(Li)


@scaled(60)
@given(gapped_layouts())
def test_left_inverse_of_a_divisible_injective_layout(L):
    Li = left_inverse(L)
    assert all(Li(L(i)) == i for i in range(size(L)))


@scaled(60)
@given(any_layouts(max_size=64))
def test_left_inverse_of_any_injective_layout_cute_accepts(L):
    assume(is_injective(L))
    try:
        Li = left_inverse(L)
    except LayoutError:         # CuTe: "Left inverse divisibility condition"
        return
    assert all(Li(L(i)) == i for i in range(size(L)))


@scaled(60)
@given(broadcast_layouts())
def test_left_inverse_is_a_quasi_inverse_with_stride_0_modes(L):
    """CuTe: @post layout(result(layout(i))) == layout(i)."""
    Li = left_inverse(L)
    assert all(L(Li(L(i))) == L(i) for i in range(size(L)))


# == divides ============================================================================

@scaled(60)
@given(layouts(max_size=128), any_layouts(max_size=16, max_depth=2))
def test_logical_divide_is_composition_with_the_tiler_and_its_complement(A, Tl):
    try:
        expect = composition(A, make_layout(Tl, complement(Tl, coalesce(A).shape)))
    except LayoutError:
        with pytest.raises(LayoutError):
            logical_divide(A, Tl)
        return
    assert logical_divide(A, Tl) == expect


@scaled(60)
@given(layouts(), st.data())
def test_logical_divide_by_an_exact_tiler_permutes_the_domain(A, data):
    Tl = data.draw(layout_tilers(A))
    D = logical_divide(A, Tl)
    Tc = complement(Tl, coalesce(A).shape)
    assert size(D) == size(A) and len(D) == 2
    assert D[0] == composition(A, Tl)           # the tile mode is A o T
    assert sorted(image(D)) == sorted(image(A))
    n = size(Tl)
    for k in range(size(D)):
        i, j = k % n, k // n
        assert D(k) == D(i, j) == A(Tl(i) + Tc(j))
    # a Layout tiler: zipping changes nothing, tiled/flat only unpack the modes
    assert zipped_divide(A, Tl) == D
    assert flatten(tiled_divide(A, Tl)) == flatten(flat_divide(A, Tl)) == flatten(D)


@scaled(60)
@given(layouts(), st.data())
def test_logical_divide_by_a_tuple_tiler_divides_mode_by_mode(A, data):
    tiler = data.draw(tuple_tilers(A))
    D = logical_divide(A, tiler)
    assert len(D) == len(A) and size(D) == size(A)
    assert sorted(image(D)) == sorted(image(A))
    for i in range(len(A)):
        if i < len(tiler):
            assert D[i] == logical_divide(A[i], tiler[i])
        else:
            assert D[i] == A[i]


@scaled(60)
@given(layouts(), st.data())
def test_zipped_tiled_and_flat_divides_regroup_the_logical_divide(A, data):
    tiler = data.draw(tuple_tilers(A))
    assume(all(t is not None and type(t) is not tuple for t in tiler))
    lg = logical_divide(A, tiler)
    n = len(tiler)
    tiles = [lg[i][0] for i in range(n)]
    rests = [lg[i][1] for i in range(n)] + [lg[i] for i in range(n, len(lg))]
    zipped, tiled, flat = zipped_divide(A, tiler), tiled_divide(A, tiler), flat_divide(A, tiler)
    assert zipped == make_layout(make_layout(*tiles), make_layout(*rests))
    assert tiled == make_layout(make_layout(*tiles), *rests)
    assert flat == make_layout(*tiles, *rests)
    # the same function up to regrouping: same values in the same colex order
    assert flatten(zipped) == flatten(tiled) == flatten(flat)
    assert image(zipped) == image(tiled) == image(flat)
    assert sorted(image(zipped)) == sorted(image(lg))
    # CuTe's docs: layout<0>(zipped_divide(a, b)) == composition(a, b), as functions
    # (an int tiler 1 divides as make_layout(1) == 1:0 but composes as 1:1)
    tile = composition(A, tiler)
    assert zipped[0].shape == tile.shape and image(zipped[0]) == image(tile)


@scaled(60)
@given(layouts(), st.data())
def test_divides_with_nested_and_underscore_tilers_keep_the_elements(A, data):
    tiler = data.draw(tuple_tilers(A))
    lg = logical_divide(A, tiler)
    for op in (zipped_divide, tiled_divide, flat_divide):
        try:
            R = op(A, tiler)
        except LayoutError as e:
            # a mode under '_' (or an int/Layout at a level where the mode is
            # not rank-2 after the divide) cannot be unzipped, as in CuTe's zip2_by
            assert "rank 2" in str(e) or "does not fit" in str(e)
            continue
        assert size(R) == size(A)
        assert sorted(image(R)) == sorted(image(lg))
        assert flatten(R) == flatten(zipped_divide(A, tiler))


# == products ============================================================================

@scaled(60)
@given(layouts(max_size=64), layouts(max_size=32))
def test_logical_product_is_the_block_then_the_complement_composed_with_the_tiler(A, B):
    try:
        expect = make_layout(A, composition(complement(A, size(A) * cosize(B)), B))
    except LayoutError:
        with pytest.raises(LayoutError):
            logical_product(A, B)
        return
    P = logical_product(A, B)
    assert P == expect
    assert P[0] == A and size(P) == size(A) * size(B)
    assert T.compatible(B.shape, P[1].shape)


@scaled(60)
@given(permuted_layouts(max_size=32), layouts(max_size=32))
def test_logical_product_of_a_compact_block_repeats_it(A, B):
    """For a compact block, the tiler's offsets count whole blocks:
    P(a, b) == A(a) + size(A) * B(b)."""
    P = logical_product(A, B)
    n = size(A)
    for a in range(n):
        for b in range(size(B)):
            assert P(a, b) == A(a) + n * B(b)


def _zip_fails(a, b):
    """CuTe's zip(a, b) pairs the modes of a tuple-shaped `a` with those of `b`,
    which must then be a tuple of the same rank (else tuple_size<int> does not
    compile); an int-shaped `a` gives the single mode ((a, b))."""
    return type(a.shape) is tuple and (type(b.shape) is not tuple or len(a) != len(b))


@scaled(60)
@given(layouts(max_size=48), layouts(max_size=24))
def test_blocked_and_raked_products_rezip_the_logical_product(A, B):
    r = max(rank(A), rank(B))
    Ap, Bp = append(A, n=r), append(B, n=r)
    try:
        P = logical_product(Ap, Bp)
    except LayoutError:
        for prod in (blocked_product, raked_product):
            with pytest.raises(LayoutError):
                prod(A, B)
        return
    Bl = Rk = None
    if _zip_fails(P[0], P[1]):
        with pytest.raises(LayoutError, match="ranks differ"):
            blocked_product(A, B)
    else:
        Bl = blocked_product(A, B)
    if _zip_fails(P[1], P[0]):
        with pytest.raises(LayoutError, match="ranks differ"):
            raked_product(A, B)
    else:
        Rk = raked_product(A, B)
    if Bl is None:
        return
    assert rank(Bl) == r                                     # CuTe's @post
    assert sorted(image(Bl)) == sorted(image(P))
    if type(P[0].shape) is tuple:
        for i in range(r):
            assert Bl[i] == make_layout(Ap[i], P[1][i])      # mode i is (A_i, B_i)
    else:
        assert Bl == make_layout(make_layout(P[0], P[1]))    # the single mode ((A, B))
    # pointwise: blocked((a0,b0),(a1,b1),...) == P((a0,a1,...),(b0,b1,...))
    def zipped(a, b, a_has_modes):
        return tuple(zip(a, b)) if a_has_modes else ((a, b),)

    for ca in all_coords(P[0].shape):
        for cb in all_coords(P[1].shape):
            v = P(ca, cb)
            assert Bl(zipped(ca, cb, type(P[0].shape) is tuple)) == v
            if Rk is not None:
                assert Rk(zipped(cb, ca, type(P[1].shape) is tuple)) == v
    if Rk is not None:
        assert rank(Rk) == r and sorted(image(Rk)) == sorted(image(P))
        if type(P[1].shape) is tuple:
            for i in range(r):
                assert Rk[i] == make_layout(P[1][i], Ap[i])  # mode i is (B_i, A_i)
        else:
            assert Rk == make_layout(make_layout(P[1], P[0]))


@scaled(60)
@given(compact_layouts(max_size=16), compact_layouts(max_size=16))
def test_products_of_compact_layouts_are_compact(A, B):
    n = size(A) * size(B)
    r = max(rank(A), rank(B))
    P = logical_product(append(A, n=r), append(B, n=r))
    for prod in (logical_product, blocked_product, raked_product, zipped_product, tiled_product,
                 flat_product):
        zipped = {blocked_product: (P[0], P[1]), raked_product: (P[1], P[0])}.get(prod)
        if zipped and _zip_fails(*zipped):
            with pytest.raises(LayoutError):
                prod(A, B)
            continue
        assert sorted(image(prod(A, B))) == list(range(n)), prod.__name__


@scaled(60)
@given(layouts(max_size=48), st.data())
def test_zipped_tiled_and_flat_products_regroup_the_logical_product(A, data):
    if type(A.shape) is not tuple:
        A = make_layout(A)
    n = data.draw(st.integers(1, len(A)))
    tiler = tuple(data.draw(compact_layouts(max_size=6, max_depth=1)) for _ in range(n))
    try:
        lg = logical_product(A, tiler)
    except LayoutError:
        return
    for i in range(len(A)):
        assert lg[i] == (logical_product(A[i], tiler[i]) if i < n else A[i])
    blocks = [lg[i][0] for i in range(n)]
    reps = [lg[i][1] for i in range(n)] + [lg[i] for i in range(n, len(lg))]
    assert zipped_product(A, tiler) == make_layout(make_layout(*blocks), make_layout(*reps))
    assert tiled_product(A, tiler) == make_layout(make_layout(*blocks), *reps)
    assert flat_product(A, tiler) == make_layout(*blocks, *reps)


@scaled(60)
@given(compact_layouts(max_size=16, max_depth=2), st.data())
def test_tile_to_shape_reaches_the_target_shape(block, data):
    r = max(rank(block), data.draw(st.integers(1, 3)))
    Bp = append(block, n=r)
    target = tuple(size(Bp[i]) * data.draw(st.integers(1, 3)) for i in range(r))
    order = data.draw(st.one_of(st.none(), st.permutations(range(r)).map(tuple)))
    R = tile_to_shape(block, target) if order is None else tile_to_shape(block, target, order)
    assert T.product_each(R.shape) == target
    assert T.compatible(target, R.shape)                      # CuTe's @post
    reps = tuple(t // size(Bp[i]) for i, t in enumerate(target))
    O = Layout(reps) if order is None else make_ordered_layout(reps, order)
    assert R == blocked_product(Bp, O)
    for i in range(r):
        assert R[i][0] == Bp[i]
    # a compact block tiled by a compact arrangement is compact
    assert sorted(image(R)) == list(range(size(R)))


def test_tile_to_shape_orders():
    block = Layout((2, 2), (1, 2))
    assert str(tile_to_shape(block, (4, 6))) == "((2,2),(2,3)):((1,4),(2,8))"
    assert str(tile_to_shape(block, (4, 6), (1, 0))) == "((2,2),(2,3)):((1,12),(2,4))"
    assert tile_to_shape(block, (4, 6), (0, 1)) == tile_to_shape(block, (4, 6))


# == upcast / downcast ======================================================================

@scaled(60)
@given(layouts(), st.sampled_from([2, 3, 4, 8]))
def test_upcast_undoes_downcast(L, n):
    ones = [d for _, d in flat_modes(L) if abs(d) == 1]
    if not ones:
        with pytest.raises(LayoutError, match="no stride-1 mode"):
            downcast(L, n)
        return
    D = downcast(L, n)
    assert upcast(D, n) == L
    for (s, d), (ds, dd) in zip(flat_modes(L), flat_modes(D)):
        assert (ds, dd) == ((s * n, d) if abs(d) == 1 else (s, d * n))


@scaled(60)
@given(layouts(max_size=64), st.sampled_from([2, 4]))
def test_downcast_splits_each_element_into_n(L, n):
    """Exactly one stride-1 mode: element e of the old type at offset L(c) is
    the n new elements n*L(c) .. n*L(c)+n-1, along the stride-1 mode."""
    modes = flat_modes(L)
    ones = [k for k, (_, d) in enumerate(modes) if d == 1]
    assume(len(ones) == 1)
    k = ones[0]
    D = downcast(L, n)
    for c in all_coords(D.shape):
        fc = list(T.flatten_to_tuple(c))
        q, r = divmod(fc[k], n)
        fc[k] = q
        assert D(c) == n * flat_layout(modes)(tuple(fc) if len(fc) > 1 else fc[0]) + r


@scaled(60)
@given(layouts(max_size=64), st.sampled_from([2, 4]))
def test_downcast_undoes_upcast_on_layouts_of_wide_elements(W, n):
    """A downcast layout (unit-stride extents multiples of n, other strides
    multiples of n, none equal to n) is the downcast of its upcast."""
    assume(any(abs(d) == 1 for _, d in flat_modes(W)))
    D = downcast(W, n)
    U = upcast(D, n)
    assert U == W and downcast(U, n) == D


def test_upcast_and_recast_examples():
    assert upcast(Layout((4, 8), (1, 4)), 2) == Layout((2, 8), (1, 2))
    assert upcast(Layout((4, 8), (8, 1)), 4) == Layout((4, 2), (2, 1))
    assert upcast(Layout((2, 8), (0, 1)), 4) == Layout((2, 2), (0, 1))
    # strides below n: shape ceil_div(3, ceil_div(4, 2)) = 2, stride ceil_div(2, 4) = 1
    assert upcast(Layout((3, 8), (2, 1)), 4) == Layout((2, 2), (1, 1))
    assert downcast(Layout((2, 8), (1, 2)), 2) == Layout((4, 8), (1, 4))
    assert recast_layout(Layout((4, 8)), 32, 128) == Layout((1, 8), (1, 1))
    assert recast_layout(Layout((8, 4), (1, 8)), 16, 32) == Layout((4, 4), (1, 4))
    assert recast_layout(Layout((4, 4), (1, 4)), 32, 16) == Layout((8, 4), (1, 8))
    assert recast_layout(Layout((4, 8), (8, 1)), 32, 64) == Layout((4, 4), (4, 1))
    assert recast_layout(Layout((4, 8)), 16, 16) == Layout((4, 8))
    # 3 : 2 -> upcast by 2 then downcast by 3 (CuTe's trait_ratio num/den)
    assert recast_layout(Layout((4, 6)), 24, 16) == downcast(upcast(Layout((4, 6)), 2), 3)
    assert recast_layout(Layout((4, 6)), 24, 16) == Layout((6, 6), (1, 6))


# == max_common_vector / max_common_layout ====================================================

@scaled(60)
@given(st.one_of(gapped_layouts(), permuted_layouts(), any_layouts()))
def test_max_common_vector_of_a_layout_with_itself(L):
    assume(is_injective(L))
    v = max_common_vector(L, L)
    assert v == leading_run(L)                  # its leading contiguous run
    cl = max_common_layout(L, L)
    assert size(cl) == v
    assert all(L(cl(i)) == i for i in range(v))


@scaled(60)
@given(permuted_layouts(max_depth=1), st.data())
def test_max_common_vector_elements_correspond(A, data):
    flat = T.flatten_to_tuple(A.shape)
    order = data.draw(st.permutations(range(len(flat))))
    stride, acc = [0] * len(flat), 1
    for i in order:
        stride[i] = acc
        acc *= flat[i]
    B = flat_layout(list(zip(flat, stride)))
    A = flat_layout(flat_modes(A))
    v = max_common_vector(A, B)
    Rb = right_inverse(B)
    # CuTe's @post: for all n < N, a(b.get_1d_coord(n)) == n
    assert all(A(Rb(i)) == i and B(Rb(i)) == i for i in range(v))
    if v < size(A):                              # and the run is maximal
        assert A(Rb(v)) != v
    cl = max_common_layout(A, B)
    assert size(cl) == v
    assert all(A(cl(i)) == i == B(cl(i)) for i in range(v))


def test_max_common_vector_examples():
    assert max_common_vector(Layout((4, 8)), Layout((4, 8))) == 32
    assert max_common_vector(Layout((4, 8)), Layout((4, 8), (8, 1))) == 1
    assert max_common_vector(Layout((4, 8), (1, 4)), Layout((4, (2, 4)), (1, (16, 4)))) == 4
    assert max_common_layout(Layout((4, 8)), Layout((4, (2, 4)), (1, (16, 4)))) == Layout(4, 1)
    assert max_common_layout(Layout((4, 8)), Layout((4, 8), (8, 1))) == Layout(1, 0)


# == nullspace ===============================================================================

@scaled(60)
@given(st.one_of(layouts(), signed_layouts()))
def test_nullspace_maps_to_zero(L):
    N = nullspace(L)
    zero_modes = [s for s, d in flat_modes(L) if d == 0]
    assert size(N) == T.product(tuple(zero_modes))
    assert size(N) * size(filter(L)) == size(L)           # CuTe's @post
    assert all(L(N(i)) == 0 for i in range(size(N)))
    assert is_injective(N)
    # CuTe's @post nullspace(result) == 1:0, up to static size-1 modes (which
    # get stride 0 and so count as null modes, in CuTe as in moye)
    assert size(nullspace(N)) == 1


def test_nullspace_examples():
    assert nullspace(Layout((2, 4, 3), (1, 0, 0))) == Layout((4, 3), (2, 8))
    assert nullspace(Layout((2, 4), (1, 2))) == Layout(1, 0)
    assert nullspace(Layout(((2, 3), 4), ((0, 1), 0))) == Layout((2, 4), (1, 6))


# == make_fragment_like ========================================================================

@scaled(60)
@given(layouts())
def test_make_fragment_like_is_compact_with_the_same_shape(L):
    F = make_fragment_like(L)
    assert F.shape == L.shape
    if type(L.shape) is tuple and len(L) > 1:
        # mode 0 column-major, keeping its stride-0 modes; the rest in L's stride
        # order (equal strides there share a start in CuTe's compact_order, so
        # the result is compact only when those strides are distinct)
        f0 = flat_modes(F[0])
        assert [d == 0 for _, d in f0] == [d == 0 or s == 1 for s, d in flat_modes(L[0])]
        rest = [d for i in range(1, len(L)) for s, d in flat_modes(L[i]) if s != 1]
        if len(set(rest)) == len(rest):
            assert sorted(set(image(F))) == list(range(cosize(F)))
    else:
        assert F == Layout(L.shape)


def test_make_fragment_like_examples():
    assert make_fragment_like(Layout(((1, (2, 3)), 1, 1), ((0, (1, 4)), 0, 0))) == \
        Layout(((1, (2, 3)), 1, 1), ((0, (1, 2)), 0, 0))
    assert make_fragment_like(Layout((4, 8), (8, 1))) == Layout((4, 8), (1, 4))
    assert make_fragment_like(Layout((2, 4, 3), (0, 1, 4))) == Layout((2, 4, 3), (0, 1, 4))
    assert make_fragment_like(Layout((4, 2, 3), (1, 12, 4))) == Layout((4, 2, 3), (1, 12, 4))
    assert make_fragment_like((2, 3)) == Layout((2, 3))
    # tied orders (0 and 0) in the other modes: not compact, as in CuTe
    assert make_fragment_like(Layout(((1, 1), 2, (2, 2)), ((0, 0), 0, (0, 1)))) == \
        Layout(((1, 1), 2, (2, 2)), ((0, 0), 1, (1, 4)))


# == memoization ==================================================================================

def test_the_cache_keeps_layout_and_tuple_tilers_apart():
    """A Layout tiler and a tuple tiler of the same numbers are different
    arguments: composition(A, (4,1)) tiles mode by mode, composition(A, 4:1)
    composes A with a 1-D layout."""
    A = Layout(((2, 4), (4, 4)))                     # coalesces to 128:1
    for args in ((Layout(4, 1), (4, 1)), (Layout((2, 2), (1, 2)), ((2, 2), (1, 2))),
                 (Layout(2, 1), 2)):
        clear_cache()
        first = [composition(A, t) for t in args]
        clear_cache()
        fresh = [composition(A, t) for t in reversed(args)][::-1]
        assert first == fresh
    assert composition(A, Layout(4, 1)) == Layout(4, 1)
    assert composition(A, (4, 1)) == Layout((4, 1), (1, 8))
    assert composition(A, Layout((2, 2), (1, 2))) == Layout((2, 2), (1, 2))
    assert composition(A, ((2, 2), (1, 2))) == Layout(((2, 2), (1, 2)), ((1, 2), (8, 32)))


@scaled(60)
@given(layouts(max_size=64), layouts(max_size=64))
def test_cached_and_fresh_results_agree(A, B):
    clear_cache()
    first = _moye_or_error(composition, A, B), _moye_or_error(logical_divide, A, B)
    again = _moye_or_error(composition, A, B), _moye_or_error(logical_divide, A, B)
    clear_cache()
    fresh = _moye_or_error(composition, A, B), _moye_or_error(logical_divide, A, B)
    assert first == again == fresh


# == fidelity: moye against a transcription of CuTe's C++ =======================================

def _ref_or_error(fn, *args):
    try:
        return fn(*args)
    except ref.RefError:
        return "error"


def _moye_or_error(fn, *args):
    try:
        return as_pair(fn(*args))
    except LayoutError:
        return "error"


def _no_stride_ties(L):
    d = list(T.flatten_to_tuple(coalesce(L).stride))
    return len(set(d)) == len(d)


@scaled(200)
@given(st.one_of(layouts(), signed_layouts()), st.one_of(layouts(max_size=64),
                                                         any_layouts(max_size=64)))
def test_coalesce_and_composition_match_cute(A, B):
    assert as_pair(coalesce(A)) == ref.coalesce(as_pair(A))
    assert _moye_or_error(composition, A, B) == _ref_or_error(ref.composition, as_pair(A),
                                                              as_pair(B))


@scaled(200)
@given(any_layouts(max_size=64), st.sampled_from([1, 5, 8, 24, 48, 96]))
def test_complement_matches_cute(L, M):
    assert _moye_or_error(complement, L, M) == _ref_or_error(ref.complement, as_pair(L), M)


@scaled(200)
@given(st.one_of(layouts(), any_layouts()))
def test_inverses_match_cute(L):
    # Layouts with tied strides after coalescing (never injective) are left out:
    # there the C++ header's exchange_sort (not stable) and CuTe's Python DSL
    # disagree; see test_golden's tie cases.
    assume(_no_stride_ties(L))
    assert as_pair(right_inverse(L)) == ref.right_inverse(as_pair(L))
    assert _moye_or_error(left_inverse, L) == _ref_or_error(ref.left_inverse, as_pair(L))


@scaled(120)
@given(layouts(max_size=64), any_layouts(max_size=16, max_depth=2))
def test_logical_divide_and_product_match_cute(A, B):
    assert _moye_or_error(logical_divide, A, B) == _ref_or_error(ref.logical_divide,
                                                                 as_pair(A), as_pair(B))
    assert _moye_or_error(logical_product, A, B) == _ref_or_error(ref.logical_product,
                                                                  as_pair(A), as_pair(B))

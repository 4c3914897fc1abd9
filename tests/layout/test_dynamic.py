"""Dynamic values: the algebra on symbolic extents and strides gives
expressions that evaluate to the static answers, folds to plain ints where it
can, never branches on a dynamic value (the stand-in has no truth value), and
refuses, with DynamicValueError, where CuTe needs static values."""
import pytest

from moye import (DynamicValueError, GenRowMajor, Layout, LayoutError, Swizzle, blocked_product,
                  coalesce, complement, composition, cosize, downcast, filter, flat_divide,
                  layout_to_text, left_inverse, logical_divide, logical_product,
                  make_ordered_layout, nullspace, raked_product, right_inverse, size,
                  slice_and_offset, tile_to_shape, tiled_divide, upcast, zipped_divide)

from .strategies import image
from .symbolic import S, evaluate, is_static

M, N, K = S.var("M"), S.var("N"), S.var("K")
P, Q = S.var("P"), S.var("Q")            # small extents, for results checked element by element
# multiples of the tiles, and not
ENVS = [{"M": 256, "N": 64, "K": 3, "P": 4, "Q": 3},
        {"M": 384, "N": 16, "K": 5, "P": 6, "Q": 2},
        {"M": 300, "N": 20, "K": 7, "P": 5, "Q": 7}]


def concrete(layout, env):
    """The layout with its symbolic leaves evaluated."""
    return Layout(evaluate(layout.shape, env), evaluate(layout.stride, env))


def same_function(a, b):
    """Equal as functions on the same domain. (Static inputs fold further:
    coalesce merges static modes that a dynamic extent keeps apart, and CuTe
    cannot drop dynamic size-1 modes, as in the docs' ((5,1),(2,2)).)"""
    return size(a) == size(b) and image(a) == image(b)


def normal(layout):
    """The layout with the strides of its size-1 modes as 0 (a size-1 extent
    known only at run time keeps its stride, as in CuTe; statically it is 0)."""
    def fix(s, d):
        if isinstance(s, tuple):
            return tuple(fix(a, b) for a, b in zip(s, d))
        return 0 if s == 1 else d
    return Layout(layout.shape, fix(layout.shape, layout.stride))


def at(env):
    """Substitute the environment into a layout, int tuple or value."""
    def sub(x):
        if isinstance(x, Layout):
            return concrete(x, env)
        return evaluate(x, env)
    return sub


def same(x):
    return x


# -- the example ---------------------------------------------------------------

@pytest.mark.parametrize("env", ENVS)
def test_zipped_divide_of_a_dynamic_matrix(env):
    A = Layout((M, N), (1, M))
    Z = zipped_divide(A, (128, 8))
    # the tile mode folds to static values and keeps M itself as its stride
    assert str(Z[0]) == "(128,8):(1,?)"
    assert Z[0].shape == (128, 8) and is_static(Z[0].shape)
    assert type(Z[0].stride[0]) is int and Z[0].stride[0] == 1 and Z[0].stride[1] is M
    assert type(Z[1].stride[0]) is int and Z[1].stride[0] == 128
    # the rest mode stays symbolic: ceil(M/128), ceil(N/8) tiles
    assert not is_static(Z[1].shape)
    A_ = concrete(A, env)
    assert concrete(Z, env) == zipped_divide(A_, (128, 8))
    assert concrete(tiled_divide(A, (128, 8)), env) == tiled_divide(A_, (128, 8))
    assert concrete(flat_divide(A, (128, 8)), env) == flat_divide(A_, (128, 8))
    assert evaluate(Z[1].shape, env) == (-(-env["M"] // 128), -(-env["N"] // 8))


def test_memoization_does_not_confuse_dynamic_values():
    M2 = S.var("M")                                    # same name, another value
    Z1 = zipped_divide(Layout((M, N), (1, M)), (128, 8))
    Z2 = zipped_divide(Layout((M2, N), (1, M2)), (128, 8))
    assert Z1[0].stride[1] is M and Z2[0].stride[1] is M2
    assert Layout((M, 4)) == Layout((M, 4)) and hash(Layout((M, 4))) == hash(Layout((M, 4)))
    assert Layout((M, 4)) != Layout((M2, 4))           # dynamic values compare by identity


# -- evaluation and slicing -----------------------------------------------------------------

@pytest.mark.parametrize("env", ENVS)
def test_evaluation_at_static_and_dynamic_coordinates(env):
    A = Layout((M, (N, 4)), (1, (M, M * N)))
    A_ = concrete(A, env)
    i, j, k = S.var("i"), S.var("j"), S.var("k")
    e = dict(env, i=5, j=3, k=2)
    assert A(i, (j, k)).eval(e) == A_(5, (3, 2)) == 5 + 3 * env["M"] + 2 * env["M"] * env["N"]
    assert A(i, j).eval(e) == A_(5, 3)                 # an int coordinate for a tuple mode
    assert A(i).eval(e) == A_(5)
    assert evaluate(A(37), env) == A_(37)              # static coordinate, dynamic layout
    assert A(0, 0) == 0                                # folds to a plain 0
    assert evaluate(size(A), env) == size(A_) and evaluate(cosize(A), env) == cosize(A_)


@pytest.mark.parametrize("env", ENVS)
def test_slicing_with_dynamic_coordinates(env):
    A = Layout((M, N), (1, M))
    j = S.var("j")
    e = dict(env, j=3)
    sub, off = slice_and_offset((None, j), A)
    assert sub == Layout((M,), (1,)) and sub.shape[0] is M
    assert off.eval(e) == 3 * env["M"]
    row = A(2, None)
    assert row.shape == (N,) and row.stride[0] is M
    sub, off = slice_and_offset((None, 0), A)
    assert off == 0 and type(off) is int


# -- results evaluate to the static answers ------------------------------------------------

# Each case builds its inputs through `v`: the identity for the symbolic run,
# the substitution of an environment for the static one.
DYNAMIC_CASES = {
    "coalesce": lambda v: coalesce(v(Layout((2, 4, P, Q), (1, 2, 8, 8 * P)))),
    "coalesce_profile": lambda v: coalesce(
        v(Layout(((P, 4), (2, 3)), ((1, P), (4 * P, 8 * P)))), (1, 1)),
    "filter": lambda v: filter(v(Layout((M, 4, Q), (0, 1, 4)))),
    "composition_tiles": lambda v: composition(v(Layout((M, N), (1, M))),
                                               (Layout(16, 4), Layout(4, 1))),
    "composition_layout": lambda v: composition(v(Layout((M, N), (1, M))),
                                                Layout((4, 4), (1, 4))),
    "composition_dynamic_rhs": lambda v: composition(Layout((4, 512)),
                                                     v(Layout((N, 2), (2, 1)))),
    "logical_divide_ints": lambda v: logical_divide(v(Layout((8 * P, Q), (1, 8 * P))), (8, 2)),
    "logical_divide_layouts": lambda v: logical_divide(v(Layout((8 * P, Q), (1, 8 * P))),
                                                       (Layout(4, 2), None)),
    "logical_divide_1d": lambda v: logical_divide(v(Layout(P * 16)), Layout((4, 2), (1, 8))),
    "zipped_divide_dynamic_tiler": lambda v: zipped_divide(Layout((32, 16)),
                                                           (v(Layout(K, 1)), 8)),
    "logical_product": lambda v: logical_product(Layout((2, 2)), v(Layout((P, Q)))),
    "blocked_product": lambda v: blocked_product(Layout((2, 2)), v(Layout((P, Q)))),
    "raked_product": lambda v: raked_product(Layout((2, 2), (2, 1)), v(Layout((P, Q)))),
    "tile_to_shape": lambda v: tile_to_shape(Layout((2, 2)), v((2 * P, 2 * Q))),
    "complement_rank1_dynamic_stride": lambda v: complement(v(Layout(4, P)), v(8 * P)),
    "complement_dynamic_cotarget": lambda v: complement(Layout((4, 2), (1, 8)), v(16 * P)),
    "complement_dynamic_shape_cotarget": lambda v: complement(Layout(4, 1), v((P, Q))),
    "right_inverse": lambda v: right_inverse(v(Layout((4, P), (1, 4)))),
    "upcast": lambda v: upcast(v(Layout((8, P), (1, 8 * K))), 2),
    "downcast": lambda v: downcast(v(Layout((8, P), (1, K))), 2),
    "nullspace": lambda v: nullspace(v(Layout((P, 4, Q), (0, 1, 0)))),
    "row_major": lambda v: Layout(v((P, Q, 4)), GenRowMajor),
    "ordered": lambda v: make_ordered_layout(v((P, Q, 4)), (1, 0, 2)),
}


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("case", sorted(DYNAMIC_CASES))
def test_dynamic_results_evaluate_to_the_static_results(case, env):
    got = DYNAMIC_CASES[case](same)
    assert not (is_static(got.shape) and is_static(got.stride))     # still dynamic
    assert same_function(concrete(got, env), DYNAMIC_CASES[case](at(env)))


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("case", [
    "composition_tiles", "logical_divide_ints",
    "logical_divide_layouts", "logical_product", "blocked_product", "raked_product",
    "tile_to_shape", "complement_dynamic_cotarget", "upcast", "downcast", "nullspace",
    "row_major", "ordered", "zipped_divide_dynamic_tiler"])
def test_dynamic_results_match_the_static_structure(case, env):
    """Where no dynamic min stands in for a static 1 and no static modes
    merge, the evaluated result has exactly the static result's structure
    (up to the strides of size-1 modes)."""
    assert normal(concrete(DYNAMIC_CASES[case](same), env)) == \
        normal(DYNAMIC_CASES[case](at(env)))


@pytest.mark.parametrize("env", ENVS)
def test_right_inverse_skips_dynamic_strides(env):
    """CuTe filters out dynamic strides: the inverse stops where the chain of
    strides meets one, so it is a prefix of the static inverse."""
    A = Layout((M, 4), (1, M))
    R = right_inverse(A)
    assert R.shape is M and R.stride == 1
    A_, R_ = concrete(A, env), concrete(R, env)
    assert all(A_(R_(i)) == i for i in range(size(R_)))
    static = right_inverse(A_)
    assert image(R_) == image(static)[:size(R_)] and size(static) == 4 * env["M"]


def test_static_parts_fold_to_ints():
    assert coalesce(Layout((2, 4, M))) == Layout((8, M), (1, 8))
    C = coalesce(Layout((2, 4, M)))
    assert type(C.shape[0]) is int and C.shape[1] is M
    assert coalesce(Layout((4, 2), (1, 4))) == Layout(8, 1)        # untouched by dynamics
    F = filter(Layout((M, 4, N), (0, 1, 4)))
    assert F.shape == (4, N) and F.shape[1] is N and F.stride == (1, 4)
    B = composition(Layout((M, N), (1, M)), (Layout(16, 4), Layout(4, 1)))
    assert B.shape == (16, 4) and B.stride[0] == 4 and B.stride[1] is M
    Cm = complement(Layout((4, 2), (1, 8)), M)
    assert Cm.shape[0] == 2 and Cm.stride == (4, 16) and type(Cm.shape[0]) is int
    R = right_inverse(Layout((M, 4), (1, M)))             # the dynamic stride is skipped
    assert R.shape is M and R.stride == 1
    U = upcast(Layout((8, M), (1, 8 * K)), 2)
    assert U.shape[0] == 4 and U.shape[1] is M and U.stride[0] == 1
    Z = zipped_divide(Layout((M, 8), (1, M)), (4, 8))
    assert Z.shape[0] == (4, 8) and type(Z.stride[0][0]) is int
    assert str(Layout((M, (N, 4)), (1, (M, K)))) == "(?,(?,4)):(1,(?,?))"


def test_swizzles_of_dynamic_offsets():
    sw = Swizzle(3, 4, 3)
    x = S.var("x")
    for v in (0, 0b1000010000, 12345):
        assert sw(x).eval({"x": v}) == sw(v)
    C = composition(sw, Layout((8, 64), (64, 1)))
    r, c = S.var("r"), S.var("c")
    for rv, cv in ((0, 0), (3, 17), (7, 63)):
        assert C(r, c).eval({"r": rv, "c": cv}) == C(rv, cv)


def test_slice_offsets_that_are_multiples_of_the_period_leave_the_swizzle():
    """Slicing a swizzled multistage buffer at a dynamic stage and a static
    column: the stage's term (a multiple of the swizzle's period) comes out
    as the slice's offset, the column stays inside the swizzle, so the
    swizzled part does not depend on the stage."""
    sw = Swizzle(2, 3, 3)                                 # period 2**8
    buf = composition(sw, Layout((8, 32, 3), (32, 1, 256)))   # (row, col, stage)
    stage = S.var("s")
    sub, off = slice_and_offset((None, 16, stage), buf)
    assert sub.offset == 16 and evaluate(off, {"s": 2}) == 512
    for s in range(3):
        for r in range(8):
            assert evaluate(sub(r) + off, {"s": s}) == buf(r, 16, s)
    col = S.var("c")                                      # a dynamic column stays inside
    sub, off = slice_and_offset((None, col, stage), buf)
    for s, c in ((0, 5), (2, 31)):
        for r in range(8):
            assert evaluate(sub(r) + off, {"s": s, "c": c}) == buf(r, c, s)


# -- where CuTe needs static values -----------------------------------------------------------

def test_complement_of_a_dynamic_stride_layout_of_rank_above_1():
    with pytest.raises(DynamicValueError, match=r"complement: layout \(4,8\):\(\?,1\) has "
                                                r"dynamic strides"):
        complement(Layout((4, 8), (M, 1)))
    # the products and tile_to_shape take the complement of the block
    with pytest.raises(DynamicValueError, match=r"complement: layout \(\?,4\):\(1,\?\)"):
        blocked_product(Layout((M, 4)), Layout((2, 2)))
    with pytest.raises(DynamicValueError, match="complement"):
        tile_to_shape(Layout((M, 8)), (64, 64))
    # the divides take the complement of the tiler
    with pytest.raises(DynamicValueError, match=r"complement: layout \(4,2\):\(\?,1\)"):
        logical_divide(Layout(64), Layout((4, 2), (M, 1)))
    # rank 1 is allowed (CuTe: "Dynamic-stride complement only for rank-1 layouts")
    assert concrete(complement(Layout(4, M), 4 * M * 2), {"M": 3}) == \
        complement(Layout(4, 3), 24)


def test_left_inverse_needs_static_strides():
    with pytest.raises(DynamicValueError, match=r"left_inverse: layout \(4,8\):\(1,\?\) has "
                                                "dynamic strides"):
        left_inverse(Layout((4, 8), (1, M)))
    # a dynamic extent with static strides is fine: with M = 3 it is a left inverse
    inverse = concrete(left_inverse(Layout((4, M), (1, 4))), {"M": 3})
    layout = Layout((4, 3), (1, 4))
    assert [inverse(layout(i)) for i in range(12)] == list(range(12))


def test_print_layout_needs_a_static_shape():
    with pytest.raises(LayoutError, match=r"print_layout: layout \(\?,4\):\(1,\?\) has a "
                                          "dynamic shape"):
        layout_to_text(Layout((M, 4)))


def test_upcast_by_a_dynamic_factor():
    with pytest.raises(DynamicValueError):
        upcast(Layout((8, 8)), M)


def test_a_swizzle_with_dynamic_parameters():
    with pytest.raises(DynamicValueError):
        Swizzle(M, 0, 3)

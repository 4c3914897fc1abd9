"""Dynamic values: the algebra on symbolic extents and strides gives
expressions that evaluate to the static answers, folds to ints where it
can, and refuses where CuTe needs static values."""
import pytest

from moye import (DynamicValueError, Layout, coalesce, complement, composition, left_inverse,
                  logical_divide, size, slice_and_offset, zipped_divide)
from moye.layout import inttuple as T

from .symbolic import S, evaluate

M, N = S.var("M"), S.var("N")
ENVS = [{"M": 256, "N": 64}, {"M": 384, "N": 16}]


def concrete(layout, env):
    return Layout(evaluate(layout.shape, env), evaluate(layout.stride, env))


@pytest.mark.parametrize("env", ENVS)
def test_zipped_divide_of_a_dynamic_matrix(env):
    A = Layout((M, N), (1, M))
    Z = zipped_divide(A, (128, 8))
    # the tile mode folds to static values, the rest mode stays symbolic
    assert str(Z[0]) == "(128,8):(1,?)"
    assert Z[0].shape == (128, 8) and Z[0].stride[0] == 1 and Z[0].stride[1] is M
    static = zipped_divide(Layout((env["M"], env["N"]), (1, env["M"])), (128, 8))
    assert concrete(Z, env) == static


@pytest.mark.parametrize("env", ENVS)
def test_evaluation_and_slicing_with_dynamic_coordinates(env):
    A = Layout((M, N), (1, M))
    i, j = S.var("i"), S.var("j")
    off = A(i, j)
    e = dict(env, i=5, j=3)
    assert off.eval(e) == 5 + 3 * env["M"]
    sub, o = slice_and_offset((None, j), A)
    assert sub.shape == (M,) and sub.stride == (1,)
    assert o.eval(e) == 3 * env["M"]


@pytest.mark.parametrize("env", ENVS)
def test_composition_and_logical_divide_match_the_static_answer(env):
    A = Layout((M, N), (1, M))
    static_A = concrete(A, env)
    for tiler in ((64, 4), (Layout(32, 2), None)):
        got = logical_divide(A, tiler)
        assert concrete(got, env) == logical_divide(static_A, tiler)
    B = composition(A, (Layout(16, 4), Layout(4, 1)))
    assert concrete(B, env) == composition(static_A, (Layout(16, 4), Layout(4, 1)))


def test_static_parts_fold_to_ints():
    A = Layout((M, 8), (1, M))
    Z = zipped_divide(A, (4, 8))
    assert Z.shape[0] == (4, 8) and type(Z.stride[0][0]) is int
    assert coalesce(Layout((4, 2), (1, 4))) == Layout(8, 1)      # untouched by dynamics


def test_dynamic_values_where_cute_needs_static_ones():
    with pytest.raises(DynamicValueError, match="complement"):
        complement(Layout((4, 8), (M, 1)))
    with pytest.raises(DynamicValueError, match="left_inverse"):
        left_inverse(Layout((4, 8), (1, M)))
    complement(Layout(4, M), 4 * M * 2)            # rank-1 with a dynamic stride is allowed

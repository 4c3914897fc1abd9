"""Whole-array operations: make_fragment_like, recast, transpose, zeros_ and
fill_, copyto, and broadcasting arithmetic, checked against NumPy on random
non-zero data with poisoned outputs."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moye.array import (MoYeArray, copyto, elementwise, fill_, make_fragment_like, recast,
                        transpose, zeros_)
from moye.errors import MoyeError
from moye.layout import Layout, cosize, size
from moye.layout import inttuple as T
from moye.types import Float32, Float64, Int64, UInt128

from .paths import BOTH_PATHS, view_threshold


def rand(shape_or_n, seed=0):
    return np.random.default_rng(seed).uniform(1, 2, shape_or_n)


def over(layout, seed=0, pad=0):
    """A MoYeArray of random values over a fresh buffer of cosize + pad elements."""
    return MoYeArray(rand(cosize(layout) + pad, seed), layout)


# -- make_fragment_like -------------------------------------------------------------

FRAGMENT_CASES = [
    ("((1,(2,3)),1,1):((0,(1,4)),0,0)", Layout(((1, (2, 3)), 1, 1), ((0, (1, 4)), 0, 0)),
     "((1,(2,3)),1,1):((0,(1,2)),0,0)"),
    ("(2,4):(4,1)", Layout((2, 4), (4, 1)), "(2,4):(1,2)"),
    ("(4,(2,3)):(6,(1,2))", Layout((4, (2, 3)), (6, (1, 2))), "(4,(2,3)):(1,(4,8))"),
    ("8:3", Layout(8, 3), "8:1"),
]


@pytest.mark.parametrize("name, layout, fragment", FRAGMENT_CASES,
                         ids=[c[0] for c in FRAGMENT_CASES])
def test_make_fragment_like_layouts(name, layout, fragment):
    assert str(make_fragment_like(layout)) == fragment
    a = over(layout)
    frag = make_fragment_like(a)
    assert str(frag.layout) == fragment and frag.dtype is a.dtype
    assert frag.engine.buffer.size == cosize(frag.layout)
    assert not np.shares_memory(frag.engine.buffer, a.engine.buffer)
    copyto(frag, a)                                    # a fragment holds a copy of its source
    assert np.array_equal(frag.numpy(), a.numpy())


def test_make_fragment_like_with_another_type_or_a_shape():
    a = over(Layout((2, 4), (4, 1)))
    assert make_fragment_like(a, Float32).dtype is Float32
    assert str(make_fragment_like((2, 3))) == "(2,3):(1,2)"
    frag = make_fragment_like(Layout((2, 4), (4, 1)), Int64)
    assert frag.dtype is Int64 and str(frag.layout) == "(2,4):(1,2)"


# -- recast ---------------------------------------------------------------------------

def test_recast_float32_to_uint128_sees_the_same_bytes():
    buf = rand(24).astype(np.float32)
    a = MoYeArray(buf, Layout((8, 3)))
    u = recast(a, UInt128)
    assert u.dtype is UInt128 and str(u.layout) == "(2,3):(1,2)"
    assert np.shares_memory(u.engine.buffer, buf)
    for i in range(2):
        for j in range(3):
            k = 4 * i + 8 * j
            assert u[i, j].tobytes() == buf[k:k + 4].tobytes()
    u[1, 2] = a[0, 0].tobytes() * 4                    # a write through the UInt128 view
    assert (buf[20:24] == buf[0]).all()


def test_recast_uint128_to_float32_sees_the_same_bytes():
    raw = np.random.default_rng(1).integers(1, 255, 16 * 6, dtype=np.uint8)
    vectors = np.frombuffer(raw.tobytes(), dtype=UInt128.numpy).copy()
    u = MoYeArray(vectors, Layout((2, 3)))
    f = recast(u, Float32)
    assert f.dtype is Float32 and str(f.layout) == "(8,3):(1,8)"
    assert f.numpy().tobytes(order="F") == vectors.tobytes()
    assert str(recast(f, UInt128).layout) == "(2,3):(1,2)"     # and back again
    f[5, 1] = 1.5
    assert vectors[3].tobytes()[4:8] == np.float32(1.5).tobytes()


def test_recast_of_a_strided_float32_array():
    buf = rand(64).astype(np.float32)
    a = MoYeArray(buf, Layout((4, 4), (1, 16)))        # 16-byte columns, 64 bytes apart
    u = recast(a, UInt128)
    assert str(u.layout) == "(1,4):(1,4)"
    assert [u[0, j].tobytes() for j in range(4)] == \
        [buf[16 * j:16 * j + 4].tobytes() for j in range(4)]


def test_a_misaligned_recast_raises():
    buf = rand(16).astype(np.float32)
    a = MoYeArray(buf, Layout(16))
    shifted = MoYeArray.view_of(a.engine.offset_by(1), Layout(12))
    with pytest.raises(MoyeError, match="starts at byte 4, which is not aligned to UInt128"):
        recast(shifted, UInt128)
    with pytest.raises(MoyeError, match=r"cannot see layout \(6,2\):\(1,6\) of Float32 as UInt128"):
        recast(MoYeArray(buf, Layout((6, 2), (1, 6))), UInt128)


# -- transpose, zeros_, fill_ ----------------------------------------------------------

def test_transpose_is_a_view_with_the_modes_swapped():
    buf = rand(32, 2)
    a = MoYeArray(buf, Layout((4, 8)))
    t = transpose(a)
    assert str(t.layout) == "(8,4):(4,1)" and t.engine is a.engine
    assert np.array_equal(t.numpy(), a.numpy().T)
    t[7, 3] = -1.0
    assert a[3, 7] == -1.0 == buf[31]
    assert str(transpose(Layout((4, 8)))) == "(8,4):(4,1)"


@pytest.mark.parametrize("threshold", BOTH_PATHS)
def test_zeros_and_fill_touch_only_the_view(threshold):
    buf = rand(12, 3)
    before = buf.copy()
    a = MoYeArray(buf, (3, 4))
    with view_threshold(threshold):
        assert zeros_(a[:, 1]) is not None
        fill_(a[2, :], 7.5)
    expected = before.reshape(4, 3).T.copy()
    expected[:, 1] = 0.0
    expected[2, :] = 7.5
    assert np.array_equal(a.numpy(), expected)


# -- copyto ----------------------------------------------------------------------------

@st.composite
def layouts_with_mode_sizes(draw, dims):
    """A random layout whose modes have sizes `dims`: a mode may be split in
    two (nested), the flat modes laid out in a random order with gaps."""
    shape = []
    for n in dims:
        factors = [f for f in range(2, n) if n % f == 0]
        if factors and draw(st.booleans()):
            f = draw(st.sampled_from(factors))
            shape.append((f, n // f))
        else:
            shape.append(n)
    shape = tuple(shape)
    flat = T.flatten_to_tuple(shape)
    stride, acc = [0] * len(flat), 1
    for i in draw(st.permutations(range(len(flat)))):
        stride[i] = acc
        acc *= flat[i] * draw(st.sampled_from([1, 1, 2]))
    return Layout(shape, T.unflatten(tuple(stride), shape))


@st.composite
def copy_cases(draw):
    dims = tuple(draw(st.lists(st.integers(1, 8), min_size=1, max_size=3)))
    return (draw(layouts_with_mode_sizes(dims)), draw(layouts_with_mode_sizes(dims)),
            draw(st.integers(0, 3)), draw(st.integers(0, 2**32 - 1)))


@given(copy_cases())
def test_copyto_between_layouts_of_equal_mode_sizes_is_numpys_copy(case):
    dst_layout, src_layout, start, seed = case
    src = MoYeArray(rand(cosize(src_layout), seed), src_layout)
    for threshold in BOTH_PATHS:
        buf = np.full(start + cosize(dst_layout) + 1, np.nan)            # poisoned
        dst = MoYeArray.view_of(MoYeArray(buf, Layout(len(buf))).engine.offset_by(start),
                                dst_layout)
        with view_threshold(threshold):
            copyto(dst, src)
        assert np.array_equal(dst.numpy(), src.numpy())
        touched = {start + dst_layout(i) for i in range(size(dst_layout))}
        untouched = [k for k in range(len(buf)) if k not in touched]
        assert np.isnan(buf[untouched]).all()


def test_copyto_a_transposed_strided_view_of_random_data():
    A = rand((24, 16), 4)
    out = np.full((16, 24), np.nan)
    copyto(MoYeArray(out[:, ::1]), transpose(MoYeArray(A)))
    assert np.array_equal(out, A.T)
    big = np.full((16, 48), np.nan)                    # every other column of a larger array
    copyto(MoYeArray(big[:, ::2]), MoYeArray(out))
    assert np.array_equal(big[:, ::2], A.T) and np.isnan(big[:, 1::2]).all()


def test_copyto_shape_mismatch_names_both_shapes():
    dst, src = over(Layout((4, 8))), over(Layout((8, 4)))
    with pytest.raises(MoyeError) as e:
        copyto(dst, src)
    assert str(e.value) == ("copyto: dst has shape (4,8) but src has shape (8,4); "
                            "they must be congruent")


def test_copyto_ignores_trailing_size_one_modes_and_takes_scalars():
    src = over(Layout((4, 8)), 5)
    dst = MoYeArray(np.full(32, np.nan), Layout((4, 8, 1)))
    copyto(dst, src)
    assert np.array_equal(dst.numpy()[:, :, 0], src.numpy())
    copyto(dst, 2.5)
    assert (dst.numpy() == 2.5).all()


def test_copyto_needs_a_moye_array_destination():
    with pytest.raises(TypeError, match="dst must be a MoYeArray"):
        copyto(np.zeros(4), over(Layout(4)))


# -- broadcasting arithmetic ---------------------------------------------------------------

@pytest.fixture
def row_major():
    """A (3,4) row-major array of random values and its NumPy twin."""
    buf = rand(12, 6)
    return MoYeArray(buf, Layout((3, 4), (4, 1))), buf.reshape(3, 4).copy()


def test_scalar_arithmetic(row_major):
    a, ref = row_major
    for got, want in [(a * 3, ref * 3), (3 * a, 3 * ref), (a + 1.5, ref + 1.5),
                      (2 - a, 2 - ref), (a / 4, ref / 4), (1 / a, 1 / ref), (-a, -ref),
                      (abs(-a), ref), (a ** 2, ref ** 2), (a // 0.5, ref // 0.5),
                      (a % 0.3, ref % 0.3)]:
        assert isinstance(got, MoYeArray) and np.allclose(got.numpy(), want, rtol=0, atol=0)
        assert str(got.layout) == "(3,4):(4,1)"          # a's stride order, compact
        assert not np.shares_memory(got.engine.buffer, a.engine.buffer)


def test_array_arithmetic_between_different_layouts(row_major):
    a, ref = row_major
    b = MoYeArray(rand(12, 7), Layout((3, 4)))           # column-major
    assert np.array_equal((a + b).numpy(), ref + b.numpy())
    assert np.array_equal((a * b).numpy(), ref * b.numpy())
    assert str((a + b).layout) == "(3,4):(4,1)" and str((b + a).layout) == "(3,4):(1,3)"


def test_a_vector_aligns_with_the_leading_mode(row_major):
    # Julia broadcasting: a length-3 vector runs along mode 0 (the rows)
    a, ref = row_major
    vec = np.array([1.25, -2.5, 4.0])
    v = MoYeArray(vec, 3)
    assert np.array_equal((a - v).numpy(), ref - vec[:, None])
    assert np.array_equal((v * a).numpy(), vec[:, None] * ref)
    with pytest.raises(ValueError):                      # a length-4 vector does not fit mode 0
        a - MoYeArray(np.ones(4), 4)


def test_in_place_arithmetic_keeps_the_layout_and_memory(row_major):
    a, ref = row_major
    engine, layout = a.engine, a.layout
    vec = np.array([0.5, 1.5, 2.5])
    b = MoYeArray(rand(12, 8), Layout((3, 4)))
    a += 1.0
    a -= MoYeArray(vec, 3)
    a *= b
    a /= 3.0
    expected = (ref + 1.0 - vec[:, None]) * b.numpy() / 3.0
    assert a.engine is engine and a.layout is layout
    assert np.allclose(a.numpy(), expected, rtol=1e-15, atol=0)
    assert np.allclose(engine.buffer.reshape(3, 4), expected, rtol=1e-15, atol=0)


def test_in_place_arithmetic_on_a_view_writes_into_its_parent(row_major):
    a, ref = row_major
    row = a[1, :]
    row += 10.0
    ref[1] += 10.0
    assert np.array_equal(a.numpy(), ref)


def test_integer_arrays_follow_numpys_types():
    a = MoYeArray(np.arange(1, 7), (2, 3))
    assert (a * 2).dtype is Int64 and (a / 2).dtype is Float64
    assert (a / 2).numpy().tolist() == [[0.5, 1.5, 2.5], [1.0, 2.0, 3.0]]


def test_elementwise_applies_any_numpy_function(row_major):
    a, ref = row_major
    b = MoYeArray(rand(12, 9), Layout((3, 4)))
    assert np.array_equal(elementwise(np.maximum, a, b).numpy(), np.maximum(ref, b.numpy()))
    assert elementwise(np.add, 1.0, 2.0) == 3.0          # all scalars: a scalar

"""MoYeArray: construction over NumPy buffers, element access, slicing and
views, iteration and conversion back to NumPy."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moye.array import MoYeArray, view
from moye.errors import MoyeError
from moye.layout import Layout, cosize, size
from moye.layout import inttuple as T
from moye.types import ALL_TYPES, BFloat16, Float16, Float32, Float64, Int64, TFloat32, UInt128

from .strategies import any_layouts


def rng(seed=0):
    return np.random.default_rng(seed)


def logical(buffer, layout, start=0):
    """The logical array of `layout` over `buffer`, element by element (the
    definition every faster path must agree with)."""
    dims = tuple(T.product_each(layout.shape)) if type(layout.shape) is tuple else (layout.shape,)
    out = np.empty(dims, dtype=buffer.dtype)
    for i in range(size(layout)):
        out[np.unravel_index(i, dims, order="F")] = buffer[start + layout(i)]
    return out


# -- construction --------------------------------------------------------------

def test_a_layout_views_the_numpy_buffer_without_a_copy():
    buf = rng().uniform(1, 2, 12)
    a = MoYeArray(buf, Layout((3, 4)))
    assert np.shares_memory(a.engine.buffer, buf)
    buf[7] = 42.0                         # write through NumPy, read through moye
    assert a[1, 2] == 42.0 and a[7] == 42.0
    a[2, 3] = -5.0                        # and the other way
    assert buf[11] == -5.0


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_contiguous_2d_array_is_linear_memory_in_its_own_order(order):
    arr = np.asarray(rng(1).uniform(1, 2, (4, 3)), order=order)
    a = MoYeArray(arr, Layout(12))
    assert np.array_equal(a.numpy(), arr.reshape(-1, order=order))
    arr[1, 2] = 99.0
    assert a[(1 * 3 + 2) if order == "C" else (1 + 2 * 4)] == 99.0


def test_a_list_is_copied_into_a_new_buffer():
    # A Python list has no memory NumPy can share: MoYeArray copies it once.
    values = [3, 1, 4, 1, 5, 9]
    a = MoYeArray(values, Layout((2, 3)))
    assert a.dtype is Int64
    assert a.numpy().tolist() == [[3, 4, 5], [1, 1, 9]]
    a[0] = 7
    assert values[0] == 3


@pytest.mark.parametrize("make, layout", [
    (lambda x: x, "(3,4):(4,1)"),
    (lambda x: np.asfortranarray(x), "(3,4):(1,3)"),
    (lambda x: x[:, ::2], "(3,2):(4,2)"),
    (lambda x: x.T, "(4,3):(1,4)"),
    (lambda x: x[1], "4:1"),
    (lambda x: x[:, 1:2], "(3,1):(4,0)"),
])
def test_an_array_without_layout_keeps_numpys_strides(make, layout):
    arr = make(rng(2).uniform(1, 2, (3, 4)))
    a = MoYeArray(arr)
    assert str(a.layout) == layout
    assert np.array_equal(np.asarray(a), arr)
    idx = tuple(n - 1 for n in arr.shape)
    a[idx if len(idx) > 1 else idx[0]] = -1.0          # writes through to NumPy's element
    assert arr[idx] == -1.0


def test_a_zero_dimensional_array_is_one_element():
    arr = np.array(2.5)
    a = MoYeArray(arr)
    assert str(a.layout) == "1:0" and a[0] == 2.5


def test_negative_numpy_strides_are_refused():
    with pytest.raises(MoyeError, match="negative"):
        MoYeArray(np.arange(5.0)[::-1])


def test_a_layout_larger_than_the_buffer_is_refused():
    with pytest.raises(MoyeError, match=r"layout \(3,5\):\(1,3\) reaches 15 elements but the "
                                        r"buffer has only 12"):
        MoYeArray(np.ones(12), Layout((3, 5)))


def test_a_layout_over_non_contiguous_memory_is_refused():
    arr = rng().uniform(1, 2, (4, 6))[:, ::2]
    with pytest.raises(MoyeError, match=r"needs linear memory.*shape \(4, 3\).*pass no layout"):
        MoYeArray(arr, Layout(12))


def test_empty_allocates_the_cosize():
    a = MoYeArray.empty(Float32, Layout((2, 3), (1, 4)))
    assert a.engine.buffer.shape == (cosize(a.layout),) == (10,)
    assert a.dtype is Float32 and a.engine.buffer.dtype == np.float32


def test_zeros_and_fill():
    z = MoYeArray.zeros(Float64, (3, 2))
    assert z.numpy().tolist() == [[0.0, 0.0]] * 3
    f = MoYeArray.fill(1.25, (2, 2))
    assert f.dtype is Float64 and f.numpy().tolist() == [[1.25, 1.25]] * 2
    i = MoYeArray.fill(7, Layout(3), Int64)
    assert i.numpy().tolist() == [7, 7, 7]


def test_fill_with_a_zero_stride_layout_holds_one_element():
    a = MoYeArray.fill(1.5, Layout((3, 2), (0, 0)))
    assert a.engine.buffer.shape == (1,)
    assert a.numpy().tolist() == [[1.5, 1.5]] * 3
    a[2, 1] = 4.0                          # every coordinate is the same element
    assert a.numpy().tolist() == [[4.0, 4.0]] * 3


def _random_values(t, n, gen):
    """n random, non-zero values of element type t as its NumPy storage."""
    if t is UInt128:
        return np.frombuffer(gen.integers(1, 256, 16 * n, dtype=np.uint8).tobytes(),
                             dtype=t.numpy).copy()
    if t.kind == "bool":
        return np.ones(n, dtype=bool)
    if t.is_float:
        return gen.uniform(1, 2, n).astype(t.numpy)
    hi = 2 if t.bits == 1 else 8 if t.bits == 4 else 100
    return gen.integers(1, hi, n).astype(t.numpy)


@pytest.mark.parametrize("t", ALL_TYPES, ids=str)
def test_every_element_type_round_trips(t):
    gen = rng(3)
    a = MoYeArray.empty(t, Layout((2, 3), (3, 1)))
    assert a.dtype is t and a.engine.buffer.dtype == t.numpy
    values = _random_values(t, 6, gen)
    src = MoYeArray(values, Layout((2, 3)))
    a[None, None] = src                       # copy through a full slice
    assert a.numpy().tobytes() == src.numpy().tobytes()
    a[1, 2] = values[0]
    assert a[1, 2] == values[0]
    zero = np.zeros(1, dtype=t.numpy)[0]
    assert all(v == zero for v in MoYeArray.zeros(t, (2, 2)))


@pytest.mark.parametrize("t", [BFloat16, Float16, TFloat32, UInt128], ids=str)
def test_special_element_types_keep_their_type(t):
    a = MoYeArray.fill(_random_values(t, 1, rng(4))[0], Layout((2, 2), (0, 0)), t)
    assert a.dtype is t and a.engine.buffer.size == 1
    assert len(set(np.asarray(v).tobytes() for v in a)) == 1


def test_a_numpy_array_of_16_byte_elements_is_uint128():
    # bug fix: such a buffer used to raise "no moye element type stores as |V16"
    raw = _random_values(UInt128, 4, rng(5))
    a = MoYeArray(raw)
    assert a.dtype is UInt128 and str(a.layout) == "4:1"
    assert bytes(a[3]) == raw[3].tobytes()


def test_zeros_of_uint128():
    # bug fix: writing the int 0 into 16-byte elements used to raise TypeError
    z = MoYeArray.zeros(UInt128, (2, 2))
    assert z.engine.buffer.tobytes() == bytes(64)
    z[1, 1] = 0x0102
    assert bytes(z[1, 1]) == b"\x02\x01" + bytes(14)


# -- element access ------------------------------------------------------------

@given(any_layouts(), st.integers(0, 5))
def test_1d_rd_and_hd_coordinates_agree_with_the_logical_array(layout, start):
    buf = rng(6).uniform(1, 2, start + cosize(layout))
    a = MoYeArray.view_of(MoYeArray(buf, Layout(len(buf))).engine.offset_by(start), layout)
    expected = logical(buf, layout, start)
    shape = layout.shape
    for i in range(size(layout)):
        hier = T.index_to_coord(i, shape)
        flat = tuple(T.coord_to_index(c, s) for c, s in zip(hier, shape)) \
            if type(shape) is tuple else hier
        want = expected[np.unravel_index(i, expected.shape, order="F")]
        assert a[i] == a[hier] == a[flat] == want
    assert np.array_equal(a.numpy(), expected)


@pytest.mark.parametrize("coord, message", [
    ((2, 0), "coordinate (2,0) is out of bounds for the array's shape (2,(3,4))"),
    ((0, (3, 0)), "coordinate (0,(3,0)) is out of bounds for the array's shape (2,(3,4))"),
    ((0, 12), "coordinate (0,12) is out of bounds for the array's shape (2,(3,4))"),
    (24, "coordinate 24 is out of bounds for the array's shape (2,(3,4))"),
    (-1, "coordinate -1 is out of bounds for the array's shape (2,(3,4))"),
    ((0, 0, 0), "coordinate (0,0,0) does not fit the array's shape (2,(3,4))"),
    ((0, (1, 2, 3)), "coordinate (0,(1,2,3)) does not fit the array's shape (2,(3,4))"),
])
def test_out_of_bounds_coordinates_name_the_coordinate_and_shape(coord, message):
    a = MoYeArray(rng().uniform(1, 2, 24), Layout((2, (3, 4))))
    with pytest.raises(IndexError) as e:
        a[coord]
    assert str(e.value) == message
    with pytest.raises(IndexError):
        a[coord] = 1.0


def test_call_is_indexing():
    a = MoYeArray(rng().uniform(1, 2, 12), (3, 4))
    assert a(2, 3) == a[2, 3] and a(5) == a[5]


# -- slicing and views -----------------------------------------------------------

def test_a_row_is_a_view_that_writes_through():
    buf = rng(7).uniform(1, 2, 12)
    a = MoYeArray(buf, (3, 4))
    row = a[1, :]
    assert str(row.layout) == "(4):(3)" and np.shares_memory(row.engine.buffer, buf)
    assert np.array_equal(row.numpy(), buf.reshape(4, 3).T[1])
    row[2] = -7.0
    assert buf[1 + 3 * 2] == -7.0 and a[1, 2] == -7.0


def test_a_slice_inside_a_nested_mode():
    buf = rng(8).uniform(1, 2, 24)
    a = MoYeArray(buf, Layout((2, (3, 4))))
    sub = a[:, (1, slice(None))]
    assert str(sub.layout) == "(2,4):(1,6)"
    assert np.array_equal(sub.numpy(), buf.reshape(4, 3, 2).transpose(2, 1, 0)[:, 1, :])
    sub[1, 3] = 123.0
    assert a[1, (1, 3)] == 123.0 and buf[1 + 2 * 1 + 6 * 3] == 123.0
    # None is the same as a full slice (CuTe's `_`)
    assert a[None, (1, None)].layout == sub.layout


def test_view_is_slicing():
    a = MoYeArray(rng().uniform(1, 2, 24), Layout((2, (3, 4))))
    assert view(a, None, (1, None)).layout == a[:, (1, None)].layout
    assert view(a, 1, 2) == a[1, 2]
    assert view(a, (1, None)).layout == a[1, None].layout


def test_assigning_to_a_slice_copies_into_the_view():
    buf = rng(9).uniform(1, 2, 12)
    a = MoYeArray(buf, (3, 4))
    a[:, 2] = 5.0
    assert buf.reshape(4, 3)[2].tolist() == [5.0, 5.0, 5.0]
    src = MoYeArray(np.array([7.0, 8.0, 9.0, 10.0]), 4)
    a[0, :] = src
    assert buf.reshape(4, 3)[:, 0].tolist() == [7.0, 8.0, 9.0, 10.0]


# -- iteration and conversion -------------------------------------------------------

def test_iteration_is_colexicographic():
    buf = rng(10).uniform(1, 2, 6)
    a = MoYeArray(buf, Layout((2, 3), (3, 1)))            # row-major
    assert list(a) == [buf[0], buf[3], buf[1], buf[4], buf[2], buf[5]]
    assert list(a) == [a[i] for i in range(len(a))]


def test_len_is_the_number_of_elements():
    assert len(MoYeArray(np.ones(24), Layout((2, (3, 4))))) == 24
    assert len(MoYeArray.fill(1.0, Layout((5, 5), (0, 0)))) == 25


def test_numpy_and_asarray_are_the_logical_array():
    buf = rng(11).uniform(1, 2, 40)
    layout = Layout((2, (3, 4)), (12, (1, 3)))
    a = MoYeArray(buf, layout)
    expected = logical(buf, layout)
    assert expected.shape == (2, 12)
    assert np.array_equal(a.numpy(), expected)
    assert np.array_equal(np.asarray(a), expected)
    assert np.asarray(a, dtype=np.float32).dtype == np.float32
    copy = a.numpy()
    copy[...] = 0.0                                    # numpy() is a copy
    assert np.array_equal(a.numpy(), expected)

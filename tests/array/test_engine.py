"""The host engine: offsets of a layout, and reads and writes through a
strided NumPy view (large layouts) or an offset array (small or swizzled
ones), which must agree element by element."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from moye.array import HostEngine, MoYeArray, engine, layout_offsets
from moye.layout import Layout, Swizzle, cosize, make_composed_layout, size
from moye.types import Float64, UInt128

from .strategies import any_layouts, image, injective_layouts
from .paths import BOTH_PATHS, view_threshold


@pytest.fixture(params=["view", "index"])
def path(request, monkeypatch):
    """Run a test through the strided-view path (every layout) or the
    offset-array path (none)."""
    monkeypatch.setattr(engine, "_VIEW_THRESHOLD", 0 if request.param == "view" else 1 << 62)
    return request.param


@given(any_layouts())
def test_layout_offsets_are_the_layout_in_colex_order(layout):
    off = layout_offsets(layout)
    assert off.dtype == np.int64 and not off.flags.writeable
    assert off.tolist() == image(layout)


def test_layout_offsets_of_a_swizzled_layout():
    sw = make_composed_layout(Swizzle(1, 0, 2), 0, Layout((4, 2)))
    assert layout_offsets(sw).tolist() == [sw(i) for i in range(8)]


@pytest.mark.parametrize("layout", [Layout((4, 3), (3, 1)), Layout((2, (2, 3)), (0, (7, 1))),
                                    Layout((3, 4), (-1, 5))])
def test_read_is_the_elements_in_colex_order(path, layout):
    start = 3
    buf = np.random.default_rng(0).uniform(1, 2, 40)
    e = HostEngine(buf, start)
    got = e.read(layout)
    assert got.tolist() == [buf[start + layout(i)] for i in range(size(layout))]
    got[...] = 0.0                                      # read returns a copy
    assert (buf != 0.0).all()


@given(st.data())
def test_read_and_write_agree_with_element_access(data):
    layout = data.draw(any_layouts())
    start = data.draw(st.integers(0, 4))
    gen = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    buf = gen.uniform(1, 2, start + cosize(layout) + 2)
    expected = [buf[start + layout(i)] for i in range(size(layout))]
    for threshold in BOTH_PATHS:
        with view_threshold(threshold):
            assert HostEngine(buf, start).read(layout).tolist() == expected


@given(st.data())
def test_write_of_an_injective_layout_stores_each_value_at_its_offset(data):
    layout = data.draw(injective_layouts())
    start = data.draw(st.integers(0, 4))
    gen = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    values = gen.uniform(1, 2, size(layout))
    expected = np.full(start + cosize(layout) + 2, np.nan)
    for i in range(size(layout)):
        expected[start + layout(i)] = values[i]
    for threshold in BOTH_PATHS:
        buf = np.full_like(expected, np.nan)                      # poisoned
        with view_threshold(threshold):
            HostEngine(buf, start).write(layout, values)
        assert np.array_equal(buf, expected, equal_nan=True)


def test_write_broadcasts_a_scalar(path):
    buf = np.full(30, np.nan)
    HostEngine(buf, 2).write(Layout((3, 4), (1, 6)), 2.5)
    touched = [2 + i + 6 * j for i in range(3) for j in range(4)]
    assert (buf[touched] == 2.5).all()
    assert np.isnan(np.delete(buf, touched)).all()


def test_write_to_a_zero_stride_layout_keeps_the_last_value(path):
    buf = np.full(4, np.nan)
    HostEngine(buf).write(Layout((3, 2), (1, 0)), np.arange(1.0, 7.0))
    assert buf[:3].tolist() == [4.0, 5.0, 6.0] and np.isnan(buf[3])


def test_reading_past_the_buffer_raises(path):
    with pytest.raises(IndexError):
        HostEngine(np.ones(10), 2).read(Layout((3, 3)))


def test_a_large_copy_takes_the_view_path_and_matches_numpy():
    gen = np.random.default_rng(1)
    s, d = gen.uniform(1, 2, 128 * 96), np.full(128 * 96, np.nan)
    assert size(Layout((128, 96))) >= engine._VIEW_THRESHOLD
    HostEngine(d).write(Layout((128, 96), (96, 1)), HostEngine(s).read(Layout((128, 96))))
    assert np.array_equal(d.reshape(128, 96), s.reshape(96, 128).T)


def test_offset_by_and_recast_share_the_buffer():
    buf = np.arange(1.0, 9.0)
    e = HostEngine(buf).offset_by(2)
    assert e.start == 2 and e.buffer is buf and len(e) == 6
    r = HostEngine(buf).recast(UInt128)
    assert r.dtype is UInt128 and len(r) == 4 and np.shares_memory(r.buffer, buf)


def test_uint128_store_of_an_int_is_little_endian():
    e = HostEngine(np.zeros(2, dtype=UInt128.numpy))
    e.store(1, 2**64 + 3)
    assert e.load(1).tobytes() == b"\x03" + bytes(7) + b"\x01" + bytes(7)
    assert e.dtype is UInt128


def test_a_host_engine_needs_no_copy():
    buf = np.ones(4)
    a = MoYeArray.view_of(HostEngine(buf, 0, Float64), Layout(4))
    a[3] = 9.0
    assert buf[3] == 9.0

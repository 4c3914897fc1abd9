"""Hostile accesses to host arrays: coordinates outside the shape (negative
ones too), views that overhang their buffer or reach before it, negative
strides, and thread ids outside a thread layout. Nothing may be read or
written outside the buffer; the ordinary tests at the end check what must
work (negative strides inside the buffer, a predicated overhanging view)."""
import numpy as np
import pytest

from moye import (BoundsError, Layout, MoYeArray, MoyeTypeError, Swizzle, composition, copyto,
                  fill_, parallelize, tile)
from moye.array import HostEngine

from .hostile import Hostile, check, ids


def a34():
    return MoYeArray(np.arange(12.0), Layout((3, 4)))


def set_item(a, coord, value):
    a[coord] = value


def _issue_example():
    buf = np.arange(12)
    MoYeArray(buf, Layout((3, 4), (-1, 3)))[1, 0] = -7


CASES = [
    Hostile("a negative stride reaching before the buffer (the issue's example)",
            _issue_example, BoundsError,
            r"layout \(3,4\):\(-1,3\) reaches offset -2, before the start of the buffer"),
    Hostile("a layout larger than the buffer", lambda: MoYeArray(np.arange(10), Layout(11)),
            BoundsError, r"layout 11:1 reaches 11 elements but the buffer has only 10"),
    Hostile("a swizzle reaching past the buffer",
            lambda: MoYeArray(np.zeros(2), composition(Swizzle(1, 0, -1), Layout(2))),
            BoundsError, r"reaches 4 elements but the buffer has only 2"),
    Hostile("a NumPy array as the layout", lambda: MoYeArray(np.zeros(8), np.array([2, 4])),
            MoyeTypeError, r"MoYeArray layout: expected a Layout, an int or a shape, got array"),
    Hostile("an index past the size", lambda: MoYeArray(np.arange(10), Layout(10))[10],
            BoundsError, r"coordinate 10 is out of bounds for the array's shape 10"),
    Hostile("a negative index", lambda: MoYeArray(np.arange(10), Layout(10))[-1], BoundsError,
            r"coordinate -1 is out of bounds for the array's shape 10"),
    Hostile("a negative coordinate in one mode", lambda: a34()[1, -1], BoundsError,
            r"coordinate \(1,-1\) is out of bounds for the array's shape \(3,4\)"),
    Hostile("a store past the extent of a mode", lambda: set_item(a34(), (3, 0), 1.0),
            BoundsError, r"coordinate \(3,0\) is out of bounds for the array's shape \(3,4\)"),
    Hostile("a coordinate of the wrong rank", lambda: a34()[1, 2, 0], BoundsError,
            r"coordinate \(1,2,0\) does not fit the array's shape \(3,4\)"),
    Hostile("a slice at a negative coordinate", lambda: a34()[-1, :], BoundsError,
            r"coordinate \(-1,_\) is out of bounds for the array's shape \(3,4\)"),
    Hostile("a slice past the extent", lambda: a34()[:, 4], BoundsError,
            r"coordinate \(_,4\) is out of bounds for the array's shape \(3,4\)"),
    Hostile("a tile at a negative tile coordinate",
            lambda: tile(MoYeArray(np.arange(16), (4, 4)), (2, 2), (-1, 0)), BoundsError,
            r"coordinate \(\(_,_\),\(-1,0\)\) is out of bounds for the array's shape "
            r"\(\(2,2\),\(2,2\)\)"),
    Hostile("a tile past the last tile",
            lambda: tile(MoYeArray(np.arange(16), (4, 4)), (2, 2), (2, 0)), BoundsError,
            r"coordinate \(\(_,_\),\(2,0\)\) is out of bounds"),
    Hostile("reading a tile that overhangs its buffer",
            lambda: tile(MoYeArray(np.arange(10), 10), 4, 2).numpy(), BoundsError,
            r"shape \(4\) with layout \(4\):\(1\) from element 8 reaches elements 8\.\.11, "
            r"outside its buffer of 10 elements \(0\.\.9\): coordinate \(2\) is element 10"),
    Hostile("an element of an overhanging tile outside the buffer",
            lambda: tile(MoYeArray(np.arange(10), 10), 4, 2)[3], BoundsError,
            r"coordinate 3 of an array of shape \(4\) .* is element 11 of a buffer of 10"),
    Hostile("copying into an overhanging tile",
            lambda: copyto(tile(MoYeArray(np.zeros(10), 10), 4, 2), MoYeArray(np.ones(4))),
            BoundsError, r"reaches elements 8\.\.11, outside its buffer of 10 elements"),
    Hostile("a view of an engine reaching before its start",
            lambda: MoYeArray.view_of(HostEngine(np.zeros(8)), Layout(4, -1)).numpy(),
            BoundsError, r"reaches elements -3\.\.0, outside its buffer of 8 elements"),
    Hostile("a large overhanging view (the strided-view path)",
            lambda: MoYeArray.view_of(HostEngine(np.zeros(5000)), Layout(5001)).numpy(),
            BoundsError, r"reaches elements 0\.\.5000, outside its buffer of 5000 elements"),
    Hostile("filling a large reversed view that reaches before the buffer",
            lambda: fill_(MoYeArray.view_of(HostEngine(np.zeros(5000), 10), Layout(5000, -1)),
                          1.0), BoundsError, r"reaches elements -4989\.\.10"),
    Hostile("parallelize by a thread past the thread layout (the issue's example)",
            lambda: parallelize(MoYeArray(np.arange(16), 16), Layout(4), 7), BoundsError,
            r"parallelize: thread 7 is not one of the threads 0\.\.3 of the thread layout 4:1"),
    Hostile("parallelize by a negative thread",
            lambda: parallelize(MoYeArray(np.arange(16), 16), Layout(4), -1), BoundsError,
            r"parallelize: thread -1 is not one of the threads 0\.\.3"),
    Hostile("parallelize with a projection by a thread past the whole thread layout",
            lambda: parallelize(MoYeArray(np.arange(64), (8, 8)), Layout((4, 4)), 16, (1, None)),
            BoundsError, r"thread 16 is not one of the threads 0\.\.15 of the thread layout "
                         r"\(4,4\):\(1,4\)"),
    Hostile("parallelize by a thread id the thread layout never reaches",
            lambda: parallelize(MoYeArray(np.arange(16), 16), Layout(4, 2), 1), BoundsError,
            r"thread 1 is not one of the threads 0\.\.6 of the thread layout 4:2"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)


def test_the_issue_example_leaves_the_buffer_as_it_was():
    buf = np.arange(12)
    with pytest.raises(BoundsError):
        _issue_example()
    assert buf.tolist() == list(range(12))


def test_a_reversed_view_inside_its_buffer_reads_and_writes_in_place():
    rng = np.random.default_rng(1)
    buf = rng.standard_normal(14)
    before = buf.copy()
    a = MoYeArray.view_of(HostEngine(buf, 2), Layout((3, 4), (-1, 3)))   # elements 0..11
    want = np.array([[before[2 - i + 3 * j] for j in range(4)] for i in range(3)])
    np.testing.assert_array_equal(a.numpy(), want)
    a[1, 0] = -7.0
    assert buf[1] == -7.0
    buf[1] = before[1]
    np.testing.assert_array_equal(buf, before)


def test_empty_and_fill_make_room_for_negative_strides():
    a = MoYeArray.fill(2.5, Layout((3, 4), (-1, -3)))
    assert a.numpy().tolist() == [[2.5] * 4] * 3
    a[2, 3] = 1.0
    assert a.engine.buffer[0] == 1.0 and a[0, 0] == 2.5


def test_elements_of_an_overhanging_view_inside_the_buffer_stay_usable():
    """A predicated copy reads only the elements inside: they must work."""
    buf = np.arange(10.0)
    t = tile(MoYeArray(buf, 10), 4, 2)           # elements 8..11 of a buffer of 10
    assert (t[0], t[1]) == (8.0, 9.0)
    t[1] = -1.0
    assert buf[9] == -1.0


def test_a_numpy_integer_thread_index_is_checked_like_an_int():
    a = MoYeArray(np.arange(16.0), Layout(16))
    with pytest.raises(BoundsError, match="thread 7 is not one of the threads 0..3"):
        parallelize(a, Layout(4), np.int64(7))
    np.testing.assert_array_equal(parallelize(a, Layout(4), np.int32(3)).numpy(),
                                  np.arange(3.0, 16.0, 4))

"""The hostile suite's format itself: a case that raises the wrong thing fails."""
import pytest

from moye import LayoutError

from .hostile import Hostile, check


def test_a_case_that_raises_nothing_fails():
    with pytest.raises(pytest.fail.Exception):
        check(Hostile("no error", lambda: None, LayoutError, "x"))


def test_a_raw_exception_is_not_accepted():
    def raw():
        raise ValueError("raw")
    with pytest.raises(AssertionError, match="not a MoyeError"):
        check(Hostile("raw", raw, ValueError, "raw"))


def test_the_message_must_match():
    def ours():
        raise LayoutError("something else")
    with pytest.raises(AssertionError, match="does not match"):
        check(Hostile("message", ours, LayoutError, "tiler"))


def test_a_good_case_passes():
    def ours():
        raise LayoutError("bad tiler 0")
    check(Hostile("good", ours, LayoutError, "tiler"))

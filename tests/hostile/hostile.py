"""The hostile suite's one format: a bad or edge input and what moye must
answer. Each area's file lists its cases in `CASES` and runs them with
`check`, parametrized over `ids(CASES)`; scripts/hostile_report.py reads
the same lists to count outcomes.

    Hostile("logical_divide by 0", lambda: logical_divide(Layout(8), 0),
            LayoutError, r"tiler .* 0")
"""
import dataclasses
import re
import signal
from typing import Callable

import pytest

from moye import MoyeError


@dataclasses.dataclass(frozen=True)
class Hostile:
    """`run()` must raise `error` (a MoyeError subclass) with a message that
    `match` (a regex) finds. `seconds` bounds a run that could hang."""
    name: str
    run: Callable[[], object]
    error: type
    match: str
    seconds: int = 60


class Hung(Exception):
    """A case ran past its time: the input hangs moye."""


def _alarm(signum, frame):
    raise Hung("ran past its time limit")


def check(case):
    """Run one case: the exact error class (not a subclass of it), ours, and
    its message."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(case.seconds)
    try:
        with pytest.raises(case.error) as info:
            case.run()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert isinstance(info.value, MoyeError), f"{type(info.value).__name__} is not a MoyeError"
    assert type(info.value) is case.error, \
        f"raised {type(info.value).__name__}, not exactly {case.error.__name__}"
    assert re.search(case.match, str(info.value)), \
        f"message {str(info.value)!r} does not match {case.match!r}"


def ids(cases):
    names = [c.name for c in cases]
    assert len(set(names)) == len(names), "hostile case names must be distinct"
    return names

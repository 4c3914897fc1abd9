"""Thread indices against the threads that a thread layout, a TiledCopy or a
TiledMMA has: `parallelize` and `get_slice` check them here.

A static index must name one of the threads (a BoundsError otherwise: thread 7
of a 4-thread layout would silently get thread 3's elements, or elements
outside the tile). A dynamic index exists only inside a kernel being traced;
the kernel layer, which knows the block, checks it through the function it
registers with `on_dynamic_thread_index`.
"""
from ..errors import BoundsError

_dynamic_checks = []


def on_dynamic_thread_index(check):
    """Register `check(what, thr_idx, num_threads)`, called for every dynamic
    thread index given to `parallelize` or `get_slice` (the kernel tracer's)."""
    _dynamic_checks.append(check)
    return check


def check_thread_index(what, thr_idx, num_threads):
    """`thr_idx` itself, checked against `num_threads` threads.
        >>> check_thread_index("parallelize", 7, 4)
        Traceback (most recent call last):
        ...
        moye.errors.BoundsError: parallelize: thread 7 is outside the 4 threads (0..3)
    """
    if type(thr_idx) is int:
        if type(num_threads) is int and not 0 <= thr_idx < num_threads:
            raise BoundsError(f"{what}: thread {thr_idx} is outside the {num_threads} threads "
                              f"(0..{num_threads - 1})")
    else:
        for check in _dynamic_checks:
            check(what, thr_idx, num_threads)
    return thr_idx

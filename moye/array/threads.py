"""Thread indices against the threads of a thread layout, a TiledCopy or a
TiledMMA: `parallelize` and `get_slice` check them here.

A thread layout maps coordinates to thread ids; a thread index must be one
of the ids it reaches (a BoundsError otherwise: thread 7 of a 4-thread
layout would silently get thread 3's elements). A dynamic index exists only
inside a kernel being traced; the kernel layer, which knows the block, checks
it through the function it registers with `on_dynamic_thread_index`, against
the number of threads the layout spans (its cosize).
"""
from ..errors import BoundsError
from ..layout import cosize
from ..layout import inttuple as T
from ..layout.scalar import is_int

_dynamic_checks = []


def on_dynamic_thread_index(check):
    """Register `check(what, thr_idx, num_threads)`, called for every dynamic
    thread index given to `parallelize` or `get_slice` (the kernel tracer's)."""
    _dynamic_checks.append(check)
    return check


def check_thread_index(what, thr_idx, thr_layout):
    """`thr_idx` itself, checked to be a thread id of `thr_layout`.
        >>> try:
        ...     check_thread_index("get_slice", 5, Layout((4, 2), (1, 16)))
        ... except BoundsError as e:
        ...     print(e)
        get_slice: thread 5 is not one of the threads 0..19 of the thread layout (4,2):(1,16)
    """
    if is_int(thr_idx):
        thr_idx = int(thr_idx)
        shape, stride = thr_layout.shape, thr_layout.stride
        n = cosize(thr_layout)
        if type(n) is int and not (0 <= thr_idx < n and T.crd2idx(
                T.index_to_coord(thr_idx, shape, stride), shape, stride) == thr_idx):
            raise BoundsError(f"{what}: thread {thr_idx} is not one of the threads 0..{n - 1} "
                              f"of the thread layout {thr_layout}")
    else:
        for check in _dynamic_checks:
            check(what, thr_idx, cosize(thr_layout))
    return thr_idx

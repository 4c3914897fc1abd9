"""Scratch memory that launches keep between calls: split-K's float32
partial sums and the tickets its blocks count on (gemm_sm90.settle_split,
gemm_skinny.settle), so that a split call allocates nothing and launches
no fill (a new workspace and zeroed tickets each call cost a replayed
call 27.1 us of host time on one H200 machine's host, the kept ones
16.6).

On a CUDA device, one buffer of each kind is kept per (device, stream)
and grown as needed: calls on one stream run one after another and may
share it, calls on two streams get two. A kernel leaves the tickets zero
as it found them (the block that takes a tile's last ticket puts it back
to 0). A call made while a CUDA graph is captured gets buffers of its own
(the graph's memory pool keeps them), so that graphs replayed on any
stream share nothing. NumPy arrays and CPU tensors get new arrays each
call. Replayed calls (replay.py) fetch the buffers again at each replay,
for the stream current then.
"""
import functools
import sys

from . import replay, rows

_KEPT = {}      # (device index, stream handle, dtype name, zeroed) -> the buffer
_VIEWS = {}     # (that key, count) -> the buffer's first `count` elements
VIEWS_LIMIT = 1024      # views kept (a sweep of shapes would grow them without end)


def scratch(like, count, dtype="float32"):
    """`count` elements of `dtype` on like's device, of no set contents.
        >>> import numpy as np
        >>> scratch(np.zeros(1, np.float16), 3).shape
        (3,)
    """
    return _buffer(like, count, dtype, False)


def tickets(like, count):
    """`count` int32 counters on like's device, zero; a kernel given them
    must leave them zero.
        >>> import numpy as np
        >>> tickets(np.zeros(1, np.float16), 2).tolist()
        [0, 0]
    """
    return _buffer(like, count, "int32", True)


def _buffer(like, count, dtype, zeroed):
    if not (rows.is_torch(like) and like.is_cuda):
        return (rows.zeros if zeroed else rows.empty)(like, (count,), dtype)
    remake = functools.partial(kept, like.device.index, count, dtype, zeroed)
    return replay.output(remake(), zeroed, remake)


def kept(device, count, dtype, zeroed):
    """The first `count` elements of the buffer kept for the current stream
    of CUDA device `device` (grown to twice its size where too small; a
    new one under CUDA-graph capture)."""
    torch = sys.modules["torch"]
    make = torch.zeros if zeroed else torch.empty
    if torch._C._cuda_isCurrentStreamCapturing():
        return make(count, dtype=getattr(torch, dtype), device=device)
    key = (device, torch._C._cuda_getCurrentRawStream(device), dtype, zeroed)
    view = _VIEWS.get((key, count))
    if view is not None:
        return view
    buf = _KEPT.get(key)
    if buf is None or buf.numel() < count:
        size = count if buf is None else max(count, 2 * buf.numel())
        buf = _KEPT[key] = make(size, dtype=getattr(torch, dtype), device=device)
        for k in [k for k in _VIEWS if k[0] == key]:
            del _VIEWS[k]
    if len(_VIEWS) >= VIEWS_LIMIT:
        _VIEWS.clear()
    view = _VIEWS[key, count] = buf[:count]
    return view

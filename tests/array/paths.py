"""Choosing the host engine's access path in tests."""
import contextlib

from moye.array import engine


@contextlib.contextmanager
def view_threshold(n):
    """Within this block, layouts of at least `n` elements are read and written
    through strided NumPy views (0: all of them), the others through offset arrays."""
    old, engine._VIEW_THRESHOLD = engine._VIEW_THRESHOLD, n
    try:
        yield
    finally:
        engine._VIEW_THRESHOLD = old


BOTH_PATHS = (0, 1 << 62)

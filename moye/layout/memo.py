"""Memoization of the layout algebra on static inputs.

The algebra is pure, and tracing a kernel (or partitioning host arrays over
many threads) asks the same questions again and again, so results on fully
static inputs are remembered. Inputs holding a dynamic value are never
cached: the algebra cannot compare them.
"""
import functools

from .layout import Layout

_MAX_ENTRIES = 1 << 16
_cache = {}
_UNCACHEABLE = object()


def clear_cache():
    """Forget every remembered result (for benchmarks of the cold path)."""
    _cache.clear()


def static_key(x):
    """A hashable key for a fully static argument, or _UNCACHEABLE."""
    t = type(x)
    if t is Layout:
        k = x._skey
        if k is None:
            k = x._skey = (x.shape, x.stride) if _static(x.shape) and _static(x.stride) \
                else _UNCACHEABLE
        return k
    if t is int or x is None:
        return x
    if t is tuple:
        keys = tuple(static_key(e) for e in x)
        return _UNCACHEABLE if _UNCACHEABLE in keys else ("t", keys)
    if isinstance(x, type):
        return x
    return _UNCACHEABLE


def _static(t):
    if type(t) is tuple:
        for e in t:
            if type(e) is tuple:
                if not _static(e):
                    return False
            elif type(e) is not int:
                return False
        return True
    return type(t) is int


def memoized(fn):
    """Remember `fn`'s results for fully static arguments."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs:
            return fn(*args, **kwargs)
        key = (fn, *(static_key(a) for a in args))
        if _UNCACHEABLE in key:
            return fn(*args)
        result = _cache.get(key)
        if result is None:
            result = fn(*args)
            if type(result) is Layout:
                result._skey = (result.shape, result.stride)
            if len(_cache) >= _MAX_ENTRIES:
                _cache.clear()
            _cache[key] = result
        return result
    wrapper.uncached = fn
    return wrapper

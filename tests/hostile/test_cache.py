"""Hostile inputs to specialization and the disk cache: static values that
cannot be keyed must raise a MoyeError naming the argument (never share a
kernel, never a raw exception); damaged cache entries of each kind must be
ignored and rebuilt, never blocked on or unpacked into a crash (ordinary
tests below, with exact results)."""
import gc
import os
import signal
import threading
import types
import weakref

import numpy as np
import pytest

import moye
from moye import LaunchError, MoyeTypeError
from moye.compiler.binder import bind_arguments

from .hostile import Hostile, check, ids


@moye.kernel
def times_c(y, x, c: moye.Constexpr):
    y[0] = x[0] * 2


@moye.kernel
def plain(y, x, c):
    y[0] = x[0] * 2


@moye.kernel
def with_default(y, x, c: moye.Constexpr = threading.Lock()):
    y[0] = x[0] * 2


def _arrays():
    return np.full(1, np.nan, np.float32), np.ones(1, np.float32)


def _launch(value, kernel=times_c):
    y, x = _arrays()
    kernel[1, 1](y, x, value, backend="cpu")


def _bind(value):
    y, x = _arrays()
    bind_arguments(times_c.signature, times_c.constexpr_names, (y, x, value))


def _generator():
    yield 1


class _Holder:
    def __init__(self, thing):
        self.thing = thing


class _Refuses:
    def __reduce__(self):
        raise RuntimeError("no")


def _closure_over_lock():
    lock = threading.Lock()
    return lambda v: (lock, v)


def _deep_list(depth=100_000):
    v = []
    for _ in range(depth):
        v = [v]
    return v


def _self_containing_list():
    v = [1]
    v.append(v)
    return v


def _fast_path_then_unkeyable():
    y, x = _arrays()
    times_c[1, 1](y, x, 3, backend=None)          # the CPU backend (NumPy arrays), fast path
    times_c[1, 1](y, x, threading.Lock())


def _frame():
    import sys
    return sys._getframe()


def _build_for_unknown_arch():
    from moye.backend.cuda.backend import CudaBackend
    y, x = _arrays()
    binding = bind_arguments(times_c.signature, times_c.constexpr_names, (y, x, 2))
    spec = times_c.specialization_text(binding, (1, 1, 1))
    CudaBackend().build_specialization(spec, lambda: times_c._trace_binding(binding, (1, 1, 1)),
                                       (1, 1, 1), "sm_1")


LOCK = r"argument 'c': a lock cannot be keyed"
CASES = [
    Hostile("Constexpr generator", lambda: _launch(_generator()), MoyeTypeError,
            r"argument 'c'.*generator.*cannot be keyed"),
    Hostile("Constexpr lock", lambda: _launch(threading.Lock()), MoyeTypeError, LOCK),
    Hostile("Constexpr open file", lambda: _launch(open(os.devnull)), MoyeTypeError,
            r"argument 'c'.*TextIOWrapper.*cannot be keyed"),
    Hostile("a lock inside a tuple", lambda: _launch((1, threading.Lock())), MoyeTypeError, LOCK),
    Hostile("a generator inside a dict", lambda: _launch({"g": _generator()}), MoyeTypeError,
            r"argument 'c'.*generator"),
    Hostile("a generator inside a set", lambda: _launch({1, _generator()}), MoyeTypeError,
            r"argument 'c'.*generator"),
    Hostile("an object array holding a lock",
            lambda: _launch(np.array([threading.Lock(), 1], dtype=object)), MoyeTypeError, LOCK),
    Hostile("a lambda closing over a lock", lambda: _launch(_closure_over_lock()), MoyeTypeError,
            LOCK),
    Hostile("an object with a lock attribute", lambda: _launch(_Holder(threading.Lock())),
            MoyeTypeError, r"argument 'c'.*_Holder.*cannot be keyed"),
    Hostile("an object whose __reduce__ raises", lambda: _launch(_Refuses()), MoyeTypeError,
            r"argument 'c'.*_Refuses.*cannot be keyed"),
    Hostile("a weak reference", lambda: _launch(weakref.ref(_Holder(1))), MoyeTypeError,
            r"argument 'c'.*ReferenceType.*cannot be keyed"),
    Hostile("a frame", lambda: _launch(_frame()), MoyeTypeError,
            r"argument 'c'.*frame.*cannot be keyed"),
    Hostile("a list nested 100000 deep", lambda: _launch(_deep_list()), MoyeTypeError,
            r"argument 'c'.*list nested too deeply"),
    Hostile("a list that contains itself", lambda: _launch(_self_containing_list()), MoyeTypeError,
            r"argument 'c'.*list nested too deeply"),
    Hostile("Constexpr(lock) for a plain parameter",
            lambda: _launch(moye.Constexpr(threading.Lock()), plain), MoyeTypeError, LOCK),
    Hostile("an unkeyable default", lambda: with_default[1, 1](*_arrays(), backend="cpu"),
            MoyeTypeError, LOCK),
    Hostile("unkeyable on the launch fast path", _fast_path_then_unkeyable, MoyeTypeError, LOCK),
    Hostile("unkeyable through bind_arguments", lambda: _bind(types.SimpleNamespace(
        lock=threading.Lock())), MoyeTypeError, r"argument 'c'.*SimpleNamespace.*cannot be keyed"),
    Hostile("unkeyable through compile", lambda: times_c.compile(
        *_arrays(), threading.Lock(), backend="cpu"), MoyeTypeError, LOCK),
    Hostile("unkeyable through cuda_source", lambda: times_c.cuda_source(
        *_arrays(), threading.Lock()), MoyeTypeError, LOCK),
    Hostile("compile-only build for an unknown arch", _build_for_unknown_arch, LaunchError,
            r"cannot compile for sm_1; it supports"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)
    gc.collect()


# -- damaged cache entries: ignored and rebuilt ------------------------------------------

@pytest.fixture
def entry(cache_dir):
    """(build, path, first): build() gives times_c's specialization for
    sm_80 through the disk cache and whether it was traced; path is its
    cache file; first the specialization first built."""
    pytest.importorskip("cuda.bindings")
    from moye.backend.cuda import cache
    from moye.backend.cuda.backend import CudaBackend
    y, x = _arrays()
    binding = bind_arguments(times_c.signature, times_c.constexpr_names, (y, x, 2))
    block = (1, 1, 1)
    spec = times_c.specialization_text(binding, block)
    traced = []

    def build():
        cache.clear_memory()
        traced.clear()
        out = CudaBackend().build_specialization(
            spec, lambda: traced.append(1) or times_c._trace_binding(binding, block), block,
            "sm_80")
        return out, bool(traced)
    first, was_traced = build()
    again, was_traced_again = build()
    assert was_traced and not was_traced_again and again.cubin == first.cubin
    assert first.cubin[:4] == b"\x7fELF" and "times_c" in first.source
    (path,) = [p for p in cache_dir.iterdir()
               if p.suffix == ".bin" and first.source.encode() in p.read_bytes()]
    return build, path, first


def _bounded(seconds=20):
    def alarm(signum, frame):
        raise TimeoutError("blocked on a cache entry")
    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)


def test_an_entry_that_is_a_fifo_is_not_opened_for_a_blocking_read(entry):
    build, path, first = entry
    path.unlink()
    os.mkfifo(path)
    _bounded()
    try:
        out, traced = build()
    finally:
        signal.alarm(0)
    assert traced and out.cubin == first.cubin and out.source == first.source
    assert path.is_file()                                   # replaced by a good entry
    assert build()[1] is False


def test_an_entry_that_is_a_folder_is_ignored(entry):
    build, path, first = entry
    path.unlink()
    path.mkdir()
    out, traced = build()
    assert traced and out.cubin == first.cubin
    out, traced = build()
    assert traced and path.is_dir()                         # it cannot be replaced: rebuilt


@pytest.mark.parametrize("damage", ["one byte longer", "a megabyte longer", "header says 2**62",
                                    "header says one less", "truncated"])
def test_an_entry_whose_size_is_not_its_headers_is_rebuilt(entry, damage):
    build, path, first = entry
    good = path.read_bytes()
    n = int.from_bytes(good[11:19], "little")
    bad = {"one byte longer": good + b"\0",
           "a megabyte longer": good + os.urandom(1 << 20),
           "header says 2**62": good[:11] + (1 << 62).to_bytes(8, "little") + good[19:],
           "header says one less": good[:11] + (n - 1).to_bytes(8, "little") + good[19:],
           "truncated": good[:-1]}[damage]
    path.write_bytes(bad)
    out, traced = build()
    assert traced and out.cubin == first.cubin and out.source == first.source
    assert path.read_bytes() == good


@pytest.mark.parametrize("payload", [b"no zero byte", b"{}\0" + b"\x7fELF",
                                     b'{"name": "k", "dynamic_smem": 0, "params": [], '
                                     b'"cubin": 4}\0NOPE',
                                     b'{"name": "1 x", "dynamic_smem": 0, "params": [], '
                                     b'"cubin": 4}\0\x7fELF',
                                     b'{"name": "k", "dynamic_smem": -1, "params": [], '
                                     b'"cubin": 4}\0\x7fELF',
                                     b'{"name": "k", "dynamic_smem": 0, "params": ["Nope"], '
                                     b'"cubin": 4}\0\x7fELF',
                                     b'{"name": "k", "dynamic_smem": 0, "params": [], '
                                     b'"cubin": 99}\0\x7fELF',
                                     b'{"name": "k", "dynamic_smem": 0, "params": [], '
                                     b'"cubin": 4}\0\x7fELF\xff\xfe',
                                     b'[1, 2]\0\x7fELF', b"\xff\0\x7fELF"])
def test_a_foreign_checksum_valid_payload_is_rebuilt(entry, payload):
    from moye.backend.cuda import cache
    build, path, first = entry
    good = path.read_bytes()
    cache.put(path.stem, payload)
    out, traced = build()
    assert traced and out.cubin == first.cubin and out.source == first.source
    assert path.read_bytes() == good

"""Kernel arguments by keyword at launch, as Python binds a call's: on the
first launch, on the launch function a configuration keeps, through a
CompiledKernel and a tuned kernel; the defaults fill the gaps; unknown,
doubled and missing names are LaunchErrors naming them."""
import numpy as np
import pytest

import moye
from moye import LaunchError

POISON = -5.0


@moye.kernel
def axpy(out, x, n, a=2.0, b=0.0):
    i = moye.thread_idx.x
    if i < n:
        out[i] = a * x[i] + b


def fresh():
    return np.full(8, POISON, np.float32)


X = np.arange(8, dtype=np.float32)


@pytest.mark.parametrize("call, want", [
    (lambda o: axpy[1, 8](o, X, n=8), 2 * X),
    (lambda o: axpy[1, 8](out=o, x=X, n=5, b=1.0), np.r_[2 * X[:5] + 1, [POISON] * 3]),
    (lambda o: axpy[1, 8](o, X, 8, b=0.5, a=3.0), 3 * X + 0.5),       # any order
    (lambda o: axpy[1, 8](o, X, n=8, backend="cpu"), 2 * X),           # with a launch keyword
])
def test_arguments_by_keyword(call, want):
    out = fresh()
    call(out)
    np.testing.assert_array_equal(out, want)


def test_keywords_on_a_configurations_own_launch_function():
    out = fresh()
    launch = axpy[1, 8]
    launch(out, X, 8)                           # installs the configuration's launch function
    launch(out, X, 8, b=1.0)                    # a keyword: that function's slow path
    np.testing.assert_array_equal(out, 2 * X + 1)
    launch(out, X, n=4, a=-1.0)
    np.testing.assert_array_equal(out, np.r_[-X[:4], 2 * X[4:] + 1])


def test_keywords_to_a_compiled_kernel():
    out = fresh()
    compiled = axpy.compile(out, X, 8, block=8)
    compiled(out, x=X, n=8, grid=1)
    np.testing.assert_array_equal(out, 2 * X)
    with pytest.raises(LaunchError, match=r"no argument stream_id: its arguments are \(out, x, "
                                          r"n, a, b\); the launch's own keywords are grid=, "
                                          r"block=, smem=, stream= and cluster="):
        compiled(out, X, 8, stream_id=0, grid=1)


@pytest.mark.parametrize("call, message", [
    (lambda o: axpy[1, 8](o, X, 8, m=3), r"no argument m: its arguments are \(out, x, n, a, b\)"),
    (lambda o: axpy[1, 8](o, X, 8, n=3), r"argument 'n' is given twice"),
    (lambda o: axpy[1, 8](o, a=1.0, n=8), r"takes 5 arguments \(out, x, n, a, b\): 'x' is "
                                          r"missing"),
    (lambda o: axpy[1, 8](o, X, a=1.0), r"'n' is missing"),
])
def test_bad_keywords_are_named(call, message):
    out = fresh()
    with pytest.raises(LaunchError, match=message):
        call(out)
    assert (out == POISON).all()                # nothing launched


@moye.autotune([moye.Config(BLOCK=4), moye.Config(BLOCK=8)], key=["n"],
               timer=lambda run, config: (run(), config.BLOCK)[1])
@moye.kernel
def tuned_axpy(out, x, n, a=2.0, BLOCK: moye.Constexpr = 4):
    i = moye.block_idx.x * BLOCK + moye.thread_idx.x
    if i < n:
        out[i] = a * x[i]


def test_keywords_to_a_tuned_kernel(cache_dir, monkeypatch):
    monkeypatch.delenv("MOYE_AUTOTUNE", raising=False)
    out = fresh()
    tuned_axpy[lambda c: 8 // c.BLOCK, lambda c: c.BLOCK](out, X, n=8, a=-3.0)
    np.testing.assert_array_equal(out, -3 * X)

"""A kernel reads its globals when it is traced; one rebound later in the
process (a constant, a helper function, a user module's attribute) makes
the kernel trace again, on the CPU backend and on the CUDA backend's fast
launch path, so that no launch runs a kernel made of the old value."""
import sys
import types

import numpy as np
import pytest

import moye

from .test_frontend_args import TorchLike, fake_cuda  # noqa: F401 (a fixture)

SCALE = 2.0
OFFSET = 1


def offset(v):
    return v + OFFSET


settings = types.ModuleType("kernel_settings")      # a user module
settings.SHIFT = 10.0


@moye.kernel
def scaled(out, x):
    i = moye.thread_idx.x
    out[i] = offset(x[i] * SCALE) + settings.SHIFT


def run():
    out = np.full(4, np.nan, np.float32)
    scaled[1, 4](out, np.arange(4, dtype=np.float32))
    return out.tolist()


@pytest.fixture
def restore(monkeypatch):
    """The globals as they were after each test (monkeypatch undoes its own
    sets; the tests rebind through it)."""
    return monkeypatch


def test_a_rebound_constant_traces_again(restore):
    assert run() == [11.0, 13.0, 15.0, 17.0]
    restore.setattr(sys.modules[__name__], "SCALE", 3.0)
    assert run() == [11.0, 14.0, 17.0, 20.0]
    assert "3.0" in scaled.ir(np.zeros(4, np.float32), np.zeros(4, np.float32))


def test_a_constant_a_helper_reads_and_the_helper_itself(restore):
    assert run() == [11.0, 13.0, 15.0, 17.0]
    restore.setattr(sys.modules[__name__], "OFFSET", 100)
    assert run() == [110.0, 112.0, 114.0, 116.0]
    restore.setattr(sys.modules[__name__], "offset", lambda v: v - 1.0)
    assert run() == [9.0, 11.0, 13.0, 15.0]


def test_a_user_modules_attribute(restore):
    assert run() == [11.0, 13.0, 15.0, 17.0]
    restore.setattr(settings, "SHIFT", -0.5)
    assert run() == [0.5, 2.5, 4.5, 6.5]


def test_the_same_object_again_keeps_the_trace(restore):
    run()
    traces = dict(scaled._traces)
    restore.setattr(sys.modules[__name__], "OFFSET", OFFSET)     # the very same int
    run()
    assert scaled._traces == traces


def test_the_fast_launch_path_sees_a_rebinding(fake_cuda, restore):  # noqa: F811
    y, x = TorchLike(0x2000, (4,), (1,)), TorchLike(0x1000, (4,), (1,))
    scaled._traces.clear()
    scaled._compiled.clear()
    for _ in range(3):                          # the configuration's own launch function
        scaled[1, 4](y, x)
    assert scaled[1, 4].__code__.co_filename.startswith("<moye launch")
    compiled = fake_cuda.compiled[0]
    restore.setattr(sys.modules[__name__], "SCALE", 5.0)
    scaled[1, 4](y, x)
    assert fake_cuda.compiled[0] == compiled + 1          # traced again with SCALE = 5.0
    scaled[1, 4](y, x)
    assert fake_cuda.compiled[0] == compiled + 1          # and then fast again
    assert len(fake_cuda.launches) == 5


def make_shifted():
    shift = 1.0

    @moye.kernel
    def shifted(out, x):
        i = moye.thread_idx.x
        out[i] = x[i] + shift

    def rebind(value):
        nonlocal shift
        shift = value
    return shifted, rebind


def test_a_rebound_variable_of_the_enclosing_function():
    shifted, rebind = make_shifted()
    out = np.full(2, np.nan, np.float32)
    shifted[1, 2](out, np.zeros(2, np.float32))
    assert out.tolist() == [1.0, 1.0]
    rebind(2.5)
    shifted[1, 2](out, np.zeros(2, np.float32))
    assert out.tolist() == [2.5, 2.5]

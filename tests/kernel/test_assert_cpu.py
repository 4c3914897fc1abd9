"""`assert` in kernels: of a static condition, Python's, while tracing; of
a run-time one, checked by every thread when the kernel runs (the CPU
backend names the line, the message and the first failing thread; CUDA
prints them and traps), in branches and helpers too; its C++ and NVRTC."""
import numpy as np
import pytest

import moye
from moye.backend.cpu import KernelRuntimeError


@moye.func
def checked_sqrt(v):
    assert v >= 0.0, "a negative square"
    return moye.sqrt(v)


@moye.kernel
def assert_kernel(out, x, n: moye.Constexpr):
    assert n % 32 == 0, f"n = {n} is not a whole number of warps"
    t = moye.thread_idx.x
    assert t < n
    if x[t] > 100.0:
        assert x[t] < 1000.0, 'x "too large": over 100%'
        out[t] = 1.0
    else:
        out[t] = checked_sqrt(x[t])


def test_passing_asserts_change_nothing():
    x = np.arange(64, dtype=np.float32)
    out = np.full(64, np.nan, np.float32)
    assert_kernel[1, 64](out, x, 64)
    np.testing.assert_array_equal(out, np.sqrt(x))


def test_a_static_assert_fails_while_tracing_with_its_message():
    with pytest.raises(moye.KernelError, match=r"test_assert_cpu\.py:\d+: assert n % 32 == 0"
                       r"[\s\S]*AssertionError: n = 48 is not a whole number of warps"):
        assert_kernel[1, 48](np.zeros(48, np.float32), np.zeros(48, np.float32), 48)


@pytest.mark.parametrize("bad, line, message, thread, more", [
    ({5: -1.0}, r"assert v >= 0\.0, \"a negative square\"", ": a negative square", 5, ""),
    ({7: 5000.0, 9: 2000.0}, r"assert x\[t\] < 1000\.0, 'x \"too large\": over 100%'",
     r': x "too large": over 100%', 7, ", and 1 more thread"),
])
def test_a_run_time_assert_names_the_line_the_message_and_the_thread(bad, line, message,
                                                                     thread, more):
    """Only the threads that reach an assert check it (x > 100 takes the
    branch; the helper's runs in the other one)."""
    x = np.arange(64, dtype=np.float32)
    for t, v in bad.items():
        x[t] = v
    with pytest.raises(KernelRuntimeError, match=r"test_assert_cpu\.py:\d+: " + line
                       + r"\n  assertion failed" + message + r" \(thread \(" + str(thread)
                       + r", 0, 0\) of block \(0, 0, 0\)" + more + r"\)"):
        assert_kernel[1, 64](np.zeros(64, np.float32), x, 64)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_prints_and_traps(arch):
    from moye.backend.cuda import nvrtc
    source = assert_kernel.cuda_source(np.zeros(64, np.float32), np.zeros(64, np.float32), 64,
                                       block=64)
    assert source.count("__trap();") == 3 and "assertion failed: a negative square" in source
    assert 'x \\"too large\\": over 100%%' in source          # escaped for printf's string
    assert nvrtc.compile_cuda(source, ["moye_assert_kernel"], arch).cubin[:4] == b"\x7fELF"

"""moye.atomic_add: a global atomic add, on the CPU backend against NumPy,
and compiled by NVRTC."""
import numpy as np
import pytest

import moye
from moye.compiler.frontend import BACKENDS

from .kernels_for_tests import histogram, tickets


@moye.kernel
def weighted_sum(total, values, n):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    if i < n:
        moye.atomic_add(total, 0, values[i])


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.uint64])
def test_histogram_over_many_blocks_matches_numpy_exactly(dtype):
    rng = np.random.default_rng(7)
    n, bins = 1000, 13                       # 8 blocks of 128 threads, the last one partial
    keys = rng.integers(0, bins, n).astype(np.int32)
    counts = rng.integers(1, 50, bins).astype(dtype)      # not zero: atomics add to it
    want = counts.astype(np.int64) + np.bincount(keys, minlength=bins)
    histogram[8, 128](counts, keys, n)
    np.testing.assert_array_equal(counts.astype(np.int64), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_sum_over_many_blocks_matches_numpy(dtype):
    rng = np.random.default_rng(3)
    n = 700
    values = rng.integers(-64, 64, n).astype(dtype) / 8    # exact in any order of addition
    total = np.array([0.5], dtype)
    weighted_sum[6, 128](total, values, n)
    assert total[0] == 0.5 + values.astype(np.float64).sum()


def test_atomic_add_returns_the_old_value():
    n = 500
    counter = np.array([10], np.int32)
    order = np.full(n, -1, np.int32)
    tickets[4, 128](counter, order, n)
    assert counter[0] == 10 + n
    np.testing.assert_array_equal(np.sort(order), 10 + np.arange(n))


def test_atomic_add_is_no_race_under_the_race_check():
    keys = np.zeros(256, np.int32)
    counts = np.zeros(1, np.int32)
    with moye.backend.cpu.race_checking():
        histogram[2, 128](counts, keys, 256)
    assert counts[0] == 256


def test_atomic_add_refuses_what_atomicAdd_cannot_do():
    @moye.kernel
    def on_int16(a):
        moye.atomic_add(a, 0, 1)

    with pytest.raises(moye.KernelError, match="holds Int16; atomic_add takes Int32"):
        on_int16[1, 1](np.zeros(4, np.int16))

    @moye.kernel
    def on_shared(a):
        s = moye.shared_array(moye.Int32, 4)
        moye.atomic_add(s, 0, 1)

    with pytest.raises(moye.KernelError, match="xx"):
        on_shared[1, 1](np.zeros(4, np.int32))

    read_only = np.zeros(4, np.int32)
    read_only.flags.writeable = False
    with pytest.raises(moye.LaunchError, match="read-only"):
        histogram[1, 4](read_only, np.zeros(4, np.int32), 4)


def test_atomic_add_out_of_bounds_is_reported():
    with pytest.raises(moye.KernelRuntimeError, match="out-of-bounds atomic_add"):
        histogram[1, 4](np.zeros(2, np.int32), np.array([0, 1, 2, 1], np.int32), 4)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.uint64, np.float32, np.float64])
def test_atomic_add_compiles_with_nvrtc(arch, dtype):
    kernel = weighted_sum.trace(np.zeros(1, dtype), np.ones(8, dtype), 8, block=128)[0]
    src = BACKENDS["cuda"].source(kernel, (128, 1, 1))
    assert "atomicAdd(&" in src
    BACKENDS["cuda"].compile_only(kernel, (128, 1, 1), arch)

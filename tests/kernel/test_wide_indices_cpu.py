"""Arrays whose offsets pass 2**31 elements: the binder gives them 64-bit
index math, and every access keeps it to the instruction (a load, a store,
an atomic, cp.async), where 32 bits would wrap to a negative offset (a
fault or a silent write elsewhere on the GPU). The arrays are calloc'd
zeros: only the pages touched are memory."""
import numpy as np
import pytest

import moye

FAR = 2 ** 31 + 5


def zeros(n, dtype):
    try:
        return np.zeros(n, dtype)
    except MemoryError:                 # a machine that does not overcommit
        pytest.skip(f"{n} elements of {np.dtype(dtype)} do not fit in this machine's memory")


@moye.kernel
def far_kernel(out, x, i):
    out[i] = x[i] + 1


def test_a_load_and_a_store_past_two_to_the_31():
    x, out = zeros(FAR + 64, np.uint8), zeros(FAR + 64, np.uint8)
    x[FAR] = 41
    far_kernel[1, 1](out, x, FAR)
    assert out[FAR] == 42 and not out[:64].any()
    traced = far_kernel.ir(out, x, FAR, block=1)
    assert "to=Int32" not in traced and "Int64" in traced, traced


@moye.kernel
def far_atomic_kernel(counts, i):
    moye.atomic_add(counts, i, 3)
    moye.red_add(counts, i + 1, 4)


def test_atomics_past_two_to_the_31():
    counts = zeros(FAR + 16, np.int32)                  # 8 GiB of address space
    far_atomic_kernel[1, 2](counts, FAR)
    assert counts[FAR] == 6 and counts[FAR + 1] == 8 and not counts[:16].any()


@moye.kernel
def far_copy_kernel(out, x, start):
    """16 bytes from x[start:] through shared memory by cp.async."""
    s = moye.shared_array(moye.UInt8, 16, align=16)
    t = moye.thread_idx.x
    if t == 0:
        moye.cucopyto(s, moye.MoYeArray.view_of(x.engine.offset_by(start),
                                                moye.make_layout(16)))
        moye.cp_async_wait()
    moye.sync_threads()
    out[t] = s[t]


def test_cp_async_past_two_to_the_31():
    start = 2 ** 31 + 16                                # 16-byte aligned: one cp.async
    x = zeros(start + 64, np.uint8)
    x[start: start + 16] = np.arange(1, 17, dtype=np.uint8)
    out = np.zeros(16, np.uint8)
    far_copy_kernel[1, 16](out, x, start)
    np.testing.assert_array_equal(out, np.arange(1, 17))
    traced = far_copy_kernel.ir(out, x, start, block=16)
    assert "cp_async" in traced and "to=Int32" not in traced, traced

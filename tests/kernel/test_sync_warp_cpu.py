"""moye.sync_warp (__syncwarp): the race check orders a warp's shared-memory
exchange by it and reports the exchange without it; a warp it divides, or a
neighbour warp's data it does not order, is reported; its C++ and NVRTC."""
import numpy as np
import pytest

import moye
from moye.backend.cpu import KernelRuntimeError, race_checking


@moye.kernel
def exchange_kernel(out, x, synced: moye.Constexpr, across: moye.Constexpr):
    """Each lane writes its value, then reads its neighbour's (`across`: the
    next warp's lane, which a warp barrier does not order)."""
    t = moye.thread_idx.x
    s = moye.shared_array(moye.Float32, 128)
    s[t] = x[t]
    if synced:
        moye.sync_warp()
    out[t] = s[(t + 32) % 128] if across else s[t // 32 * 32 + (t + 1) % 32]


def test_a_warp_exchange_after_sync_warp_is_ordered():
    x = np.random.default_rng(3).standard_normal(128).astype(np.float32)
    out = np.full(128, np.nan, np.float32)
    with race_checking():
        exchange_kernel[2, 128](out, x, True, False)
    t = np.arange(128)
    np.testing.assert_array_equal(out, x[t // 32 * 32 + (t + 1) % 32])


@pytest.mark.parametrize("synced, across", [(False, False), (True, True)])
def test_what_sync_warp_does_not_order_is_a_race(synced, across):
    """Without it a lane reads another's write unordered; with it, another
    warp's writes are still unordered (that takes sync_threads)."""
    with race_checking(), pytest.raises(KernelRuntimeError, match=r"shared-memory race "
                                        r"\(read-after-write\)"):
        exchange_kernel[1, 128](np.zeros(128, np.float32), np.ones(128, np.float32), synced,
                                across)


@moye.kernel
def divided_kernel(out):
    t = moye.thread_idx.x
    if t % 32 < 16:
        moye.sync_warp()
    out[t] = t


def test_a_branch_that_divides_the_warp_is_reported():
    with pytest.raises(KernelRuntimeError, match=r"test_sync_warp_cpu\.py:\d+: "
                       r"moye\.sync_warp\(\)\n  sync_warp needs every thread of its warp, but "
                       r"in warp 0 of block \(0, 0, 0\) 16 of its 32 threads do not execute it"):
        divided_kernel[1, 64](np.zeros(64, np.int32))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_cuda_source_and_nvrtc(arch):
    from moye.backend.cuda import nvrtc
    source = exchange_kernel.cuda_source(np.zeros(128, np.float32), np.zeros(128, np.float32),
                                         True, False, block=128)
    assert "__syncwarp();" in source
    assert nvrtc.compile_cuda(source, ["moye_exchange_kernel"], arch).cubin[:4] == b"\x7fELF"

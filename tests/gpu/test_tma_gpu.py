"""TMA and mbarriers on a Hopper GPU against torch: the TMA example's copy
and transpose at awkward sizes (outputs poisoned, every element checked),
zeros for a tile that overhangs the array, a 3-D copy, TMA reduce-adds from
several blocks onto one tile, and the SASS of the
copy kernel (UTMALDG / UTMASTG where cuobjdump is installed)."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import moye
from moye import Layout

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("hopper_only")]


def padded(torch, shape, dtype, fill=None):
    from moye.examples.tma_copy import padded as make
    x = make(torch, shape, dtype)
    if fill is not None:
        x.fill_(fill)
    return x


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("M, N", [(1000, 1000), (1030, 37), (64, 64), (4096, 8192)])
def test_tma_copy_and_transpose(torch, dtype, M, N):
    from moye.examples import tma_copy
    dt = getattr(torch, dtype)
    src = padded(torch, (M, N), dt)
    dst = padded(torch, (M, N), dt, float("nan"))
    dst_t = padded(torch, (N, M), dt, float("nan"))
    tma_copy.copy(dst, src)
    tma_copy.transpose(dst_t, src)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)
    assert torch.equal(dst_t, src.t())


def test_out_of_bounds_reads_zeros(torch):
    from moye.examples import tma_copy
    from tests.kernel.test_hopper_cpu import tx_kernel
    src = padded(torch, (20, 70), torch.float32)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tma_copy.swizzled_tile(16, np.float32))
    out = torch.full((16, 32), float("nan"), device="cuda")
    tx_kernel[1, 128](out, load, Layout((4, 32), (32, 1)))
    torch.cuda.synchronize()
    want = torch.zeros(16, 32, device="cuda")
    want[8:16, 0:10] = src[0:8, 60:70]
    assert torch.equal(out, want)


def test_tma_3d(torch):
    from tests.kernel.test_hopper_cpu import copy3d_kernel
    src = torch.randn(3, 40, 64, device="cuda").half()
    dst = torch.full_like(src, float("nan"))
    tile = Layout((2, 8, 32), (256, 32, 1))
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    store = moye.make_tma_copy(moye.TMA_STORE, dst, tile)
    copy3d_kernel[(2, 5, 2), 32](load, store)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_tma_reduce_add(torch, dtype):
    """Blocks add their tiles to one global tile, twice each (the CPU
    test's kernel): the sum of them all, every element; rows past the
    array dropped."""
    from tests.kernel.test_hopper_cpu import add_tiles_kernel
    dt = getattr(torch, dtype)
    src = (torch.randn(48, 16, device="cuda") * 100).to(dt)
    dst = (torch.randn(13, 16, device="cuda") * 100).to(dt)
    want = dst.double().clone()
    for y in range(2):
        for x in range(3):
            n = min(8, 13 - y * 8)
            want[y * 8:y * 8 + n] += 2 * src[x * 8 + y * 8:x * 8 + y * 8 + n].double()
    tile = Layout((8, 16), (16, 1))
    add_tiles_kernel[(3, 2), 32](moye.make_tma_copy(moye.TMA_LOAD, src, tile),
                                 moye.make_tma_copy(moye.TMA_REDUCE_ADD, dst, tile), 2)
    torch.cuda.synchronize()
    if dtype == "int32":
        assert torch.equal(dst, want.to(dt))
    else:
        bound = 7 * 2.0 ** -24 * (want.abs() + 6 * src.abs().max().double())
        assert ((dst.double() - want).abs() <= bound).all()


def test_sass_has_tma_instructions(torch, tmp_path):
    from moye.examples import tma_copy
    from moye.compiler.frontend import BACKENDS
    cuobjdump = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    if not os.path.exists(cuobjdump):
        pytest.skip("no cuobjdump")
    src = padded(torch, (128, 128), torch.float16)
    tile = tma_copy.swizzled_tile(64, np.float16)
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tile)
    store = moye.make_tma_copy(moye.TMA_STORE, src, tile)
    kernel = tma_copy.tma_copy_kernel.trace(load, store, block=128)[0]
    exe = BACKENDS["cuda"].compile(kernel, (128, 1, 1))
    path = tmp_path / "tma_copy.cubin"
    path.write_bytes(exe.cubin)
    sass = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True).stdout
    assert "UTMALDG" in sass and "UTMASTG" in sass, sass


@pytest.mark.parametrize("stages", [2, 3])
def test_pipelined_loads_flip_phases(torch, stages):
    from moye import Swizzle, composition
    from moye.examples import tma_copy
    from tests.kernel.test_hopper_cpu import pipelined_kernel
    src = torch.randn(4096, 1024, device="cuda")
    dst = torch.full_like(src, float("nan"))
    ring = composition(Swizzle(3, 2, 3), Layout((16, 32, stages), (32, 1, 16 * 32)))
    load = moye.make_tma_copy(moye.TMA_LOAD, src, tma_copy.swizzled_tile(16, np.float32))
    pipelined_kernel[1024 // 32, 128](dst, load, ring, Layout((4, 32), (32, 1)), stages)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


def test_tma_kernel_from_the_disk_cache(tmp_path):
    """A later process loads the TMA kernels from the disk cache and launches
    them: the tensor-map parameter is recognised by value, not by identity
    with the IR's TENSOR_MAP (it is rebuilt from the cache)."""
    env = {**os.environ, "MOYE_CACHE_DIR": str(tmp_path)}
    for _ in range(2):
        run = subprocess.run([sys.executable, "-m", "moye.examples.tma_copy", "192", "320"],
                             env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-2000:]
        assert "copy exact, transpose exact" in run.stdout

"""Identity arrays and copy_if inside kernels, on the CPU backend: block
offsets are dynamic there, cp.async takes its zero-filling form and other
copies run under `if`; every element checked, outputs poisoned."""
import re

import numpy as np
import pytest

import moye
from moye import (CPOP_ASYNC_CACHEGLOBAL, CopyAtom, Float16, Layout, MoYeArray, UInt128,
                  UniversalCopy, copy_if, copyto, elem_less, get_slice, make_copy_predicate,
                  make_identity_array, make_tiled_copy, parallelize, partition_D, partition_S,
                  local_partition, shape, size, tile)
from moye.backend.cpu import race_checking
from moye.compiler.frontend import BACKENDS

rng = np.random.default_rng(7)


@moye.kernel
def coordinates(rows, cols, bM: moye.Constexpr, bN: moye.Constexpr):
    """rows[m, n] = m and cols[m, n] = n, written through a tile of an
    identity array at the block's (dynamic) coordinates, walked by a dynamic
    loop over its column tiles, each thread predicated on the extents."""
    mR, mC = MoYeArray(rows), MoYeArray(cols)
    c = tile(make_identity_array(shape(mR)), (bM, bN), (moye.block_idx.x, None))
    gR, gC = tile(mR, (bM, bN), (moye.block_idx.x, None)), tile(mC, (bM, bN),
                                                                  (moye.block_idx.x, None))
    thr = Layout((bM, 1))
    for k in range(size(c, 2)):
        tc = parallelize(c[:, :, k], thr, moye.thread_idx.x)
        tr = parallelize(gR[:, :, k], thr, moye.thread_idx.x)
        tcl = parallelize(gC[:, :, k], thr, moye.thread_idx.x)
        for j in range(size(tc)):
            crd = tc[j]
            if elem_less(crd, shape(mR)):
                tr[j] = crd[0]
                tcl[j] = crd[1]


@pytest.mark.parametrize("M, N", [(13, 30), (32, 16), (1, 5)])
def test_identity_coordinates_with_dynamic_block_offsets(M, N):
    rows, cols = np.full((M, N), -1, np.int32), np.full((M, N), -1, np.int32)
    coordinates[-(-M // 8), 8](rows, cols, 8, 4)
    m, n = np.indices((M, N))
    np.testing.assert_array_equal(rows, m)
    np.testing.assert_array_equal(cols, n)


@moye.kernel
def predicated_copy(dst, whole, src, g2s, s2g, bM: moye.Constexpr, bN: moye.Constexpr):
    """src -> shared by predicated cp.async (zero fill outside src), then the
    shared tile to `dst` (src's shape) by predicated element copies and,
    unpredicated, to `whole` (whole tiles: the zero fill shows there)."""
    mS, mD = MoYeArray(src), MoYeArray(dst)
    bx, by = moye.block_idx.x, moye.block_idx.y
    smem = moye.shared_array(src.dtype, Layout((bM, bN), (bN, 1)))
    coords = tile(make_identity_array(shape(mS)), (bM, bN), (bx, by))
    load = get_slice(g2s, moye.thread_idx.x)
    tc = partition_S(load, coords)
    copy_if(g2s, make_copy_predicate(tc, shape(mS)), partition_D(load, smem),
            partition_S(load, tile(mS, (bM, bN), (bx, by))))
    moye.cp_async_wait()
    moye.sync_threads()
    store = get_slice(s2g, moye.thread_idx.x)
    tsmem, tcd = partition_S(store, smem), partition_D(store, coords)
    copy_if(s2g, make_copy_predicate(tcd, shape(mD)),
            partition_D(store, tile(mD, (bM, bN), (bx, by))), tsmem)
    copyto(s2g, partition_D(store, tile(MoYeArray(whole), (bM, bN), (bx, by))), tsmem)


G2S = make_tiled_copy(CopyAtom(CPOP_ASYNC_CACHEGLOBAL(UInt128), Float16),
                      Layout((8, 4), (4, 1)), Layout((1, 8)))            # a (8, 32) tile
S2G = make_tiled_copy(CopyAtom(UniversalCopy(Float16), Float16),
                      Layout((8, 4), (4, 1)), Layout((1, 1)))


@pytest.mark.parametrize("race_checked", [False, True])
@pytest.mark.parametrize("M, N", [(37, 48), (16, 40), (5, 8)])
def test_cp_async_zero_fill_and_predicated_stores(M, N, race_checked):
    bM, bN = 16, 32
    grid = (-(-M // bM), -(-N // bN))
    src = rng.standard_normal((M, N)).astype(np.float16)
    dst = np.full((M, N), np.nan, np.float16)
    whole = np.full((grid[0] * bM, grid[1] * bN), np.nan, np.float16)
    if race_checked:
        with race_checking():
            predicated_copy[grid, 32](dst, whole, src, G2S, S2G, bM, bN)
    else:
        predicated_copy[grid, 32](dst, whole, src, G2S, S2G, bM, bN)
    np.testing.assert_array_equal(dst, src)
    expected = np.zeros_like(whole)
    expected[:M, :N] = src
    np.testing.assert_array_equal(whole, expected)        # zeros where src ends


def test_generated_cuda_predicates_cp_async_by_its_source_size_and_stores_by_if():
    src = np.zeros((37, 48), np.float16)
    whole = np.zeros((48, 64), np.float16)
    cuda = predicated_copy.cuda_source(src, whole, src, G2S, S2G, 16, 32, block=32)
    lines = [ln.strip() for ln in cuda.splitlines()]
    cp = [ln for ln in lines if ln.startswith('asm volatile("cp.async.cg')]
    assert len(cp) == 2 and all(
        "cp.async.cg.shared.global [%0], [%1], 16, %2;" in ln and "? 16 : 0) : \"memory\");" in ln
        for ln in cp)
    assert sum(ln.startswith("if (") for ln in lines) == 16     # one per element stored


@moye.kernel
def coordinates_of_threads(out):
    """Each of 32 threads writes row * 1000 + col at the coordinates of its
    elements of a (64, 48) identity array, partitioned 8 x 4."""
    c = make_identity_array((64, 48))
    mine = local_partition(c, Layout((8, 4)), moye.thread_idx.x)
    for i in range(size(mine)):
        row, col = mine[i]
        out[row, col] = row * 1000 + col


def test_thread_coordinates_are_exact_and_32_bit():
    """A coordinate decoded from a thread's offset into a 2-mode identity
    array (packed in 64 bits) is exact and 32-bit again: the comparisons a
    kernel makes of it (masks, predicates) are 32-bit."""
    out = np.full((64, 48), -1, np.int32)
    coordinates_of_threads[1, 32](out)
    assert (out == np.arange(64)[:, None] * 1000 + np.arange(48)).all()
    kernel = coordinates_of_threads.trace(out, block=32)[0]
    src = BACKENDS["cuda"].source(kernel, (32, 1, 1))
    assert " / 2147483648ll;" in src                # the packed offset is 64-bit
    assert re.search(r"const int v\d+ = v\d+ \* 1000;", src), src  # row * 1000: 32-bit

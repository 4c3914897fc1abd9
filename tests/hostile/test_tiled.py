"""Hostile uses of tiled copies and MMAs: a thread slice outside the tiled
object, a host gemm on element types its atom does not take, and kernels
whose block does not match the threads of the tiled object they slice (found
while tracing). Ordinary tests at the end: a guarded slice in a larger block,
and a warp-specialized one by a derived index, trace and run."""
import numpy as np
import pytest

import moye
from moye import (BoundsError, CopyAtom, Float16, Float32, Float64, KernelError, Layout,
                  LayoutError, MoYeArray, MoyeTypeError, UniversalCopy, UniversalFMA, copyto, gemm,
                  get_slice, make_tiled_copy, make_tiled_mma, parallelize, partition_D,
                  partition_S, tile)
from moye.examples.tiled_matmul import make_config, matmul_kernel

from .hostile import Hostile, check, ids


def copy32():
    """32 threads copying an (8, 4) tile of Float32, one value each."""
    return make_tiled_copy(CopyAtom(UniversalCopy(Float32), Float32), Layout((8, 4)))


def fma(n=4):
    return make_tiled_mma(UniversalFMA(Float32), Layout((n, 1)))


def host_gemm(op, a_type, b_type, c_type, d_type=None):
    m, n, k = op.shape_mnk
    rng = np.random.default_rng(3)

    def arr(t, rows, cols):
        return MoYeArray(rng.integers(1, 4, rows * cols).astype(t.numpy), Layout((rows, cols)))
    c = arr(c_type, m, n)
    d = c if d_type is None else arr(d_type, m, n)
    return gemm(make_tiled_mma(op), d, arr(a_type, m, k), arr(b_type, n, k), c)


def trace_matmul(block):
    sA, copy_A, sB, copy_B, mma = make_config(Float32)
    A, B = np.ones((128, 8), np.float32), np.ones((128, 8), np.float32)
    C = np.zeros((128, 128), np.float32)
    return matmul_kernel.ir(A, sA, copy_A, B, sB, copy_B, C, mma, block=block)


@moye.kernel
def copy_unguarded(dst, src, tiled_copy):
    thr = get_slice(tiled_copy, moye.thread_idx.x)
    g_src, g_dst = tile(MoYeArray(src), (8, 4), (0, 0)), tile(MoYeArray(dst), (8, 4), (0, 0))
    copyto(tiled_copy, partition_D(thr, g_dst), partition_S(thr, g_src))


@moye.kernel
def copy_guarded(dst, src, tiled_copy):
    tid = moye.thread_idx.x
    if tid < 32:
        thr = get_slice(tiled_copy, tid)
        g_src, g_dst = tile(MoYeArray(src), (8, 4), (0, 0)), tile(MoYeArray(dst), (8, 4), (0, 0))
        copyto(tiled_copy, partition_D(thr, g_dst), partition_S(thr, g_src))


@moye.kernel
def copy_by_two_groups(dst, src, tiled_copy):
    """Threads 0..31 copy the tile's first column block, threads 32..63 the second."""
    tid = moye.thread_idx.x
    thr = get_slice(tiled_copy, tid % 32)
    g_src = tile(MoYeArray(src), (8, 4), (0, tid // 32))
    g_dst = tile(MoYeArray(dst), (8, 4), (0, tid // 32))
    copyto(tiled_copy, partition_D(thr, g_dst), partition_S(thr, g_src))


@moye.kernel
def scale_by_parallelize(x, thr_layout):
    part = parallelize(tile(MoYeArray(x), (32,), (0,)), thr_layout, moye.thread_idx.x)
    for i in range(moye.size(part)):
        part[i] = part[i] * 2.0


def trace(kern, block, *args):
    return kern.ir(*args, block=block)


def f32(*shape):
    return np.zeros(shape, np.float32)


CASES = [
    Hostile("get_slice of a TiledMMA by a thread past its size (the issue's example)",
            lambda: fma().get_slice(7), BoundsError,
            r"get_slice of a TiledMMA \(UniversalFMA\(Float32, Float32, Float32\)\): thread 7 "
            r"is not one of the threads 0\.\.3"),
    Hostile("get_slice of a TiledMMA by a negative thread", lambda: fma().get_slice(-1),
            BoundsError, r"thread -1 is not one of the threads 0\.\.3"),
    Hostile("get_slice of a TiledCopy by a thread past its size",
            lambda: get_slice(copy32(), 32), BoundsError,
            r"get_slice of a TiledCopy \(UniversalCopy\(Float32\)\): thread 32 is not one of "
            r"the threads 0\.\.31"),
    Hostile("get_slice of a quad-pair MMA by a lane outside its quad pairs",
            lambda: make_tiled_mma(moye.MMAOP_8x8x4_F16F16F16F16_TN).get_slice(5), BoundsError,
            r"thread 5 is not one of the threads 0\.\.19 of the thread layout "
            r"\(\(4,2\),1,1,1\):\(\(1,16\),0,0,0\)"),
    Hostile("a host gemm of Int8 through an F16 atom (the issue's example)",
            lambda: host_gemm(moye.MMAOP_16x8x16_F16F16F16F16_TN, moye.Int8, moye.Int8, Float16),
            MoyeTypeError, r"gemm: MMAOP_16x8x16_F16F16F16F16_TN takes D=Float16, A=Float16, "
                           r"B=Float16, C=Float16, but A is Int8, B is Int8"),
    Hostile("a host gemm with a Float16 accumulator for an F32 atom",
            lambda: host_gemm(moye.MMAOP_16x8x16_F32F16F16F32_TN, Float16, Float16, Float16),
            MoyeTypeError, r"takes D=Float32, .* C=Float32, but D is Float16, C is Float16"),
    Hostile("a host gemm of Float64 values through a Float32 FMA",
            lambda: gemm(fma(1), MoYeArray(np.ones(1), Layout((1, 1, 1))),
                         MoYeArray(np.ones(1), Layout((1, 1, 1))),
                         MoYeArray(np.ones(1), Layout((1, 1, 1)))), MoyeTypeError,
            r"UniversalFMA\(Float32, Float32, Float32\) takes D=Float32, A=Float32, B=Float32, "
            r"C=Float32, but D is Float64, A is Float64, B is Float64, C is Float64"),
    Hostile("a host gemm with a NumPy array operand",
            lambda: gemm(fma(1), np.ones((1, 1, 1), np.float32),
                         MoYeArray(np.ones(1, np.float32), Layout((1, 1, 1))),
                         MoYeArray(np.ones(1, np.float32), Layout((1, 1, 1)))), MoyeTypeError,
            r"gemm: A must be a MoYeArray, got ndarray"),
    Hostile("a tiled copy over a thread layout with a negative extent",
            lambda: make_tiled_copy(CopyAtom(UniversalCopy(Float64), Float64), Layout((4, -2))),
            LayoutError, r"shape \(4,-2\) has the extent -2"),
    Hostile("tiled_matmul launched with 128 threads for its 256 (the issue's example)",
            lambda: trace_matmul(128), KernelError,
            r"tiled_matmul\.py:\d+: .*get_slice\(copy_A, moye\.thread_idx\.x\)[\s\S]*has 256 "
            r"threads but thread_idx\.x runs over 128 \(block \(128, 1, 1\)\)"),
    Hostile("tiled_matmul launched with 512 threads, sliced by thread_idx.x with no guard",
            lambda: trace_matmul(512), KernelError,
            r"has 256 threads but is sliced by thread_idx\.x, which runs over 512 \(block "
            r"\(512, 1, 1\)\): threads 256\.\.511 would take slices outside it"),
    Hostile("tiled_matmul in a (128, 2) block: 256 threads, but thread_idx.x runs over 128",
            lambda: trace_matmul((128, 2)), KernelError,
            r"has 256 threads but thread_idx\.x runs over 128 \(block \(128, 2, 1\)\)"),
    Hostile("a 32-thread copy sliced by thread_idx.x in a block of 64, unguarded",
            lambda: trace(copy_unguarded, 64, f32(8, 4), f32(8, 4), copy32()), KernelError,
            r"test_tiled\.py:\d+: .*thr = get_slice\(tiled_copy, moye\.thread_idx\.x\)[\s\S]*"
            r"sliced by thread_idx\.x, which runs over 64"),
    Hostile("a 32-thread copy sliced by a derived index in a block of 16",
            lambda: trace(copy_by_two_groups, 16, f32(8, 8), f32(8, 8), copy32()), KernelError,
            r"has 32 threads but the block has 16 threads \(block \(16, 1, 1\)\)"),
    Hostile("parallelize over 32 threads in a block of 16",
            lambda: trace(scale_by_parallelize, 16, f32(32), Layout(32)), KernelError,
            r"parallelize has 32 threads but thread_idx\.x runs over 16"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)


def test_a_guarded_slice_in_a_larger_block_runs():
    rng = np.random.default_rng(7)
    src = rng.standard_normal((8, 4)).astype(np.float32)
    dst = np.full((8, 4), np.nan, np.float32)
    copy_guarded[1, 64](dst, src, copy32())
    np.testing.assert_array_equal(dst, src)


def test_a_slice_by_a_derived_index_in_a_larger_block_runs():
    """Two groups of 32 threads, each slicing the 32-thread copy by tid % 32."""
    rng = np.random.default_rng(8)
    src = rng.standard_normal((8, 8)).astype(np.float32)
    dst = np.full((8, 8), np.nan, np.float32)
    copy_by_two_groups[1, 64](dst, src, copy32())
    np.testing.assert_array_equal(dst, src)


def test_a_host_gemm_of_the_atom_s_own_types_is_exact():
    """Small integers in Float16, accumulated in Float32: D = A B^T + C exactly."""
    op = moye.MMAOP_16x8x16_F32F16F16F32_TN
    rng = np.random.default_rng(9)
    a = rng.integers(-3, 4, (16, 16)).astype(np.float16)
    b = rng.integers(-3, 4, (8, 16)).astype(np.float16)
    c = rng.integers(-3, 4, (16, 8)).astype(np.float32)
    d = MoYeArray(np.full(16 * 8, np.nan, np.float32), Layout((16, 8)))
    gemm(make_tiled_mma(op), d, MoYeArray(a.ravel(order="F"), Layout((16, 16))),
         MoYeArray(b.ravel(order="F"), Layout((8, 16))),
         MoYeArray(c.ravel(order="F"), Layout((16, 8))))
    want = a.astype(np.float64) @ b.astype(np.float64).T + c
    np.testing.assert_array_equal(d.numpy(), want.astype(np.float32))

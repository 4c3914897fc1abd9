"""Kernels run on the CPU backend: the rewrite's semantics, the seed
examples against NumPy, and the CPU backend's checks."""
import numpy as np
import pytest

import moye
from moye import Layout
from moye.backend.cpu import KernelRuntimeError

from . import kernels_for_tests as K

rng = np.random.default_rng(7)


def test_dynamic_loop_accumulates():
    x = rng.standard_normal(32).astype(np.float32)
    out = np.full(1, np.nan, np.float32)
    K.scale_loop[1, 1](out, x, 9)
    assert out[0] == pytest.approx(float(x[:9].sum()), rel=1e-5)


def test_swapped_buffers_in_a_dynamic_loop():
    x = rng.standard_normal(32).astype(np.float32)
    for n in (0, 1, 4):
        out = np.full(32, np.nan, np.float32)
        K.swap_buffers[1, 32](out, x, n)
        np.testing.assert_array_equal(out, x * 2.0 ** n)


def test_dynamic_if_else():
    x = rng.standard_normal(32).astype(np.float32)
    out = np.full(32, np.nan, np.float32)
    K.branch[1, 32](out, x)
    expect = np.where(np.arange(32) < 16, x * 2, x + 1).astype(np.float32)
    np.testing.assert_array_equal(out, expect)


def test_dynamic_while():
    out = np.full(1, -1, np.int32)
    K.while_loop[1, 1](out, 10)
    assert out[0] == 45


def test_dynamic_and():
    x = rng.standard_normal(32).astype(np.float32)
    out = np.zeros(32, np.float32)
    K.and_or[1, 32](out, x, 11)
    t = np.arange(32)
    np.testing.assert_array_equal(out, np.where((t < 11) & (t % 2 == 0), x, 0))


def colmajor(shape, fill=None):
    a = np.asfortranarray(rng.standard_normal(shape).astype(np.float32))
    if fill is not None:
        a[...] = fill
    return a


def test_copy_kernel_plain_and_padded():
    from moye.examples import copy_kernel as ck
    for padded in (False, True):
        src, dst = colmajor((64, 96)), colmajor((64, 96), np.nan)
        ck.launch(dst, src, padded)
        np.testing.assert_array_equal(dst, src)


def test_transpose_kernel():
    from moye.examples import transpose as tr
    src, dst = colmajor((64, 96)), colmajor((96, 64), np.nan)
    tr.launch(dst, src)
    np.testing.assert_array_equal(dst, src.T)


@pytest.mark.parametrize("name", ["matmul_smem", "tiled_matmul"])
def test_matmul_kernels(name):
    import importlib
    ex = importlib.import_module(f"moye.examples.{name}")
    A, B, C = colmajor((256, 64)), colmajor((128, 64)), colmajor((256, 128), np.nan)
    ex.launch(A, B, C)
    ref = A.astype(np.float64) @ B.astype(np.float64).T
    assert np.linalg.norm(C - ref) / np.linalg.norm(ref) < 1e-6


@moye.kernel
def out_of_bounds(out, x):
    t = moye.thread_idx.x
    out[t] = x[t + 1]


def test_out_of_bounds_names_line_thread_and_index():
    x = np.arange(32, dtype=np.float32)
    with pytest.raises(KernelRuntimeError, match=r"(?s)test_run_cpu.py:\d+: out\[t\] = x\[t \+ 1\]"
                                                 r".*index 32.*thread \(31, 0, 0\) of block"):
        out_of_bounds[1, 32](np.zeros(32, np.float32), x)


@moye.kernel
def racy(out, x):
    s = moye.shared_array(x.dtype, Layout(32))
    t = moye.thread_idx.x
    s[t] = x[t]
    out[t] = s[(t + 1) % 32]


def test_race_check_reports_both_lines():
    x = np.arange(32, dtype=np.float32)
    exe = racy.compile(np.zeros(32, np.float32), x, block=32, backend="cpu")
    exe.exe.race_check = True
    with pytest.raises(KernelRuntimeError, match=r"(?s)read-after-write.*s\[t\] = x\[t\]"
                                                 r".*out\[t\] = s\[\(t \+ 1\) % 32\]"):
        exe(np.zeros(32, np.float32), x, grid=1)


def test_array_operations_in_a_kernel_and_vector_accesses(capsys):
    x = np.asfortranarray(rng.standard_normal((4, 16)).astype(np.float32))
    out = np.asfortranarray(np.full_like(x, np.nan))
    K.array_ops[1, 2](out, x)
    np.testing.assert_allclose(out, x * 2 + 1, rtol=1e-6)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"thread {t} first {x[0, 8 * t] * 2 + 1:f}" for t in range(2)]
    src = K.array_ops.cuda_source(out, x, block=2)
    assert "*reinterpret_cast<uint4*>(&p_x_" in src      # 16-byte global loads
    assert 'printf("thread %lld first %f\\n"' in src

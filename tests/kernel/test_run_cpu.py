"""Kernels run on the CPU backend: the rewrite's semantics, the seed
examples against NumPy, and the CPU backend's checks."""
import inspect
import re

import numpy as np
import pytest

import moye
from moye import Layout, MoYeArray
from moye.backend.cpu import KernelRuntimeError, race_checking

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


def test_names_the_then_branch_assigns_are_restored_for_the_else_branch():
    out = np.full(32, -1, np.int32)
    K.roles[1, 32](out, 4)
    np.testing.assert_array_equal(out, np.where(np.arange(32) < 16, 16, 13))
    from moye.backend.cuda import nvrtc                 # the else-branch's C++ sees k too
    src = K.roles.cuda_source(out, 4, block=32)
    then, orelse = src.split("} else {", 1)             # each branch starts k from 1
    assert re.search(r"int k_\d+ = 1;", then) and re.search(r"int k_\d+ = 1;", orelse)
    module = nvrtc.compile_cuda(src, ["moye_roles"], "sm_80")
    assert module.cubin[:4] == b"\x7fELF" and b"moye_roles" in module.cubin


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


def line_of(kern, text):
    """`test_run_cpu.py:N: text` (a pattern), N the line of `kern` that holds `text`."""
    lines, first = inspect.getsourcelines(kern.fn)
    n = next(first + i for i, line in enumerate(lines) if line.strip() == text)
    return re.escape(f"test_run_cpu.py:{n}: {text}")


@moye.kernel
def out_of_bounds_load(out, x):
    t = moye.thread_idx.x
    out[t] = x[moye.block_idx.x * 32 + t + 1]


@moye.kernel
def out_of_bounds_store(out, x):
    t = moye.thread_idx.x
    MoYeArray(out)[t, moye.block_idx.y] = x[t]


def test_out_of_bounds_names_line_thread_and_index():
    x = np.arange(64, dtype=np.float32)       # block 1's thread 31 reads x[64]
    with pytest.raises(KernelRuntimeError) as e:
        out_of_bounds_load[2, 32](np.zeros(32, np.float32), x)
    assert re.fullmatch(line_of(out_of_bounds_load, "out[t] = x[moye.block_idx.x * 32 + t + 1]") +
                    r"\n  out-of-bounds load of 'x' \(index 64, 1 element\(s\); the buffer has 64\)"
                    r" by thread \(31, 0, 0\) of block \(1, 0, 0\)", str(e.value))
    out = np.zeros((32, 2), np.float32, order="F")  # block (0, 2) stores column 2 of 2
    with pytest.raises(KernelRuntimeError) as e:
        out_of_bounds_store[(1, 3), 32](out, x)
    assert re.fullmatch(line_of(out_of_bounds_store, "MoYeArray(out)[t, moye.block_idx.y] = x[t]") +
                    r"\n  out-of-bounds store of 'out' \(index 64, coordinate \(0, 2\) of shape "
                    r"\(32, 2\), 1 element\(s\); the buffer has 64\) by thread \(0, 0, 0\) of "
                    r"block \(0, 2, 0\)", str(e.value))


@moye.kernel
def read_after_write(out, x):
    s = moye.shared_array(x.dtype, Layout(32))
    t = moye.thread_idx.x
    s[t] = x[t]
    out[t] = s[(t + 1) % 32]


@moye.kernel
def write_after_read(out, x):
    s = moye.shared_array(x.dtype, Layout(32))
    t = moye.thread_idx.x
    s[t] = x[t]
    moye.sync_threads()
    y = s[(t + 1) % 32]
    s[t] = y * 2
    out[t] = y


@moye.kernel
def write_after_write(out, x):
    s = moye.shared_array(x.dtype, Layout(32))
    t = moye.thread_idx.x
    s[t] = x[t]
    s[(t + 1) % 32] = x[t] * 2
    moye.sync_threads()
    out[t] = s[t]


@moye.kernel
def write_write_in_one_store(out, x):
    s = moye.shared_array(x.dtype, Layout(32))
    t = moye.thread_idx.x
    s[t // 2] = x[t]
    moye.sync_threads()
    out[t] = s[t]


RACES = {   # name: (kernel, kind, element, first thread, its line, second thread, its line)
    "read_after_write": (read_after_write, "read-after-write", 1, 1, "s[t] = x[t]",
                         0, "out[t] = s[(t + 1) % 32]"),
    "write_after_read": (write_after_read, "write-after-read", 0, 31, "y = s[(t + 1) % 32]",
                         0, "s[t] = y * 2"),
    "write_after_write": (write_after_write, "write-after-write", 1, 1, "s[t] = x[t]",
                          0, "s[(t + 1) % 32] = x[t] * 2"),
    "write_write_in_one_store": (write_write_in_one_store, "write-after-write", 0, 0,
                                 "s[t // 2] = x[t]", 1, "s[t // 2] = x[t]"),
}


@pytest.mark.parametrize("name", list(RACES))
def test_race_check_reports_both_lines(name):
    kern, kind, element, first, first_line, second, second_line = RACES[name]
    x = np.arange(32, dtype=np.float32)
    kern[2, 32](np.zeros(32, np.float32), x)          # no check: runs
    with pytest.raises(KernelRuntimeError) as e, race_checking():
        kern[2, 32](np.zeros(32, np.float32), x)
    assert re.fullmatch(rf"shared-memory race \({kind}\) on element {element} between thread "
                        rf"\({first}, 0, 0\) at {line_of(kern, first_line)} and thread "
                        rf"\({second}, 0, 0\) at {line_of(kern, second_line)}, block \(0, 0, 0\), "
                        "with no barrier between them", str(e.value))


def test_race_check_of_one_compiled_kernel():
    x = np.arange(32, dtype=np.float32)
    exe = read_after_write.compile(np.zeros(32, np.float32), x, block=32, backend="cpu")
    exe(np.zeros(32, np.float32), x, grid=1)
    exe.exe.race_check = True
    with pytest.raises(KernelRuntimeError, match="read-after-write"):
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


@moye.kernel
def grid_stride_sums(out, x):
    """Each block sums rows block_idx.x, + grid_dim.x, ...: the blocks take
    different numbers of trips around a block_reduce (its barriers)."""
    for row in range(moye.block_idx.x, moye.size(x, 0), moye.grid_dim.x):
        s = moye.block_reduce(x[row, moye.thread_idx.x], "sum")
        if moye.thread_idx.x == 0:
            out[row] = s


def test_blocks_of_one_batch_take_different_trips_around_a_barrier():
    x = np.random.default_rng(0).standard_normal((7, 64)).astype(np.float32)
    out = np.full(7, np.nan, np.float32)
    grid_stride_sums[3, 64](out, x)                 # blocks 0: 3 rows, 1 and 2: 2 rows
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)

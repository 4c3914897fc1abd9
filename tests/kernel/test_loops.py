"""Dynamic `range` loops compute what Python's range does, whatever the sign
of the step (static or run-time), with Int32 and Int64 bounds; the CUDA
they become compiles and tests the right way; kernels without readable
source, closures and helpers trace as written."""
import re

import numpy as np
import pytest

import moye
from moye import ir
from moye.compiler.frontend import BACKENDS

POISON = -(2**30) + 7


@moye.kernel
def visit(out, count, start, stop, step):
    k = 0
    for i in range(start, stop, step):
        out[k] = i
        k = k + 1
    count[0] = k


@moye.kernel
def visit_static_step(out, count, start, stop, step: moye.Constexpr):
    k = 0
    for i in range(start, stop, step):
        out[k] = i
        k = k + 1
    count[0] = k


@moye.kernel
def countdown(out, n):
    for i in range(n - 1, -1, -1):
        out[n - 1 - i] = i


RANGES = [(0, 10, 3), (10, 0, -3), (9, -1, -1), (4, -1, -1), (7, -1, -2), (-3, 4, 2),
          (3, -10, -3), (5, 5, 1), (5, 5, -1), (0, 5, -1), (5, 0, 1), (0, 1, -1), (2, 3, 7),
          (3, 2, -7)]


def run_visit(kern, start, stop, step, dtype=np.int32):
    out = np.full(16, POISON, dtype)
    count = np.full(1, POISON, np.int32)
    kern[1, 1](out, count, start, stop, step, backend="cpu")
    return out, int(count[0])


def expect(out, count, start, stop, step, base=0):
    want = [i - base for i in range(start, stop, step)]
    assert count == len(want)
    assert [int(x) - base for x in out[:count]] == want
    assert (out[count:] == POISON).all()


@pytest.mark.parametrize("start, stop, step", RANGES)
def test_run_time_step_of_either_sign(start, stop, step):
    out, count = run_visit(visit, start, stop, step)
    expect(out, count, start, stop, step)


@pytest.mark.parametrize("start, stop, step", RANGES)
def test_static_step_of_either_sign(start, stop, step):
    out, count = run_visit(visit_static_step, start, stop, step)
    expect(out, count, start, stop, step)


@pytest.mark.parametrize("start, stop, step", [(0, 10, 3), (10, 0, -3), (9, -1, -1),
                                               (0, 5, -1), (5, 5, 1)])
@pytest.mark.parametrize("kern", [visit, visit_static_step], ids=["run_time", "static"])
def test_int64_bounds(kern, start, stop, step):
    base = 3 * 2**32
    out, count = run_visit(kern, start + base, stop + base, step, np.int64)
    expect(out, count, start + base, stop + base, step, base)
    k = kern.trace(out, np.zeros(1, np.int32), start + base, stop + base, step)[0]
    (loop,) = [s for s in k.body if isinstance(s, ir.For)]
    assert loop.var.type is moye.Int64


@pytest.mark.parametrize("n", [0, 1, 5])
def test_countdown_to_zero(n):
    out = np.full(8, POISON, np.int32)
    countdown[1, 1](out, n, backend="cpu")
    assert out[:n].tolist() == list(range(n - 1, -1, -1))
    assert (out[n:] == POISON).all()


def for_header(src):
    (line,) = [ln.strip() for ln in src.splitlines() if ln.strip().startswith("for (")]
    return line


@pytest.mark.parametrize("step, test", [(1, r"(i_\d+) < p_stop_\d+; \1 \+= 1\)"),
                                        (3, r"(i_\d+) < p_stop_\d+; \1 \+= 3\)"),
                                        (-1, r"(i_\d+) > p_stop_\d+; \1 \+= -1\)"),
                                        (-3, r"(i_\d+) > p_stop_\d+; \1 \+= -3\)")])
def test_static_step_emits_one_comparison(step, test):
    args = (np.zeros(16, np.int32), np.zeros(1, np.int32), 0, 5, step)
    src = visit_static_step.cuda_source(*args)
    assert re.search(test, for_header(src)), for_header(src)
    assert "__trap" not in src
    kernel = visit_static_step.trace(*args)[0]
    assert BACKENDS["cuda"].compile_only(kernel, (1, 1, 1), "sm_80").cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("bound", [5, 3 * 2**32], ids=["int32", "int64"])
def test_run_time_step_tests_its_sign_and_traps_on_0(bound):
    args = (np.zeros(16, np.int64), np.zeros(1, np.int32), 0, bound, -2)
    src = visit.cuda_source(*args)
    header = re.search(r"\((\w+) > 0 \? (i_\d+) < p_stop_\d+ : \2 > p_stop_\d+\); "
                       r"\2 \+= \1\)", for_header(src))
    assert header, for_header(src)
    assert f"if ({header.group(1)} == 0) __trap();" in src
    kernel = visit.trace(*args)[0]
    assert BACKENDS["cuda"].compile_only(kernel, (1, 1, 1), "sm_80").cubin[:4] == b"\x7fELF"


def test_countdown_compiles_with_a_greater_than():
    src = countdown.cuda_source(np.zeros(8, np.int32), 5)
    assert re.search(r"(i_\d+) > -1; \1 \+= -1\)", for_header(src)), for_header(src)
    kernel = countdown.trace(np.zeros(8, np.int32), 5)[0]
    assert BACKENDS["cuda"].compile_only(kernel, (1, 1, 1), "sm_80").cubin[:4] == b"\x7fELF"


# -- the rest of the rewrite -----------------------------------------------------------

@moye.kernel
def last_of_static_loop(out):
    for i in range(3):
        out[i] = i
    out[3] = i


def test_static_loop_variable_keeps_its_last_value():
    out = np.full(4, POISON, np.int32)
    last_of_static_loop[1, 1](out, backend="cpu")
    assert out.tolist() == [0, 1, 2, 2]


@moye.kernel
def helper_returns(out, n):
    def clamp(x):
        if x > 3:                   # static: returns are fine
            return 3
        return x
    for i in range(n):              # run-time loop around the helper
        out[i] = i * clamp(5)


def test_helper_returning_inside_a_dynamic_loop():
    out = np.full(6, POISON, np.int32)
    helper_returns[1, 1](out, 4, backend="cpu")
    assert out.tolist() == [0, 3, 6, 9, POISON, POISON]


def make_closure_kernel():
    @moye.kernel
    def scaled(out, n):
        for i in range(n):
            out[i] = scale(i)       # defined after the kernel
    def scale(x):                   # noqa: E306
        return x * 7
    return scaled


def test_closure_read_after_the_kernel_is_defined():
    out = np.full(4, POISON, np.int32)
    make_closure_kernel()[1, 1](out, 3, backend="cpu")
    assert out.tolist() == [0, 7, 14, POISON]


EXEC_STRAIGHT = """
@moye.kernel
def k(out, x, n):
    for i in range(4):              # static: Python runs it
        out[i] = x[i] * n + i
"""


def test_exec_made_kernel_traces_and_runs():
    namespace = {"moye": moye}
    exec(EXEC_STRAIGHT, namespace)
    kern = namespace["k"]
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4).astype(np.float32)
    out = np.full(4, np.nan, np.float32)
    kernel, binding, _ = kern.trace(out, x, 2.5)
    # a launch reads the kernel's source for the cache key (KernelFunction.code_identity),
    # so run the traced IR directly
    BACKENDS["cpu"].compile(kernel, (1, 1, 1)).launch((1, 1, 1), (1, 1, 1), binding)
    np.testing.assert_array_equal(out, x * np.float32(2.5) + np.arange(4, dtype=np.float32))
    assert BACKENDS["cuda"].compile_only(kernel, (1, 1, 1), "sm_80").cubin[:4] == b"\x7fELF"

"""`and`, `or` and `x if c else y` of run-time values evaluate as Python's
and C's do: a term after a run-time one runs only where it decides the
result, a side of a conditional expression only where it is taken, so
the guards `i < n and x[i] > 0` and `x[i] if i < n else 0.0` never read
past the array (the CPU backend raised for those reads before). Terms
that cannot fault (arithmetic, comparisons) stay branch-free."""
import numpy as np
import pytest

import moye
from moye import ir

POISON = -99


@moye.kernel
def guarded_and(out, x, n):
    i = moye.thread_idx.x
    if i < n and x[i] > 0.0:
        out[i] = 1
    else:
        out[i] = 0


@moye.kernel
def guarded_or(out, x, n):
    i = moye.thread_idx.x
    out[i] = 1 if i >= n or x[i] < 0.0 else 0


@moye.kernel
def guarded_ternary(out, x, n):
    i = moye.thread_idx.x
    out[i] = x[i] * 2.0 if i < n else -1.0


@moye.kernel
def guarded_division(out, a, b):
    i = moye.thread_idx.x
    out[i] = 1 if b[i] != 0 and a[i] // b[i] > 1 else 0


@moye.kernel
def chained(out, x, y, n):
    i = moye.thread_idx.x
    out[i] = 1 if i < n and x[i] > 0.0 and y[i] > 0.0 else 0


@moye.kernel
def scan_while(out, x, n):
    t = moye.thread_idx.x
    k = 0
    while k < n and x[t, k] > 0.0:         # reads x[t, n] never
        k += 1
    out[t] = k


@moye.kernel
def mixed_sides(out, x, n):
    i = moye.thread_idx.x
    out[i] = x[i] if i < n else 7          # a float on one side, an int on the other


def test_and_reads_only_where_the_guard_holds():
    x = np.array([1.0, -2.0, 3.0, 0.0], np.float32)       # 4 elements for 8 threads
    out = np.full(8, POISON, np.int32)
    guarded_and[1, 8](out, x, 4)
    assert out.tolist() == [1, 0, 1, 0, 0, 0, 0, 0]


def test_or_reads_only_where_the_guard_fails():
    x = np.array([1.0, -2.0, 3.0, -0.5], np.float32)
    out = np.full(8, POISON, np.int32)
    guarded_or[1, 8](out, x, 4)
    assert out.tolist() == [0, 1, 0, 1, 1, 1, 1, 1]


def test_a_conditional_expression_evaluates_the_side_taken():
    x = np.arange(5, dtype=np.float32) + 0.5
    out = np.full(8, np.nan, np.float32)
    guarded_ternary[1, 8](out, x, 5)
    assert out.tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, -1.0, -1.0, -1.0]


def test_an_integer_division_guarded_against_zero():
    a = np.array([7, 9, 4, 5], np.int32)
    b = np.array([0, 2, 0, 5], np.int32)
    out = np.full(4, POISON, np.int32)
    guarded_division[1, 4](out, a, b)
    assert out.tolist() == [0, 1, 0, 0]


def test_a_chain_of_guards():
    x = np.array([1, 1, -1, 1, 1], np.float32)
    y = np.array([1, -1, 1, 1, 1], np.float32)
    out = np.full(8, POISON, np.int32)
    chained[1, 8](out, x, y, 5)
    assert out.tolist() == [1, 0, 0, 1, 1, 0, 0, 0]


def test_a_while_condition_that_guards_its_read():
    x = np.ones((4, 6), np.float32)
    x[0, 2] = x[2, 0] = -1.0
    out = np.full(4, POISON, np.int32)
    scan_while[1, 4](out, x, 6)
    assert out.tolist() == [2, 6, 0, 6]


def test_sides_of_two_types_merge_into_the_wider():
    x = np.array([0.25, 1.5], np.float32)
    out = np.full(4, np.nan, np.float32)
    mixed_sides[1, 4](out, x, 2)
    assert out.tolist() == [0.25, 1.5, 7.0, 7.0]


@moye.kernel
def pure_terms(out, a, b):
    i = moye.thread_idx.x
    u, v = a[i], b[i]
    out[i] = 1 if u > 0.0 and v > 0.0 or u * v < -1.0 else 0


def test_terms_that_cannot_fault_stay_branch_free():
    k = pure_terms.trace(np.zeros(4, np.int32), np.zeros(4, np.float32),
                         np.zeros(4, np.float32), block=4)[0]
    assert not any(isinstance(s, ir.If) for s in k.body)
    a = np.array([1, 1, -2, -1], np.float32)
    b = np.array([1, -1, 1, 0.5], np.float32)
    out = np.full(4, POISON, np.int32)
    pure_terms[1, 4](out, a, b)
    assert out.tolist() == [1, 0, 1, 0]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("kernel, args", [
    (guarded_and, (np.zeros(8, np.int32), np.zeros(4, np.float32), 4)),
    (guarded_ternary, (np.zeros(8, np.float32), np.zeros(5, np.float32), 5)),
    (guarded_division, (np.zeros(4, np.int32), np.zeros(4, np.int32), np.ones(4, np.int32))),
], ids=["and", "ternary", "division"])
def test_the_guarded_read_is_under_a_branch_in_cpp(kernel, args, arch):
    from moye.backend.cuda import nvrtc
    source = kernel.cuda_source(*args, block=8)
    body = source[source.index(f"moye_{kernel.name}"):]
    guarded = " = p_x_" if kernel is not guarded_division else " / "
    assert body.index("if (") < body.index(guarded)     # the read or division: in the branch
    assert nvrtc.compile_cuda(source, [f"moye_{kernel.name}"], arch).cubin[:4] == b"\x7fELF"

"""Hostile kernels: loops that cannot end, constructs a kernel cannot run
as written, exceptions of the user's code while tracing, kernels without
readable source. Each must raise a moye error naming the kernel's line."""
import itertools

import numpy as np
import pytest

import moye
from moye import KernelError, KernelRuntimeError

from .hostile import Hostile, check, ids

HERE = r"test_kernel\.py:\d+: +"           # a message names this file's line


def i32(n=8):
    return np.zeros(n, np.int32)


def trace(kern, *args):
    return lambda: kern.trace(i32(), *args)


def on_cpu(kern, *args, block=1):
    return lambda: kern[1, block](i32(), *args, backend="cpu")


# -- range ------------------------------------------------------------------------------

@moye.kernel
def static_step_0(out):
    for i in range(0, 4, 0):
        out[i] = 1


@moye.kernel
def dynamic_range_step_0(out, n):
    for i in range(n, 0, 0):
        out[i] = 1


@moye.kernel
def constexpr_step(out, n, step: moye.Constexpr):
    for i in range(0, n, step):
        out[i] = 1


@moye.kernel
def runtime_step(out, n, step):
    for i in range(0, n, step):
        out[i] = 1


@moye.kernel
def per_thread_step(out, n, s):
    for i in range(0, n, moye.thread_idx.x - s):
        out[i] = 1


@moye.kernel
def float_step(out, n):
    for i in range(0, n, 0.5):
        out[0] = 1


@moye.kernel
def float_stop(out, x):
    for i in range(x):
        out[0] = 1


# -- loops that never end while tracing -------------------------------------------------

@moye.kernel
def while_true(out):
    while True:
        pass


@moye.kernel
def static_while_storing(out, n):
    k = 0
    while k < 1:
        out[0] = n


@moye.kernel
def huge_static_range(out):
    for i in moye.range_constexpr(10**9):
        pass


@moye.kernel
def endless_iterable(out):
    for i in itertools.count():
        pass


# -- constructs ------------------------------------------------------------------------

@moye.kernel
def try_except(out, n):
    try:
        out[0] = n
    except IndexError:
        out[0] = 0


@moye.kernel
def try_finally(out, n):
    try:
        out[0] = n
    finally:
        out[1] = n


@moye.kernel
def with_block(out, n):
    with np.errstate(all="ignore"):
        out[0] = n


@moye.kernel
def generator(out, n):
    out[0] = n
    yield n


@moye.kernel
def yield_from(out, n):
    yield from range(3)


@moye.kernel
async def coroutine(out, n):
    out[0] = n


COUNTER = 0


@moye.kernel
def assigns_global(out, n):
    global COUNTER
    COUNTER = COUNTER + 1
    out[0] = n


def make_nonlocal():
    calls = 0

    @moye.kernel
    def assigns_nonlocal(out, n):
        nonlocal calls
        calls = calls + 1
        out[0] = n
    return assigns_nonlocal


@moye.kernel
def for_else(out, n):
    for i in range(n):
        out[i] = i
    else:
        out[0] = 0


@moye.kernel
def while_else(out, n):
    i = 0
    while i < n:
        i = i + 1
    else:
        out[0] = i


@moye.kernel
def break_under_a_run_time_if_in_a_traced_unroll(out, x):
    vals = [x[0], x[1]]
    for i in range(2):
        if vals[i] > 0.0:
            break


@moye.kernel
def negative_index(out, n):
    out[-1] = n


@moye.kernel
def walrus_in_while(out, n):
    k = n
    while (k := k - 1) >= 0:
        out[0] = k


@moye.kernel
def float_shift(out, x):
    out[0] = x[0] << 2


@moye.kernel
def float_invert(out, x):
    out[0] = ~x[0]


@moye.kernel
def shift_past_width(out, n):
    out[0] = n >> 32


@moye.kernel
def kernel_returns_a_value(out, n):
    out[0] = n
    return n


@moye.kernel
def helper_returns_in_its_branch(out, n):
    def clamp(x):                       # no return after the if: not lifted
        if x > 3:
            return 3
    out[0] = clamp(n)


@moye.kernel
def loop_variable_after_loop(out, n):
    for i in range(n):
        out[i] = i
    out[0] = i


@moye.kernel
def assigned_on_one_path(out, n):
    if n > 3:
        y = n
    out[0] = y


@moye.kernel
def static_then_dynamic_while(out, n):
    k = 0
    while k < 3:
        k = n


@moye.kernel
def stores_a_string(out, n):
    out[0] = "seven"


# -- the user's own exceptions ---------------------------------------------------------

class Custom(Exception):
    pass


@moye.kernel
def raises_runtime_error(out, n):
    out[0] = n
    raise RuntimeError("boom at trace")


@moye.kernel
def raises_key_error(out, n):
    table = {"a": 1}
    out[0] = table["missing key"]


def _forever(x):
    return _forever(x) + 1


@moye.kernel
def recurses(out, n):
    out[0] = _forever(n)


@moye.kernel
def asserts(out, n):
    assert out.layout == 5, "the layout is not five"


@moye.kernel
def raises_stop_iteration(out, n):
    out[0] = next(iter(()))


@moye.kernel
def raises_custom(out, n):
    raise Custom("my own error")


@moye.kernel
def undefined_name(out, n):
    out[0] = not_defined_anywhere      # noqa: F821


# -- kernels whose source cannot be read -----------------------------------------------

def from_exec(text):
    namespace = {"moye": moye}
    exec(text, namespace)
    return namespace["k"]


EXEC_IF = """
@moye.kernel
def k(out, n):
    if n > 2:
        out[0] = n
"""
EXEC_RANGE = """
@moye.kernel
def k(out, n):
    for i in range(n):
        out[i] = n
"""
EXEC_GENERATOR = """
@moye.kernel
def k(out, n):
    yield n
"""

NO_SOURCE = r"source cannot be read.*not rewritten"

CASES = [
    Hostile("static range step 0", trace(static_step_0), KernelError,
            HERE + r"for i in range\(0, 4, 0\):\n.*range\(\) step must not be 0"),
    Hostile("run-time range with a static step of 0", trace(dynamic_range_step_0, 5),
            KernelError, HERE + r"for i in range\(n, 0, 0\):\n.*step must not be 0"),
    Hostile("Constexpr step of 0", trace(constexpr_step, 5, 0), KernelError,
            HERE + r"for i in range\(0, n, step\):\n.*step must not be 0"),
    Hostile("run-time step of 0 on the CPU backend", on_cpu(runtime_step, 5, 0),
            KernelRuntimeError, r"test_kernel\.py:\d+: for i in range\(0, n, step\):\n"
                                r".*step is 0 in thread \(0, 0, 0\) of block \(0, 0, 0\)",
            seconds=10),
    Hostile("run-time step of 0 in one thread", on_cpu(per_thread_step, 5, 2, block=4),
            KernelRuntimeError, r"test_kernel\.py:\d+: for i in range\(0, n, moye.thread_idx"
                                r".*\n.*step is 0 in thread \(2, 0, 0\)", seconds=10),
    Hostile("float step in a run-time range", trace(float_step, 5), KernelError,
            HERE + r"for i in range\(0, n, 0.5\):\n.*step must be an integer, got 0.5"),
    Hostile("float run-time stop", trace(float_stop, 2.5), KernelError,
            HERE + r"for i in range\(x\):\n.*stop must be an integer"),
    Hostile("while True with no way out", trace(while_true), KernelError,
            HERE + r"while True:\n.*static condition.* at most 65536 times", seconds=20),
    Hostile("static while that stores every time", trace(static_while_storing, 5), KernelError,
            HERE + r"while k < 1:\n.*at most 65536 times", seconds=20),
    Hostile("static range of a billion", trace(huge_static_range), KernelError,
            HERE + r"for i in moye.range_constexpr\(10\*\*9\):\n.*more than 65536 times", seconds=20),
    Hostile("endless static iterable", trace(endless_iterable), KernelError,
            HERE + r"for i in itertools.count\(\):\n.*has not ended", seconds=20),
    Hostile("try/except", trace(try_except, 5), KernelError,
            HERE + r"try:\n.*`try` is not supported"),
    Hostile("try/finally", trace(try_finally, 5), KernelError,
            HERE + r"try:\n.*`try` is not supported"),
    Hostile("with", trace(with_block, 5), KernelError,
            HERE + r"with np.errstate.*\n.*`with` is not supported"),
    Hostile("generator kernel", trace(generator, 5), KernelError,
            HERE + r"yield n\n.*cannot be a generator"),
    Hostile("yield from", trace(yield_from, 5), KernelError,
            HERE + r"yield from range\(3\)\n.*cannot be a generator"),
    Hostile("async def kernel", trace(coroutine, 5), KernelError,
            HERE + r"async def coroutine.*\n.*`async def` is not supported"),
    Hostile("global", trace(assigns_global, 5), KernelError,
            HERE + r"global COUNTER\n.*`global` is not supported"),
    Hostile("nonlocal", lambda: make_nonlocal().trace(i32(), 5), KernelError,
            HERE + r"nonlocal calls\n.*`nonlocal` is not supported"),
    Hostile("lambda kernel", lambda: moye.kernel(lambda out, n: None).trace(i32(), 5),
            KernelError, r"kernel '<lambda>', .*test_kernel\.py:\d+: .*\n.*not a lambda"),
    Hostile("for ... else", trace(for_else, 5), KernelError,
            HERE + r"for i in range\(n\):\n.*`for ... else` is not supported"),
    Hostile("while ... else", trace(while_else, 5), KernelError,
            HERE + r"while i < n:\n.*`while ... else` is not supported"),
    Hostile("run-time break in a loop unrolled while tracing",
            trace(break_under_a_run_time_if_in_a_traced_unroll, np.zeros(2, np.float32)),
            KernelError, HERE + r"break\n.*`break` under a run-time condition, in a loop that "
            r"unrolls while tracing"),
    Hostile("a negative index, as Python's from the end", trace(negative_index, 5), KernelError,
            HERE + r"out\[-1\] = n\n.*coordinate -1 of the array's shape \? is negative: "
            r"coordinates do not count from the end"),
    Hostile(":= in a while condition", trace(walrus_in_while, 5), KernelError,
            HERE + r"while \(k := k - 1\) >= 0:\n.*`:=` in a `while` condition is not "
            r"supported in a kernel"),
    Hostile("a float shifted", trace(float_shift, np.ones(1, np.float32)), KernelError,
            HERE + r"out\[0\] = x\[0\] << 2\n.*a Float32 value << 2: bitwise operators take "
            r"integers, not Float32"),
    Hostile("a float inverted", trace(float_invert, np.ones(1, np.float64)), KernelError,
            HERE + r"out\[0\] = ~x\[0\]\n.*~a Float64 value: bitwise operators take integers"),
    Hostile("a shift by the width", trace(shift_past_width, 5), KernelError,
            HERE + r"out\[0\] = n >> 32\n.*an Int32 value >> 32: a shift of a 32-bit Int32 by "
            r"32 is undefined"),
    Hostile("a kernel returning a value", trace(kernel_returns_a_value, 5), KernelError,
            HERE + r"return n\n.*a kernel returns nothing .*: store its results in an output "
            r"array"),
    Hostile("a helper's return in its dynamic if", trace(helper_returns_in_its_branch, 5),
            KernelError, HERE + r"return 3\n.*`return` inside dynamic control flow"),
    Hostile("loop variable used after a dynamic loop", trace(loop_variable_after_loop, 5),
            KernelError, HERE + r"out\[0\] = i\n.*'i' is the variable of a dynamic loop"),
    Hostile("name assigned on one path only", trace(assigned_on_one_path, 5), KernelError,
            HERE + r"out\[0\] = y\n.*'y' is assigned inside a dynamic branch"),
    Hostile("static while condition turns dynamic", trace(static_then_dynamic_while, 5),
            KernelError, HERE + r"while k < 3:\n.*static became dynamic"),
    Hostile("store a string", trace(stores_a_string, 5), KernelError,
            HERE + r"out\[0\] = \"seven\"\n.*cannot store 'seven' in an array of Int32"),
    Hostile("user RuntimeError", trace(raises_runtime_error, 5), KernelError,
            HERE + r"raise RuntimeError.*\n.*RuntimeError: boom at trace"),
    Hostile("user KeyError", trace(raises_key_error, 5), KernelError,
            HERE + r"out\[0\] = table.*\n.*KeyError: 'missing key'"),
    Hostile("user RecursionError", trace(recurses, 5), KernelError,
            HERE + r"return _forever\(x\) \+ 1\n.*RecursionError"),
    Hostile("user assert", trace(asserts, 5), KernelError,
            HERE + r"assert out.layout == 5.*\n.*AssertionError: the layout is not five"),
    Hostile("user StopIteration", trace(raises_stop_iteration, 5), KernelError,
            HERE + r"out\[0\] = next\(iter\(\(\)\)\)\n.*StopIteration"),
    Hostile("user's own exception class", trace(raises_custom, 5), KernelError,
            HERE + r"raise Custom.*\n.*Custom: my own error"),
    Hostile("undefined name", trace(undefined_name, 5), KernelError,
            HERE + r"out\[0\] = not_defined_anywhere.*\n.*NameError"),
    Hostile("exec-made kernel with a dynamic if", lambda: from_exec(EXEC_IF).trace(i32(), 5),
            KernelError, r"<string>:\d+: \n.*Python cannot branch on it.*\n.*" + NO_SOURCE),
    Hostile("exec-made kernel with a dynamic range",
            lambda: from_exec(EXEC_RANGE).trace(i32(), 5), KernelError,
            r"<string>:\d+: \n.*static int is needed.*\n.*" + NO_SOURCE),
    Hostile("exec-made generator kernel", lambda: from_exec(EXEC_GENERATOR).trace(i32(), 5),
            KernelError, r"<string>:\d+: \n.*cannot be a generator"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)


def test_user_exceptions_chain_to_the_original():
    with pytest.raises(KernelError) as info:
        raises_key_error.trace(i32(), 5)
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.__cause__.args == ("missing key",)
    with pytest.raises(KernelError) as info:
        raises_custom.trace(i32(), 5)
    assert type(info.value.__cause__) is Custom


@moye.kernel
def exits(out, n):
    raise SystemExit(3)


@moye.kernel
def interrupted(out, n):
    raise KeyboardInterrupt


def test_exit_and_interrupt_pass_through():
    with pytest.raises(SystemExit):
        exits.trace(i32(), 5)
    with pytest.raises(KeyboardInterrupt):
        interrupted.trace(i32(), 5)

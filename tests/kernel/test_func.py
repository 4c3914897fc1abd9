"""@moye.func: helpers from another module with run-time control flow,
helpers calling helpers, `return` inside loops and under run-time ifs
(lifted to the end), recursion, host calls, the
kernel's cache key, and NVRTC compiling kernels that call them."""
import importlib
import re
import sys
import textwrap

import numpy as np
import pytest

import moye
from moye.compiler import device_function as func_module
from moye.compiler.frontend import BACKENDS

from . import helpers_for_func as h


@moye.kernel
def calls_helpers(out, x, n):
    t = moye.thread_idx.x
    v = x[t]
    out[0, t] = h.clamp_low(v, 0.0)
    out[1, t] = h.power(v, n)
    out[2, t] = h.halvings(v)
    out[3, t] = h.clamped_power(v, n)
    out[4, t] = h.first_above((1, 5, 9), 4) + h.tree_sum((v, 2.0 * v, 2.0, 3.0), 0, 4)


def helpers_reference(x, n):
    x64 = x.astype(np.float64)
    halvings = np.array([0 if v < 1 else int(np.floor(np.log2(v))) + 1 for v in x64])
    return np.stack([np.maximum(x64, 0.0), x64 ** n, halvings,
                     np.maximum(x64 ** n, 0.5), 1 + 3 * x64 + 5.0])


@pytest.mark.parametrize("n", [0, 3])
def test_helpers_with_run_time_if_for_while_from_another_module(n):
    rng = np.random.default_rng(n)
    x = rng.uniform(-3.0, 10.0, 40).astype(np.float32)
    out = np.full((5, 40), np.nan, np.float32)
    calls_helpers[1, 40](out, x, n)
    np.testing.assert_allclose(out, helpers_reference(x, n), rtol=1e-5)


def test_the_helpers_become_kernel_control_flow_not_unrolled_code():
    x, out = np.ones(4, np.float32), np.zeros((5, 4), np.float32)
    text = calls_helpers.ir(out, x, 3, block=4)
    assert "if " in text and "for " in text and "while" in text


def test_a_helper_called_inside_a_run_time_loop_may_return_at_its_end():
    @moye.kernel
    def loop(out, x, n):
        t = moye.thread_idx.x
        acc = 0.0
        for i in range(n):                          # run-time loop around the helpers
            acc = acc + h.clamp_low(x[t] - i, 0.0)
        out[t] = acc

    x = np.random.default_rng(1).uniform(0, 6, 8).astype(np.float32)
    out = np.full(8, np.nan, np.float32)
    loop[1, 8](out, x, 4)
    want = sum(np.maximum(x.astype(np.float64) - i, 0) for i in range(4))
    np.testing.assert_allclose(out, want, rtol=1e-6)


@moye.func
def sign_of(v):
    if v < 0:
        return -1                                   # return inside run-time control flow
    return 1


@moye.func
def loops_until(n):
    i = 0
    while i < n:
        if i == 2:
            return i
        i = i + 1
    return i


@moye.func
def piecewise(x):
    """-1 below -1, 1 above 1, x**3 between, by early returns."""
    if x < -1.0:
        return -1
    elif x > 1.0:
        return 1.0
    else:
        y = x * x * x
    return y


@moye.func
def ordered(a, b):
    if a > b:
        return b, a
    return a, b


def test_a_helpers_returns_under_run_time_ifs_are_lifted_to_its_end():
    @moye.kernel
    def k(out, x):
        i = moye.thread_idx.x
        lo, hi = ordered(x[i], x[(i + 1) % 32])
        out[i, 0] = sign_of(x[i])
        out[i, 1] = piecewise(x[i])         # an int on one path, floats on the others
        out[i, 2] = lo
        out[i, 3] = hi

    x = np.random.default_rng(4).uniform(-2, 2, 32).astype(np.float32)
    out = np.full((32, 4), np.nan, np.float32)
    k[1, 32](out, x)
    nxt = np.roll(x, -1)
    np.testing.assert_array_equal(out[:, 0], np.where(x < 0, -1, 1))
    np.testing.assert_array_equal(out[:, 1], np.where(x < -1, -1, np.where(x > 1, 1, x * x * x)))
    np.testing.assert_array_equal(out[:, 2], np.minimum(x, nxt))
    np.testing.assert_array_equal(out[:, 3], np.maximum(x, nxt))
    body = k.cuda_source(out, x, block=32).split("__global__")[1]
    assert "_moye_result" in body and not re.search(r"^\s*return\b", body, re.M)


def test_return_inside_a_run_time_loop_of_a_helper_is_refused_naming_its_line():
    @moye.kernel
    def w(out, n):
        out[0] = loops_until(n)

    with pytest.raises(moye.KernelError, match=r"in moye.func 'loops_until'.*test_func.py:\d+: "
                                               r"return i *\n.*`return` inside dynamic"
                                               r".*return it at the function's end"):
        w[1, 1](np.zeros(1, np.int32), 5)


def test_dynamic_recursion_is_refused_and_static_recursion_inlines():
    @moye.kernel
    def k(out, n):
        out[0] = h.countdown(n)

    with pytest.raises(moye.KernelError, match=r"in kernel 'k'.*\n.*in moye.func 'countdown'.*"
                                               r"helpers_for_func.py:\d+: r = countdown\(n - 1\)"
                                               r".*\n.*calls itself more than 64 deep"):
        k[1, 1](np.zeros(1, np.int32), 3)
    assert h.countdown(3) == 3                      # on the host: plain Python
    assert func_module.RECURSION_LIMIT == 64


def test_outside_a_kernel_a_helper_is_plain_python():
    assert h.clamp_low(-2.0, 0.5) == 0.5 and h.power(2.0, 5) == 32.0
    assert h.halvings(8.0) == 4 and h.first_above([0, 3, 7], 2) == 1
    assert h.tree_sum([1, 2, 3, 4, 5], 0, 5) == 15
    assert isinstance(h.clamp_low, moye.DeviceFunction) and h.clamp_low.__name__ == "clamp_low"


def test_helpers_take_arrays_layouts_and_atoms():
    @moye.func
    def scaled_copy(dst, src, layout, alpha):
        for i in range(moye.size(layout)):
            dst[layout(i)] = src[layout(i)] * alpha

    @moye.kernel
    def k(out, x, alpha):
        frag = moye.make_fragment_like(moye.Layout(4), x.dtype)
        scaled_copy(frag, x, moye.Layout(4), alpha)
        scaled_copy(out, frag, moye.Layout(4), 2.0)

    x = np.random.default_rng(2).standard_normal(4).astype(np.float32)
    out = np.full(4, np.nan, np.float32)
    k[1, 1](out, x, 1.5)
    np.testing.assert_allclose(out, x * 3.0, rtol=1e-6)


@moye.func
def dot_with(atom, d, a, b):
    """A helper taking an MMA atom: a one-thread gemm of register fragments."""
    moye.gemm(atom, d, a, b, d)
    return d


def test_helpers_take_atoms():
    @moye.kernel
    def k(out, x, y, atom: moye.Constexpr):
        a = moye.make_fragment_like(moye.Layout((1, 2, 4)), x.dtype)
        b = moye.make_fragment_like(moye.Layout((1, 3, 4)), x.dtype)
        d = moye.make_fragment_like(moye.Layout((1, 2, 3)), x.dtype)
        for i in range(8):
            a[i] = x[i]
        for i in range(12):
            b[i] = y[i]
        for i in range(6):
            d[i] = 0.0
        dot_with(atom, d, a, b)
        for i in range(6):
            out[i] = d[i]

    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(8).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    out = np.full(6, np.nan, np.float32)
    k[1, 1](out, x, y, moye.MMAAtom(moye.UniversalFMA(moye.Float32, moye.Float32,
                                                       moye.Float32)))
    A = x.astype(np.float64).reshape(2, 4, order="F")
    B = y.astype(np.float64).reshape(3, 4, order="F")
    np.testing.assert_allclose(out.reshape(2, 3, order="F"), A @ B.T, rtol=1e-5, atol=1e-6)


def test_bad_uses_of_func_are_clear_errors():
    with pytest.raises(moye.MoyeTypeError, match="moye.func decorates a Python function"):
        moye.func(3)

    def gen():
        yield 1
    with pytest.raises(moye.MoyeTypeError, match="generator"):
        moye.func(gen)
    assert moye.func(h.clamp_low) is h.clamp_low


def test_lambdas_run_as_they_are():
    double = moye.func(lambda v: v * 2.0)

    @moye.kernel
    def k(out, x):
        out[0] = double(x[0])
    out = np.full(1, np.nan, np.float32)
    k[1, 1](out, np.array([1.25], np.float32))
    assert out[0] == 2.5


@pytest.fixture
def modules(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    written = []

    def write(name, text):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
        for n in written + [name]:
            sys.modules.pop(n, None)
        written.append(name)
        importlib.invalidate_caches()
        return importlib.import_module(name)
    yield write
    for name in written:
        sys.modules.pop(name, None)


HELPER = """
import moye

@moye.func
def bump(v):
    if v < 0:
        v = {fix}
    return v
"""

KERNEL = """
import moye
import func_helper

@moye.kernel
def uses(out, x):
    out[moye.thread_idx.x] = func_helper.bump(x[moye.thread_idx.x])
"""


def test_editing_a_helper_changes_the_kernels_disk_key(modules):
    modules("func_helper", HELPER.format(fix="0.0"))
    first = modules("func_kernel", KERNEL)
    x, out = np.array([-1.0, 2.0], np.float32), np.full(2, np.nan, np.float32)
    binding = first.uses.trace(out, x, block=2)[1]
    key = first.uses.specialization_text(binding, (2, 1, 1))
    first.uses[1, 2](out, x)
    assert out.tolist() == [0.0, 2.0]

    modules("func_helper", HELPER.format(fix="0.0"))          # unchanged: the same key
    same = modules("func_kernel", KERNEL)
    assert same.uses.specialization_text(binding, (2, 1, 1)) == key

    modules("func_helper", HELPER.format(fix="-v"))           # only the helper changes
    edited = modules("func_kernel", KERNEL)
    assert edited.uses.specialization_text(binding, (2, 1, 1)) != key
    edited.uses[1, 2](out, x)
    assert out.tolist() == [1.0, 2.0]


def test_a_source_edited_after_import_is_refused(modules):
    """The rewrite reads a function's source when it first traces: a file
    edited since its module was imported is refused, not traced (the
    edited body would run with the old module's names), until it is
    imported again; edits that leave the function's code be are fine."""
    from pathlib import Path
    from moye.errors import KernelError
    helper = modules("func_helper", HELPER.format(fix="0.0"))
    kernel = modules("func_kernel", KERNEL)
    x, out = np.array([-1.0, 2.0], np.float32), np.full(2, np.nan, np.float32)
    Path(helper.__file__).write_text(textwrap.dedent(HELPER.format(fix="-v")))
    with pytest.raises(KernelError, match=r"func_helper.py changed after Python compiled this "
                                          r"moye.func.*Reload its module"):
        kernel.uses[1, 2](out, x)
    Path(helper.__file__).write_text(textwrap.dedent(HELPER.format(fix="0.0")) + "OTHER = 1\n")
    kernel.uses[1, 2](out, x)                   # another line added after it: the same code
    assert out.tolist() == [0.0, 2.0]
    # the kernel's own file, its lines moved: refused too
    kernel = modules("func_kernel", KERNEL)
    Path(kernel.__file__).write_text("\n\n" + textwrap.dedent(KERNEL))
    with pytest.raises(KernelError, match="func_kernel.py changed after Python compiled this "
                                          "kernel"):
        kernel.uses[1, 2](out, x)
    kernel = modules("func_kernel", "\n\n" + KERNEL)          # imported again: it runs
    out[:] = np.nan
    kernel.uses[1, 2](out, x)
    assert out.tolist() == [0.0, 2.0]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_calling_helpers_compile_with_nvrtc(arch):
    pytest.importorskip("cuda.bindings")
    x, out = np.ones(32, np.float32), np.zeros((5, 32), np.float32)
    kernel = calls_helpers.trace(out, x, 3, block=32)[0]
    assert BACKENDS["cuda"].compile_only(kernel, (32, 1, 1), arch)

"""Tracing: the control-flow rewrite, IR structure, generated C++ and errors."""
import re

import numpy as np
import pytest

import moye
from moye import Layout
from moye import ir
from moye.compiler.tracer import KernelError

from . import kernels_for_tests as K


def vec(n=32, dtype=np.float32):
    return np.arange(1, n + 1, dtype=dtype)


def stmts(kernel, kind):
    out = []

    def walk(body):
        for s in body:
            if isinstance(s, kind):
                out.append(s)
            for child in ir.children(s):
                walk(child)
    walk(kernel.body)
    return out


def ops(kernel, name):
    return [s for s in stmts(kernel, ir.Instr) if s.op == name]


def test_dynamic_range_becomes_a_loop_with_a_carried_scalar():
    k, _, _ = K.scale_loop.trace(vec(1), vec(), 8)
    loops = stmts(k, ir.For)
    assert len(loops) == 1
    body_writes = [s for s in loops[0].body if isinstance(s, ir.Instr) and s.op == "write"]
    assert len(body_writes) == 1 and body_writes[0].args[0].type is moye.Float32
    src = K.scale_loop.cuda_source(vec(1), vec(), 8)
    assert "for (int i_" in src and "acc_" in src


def test_static_range_is_traced_once_as_a_loop_nvrtc_unrolls():
    k, _, _ = K.static_unroll.trace(vec(1), vec())
    (loop,) = stmts(k, ir.For)
    assert (loop.start, loop.stop, loop.step, loop.unroll) == (0, 4, 1, "full")
    assert len(ops(k, "load")) == 1


def test_range_constexpr_unrolls_while_tracing():
    k, _, _ = K.static_unroll_constexpr.trace(vec(1), vec())
    assert not stmts(k, ir.For)
    assert len(ops(k, "load")) == 4


def test_swapping_arrays_in_a_dynamic_loop_carries_pointers():
    k, _, _ = K.swap_buffers.trace(vec(), vec(), 5, block=32)
    decls = [s for s in stmts(k, ir.Instr) if s.op == "decl"]
    assert [d.args[0].type.space for d in decls] == ["shared", "shared"]
    loop = stmts(k, ir.For)[0]
    writes = [s for s in loop.body if isinstance(s, ir.Instr) and s.op == "write"]
    assert len(writes) == 2


def test_dynamic_if_merges_a_value():
    k, _, _ = K.branch.trace(vec(), vec(), block=32)
    (branch,) = stmts(k, ir.If)
    assert any(s.op == "write" for s in branch.then if isinstance(s, ir.Instr))
    assert any(s.op == "write" for s in branch.orelse if isinstance(s, ir.Instr))
    src = K.branch.cuda_source(vec(), vec(), block=32)
    assert "} else {" in src


def test_dynamic_while():
    k, _, _ = K.while_loop.trace(np.zeros(1, np.int32), 10)
    (w,) = stmts(k, ir.While)
    assert w.cond is not None and w.cond_body


def test_dynamic_and_in_a_condition():
    """`t < n and t % 2 == 0` branches on the conjunction of both tests,
    and the kernel copies exactly the even threads below n."""
    k, _, _ = K.and_or.trace(vec(), vec(), 7, block=32)
    (branch,) = stmts(k, ir.If)
    (conj,) = [s for s in ops(k, "and") if s.result is branch.cond]
    tests = {s.result: s.op for s in stmts(k, ir.Instr)}
    assert sorted(tests[a] for a in conj.args) == ["eq", "lt"]
    x = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    out = np.full(32, np.nan, np.float32)
    K.and_or[1, 32](out, x, 7, backend="cpu")
    t = np.arange(32)
    copied = (t < 7) & (t % 2 == 0)
    np.testing.assert_array_equal(out[copied], x[copied])
    assert np.isnan(out[~copied]).all()


def test_copy_shape_mismatch_names_the_line_and_shapes():
    with pytest.raises(KernelError, match=r"(?s)moye.copyto\(a, b\).*dst has shape \(4,8\) but "
                                          r"src has shape \(8,4\)"):
        K.bad_shape.trace(np.zeros((4, 8), np.float32), np.zeros((8, 4), np.float32))


def test_dynamic_index_into_a_register_fragment_is_an_error():
    with pytest.raises(KernelError, match="register fragment"):
        K.dynamic_fragment_index.trace(vec(1), vec(), block=4)


def test_each_instruction_names_its_kernel_line():
    """An instruction emitted deep inside moye (a load, an add) records the
    innermost frame of user code: the kernel's line that asked for it."""
    kernel = K.branch.trace(vec(), vec(), block=32)[0]
    source = open(K.__file__).read().splitlines()
    first = K.branch.fn.__code__.co_firstlineno
    for kind, text in ((ir.Mul, "v = x[t] * 2.0"), (ir.Add, "v = x[t] + 1.0"),
                       (ir.Load, "v = x[t] * 2.0"), (ir.Store, "out[t] = v")):
        line = next(n for n in range(first, len(source)) if source[n - 1].strip() == text)
        loc = stmts(kernel, kind)[0].loc
        assert (loc.file, loc.line, loc.text) == (K.__file__, line, text)


def test_generated_source_has_line_comments_and_no_dynamic_register_index():
    from moye.examples import matmul_smem as mm
    A = np.asfortranarray(np.ones((256, 64), np.float32))
    C = np.asfortranarray(np.ones((256, 256), np.float32))
    t = Layout((32, 8))
    src = mm.matmul_kernel.cuda_source(A, Layout((128, 8)), t, A, Layout((128, 8)), t, C,
                                       Layout((128, 128)), t, block=256)
    assert "// matmul_smem.py:" in src
    assert not register_indices_outside_unrolled_loops(src)


def register_indices_outside_unrolled_loops(src):
    """The lines of `src` that index a register array with a variable outside
    every `#pragma unroll` loop (inside one, NVRTC makes the index constant)."""
    import re
    bad, opened, depth, pragma = [], [], 0, False
    for line in src.splitlines():
        text = line.strip()
        if text.startswith("for (") and pragma:
            opened.append(depth)
        pragma = text == "#pragma unroll"
        if not opened and any(not i.isdigit() for i in re.findall(r"rf\d+\[([^\]]+)\]", line)):
            bad.append(line)
        depth += line.count("{") - line.count("}")
        while opened and depth <= opened[-1]:
            opened.pop()
    return bad


def test_recast_keeps_offsets_in_elements_not_bits():
    """A recast of a global row to 16-byte words divides the element offset by 8;
    going through bits (offset * 16 / 128) would overflow 32-bit index arithmetic
    at 2**27 half-precision elements, reading the wrong memory on a GPU."""
    from moye import UInt128, copyto, make_fragment_like, recast, tile

    @moye.kernel
    def rows16(y, x, row):
        t = moye.thread_idx.x
        r = make_fragment_like(Layout(8), x.dtype)
        copyto(recast(r, UInt128), recast(tile(x[row, None], (8,), (t,)), UInt128))
        copyto(recast(tile(y[row, None], (8,), (t,)), UInt128), recast(r, UInt128))

    x = np.arange(4 * 64, dtype=np.float16).reshape(4, 64)
    y = np.full_like(x, np.nan)
    rows16[1, 8](y, x, 2)
    np.testing.assert_array_equal(y[2], x[2])
    assert np.isnan(y[[0, 1, 3]]).all()
    src = rows16.cuda_source(y, x, 2, block=8)
    assert not re.search(r"\* 16;", src) and not re.search(r"/ 128;", src)


@moye.kernel
def index_a_number_kernel(out, x):
    t = moye.thread_idx.x
    out[t] = x[t]


def test_a_number_passed_for_an_array_is_refused_when_indexed():
    with pytest.raises(moye.KernelError, match=r"test_trace\.py:\d+: out\[t\] = x\[t\]\n  "
                       r"KernelError: a Float32 value is a number, not an array: it has no "
                       r"elements to index with an Int32 value"):
        index_a_number_kernel[1, 4](np.zeros(4, np.float32), np.float32(3))

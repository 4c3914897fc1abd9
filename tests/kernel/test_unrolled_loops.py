"""Loops stay loops (issue 17, outcome 1): a `for` over a static range is
traced once with a symbolic variable and emitted as an IR For under
`#pragma unroll`; a body that needs the variable as a Python int, changes
Python objects or leaves carried names in a state the code after the loop
cannot use falls back to unrolling while tracing, with an IR comment saying
why. Every result is checked on the CPU backend against NumPy in float64."""
import re
import time

import numpy as np
import pytest

import moye
from moye import Float32, Layout, MMAAtom, UniversalFMA, gemm, make_fragment_like, size
from moye.errors import MoyeTypeError
from moye import ir
from moye.compiler.control import FULL_UNROLL_LIMIT
from moye.compiler.frontend import BACKENDS
from moye.compiler.tracer import KernelError

RNG = np.random.default_rng(17)
ARCHS = ["sm_80", "sm_90a"]


def rand(*shape):
    """Random non-zero float32 values in [0.5, 1.5) with random signs."""
    x = RNG.uniform(0.5, 1.5, shape) * RNG.choice([-1.0, 1.0], shape)
    return x.astype(np.float32)


def poisoned(*shape):
    return np.full(shape, np.nan, np.float32)


def run(kern, *args):
    kern[1, 1](*args, backend="cpu")


def assert_close(got, want):
    """Every element of `got` equals the float64 reference `want` (NaN where
    the kernel must not write), to float32 rounding."""
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=2e-6,
                               atol=1e-6)


def walk(body, depth=0):
    """(statement, depth in For loops) for every statement of an IR body."""
    for s in body:
        yield s, depth
        for child in ir.children(s):
            yield from walk(child, depth + isinstance(s, ir.For))


def fors(kernel):
    return [s for s, _ in walk(kernel.body) if isinstance(s, ir.For)]


def ops(kernel, name):
    return [s for s, _ in walk(kernel.body) if isinstance(s, ir.Instr) and s.op == name]


def comments(kernel):
    return [s.attrs["text"] for s in ops(kernel, "comment")
            if s.attrs["text"].startswith("unrolled while tracing")]


def trace(kern, *args):
    return kern.trace(*args)[0]


def fell_back(kern, *args, why):
    """The kernel's one loop unrolled while tracing, the comment saying `why`."""
    k = trace(kern, *args)
    assert not fors(k), ir.format_kernel(k)
    (text,) = comments(k)
    assert re.search(why, text), text
    return k


# -- 1. a static range is one loop, traced once --------------------------------------

@moye.kernel
def scale_shift(out, x):
    for k in range(8):
        out[k] = x[k] * 3.0 - 1.0


@moye.kernel
def fragment_round_trip(out, x):
    r = make_fragment_like(Layout(8), Float32)
    for k in range(8):
        r[k] = x[k] * 2.0
    for k in range(8):
        out[k] = r[7 - k] + x[k]


def test_static_range_is_one_full_unrolled_for_traced_once():
    x, out = rand(8), poisoned(8)
    k = trace(scale_shift, out, x)
    (loop,) = fors(k)
    assert (loop.start, loop.stop, loop.step, loop.unroll) == (0, 8, 1, "full")
    assert len(ops(k, "load")) == 1 and len(ops(k, "store")) == 1
    assert not comments(k)
    assert "for $i" in scale_shift.ir(out, x) and "unroll=full" in scale_shift.ir(out, x)
    src = scale_shift.cuda_source(out, x)
    assert re.search(r"#pragma unroll\n\s*for \(int i_\d+ = 0; i_\d+ < 8; i_\d+ \+= 1\)", src)
    run(scale_shift, out, x)
    assert_close(out, x.astype(np.float64) * 3.0 - 1.0)


def test_register_fragment_indexed_by_the_loop_variable_stays_a_register_array():
    x, out = rand(8), poisoned(8)
    k = trace(fragment_round_trip, out, x)
    assert [f.unroll for f in fors(k)] == ["full", "full"]
    (frag,) = [a for a in k.arrays if a.space == "local"]
    assert frag.size == 8
    # the fragment is read and written in the loops, by index, once each
    assert [s.args[0] for s in ops(k, "store")].count(frag) == 1
    assert [s.args[0] for s in ops(k, "load")].count(frag) == 1
    src = fragment_round_trip.cuda_source(out, x)
    assert re.search(r"float rf\d+\[8\];", src)
    # a register index that is not a constant appears only inside #pragma unroll loops
    from .test_trace import register_indices_outside_unrolled_loops
    assert re.search(r"rf\d+\[[a-z]", src) and not register_indices_outside_unrolled_loops(src)
    run(fragment_round_trip, out, x)
    x64 = x.astype(np.float64)
    assert_close(out, x64[::-1] * 2.0 + x64)


@pytest.mark.parametrize("arch", ARCHS)
def test_loop_over_a_register_fragment_compiles(arch):
    x, out = rand(8), poisoned(8)
    module = BACKENDS["cuda"].compile_only(trace(fragment_round_trip, out, x), (1, 1, 1), arch)
    assert module.cubin[:4] == b"\x7fELF"


# -- 2. falling back to unrolling while tracing ---------------------------------------

COEFFS = [1.5, -2.0, 3.0, 0.5]


@moye.kernel
def list_indexed(out, x):
    c = [1.5, -2.0, 3.0, 0.5]
    for k in range(4):
        out[k] = x[k] * c[k]


def test_python_list_indexed_by_the_variable_falls_back():
    x, out = rand(4), poisoned(4)
    k = fell_back(list_indexed, out, x, why=r"KernelError: .*static int")
    assert len(ops(k, "load")) == 4
    assert "comment() text='unrolled while tracing: KernelError" in list_indexed.ir(out, x)
    run(list_indexed, out, x)
    assert_close(out, x.astype(np.float64) * COEFFS)


@moye.kernel
def list_append(out, x):
    vals = []
    for k in range(4):
        vals.append(x[k] * 2.0)
    out[0] = vals[0] + vals[3]
    out[1] = len(vals)


SEEN = []


def record_iterations(out, x):
    for k in range(5):
        SEEN.append(k)
        out[k] = x[k] + 1.0


PYTHON_OBJECTS = r"the body changes Python objects"


def test_list_append_falls_back():
    x, out = rand(4), poisoned(2)
    fell_back(list_append, out, x, why=PYTHON_OBJECTS)
    run(list_append, out, x)
    x64 = x.astype(np.float64)
    assert_close(out, [2.0 * (x64[0] + x64[3]), 4.0])


def test_python_objects_end_as_unrolling_leaves_them():
    SEEN.clear()
    kern = moye.kernel(record_iterations)           # a fresh kernel: no cached trace
    x, out = rand(5), poisoned(5)
    fell_back(kern, out, x, why=PYTHON_OBJECTS)
    assert SEEN == [0, 1, 2, 3, 4]                  # not one symbolic item
    run(kern, out, x)
    assert_close(out, x.astype(np.float64) + 1.0)


@moye.kernel
def dict_update(out, x):
    sums = {"total": 0.0}
    for k in range(4):
        sums.update(total=sums["total"] + x[k])
    out[0] = sums["total"]


def test_dict_update_falls_back():
    x, out = rand(4), poisoned(1)
    fell_back(dict_update, out, x, why=PYTHON_OBJECTS)
    run(dict_update, out, x)
    assert_close(out, [x.astype(np.float64).sum()])


class Tally:
    """A plain object a kernel changes while tracing."""

    def __init__(self):
        self.total, self.count = 0.0, 0


TALLY = Tally()


@moye.kernel
def attribute_update(out, x):
    t = Tally()
    for k in range(5):
        t.total = t.total + x[k]
        t.count = t.count + 1
    out[0] = t.total
    out[1] = t.count


def count_into_tally(out, x):
    for k in range(3):
        TALLY.count = TALLY.count + 1
        out[k] = x[k] * 2.0


def test_attribute_assignment_falls_back():
    x, out = rand(5), poisoned(2)
    fell_back(attribute_update, out, x, why=PYTHON_OBJECTS)
    run(attribute_update, out, x)
    assert_close(out, [x.astype(np.float64).sum(), 5.0])


def test_an_attribute_ends_as_unrolling_leaves_it():
    TALLY.count = 0
    kern = moye.kernel(count_into_tally)
    x, out = rand(3), poisoned(3)
    fell_back(kern, out, x, why=PYTHON_OBJECTS)
    assert TALLY.count == 3 and isinstance(TALLY.count, int)
    run(kern, out, x)
    assert_close(out, x.astype(np.float64) * 2.0)


@moye.kernel
def static_count_used_after(out, x):
    n = 0
    for k in range(4):
        out[k] = x[k]
        n = n + 2
    r = make_fragment_like(Layout(n), Float32)          # n must be a static int here
    r[n - 1] = x[n]
    out[n] = r[n - 1]


def test_static_int_carried_and_used_after_falls_back():
    x, out = rand(9), poisoned(9)
    fell_back(static_count_used_after, out, x,
              why=r"'n' keeps a static value through the loop and is used after it")
    run(static_count_used_after, out, x)
    want = np.full(9, np.nan)
    want[:4], want[8] = x[:4], x[8]
    assert_close(out, want)


@moye.kernel
def first_assigned_in_body(out, x):
    for k in range(4):
        last = x[k] * 3.0
    out[0] = last


def test_name_first_assigned_in_the_body_and_used_after_falls_back():
    x, out = rand(4), poisoned(1)
    fell_back(first_assigned_in_body, out, x,
              why=r"'last' is first assigned in the body and used after the loop")
    run(first_assigned_in_body, out, x)
    assert_close(out, [3.0 * np.float64(x[3])])


@moye.kernel
def int_becomes_float(out, x):
    s = 0
    for k in range(4):
        s = s + x[k]
    out[0] = s


def test_carried_value_changing_type_falls_back():
    x, out = rand(4), poisoned(1)
    fell_back(int_becomes_float, out, x, why=r"'s' changes type from Int32 to Float32")
    run(int_becomes_float, out, x)
    assert_close(out, [x.astype(np.float64).sum()])


@moye.kernel
def breaks_at_3(out, x):
    s = 0.0
    for k in range(8):
        if k == 3:
            break
        s = s + x[k]
    out[0] = s


@moye.kernel
def skips_2(out, x):
    s = 0.0
    for k in range(5):
        if k == 2:
            continue
        s = s + x[k]
    out[0] = s


def jumps(kernel):
    return [s.kind for s, _ in walk(kernel.body) if isinstance(s, ir.Jump)]


def test_break_stays_in_the_loop():
    """A `break` on the loop variable is the C++ loop's own."""
    x, out = rand(8), poisoned(1)
    k = trace(breaks_at_3, out, x)
    assert len(fors(k)) == 1 and not comments(k) and jumps(k) == ["break"]
    run(breaks_at_3, out, x)
    assert_close(out, [x[:3].astype(np.float64).sum()])


def test_continue_stays_in_the_loop():
    x, out = rand(5), poisoned(1)
    k = trace(skips_2, out, x)
    assert len(fors(k)) == 1 and not comments(k) and jumps(k) == ["continue"]
    run(skips_2, out, x)
    x64 = x.astype(np.float64)
    assert_close(out, [x64.sum() - x64[2]])


@moye.kernel
def layout_or_none(out, x):
    for k in range(4):
        if k % 2 == 0:
            tile = Layout(3)
        else:
            tile = None
        if tile is None:
            out[k] = x[k]
        else:
            out[k] = x[k] * size(tile)


def test_static_branch_assigning_non_numbers_falls_back():
    x, out = rand(4), poisoned(4)
    fell_back(layout_or_none, out, x, why=r"'tile' holds the static value")
    run(layout_or_none, out, x)
    assert_close(out, x.astype(np.float64) * [3.0, 1.0, 3.0, 1.0])


@moye.kernel
def ping_pong(out, x):
    a = make_fragment_like(Layout(4), Float32)
    b = make_fragment_like(Layout(4), Float32)
    for i in range(4):
        a[i] = x[i]
    for k in range(3):
        for i in range(4):
            b[i] = a[i] * 2.0 + x[4 + k]
        a, b = b, a
    for i in range(4):
        out[i] = a[i]


def test_register_fragments_swapped_in_the_loop_fall_back():
    x, out = rand(7), poisoned(4)
    k = trace(ping_pong, out, x)
    # the swap loop unrolled while tracing; the loops over i stay loops (1 + 3 + 1)
    assert [f.stop for f in fors(k)] == [4] * 5
    assert [d for s, d in walk(k.body) if isinstance(s, ir.For)] == [0] * 5
    run(ping_pong, out, x)
    x64 = x.astype(np.float64)
    want = x64[:4]
    for j in range(3):
        want = want * 2.0 + x64[4 + j]
    assert_close(out, want)



def test_register_fragment_swap_says_why_in_the_ir():
    k = trace(ping_pong, poisoned(4), rand(7))
    (text,) = comments(k)
    assert "'a' is a register fragment reassigned in the body" in text

# -- 3. nested loops --------------------------------------------------------------------

@moye.kernel
def nested(out, x):
    for i in range(3):
        for j in range(4):
            out[i * 4 + j] = x[i * 4 + j] * 2.0 + i


@moye.kernel
def inner_needs_ints(out, x):
    c = [1.5, -2.0, 3.0, 0.5]
    for i in range(3):
        for j in range(4):
            out[i * 4 + j] = x[i * 4 + j] * c[j]


@moye.kernel
def outer_needs_ints(out, x):
    c = [1.5, -2.0, 3.0]
    for i in range(3):
        w = c[i]
        for j in range(4):
            out[i * 4 + j] = x[i * 4 + j] * w


@moye.kernel
def outer_needs_ints_in_inner_body(out, x):
    c = [1.5, -2.0, 3.0]
    for i in range(3):
        for j in range(4):
            out[i * 4 + j] = x[i * 4 + j] * c[i]


def test_nested_loops_both_traced_once():
    x, out = rand(12), poisoned(12)
    k = trace(nested, out, x)
    assert [(f.stop, f.unroll) for f in fors(k)] == [(3, "full"), (4, "full")]
    assert [d for s, d in walk(k.body) if isinstance(s, ir.Instr) and s.op == "load"] == [2]
    run(nested, out, x)
    assert_close(out, x.astype(np.float64) * 2.0 + np.repeat(np.arange(3), 4))


def test_inner_loop_falls_back_while_the_outer_stays():
    x, out = rand(12), poisoned(12)
    k = trace(inner_needs_ints, out, x)
    (outer,) = fors(k)
    assert outer.stop == 3 and outer.unroll == "full"
    assert len(comments(k)) == 1 and len(ops(k, "load")) == 4
    assert [d for s, d in walk(k.body) if isinstance(s, ir.Instr) and s.op == "load"] == [1] * 4
    run(inner_needs_ints, out, x)
    assert_close(out, x.astype(np.float64) * np.tile(COEFFS, 3))


def test_outer_loop_falls_back_while_the_inner_stays():
    x, out = rand(12), poisoned(12)
    k = trace(outer_needs_ints, out, x)
    assert [(f.stop, f.unroll) for f in fors(k)] == [(4, "full")] * 3
    assert [d for s, d in walk(k.body) if isinstance(s, ir.Instr) and s.op == "load"] == [1] * 3
    assert len(comments(k)) == 1
    run(outer_needs_ints, out, x)
    assert_close(out, x.astype(np.float64) * np.repeat(COEFFS[:3], 4))


@moye.kernel
def triangle(out, x):
    r = make_fragment_like(Layout(4), Float32)
    for j in range(4):
        r[j] = x[j]
    for i in range(4):
        s = 0.0
        for j in range(i):
            s = s + r[j]
        out[i] = s


def test_inner_bound_from_the_outer_variable_unrolls_the_outer_loop():
    # range(i) of a symbolic i is a run-time loop, where r[j] cannot be a register:
    # the outer loop unrolls while tracing and the inner ones (2 and 3 trips) stay loops
    x, out = rand(4), poisoned(4)
    k = trace(triangle, out, x)
    assert [(f.stop, f.unroll) for f in fors(k)] == [(4, "full"), (2, "full"), (3, "full")]
    (text,) = comments(k)
    assert "register fragment is indexed with a dynamic value" in text
    run(triangle, out, x)
    assert_close(out, np.concatenate([[0.0], np.cumsum(x.astype(np.float64))[:3]]))


def test_outer_variable_needed_in_the_inner_body_unrolls_the_outer_loop_only_results():
    x, out = rand(12), poisoned(12)
    run(outer_needs_ints_in_inner_body, out, x)
    assert_close(out, x.astype(np.float64) * np.repeat(COEFFS[:3], 4))


def test_outer_variable_needed_in_the_inner_body_unrolls_the_outer_loop_only():
    k = trace(outer_needs_ints_in_inner_body, poisoned(12), rand(12))
    assert [(f.stop, f.unroll) for f in fors(k)] == [(4, "full")] * 3
    assert len(comments(k)) == 1


# -- 4. the loop variable after the loop ---------------------------------------------------

@moye.kernel
def variable_after(out, x):
    for k in range(2, 11, 3):
        out[k] = x[k]
    out[0] = k


def test_loop_variable_after_the_loop_is_its_last_value():
    x, out = rand(11), poisoned(11)
    (loop,) = fors(trace(variable_after, out, x))
    assert (loop.start, loop.stop, loop.step) == (2, 11, 3)
    run(variable_after, out, x)
    want = np.full(11, np.nan)
    want[[2, 5, 8]] = x[[2, 5, 8]]
    want[0] = 8.0
    assert_close(out, want)


@moye.kernel
def reversed_from_registers(out, x):
    r = make_fragment_like(Layout(5), Float32)
    for k in range(5):
        r[k] = x[k]
    for k in range(4, -1, -1):
        out[4 - k] = r[k]
    out[5] = k


def test_negative_step_loop_reads_registers_and_leaves_its_last_value():
    x, out = rand(5), poisoned(6)
    k = trace(reversed_from_registers, out, x)
    assert [(f.start, f.stop, f.step, f.unroll) for f in fors(k)] == \
        [(0, 5, 1, "full"), (4, -1, -1, "full")]
    run(reversed_from_registers, out, x)
    assert_close(out, np.append(x[::-1].astype(np.float64), 0.0))


# -- 5. reductions ---------------------------------------------------------------------------

@moye.kernel
def dot(out, x, y):
    acc = 0.0
    for k in range(16):
        acc = acc + x[k] * y[k]
    out[0] = acc


def test_reduction_stays_a_loop_and_is_right():
    x, y, out = rand(16), rand(16), poisoned(1)
    k = trace(dot, out, x, y)
    (loop,) = fors(k)
    assert loop.unroll == "full" and len(ops(k, "load")) == 2 and not comments(k)
    run(dot, out, x, y)
    assert_close(out, [x.astype(np.float64) @ y.astype(np.float64)])


@moye.kernel
def even_sum(out, x):
    s = 0.0
    for k in range(6):
        if k % 2 == 0:
            s = s + x[k]
    out[0] = s


@moye.kernel
def clamped_register_reads(out, x):
    r = make_fragment_like(Layout(3), Float32)
    for k in range(3):
        r[k] = x[k]
    for k in range(6):
        out[k] = r[min(k, 2)] + r[max(k - 3, 0)]


@moye.kernel
def counter_indexes_registers(out, x):
    r = make_fragment_like(Layout(4), Float32)
    j = 0
    for k in range(4):
        r[j] = x[k] * 2.0
        j = j + 1
    for k in range(4):
        out[k] = r[k]


def test_reduction_under_a_dynamic_if_on_the_variable_stays_a_loop():
    x, out = rand(6), poisoned(1)
    k = trace(even_sum, out, x)
    assert [f.unroll for f in fors(k)] == ["full"] and not comments(k)
    run(even_sum, out, x)
    assert_close(out, [x[::2].astype(np.float64).sum()])


def test_register_indices_through_min_and_max_stay_a_loop():
    x, out = rand(3), poisoned(6)
    k = trace(clamped_register_reads, out, x)
    assert [f.stop for f in fors(k)] == [3, 6] and not comments(k)
    run(clamped_register_reads, out, x)
    x64 = x.astype(np.float64)
    assert_close(out, [x64[min(k, 2)] + x64[max(k - 3, 0)] for k in range(6)])


def test_register_index_from_a_carried_counter_falls_back_and_is_right():
    x, out = rand(4), poisoned(4)
    k = trace(counter_indexes_registers, out, x)
    assert [f.stop for f in fors(k)] == [4]              # the second loop only
    (text,) = comments(k)
    assert "register fragment is indexed with a dynamic value" in text
    run(counter_indexes_registers, out, x)
    assert_close(out, x.astype(np.float64) * 2.0)


# -- 6. bounds ---------------------------------------------------------------------------------

@moye.kernel
def shifted_read(out, x):
    s = moye.shared_array(Float32, Layout(8))
    for k in range(8):
        s[k] = x[k]
    for k in range(8):
        out[k] = s[k + 1]


@moye.kernel
def shifted_read_forced(out, x):
    s = moye.shared_array(Float32, Layout(8))
    for k in range(8):
        s[k] = x[k]
    for k in moye.range(8, unroll=True):
        out[k] = s[k + 1]


@moye.kernel
def shifted_read_constexpr(out, x):
    s = moye.shared_array(Float32, Layout(8))
    for k in range(8):
        s[k] = x[k]
    for k in moye.range_constexpr(8):
        out[k] = s[k + 1]


@moye.kernel
def shifted_register_read_forced(out, x):
    r = make_fragment_like(Layout(8), Float32)
    for k in range(8):
        r[k] = x[k]
    for k in moye.range(8, unroll=True):
        out[k] = r[k + 1]


@moye.kernel
def guarded_shifted_read(out, x):
    r = make_fragment_like(Layout(8), Float32)
    s = moye.shared_array(Float32, Layout(8))
    for k in range(8):
        r[k] = x[k]
        s[k] = x[k] * 2.0
    for k in range(8):
        if k < 8 - 1:
            out[k] = r[k + 1] + s[k + 1]
        else:
            out[k] = 0.5


@moye.kernel
def register_index_from_thread(out, x):
    r = make_fragment_like(Layout(4), Float32)
    for k in range(4):
        r[k] = x[k]
    for k in range(4):
        out[k] = r[moye.thread_idx.x]


@pytest.mark.parametrize("kern", [shifted_read, shifted_read_forced, shifted_read_constexpr,
                                  shifted_register_read_forced],
                         ids=["falls-back", "forced", "constexpr", "register-forced"])
def test_index_out_of_range_in_one_iteration_is_a_bounds_error(kern):
    x, out = rand(8), poisoned(8)
    with pytest.raises(KernelError, match=r"out\[k\] = [rs]\[k \+ 1\]\n  BoundsError: .*\b8\b"):
        trace(kern, out, x)


def test_index_out_of_range_only_where_a_dynamic_if_excludes_it_stays_a_loop():
    x, out = rand(8), poisoned(8)
    k = trace(guarded_shifted_read, out, x)
    assert [f.unroll for f in fors(k)] == ["full", "full"] and not comments(k)
    run(guarded_shifted_read, out, x)
    x64 = x.astype(np.float64)
    assert_close(out, np.append(x64[1:] * 3.0, 0.5))


def test_dynamic_register_index_names_the_register_fragment():
    x, out = rand(4), poisoned(4)
    with pytest.raises(KernelError, match=r"register fragment is indexed with a dynamic value"):
        trace(register_index_from_thread, out, x)


# -- 7. forcing either way, and bad inputs ------------------------------------------------------

@moye.kernel
def forced_needs_ints(out, x):
    c = [1.5, -2.0, 3.0, 0.5]
    for k in moye.range(4, unroll=True):
        out[k] = x[k] * c[k]


@moye.kernel
def constexpr_sum(out, x):
    s = 0.0
    for k in moye.range_constexpr(1, 7, 2):
        s = s + x[k]
    out[0] = s


@moye.kernel
def forced_runtime_bound(out, x, n):
    for k in moye.range(n, unroll=True):
        out[k] = x[k]


@moye.kernel
def constexpr_runtime_bound(out, x, n):
    for k in moye.range_constexpr(n):
        out[k] = x[k]


@moye.kernel
def forced_traced_once(out, x):
    for k in moye.range(4, unroll=True):
        out[k] = x[k] - 0.25


def test_forced_loop_that_needs_ints_is_an_error_not_a_fall_back():
    x, out = rand(4), poisoned(4)
    with pytest.raises(KernelError, match=r"out\[k\] = x\[k\] \* c\[k\]\n.*static int"):
        trace(forced_needs_ints, out, x)


def test_forced_loop_is_traced_once():
    x, out = rand(4), poisoned(4)
    k = trace(forced_traced_once, out, x)
    assert [(f.stop, f.unroll) for f in fors(k)] == [(4, "full")]
    run(forced_traced_once, out, x)
    assert_close(out, x.astype(np.float64) - 0.25)


def test_range_constexpr_unrolls_while_tracing():
    x, out = rand(7), poisoned(1)
    k = trace(constexpr_sum, out, x)
    assert not fors(k) and not comments(k) and len(ops(k, "load")) == 3
    run(constexpr_sum, out, x)
    assert_close(out, [x[[1, 3, 5]].astype(np.float64).sum()])


@pytest.mark.parametrize("unroll", [0, -1, False, 2.5, "full", np.float32(4)])
def test_range_rejects_bad_unroll(unroll):
    with pytest.raises(MoyeTypeError, match=r"range\(unroll=.*unroll is None, True or a count"):
        moye.range(4, unroll=unroll)


@pytest.mark.parametrize("arg", [2.5, True, np.float64(3.0), "4", None])
def test_range_constexpr_rejects_non_ints(arg):
    with pytest.raises(MoyeTypeError, match=r"range_constexpr\(\) takes static ints, got"):
        moye.range_constexpr(arg)


def test_forced_loop_needs_static_bounds():
    x, out = rand(4), poisoned(4)
    with pytest.raises(KernelError, match=r"unroll=True\) needs static bounds"):
        trace(forced_runtime_bound, out, x, 4)


def test_range_constexpr_of_a_dynamic_value_is_an_error():
    x, out = rand(4), poisoned(4)
    with pytest.raises(KernelError, match=r"MoyeTypeError: range_constexpr\(\) takes static "
                                          r"ints, got"):
        trace(constexpr_runtime_bound, out, x, 4)


# -- 8. long ranges ----------------------------------------------------------------------------

@moye.kernel
def billion(out, x):
    for k in range(10**9):
        out[0] = out[0] + x[k % 4]


@moye.kernel
def billion_constexpr(out):
    for k in moye.range_constexpr(10**9):
        out[0] = 1.0


@moye.kernel
def billion_constant_sum(out):
    acc = 0.0
    for k in range(10**9):
        acc = acc + 1.0
    out[0] = acc


def test_a_billion_iterations_trace_fast_as_a_loop_nvrtc_does_not_unroll():
    x, out = rand(4), poisoned(1)
    start = time.perf_counter()
    k = trace(billion, out, x)
    assert time.perf_counter() - start < 2.0
    (loop,) = fors(k)
    assert loop.stop == 10**9 and loop.unroll is None and 10**9 > FULL_UNROLL_LIMIT
    assert "#pragma unroll" not in billion.cuda_source(out, x)


def test_a_billion_iterations_unrolled_while_tracing_is_an_error():
    with pytest.raises(KernelError, match=r"would unroll more than 65536 times"):
        trace(billion_constexpr, poisoned(1))


@pytest.mark.xfail(strict=True, reason="a float accumulator of constants counts as a static "
                   "value used after the loop, so the loop falls back to unrolling while "
                   "tracing, which a billion iterations cannot: KernelError (65536 unrolls)")
def test_a_billion_iterations_with_a_constant_float_accumulator_stay_a_loop():
    k = trace(billion_constant_sum, poisoned(1))
    (loop,) = fors(k)
    assert loop.stop == 10**9 and loop.unroll is None


# -- 9. the library gemm's k loop --------------------------------------------------------------

@moye.kernel
def thread_gemm(D, A, B, C, K: moye.Constexpr):
    a = make_fragment_like(Layout((1, 2, K)), Float32)
    b = make_fragment_like(Layout((1, 3, K)), Float32)
    c = make_fragment_like(Layout((1, 2, 3)), Float32)
    d = make_fragment_like(Layout((1, 2, 3)), Float32)
    for m in range(2):
        for k in range(K):
            a[0, m, k] = A[m, k]
    for n in range(3):
        for k in range(K):
            b[0, n, k] = B[n, k]
    for m in range(2):
        for n in range(3):
            c[0, m, n] = C[m, n]
    gemm(MMAAtom(UniversalFMA(Float32)), d, a, b, c)
    for m in range(2):
        for n in range(3):
            D[m, n] = d[0, m, n]


@pytest.mark.parametrize("K", [1, 2, 5])
def test_one_thread_gemm_k_loop_is_one_loop_after_the_first_k_block(K):
    """k-block 0 reads C, the others (one loop) D; each block loops over m and n."""
    A, B, C, D = rand(2, K), rand(3, K), rand(2, 3), poisoned(2, 3)
    k = trace(thread_gemm, D, A, B, C, K)
    k_loops = [f for f in fors(k) if f.start == 1]
    fmas = [s for s, _ in walk(k.body) if isinstance(s, ir.Instr) and s.op == "mul"
            and s.result.type is Float32]
    # a k-block is a loop over m (2) holding one over n (3): one multiply-add each
    mn_loops = [(f.stop, f.unroll) for f in fors(k) if f.start == 0 and
                any(s.op == "mul" and s.result.type is Float32 for s, _ in walk(f.body)
                    if isinstance(s, ir.Instr))]
    if K > 2:
        (loop,) = k_loops
        assert (loop.stop, loop.unroll) == (K, "full")
        assert len(fmas) == 2                   # k-block 0, then the loop's body once
        assert mn_loops == [(2, "full"), (3, "full")] * 2
    else:
        assert not k_loops and len(fmas) == K
        assert mn_loops == [(2, "full"), (3, "full")] * K
    assert not comments(k)
    want = C.astype(np.float64) + A.astype(np.float64) @ B.astype(np.float64).T
    run(thread_gemm, D, A, B, C, K)
    assert_close(D, want)


@moye.kernel
def library_loop_appending(out, x):
    from moye.array.engine import run_loop
    r = make_fragment_like(Layout(4), Float32)
    vals = []
    run_loop(r.engine, 0, 4, lambda k: vals.append(x[k]))
    out[0] = len(vals)
    out[1] = vals[-1]


def test_library_loop_whose_body_changes_python_objects_falls_back():
    x, out = rand(4), poisoned(2)
    run(library_loop_appending, out, x)
    assert_close(out, [4.0, x[3]])


@pytest.mark.parametrize("arch", ARCHS)
def test_one_thread_gemm_compiles(arch):
    A, B, C, D = rand(2, 5), rand(3, 5), rand(2, 3), poisoned(2, 3)
    module = BACKENDS["cuda"].compile_only(trace(thread_gemm, D, A, B, C, 5), (1, 1, 1), arch)
    assert module.cubin[:4] == b"\x7fELF"


# -- 10. a site that fell back ------------------------------------------------------------------

@moye.kernel
def fallback_in_constexpr_loop(out, x, scale: moye.Constexpr):
    c = [1.5, -2.0, 3.0]
    for i in moye.range_constexpr(2):
        for j in range(3):
            out[i * 3 + j] = x[i * 3 + j] * c[j] * scale


def test_a_site_that_fell_back_stays_static_in_the_trace_and_is_tried_again_in_the_next():
    x = rand(6)
    for scale in (2, 3):
        out = poisoned(6)
        k = trace(fallback_in_constexpr_loop, out, x, scale)
        assert len(comments(k)) == 1 and not fors(k)    # tried once, in the first i only
        assert len(ops(k, "load")) == 6
        run(fallback_in_constexpr_loop, out, x, scale)
        assert_close(out, x.astype(np.float64) * np.tile(COEFFS[:3], 2) * scale)

"""The rewrite's liveness (which names live across a loop or branch) is
computed on the kernel as written, once per statement, not on the partly
rewritten tree: a name assigned and read only inside an inner loop is not
live after the loops around it."""
import re
import time

import numpy as np

import moye
from moye import ir
from moye.compiler import rewrite

RNG = np.random.default_rng(1717)


def rand(*shape):
    x = RNG.uniform(0.5, 1.5, shape) * RNG.choice([-1.0, 1.0], shape)
    return x.astype(np.float32)


def fors(body):
    for s in body:
        if isinstance(s, ir.For):
            yield s
        for child in ir.children(s):
            yield from fors(child)


@moye.kernel
def row_sums(out, x):
    for r in range(2):
        total = 0.0
        for n in range(2):
            for c in range(2):
                p = x[4 * r + 2 * n + c] * 2.0      # assigned, then read, in the inner loop only
                out[4 * r + 2 * n + c] = p
                total = total + p
        out[8 + r] = total


def test_a_name_local_to_an_inner_loop_does_not_unroll_the_loops_around_it():
    x, out = rand(8), np.full(10, np.nan, np.float32)
    k = row_sums.trace(out, x)[0]
    assert len(list(fors(k.body))) == 3
    assert "unrolled while tracing" not in ir.format_kernel(k)
    row_sums[1, 1](out, x, backend="cpu")
    x64 = x.astype(np.float64) * 2.0
    np.testing.assert_allclose(out, np.concatenate([x64, x64.reshape(2, 4).sum(1)]), rtol=2e-6)


def _long_kernel(n):
    """Source of a kernel of `n` nested loop pairs, each pair followed by reads."""
    lines = ["def long_kernel(out, x):", "    acc = 0.0"]
    for i in range(n):
        lines += [f"    for i{i} in range(2):",
                  f"        for j{i} in range(2):",
                  f"            t{i} = x[i{i}] * x[j{i}]",
                  f"            acc = acc + t{i}",
                  f"    out[{i}] = acc"]
    return "\n".join(lines) + "\n"


def test_rewrite_time_grows_linearly_with_the_kernel(tmp_path):
    def seconds(n):
        path = tmp_path / f"k{n}.py"
        path.write_text(_long_kernel(n))
        namespace = {}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            rewrite.rewrite_function(namespace["long_kernel"])
            best = min(best, time.perf_counter() - t)
        return best
    small, large = seconds(20), seconds(80)
    # quadratic would be 16x; linear 4x (with room for a noisy shared machine)
    assert large < 8 * small, (small, large)


@moye.kernel
def counted(out, x, n: int):
    """`row` is assigned before it is read in both loops; the second loop
    sits inside a run-time one, which must not carry it (it would
    declare a variable from the first loop's body, out of its scope)."""
    acc = moye.make_fragment_like(moye.MoYeArray(out, moye.make_layout(8)))
    for i in range(8):
        row = i % 4
        acc[i] = 0.0
        if row < n:
            acc[i] = x[i]
    for s in range(n):
        for i in range(8):
            row = i % 4
            if row < n:
                acc[i] = acc[i] + x[i]
    for i in range(8):
        out[i] = acc[i]


def test_a_name_assigned_first_in_an_inner_loop_is_not_carried_by_the_run_time_loop_around():
    """The names a loop or branch carries are read from its body as
    written: rewritten, an inner loop is a `try` statement whose reads all
    looked like reads before assignment."""
    x = rand(8)
    out = np.full(8, np.nan, np.float32)
    counted[1, 1](out, x, 3)
    want = np.where(np.arange(8) % 4 < 3, 4 * x, 0).astype(np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    loops = list(fors(counted.trace(out, x, 3, block=1)[0].body))
    assert [f.unroll for f in loops] == ["full", None, "full", "full"]
    assert "$row" not in counted.ir(out, x, 3, block=1)       # carried by no loop


@moye.kernel
def running_count(out, n):
    c = 0
    for j in range(n):                  # a run-time loop; c is not read after it
        c += 1                          # but read here, before it is assigned
        out[j] = c


@moye.kernel
def running_count_in_while(out, n):
    c = 0
    while c < n:
        out[c] = c * 10
        c += 1


def test_an_augmented_assignment_reads_its_name_and_carries_it():
    """`c += 1` reads c: carried through the loop even where nothing after
    the loop reads it (each iteration saw c = 0 before, silently)."""
    out = np.zeros(6, np.int32)
    running_count[1, 1](out, 5)
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 5, 0])
    out = np.full(6, -1, np.int32)
    running_count_in_while[1, 1](out, 4)
    np.testing.assert_array_equal(out, [0, 10, 20, 30, -1, -1])
    assert rewrite._summary(rewrite.ast.parse("c += 1").body[0])[0] == {"c"}

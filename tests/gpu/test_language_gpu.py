"""Session 34's additions to the kernel language on a GPU: popc, clz, ffs
and brev of every integer type exactly; floor, ceil, trunc and rint exactly;
every math function within CUDA's documented ulps; x ** y; min and max of
many values; sync_warp ordering a warp's exchange; loads, stores, atomics
and cp.async past 2**31 elements; break and continue in loops (session 35);
a kernel's `return`, keyword arguments, short-circuit guards and rebound
globals (session 36)."""
import numpy as np
import pytest

from moye import LaunchError, ir

from ..kernel.test_bits_cpu import FNS as BIT_FNS, bits_kernel, reference, samples
from ..kernel.test_jumps_cpu import (nested_kernel, nested_reference, python_scan, scan_kernel,
                                     static_range_kernel, waiting_warps_kernel, work_queue_kernel)
from ..kernel.test_kernel_return_cpu import (POISON, cluster_after_return, first_negative,
                                             first_zero, guarded_scale, reverse_chunks,
                                             votes_after_return)
from ..kernel.test_launch_keywords_cpu import POISON as KW_POISON, axpy
from ..kernel.test_math_cpu import ARITY, FUNCTIONS, math_kernel, min_max_kernel, operands
from ..kernel.test_rounding_cpu import FNS as ROUNDING, rounding_kernel, samples as float_samples
from ..kernel.test_short_circuit_cpu import guarded_and, guarded_ternary
from ..kernel.test_sync_warp_cpu import exchange_kernel
from ..kernel.test_wide_indices_cpu import FAR, far_atomic_kernel, far_copy_kernel, far_kernel

pytestmark = pytest.mark.gpu


def cuda(torch, a):
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
def test_bits(torch, dtype):
    x = samples(dtype)
    bits = np.dtype(dtype).itemsize * 8
    outs = [cuda(torch, np.full(x.size, -7, np.int32)) for _ in range(3)] + \
        [cuda(torch, np.zeros(x.size, dtype))]
    bits_kernel[1, x.size](*outs, cuda(torch, x))
    torch.cuda.synchronize()
    for fn, out in zip(BIT_FNS, outs):
        got = out.cpu().numpy()
        got = [int(v) % 2 ** bits for v in got] if fn == "brev" else got.tolist()
        assert got == [reference(fn, v, bits) for v in x], fn


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", ROUNDING)
def test_rounding_exactly(torch, fn, dtype):
    x = float_samples(dtype)
    out = cuda(torch, np.full(x.size, 7.0, dtype))
    rounding_kernel[1, x.size](out, cuda(torch, x), fn)
    torch.cuda.synchronize()
    got, want = out.cpu().numpy(), ROUNDING[fn](x)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


# CUDA's maximum ulp errors (CUDA C++ Programming Guide, "Mathematical Functions"), Float32
ULPS32 = {"exp": 2, "exp2": 2, "exp10": 2, "expm1": 1, "log": 1, "log2": 1, "log10": 2,
          "log1p": 1, "sqrt": 0, "rsqrt": 2, "cbrt": 1, "sin": 2, "cos": 2, "tan": 4,
          "asin": 2, "acos": 2, "atan": 2, "atan2": 3, "sinh": 3, "cosh": 2, "tanh": 2,
          "erf": 2, "erfc": 4, "hypot": 3, "copysign": 0, "fma": 0, "pow": 4, "floor": 0,
          "ceil": 0, "trunc": 0, "rint": 0}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", FUNCTIONS)
def test_math_within_cudas_ulps(torch, fn, dtype):
    a, b, c = operands(fn, dtype)
    n = ARITY.get(fn, 1)
    out = cuda(torch, np.full(a.size, np.nan, dtype))
    math_kernel[1, a.size](out, cuda(torch, a), cuda(torch, b), cuda(torch, c), fn, n)
    torch.cuda.synchronize()
    got = out.cpu().numpy()
    want = ir.arith.MATH[fn][2](*(x.astype(np.float64) for x in (a, b, c)[:n]))
    ulp = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    limit = (ULPS32[fn] + 1) * ulp if dtype == np.float32 else 6 * ulp   # + 1: want's rounding
    assert (np.abs(got - want) <= limit + 1e-300).all(), (fn, np.abs(got - want) / ulp)


def test_min_and_max_of_many(torch):
    rng = np.random.default_rng(9)
    x, y, z = (rng.standard_normal(40).astype(np.float32) for _ in range(3))
    lo, hi, seq = (cuda(torch, np.full(40, np.nan, np.float32)) for _ in range(3))
    min_max_kernel[1, 40](lo, hi, seq, *(cuda(torch, v) for v in (x, y, z)))
    torch.cuda.synchronize()
    np.testing.assert_array_equal(lo.cpu().numpy(), np.minimum(np.minimum(x, y), z))
    np.testing.assert_array_equal(hi.cpu().numpy(), np.maximum(np.maximum(x, 0.5), z))


def test_sync_warp_orders_a_warp_exchange(torch):
    x = np.random.default_rng(3).standard_normal(128 * 64).astype(np.float32)
    for b in range(64):             # many blocks, one launch each: the exchange every time
        out = cuda(torch, np.full(128, np.nan, np.float32))
        exchange_kernel[1, 128](out, cuda(torch, x[128 * b: 128 * b + 128]), True, False)
        torch.cuda.synchronize()
        t = np.arange(128)
        np.testing.assert_array_equal(out.cpu().numpy(), x[128 * b + t // 32 * 32 + (t + 1) % 32])


def test_break_and_continue(torch):
    """The jumps of a run-time loop, of a static range traced once, of
    nested loops, and of warps that wait for each other at a barrier."""
    x = np.random.default_rng(7).standard_normal((256, 40)).astype(np.float32)
    sums, counts = cuda(torch, np.full(256, np.nan, np.float32)), cuda(torch, np.full(256, -1,
                                                                                       np.int32))
    scan_kernel[2, 128](sums, counts, cuda(torch, x), 40, 1.2, -0.5)
    torch.cuda.synchronize()
    want = [python_scan(row, 1.2, -0.5) for row in x]
    np.testing.assert_allclose(sums.cpu().numpy(), [s for s, _ in want], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(counts.cpu().numpy(), [k for _, k in want])
    sums.fill_(float("nan"))
    static_range_kernel[1, 256](sums, counts, cuda(torch, x[:, :8].copy()))
    torch.cuda.synchronize()
    want = [python_scan(row, 1.2, -0.5) for row in x[:, :8]]
    np.testing.assert_allclose(sums.cpu().numpy(), [s for s, _ in want], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(counts.cpu().numpy(), [k for _, k in want])
    y = np.random.default_rng(8).standard_normal((32, 6, 6)).astype(np.float32)
    y[::3, 2, 1:] = -9
    out = cuda(torch, np.full((32, 6), -7, np.int32))
    nested_kernel[1, 32](out, cuda(torch, y), 6)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), nested_reference(y))
    out = cuda(torch, np.full(64, -1, np.int32))
    waiting_warps_kernel[1, 64](out, 6)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), [3] * 32 + [20] * 32)
    tiles = cuda(torch, np.zeros((5000, 32), np.int32))
    counter = cuda(torch, np.zeros(1, np.int32))
    work_queue_kernel[264, 32](tiles, counter, 5000)        # each tile taken once
    torch.cuda.synchronize()
    np.testing.assert_array_equal(tiles.cpu().numpy(),
                                  np.arange(5000)[:, None] * 10 + np.arange(32) + 1)
    assert int(counter.item()) == 5000 + 264


def test_kernel_return(torch):
    """A kernel's `return` under run-time conditions (session 36): a guard,
    a barrier after it that only the threads left reach, returns inside a
    run-time loop and a static one, a cluster barrier after returns."""
    x = np.random.default_rng(9).standard_normal(1000).astype(np.float32)
    out = cuda(torch, np.full(1024, POISON, np.float32))
    guarded_scale[8, 128](out, cuda(torch, x), 1000, 1.5)
    torch.cuda.synchronize()
    got = out.cpu().numpy()
    np.testing.assert_array_equal(got[:1000], x * np.float32(1.5))
    assert (got[1000:] == POISON).all()
    y = cuda(torch, x[:96])
    reverse_chunks[3, 32](y, 70)
    torch.cuda.synchronize()
    want = np.concatenate([x[:32][::-1], x[32:64][::-1], x[64:70][::-1], x[70:96]])
    np.testing.assert_array_equal(y.cpu().numpy(), want)
    rows = np.random.default_rng(10).uniform(0.5, 1.0, (64, 9)).astype(np.float32)
    rows[::5, 4] = -1.0
    sums = cuda(torch, np.full(64, POISON, np.float32))
    first_negative[1, 64](sums, cuda(torch, rows), 9)
    torch.cuda.synchronize()
    want = [row[:4].sum(dtype=np.float32) if k % 5 == 0 else row.sum(dtype=np.float32) + 1000
            for k, row in enumerate(rows)]
    np.testing.assert_allclose(sums.cpu().numpy(), want, rtol=1e-6)
    z = np.ones((5, 4), np.float32)
    z[0, 1] = z[2, 0] = z[2, 2] = z[3, 3] = 0.0
    found = cuda(torch, np.full(5, -99, np.int32))
    first_zero[1, 5](found, cuda(torch, z))
    torch.cuda.synchronize()
    assert found.cpu().tolist() == [1, -1, 0, 3, -1]
    ranks = cuda(torch, np.full(8, -1, np.int32))
    cluster_after_return[2, 4, 2](ranks, 3)
    torch.cuda.synchronize()
    assert ranks.cpu().tolist() == [1, 1, 1, -1, 2, 2, 2, -1]


def test_votes_after_returns(torch):
    """Exited lanes take no part in a vote, a ballot or a match on the GPU,
    as the CPU backend has it (session 36)."""
    x = np.zeros(32, np.float32)
    x[[1, 4, 30]] = 1.0
    out = cuda(torch, np.full((32, 4), -1, np.int64))
    votes_after_return[1, 32](out, cuda(torch, x), 20)
    torch.cuda.synchronize()
    got = out.cpu().numpy()
    want = np.full((32, 4), -1, np.int64)
    votes_after_return[1, 32](want, x, 20)                  # the CPU backend
    np.testing.assert_array_equal(got, want)
    assert (got[:20, 0] == (1 << 1) | (1 << 4)).all()


def test_keyword_arguments_on_the_fast_launch_path(torch):
    """Keywords at launch (session 36) through the launch function the CUDA
    backend writes for a configuration: its slow path binds them."""
    x = cuda(torch, np.arange(8, dtype=np.float32))
    out = cuda(torch, np.full(8, KW_POISON, np.float32))
    launch = axpy[1, 8]
    for _ in range(3):
        launch(out, x, 8)                       # the configuration's own launch function
    launch(out, x, 8, b=1.0)
    torch.cuda.synchronize()
    assert out.cpu().tolist() == (2 * np.arange(8) + 1).tolist()
    launch(out, x, n=4, a=-1.0)
    torch.cuda.synchronize()
    assert out.cpu().tolist() == [0, -1, -2, -3, 9, 11, 13, 15]
    with pytest.raises(LaunchError, match=r"argument 'n' is given twice"):
        launch(out, x, 8, n=3)


def test_short_circuit_guards(torch):
    """`and` and `x if c else y` guards (session 36): the read past n is
    under a branch; arrays exactly n long."""
    x = cuda(torch, np.array([1.0, -2.0, 3.0, 0.0], np.float32))
    out = cuda(torch, np.full(8, -99, np.int32))
    guarded_and[1, 8](out, x, 4)
    doubled = cuda(torch, np.full(8, np.nan, np.float32))
    guarded_ternary[1, 8](doubled, x, 4)
    torch.cuda.synchronize()
    assert out.cpu().tolist() == [1, 0, 1, 0, 0, 0, 0, 0]
    assert doubled.cpu().tolist() == [2.0, -4.0, 6.0, 0.0, -1.0, -1.0, -1.0, -1.0]


def test_a_rebound_global_on_the_fast_path(torch, monkeypatch):
    """A global rebound after launches through the CUDA backend's launch
    function (session 36): the next launch runs the kernel traced again."""
    from ..kernel import test_global_rebinding_cpu as module
    out, x = cuda(torch, np.zeros(4, np.float32)), cuda(torch, np.arange(4, dtype=np.float32))
    for _ in range(3):
        module.scaled[1, 4](out, x)
    torch.cuda.synchronize()
    assert out.cpu().tolist() == [11.0, 13.0, 15.0, 17.0]
    monkeypatch.setattr(module, "SCALE", 3.0)
    module.scaled[1, 4](out, x)
    torch.cuda.synchronize()
    assert out.cpu().tolist() == [11.0, 14.0, 17.0, 20.0]


def test_accesses_past_two_to_the_31(torch):
    """2 GiB of bytes (8 GiB of int32 for the atomics): the offsets past 2**31
    reach their elements, not wrapped ones."""
    x = torch.zeros(FAR + 64, dtype=torch.uint8, device="cuda")
    out = torch.zeros_like(x)
    x[FAR] = 41
    far_kernel[1, 1](out, x, FAR)
    torch.cuda.synchronize()
    assert int(out[FAR]) == 42 and int(out.sum()) == 42
    start = 2 ** 31 + 16
    x[start: start + 16] = torch.arange(1, 17, dtype=torch.uint8, device="cuda")
    small = torch.zeros(16, dtype=torch.uint8, device="cuda")
    far_copy_kernel[1, 16](small, x, start)
    torch.cuda.synchronize()
    assert small.tolist() == list(range(1, 17))
    del x, out
    counts = torch.zeros(FAR + 16, dtype=torch.int32, device="cuda")
    far_atomic_kernel[1, 2](counts, FAR)
    torch.cuda.synchronize()
    assert int(counts[FAR]) == 6 and int(counts[FAR + 1]) == 8 and int(counts.sum()) == 14


def test_an_op_past_two_to_the_31(torch):
    """moye.ops.softmax of a float16 tensor of more than 2**31 elements (4
    GiB): the rows on both sides of element 2**31 against torch's."""
    from moye import ops
    n = 4096
    m = 2 ** 31 // n + 2
    x = torch.randn(m, n, device="cuda", dtype=torch.float16)
    y = ops.softmax(x)
    torch.cuda.synchronize()
    for rows in (slice(0, 2), slice(2 ** 31 // n - 2, m)):
        want = torch.softmax(x[rows].float(), -1)
        torch.testing.assert_close(y[rows].float(), want, rtol=2e-3, atol=1e-5)


ASSERT_SCRIPT = """
import numpy as np, torch, moye
from tests.kernel.test_assert_cpu import assert_kernel
x = torch.arange(64, dtype=torch.float32, device="cuda")
out = torch.zeros(64, device="cuda")
assert_kernel[1, 64](out, x, 64)
torch.cuda.synchronize()
print("passed", flush=True)
x[5] = -1.0
try:
    assert_kernel[1, 64](out, x, 64)
    torch.cuda.synchronize()
    print("no error", flush=True)
except Exception as e:
    print("raised", type(e).__name__, flush=True)
"""


def test_a_failing_assert_traps_on_the_gpu(torch):
    """In a process of its own (a trap leaves the CUDA context unusable): the
    failing thread prints the line, the message and itself, and the launch
    (or the next synchronization) fails."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", ASSERT_SCRIPT], capture_output=True, text=True,
                         cwd=root, env=env, timeout=300)
    text = run.stdout + run.stderr
    assert "passed" in run.stdout and "raised" in run.stdout, text
    assert "assert v >= 0.0, \"a negative square\": assertion failed: a negative square " \
           "(thread (5, 0, 0) of block (0, 0, 0))" in text, text

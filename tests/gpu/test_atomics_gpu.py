"""moye's atomics on a GPU: a histogram over many blocks against torch's
bincount, exactly; the old values a ticket counter hands out; every atomic
and red on global and shared memory against the invariants that hold in any
order; packed half pairs."""
import numpy as np
import pytest

from ..kernel.kernels_for_tests import histogram, tickets
from ..kernel.test_atomics_cpu import (BINS, BLOCK, FLOATS, INTS, check_order_free,
                                       everywhere, in_thread_order, multiply, pairs,
                                       random_values)

pytestmark = pytest.mark.gpu

def test_histogram(torch):
    n, bins = 1 << 20, 97
    keys = torch.randint(0, bins, (n,), device="cuda", dtype=torch.int32)
    counts = torch.randint(1, 50, (bins,), device="cuda", dtype=torch.int32)
    want = counts.long() + torch.bincount(keys.long(), minlength=bins)
    histogram[(n + 255) // 256, 256](counts, keys, n)
    torch.cuda.synchronize()
    assert torch.equal(counts.long(), want)


def test_tickets(torch):
    n = 100_000
    counter = torch.full((1,), 7, device="cuda", dtype=torch.int32)
    order = torch.full((n,), -1, device="cuda", dtype=torch.int32)
    tickets[(n + 255) // 256, 256](counter, order, n)
    torch.cuda.synchronize()
    assert int(counter[0]) == 7 + n
    assert torch.equal(order.sort().values.cpu(), torch.arange(7, 7 + n, dtype=torch.int32))


def _on_gpu(torch, a):
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()     # uint32/64 too (torch 2.3+)


def _back(t, dtype):
    got = t.cpu().numpy()
    assert got.dtype == dtype
    return got


def run_everywhere_on_gpu(torch, op, dtype, red, seed):
    """`everywhere` on the GPU on random inputs from `seed` (x also the
    compare; the values before poisoned with 7): idx, x, init, and the
    results in NumPy, out, sout, old, sold."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, BINS, BLOCK).astype(np.int32)
    x, init = random_values(rng, dtype, BLOCK, op), random_values(rng, dtype, BINS, op)
    out, sout = _on_gpu(torch, init), _on_gpu(torch, init)
    old, sold = _on_gpu(torch, np.full(BLOCK, 7, dtype)), _on_gpu(torch, np.full(BLOCK, 7, dtype))
    everywhere[1, BLOCK](out, sout, old, sold, _on_gpu(torch, idx), _on_gpu(torch, x),
                         _on_gpu(torch, x), op, red)
    torch.cuda.synchronize()
    return (idx, x, init) + tuple(_back(t, dtype) for t in (out, sout, old, sold))


@pytest.mark.parametrize("dtype", INTS + FLOATS)
@pytest.mark.parametrize("op", ["add", "min", "max", "exch"])
def test_every_atomic_in_any_order(torch, op, dtype):
    idx, x, init, out, sout, old, sold = run_everywhere_on_gpu(torch, op, dtype, False, 11)
    final, _ = in_thread_order(op, init, idx, x)
    for got, got_old in ((out, old), (sout, sold)):
        if op != "exch":
            np.testing.assert_array_equal(got, final)
        check_order_free(op, init, idx, x, got, got_old)


@pytest.mark.parametrize("dtype", INTS + FLOATS)
@pytest.mark.parametrize("op", ["add", "min", "max"])
def test_red(torch, op, dtype):
    idx, x, init, out, sout, _, _ = run_everywhere_on_gpu(torch, op, dtype, True, 12)
    final, _ = in_thread_order(op, init, idx, x)
    np.testing.assert_array_equal(out, final)
    np.testing.assert_array_equal(sout, final)


@pytest.mark.parametrize("dtype", [np.int32, np.uint64, np.float64])
def test_compare_and_swap_hands_each_swap_to_one_thread(torch, dtype):
    """Every thread swaps in its own value where it finds the last one it
    expects: exactly the swaps of one order succeed."""
    rng = np.random.default_rng(13)
    idx = rng.integers(0, BINS, BLOCK).astype(np.int32)
    x, init = random_values(rng, dtype, BLOCK, "cas"), random_values(rng, dtype, BINS, "cas")
    y = init[idx]                       # all compare with the first value: one wins per element
    out, sout = _on_gpu(torch, init), _on_gpu(torch, init)
    old, sold = _on_gpu(torch, np.full(BLOCK, 7, dtype)), _on_gpu(torch, np.full(BLOCK, 7, dtype))
    everywhere[1, BLOCK](out, sout, old, sold, _on_gpu(torch, idx), _on_gpu(torch, x),
                         _on_gpu(torch, y), "cas", False)
    torch.cuda.synchronize()
    for got, got_old in ((out, old), (sout, sold)):
        got, got_old = _back(got, dtype), _back(got_old, dtype)
        for i in range(BINS):
            mine = np.nonzero(idx == i)[0]
            if not mine.size:
                assert got[i] == init[i]
                continue
            won = mine[got_old[mine] == init[i]]
            assert len(won) == 1 and got[i] == x[won[0]]
            np.testing.assert_array_equal(got_old[mine[mine != won[0]]], x[won[0]])


def test_a_compare_and_swap_loop_multiplies(torch):
    rng = np.random.default_rng(4)
    factors = 2.0 ** rng.integers(-3, 4, 3000)
    total = torch.tensor([1.5], device="cuda", dtype=torch.float64)
    multiply[24, 128](total, torch.from_numpy(factors).cuda(), 3000)
    torch.cuda.synchronize()
    assert float(total[0]) == 1.5 * np.prod(factors)


@pytest.mark.parametrize("red", [False, True])
@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_packed_pairs(torch, name, red):
    dtype = getattr(torch, name)
    idx = torch.randint(0, BINS, (BLOCK,), device="cuda", dtype=torch.int32)
    x = torch.randint(1, 4, (2 * BLOCK,), device="cuda").to(dtype) / 4     # exact sums
    init = torch.randint(-8, 8, (2 * BINS,), device="cuda").to(dtype) / 2
    out, sout = init.clone(), init.clone()
    old = torch.full((2 * BLOCK,), float("nan"), device="cuda", dtype=dtype)
    pairs[1, BLOCK](out, sout, old, idx, x, red)
    torch.cuda.synchronize()
    pair_idx = torch.stack([2 * idx, 2 * idx + 1], dim=1).ravel().long()
    want = init.double().index_add(0, pair_idx, x.double())
    assert torch.equal(out.double(), want) and torch.equal(sout.double(), want)
    if red:
        assert old.isnan().all()
    else:                               # per half: the values before rise by the adds
        got_old = old.double().cpu().numpy()
        check_order_free("add", init.double().cpu().numpy(), pair_idx.cpu().numpy(),
                         x.double().cpu().numpy(), want.cpu().numpy(), got_old)


@pytest.mark.parametrize("red", [False, True])
@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", ["and", "or", "xor"])
def test_bitwise_atomics(torch, op, dtype, red):
    """and, or and xor on global and shared memory: each element ends as its
    value combined with every thread's (any order); an atomic's values
    before are each the element's value combined with some of the others'."""
    idx, x, init, out, sout, old, sold = run_everywhere_on_gpu(torch, op, dtype, red, 13)
    final, _ = in_thread_order(op, init, idx, x)
    np.testing.assert_array_equal(out, final)
    np.testing.assert_array_equal(sout, final)
    if not red and op == "or":          # or: each value before lies between init and final
        for got_old in (old, sold):
            for t in range(BLOCK):
                i = idx[t]
                assert got_old[t] | init[i] == got_old[t] and got_old[t] | final[i] == final[i]

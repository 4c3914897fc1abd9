"""row_kernels.row_merge, the one reduction of the row-wise ops, on the CPU
backend, race-checked: rows of a few lanes, of a block (whole warps, a
power of two of them or not) and of a cluster; blocks looping over several
rows (the shared arrays' slots alternating); sums, (max, sum of exp) and
(count, mean, squared deviations) against float64, each thread's result
bitwise the same as its row's others'."""
import numpy as np
import pytest

from moye.backend.cpu import race_checking
from moye.compiler import Constexpr, kernel, range_constexpr
from moye.device import cast
from moye.layout import size
from moye.ops.layer_norm_op import moments
from moye.ops.row_kernels import (group_place, max_sumexp, row_groups, row_merge, sums)


@kernel
def merged(out, x, WORK: Constexpr, WHAT: Constexpr):
    """out[row, t] = the merge WHAT over x[row, :] from thread t of the row,
    which holds x[row, t]: "sums" (of x and x^2), "max_sumexp" (max, sum of
    exp(x - max)), "moments" (count, mean, squared deviations)."""
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    m = size(x, 0)
    first, count, step, t, nt, ring, bars = row_groups((x,), WORK, False, True)
    nth = 0
    for g in range(first, count, step):
        row, t, nt, mine = group_place(ROWS, TPR, CLUSTER, THREADS, m, g)
        v = x[row, t]
        one, zero = cast(1.0, v.type), cast(0.0, v.type)
        if WHAT == "sums":
            r = row_merge((v, v * v), sums, nth, TPR, CLUSTER, THREADS, bars)
        elif WHAT == "max_sumexp":
            r = row_merge((v, one), max_sumexp, nth, TPR, CLUSTER, THREADS, bars)
        else:
            r = row_merge((one, v, zero), moments, nth, TPR, CLUSTER, THREADS, bars)
        if mine:
            for i in range_constexpr(len(r)):
                out[row, t, i] = r[i]
        nth = nth + 1


def reference(x, what):
    xd = x.astype(np.float64)
    if what == "sums":
        return np.stack([xd.sum(1), (xd * xd).sum(1)], 1)
    if what == "max_sumexp":
        big = xd.max(1)
        return np.stack([big, np.exp(xd - big[:, None]).sum(1)], 1)
    mean = xd.mean(1)
    return np.stack([np.full(len(x), x.shape[1]), mean,
                     ((xd - mean[:, None]) ** 2).sum(1)], 1)


# (rows per block, threads per row, cluster, threads per block)
SHAPES = [(4, 8, 1, 32), (8, 16, 1, 128), (1, 64, 1, 64), (1, 96, 1, 96), (1, 256, 1, 256),
          (1, 128, 2, 64), (1, 256, 4, 64), (1, 768, 8, 96), (1, 1024, 16, 64)]


@pytest.mark.parametrize("rows_, tpr, cluster, threads", SHAPES)
@pytest.mark.parametrize("what", ["sums", "max_sumexp", "moments"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_merge(rows_, tpr, cluster, threads, what, dtype):
    nt = tpr if cluster == 1 else threads * cluster
    m = 3 * rows_ + 1                       # a partial last group; blocks loop over groups
    rng = np.random.default_rng(nt + m)
    x = (rng.standard_normal((m, nt)) * 3 + 5).astype(dtype)
    want = reference(x, what)
    out = np.full((m, nt, want.shape[1]), np.nan, dtype)
    work = (1, 1, rows_, nt, cluster, threads)
    with race_checking():                   # two blocks (clusters), each looping over groups
        if cluster > 1:
            merged[2 * cluster, threads, cluster](out, x, work, what)
        else:
            merged[2, threads](out, x, work, what)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for i in range(want.shape[1]):
        np.testing.assert_allclose(out[:, 0, i], want[:, i], rtol=tol,
                                   atol=tol * np.abs(want[:, i]).max(), err_msg=f"value {i}")
    assert (out == out[:, :1]).all(), "a row's threads got different bits"


def test_row_merge_compiles_with_nvrtc():
    from moye.compiler.frontend import BACKENDS
    x = np.ones((9, 768), np.float32)
    for work, arch in (((1, 1, 1, 256, 1, 256), "sm_80"), ((1, 1, 1, 768, 8, 96), "sm_90a")):
        k = merged.trace(np.ones((9, 768, 3), np.float32), x, work, "moments",
                         block=work[5])[0]
        BACKENDS["cuda"].compile_only(k, (work[5], 1, 1), arch)


@kernel
def merged_without_bars(out, x, WORK: Constexpr):
    VEC, CHUNKS, ROWS, TPR, CLUSTER, THREADS = WORK
    first, count, step, t, nt, ring, bars = row_groups((x,), WORK, False, True, False)
    for g in range(first, count, step):
        row, t, nt, mine = group_place(ROWS, TPR, CLUSTER, THREADS, size(x, 0), g)
        out[row, t, 0] = row_merge((x[row, t],), sums, 0, TPR, CLUSTER, THREADS, bars)[0]


def test_row_merge_in_a_cluster_needs_row_groups_mbarriers():
    from moye import MoyeError
    x = np.ones((2, 128), np.float32)
    with pytest.raises(MoyeError, match="row_merge: a row in a cluster of blocks needs the "
                                        "mbarrier pair that row_groups returns"):
        merged_without_bars[4, 64, 2](np.zeros((2, 128, 1), np.float32), x, (1, 1, 1, 128, 2, 64))

"""The shared pieces of backwards that sum over rows: rows.parallel_blocks,
group_count, sum_columns and its kernel row_kernels.column_sum, the fitting
and slab plans, plan_options' staged and keep knobs, and the norms' forwards
keeping their parameters in shared memory."""
import re

import ml_dtypes
import numpy as np
import pytest

import moye
from moye.compiler.frontend import BACKENDS
from moye.ops import row_kernels, rows
from moye.ops.layer_norm_op import layer_norm_forward
from moye.ops.row_kernels import COLUMN_LANES, COLUMNS, column_sum
from moye.ops.softmax_op import softmax
from moye.types import BFloat16, Float32


@pytest.mark.parametrize("shape", [(1, 1), (1, 70), (37, 1), (5, 33), (300, 65)])
@pytest.mark.parametrize("part,out", [(np.float32, "float32"), (np.float32, "bfloat16"),
                                      (np.float64, "float64"), (np.float32, "float16")])
def test_sum_columns(shape, part, out):
    rng = np.random.default_rng(shape[0] * shape[1])
    p = rng.standard_normal(shape).astype(part)
    got = rows.sum_columns(p, out)
    assert got.shape == (shape[1],) and got.dtype.name == out
    want = p.astype(np.float64).sum(0)
    tol = {"float32": 1e-5, "float64": 1e-12, "float16": 1e-3, "bfloat16": 8e-3}[out]
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol,
                               atol=tol * (1 + np.abs(want).max()))


def test_group_count():
    x = np.ones((1000, 8), np.float32)
    assert rows.parallel_blocks(x, 128) == rows.CPU_BLOCKS
    p = rows.plan("float32", 8, "cpu")
    assert rows.group_count(p, x, 1000) == rows.CPU_BLOCKS
    assert rows.group_count(p, x, 3) == 1                      # one group of p.rows rows
    p = rows.plan("float32", 3000, "cpu")
    assert rows.group_count(p, x, 2) == 2


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_column_sum_compiles_with_nvrtc(arch):
    for part, out in ((np.float32, ml_dtypes.bfloat16), (np.float64, np.float64)):
        k = column_sum.trace(np.ones(70, out), np.ones((5, 70), part),
                             block=COLUMNS * COLUMN_LANES)[0]
        BACKENDS["cuda"].compile_only(k, (COLUMNS * COLUMN_LANES, 1, 1), arch)


def test_plan_fitting(monkeypatch):
    """On a CUDA device, a backward's plan keeps its threads' fragments in
    the registers an SM has (no spills): blocks of 1,024 threads (64
    registers each) give way to a cluster; where that is not possible (no
    clusters) the loop plan takes it (the slab kernels). Elsewhere it is
    plan_for's."""
    x = np.ones((2, 16384), np.float32)
    assert rows.plan_fitting(x, "float32", 16384, 4) is rows.plan_for(x, "float32", 16384)
    monkeypatch.setattr(rows, "backend_of", lambda a: "cuda")
    for clusters in (8, 1):
        monkeypatch.setattr(rows, "max_cluster", lambda a: clusters)
        p = rows.plan_for(x, "float32", 16384)
        assert p.threads == 1024 and rows.registers_of(p, 4) * p.threads > rows.SM_REGISTERS
        q = rows.plan_fitting(x, "float32", 16384, 4)
        if clusters == 1:
            assert q.kernel == "loop"
        else:
            assert q.kernel == "registers" and q.cluster > 1
            assert rows.registers_of(q, 4) * q.threads <= rows.SM_REGISTERS
        p = rows.plan_for(x, "float32", 1024)
        assert rows.plan_fitting(x, "float32", 1024, 5) is p          # fits already


class OnAnH100:
    """Stands for a CUDA array on an H100 (132 SMs, 227 KB of shared memory
    a block may take) in the plans' device queries."""
    device = type("Device", (), {"index": 0})()


def h100(monkeypatch, most=16):
    """The plans see OnAnH100 arrays on a device whose largest cluster is `most`."""
    monkeypatch.setattr(rows, "backend_of", lambda a: "cuda")
    monkeypatch.setattr(rows, "_cuda_max_cluster", lambda index: most)
    monkeypatch.setattr(rows, "_cuda_device", lambda index: (132, 233472, 232448))
    return OnAnH100()


def test_clusters_of_16_take_only_what_8_blocks_would_spill(monkeypatch):
    """Plans stay within the portable cluster of 8 blocks, except a
    backward's row that 8 blocks would spill: softmax's (two fragments) at
    262,144 (float32 in blocks of 1,024 threads, bfloat16 in blocks of 512
    at 64 elements a thread) goes to 16 blocks of 512, 32 elements a thread,
    staged; one block of 1,024 at 32,768 to a cluster of 4; a
    norm's (four) at 131,072 to 16 blocks of 256. Not where they fit, nor
    where the device runs 8 at most, nor under plan_options."""
    x = h100(monkeypatch)
    assert rows.max_cluster(x) == 8 and rows.max_cluster(x, portable=False) == 16
    for n in (256, 4096, 65536, 131072, 262144):
        for dtype in ("float32", "bfloat16"):
            assert rows.plan_for(x, dtype, n).cluster <= 8
    p = rows.plan_for(x, "float32", 262144)
    assert (p.threads, p.cluster, p.vec * p.chunks) == (1024, 8, 32) and not rows.fits(p, 2)
    q = rows.pair_plan(x, p)
    assert (q.kernel, q.threads, q.cluster, q.vec * q.chunks) == ("registers", 512, 16, 32)
    assert rows.fits(q, 2) and q.threads * q.cluster * q.vec * q.chunks >= 262144
    assert rows.persists(q, x, 2, True) and not rows.persists(q, x, 2, False)
    half = rows.plan_for(x, "bfloat16", 262144)
    assert (half.threads, half.cluster, half.vec * half.chunks) == (512, 8, 64)
    q = rows.pair_plan(x, half)
    assert (q.kernel, q.threads, q.cluster, q.vec * q.chunks) == ("registers", 512, 16, 32)
    assert rows.persists(q, x, 2, True) and not rows.persists(half, x, 2, True)
    for dtype in ("float32", "bfloat16"):
        one = rows.plan_for(x, dtype, 32768)
        assert (one.threads, one.cluster, one.vec * one.chunks) == (1024, 1, 32)
        q = rows.pair_plan(x, one)
        assert (q.kernel, q.threads, q.cluster, q.vec * q.chunks) == ("registers", 256, 4, 32)
    for dtype, n in (("float32", 65536), ("bfloat16", 131072), ("bfloat16", 16384)):
        small = rows.plan_for(x, dtype, n)
        assert rows.pair_plan(x, small) is small               # fits
    q = rows.plan_fitting(x, "float32", 131072, 4)
    assert (q.kernel, q.threads, q.cluster, q.vec * q.chunks) == ("registers", 256, 16, 32)
    assert rows.fits(q, 4) and not rows.fits(rows.plan_for(x, "float32", 131072), 4)
    assert rows.plan_fitting(x, "bfloat16", 131072, 4).kernel == "loop"
    assert rows.plan_fitting(x, "float32", 262144, 4).kernel == "loop"
    with rows.plan_options(max_threads=1024):
        assert rows.pair_plan(x, p) is p
    x = h100(monkeypatch, most=8)
    assert rows.pair_plan(x, p) is p                           # 16 blocks of 512 or the loop
    assert rows.plan_fitting(x, "float32", 131072, 4).kernel == "loop"


def test_largest_cluster_by_compute_capability(monkeypatch):
    """16 blocks on sm_90 (non-portable, as the H100 runs), the portable 8
    on later GPUs, none before; 1 for arrays on the CPU."""
    torch = pytest.importorskip("torch")
    for capability, most in (((8, 0), 1), ((8, 9), 1), ((9, 0), 16), ((10, 0), 8), ((12, 0), 8)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i, c=capability: c)
        assert rows._cuda_max_cluster.__wrapped__(0) == most
    assert rows.max_cluster(np.ones(3)) == rows.max_cluster(np.ones(3), portable=False) == 1


def test_slab_plan():
    """Rows a backward cannot keep in registers (the loop plan) go through
    slabs of VEC * CHUNKS * THREADS elements, the last one ragged, and as
    many row groups as fill the device's blocks, at most one per row."""
    x = np.ones((5, 700), np.float32)
    with rows.plan_options(elements=4, max_threads=32):
        p = rows.plan_for(x, "float32", 700)
        q = rows.plan_for(x, "bfloat16", 700)
    assert p.kernel == q.kernel == "loop"
    assert rows.slab_plan(p, x, 5, 700, 4) == ((4, 4, 32), 2, rows.CPU_BLOCKS // 2)
    assert rows.slab_plan(q, x, 1, 700, 4) == ((4, 4, 32), 2, 1)     # 700 = 4 * 175: VEC 4
    assert rows.slab_plan(rows.plan("bfloat16", 262144, "cpu"), x, 9, 262144, 5) == \
        ((8, 2, 256), 64, 1)


def test_plan_options_refuse_bad_knobs():
    """An unknown knob, a staged that is not a bool nor a number of stages
    from 1 to 4, a keep that is not a bool nor "sums", or a size the
    kernels' reductions cannot take (blocks of whole warps, clusters of a
    power of two) is named; the options in force are left as they were."""
    x = np.ones((1, 4096), np.float32)
    before = rows.plan_for(x, "float32", 4096)
    with pytest.raises(moye.MoyeTypeError, match=r"unknown knobs \['stages'\]"):
        with rows.plan_options(stages=2):
            pass
    for knob, want, bads in (
            ("staged", "True, False or a number of stages from 1 to 4", (0, 5, -1, 2.0, "sums")),
            ("keep", "True, False or 'sums'", (1, "Sums"))):
        for bad in bads + ("yes", None, np.ones(2)):
            with pytest.raises(moye.MoyeTypeError, match=re.escape(f"{knob} must be {want}, "
                                                                   f"got {bad!r}")):
                with rows.plan_options(**{knob: bad}):
                    pass
    for knob, bad in (("max_threads", 48), ("max_threads", 2048), ("max_threads", 64.0),
                      ("cluster_threads", 0), ("max_cluster", 3), ("max_cluster", 32),
                      ("max_cluster", True), ("elements", 0)):
        with pytest.raises(moye.MoyeTypeError, match=f"{knob} must be .*, got {bad!r}"):
            with rows.plan_options(**{knob: bad}):
                pass
    assert rows.plan_for(x, "float32", 4096) is before
    assert rows.staged(before, x, 1) == 0
    with rows.plan_options(staged=True):
        assert rows.staged(before, x, 1) == 1
        assert rows.staged(rows.plan("float32", 262144, "cpu"), x, 1) == 0
    with rows.plan_options(staged=3):
        assert rows.staged(before, x, 2) == 3


def test_kept_parameters_only_where_asked_off_the_gpu():
    """On the CPU backend a norm's forward reads its weight and bias from
    global memory unless plan_options(keep=True): then a registers plan
    keeps the parameters given in shared memory (kept_bytes: each thread's
    chunks of each), and its launch loops over group_count's groups, staged
    or not, writing every row; a loop plan, or no parameters, keeps
    nothing."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((23, 700)).astype(np.float32)
    w, b = rng.standard_normal((2, 700)).astype(np.float32)
    p = rows.plan_for(x, "float32", 700)
    assert not rows.keeps(p, x, (w, b), 1)
    assert rows.kept_bytes(p, (w, b.astype(ml_dtypes.bfloat16))) == 6 * p.vec * p.chunks * p.threads
    want = torch_free_layer_norm(x, w, b)
    for staged in (False, True):
        with rows.plan_options(keep=True, staged=staged):
            assert rows.keeps(p, x, (w, b), 1) and rows.keeps(p, x, (w,), 1)
            assert not rows.keeps(p, x, (), 1)
            assert not rows.keeps(rows._loop_plan("float32", 700, "cpu", 4), x, (w,), 1)
            y, _, _ = layer_norm_forward(x, w, b, 1e-5)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def torch_free_layer_norm(x, w, b):
    """LayerNorm of float32 rows in float64 (eps 1e-5)."""
    x = x.astype(np.float64)
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    return xhat * w + b


def test_only_staged_launches_persist_off_the_gpu():
    """On the CPU backend a registers launch has a block (or cluster) per row
    group unless plan_options(staged=True): then it runs group_count's
    groups, each looping over its rows through the ring; a loop plan never
    does. Under that option a forward over more rows than groups still
    writes every row."""
    x = np.random.default_rng(5).standard_normal((23, 700)).astype(np.float32)
    p = rows.plan_for(x, "float32", 700)
    assert p.kernel == "registers"
    assert not rows.persists(p, x, 1, True)
    with rows.plan_options(staged=True):
        assert rows.persists(p, x, 1, True) and rows.persists(p, x, 2, False)
        assert not rows.persists(rows.plan("float32", 262144, "cpu"), x, 1, True)
        assert rows.group_count(p, x, 23, 1, 1) == rows.CPU_BLOCKS < 23
        y = softmax(x)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_narrow_chunks_count_in_a_backward_s_registers(monkeypatch):
    """A row whose length allows only narrow chunks (131,071: one element a
    chunk) gives a thread 64 chunks where 131,072 gives 8: plan_fitting
    counts CHUNK_REGISTERS for each past BASE_CHUNKS, so a norm's backward
    there takes the wide plan (16 blocks of 512, 16 elements a thread),
    where 8 blocks of 256 spilled (ptxas: 432 bytes); 131,072 keeps its
    plan."""
    x = h100(monkeypatch)
    p = rows.plan_for(x, "bfloat16", 131071)
    assert (p.vec, p.chunks, p.cluster, p.threads) == (1, 64, 8, 256)
    assert rows.fits(p, 3) and not rows.fits(p, 3, chunk=rows.CHUNK_REGISTERS)
    assert rows.plan_fitting(x, "bfloat16", 131071, 3).kernel == "loop"
    w = np.ones(4, ml_dtypes.bfloat16)
    q, kept = rows.backward_plan(x, "bfloat16", 131071, 4, w)
    assert kept == 1 and (q.cluster, q.threads, q.vec * q.chunks) == (16, 512, 16)
    q, kept = rows.backward_plan(x, "bfloat16", 131072, 4, w)
    assert kept == 1 and (q.cluster, q.threads, q.vec * q.chunks) == (8, 256, 64)
    assert rows.fits(q, 3, chunk=rows.CHUNK_REGISTERS)


def test_what_the_norms_keep_in_shared_memory_on_an_h100(monkeypatch):
    """A backward of 16-bit rows keeps its weight in shared memory in a
    cluster (kept 1); layer_norm's keeps its dbias sums there too (kept 2)
    only where the weight alone leaves no registers plan (bfloat16 131,072:
    8 blocks of 256). A row that no portable cluster holds even so
    (262,144: 16 blocks of 256 kept, or in float32 the loop plan) takes the
    wide plan: blocks of 1,024 over 16, 16 elements a thread, the weight
    kept, and layer_norm's sums in bfloat16 (in float32 they would not fit
    beside it and the ring: the 227 KB a block may take). A float32 row keeps nothing
    elsewhere unless plan_options(keep=True); no weight, nothing kept. A
    forward keeps its parameters in a cluster where they take 64 or more
    elements a thread or its launch persists anyway, and fit. A cluster's
    looping launch that keeps them is counted by threads and shared memory,
    not registers."""
    x = h100(monkeypatch)
    w16, w32 = np.ones(4, ml_dtypes.bfloat16), np.ones(4, np.float32)

    def shape(p):
        return p.kernel, p.cluster, p.threads, p.vec * p.chunks

    for dtype, n in (("bfloat16", 131072), ("bfloat16", 262144), ("float32", 262144)):
        assert rows.plan_fitting(x, dtype, n, 4).kernel == "loop"
    p, kept = rows.backward_plan(x, "bfloat16", 262144, 4, w16)
    assert kept == 1 and shape(p) == ("registers", 16, 1024, 16)
    q, kept = rows.backward_plan(x, "bfloat16", 262144, 5, w32, sums=1)
    assert kept == 2 and q is p
    assert rows.ring_bytes(p, 2) + rows.kept_bytes(p, (w32,), 1) <= 227 * 1024
    q, kept = rows.backward_plan(x, "bfloat16", 131072, 5, w32, sums=1)
    assert kept == 2 and shape(q) == ("registers", 8, 256, 64)
    q, kept = rows.backward_plan(x, "bfloat16", 131072, 4, w16)
    assert kept == 1 and shape(q) == ("registers", 8, 256, 64)
    p, kept = rows.backward_plan(x, "float32", 262144, 4, w32)
    assert kept == 1 and shape(p) == ("registers", 16, 1024, 16)
    q, kept = rows.backward_plan(x, "float32", 262144, 5, w32, sums=1)
    assert kept == 1 and q is p
    assert rows.ring_bytes(p, 2) + rows.kept_bytes(p, (w32,), 1) > 227 * 1024
    assert rows.backward_plan(x, "bfloat16", 262144, 4, None) == (
        rows.plan_fitting(x, "bfloat16", 262144, 4), 0)
    with rows.plan_options(keep="sums", max_cluster=16, max_threads=256, elements=64):
        p, kept = rows.backward_plan(x, "bfloat16", 262144, 5, w32, sums=1)
        assert kept == 2 and shape(p) == ("registers", 16, 256, 64)
    q, kept = rows.backward_plan(x, "float32", 262144, 5, w32, sums=2)
    assert kept == 1 and shape(q) == ("registers", 16, 1024, 16)     # nothing else fits
    with rows.plan_options(keep="sums", staged=False):      # both sums, in the ring's place
        q, kept = rows.backward_plan(x, "float32", 262144, 5, w32, sums=2)
        assert kept == 3 and shape(q) == ("registers", 16, 1024, 16)
        assert rows.staged(q, x, 2) == 0 and rows.keeps(q, x, (w32,), 2, sums=2)
    assert rows.backward_plan(x, "bfloat16", 8192, 4, w16)[1] == 0       # one block a row
    p, kept = rows.backward_plan(x, "bfloat16", 65536, 5, w32, sums=1)
    assert kept == 1 and (p.cluster, p.threads, p.vec * p.chunks) == (8, 256, 32)
    assert rows.group_count(p, x, 10 ** 6, 4, 2, rows.kept_bytes(p, (w32,))) == 49
    assert rows.group_count(p, x, 10 ** 6, 5, 2) == 16    # not kept: registers, 1 an SM
    assert rows.backward_plan(x, "float32", 65536, 5, w32, sums=1) == (
        rows.plan_fitting(x, "float32", 65536, 5), 0)
    with rows.plan_options(keep=True):
        assert rows.backward_plan(x, "float32", 65536, 5, w32, sums=1)[1] == 1
    with rows.plan_options(keep=False):
        assert rows.backward_plan(x, "bfloat16", 65536, 5, w32, sums=1)[1] == 0
        assert rows.backward_plan(x, "bfloat16", 262144, 5, w32, sums=1)[0].kernel == "loop"
    one = rows.plan_for(x, "bfloat16", 16384)
    small = rows.plan_for(x, "bfloat16", 65536)
    mid = rows.plan_for(x, "bfloat16", 131072)
    big = rows.plan_for(x, "bfloat16", 262144)
    assert (one.cluster, small.vec * small.chunks, mid.vec * mid.chunks) == (1, 32, 64)
    assert not rows.keeps(one, x, (w32, w32), 1, forward=True)           # no cluster
    assert not rows.keeps(small, x, (w16,), 1, forward=True)              # 32 elements
    assert rows.keeps(small, x, (w32, w32), 1, forward=True)              # 64
    assert rows.keeps(mid, x, (w16,), 1, forward=True)
    assert rows.keeps(big, x, (w16,), 1, forward=True)
    assert rows.kept_bytes(big, (w32, w32)) == 256 * 1024
    assert not rows.keeps(big, x, (w32, w32), 1, forward=True)            # 256 KB
    wide = rows.plan_for(x, "float32", 131072)                  # 32 elements, persistent
    assert rows.persists(wide, x, 1, True) and rows.keeps(wide, x, (w32,), 1, forward=True)
    assert not rows.keeps(rows.plan_for(x, "float32", 65536), x, (w32,), 1, forward=True)
    with rows.plan_options(keep=True):
        assert rows.keeps(one, x, (w16,), 1, forward=True)
        assert rows.keeps(small, x, (w16,), 1, forward=True)
        assert not rows.keeps(big, x, (w32, w32), 1, forward=True)
    with rows.plan_options(keep=False):
        assert not rows.keeps(big, x, (w16,), 1, forward=True)


def test_thread_chunks_put_each_warps_16_byte_pieces_side_by_side():
    """thread_chunks: element e of thread t's chunk k at e % piece + piece *
    t + (e // piece) * piece * THREADS + k * VEC * THREADS, piece = 16
    bytes of the type (at most VEC): every offset once, and the 16-byte
    pieces of a quarter-warp's eight threads one 128-byte run (no bank
    conflict); a chunk of 16 bytes or less stays whole."""
    VEC, THREADS, CHUNKS = 8, 64, 3
    layout = row_kernels.thread_chunks(Float32, VEC, THREADS, CHUNKS)
    offsets = [[[layout((e, t, k)) for e in range(VEC)] for t in range(THREADS)]
               for k in range(CHUNKS)]
    assert sorted(o for k in offsets for t in k for o in t) == list(range(VEC * THREADS * CHUNKS))
    for k in range(CHUNKS):
        for t in range(THREADS):
            assert offsets[k][t] == [e % 4 + 4 * t + (e // 4) * 4 * THREADS + k * VEC * THREADS
                                     for e in range(VEC)]
        for half in range(2):
            for quarter in range(0, THREADS, 8):
                piece = sorted(o for t in range(quarter, quarter + 8)
                               for o in offsets[k][t][4 * half:4 * half + 4])
                assert piece == list(range(piece[0], piece[0] + 32))
    whole = row_kernels.thread_chunks(BFloat16, VEC, THREADS, CHUNKS)
    assert [whole((e, 5, 1)) for e in range(VEC)] == [e + 8 * 5 + 8 * THREADS for e in range(VEC)]

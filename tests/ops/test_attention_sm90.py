"""attention_sm90, Hopper's forward kernel (TMA, wgmma with P from
registers, warp specialization), on the CPU backend: every element of o
and lse against float64 (tests/ops/test_attention.py's reference and
bounds), outputs poisoned; and its compile for sm_90a."""
import re

import numpy as np
import pytest

from moye import ir
from moye.ops import attention_op, attention_sm90

from .test_attention import BF16, F16, check, qkv


def run(q, k, v, causal=False, scale=None, blocks=None):
    """attention_sm90's o and lse, on NaN-poisoned outputs."""
    o = np.full(q.shape, np.nan, q.dtype)
    lse = np.full(q.shape[:3], np.nan, np.float32)
    scale_ = attention_op.check_scale(scale, q.shape[-1])
    attention_sm90.launch(q, k, v, o, lse, scale_, causal, blocks)
    return o, lse


@pytest.mark.parametrize("B, Hq, Hk, Sq, Sk, D, causal, dtype", [
    (1, 1, 1, 130, 150, 64, False, F16),        # ragged: the last tiles zero-filled by TMA
    (1, 2, 1, 140, 200, 128, True, BF16),       # causal Sq < Sk, GQA
    (1, 1, 1, 200, 70, 64, True, F16),          # causal Sq > Sk: the first 130 rows see nothing
    (1, 1, 1, 70, 130, 256, False, F16),        # 64-key tiles
    (2, 2, 2, 1, 40, 128, True, F16),           # one query row
])
def test_every_element(B, Hq, Hk, Sq, Sk, D, causal, dtype):
    q, k, v = qkv(Sq * Sk + D, dtype, B, Hq, Hk, Sq, Sk, D)
    o, lse = run(q, k, v, causal)
    check(q, k, v, o, lse, causal)


@pytest.mark.parametrize("blocks, Sq, Sk, D, causal", [
    (1, 300, 200, 64, True),        # one block walks all 6 query blocks, 3 of them see nothing
    (2, 300, 420, 64, False),
    (4, 260, 300, 128, True),       # 6 items over 4 blocks: 2 take two
    (2, 140, 170, 256, True),
])
def test_persistent_blocks_walk_the_query_blocks(blocks, Sq, Sk, D, causal):
    """Fewer blocks than query blocks (persistent): each walks query blocks
    in turn, every head's last first, Q reloaded once the last one's O has
    left shared memory, the K and V rings carried on; the same bits as a
    block a query block, and under the race check."""
    from moye.backend.cpu import race_checking
    q, k, v = qkv(Sq + Sk + D + blocks, F16, 1, 2, 1, Sq, Sk, D)
    want = run(q, k, v, causal, blocks=2 * -(-Sq // attention_sm90.TILES[D][0]))
    with race_checking():
        got = run(q, k, v, causal, blocks=blocks)
    check(q, k, v, *got, causal)
    for g, w in zip(got, want):
        assert np.array_equal(g, w, equal_nan=True)


@pytest.mark.parametrize("B, Hq, Hk, Sq, Sk, causal, dtype", [
    (1, 1, 1, 200, 300, True, F16),     # block 1: one warpgroup's rows cut by Sq, two past it
    (1, 2, 1, 300, 200, True, BF16),    # Sq > Sk: warpgroups that see no key, GQA
    (1, 1, 1, 450, 460, True, F16),     # every warpgroup a different count of tiles
    (2, 1, 1, 70, 330, False, F16),     # one warpgroup's rows in Sq: the others issue nothing
])
def test_three_warpgroups_each_see_their_own_tiles(B, Hq, Hk, Sq, Sk, causal, dtype):
    """Head dim 64's 192-row blocks (three consumer warpgroups taking
    turns): a warpgroup whose rows see fewer key tiles than the block
    issues no wgmma past them but keeps taking its turns; every element
    against float64, race-checked."""
    from moye.backend.cpu import race_checking
    assert attention_sm90.TILES[64][0] == 192
    q, k, v = qkv(Sq * 7 + Sk, dtype, B, Hq, Hk, Sq, Sk, 64)
    with race_checking():
        o, lse = run(q, k, v, causal)
    check(q, k, v, o, lse, causal)


def test_views_with_a_scale():
    """(B, S, H, D) arrays seen as (B, H, S, D): TMA reads the strides."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 90, 2, 64)).astype(F16).transpose(0, 2, 1, 3)
               for _ in range(3))
    o, lse = run(q, k, v, causal=True, scale=0.3)
    check(q, k, v, o, lse, True, 0.3)


def test_numpy_arrays_take_the_mma_sync_kernel():
    """kernels_for: the wgmma kernel is for head dims 64, 128 and 256 on sm_90
    CUDA devices; NumPy arrays (the CPU backend) take the mma.sync one."""
    for d in (64, 96, 128, 256):
        assert attention_op.kernels_for(np.zeros((1, 1, 8, d), F16), d) is \
            attention_op.attention_sm80


def _compiled(d, causal, Sk=300):
    """(C++, NVRTC's ptxas log) of the kernel for head dim d and Sk keys,
    sm_90a."""
    from moye.backend.cuda import nvrtc
    from moye.compiler.frontend import BACKENDS
    q, k = np.zeros((1, 2, 300, d), F16), np.zeros((1, 1, Sk, d), F16)
    launched = {}

    def capture(kernel, config, args, backend):
        launched.update(kernel=kernel, threads=config[1], args=args)
    original = attention_sm90.replay.launch
    attention_sm90.replay.launch = capture
    try:
        attention_sm90.launch(q, k, k, np.zeros_like(q), np.zeros((1, 2, 300), np.float32), 0.1,
                              causal)
    finally:
        attention_sm90.replay.launch = original
    kernel = launched["kernel"].trace(*launched["args"], block=launched["threads"])[0]
    source = BACKENDS["cuda"].source(kernel, (launched["threads"], 1, 1))
    return source, nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], "sm_90a",
                                      options=("--ptxas-options=-v",)).log or ""


@pytest.mark.parametrize("d, causal, Sk, spill_limit, consumers", [
    (64, True, 300, 80, 3), (64, False, 5000, 80, 3), (128, False, 300, 0, 2),
    (256, True, 300, 160, 2)])
def test_compiles_for_sm90a_with_spills_bounded(d, causal, Sk, spill_limit, consumers):
    """No spills at head dim 128, at most 160 B at 256 (O's 128 accumulators
    beside S_j's and P_{j-1}'s: see TILES) and 80 at 64 (three warpgroups
    of 160 registers, walking query blocks where K is short); none of ptxas's
    performance losses (C75xx: setmaxnreg ignored, wgmma serialized where a
    warpgroup's branch past its tiles met the others'); the consumers'
    registers for two or three warpgroups; the PV wgmma takes its A from
    registers, the loads are TMA's and so is O's store."""
    source, log = _compiled(d, causal, Sk)
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    assert spills and max(spills) <= spill_limit, log
    assert not re.search(r"\(C75\d\d\)", log), log
    assert "setmaxnreg.inc.sync.aligned.u32 %d" % {2: 240, 3: 160}[consumers] in source
    rs = r"wgmma\.mma_async\.sync\.aligned\.m64n%dk16\.f32\.f16\.f16 \{[^}]*\}, \{%%\d+, %%\d+, " \
        r"%%\d+, %%\d+\}" % d                 # D, then A's four registers
    assert re.search(rs, source)
    assert "cp.async.bulk.tensor.4d.shared::cluster.global" in source      # TMA loads
    assert "cp.async.bulk.tensor.4d.global.shared" in source               # O's TMA store
    assert "ex2.approx.ftz.f32" in source and "ex2.approx.f32" not in source   # no fixups


def assert_within_an_ulp(got, want, dtype):
    """Every element of `got` within one unit in the last place of `want`
    (16-bit `dtype`): float32 sums added in another order, then rounded."""
    bits = 10 if dtype == F16 else 7
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert not np.isnan(g).any()
    assert (np.abs(g - w) <= np.abs(w) * 2.0 ** -bits + 2.0 ** -24).all(), np.abs(g - w).max()


@pytest.mark.parametrize("B, Hq, Hk, Sq, Sk, D, causal, dtype", [
    (1, 1, 1, 130, 150, 64, False, F16),
    (1, 2, 1, 140, 200, 128, True, BF16),       # GQA: dK, dV add up both query heads
    (1, 1, 1, 200, 70, 64, True, F16),          # rows that see nothing
    (2, 2, 2, 1, 40, 128, True, F16),
    (1, 1, 1, 100, 300, 64, False, BF16),       # dQ: three key blocks' parts added
    (1, 2, 1, 140, 200, 256, True, F16),        # wide: four key blocks, uneven rings
    (1, 1, 1, 70, 100, 256, False, BF16),
])
def test_backward_is_the_mma_sync_backward(B, Hq, Hk, Sq, Sk, D, causal, dtype):
    """attention_sm90_backward gives dK and dV with the bits of
    attention_sm80_backward (whose gradients tests/ops/test_attention.py
    checks against float64: the same products, tiles and float32 order, by
    wgmma), and dQ within an ulp of its (the key blocks' float32 parts
    added in the order they finish)."""
    from moye.ops import attention_sm90_backward
    q, k, v = qkv(Sq + Sk + D, dtype, B, Hq, Hk, Sq, Sk, D)
    do = np.random.default_rng(Sq).standard_normal(q.shape).astype(dtype)
    dlse = np.random.default_rng(Sk).standard_normal(q.shape[:3]).astype(np.float32)
    o, lse = attention_op.attention(q, k, v, causal, None, True)
    want = attention_op.attention_backward(do, q, k, v, o, lse, causal, None, dlse)
    got = [np.full(t.shape, np.nan, dtype) for t in (q, k, v)]
    attention_sm90_backward.launch(*got, q, k, v, o, do, lse, dlse, 1 / np.sqrt(D), causal)
    assert_within_an_ulp(got[0], want[0], dtype)
    for name, g, w in zip(("dk", "dv"), got[1:], want[1:]):
        assert np.array_equal(g.view(np.uint16), w.view(np.uint16)), name


def _compiled_backward(d, causal):
    """(kernel name, C++, NVRTC's ptxas log) of the Hopper backward kernel
    and dQ's conversion."""
    from moye.backend.cuda import nvrtc
    from moye.compiler.frontend import BACKENDS
    from moye.ops import attention_sm90_backward as bw
    q, k = np.zeros((1, 2, 300, d), F16), np.zeros((1, 1, 300, d), F16)
    lse = np.zeros((1, 2, 300), np.float32)
    launched = []
    original = bw.replay.launch
    bw.replay.launch = lambda kernel, config, args, backend: launched.append((kernel, config,
                                                                              args))
    try:
        bw.launch(q, k, k, q, k, k, q, q, lse, None, 0.1, causal)
    finally:
        bw.replay.launch = original
    for kernel, (grid, block), args in launched[1:]:            # after attention_row_dots
        traced = kernel.trace(*args, block=block)[0]
        source = BACKENDS["cuda"].source(traced, (block, 1, 1))
        yield traced.name, source, nvrtc.compile_cuda(
            source, [ir.symbol(traced.name)], "sm_90a", options=("--ptxas-options=-v",)).log or ""


@pytest.mark.parametrize("d, causal, spill_limit", [(64, False, 64), (64, True, 64),
                                                    (128, False, 0), (128, True, 0),
                                                    (256, False, 0), (256, True, 0)])
def test_backward_compiles_for_sm90a(d, causal, spill_limit):
    """The kernel compiles with spills bounded (at 64, whose 128-query tiles
    hold S^T and dP^T in 128 registers, a few spill; it still runs faster
    than 64-query tiles without spills: benchmarks/RESULTS.md) and without
    ptxas's
    performance losses (C75xx: setmaxnreg ignored, a wgmma wait it had to
    add, wgmma serialized), with 4-D TMA loads and the TMA reduce-adds of
    dQ's parts; dV and dK by wgmma with A from registers, or at 256 from
    shared memory (128 columns a warpgroup, S^T and dP^T 32)."""
    (name, source, log), (_, _, convert_log) = _compiled_backward(d, causal)
    for text, limit in ((log, spill_limit), (convert_log, 0)):
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", text)]
        assert spills and max(spills) <= limit, text
    assert not re.search(r"\(C75\d\d\)", log), log
    if d == 256:
        for n in (128, 32):
            assert re.search(r"m64n%dk16\.f32\.f16\.f16 \{[^}]*\}, %%\d+, %%\d+, p" % n,
                             source), n
    else:
        assert re.search(r"m64n%dk16\.f32\.f16\.f16 \{[^}]*\}, \{%%\d+, %%\d+, %%\d+, %%\d+\}"
                         % d, source), name
    assert "cp.async.bulk.tensor.4d.shared::cluster.global" in source, name
    assert "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add" in source, name


def test_every_kernel_race_checked():
    """The mma.sync and wgmma kernels, forward and backward, causal with
    GQA, under the CPU backend's race check (shared memory written and read
    by other threads without a barrier or mbarrier between is an error)."""
    from moye.backend.cpu import race_checking
    from moye.ops import attention_sm90_backward
    q, k, v = qkv(11, F16, 1, 2, 1, 70, 90, 64)
    do = np.random.default_rng(12).standard_normal(q.shape).astype(F16)
    with race_checking():
        o, lse = attention_op.attention(q, k, v, True, None, True)
        want = attention_op.attention_backward(do, q, k, v, o, lse, True)
        o90, lse90 = run(q, k, v, causal=True)
        got = [np.full(t.shape, np.nan, F16) for t in (q, k, v)]
        attention_sm90_backward.launch(*got, q, k, v, o, do, lse, None, 0.125, True)
    check(q, k, v, o, lse, True)
    check(q, k, v, o90, lse90, True)
    assert_within_an_ulp(got[0], want[0], F16)
    for g, w in zip(got[1:], want[1:]):
        assert np.array_equal(g.view(np.uint16), w.view(np.uint16))


def test_wide_backward_race_checked():
    """The head-dim-256 backward (P^T and dS^T through shared memory, dQ's
    parts staged in the tiles' own dO and Q halves, the next tile's S^T and
    dP^T issued before dQ) under the race check, GQA and causal over three
    key blocks and two query tiles."""
    from moye.backend.cpu import race_checking
    from moye.ops import attention_sm90_backward
    q, k, v = qkv(13, F16, 1, 2, 1, 70, 130, 256)
    do = np.random.default_rng(14).standard_normal(q.shape).astype(F16)
    o, lse = attention_op.attention(q, k, v, True, None, True)
    want = attention_op.attention_backward(do, q, k, v, o, lse, True)
    got = [np.full(t.shape, np.nan, F16) for t in (q, k, v)]
    with race_checking():
        attention_sm90_backward.launch(*got, q, k, v, o, do, lse, None, 1 / 16, True)
    assert_within_an_ulp(got[0], want[0], F16)
    for g, w in zip(got[1:], want[1:]):
        assert np.array_equal(g.view(np.uint16), w.view(np.uint16))

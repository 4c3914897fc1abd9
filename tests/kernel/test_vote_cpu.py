"""moye.ballot, the warp vote: every lane against NumPy on the CPU backend,
for whole and partial warps and under branches, and compiled by NVRTC."""
import numpy as np
import pytest

import moye
from moye.compiler.frontend import BACKENDS

from .kernels_for_tests import vote

POISON = np.uint32(0xDEADBEEF)


def ballot_reference(x, block):
    """NumPy's ballot of x > 0: per block of `block` threads, per warp of 32
    (the last one partial), bit j for lane j."""
    want = np.zeros(x.size, np.uint32)
    for start in range(0, x.size, block):
        for w in range(start, start + block, 32):
            stop = min(w + 32, start + block)
            bits = sum(1 << j for j in range(stop - w) if x[w + j] > 0)
            want[w:stop] = bits
    return want


@pytest.mark.parametrize("block", [32, 64, 96, 48])
def test_ballot_of_random_predicates_matches_numpy(block):
    rng = np.random.default_rng(block)
    grid = 3
    x = rng.standard_normal(grid * block).astype(np.float32)
    out = np.full(grid * block, POISON)
    vote[grid, block](out, x)
    np.testing.assert_array_equal(out, ballot_reference(x, block))
    assert (out[:32] == ballot_reference(x, block)[0]).all()        # one mask per warp


@pytest.mark.parametrize("block", [32, 48])
def test_ballot_of_integers_and_constants(block):
    @moye.kernel
    def votes(out, flags):
        i = moye.thread_idx.x
        out[0, i] = moye.ballot(flags[i])               # an Int32: true where non-zero
        out[1, i] = moye.ballot(True)
        out[2, i] = moye.ballot(0)

    flags = np.random.default_rng(1).integers(-2, 3, block).astype(np.int32)
    out = np.full((3, block), POISON)
    votes[1, block](out, flags)
    np.testing.assert_array_equal(out[0], ballot_reference((flags != 0).astype(np.int32), block))
    np.testing.assert_array_equal(out[1], ballot_reference(np.ones(block), block))
    assert (out[1, 32:] == (1 << (block - 32)) - 1).all() and (out[1, :32] == 0xFFFFFFFF).all()
    np.testing.assert_array_equal(out[2], np.zeros(block, np.uint32))


def test_ballot_under_a_branch_that_keeps_warps_whole():
    @moye.kernel
    def even_warps(out, x):
        t = moye.thread_idx.x
        if t // 32 % 2 == 0:
            out[t] = moye.ballot(x[t] > 0)
        else:
            out[t] = t

    rng = np.random.default_rng(5)
    x = rng.standard_normal(128).astype(np.float32)
    out = np.full(128, POISON)
    even_warps[1, 128](out, x)
    want = ballot_reference(x, 128)
    odd = np.arange(128) // 32 % 2 == 1
    want[odd] = np.arange(128)[odd]
    np.testing.assert_array_equal(out, want)


def test_ballot_refuses_a_warp_a_branch_divides():
    @moye.kernel
    def half_warp(out, x):
        t = moye.thread_idx.x
        if t < 16:
            out[t] = moye.ballot(x[t] > 0)

    with pytest.raises(moye.KernelRuntimeError,
                       match=r"ballot needs every thread of its warp, but in warp 0 of block "
                             r"\(0, 0, 0\) 16 of its 32 threads do not execute it"):
        half_warp[1, 32](np.zeros(32, np.uint32), np.ones(32, np.float32))


def test_ballot_refuses_what_is_not_a_predicate():
    @moye.kernel
    def by_name(out):
        out[moye.thread_idx.x] = moye.ballot("yes")

    with pytest.raises(moye.MoyeError, match="ballot: pred must be a Bool or a number, got 'yes'"):
        by_name[1, 32](np.zeros(32, np.uint32))


def test_ballot_is_one_instruction_in_the_ir():
    kernel = vote.trace(np.zeros(64, np.uint32), np.ones(64, np.float32), block=64)[0]
    ballots = [s for s in moye.ir.instructions(kernel.body) if isinstance(s, moye.ir.Ballot)]
    assert len(ballots) == 1 and ballots[0].result.type is moye.UInt32
    assert moye.ir.Ballot.arch is None and not moye.ir.Ballot.pure


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ballot_compiles_with_nvrtc(arch):
    kernel = vote.trace(np.zeros(96, np.uint32), np.ones(96, np.float32), block=48)[0]
    src = BACKENDS["cuda"].source(kernel, (48, 1, 1))
    assert "const uint32_t" in src and "= __ballot_sync(0xffffffffu, " in src
    BACKENDS["cuda"].compile_only(kernel, (48, 1, 1), arch)


# -- vote_any, vote_all, match_any ------------------------------------------------------
@moye.kernel
def votes_and_matches(anys, alls, matches, x, keys):
    i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
    anys[i] = moye.vote_any(x[i] > 1.0)
    alls[i] = moye.vote_all(x[i] > -1.5)
    matches[i] = moye.match_any(keys[i])


def per_warp(block, n):
    """The (start, stop) of each warp of blocks of `block` threads, n threads in all."""
    for start in range(0, n, block):
        for w in range(start, start + block, 32):
            yield w, min(w + 32, start + block)


def vote_reference(x, keys, block):
    anys, alls = np.zeros(x.size, np.int32), np.zeros(x.size, np.int32)
    matches = np.zeros(x.size, np.uint32)
    for w, stop in per_warp(block, x.size):
        anys[w:stop] = (x[w:stop] > 1.0).any()
        alls[w:stop] = (x[w:stop] > -1.5).all()
        for j in range(w, stop):
            matches[j] = sum(1 << (k - w) for k in range(w, stop) if keys[k] == keys[j])
    return anys, alls, matches


@pytest.mark.parametrize("key_dtype", [np.int32, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("block", [32, 96, 48])
def test_votes_and_match_any_match_numpy(block, key_dtype):
    rng = np.random.default_rng(block)
    grid = 3
    n = grid * block
    x = rng.standard_normal(n).astype(np.float32)
    x[:32] = rng.uniform(0.1, 0.9, 32)        # warp 0 of block 0: no x > 1, all x > -1.5
    keys = rng.integers(0, 5, n).astype(key_dtype)
    if np.dtype(key_dtype).itemsize == 8:     # equal low words, different high words
        keys = (keys + (rng.integers(0, 2, n).astype(key_dtype) << key_dtype(40)))
    anys, alls = np.full(n, -7, np.int32), np.full(n, -7, np.int32)
    matches = np.full(n, POISON)
    votes_and_matches[grid, block](anys, alls, matches, x, keys)
    want = vote_reference(x, keys, block)
    np.testing.assert_array_equal(anys, want[0])
    np.testing.assert_array_equal(alls, want[1])
    np.testing.assert_array_equal(matches, want[2])
    assert anys[0] == 0 and alls[0] == 1 and anys.any() and not alls.all()


def test_votes_refuse_a_warp_a_branch_divides():
    @moye.kernel
    def half_warp(out, x):
        t = moye.thread_idx.x
        if t < 20:
            out[t] = moye.vote_all(x[t] > 0)

    with pytest.raises(moye.KernelRuntimeError,
                       match=r"vote_all needs every thread of its warp, but in warp 0 of block "
                             r"\(0, 0, 0\) 12 of its 32 threads do not execute it"):
        half_warp[1, 64](np.zeros(64, np.int32), np.ones(64, np.float32) - 2)

    @moye.kernel
    def odd_lanes(out, x):
        t = moye.thread_idx.x
        if t % 2 == 1:
            out[t] = moye.match_any(x[t])

    with pytest.raises(moye.KernelRuntimeError, match="match_any needs every thread of its "
                                                      "warp"):
        odd_lanes[1, 32](np.zeros(32, np.uint32), np.ones(32, np.int32))


def test_votes_and_match_refuse_bad_values():
    @moye.kernel
    def bad(out, x, f, case: moye.Constexpr):
        t = moye.thread_idx.x
        if case == "any":
            out[t] = moye.vote_any([1])
        elif case == "float":
            out[t] = moye.match_any(f[t])
        else:
            out[t] = moye.match_any(3)

    args = np.zeros(32, np.uint32), np.ones(32, np.int32), np.ones(32, np.float32)
    with pytest.raises(moye.MoyeError, match=r"vote_any: pred must be a Bool or a number, "
                                             r"got \[1\]"):
        bad[1, 32](*args, "any")
    with pytest.raises(moye.MoyeError, match="match_any: value is Float32; match_any takes "
                                             "Int32, UInt32, Int64, UInt64"):
        bad[1, 32](*args, "float")
    with pytest.raises(moye.MoyeError, match="match_any: value must be a dynamic Int32"):
        bad[1, 32](*args, "constant")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("key_dtype", [np.int32, np.uint64])
def test_votes_and_match_compile_with_nvrtc(arch, key_dtype):
    kernel = votes_and_matches.trace(np.zeros(96, np.int32), np.zeros(96, np.int32),
                                     np.zeros(96, np.uint32), np.ones(96, np.float32),
                                     np.ones(96, key_dtype), block=48)[0]
    src = BACKENDS["cuda"].source(kernel, (48, 1, 1))
    for call in ("__any_sync(0xffffffffu, ", "__all_sync(0xffffffffu, ",
                 "__match_any_sync(0xffffffffu, "):
        assert call in src
    BACKENDS["cuda"].compile_only(kernel, (48, 1, 1), arch)

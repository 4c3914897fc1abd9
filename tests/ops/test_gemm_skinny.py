"""gemm_skinny, moye.ops.matmul's kernel for M <= 16, on the CPU backend:
every element against float64 (outputs poisoned first) for both majors of
b, ragged N and K, batches, splits along K and the fused epilogue; which
calls the op sends to it; its refusals; and its C++ for sm_90a and sm_80."""
import re

import ml_dtypes
import numpy as np
import pytest

from moye import MoyeError, ir, ops
from moye.backend.cuda import nvrtc
from moye.compiler.frontend import BACKENDS
from moye.ops import gemm_skinny, gemm_sm80, gemm_sm90, matmul_op

from .test_matmul import assert_close, operand, reference

rng = np.random.default_rng(16)
BF16 = ml_dtypes.bfloat16


def operands(B, M, N, K, dtype, major, shared=None):
    """a (Ba, M, K) K-major and b (Bb, N, K), K-major or N-major (a
    transposed view of (Bb, K, N)); `shared` ("a" or "b") of one batch."""
    a = operand((1 if shared == "a" else B, M, K), dtype)
    Bb = 1 if shared == "b" else B
    b = operand((Bb, N, K), dtype) if major == "K" else \
        np.ascontiguousarray(operand((Bb, K, N), dtype)).transpose(0, 2, 1)
    return a, b


def reference3(a, b, bias, activation, residual, alpha):
    return reference(a, np.swapaxes(b, 1, 2), bias, activation, residual, alpha)


@pytest.mark.parametrize("M, N, K, major, cfg", [
    (1, 40, 64, "K", gemm_skinny.config(1, 2, 2)),          # two column blocks, one ragged
    (3, 72, 136, "K", gemm_skinny.config(2, 4, 3)),         # K's last chunk partial, 3 splits
    (16, 100, 200, "K", gemm_skinny.config(4, 4, 1)),
    (9, 24, 48, "K", gemm_skinny.config(4, 4, 5)),          # more splits than chunks
    (5, 64, 72, "MN", gemm_skinny.config(8, 2, 2)),
    (16, 136, 264, "MN", gemm_skinny.config(8, 4, 3)),
    (7, 16, 8, "MN", gemm_skinny.config(8, 2, 1)),          # one piece of K
    (11, 200, 328, "MN", gemm_skinny.config(8, 2, 4, 2)),   # rows g + 8, 2 warps, 4 splits
])
@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_every_element(M, N, K, major, cfg, dtype):
    a, b = operands(2, M, N, K, dtype, major)
    bias, residual = operand((N,), np.float32), operand((2, M, N), dtype)
    out = np.full((2, M, N), np.nan, dtype)
    gemm_skinny.launch(a, b, out, bias=bias, residual=residual, alpha=0.5, activation="relu",
                       cfg=cfg)
    assert_close(out, reference3(a, b, bias, "relu", residual, 0.5), a, np.swapaxes(b, 1, 2))


@pytest.mark.parametrize("shared", ["a", "b"])
@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_batches_shared_operands_and_float32_out(shared, activation):
    a, b = operands(3, 4, 48, 80, BF16, "K", shared)
    out = np.full((3, 4, 48), np.nan, np.float32)
    gemm_skinny.launch(a, b, out, activation=activation, cfg=gemm_skinny.config(2, 2, 2))
    assert_close(out, reference3(a, b, None, activation, None, 1.0), a, np.swapaxes(b, 1, 2))


def test_an_out_of_any_strides():
    a, b = operands(1, 6, 32, 64, np.float16, "MN")
    out = np.full((1, 32, 6), np.nan, np.float16).transpose(0, 2, 1)     # column-major
    gemm_skinny.launch(a, b, out, cfg=gemm_skinny.config(8, 2, 1))
    assert_close(out, reference3(a, b, None, None, None, 1.0), a, np.swapaxes(b, 1, 2))


def test_eligible():
    x, w = np.zeros((1, 16, 64), np.float16), np.zeros((1, 48, 64), np.float16)
    assert gemm_skinny.eligible(x, w)
    assert gemm_skinny.eligible(x, np.zeros((1, 64, 48), np.float16).transpose(0, 2, 1))
    assert not gemm_skinny.eligible(np.zeros((1, 17, 64), np.float16), w)    # M > 16
    assert not gemm_skinny.eligible(x[..., :60], w[..., :60])                 # K % 8
    assert not gemm_skinny.eligible(x.transpose(0, 2, 1).copy().transpose(0, 2, 1), w)  # a M-major
    assert not gemm_skinny.eligible(x, np.zeros((1, 64, 44), np.float16).transpose(0, 2, 1))
    assert not gemm_skinny.eligible(x.astype(np.float32), w.astype(np.float32))
    assert not gemm_skinny.eligible(x, w.astype(BF16))
    padded = np.zeros((1, 48, 68), np.float16)[..., :64]          # rows 136 bytes apart
    assert not gemm_skinny.eligible(x, padded)
    unaligned = np.zeros(1 * 48 * 64 + 1, np.float16)[1:].reshape(1, 48, 64)
    assert not gemm_skinny.eligible(x, unaligned)


@pytest.mark.parametrize("bad", [dict(tiles=3), dict(steps=8), dict(splits=0), dict(splits=33),
                                 dict(warps=3)])
def test_config_refuses(bad):
    with pytest.raises(MoyeError, match="gemm_skinny.config"):
        gemm_skinny.config(**bad)


def test_launch_refuses_what_it_cannot_compute():
    x, w = np.zeros((1, 4, 60), np.float16), np.zeros((1, 48, 60), np.float16)
    with pytest.raises(MoyeError, match="not for this kernel"):
        gemm_skinny.launch(x, w, np.zeros((1, 4, 48), np.float16))
    wt = np.zeros((1, 64, 48), np.float16).transpose(0, 2, 1)
    with pytest.raises(MoyeError, match="N-major b takes 8"):
        gemm_skinny.launch(np.zeros((1, 4, 64), np.float16), wt, np.zeros((1, 4, 48), np.float16),
                           cfg=gemm_skinny.config(4, 4, 1))


def test_candidates_and_default():
    for major, count in (("K", 6), ("MN", 3)):
        cands = gemm_skinny.candidates(1, 4096, 14336, major=major)
        assert len(cands) == len(set(cands)) == count
        assert gemm_skinny.default_config(1, 4096, 14336, major=major) in cands
        assert all(gemm_skinny.is_config(c) and (c[2] == 8) == (major == "MN") for c in cands)
    # N-major: blocks of 2 warps, 4 blocks a multiprocessor at up to 4 rows (32 column blocks x
    # 16 splits over 132), 3 above, each split at least 16 chunks of 32 k's; 3/4 and 5/4 of that
    # (one more at least), at most MAX_SPLITS
    assert gemm_skinny.candidates(1, 4096, 14336, major="MN") == \
        [gemm_skinny.config(8, 2, s, 2) for s in (12, 16, 20)]
    assert gemm_skinny.default_config(16, 4096, 14336, major="MN")[4] == 12      # 3 a processor
    assert [c[4] for c in gemm_skinny.candidates(1, 1024, 14336, major="MN")] == [21, 28]
    assert [c[4] for c in gemm_skinny.candidates(1, 4096, 4096, major="MN")] == [6, 8, 10]
    assert [c[4] for c in gemm_skinny.candidates(1, 1024, 96, major="MN")] == [1, 2]
    assert gemm_skinny.candidates(4, 8192, 8192, 2, major="MN") == \
        [gemm_skinny.config(8, 2, s, 2) for s in (3, 4, 5)]
    # a split per chunk at most: K = 64 is one chunk of 16 * 4 k's
    assert {c[4] for c in gemm_skinny.candidates(1, 64, 64)} == {1}
    assert not gemm_skinny.is_config(gemm_sm90.CONFIGS[0])


def _sent(monkeypatch):
    """(kernel module, config) of each launch the op makes, in order."""
    sent = []
    for module in (gemm_skinny, gemm_sm90):
        real = module.launches

        def spy(*args, _real=real, _name=module.__name__.rsplit(".", 1)[1], **kwargs):
            sent.append((_name, kwargs["cfg"]))
            return _real(*args, **kwargs)
        monkeypatch.setattr(module, "launches", spy)
    return sent


@pytest.mark.parametrize("M, K, tb, hopper, kernel", [
    (1, 64, False, True, "gemm_sm90"),      # Hopper: a swapped tile of gemm_sm90
    (4, 72, True, True, "gemm_sm90"),
    (1, 64, False, False, "gemm_skinny"),   # sm_80-89: gemm_skinny, where it applies
    (16, 64, True, False, "gemm_skinny"),
    (4, 60, False, True, "gemm_sm90"),      # K % 8: not gemm_skinny's
    ])
def test_the_op_sends_few_rows_here(monkeypatch, M, K, tb, hopper, kernel):
    sent = _sent(monkeypatch)
    if not hopper:
        monkeypatch.setattr(matmul_op, "_kernel_for", lambda out: gemm_sm80)
    a, b = operand((M, K), np.float16), operand((K, 40), np.float16, tb)
    bias = operand((40,), np.float16)
    out = np.full((M, 40), np.nan, np.float16)
    ops.matmul(a, b, bias=bias, activation="gelu_tanh", out=out)
    assert [name for name, _ in sent] == [kernel]
    if kernel == "gemm_sm90":
        assert gemm_sm90.kernel_tile(sent[0][1])[2], sent     # swapped: out's rows are few
    assert_close(out, reference(a, b, bias, "gelu_tanh"), a, b)


def test_torch_calls_replay_it(monkeypatch):
    """Off Hopper (on Hopper the few rows run gemm_sm90's swapped tiles,
    whose TMA copies the CPU backend does not replay)."""
    torch = pytest.importorskip("torch")
    from moye.ops import replay
    replay.forget()                 # no record of this signature from another test
    monkeypatch.setattr(matmul_op, "_kernel_for", lambda out: gemm_sm80)
    sent = _sent(monkeypatch)
    for _ in range(3):
        x, w = torch.randn(2, 2, 64).bfloat16(), torch.randn(48, 64).bfloat16()
        y = ops.linear(x, w, activation="relu")
        ref = np.maximum(reference(x.float().numpy(), w.float().numpy().T), 0)
        assert_close(y.float().numpy().astype(BF16), ref, x.float().numpy(), w.float().numpy().T)
    assert [name for name, _ in sent] == ["gemm_skinny"]  # the first call ran it; others replayed


def _source(cfg, major, dtype=np.float16):
    a, b = operands(1, 16, 4096, 4096, dtype, major)
    out = np.zeros((1, 16, 4096), dtype)
    (kern, (grid, block), args), = gemm_skinny.launches(
        a, b, out, bias=np.zeros(4096, np.float32), residual=out, alpha=1.0, beta=1.0,
        activation="gelu", cfg=cfg)
    kernel = kern.trace(*args, block=block)[0]
    return kernel, BACKENDS["cuda"].source(kernel, (block, 1, 1))


@pytest.mark.parametrize("cfg, major", [(gemm_skinny.config(4, 4, 8), "K"),
                                        (gemm_skinny.config(2, 4, 1), "K"),
                                        (gemm_skinny.config(8, 2, 10, 2), "MN"),
                                        (gemm_skinny.config(8, 2, 1, 2), "MN")])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_compiles_without_spills_its_loads_16_bytes_in_a_loop(cfg, major, arch):
    """No spills for sm_90a; for sm_80 ptxas keeps 2 n-tiles' kernel to 56
    registers and spills 4 bytes of the gelu epilogue (8 at most)."""
    kernel, source = _source(cfg, major, BF16 if arch == "sm_90a" else np.float16)
    loop = source[source.index("for ("):]
    assert loop.count("uint4") >= 2 * 4 * cfg[3] // 8 and "mma.sync" in loop
    assert "ld.shared" not in source and "__shared__ __align__(128) half" not in source
    log = nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], arch,
                             options=("--ptxas-options=-v",)).log or ""
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log)]
    assert spills and max(spills) <= (0 if arch == "sm_90a" else 8), log
    registers = int(re.search(r"Used (\d+) registers", log).group(1))
    assert registers <= 168, log     # 3 blocks of 128 threads a multiprocessor fit (65,536 registers)


def test_the_tuned_configs_include_these():
    problem = (1, 4096, 4096, 1, 132, "torch.float16", "torch.float16", "K", "K", False, False,
               None, True, True)
    tuned = {c.cfg for c in matmul_op._problem_configs(matmul_op._timed.configs, problem)}
    assert set(gemm_skinny.candidates(1, 4096, 4096)) <= tuned
    assert set(gemm_sm90.candidates(1, 4096, 4096)) <= tuned
    assert any(gemm_sm90.kernel_tile(c)[2] for c in tuned)      # swapped tiles among them
    for M in (1, 16):           # on Hopper the heuristic takes gemm_sm90's swapped tile
        default = matmul_op._problem_default((M,) + problem[1:]).cfg
        assert default == gemm_sm90.default_config(M, 4096, 4096) and \
            gemm_sm90.kernel_tile(default)[2]
    off_hopper = problem[:-2] + (False, True)
    assert {c.cfg for c in matmul_op._problem_configs(matmul_op._timed.configs, off_hopper)} == \
        set(gemm_skinny.candidates(1, 4096, 4096))
    assert matmul_op._problem_default(off_hopper).cfg == gemm_skinny.default_config(1, 4096, 4096)
    m_major_a = problem[:7] + ("MN",) + problem[8:]
    assert not any(gemm_sm90.kernel_tile(c.cfg)[2]
                   for c in matmul_op._problem_configs(matmul_op._timed.configs, m_major_a))


def test_a_split_launch_leaves_its_tickets_zero_for_the_next():
    """The block that takes a column block's last ticket zeroes it again:
    a second launch on the same workspace (workspace.py keeps it between
    calls) counts from zero too. The tickets sit at gemm_sm90.TICKETS, as
    in gemm_sm90's arguments."""
    a, b = operands(2, 2, 72, 256, np.float16, "K")
    out = np.full((2, 2, 72), np.nan, np.float16)
    (kern, dims, args), = gemm_skinny.launches(a, b, out, bias=None, residual=None, alpha=1.0,
                                               beta=1.0, activation=None,
                                               cfg=gemm_skinny.config(2, 4, 4))
    tickets = args[gemm_sm90.TICKETS]
    assert tickets.dtype == np.int32 and tickets.shape == (2 * 2,)      # 2 column blocks, 2 batches
    for _ in range(2):
        out[...] = np.nan
        kern[dims](*args)
        assert not tickets.any()
        assert_close(out, reference3(a, b, None, None, None, 1.0), a, np.swapaxes(b, 1, 2))


def test_a_workspace_past_int32_offsets_is_refused():
    a, b = operands(1, 16, 48, 4096, np.float16, "K")
    huge = np.lib.stride_tricks.as_strided(np.zeros(1, np.float16), (1, 16, 2**24), (0, 0, 0))
    with pytest.raises(MoyeError, match="past 2\\*\\*31 - 1: fewer splits"):
        gemm_skinny.launches(a, b, huge, bias=None, residual=None, alpha=1.0, beta=1.0,
                             activation=None, cfg=gemm_skinny.config(4, 4, 32))


def test_off_hopper_an_unaligned_out_is_written_in_place(monkeypatch):
    """Off Hopper (gemm_sm80's devices) few rows run gemm_skinny, which
    stores any out from its registers: an out of 45 columns gets no padded
    copy, so a repeat call replays the first (a copy is host work)."""
    torch = pytest.importorskip("torch")
    from moye.ops import gemm_sm80, replay
    replay.forget()
    monkeypatch.setattr(matmul_op, "_kernel_for", lambda out: gemm_sm80)
    sent = _sent(monkeypatch)
    for _ in range(3):
        a, b = torch.randn(2, 64).half(), torch.randn(45, 64).half().T
        y = ops.matmul(a, b, activation="silu")
        assert_close(y.numpy(), reference(a.numpy(), b.numpy(), None, "silu"), a.numpy(),
                     b.numpy())
    assert [name for name, _ in sent] == ["gemm_skinny"]

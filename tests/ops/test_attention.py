"""moye.ops.attention on the CPU backend: every element of o and lse against
a float64 NumPy reference, outputs poisoned first; each head dim, causal
masking aligned to the bottom right (Sq == Sk, Sq < Sk, Sq > Sk with rows
that see no key), GQA and MQA, non-contiguous views, a custom scale, one
query and one key; the inputs left as they were; and the errors."""
import math
import re

import ml_dtypes
import numpy as np
import pytest

from moye import MoyeError, ops

BF16 = ml_dtypes.bfloat16
F16 = np.float16
# Where o's error comes from: the scores and the row sums are float32 (their
# errors, about D * 2**-24 of the scores, move p by far less than the inputs'
# rounding), but P = exp(S - m), in [0, 1], is rounded to the inputs' 16-bit
# type (unit roundoff u = 2**-11 for float16, 2**-8 for bfloat16) before P @ V.
# Each p_j is then off by at most u * p_j, so sum_j p_j v_j / l by at most
# u * sum_j p_j |v_j| / l <= u * max |v| over the keys the row sees; a row sum
# l taken from the unrounded P adds as much again (float16's subnormals, p <
# 2**-14, add at most 2**-25 * max |v| a key: nothing at 130 keys). So about
# 2u times the row's max |v|: ATOL is that max |v| times 8u (float16) or 4u
# (bfloat16); RTOL, one epsilon (2u), covers rounding o to the output type.
ATOL = {np.dtype(F16): 2.0 ** -8, np.dtype(BF16): 2.0 ** -6}
RTOL = {np.dtype(F16): 2.0 ** -10, np.dtype(BF16): 2.0 ** -7}
LSE_ATOL = 1e-3         # float32 math on scores of about 1


def visible(Sq, Sk, causal):
    """(Sq, Sk) bools: query i sees key j (causal: j <= i + Sk - Sq)."""
    if not causal:
        return np.ones((Sq, Sk), bool)
    return np.arange(Sk)[None, :] <= np.arange(Sq)[:, None] + (Sk - Sq)


def reference(q, k, v, causal=False, scale=None):
    """(o, lse) in float64; a row that sees no key gets o = 0, lse = -inf."""
    qd, kd, vd = (np.asarray(x, np.float64) for x in (q, k, v))
    Hq, Sq, D = qd.shape[1:]
    groups = Hq // kd.shape[1]
    kd, vd = np.repeat(kd, groups, 1), np.repeat(vd, groups, 1)   # head h reads h // groups
    scale = 1 / math.sqrt(D) if scale is None else scale
    s = np.where(visible(Sq, kd.shape[2], causal), qd @ kd.swapaxes(-1, -2) * scale, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)                                  # 0 where masked
    l = e.sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = (np.log(l) + m)[..., 0]                  # -inf where l == 0
    return (e / np.where(l > 0, l, 1)) @ vd, lse


def row_scale(v, Hq, Sq, causal):
    """(B, Hq, Sq): max |v| over the keys each query row sees (0 for none)."""
    vmax = np.repeat(np.abs(np.asarray(v, np.float64)).max(-1), Hq // v.shape[1], 1)
    return np.where(visible(Sq, v.shape[2], causal), vmax[:, :, None, :], 0.0).max(-1)


def first_bad(bad, got, want, bound, what):
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        pytest.fail(f"{bad.sum()} of {bad.size} elements of {what} off, first at {i}: "
                    f"{got[i]} vs {want[i]} (bound {bound[i]})")


def check(q, k, v, o, lse=None, causal=False, scale=None):
    """o (and lse) against the reference, every element."""
    want, want_lse = reference(q, k, v, causal, scale)
    dtype = np.dtype(q.dtype)
    assert isinstance(o, np.ndarray) and o.dtype == dtype and o.shape == q.shape
    bound = (ATOL[dtype] * row_scale(v, q.shape[1], q.shape[2], causal)[..., None] +
             RTOL[dtype] * np.abs(want))                 # exactly 0 where a row sees nothing
    got = o.astype(np.float64)
    first_bad(~(np.abs(got - want) <= bound), got, want, bound, "o")
    if lse is not None:
        assert isinstance(lse, np.ndarray) and lse.dtype == np.float32
        assert lse.shape == q.shape[:3]
        finite = np.isfinite(want_lse)
        got = lse.astype(np.float64)
        with np.errstate(invalid="ignore"):             # -inf - -inf
            bad = np.where(finite, ~(np.abs(got - want_lse) <= LSE_ATOL), got != -np.inf)
        first_bad(bad, got, want_lse, np.where(finite, LSE_ATOL, 0.0), "lse")


def data(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def qkv(seed, dtype, B, Hq, Hk, Sq, Sk, D):
    rng = np.random.default_rng(seed)
    return data(rng, (B, Hq, Sq, D), dtype), *(data(rng, (B, Hk, Sk, D), dtype) for _ in "kv")


def attend(q, k, v, **kwargs):
    """ops.attention(q, k, v, **kwargs); the inputs left bit for bit as they
    were, the outputs new arrays."""
    before = [x.copy() for x in (q, k, v)]
    out = ops.attention(q, k, v, **kwargs)
    for name, x, x0 in zip("qkv", (q, k, v), before):
        assert np.array_equal(x.view(np.uint16), x0.view(np.uint16)), f"{name} was written"
    for y in out if kwargs.get("return_lse") else (out,):
        assert not any(np.shares_memory(y, x) for x in (q, k, v))
    return out


def test_reference_against_a_direct_formula():
    """One key: o = v, lse = the score. And a small causal GQA case with
    Sq > Sk (row 0 sees nothing), a loop over rows, heads and keys."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 1, 4)) for _ in "qkv")
    o, lse = reference(q, k, v, scale=0.5)
    np.testing.assert_allclose(o, v, rtol=1e-15)
    np.testing.assert_allclose(lse, 0.5 * (q * k).sum(-1), rtol=1e-14)

    q, k, v = rng.standard_normal((2, 4, 3, 5)), *rng.standard_normal((2, 2, 2, 2, 5))
    o, lse = reference(q, k, v, causal=True)
    for b, h, i in np.ndindex(2, 4, 3):
        keys = range(i + 2 - 3 + 1)                     # j <= i + Sk - Sq
        s = [q[b, h, i] @ k[b, h // 2, j] / math.sqrt(5) for j in keys]
        if not s:
            assert (o[b, h, i] == 0).all() and lse[b, h, i] == -np.inf
            continue
        w = np.exp(s)
        np.testing.assert_allclose(o[b, h, i], sum(w[j] * v[b, h // 2, j] for j in keys) / w.sum(),
                                   rtol=1e-12)
        np.testing.assert_allclose(lse[b, h, i], math.log(w.sum()), rtol=1e-12)


@pytest.mark.parametrize("D, S, dtype", [(64, 72, F16), (96, 80, F16), (128, 70, BF16),
                                         (256, 77, F16)])
def test_each_head_dim(D, S, dtype):
    """The default scale, 1/sqrt(D); o alone without return_lse."""
    q, k, v = qkv(D, dtype, 1, 1, 1, S, S, D)
    check(q, k, v, attend(q, k, v))


@pytest.mark.parametrize("Sq, Sk, dtype", [
    (100, 100, F16),            # ragged: the diagonal crosses a 64-row tile
    (40, 130, BF16),            # row i sees keys 0 to i + 90
    (130, 40, F16),             # rows 0-89 see nothing: o = 0, lse = -inf
])
def test_causal(Sq, Sk, dtype):
    q, k, v = qkv(Sq + Sk, dtype, 1, 2, 2, Sq, Sk, 64)
    o, lse = attend(q, k, v, causal=True, return_lse=True)
    check(q, k, v, o, lse, causal=True)
    blind = max(Sq - Sk, 0)
    assert (o[:, :, :blind] == 0).all() and (lse[:, :, :blind] == -np.inf).all()
    assert np.isfinite(lse[:, :, blind:]).all()


@pytest.mark.parametrize("B, Hq, Hk, causal", [(1, 4, 2, False),    # GQA
                                               (2, 2, 1, True)])    # MQA, two batches
def test_grouped_heads(B, Hq, Hk, causal):
    q, k, v = qkv(Hq + Hk, F16, B, Hq, Hk, 65, 70, 64)
    o, lse = attend(q, k, v, causal=causal, return_lse=True)
    check(q, k, v, o, lse, causal=causal)


def test_non_contiguous_views():
    """q from a (B, S, H, D) array, k and v from one packed (B, S, 2, H, D)
    array, each transposed to (B, H, S, D): only the last dim contiguous."""
    rng = np.random.default_rng(5)
    B, H, Sq, Sk, D = 2, 2, 50, 67, 64
    q = data(rng, (B, Sq, H, D), F16).transpose(0, 2, 1, 3)
    kv = data(rng, (B, Sk, 2, H, D), F16)
    k, v = kv[:, :, 0].transpose(0, 2, 1, 3), kv[:, :, 1].transpose(0, 2, 1, 3)
    assert not (q.flags.c_contiguous or k.flags.c_contiguous or v.flags.c_contiguous)
    o, lse = attend(q, k, v, causal=True, return_lse=True)
    check(q, k, v, o, lse, causal=True)


def test_custom_scale():
    q, k, v = qkv(3, BF16, 1, 1, 1, 33, 90, 64)
    o, lse = attend(q, k, v, scale=0.3, return_lse=True)
    check(q, k, v, o, lse, scale=0.3)


def test_one_query_one_key():
    """o = v; lse = the one score (causal: key 0 is visible to query 0)."""
    q, k, v = qkv(1, F16, 1, 1, 1, 1, 1, 128)
    o, lse = attend(q, k, v, causal=True, return_lse=True)
    check(q, k, v, o, lse, causal=True)


# -- bad inputs --------------------------------------------------------------------------------

def arrays(Sq=8, Sk=8, D=64, Hq=1, Hk=1, B=1, dtype=F16):
    return np.zeros((B, Hq, Sq, D), dtype), *(np.zeros((B, Hk, Sk, D), dtype) for _ in "kv")


def refit(args, **shapes):
    """args with some of q, k, v replaced by zeros of another shape or dtype."""
    q, k, v = args
    new = dict(q=q, k=k, v=v)
    for name, (shape, dtype) in shapes.items():
        new[name] = np.zeros(shape, dtype)
    return new["q"], new["k"], new["v"]


BAD = {                                                  # id: (q, k, v), kwargs, message
    "q 3-D": (refit(arrays(), q=((1, 8, 64), F16)), {}, "q must be 4-D"),
    "k 3-D": (refit(arrays(), k=((1, 8, 64), F16)), {}, "k must be 4-D"),
    "v 5-D": (refit(arrays(), v=((1, 1, 1, 8, 64), F16)), {}, "v must be 4-D"),
    "head_dim 80": (arrays(D=80), {}, "head_dim 80"),
    "float32": (arrays(dtype=np.float32), {}, "float32"),
    "k bfloat16": (refit(arrays(), k=((1, 1, 8, 64), BF16)), {}, "dtype"),
    "v longer than k": (refit(arrays(), v=((1, 1, 9, 64), F16)), {}, "v has shape"),
    "k batch": (arrays(B=2)[:1] + arrays()[1:], {}, "k has shape"),
    "k head_dim": (arrays()[:1] + arrays(D=128)[1:], {}, "k has shape"),
    "Hq 3, Hk 2": (arrays(Hq=3, Hk=2), {}, "heads"),
    "Hq 2, Hk 4": (arrays(Hq=2, Hk=4), {}, "heads"),
    "Sq 0": (arrays(Sq=0), {}, "seqlen"),
    "Sk 0": (arrays(Sk=0), {}, "seqlen"),
    "scale 0": (arrays(), dict(scale=0.0), "scale"),
    "scale -1": (arrays(), dict(scale=-1.0), "scale"),
    "scale nan": (arrays(), dict(scale=float("nan")), "scale"),
    "scale inf": (arrays(), dict(scale=float("inf")), "scale"),
    "scale str": (arrays(), dict(scale="x"), "scale"),
    "causal str": (arrays(), dict(causal="yes"), "causal"),
    "causal int": (arrays(), dict(causal=1), "causal"),
}


@pytest.mark.parametrize("args, kwargs, message", list(BAD.values()), ids=list(BAD))
def test_bad_inputs(args, kwargs, message):
    with pytest.raises(MoyeError, match=re.escape(message)):
        ops.attention(*args, **kwargs)


def _compiled(d, causal, dtype, arch):
    """NVRTC's ptxas log of attention_sm80's kernel for head dim `d`."""
    from moye import ir
    from moye.backend.cuda import nvrtc
    from moye.compiler.frontend import BACKENDS
    from moye.ops import attention_sm80
    q, k = np.zeros((1, 2, 70, d), dtype), np.zeros((1, 1, 70, d), dtype)
    name = "Float16" if dtype == F16 else "BFloat16"
    args = (q, k, k, np.zeros_like(q), np.zeros((1, 2, 70), np.float32), 2, 0.1,
            *attention_sm80.static_args(name, d), causal)
    kernel = attention_sm80.attention_forward_sm80.trace(*args, block=attention_sm80.THREADS)[0]
    source = BACKENDS["cuda"].source(kernel, (attention_sm80.THREADS, 1, 1))
    return nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], arch,
                              options=("--ptxas-options=-v",)).log or ""


@pytest.mark.parametrize("d, causal, dtype", [(64, False, F16), (64, True, BF16), (96, True, F16),
                                              (128, False, BF16), (128, True, F16),
                                              (256, True, F16)])
def test_kernel_compiles_for_sm80_without_spills(d, causal, dtype):
    log = _compiled(d, causal, dtype, "sm_80")
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log


@pytest.mark.parametrize("d", [64, 256])
def test_kernel_compiles_for_sm90a(d):
    """(Hopper gets this kernel until a wgmma one lands; NVRTC raises on an error.)"""
    assert re.search(r"Used \d+ registers", _compiled(d, True, F16, "sm_90a"))

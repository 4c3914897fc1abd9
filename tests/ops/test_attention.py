"""moye.ops.attention on the CPU backend: every element of o and lse against
a float64 NumPy reference, outputs poisoned first; each head dim, causal
masking aligned to the bottom right (Sq == Sk, Sq < Sk, Sq > Sk with rows
that see no key), GQA and MQA, non-contiguous views, a custom scale, one
query and one key; the inputs left as they were; and the errors.
moye.ops.attention_backward the same way, dq, dk and dv against a float64
reference (itself checked against finite differences) within bounds shown
to reject a wrong mask, dlse, GQA sum or scale; with and without dlse; on
torch tensors through autograd, torch.compile and opcheck; the errors; and
the backward kernels' NVRTC builds."""
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
    args = (q, k, k, np.zeros_like(q), np.zeros((1, 2, 70), np.float32), None, None, 2, 0.1,
            *attention_sm80.static_args(name, d), causal)
    kernel = attention_sm80.attention_forward_sm80.trace(*args, block=attention_sm80.THREADS)[0]
    source = BACKENDS["cuda"].source(kernel, (attention_sm80.THREADS, 1, 1))
    return nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], arch,
                              options=("--ptxas-options=-v",)).log or ""


@pytest.mark.parametrize("d, causal, dtype, spill", [
    (64, False, F16, 8), (64, True, BF16, 0), (96, True, F16, 0), (128, False, BF16, 0),
    (128, True, F16, 0), (256, True, F16, 0)])
def test_kernel_compiles_for_sm80_without_spills(d, causal, dtype, spill):
    """(At head dim 64, not causal, ptxas keeps 128 registers, for 4 blocks a
    multiprocessor, and spills 8 bytes.)"""
    log = _compiled(d, causal, dtype, "sm_80")
    stores, loads = (int(re.search(r"(\d+) bytes spill %s" % w, log).group(1))
                     for w in ("stores", "loads"))
    assert stores <= spill and loads <= spill, log


@pytest.mark.parametrize("d", [64, 256])
def test_kernel_compiles_for_sm90a(d):
    """(Hopper gets this kernel until a wgmma one lands; NVRTC raises on an error.)"""
    assert re.search(r"Used \d+ registers", _compiled(d, True, F16, "sm_90a"))


# == backward ==================================================================================
#
# attention_backward against a float64 reference of the gradients, evaluated at the o and lse
# it is given (the forward's: D = rowsum(dO * O) takes the 16-bit o as the kernels do), every
# element of dq, dk and dv within a bound summed from the reference's own terms (grad_bounds).

U = {np.dtype(F16): 2.0 ** -11, np.dtype(BF16): 2.0 ** -8}        # 16-bit unit roundoff
TINY = {np.dtype(F16): 2.0 ** -25, np.dtype(BF16): 0.0}        # float16's subnormals: absolute
F32 = 2.0 ** -24                                                # float32's unit roundoff
SLACK = 1.25            # the second-order terms grad_bounds leaves out (u * rho, u**2, ...)


def backward_terms(q, k, v, do, dlse=None, causal=False, scale=None, o=None, lse=None,
                   seen=None, key_head=None):
    """The backward's float64 pieces, each query head paired with (a copy of)
    the key head it reads: P = exp(S - lse) where the query sees the key (0
    elsewhere; `seen` (Sq, Sk) overrides the mask), dP = dO V^T, D =
    rowsum(dO * O) - dlse, dS = P * (dP - D). o and lse default to the exact
    ones (reference's); `key_head` (one a query head) to h // (Hq // Hk)."""
    qd, kd, vd, dod = (np.asarray(x, np.float64) for x in (q, k, v, do))
    B, Hq, Sq, D = qd.shape
    Hk, Sk = kd.shape[1:3]
    scale = 1 / math.sqrt(D) if scale is None else scale
    if o is None or lse is None:
        exact = reference(q, k, v, causal, scale)
        o, lse = exact[0] if o is None else o, exact[1] if lse is None else lse
    od, lsed = np.asarray(o, np.float64), np.asarray(lse, np.float64)
    dlsed = np.zeros(lsed.shape) if dlse is None else np.asarray(dlse, np.float64)
    key_head = np.arange(Hq) // (Hq // Hk) if key_head is None else np.asarray(key_head)
    kd, vd = kd[:, key_head], vd[:, key_head]
    seen = visible(Sq, Sk, causal) if seen is None else seen
    s = qd @ kd.swapaxes(-1, -2) * scale
    with np.errstate(invalid="ignore"):             # -inf - -inf where a row sees nothing
        p = np.exp(np.where(seen, s - lsed[..., None], -np.inf))
    dp = dod @ vd.swapaxes(-1, -2)
    dsum = (dod * od).sum(-1) - dlsed
    return dict(q=qd, k=kd, v=vd, do=dod, o=od, lse=lsed, dlse=dlsed, scale=scale, seen=seen,
                key_head=key_head, Hk=Hk, p=p, dp=dp, dsum=dsum, ds=p * (dp - dsum[..., None]))


def fold(x, t):
    """(B, Hq, Sk, D) per query head -> (B, Hk, Sk, D): each key head the sum
    of the query heads that read it."""
    out = np.zeros((x.shape[0], t["Hk"], *x.shape[2:]))
    np.add.at(out, (slice(None), t["key_head"]), x)
    return out


def reference_grads(q, k, v, do, dlse=None, causal=False, scale=None, o=None, lse=None, **kw):
    """(dq, dk, dv) in float64: dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
    (d lse_i / d S_ij = P_ij puts dlse in D); a row that sees nothing has
    P = 0, so dq = 0 there and nothing of it in dk, dv."""
    t = backward_terms(q, k, v, do, dlse, causal, scale, o, lse, **kw)
    ds_t = t["ds"].swapaxes(-1, -2)
    return (t["scale"] * t["ds"] @ t["k"], fold(t["scale"] * ds_t @ t["q"], t),
            fold(t["p"].swapaxes(-1, -2) @ t["do"], t))


# Where the kernels' error comes from, element by element (u: the 16-bit unit roundoff):
# - P: S and the exponent in float32, so P is off by a relative rho = d 2**-23 (scale
#   sum_c |q_c k_c| + |lse| + 1) (d: the head dim; twice float32's dot-product bound, and
#   ex2.approx's 2 ulp);
#   then rounded to 16 bits for P^T dO: u P more (TINY more where float16 goes subnormal).
# - dS = P (dP - D): dP and D are float32 dot products over the head dim, off by at most
#   d 2**-24 (sum_c |dO_c V_c| + sum_c |dO_c O_c| + |dlse|) together; P's rho times |dP - D|;
#   then rounded to 16 bits for dS K and dS^T Q: u |dS| more.
# - each GEMM accumulates in float32 (n 2**-24 of the sum of |terms| over its n terms), and
#   its result is rounded to 16 bits (u |result| <= u sum |terms|).
# So dv's bound is sum_i |dO_ic| (err P_ij + (u + n 2**-24) P_ij) and dq's (dk's) scale
# sum_j (i) |K_jc| (|Q_ic|) (err dS_ij + (u + n 2**-24) |dS_ij|): about 2u times the sum of
# |terms|, an element each, exactly 0 where every term is (a row that sees nothing).
def grad_bounds(t, dtype):
    u, tiny = U[np.dtype(dtype)], TINY[np.dtype(dtype)]
    (Sq, Sk), d, scale = t["p"].shape[2:], t["q"].shape[-1], t["scale"]
    abs_q, abs_k, abs_do = np.abs(t["q"]), np.abs(t["k"]), np.abs(t["do"])
    lse = np.where(np.isfinite(t["lse"]), np.abs(t["lse"]), 0.0)[..., None]
    rho = d * 2.0 ** -23 * (scale * abs_q @ abs_k.swapaxes(-1, -2) + lse + 1)
    dots = (abs_do @ np.abs(t["v"]).swapaxes(-1, -2) +
            ((abs_do * np.abs(t["o"])).sum(-1) + np.abs(t["dlse"]))[..., None])
    p, ds = t["p"], np.abs(t["ds"])
    err_p = np.where(t["seen"], (u + rho) * p + tiny, 0.0)
    err_ds = np.where(t["seen"], u * ds + p * (rho * np.abs(t["dp"] - t["dsum"][..., None]) +
                                               d * 2.0 ** -24 * dots) + tiny, 0.0)
    n_kv = Sq * len(t["key_head"]) // t["Hk"] + 1           # dk, dv: each query of the group
    out = (scale * (err_ds + (u + (Sk + 1) * F32) * ds) @ abs_k,
           fold(scale * (err_ds + (u + n_kv * F32) * ds).swapaxes(-1, -2) @ abs_q, t),
           fold((err_p + (u + n_kv * F32) * p).swapaxes(-1, -2) @ abs_do, t))
    return tuple(SLACK * np.where(b > 0, b + tiny, 0.0) for b in out)


def margin(got, want, bound):
    """max |got - want| / bound (inf where the bound is 0 and got is not
    want, or got is NaN)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(np.asarray(got, np.float64) - want) / bound
    r = np.where(np.abs(np.asarray(got, np.float64) - want) == 0, 0.0, r)
    return float(np.nan_to_num(r, nan=np.inf).max())


def grad_margins(grads, q, k, v, do, o, lse, dlse=None, causal=False, scale=None):
    """{name: (got, want, bound)} of dq, dk, dv: reference_grads at the given
    o and lse, and grad_bounds."""
    t = backward_terms(q, k, v, do, dlse, causal, scale, o, lse)
    want = reference_grads(q, k, v, do, dlse, causal, scale, o, lse)
    return {name: (np.asarray(g, np.float64), w, bound) for name, g, w, bound in
            zip(("dq", "dk", "dv"), grads, want, grad_bounds(t, q.dtype))}


def check_grads(grads, q, k, v, do, o, lse, dlse=None, causal=False, scale=None):
    """dq, dk, dv (q's, k's and v's dtype and shape) against reference_grads,
    every element within grad_bounds; returns each one's margin (the largest
    error / bound)."""
    for g, x in zip(grads, (q, k, v)):
        assert isinstance(g, np.ndarray) and g.dtype == x.dtype and g.shape == x.shape
    margins = {}
    for name, (got, want, bound) in grad_margins(grads, q, k, v, do, o, lse, dlse, causal,
                                                 scale).items():
        first_bad(~(np.abs(got - want) <= bound), got, want, bound, name)
        margins[name] = margin(got, want, bound)
    return margins


def backprop(do, q, k, v, o, lse, **kwargs):
    """ops.attention_backward(...); the inputs left bit for bit as they were,
    the outputs new arrays."""
    ins = [x for x in (do, q, k, v, o, lse, kwargs.get("dlse")) if x is not None]
    before = [x.copy() for x in ins]
    grads = ops.attention_backward(do, q, k, v, o, lse, **kwargs)
    for x, x0 in zip(ins, before):
        assert np.array_equal(x.view(np.uint8), x0.view(np.uint8)), "an input was written"
    assert len(grads) == 3
    for g in grads:
        assert not any(np.shares_memory(g, x) for x in ins)
    return grads


def grad_case(seed, dtype, B, Hq, Hk, Sq, Sk, D, causal=False, scale=None, with_dlse=False):
    """q, k, v, dO (and dlse) random normal; o, lse the forward's (the kernel's)."""
    q, k, v = qkv(seed, dtype, B, Hq, Hk, Sq, Sk, D)
    rng = np.random.default_rng(seed + 1000)
    do = data(rng, q.shape, dtype)
    dlse = rng.standard_normal(q.shape[:3]).astype(np.float32) if with_dlse else None
    o, lse = attend(q, k, v, causal=causal, scale=scale, return_lse=True)
    return q, k, v, do, dlse, o, lse


def test_reference_grads_against_finite_differences():
    """Central differences of the float64 reference's loss sum(o * dO) +
    sum(lse * dlse) (over rows that see a key) in each element of q, k and v:
    causal GQA with Sq > Sk (row 0 sees nothing) and a scale; and plain, no
    dlse."""
    rng = np.random.default_rng(7)
    for causal, scale, Hq, Hk, Sq, Sk, with_dlse in [(True, 0.7, 4, 2, 4, 3, True),
                                                     (False, None, 2, 1, 3, 5, False)]:
        q, k, v = (rng.standard_normal(s) for s in ((1, Hq, Sq, 5), (1, Hk, Sk, 5),
                                                    (1, Hk, Sk, 5)))
        do = rng.standard_normal(q.shape)
        dlse = rng.standard_normal(q.shape[:3]) if with_dlse else None

        def loss(q, k, v):
            o, lse = reference(q, k, v, causal, scale)
            return (o * do).sum() + (0 if dlse is None else
                                     np.where(np.isfinite(lse), lse * dlse, 0).sum())
        grads = reference_grads(q, k, v, do, dlse, causal, scale)
        for x, g in zip((q, k, v), grads):
            fd = np.zeros(x.shape)
            for i in np.ndindex(x.shape):
                x0 = x[i]
                x[i] = x0 + 1e-6
                up = loss(q, k, v)
                x[i] = x0 - 1e-6
                fd[i] = (up - loss(q, k, v)) / 2e-6
                x[i] = x0
            np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-8)
        if causal:
            assert (grads[0][:, :, :Sq - Sk] == 0).all()


def shifted(by):
    """A causal mask with the diagonal `by` keys off (Sq, Sk) -> bools."""
    return lambda Sq, Sk: np.arange(Sk)[None, :] <= np.arange(Sq)[:, None] + Sk - Sq + by


WRONG = {   # id: the case (over BASE), the wrong reference's arguments from the right one's
    "diagonal one key further": (dict(Sq=100, Sk=100, causal=True),
                                 lambda c: dict(seen=shifted(1)(100, 100))),
    "diagonal one key short": (dict(Sq=100, Sk=100, causal=True),
                               lambda c: dict(seen=shifted(-1)(100, 100))),
    "diagonal one key short, Sq > Sk": (dict(Sq=130, Sk=40, causal=True),
                                        lambda c: dict(seen=shifted(-1)(130, 40))),
    "aligned top-left, Sq < Sk": (dict(Sq=40, Sk=130, causal=True),
                                  lambda c: dict(seen=shifted(-90)(40, 130))),
    "dlse left out": (dict(with_dlse=True), lambda c: dict(dlse=None)),
    "dlse's sign flipped": (dict(with_dlse=True), lambda c: dict(dlse=-c["dlse"])),
    "GQA: query head h reads h % Hk": (dict(Hq=4, Hk=2), lambda c: dict(key_head=[0, 1, 0, 1])),
    "GQA: dk, dv of the first query head alone": (     # (the others' dO 0: their dS, P dO 0)
        dict(Hq=4, Hk=2), lambda c: dict(do=c["do"] * np.array([1, 0, 1, 0])[:, None, None])),
    "the default scale for 0.3": (dict(scale=0.3), lambda c: dict(scale=None)),
}
BASE = dict(B=1, Hq=2, Hk=2, Sq=70, Sk=70, D=64, causal=False, scale=None, with_dlse=False)


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("case, twist", list(WRONG.values()), ids=list(WRONG))
def test_grad_bounds_reject_wrong_gradients(case, twist, dtype):
    """The bounds are tight enough: the right gradients rounded to `dtype`
    pass, and gradients of a wrong mask, dlse, GQA pairing or scale (float64,
    at the same o and lse, no kernel) fail."""
    c = {**BASE, **case}
    q, k, v = qkv(3, dtype, c["B"], c["Hq"], c["Hk"], c["Sq"], c["Sk"], c["D"])
    rng = np.random.default_rng(4)
    do = data(rng, q.shape, dtype)
    dlse = rng.standard_normal(q.shape[:3]).astype(np.float32) if c["with_dlse"] else None
    o, lse = reference(q, k, v, c["causal"], c["scale"])
    o, lse = o.astype(dtype), lse.astype(np.float32)          # as the forward gives them
    args = dict(q=q, k=k, v=v, do=do, o=o, lse=lse, dlse=dlse, causal=c["causal"],
                scale=c["scale"])
    right = [g.astype(dtype) for g in reference_grads(**args)]
    assert max(check_grads(right, **args).values()) < 0.5
    wrong = reference_grads(**{**args, **twist(args)})
    worst = {name: margin(*m) for name, m in grad_margins(wrong, **args).items()}
    assert max(worst.values()) > 2, worst


@pytest.mark.parametrize("D, S, dtype, with_dlse", [(64, 72, F16, True), (96, 80, F16, False),
                                                    (128, 70, BF16, True),
                                                    (256, 77, F16, False)])
def test_backward_each_head_dim(D, S, dtype, with_dlse):
    """The default scale; dlse random or None (lse unused)."""
    q, k, v, do, dlse, o, lse = grad_case(D, dtype, 1, 1, 1, S, S, D, with_dlse=with_dlse)
    grads = backprop(do, q, k, v, o, lse, dlse=dlse)
    check_grads(grads, q, k, v, do, o, lse, dlse)


@pytest.mark.parametrize("Sq, Sk, dtype, with_dlse", [
    (100, 100, F16, False),     # ragged: the diagonal crosses a 64-row (and 64-key) tile
    (40, 130, BF16, True),      # row i sees keys 0 to i + 90
    (130, 40, F16, True),       # rows 0-89 see nothing: dq = 0 there, nothing of them in dk, dv
])
def test_backward_causal(Sq, Sk, dtype, with_dlse):
    q, k, v, do, dlse, o, lse = grad_case(Sq + Sk, dtype, 1, 2, 2, Sq, Sk, 64, causal=True,
                                          with_dlse=with_dlse)
    grads = backprop(do, q, k, v, o, lse, causal=True, dlse=dlse)
    check_grads(grads, q, k, v, do, o, lse, dlse, causal=True)
    blind = max(Sq - Sk, 0)
    assert (grads[0][:, :, :blind] == 0).all()
    if blind:
        # other q, dO and dlse in the rows that see nothing: the same bits everywhere else
        rng = np.random.default_rng(9)
        q2, do2, dlse2 = q.copy(), do.copy(), None if dlse is None else dlse.copy()
        for x in (q2, do2, dlse2):
            if x is not None:
                x[:, :, :blind] = 100 * rng.standard_normal(x[:, :, :blind].shape)
        again = backprop(do2, q2, k, v, o, lse, causal=True, dlse=dlse2)
        assert (again[0][:, :, :blind] == 0).all()
        for g, g2 in zip(grads, again):
            assert np.array_equal(g[:, :, blind:].view(np.uint16),
                                  g2[:, :, blind:].view(np.uint16))
        for g, g2 in zip(grads[1:], again[1:]):
            assert np.array_equal(g.view(np.uint16), g2.view(np.uint16))


@pytest.mark.parametrize("B, Hq, Hk, causal, with_dlse", [(1, 4, 2, False, True),    # GQA
                                                          (2, 2, 1, True, False)])   # MQA
def test_backward_grouped_heads(B, Hq, Hk, causal, with_dlse):
    """dk, dv of a key head: the sum over the query heads that read it."""
    q, k, v, do, dlse, o, lse = grad_case(Hq + Hk, F16, B, Hq, Hk, 65, 70, 64, causal=causal,
                                          with_dlse=with_dlse)
    grads = backprop(do, q, k, v, o, lse, causal=causal, dlse=dlse)
    check_grads(grads, q, k, v, do, o, lse, dlse, causal=causal)


def test_backward_custom_scale():
    q, k, v, do, dlse, o, lse = grad_case(3, BF16, 1, 1, 1, 33, 90, 64, scale=0.3,
                                          with_dlse=True)
    grads = backprop(do, q, k, v, o, lse, scale=0.3, dlse=dlse)
    check_grads(grads, q, k, v, do, o, lse, dlse, scale=0.3)


# -- backward: torch (CPU tensors run the same CPU backend) -------------------------------------

def tensor(x):
    """A CPU torch tensor of NumPy array `x` (float16, bfloat16, float32)."""
    import torch
    x = np.ascontiguousarray(x)
    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def array(t):
    """The NumPy array of torch tensor `t` (float16, bfloat16, float32)."""
    import torch
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


@pytest.mark.parametrize("dtype, B, Hq, Hk, Sq, Sk, causal, scale, use_lse", [
    (F16, 1, 4, 2, 70, 90, True, None, False),     # GQA, causal; the loss takes o alone
    (BF16, 2, 2, 1, 65, 65, False, 0.3, True),     # MQA, a scale; the loss takes o and lse
])
def test_backward_torch_autograd(dtype, B, Hq, Hk, Sq, Sk, causal, scale, use_lse):
    """q.grad, k.grad and v.grad of a loss of ops.attention's o (and lse)."""
    torch = pytest.importorskip("torch")
    q, k, v, do, dlse, o_np, lse_np = grad_case(Sq, dtype, B, Hq, Hk, Sq, Sk, 64, causal, scale,
                                                with_dlse=use_lse)
    leaves = [tensor(x).requires_grad_() for x in (q, k, v)]
    out = ops.attention(*leaves, causal=causal, scale=scale, return_lse=use_lse)
    if use_lse:
        o, lse = out
        ((o * tensor(do)).sum() + (lse * tensor(dlse)).sum()).backward()
    else:
        o, lse = out, tensor(lse_np)            # the forward's lse (the same bits: grad_case's)
        (o * tensor(do)).sum().backward()
    assert np.array_equal(array(o).view(np.uint16), o_np.view(np.uint16))
    grads = [array(t.grad) for t in leaves]
    check_grads(grads, q, k, v, do, array(o), array(lse), dlse, causal, scale)


def test_backward_torch_compile_fullgraph():
    """ops.attention inside torch.compile(fullgraph=True): o and lse without
    grad, then q, k and v's gradients through the compiled graph. No graph
    from the disk caches: their keys do not cover the ops' fake
    implementations, so one compiled before a change to them would hide it."""
    torch = pytest.importorskip("torch")
    from torch._functorch import config as aot_config
    from torch._inductor import config as inductor_config
    torch._dynamo.reset()
    q, k, v, do, dlse, _, _ = grad_case(11, F16, 1, 2, 1, 50, 60, 64, causal=True, with_dlse=True)
    f = torch.compile(lambda q, k, v: ops.attention(q, k, v, causal=True, return_lse=True),
                      fullgraph=True)
    with inductor_config.patch(fx_graph_cache=False), aot_config.patch(enable_autograd_cache=False):
        with torch.no_grad():
            o, lse = f(*(tensor(x) for x in (q, k, v)))
        check(q, k, v, array(o), array(lse), causal=True)
        leaves = [tensor(x).requires_grad_() for x in (q, k, v)]
        o2, lse2 = f(*leaves)
        torch.autograd.backward([o2, lse2], [tensor(do), tensor(dlse)])
    assert torch.equal(o2, o) and torch.equal(lse2, lse)
    check_grads([array(t.grad) for t in leaves], q, k, v, do, array(o), array(lse), dlse,
                causal=True)


def test_backward_torch_opcheck():
    """torch.library.opcheck of both custom ops (schema, autograd
    registration, fake tensors against the real outputs, AOT dispatch with
    dynamic shapes): the forward causal with GQA, the backward with a dlse
    tensor and with None."""
    torch = pytest.importorskip("torch")
    from moye.ops import torch_ops
    q, k, v, do, dlse, _, _ = grad_case(12, BF16, 1, 2, 1, 20, 30, 64, with_dlse=True)
    q, k, v, do, dlse = (tensor(x) for x in (q, k, v, do, dlse))
    forward, backward = torch_ops.op("attention_forward"), torch_ops.op("attention_backward")
    o, lse = forward(q, k, v, True, None)
    for g in (dlse, None):
        torch.library.opcheck(backward, (do, g, q, k, v, o, lse, True, None))
    torch.library.opcheck(forward, tuple(x.clone().requires_grad_() for x in (q, k, v)) +
                          (True, None))


# -- backward: bad inputs (no kernel runs) ------------------------------------------------------

def grad_arrays(D=64, **new):
    """attention_backward's arguments of zeros (q, k, v, do, o: (1, 1, 8, D)
    float16; lse (1, 1, 8) float32), some replaced by `new`."""
    q, k, v = arrays(D=D)
    args = dict(do=np.zeros_like(q), q=q, k=k, v=v, o=np.zeros_like(q),
                lse=np.zeros((1, 1, 8), np.float32))
    return {**args, **new}


BAD_BACKWARD = {                                     # id: arguments, message
    "o longer than q": (grad_arrays(o=np.zeros((1, 1, 9, 64), F16)),
                        "attention_backward: o has shape (1, 1, 9, 64); it must be (1, 1, 8, 64)"),
    "do bfloat16": (grad_arrays(do=np.zeros((1, 1, 8, 64), BF16)),
                    "attention_backward: do is bfloat16; it must be float16"),
    "lse float16": (grad_arrays(lse=np.zeros((1, 1, 8), F16)),
                    "attention_backward: lse is float16; it must be float32"),
    "dlse (1, 1, 9)": (grad_arrays(dlse=np.zeros((1, 1, 9), np.float32)),
                       "attention_backward: dlse has shape (1, 1, 9); it must be (1, 1, 8)"),
    "causal str": (grad_arrays(causal="yes"), "attention_backward: causal must be True or False"),
    "scale 0": (grad_arrays(scale=0.0), "attention_backward: scale must be a positive finite"),
    "head_dim 80": (grad_arrays(D=80, do=np.zeros((1, 1, 8, 80), F16),
                                o=np.zeros((1, 1, 8, 80), F16)),
                    "attention_backward: q has head_dim 80"),
}


@pytest.mark.parametrize("args, message", list(BAD_BACKWARD.values()), ids=list(BAD_BACKWARD))
def test_backward_bad_inputs(args, message, monkeypatch):
    from moye.ops import attention_sm80_backward

    def launch(*args):
        raise AssertionError("a kernel was launched")
    monkeypatch.setattr(attention_sm80_backward, "launch", launch)
    with pytest.raises(MoyeError, match=re.escape(message)):
        ops.attention_backward(**args)


# -- backward: NVRTC -----------------------------------------------------------------------------

def _compiled_backward(which, d, causal, dtype, arch, dlse=True):
    """NVRTC's ptxas log of attention_sm80_backward's kernel `which` ("dq",
    "dkdv" or "row_dots") for head dim `d`."""
    from moye import ir
    from moye.backend.cuda import nvrtc
    from moye.compiler.frontend import BACKENDS
    from moye.ops import attention_sm80, attention_sm80_backward as bw
    q, k = np.zeros((1, 2, 70, d), dtype), np.zeros((1, 1, 70, d), dtype)
    rows = np.zeros((1, 2, 70), np.float32)
    name = "Float16" if dtype == F16 else "BFloat16"
    sQ, sK, _, copy_qk, _, mma, s2r_qk, s2r_t = attention_sm80.static_args(name, d)
    common = (q, k, k, q, rows, rows, None, None, 2, 0.1, 0.1 * attention_sm80.LOG2E, sQ, sK,
              copy_qk, mma, s2r_qk, s2r_t, causal)
    # Q, K, V, dO, LSE, D, cu_q, cu_k, groups, scale, scale_log2, ...
    kernel, args = {
        "dq": (bw.attention_dq_sm80, (np.zeros_like(q), *common)),
        "dkdv": (bw.attention_dkdv_sm80, (np.zeros_like(k), np.zeros_like(k), *common)),
        "row_dots": (bw.attention_row_dots, (rows, q, q, rows if dlse else None)),  # D, dO, O, dLSE
    }[which]
    kernel = kernel.trace(*args, block=attention_sm80.THREADS)[0]
    source = BACKENDS["cuda"].source(kernel, (attention_sm80.THREADS, 1, 1))
    return nvrtc.compile_cuda(source, [ir.symbol(kernel.name)], arch,
                              options=("--ptxas-options=-v",)).log or ""


@pytest.mark.parametrize("which, d, causal, dtype, spill", [
    ("dq", 64, False, F16, 0), ("dq", 96, True, BF16, 16),
    ("dkdv", 64, True, BF16, 0), ("dkdv", 96, False, F16, 0),     # 96, not causal: 255 registers
    ("dkdv", 96, True, F16, 0)])
def test_backward_kernels_compile_for_sm80_without_spills(which, d, causal, dtype, spill):
    """(dQ at head dim 96, causal: ptxas keeps 168 registers, for 3 blocks a
    multiprocessor, and spills 16 bytes.)"""
    log = _compiled_backward(which, d, causal, dtype, "sm_80")
    stores, loads = (int(re.search(r"(\d+) bytes spill %s" % w, log).group(1))
                     for w in ("stores", "loads"))
    assert stores <= spill and loads <= spill, log


@pytest.mark.parametrize("dlse", [True, False])
def test_row_dots_compile_for_sm80_without_spills(dlse):
    log = _compiled_backward("row_dots", 64, False, F16, "sm_80", dlse)
    assert "0 bytes spill stores" in log and "0 bytes spill loads" in log, log


@pytest.mark.parametrize("which", ["dq", "dkdv"])
@pytest.mark.parametrize("d", [128, 256])
def test_backward_kernels_compile_for_sm80(which, d):
    """Head dims 128 and 256 compile (dK/dV spills at both, and dQ at 256: not
    asserted here)."""
    assert re.search(r"Used \d+ registers", _compiled_backward(which, d, True, F16, "sm_80"))


@pytest.mark.parametrize("which", ["dq", "dkdv", "row_dots"])
def test_backward_kernels_compile_for_sm90a(which):
    assert re.search(r"Used \d+ registers", _compiled_backward(which, 64, True, F16, "sm_90a"))


def test_torch_compile_with_a_scale():
    """A scale given checks on the host without leaving the compiled graph
    (it was checked through rows.raw, whose import Dynamo refuses)."""
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    q = torch.tensor(np.random.default_rng(4).standard_normal((1, 2, 70, 64)), dtype=torch.half)
    f = torch.compile(lambda q: ops.attention(q, q, q, causal=True, scale=0.3), fullgraph=True)
    assert torch.equal(f(q), ops.attention(q, q, q, causal=True, scale=0.3))


def test_torch_calls_with_keywords_are_replayed():
    """ops.attention(q, k, v, causal=..., scale=...) on torch tensors: the
    first call of a signature is recorded, later ones (new tensors, the
    same kinds) replay it and give what a call in full gives; calls with
    other keyword values are records of their own (replay.py)."""
    torch = pytest.importorskip("torch")
    from moye.ops import functional, replay
    replay.forget()
    for seed, causal, scale in ((1, True, None), (2, True, None), (3, False, 0.3),
                                (4, False, 0.3)):
        q, k, v = (tensor(x) for x in qkv(seed, F16, 1, 2, 1, 40, 50, 64))
        o, lse = ops.attention(q, k, v, causal=causal, scale=scale, return_lse=True)
        want = functional.attention.__wrapped__(q, k, v, causal=causal, scale=scale,
                                                return_lse=True)
        assert torch.equal(o, want[0]) and torch.equal(lse, want[1])
        key = replay.signature((q, k, v, causal, scale, True))
        assert isinstance(functional.attention.recipes.get(key), replay.Recipe)
    assert len(functional.attention.recipes) == 2

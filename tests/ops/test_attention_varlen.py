"""moye.ops.attention_varlen and attention_varlen_backward (FlashAttention's
packed layout) on the CPU backend: each sequence against the float64
references of test_attention (o, lse, dq, dk, dv, every element, with its
bounds) and bit for bit against ops.attention and ops.attention_backward
on that sequence alone (the same kernels run); sequences of no queries or
no keys (o 0, lse -inf; dq, dk, dv 0); on torch tensors through autograd,
torch.compile and opcheck; and the errors, before any kernel runs."""
import functools
import re

import numpy as np
import pytest

from moye import MoyeError, ops

from .test_attention import BF16, F16, array, check, check_grads, data, tensor

# id: dtype, Hq, Hk, D, query lengths, key lengths, max_seqlen_q, max_seqlen_k (None: the
# longest), causal, scale, the offsets' dtype, whether a random dlse goes in (else None). Each
# has a sequence of no queries (its keys: dk = dv = 0) and one of no keys (its queries: o 0,
# lse -inf, dq 0), and sequences that cross the kernels' 64-row and 64-key tiles.
CASES = {
    # GQA, causal: 20 queries on 9 keys (rows 0-10 see nothing), 40 on 90 (row i sees keys up
    # to i + 50); max_seqlen_q past the longest (blocks beyond every sequence do nothing)
    "gqa causal": (F16, 2, 1, 64, [37, 0, 70, 5, 20, 40], [50, 12, 70, 0, 9, 90], 80, None,
                   True, None, np.int32, False),
    "bfloat16 int64": (BF16, 2, 2, 128, [65, 3, 0, 40], [30, 0, 17, 90], None, None, False,
                       None, np.int64, True),
    "d96 scale causal": (F16, 1, 1, 96, [33, 0, 64, 2], [90, 5, 64, 0], None, None, True, 0.3,
                         np.int32, True),
}


def offsets(lengths, dtype):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(dtype)


def seq(x, rows):
    """Rows `rows` of packed x (total, H, D) as (1, H, S, D); of lse (H, total),
    (1, H, S)."""
    return x[rows].transpose(1, 0, 2)[None] if x.ndim == 3 else x[:, rows][None]


def spans(cu):
    return [slice(int(a), int(b)) for a, b in zip(cu[:-1], cu[1:])]


def unchanged(ins, run):
    """run()'s results, the arrays `ins` left bit for bit as they were, the
    results new arrays."""
    before = [x.copy() for x in ins]
    out = run()
    for x, x0 in zip(ins, before):
        assert np.array_equal(x.view(np.uint8), x0.view(np.uint8)), "an input was written"
    for y in out:
        assert not any(np.shares_memory(y, x) for x in ins)
    return out


def bits(x):
    return np.ascontiguousarray(x).view(np.uint8)


def same_bits(got, want, what):
    assert got.shape == want.shape and got.dtype == want.dtype, what
    assert np.array_equal(bits(got), bits(want)), f"{what}: not the same bits"


@functools.cache
def case(name):
    """The case's inputs and attention_varlen's forward and backward on them,
    run once for all the tests of the case (inside the first, outputs
    poisoned): a dict of q, k, v, do, dlse, cu_q, cu_k, the keyword
    arguments, o, lse, dq, dk, dv."""
    dtype, Hq, Hk, D, len_q, len_k, max_q, max_k, causal, scale, cu_type, with_dlse = CASES[name]
    rng = np.random.default_rng(sum(len_q) + D)
    cu_q, cu_k = offsets(len_q, cu_type), offsets(len_k, cu_type)
    q = data(rng, (cu_q[-1], Hq, D), dtype)
    k, v = (data(rng, (cu_k[-1], Hk, D), dtype) for _ in "kv")
    do = data(rng, q.shape, dtype)
    dlse = rng.standard_normal((Hq, cu_q[-1])).astype(np.float32) if with_dlse else None
    sizes = (max(len_q) if max_q is None else max_q, max(len_k) if max_k is None else max_k)
    kw = dict(causal=causal, scale=scale)
    o, lse = unchanged((q, k, v, cu_q, cu_k), lambda: ops.attention_varlen(
        q, k, v, cu_q, cu_k, *sizes, return_lse=True, **kw))
    ins = [x for x in (do, q, k, v, o, lse, cu_q, cu_k, dlse) if x is not None]
    grads = unchanged(ins, lambda: ops.attention_varlen_backward(
        do, q, k, v, o, lse, cu_q, cu_k, *sizes, dlse=dlse, **kw))
    assert len(grads) == 3
    return dict(q=q, k=k, v=v, do=do, dlse=dlse, cu_q=cu_q, cu_k=cu_k, sizes=sizes, kw=kw,
                o=o, lse=lse, dq=grads[0], dk=grads[1], dv=grads[2])


def sequences(c):
    """(rows of q, rows of k) of each sequence of case c."""
    return zip(spans(c["cu_q"]), spans(c["cu_k"]))


@pytest.mark.parametrize("name", list(CASES))
def test_forward_against_reference(name):
    """o and lse of each sequence against reference on it alone, within
    check's bounds; a sequence of no keys: o exactly 0, lse -inf."""
    c = case(name)
    q, k, v, o, lse = c["q"], c["k"], c["v"], c["o"], c["lse"]
    assert o.shape == q.shape and o.dtype == q.dtype
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == np.float32
    for rq, rk in sequences(c):
        if rk.stop == rk.start:
            assert (o[rq] == 0).all() and (lse[:, rq] == -np.inf).all()
        elif rq.stop > rq.start:
            check(seq(q, rq), seq(k, rk), seq(v, rk), seq(o, rq), seq(lse, rq), **c["kw"])


@pytest.mark.parametrize("name", list(CASES))
def test_forward_is_attention_on_each_sequence(name):
    """o and lse of each sequence (with queries and keys) bit for bit
    ops.attention's on it alone."""
    c = case(name)
    for rq, rk in sequences(c):
        if rq.stop > rq.start and rk.stop > rk.start:
            o, lse = ops.attention(seq(c["q"], rq), seq(c["k"], rk), seq(c["v"], rk),
                                   return_lse=True, **c["kw"])
            same_bits(seq(c["o"], rq), o, f"o of rows {rq}")
            same_bits(seq(c["lse"], rq), lse, f"lse of rows {rq}")


def test_o_alone():
    """Without return_lse: o alone, the same bits."""
    c = case("gqa causal")
    o = ops.attention_varlen(c["q"], c["k"], c["v"], c["cu_q"], c["cu_k"], *c["sizes"], **c["kw"])
    assert isinstance(o, np.ndarray)
    same_bits(o, c["o"], "o")


@pytest.mark.parametrize("name", list(CASES))
def test_backward_against_reference(name):
    """dq, dk, dv of each sequence (with queries and keys) against
    reference_grads on it alone (at the forward's o and lse), within
    grad_bounds (dlse random, or None)."""
    c = case(name)
    for rq, rk in sequences(c):
        if rq.stop > rq.start and rk.stop > rk.start:
            dlse = None if c["dlse"] is None else seq(c["dlse"], rq)
            check_grads([seq(c["dq"], rq), seq(c["dk"], rk), seq(c["dv"], rk)],
                        seq(c["q"], rq), seq(c["k"], rk), seq(c["v"], rk), seq(c["do"], rq),
                        seq(c["o"], rq), seq(c["lse"], rq), dlse, **c["kw"])


@pytest.mark.parametrize("name", list(CASES))
def test_backward_is_attention_backward_on_each_sequence(name):
    """dq, dk, dv of each sequence (with queries and keys) bit for bit
    ops.attention_backward's on it alone, from the same o, lse, do, dlse;
    of a sequence of no keys, dq exactly 0; of no queries, dk and dv."""
    c = case(name)
    for rq, rk in sequences(c):
        if rk.stop == rk.start:
            assert (c["dq"][rq] == 0).all()
        elif rq.stop == rq.start:
            assert (c["dk"][rk] == 0).all() and (c["dv"][rk] == 0).all()
        else:
            dlse = None if c["dlse"] is None else seq(c["dlse"], rq)
            grads = ops.attention_backward(seq(c["do"], rq), seq(c["q"], rq), seq(c["k"], rk),
                                           seq(c["v"], rk), seq(c["o"], rq), seq(c["lse"], rq),
                                           dlse=dlse, **c["kw"])
            for what, rows, g in zip(("dq", "dk", "dv"), (rq, rk, rk), grads):
                same_bits(seq(c[what], rows), g, f"{what} of rows {rows}")


# -- torch (CPU tensors run the same CPU backend) ------------------------------------------------

def tensors(c, *names):
    import torch
    return [torch.from_numpy(c[n]) if n.startswith("cu_") else tensor(c[n]) for n in names]


@pytest.mark.parametrize("name", ["gqa causal", "bfloat16 int64"])
def test_torch_autograd(name):
    """q.grad, k.grad and v.grad of sum(o * do) (+ sum(lse * dlse) where the
    case has a dlse) through ops.attention_varlen: o, lse and the gradients
    bit for bit the NumPy calls'."""
    torch = pytest.importorskip("torch")
    c = case(name)
    leaves = [t.requires_grad_() for t in tensors(c, "q", "k", "v")]
    cu_q, cu_k, do = tensors(c, "cu_q", "cu_k", "do")
    args = (*leaves, cu_q, cu_k, *c["sizes"])
    if c["dlse"] is None:
        o = ops.attention_varlen(*args, **c["kw"])
        (o * do).sum().backward()
    else:
        o, lse = ops.attention_varlen(*args, return_lse=True, **c["kw"])
        torch.autograd.backward([o, lse], [do, tensor(c["dlse"])])
        same_bits(array(lse), c["lse"], "lse")
    same_bits(array(o), c["o"], "o")
    for what, t in zip(("dq", "dk", "dv"), leaves):
        same_bits(array(t.grad), c[what], what)


def test_torch_compile_fullgraph():
    """ops.attention_varlen inside torch.compile(fullgraph=True), without
    grad: o and lse the eager call's (the NumPy call's) bits. No graph from
    the disk caches (see test_attention)."""
    torch = pytest.importorskip("torch")
    from torch._functorch import config as aot_config
    from torch._inductor import config as inductor_config
    torch._dynamo.reset()
    c = case("gqa causal")
    sizes, kw = c["sizes"], c["kw"]
    f = torch.compile(lambda q, k, v, cu_q, cu_k: ops.attention_varlen(
        q, k, v, cu_q, cu_k, *sizes, return_lse=True, **kw), fullgraph=True)
    with inductor_config.patch(fx_graph_cache=False), \
            aot_config.patch(enable_autograd_cache=False), torch.no_grad():
        o, lse = f(*tensors(c, "q", "k", "v", "cu_q", "cu_k"))
    same_bits(array(o), c["o"], "o")
    same_bits(array(lse), c["lse"], "lse")


def test_torch_opcheck():
    """torch.library.opcheck of both custom ops (schema, autograd
    registration, fake tensors against the real outputs, AOT dispatch with
    dynamic shapes) on three small sequences, one of no keys: the forward
    causal with GQA, the backward with a dlse tensor and with None."""
    torch = pytest.importorskip("torch")
    from moye.ops import torch_ops
    rng = np.random.default_rng(12)
    cu_q, cu_k = offsets([9, 4, 7], np.int32), offsets([12, 0, 5], np.int32)
    q = tensor(data(rng, (20, 2, 64), BF16))
    k, v = (tensor(data(rng, (17, 1, 64), BF16)) for _ in "kv")
    do = tensor(data(rng, (20, 2, 64), BF16))
    dlse = torch.from_numpy(rng.standard_normal((2, 20)).astype(np.float32))
    cu_q, cu_k = torch.from_numpy(cu_q), torch.from_numpy(cu_k)
    forward = torch_ops.op("attention_varlen_forward")
    backward = torch_ops.op("attention_varlen_backward")
    o, lse = forward(q, k, v, cu_q, cu_k, 9, 12, True, None)
    for g in (dlse, None):
        torch.library.opcheck(backward, (do, g, q, k, v, o, lse, cu_q, cu_k, 9, 12, True, None))
    torch.library.opcheck(forward, tuple(x.clone().requires_grad_() for x in (q, k, v)) +
                          (cu_q, cu_k, 9, 12, True, None))


# -- bad inputs (no kernel runs) -----------------------------------------------------------------

def packed(total_q=10, total_k=10, Hq=1, Hk=1, D=64, cu_q=(0, 4, 10), cu_k=(0, 4, 10),
           max_q=6, max_k=6, cu_type=np.int32):
    """attention_varlen's arguments (zeros, float16), a dict."""
    return dict(q=np.zeros((total_q, Hq, D), F16), k=np.zeros((total_k, Hk, D), F16),
                v=np.zeros((total_k, Hk, D), F16), cu_seqlens_q=np.array(cu_q, cu_type),
                cu_seqlens_k=np.array(cu_k, cu_type), max_seqlen_q=max_q, max_seqlen_k=max_k)


def torch_cu():
    torch = pytest.importorskip("torch")
    return torch.tensor([0, 4, 10], dtype=torch.int32)


BAD = {                                                  # id: arguments (a function), message
    "q 2-D": (lambda: {**packed(), "q": np.zeros((10, 64), F16)}, "q must be 3-D"),
    "q 4-D": (lambda: {**packed(), "q": np.zeros((1, 10, 1, 64), F16)}, "q must be 3-D"),
    "cu_q from 1": (lambda: packed(cu_q=(1, 4, 10)),
                    "cu_seqlens_q must rise from 0 to 10 (the tokens), got [1, 4, 10]"),
    "cu_k short of the total": (lambda: packed(cu_k=(0, 4, 9)), "cu_seqlens_k must rise from 0"),
    "cu_q falling": (lambda: packed(cu_q=(0, 5, 4, 10), cu_k=(0, 2, 4, 10)),
                     "cu_seqlens_q must rise from 0"),
    "a sequence past max_seqlen_q": (
        lambda: packed(max_q=5),
        "cu_seqlens_q holds a sequence of 6 rows, past max_seqlen_q = 5"),
    "cu_q float32": (lambda: packed(cu_type=np.float32), "1-D int32 or int64"),
    "cu_k 2-D": (lambda: {**packed(), "cu_seqlens_k": np.array([[0, 4, 10]], np.int32)},
                 "1-D int32 or int64"),
    "cu_q uint32": (lambda: packed(cu_type=np.uint32), "1-D int32 or int64"),
    "cu_q one offset": (lambda: packed(cu_q=(0,), cu_k=(0,), total_q=0, total_k=0),
                        "1-D int32 or int64"),
    "two batches of q, three of k": (lambda: packed(cu_k=(0, 2, 4, 10)),
                                     "cu_seqlens_q has 3 offsets and cu_seqlens_k 4; one batch"),
    "max_seqlen_k -1": (lambda: packed(max_k=-1), "max_seqlen_k is -1; a length is at least 0"),
    "max_seqlen_k 6.0": (lambda: packed(max_k=6.0), "max_seqlen_k must be an int"),
    "max_seqlen_q True": (lambda: packed(max_q=True), "max_seqlen_q must be an int"),
    "head_dim 80": (lambda: packed(D=80), "head_dim 80"),
    "Hq 3, Hk 2": (lambda: packed(Hq=3, Hk=2), "heads"),
    "Hq 0": (lambda: packed(Hq=0, Hk=1), "q has 0 heads and k 1"),
    "cu_q a list": (lambda: {**packed(), "cu_seqlens_q": [0, 4, 10]}, "must be a"),
    "cu_q a tensor, q an array": (lambda: {**packed(), "cu_seqlens_q": torch_cu()},
                                  "cu_seqlens_q must be a NumPy array, as q is; got Tensor"),
}


@pytest.fixture
def no_kernels(monkeypatch):
    from moye.ops import attention_sm80, attention_sm80_backward

    def launch(*args, **kwargs):
        raise AssertionError("a kernel was launched")
    monkeypatch.setattr(attention_sm80, "launch", launch)
    monkeypatch.setattr(attention_sm80_backward, "launch", launch)


@pytest.mark.parametrize("args, message", list(BAD.values()), ids=list(BAD))
def test_bad_inputs(args, message, no_kernels):
    with pytest.raises(MoyeError, match=re.escape(message)):
        ops.attention_varlen(**args())


def backward_args(**new):
    """attention_varlen_backward's arguments (zeros; Hq 2, total_q 10), some
    replaced by `new`."""
    args = packed(Hq=2)
    args.update(do=np.zeros_like(args["q"]), o=np.zeros_like(args["q"]),
                lse=np.zeros((2, 10), np.float32))
    return {**args, **new}


BAD_BACKWARD = {                                     # id: arguments, message
    "lse (total_q, Hq)": (backward_args(lse=np.zeros((10, 2), np.float32)),
                          "attention_varlen_backward: lse has shape (10, 2); it must be (2, 10)"),
    "dlse (total_q, Hq)": (backward_args(dlse=np.zeros((10, 2), np.float32)),
                           "attention_varlen_backward: dlse has shape (10, 2); it must be (2, 10)"),
    "o 4-D": (backward_args(o=np.zeros((1, 2, 10, 64), F16)), "o has shape"),
    "cu_k past max_seqlen_k": (backward_args(max_seqlen_k=5), "past max_seqlen_k = 5"),
    "q 4-D": (backward_args(q=np.zeros((1, 10, 2, 64), F16)), "q must be 3-D"),
}


@pytest.mark.parametrize("args, message", list(BAD_BACKWARD.values()), ids=list(BAD_BACKWARD))
def test_backward_bad_inputs(args, message, no_kernels):
    with pytest.raises(MoyeError, match=re.escape(message)):
        ops.attention_varlen_backward(**args)


def test_torch_takes_numpy_integer_lengths():
    """max_seqlen as a NumPy integer, as the NumPy path takes it."""
    torch = pytest.importorskip("torch")
    q = torch.zeros(10, 1, 64, dtype=torch.float16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    o = ops.attention_varlen(q, q, q, cu, cu, np.int64(6), np.int32(6))
    assert o.shape == q.shape and not o.any()

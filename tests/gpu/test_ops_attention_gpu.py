"""moye.ops.attention on torch CUDA tensors: o, lse and the gradients of q,
k and v against float64, every element, outputs poisoned (conftest);
head dims, causal bottom-right masking with Sq and Sk apart and ragged,
GQA, non-contiguous views, bfloat16; repeat calls on new tensors,
torch.compile and CUDA-graph capture."""
import math

import pytest

from moye import ops
from moye.ops import attention_op, replay

pytestmark = pytest.mark.gpu
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def reference(torch, q, k, v, causal, scale, do):
    """(o, lse, dq, dk, dv) in float64 by autograd of the direct formula."""
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    K, V = kd.repeat_interleave(groups, 1), vd.repeat_interleave(groups, 1)
    s = qd @ K.transpose(-1, -2) * scale
    Sq, Sk = s.shape[-2:]
    if causal:
        seen = torch.arange(Sk, device=q.device)[None] <= \
            torch.arange(Sq, device=q.device)[:, None] + Sk - Sq
        s = s.masked_fill(~seen, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)     # a row that sees nothing: 0
    o = p @ V
    o.backward(do.double())
    return o.detach(), lse.detach(), qd.grad, kd.grad, vd.grad


def close(torch, got, want, dtype, what):
    """Every element within 8 units of the 16-bit type's rounding of the
    tensor's largest value (P and dS are 16-bit operands of float32 GEMMs),
    and 1e-5 absolute: a gradient that is 0 in exact arithmetic (dk of a
    sequence of one key, whose softmax is 1 whatever the scores) comes out
    as float32 rounding of sums of 16-bit products."""
    bound = 8 * EPS[dtype] * float(want.abs().max()) + 1e-5
    err = (got.double() - want).abs()
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} off (largest "
                           f"{float(err.max()):.3e}, bound {bound:.3e})")


@pytest.mark.parametrize("B, Hq, Hk, Sq, Sk, d, causal, dtype", [
    (2, 4, 4, 1024, 1024, 64, False, "float16"),
    (1, 4, 2, 1000, 1000, 128, True, "bfloat16"),
    (1, 2, 1, 300, 777, 96, True, "float16"),
    (1, 2, 2, 777, 300, 256, True, "float16"),
    (1, 4, 2, 1000, 1100, 256, True, "bfloat16"),       # the wide Hopper backward, GQA
    (2, 2, 1, 513, 1500, 256, False, "float16"),
    (3, 2, 1, 1, 513, 64, False, "bfloat16"),
])
def test_forward_and_backward_every_element(torch, B, Hq, Hk, Sq, Sk, d, causal, dtype):
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(Sq * Sk + d)
    q = torch.randn(B, Hq, Sq, d, device="cuda", generator=g).to(dt).requires_grad_()
    k = torch.randn(B, Hk, Sk, d, device="cuda", generator=g).to(dt).requires_grad_()
    v = torch.randn(B, Hk, Sk, d, device="cuda", generator=g).to(dt).requires_grad_()
    do = torch.randn(B, Hq, Sq, d, device="cuda", generator=g).to(dt)
    o, lse = ops.attention(q, k, v, causal=causal, return_lse=True)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    want = reference(torch, q, k, v, causal, 1 / math.sqrt(d), do)
    for what, got, ref in zip(("o", "lse", "dq", "dk", "dv"), (o, lse, dq, dk, dv), want):
        if what == "lse":
            finite = torch.isfinite(ref)
            assert torch.equal(torch.isinf(got), ~finite)
            assert float((got[finite].double() - ref[finite]).abs().max()) < 1e-3
        else:
            close(torch, got, ref, dtype, what)


def test_views_and_repeat_calls(torch):
    """(B, S, H, D) tensors seen as (B, H, S, D); later calls on new tensors
    (the replayed path) give their own results."""
    for seed in range(3):
        g = torch.Generator(device="cuda").manual_seed(seed)
        q, k, v = (torch.randn(2, 200, 4, 64, device="cuda", generator=g).half().transpose(1, 2)
                   for _ in range(3))
        o = ops.attention(q, k, v, causal=True)
        ref = reference(torch, q, k, v, True, 1 / 8, torch.zeros_like(q))[0]
        close(torch, o, ref, "float16", f"o (call {seed})")


def test_training_steps_repeat(torch):
    """Forward and backward on new tensors each step (keyword arguments, the
    recorded and replayed paths alike): every step's o and gradients are
    its own. The raw forward and backward that autograd's custom op calls
    are replayed after the first step (the backward's TMA launch is its
    second: its arrays' alignment is checked before anything launches)."""
    replay.forget()
    for step in range(3):
        g = torch.Generator(device="cuda").manual_seed(100 + step)
        q, k, v = (torch.randn(1, 4, 333, 128, device="cuda", generator=g).bfloat16()
                   .requires_grad_() for _ in range(3))
        do = torch.randn(1, 4, 333, 128, device="cuda", generator=g).bfloat16()
        o = ops.attention(q, k, v, causal=True, scale=0.1)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
        want = reference(torch, q, k, v, True, 0.1, do)
        for what, got, ref in zip(("o", "dq", "dk", "dv"), (o, dq, dk, dv),
                                  (want[0], *want[2:])):
            close(torch, got, ref, "bfloat16", f"step {step}: {what}")
    for fn in (attention_op.attention_forward, attention_op.attention_backward):
        assert [type(r) for r in fn.recipes.values()] == [replay.Recipe], fn.__name__


def test_torch_compile_and_cuda_graph(torch):
    q, k, v = (torch.randn(1, 4, 256, 64, device="cuda").half() for _ in range(3))
    want = ops.attention(q, k, v, causal=True)
    torch._dynamo.reset()
    f = torch.compile(lambda q, k, v: ops.attention(q, k, v, causal=True) * 2, fullgraph=True)
    torch.testing.assert_close(f(q, k, v), want * 2, atol=0, rtol=0)
    static = [t.clone() for t in (q, k, v)]
    ops.attention(*static, causal=True)              # compiled and planned before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ops.attention(*static, causal=True)
    for t, new in zip(static, (q.flip(2), k, v)):
        t.copy_(new)
    graph.replay()
    torch.testing.assert_close(captured, ops.attention(q.flip(2), k, v, causal=True), atol=0,
                               rtol=0)


def test_varlen_matches_each_sequence(torch):
    """attention_varlen on packed sequences (one empty, one key-less tail)
    gives, sequence by sequence, the float64 reference's o, lse and
    gradients (on Hopper varlen runs the mma.sync kernels, which attention
    runs only off Hopper, so the two are compared through the reference)."""
    lq, lk = [300, 0, 1000, 77], [500, 64, 1000, 1]
    cq = torch.tensor([0, *torch.tensor(lq).cumsum(0).tolist()], dtype=torch.int32,
                      device="cuda")
    ck = torch.tensor([0, *torch.tensor(lk).cumsum(0).tolist()], dtype=torch.int32,
                      device="cuda")
    g = torch.Generator(device="cuda").manual_seed(7)
    q = torch.randn(sum(lq), 4, 128, device="cuda", generator=g).half().requires_grad_()
    k = torch.randn(sum(lk), 2, 128, device="cuda", generator=g).half().requires_grad_()
    v = torch.randn(sum(lk), 2, 128, device="cuda", generator=g).half().requires_grad_()
    o, lse = ops.attention_varlen(q, k, v, cq, ck, max(lq), max(lk), causal=True,
                                  return_lse=True)
    do = torch.randn_like(o)
    dq, dk, dv = torch.autograd.grad(o, (q, k, v), do)
    for b in range(len(lq)):
        qs, ks = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
        if lq[b] == 0:
            assert not dk[ks].any() and not dv[ks].any()
            continue
        qb, kb, vb, dob = (t.detach()[s].transpose(0, 1)[None]
                           for t, s in ((q, qs), (k, ks), (v, ks), (do, qs)))
        want = reference(torch, qb, kb, vb, True, 1 / math.sqrt(128), dob)
        got = (o[qs], lse[:, qs].transpose(0, 1), dq[qs], dk[ks], dv[ks])
        for what, x, ref in zip(("o", "lse", "dq", "dk", "dv"), got, want):
            x = x.transpose(0, 1)[None]
            if what == "lse":
                finite = torch.isfinite(ref)
                assert torch.equal(torch.isinf(x), ~finite)
                assert float((x[finite].double() - ref[finite]).abs().max()) < 1e-3
            else:
                close(torch, x, ref, "float16", f"sequence {b}: {what}")


@pytest.mark.parametrize("causal", [False, True])
def test_persistent_blocks_walk_the_query_blocks(torch, causal):
    """A grid of 3 blocks, each walking query blocks in turn (Q reloaded
    once the last one's O has left shared memory, the K and V rings carried
    on), gives the bits of a block a query block: GQA, ragged."""
    from moye.ops import attention_sm90
    if not torch.cuda.get_device_capability()[0] == 9:
        pytest.skip("the wgmma forward needs compute capability 9.x")
    g = torch.Generator(device="cuda").manual_seed(11)
    q = torch.randn(2, 4, 700, 64, device="cuda", generator=g).half()
    k, v = (torch.randn(2, 2, 900, 64, device="cuda", generator=g).half() for _ in range(2))
    got = []
    rows = attention_sm90.TILES[64][0]
    for blocks in (3, 2 * 4 * -(-700 // rows)):         # then a block a query block
        o = torch.full_like(q, math.nan)
        lse = torch.full((2, 4, 700), math.nan, device="cuda")
        attention_sm90.launch(q, k, v, o, lse, 0.125, causal, blocks)
        got.append((o, lse))
    for a, b in zip(*got):
        assert not a.isnan().any() and torch.equal(a, b)

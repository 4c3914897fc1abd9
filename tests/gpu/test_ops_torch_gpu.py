"""moye.ops' torch custom ops on CUDA tensors: forward and backward of each
op against torch in float64, on a non-default stream, under CUDA-graph
capture and replay, and under torch.compile(fullgraph=True)."""
import pytest

import moye

pytestmark = pytest.mark.gpu

OPS = ["softmax", "log_softmax", "rms_norm", "layer_norm", "cross_entropy"]
TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 4e-3), "bfloat16": (1.6e-2, 2e-2)}


def _inputs(torch, op, m, n, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*s, scale=1.0):
        return (torch.randn(*s, device="cuda", generator=g) * scale).to(dtype)

    if op == "cross_entropy":
        target = torch.randint(0, n, (m,), device="cuda", generator=g)
        target[::5] = -100
        return [randn(m, n, scale=3).requires_grad_(), target]
    x = randn(m, n, scale=3).requires_grad_()
    if op in ("softmax", "log_softmax"):
        return [x]
    w = (1 + randn(n, scale=0.5)).requires_grad_()
    return [x, w] if op == "rms_norm" else [x, w, randn(n).requires_grad_()]


def _torch_op(torch, op, args):
    F = torch.nn.functional
    n = args[0].shape[-1]
    return {"softmax": lambda: torch.softmax(args[0], -1),
            "log_softmax": lambda: torch.log_softmax(args[0], -1),
            "rms_norm": lambda: F.rms_norm(args[0], (n,), args[1], 1e-6),
            "layer_norm": lambda: F.layer_norm(args[0], (n,), args[1], args[2], 1e-5),
            "cross_entropy": lambda: F.cross_entropy(args[0], args[1])}[op]()


def _grads(torch, op, args, fn, w):
    """fn's output and the gradients of sum(output * w) for the floating inputs."""
    out = fn(args)
    leaves = [a for a in args if a.is_floating_point()]
    return out, torch.autograd.grad((out * w.to(out.dtype)).sum(), leaves)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [1, 100, 4097, 65_536])
@pytest.mark.parametrize("op", OPS)
def test_forward_and_backward(torch, op, n, dtype):
    m = max(1, min(64, 2 ** 20 // n))
    args = _inputs(torch, op, m, n, getattr(torch, dtype), seed=n)
    ref_args = [a.detach().double().requires_grad_() if a.is_floating_point() else a
                for a in args]
    w = torch.randn(() if op == "cross_entropy" else (m, n), device="cuda")
    out, grads = _grads(torch, op, args, lambda a: getattr(moye.ops, op)(*a), w)
    want, want_grads = _grads(torch, op, ref_args, lambda a: _torch_op(torch, op, a), w.double())
    torch.cuda.synchronize()
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.double(), want, atol=atol * 4, rtol=rtol)
    for g, r, a in zip(grads, want_grads, [a for a in args if a.is_floating_point()]):
        assert g.dtype == a.dtype and g.shape == a.shape
        scale = 8 * max(1.0, float(r.abs().max()))
        torch.testing.assert_close(g.double(), r, atol=atol * scale, rtol=rtol * 4)


@pytest.mark.parametrize("op", OPS)
def test_on_a_side_stream(torch, op):
    """The ops launch on torch's current stream: work queued after them on a
    busy side stream sees their results."""
    args = _inputs(torch, op, 512, 4096, torch.float32, seed=1)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(10_000_000)                  # keep s busy: a race would show
        out = getattr(moye.ops, op)(*args)
        (g,) = torch.autograd.grad(out.sum(), [args[0]])
        got = (out.detach() * 1.0, g * 1.0)
    s.synchronize()
    ref = [a.detach().double().requires_grad_() if a.is_floating_point() else a for a in args]
    want = _torch_op(torch, op, ref)
    (want_g,) = torch.autograd.grad(want.sum(), [ref[0]])
    torch.testing.assert_close(got[0].double(), want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got[1].double(), want_g, atol=1e-4, rtol=1e-4)


class Model:
    def __init__(self, torch, ops, n):
        self.torch, self.ops = torch, ops
        self.w = (1 + 0.1 * torch.randn(n, device="cuda")).requires_grad_()
        self.b = (0.1 * torch.randn(n, device="cuda")).requires_grad_()

    def params(self):
        return [self.w, self.b]

    def __call__(self, x, target):
        h = x * self.w + self.b
        if "rms_norm" in self.ops:
            h = moye.ops.rms_norm(h, self.w)
        if "layer_norm" in self.ops:
            h = moye.ops.layer_norm(h, self.w, self.b)
        if "softmax" in self.ops:
            h = h + moye.ops.softmax(h, 0)
        if "log_softmax" in self.ops:
            h = h + moye.ops.log_softmax(h, -1)
        if "cross_entropy" in self.ops:
            return moye.ops.cross_entropy(h, target)
        return (h * h).mean()


def _step(model, x, target):
    loss = model(x, target)
    return (loss,) + tuple(model.torch.autograd.grad(loss, [x] + model.params()))


def test_cuda_graph_capture_and_replay(torch):
    """Forward and backward of a model of every op, captured once; replayed
    on new data copied into the static input."""
    ops = OPS
    m, n = 64, 1000
    model = Model(torch, ops, n)
    x = torch.randn(m, n, device="cuda").requires_grad_()
    target = torch.randint(0, n, (m,), device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):                                        # warm up: compile, plan
            _step(model, x, target)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = _step(model, x, target)
    for seed in (1, 2):
        new = torch.randn(m, n, device="cuda", generator=torch.Generator(
            device="cuda").manual_seed(seed))
        with torch.no_grad():
            x.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        want = _step(model, new.clone().requires_grad_(), target)
        for g, w in zip(static, want):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_torch_compile_fullgraph(torch, backend):
    ops = OPS
    model = Model(torch, ops, 512)
    x = torch.randn(32, 512, device="cuda").requires_grad_()
    target = torch.randint(0, 512, (32,), device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(model.__call__, backend=backend, fullgraph=True)
    want = _step(model, x, target)
    got = (compiled(x, target),)
    got = got + tuple(torch.autograd.grad(got[0], [x] + model.params()))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    explained = torch._dynamo.explain(model.__call__)(x, target)
    assert explained.graph_break_count == 0, explained.break_reasons


def test_mismatched_devices_and_dtypes(torch):
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(moye.MoyeTypeError, match="dy is on cpu but y is on cuda"):
        moye.ops.softmax_backward(x, x.cpu())
    with pytest.raises(moye.MoyeTypeError, match="got int32"):
        moye.ops.softmax(torch.ones(4, 8, dtype=torch.int32, device="cuda"))

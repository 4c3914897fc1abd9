"""moye.ops.matmul on torch CUDA tensors: every element against float64,
outputs poisoned first, the shapes of the decode and prefill GEMMs
(ragged, unaligned, transposed, batched) with the fused epilogue; repeat
calls on new tensors, autograd, CUDA-graph capture, torch.compile."""
import math

import pytest

from moye import ops

pytestmark = pytest.mark.gpu
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2e-6}


def act64(torch, name):
    F = torch.nn.functional
    return {None: lambda x: x, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu,
            "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[name]


def reference(torch, a, b, bias, activation, residual, alpha):
    """(the epilogue of the float64 product, |a| @ |b|)."""
    ref = alpha * (a.double() @ b.double())
    if bias is not None:
        ref = ref + bias.double()
    ref = act64(torch, activation)(ref)
    if residual is not None:
        ref = ref + residual.double()
    return ref, a.double().abs() @ b.double().abs()


def check(torch, y, a, b, bias=None, activation=None, residual=None, alpha=1.0):
    ref, scale = reference(torch, a, b, bias, activation, residual, alpha)
    bound = EPS[str(y.dtype)[6:]] * ref.abs() + 1e-5 * scale + 1e-6
    bad = ~((y.double() - ref).abs() <= bound)
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements off"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape, ta, tb, activation, out32", [
    ((4096, 4096, 4096), False, False, None, False),
    ((1, 4096, 4096), False, True, None, False),
    ((16, 4096, 4096), False, False, "gelu_tanh", True),
    ((1000, 1000, 1000), True, True, "gelu", False),
    ((70, 45, 37), True, False, "relu", True),
    ((3, 130, 264, 200), False, False, "silu", False),
    ((128, 14336, 4096), False, True, "relu", False),
])
def test_matmul_every_element(torch, hopper_only, dtype, shape, ta, tb, activation, out32):
    dt = getattr(torch, dtype)
    *batch, M, N, K = shape
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(*batch, M, K, device="cuda", generator=g).to(dt)
    a = a.mT.contiguous().mT if ta else a
    b = torch.randn(N, K, device="cuda", generator=g).to(dt).T if tb else \
        torch.randn(K, N, device="cuda", generator=g).to(dt)
    bias = torch.randn(N, device="cuda", generator=g).to(dt)
    out_dtype = torch.float32 if out32 else dt
    residual = torch.randn(*batch, M, N, device="cuda", generator=g).to(out_dtype)
    out = torch.full((*batch, M, N), math.nan, device="cuda", dtype=out_dtype)
    ops.matmul(a, b, bias=bias, activation=activation, residual=residual, out=out)
    check(torch, out, a, b, bias, activation, residual)
    y = ops.matmul(a, b, bias=bias, activation=activation, residual=residual,
                   out_dtype=out_dtype)
    torch.testing.assert_close(y, out, atol=0, rtol=0)


def check_tf32(torch, y, a, b, bias=None, activation=None, residual=None, alpha=1.0):
    """Every element within tf32's error: each input keeps 10 mantissa bits."""
    ref, scale = reference(torch, a, b, bias, activation, residual, alpha)
    bound = 2.0 ** -10 * scale + 2e-6 * ref.abs() + 1e-5 * scale + 1e-6
    bad = ~((y.double() - ref).abs() <= bound)
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements off"


@pytest.mark.parametrize("shape, ta, tb, activation", [
    ((4096, 4096, 4096), False, False, None),           # b N-major: copied K-major
    ((4096, 4096, 4096), False, True, "relu"),          # b K-major (a weight's transpose)
    ((1000, 1000, 1000), True, True, "gelu"),           # a M-major: copied K-major
    ((1000, 1000, 1000), False, True, None),
    ((16, 4096, 4096), False, True, "silu"),            # split along K
])
def test_tf32_every_element(torch, hopper_only, shape, ta, tb, activation):
    M, N, K = shape
    g = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, device="cuda", generator=g)
    a = a.mT.contiguous().mT if ta else a
    b = torch.randn(N, K, device="cuda", generator=g).T if tb else \
        torch.randn(K, N, device="cuda", generator=g)
    bias = torch.randn(N, device="cuda", generator=g)
    residual = torch.randn(M, N, device="cuda", generator=g)
    out = torch.full((M, N), math.nan, device="cuda")
    ops.matmul(a, b, bias=bias, activation=activation, residual=residual, out=out,
               allow_tf32=True)
    check_tf32(torch, out, a, b, bias, activation, residual)
    y = ops.matmul(a, b, bias=bias, activation=activation, residual=residual, allow_tf32=True)
    torch.testing.assert_close(y, out, atol=0, rtol=0)


def test_repeat_calls_take_their_own_tensors(torch, hopper_only):
    """Repeat calls of one signature replay the first (its launch with the
    tensor maps moved to the new tensors); a view of the same signature
    whose address TMA cannot take runs in full (through a padded copy)."""
    from moye.ops import functional, replay
    base = torch.randn(256, 520, device="cuda").half()
    for seed in range(4):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randn(256, 520, device="cuda", generator=g).half()[:, 8:]
        b = torch.randn(512, 384, device="cuda", generator=g).half()
        bias = torch.randn(384, device="cuda", generator=g).half()
        residual = torch.randn(256, 384, device="cuda", generator=g).half()
        y = ops.matmul(a, b, bias=bias, activation="gelu", residual=residual)
        check(torch, y, a, b, bias, "gelu", residual)
        key = replay.signature((a, b, bias, "gelu", residual, 1.0, None, None, False), True)
        assert type(functional._matmul.recipes[key]) is replay.Recipe
        x = torch.randn(2, 64, 512, device="cuda", generator=g).bfloat16()
        w = torch.randn(384, 512, device="cuda", generator=g).bfloat16()
        b16 = bias.bfloat16()
        y = ops.linear(x, w, b16, activation="relu")
        check(torch, y.reshape(128, 384), x.reshape(128, 512), w.T, b16, "relu")
        key = replay.signature((x, w, b16, "relu", False), True)
        assert type(ops.linear.recipes[key]) is replay.Recipe
    misaligned = base[:, 1:513]                   # a's signature, 2 bytes past 16
    assert misaligned.stride() == a.stride() and misaligned.data_ptr() % 16
    y = ops.matmul(misaligned, b, bias=bias, activation="gelu", residual=residual)
    check(torch, y, misaligned, b, bias, "gelu", residual)


def test_a_replayed_signature_whose_out_overlaps_b(torch, hopper_only):
    """A call of a recorded signature (out apart from b) whose out now lies
    in b's rows: computed apart, then copied, not replayed in place."""
    M, N, K = 1024, 2048, 4096
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    first, second = (torch.randn(M + K, N, device="cuda", dtype=torch.bfloat16)
                     for _ in range(2))
    for _ in range(2):
        ops.matmul(a, first[M:], out=first[:M])
    b = second[M:].clone()
    out = second[M:2 * M]
    ops.matmul(a, second[M:], out=out)
    check(torch, out, a, b)


def test_tensor_maps_move_as_the_driver_moves_them(torch, hopper_only):
    import dataclasses

    import moye
    from moye.backend.cuda import driver
    x = torch.zeros(1 << 20, device="cuda").half()
    tile = moye.composition(moye.Swizzle(3, 3, 3), moye.Layout((8, 64), (64, 1)))
    copy = moye.make_tma_copy(moye.TMA_LOAD, x[: 512 * 64].view(512, 64), tile)
    at = driver.tensor_map_at(copy)
    for offset in (16, 4096, 1 << 19, 12345 * 16):
        address = copy.args.global_address + offset
        moved = dataclasses.replace(copy.args, global_address=address)
        assert at(address) == driver.encode_tensor_map(moved)
        assert driver.replace_address(driver.tensor_map_bytes(copy), address) == at(address)


@pytest.mark.parametrize("dtype, tolerance", [("bfloat16", 2e-2), ("float32", 4e-3)])
def test_linear_autograd(torch, hopper_only, dtype, tolerance):
    """linear's gradients against float64 (float32: tf32, with allow_tf32)."""
    dt = getattr(torch, dtype)
    x = torch.randn(4, 64, 256, device="cuda").to(dt).requires_grad_()
    w = torch.randn(512, 256, device="cuda").to(dt).requires_grad_()
    bias = torch.randn(512, device="cuda").to(dt).requires_grad_()
    y = ops.linear(x, w, bias, activation="gelu", allow_tf32=dtype == "float32")
    leaves = [t.detach().double().requires_grad_() for t in (x, w, bias)]
    ref = torch.nn.functional.gelu(torch.nn.functional.linear(*leaves))
    dy = torch.randn_like(ref)
    (y.double() * dy).sum().backward()
    (ref * dy).sum().backward()
    for t, t64 in zip((x, w, bias), leaves):
        assert (t.grad.double() - t64.grad).abs().max() / t64.grad.abs().max() < tolerance


def test_cuda_graph_capture_and_replay(torch, hopper_only):
    a = torch.randn(512, 256, device="cuda").half()
    b = torch.randn(256, 768, device="cuda").half()
    bias = torch.randn(768, device="cuda").half()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            ops.matmul(a, b, bias=bias, activation="relu")
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static = ops.matmul(a, b, bias=bias, activation="relu")
    for seed in (1, 2):
        a.copy_(torch.randn(512, 256, device="cuda", generator=torch.Generator(
            device="cuda").manual_seed(seed)).half())
        graph.replay()
        torch.cuda.synchronize()
        check(torch, static, a, b, bias, "relu")


def test_torch_compile_fullgraph(torch, hopper_only):
    a = torch.randn(256, 512, device="cuda").half()
    b = torch.randn(512, 384, device="cuda").half()
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: ops.matmul(a, b, activation="silu") + 1, fullgraph=True)
    torch.testing.assert_close(f(a, b), ops.matmul(a, b, activation="silu") + 1, atol=0,
                               rtol=0)
    explained = torch._dynamo.explain(lambda a, b: ops.matmul(a, b) * 2)(a, b)
    assert explained.graph_break_count == 0, explained.break_reasons


@pytest.mark.parametrize("dtype, M, N, K, b_major", [("bfloat16", 1, 4096, 14336, "K"),
                                                     ("float16", 16, 1000, 4104, "K"),
                                                     ("bfloat16", 3, 1000, 4104, "MN"),
                                                     ("float16", 27, 1000, 2056, "MN"),
                                                     ("bfloat16", 256, 8192, 2048, "K")])
def test_every_candidate_config(torch, hopper_only, dtype, M, N, K, b_major):
    """Each config the autotuner may pick (split along K or not; swapped
    tiles of few rows), launched directly, writes every element, and a
    split one the same bits each time; the public call picks one of them,
    and its later calls replay it. b^T K-major (linear's weight) or N-major
    (a row-major b)."""
    from moye.ops import gemm_skinny, gemm_sm90, matmul_op, rows
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(M + K)
    a = torch.randn(1, M, K, device="cuda", generator=g).to(dt)
    w = torch.randn(1, N, K, device="cuda", generator=g).to(dt) if b_major == "K" else \
        torch.randn(1, K, N, device="cuda", generator=g).to(dt).transpose(1, 2)
    bias = torch.randn(N, device="cuda", generator=g).to(dt)
    residual = torch.randn(1, M, N, device="cuda", generator=g).to(dt)
    sms = rows.multiprocessors(a)
    skinny = gemm_skinny.eligible(a, w)
    assert skinny == (M <= 16)
    configs = gemm_sm90.candidates(M, N, K, 1, sms) + \
        (gemm_skinny.candidates(M, N, K, 1, sms, b_major) if skinny else [])
    assert any(c[4] > 1 for c in configs)
    assert any(gemm_sm90.kernel_tile(c)[2] for c in configs if not gemm_skinny.is_config(c)) \
        == (M <= 32)

    def launch(out, cfg, epilogue=True):
        extra = dict(bias=bias, residual=residual, activation="silu") if epilogue else \
            dict(bias=None, residual=None, activation=None)
        for kernel, dims, args in matmul_op._launches(a, w, out, extra["bias"],
                                                      extra["residual"], 1.0,
                                                      extra["activation"], cfg, sms, None):
            kernel[dims](*args)
    for cfg in configs:
        out = torch.full((1, M, N), math.nan, device="cuda", dtype=dt)
        launch(out, cfg)
        check(torch, out[0], a[0], w[0].T, bias, "silu", residual[0])
        if cfg[4] > 2:      # the splits add up in their order, whichever finishes last
            runs = [torch.full((1, M, N), math.nan, device="cuda") for _ in range(4)]
            for run in runs:
                launch(run, cfg, epilogue=False)
            for run in runs[1:]:
                torch.testing.assert_close(run, runs[0], atol=0, rtol=0)
    for _ in range(3):      # the first call tunes; the later ones replay it (a split config's
        # tickets zero-filled anew each time)
        y = ops.matmul(a[0], w[0].T, bias=bias, activation="silu", residual=residual[0])
        check(torch, y, a[0], w[0].T, bias, "silu", residual[0])
    problem = (M, N, K, 1, sms, str(a.dtype), str(dt), "K", b_major, True, True, "silu", True,
               skinny)
    chosen = matmul_op._timed.best_config(a, w, residual, bias, residual, 1.0, "silu", problem)
    assert chosen is not None and chosen.cfg in configs


@pytest.mark.parametrize("M, tb", [(1, False), (3, True)])
def test_few_rows_replayed_and_captured(torch, M, tb):
    """Few rows (tuned, or the heuristic's config while a CUDA graph is
    captured: on Hopper a swapped gemm_sm90 tile split along K, its tickets
    zero-filled each call; off Hopper gemm_skinny's): every element, on
    calls that replay the first, and on graph replays."""
    from moye.ops import gemm_sm90, rows
    g = torch.Generator(device="cuda").manual_seed(M)
    w = torch.randn(4104, 2048, device="cuda", generator=g).half()     # K: 64 chunks and 8
    b = w.T.contiguous().T if tb else w         # (K, N) column-major: K-major b^T
    bias = torch.randn(2048, device="cuda", generator=g).half()
    heuristic = gemm_sm90.default_config(M, 2048, 4104, 1, rows.multiprocessors(w))
    assert gemm_sm90.kernel_tile(heuristic)[2] and heuristic[4] > 1       # swapped and split
    for _ in range(3):
        a = torch.randn(M, 4104, device="cuda", generator=g).half()
        residual = torch.randn(M, 2048, device="cuda", generator=g).half()
        y = ops.matmul(a, b, bias=bias, activation="gelu", residual=residual)
        check(torch, y, a, b, bias, "gelu", residual)
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        ops.matmul(a, b, bias=bias, activation="relu")
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        static = ops.matmul(a, b, bias=bias, activation="relu")
    for seed in (1, 2):
        a.copy_(torch.randn(M, 4104, device="cuda", generator=torch.Generator(
            device="cuda").manual_seed(seed)).half())
        graph.replay()
        torch.cuda.synchronize()
        check(torch, static, a, b, bias, "relu")

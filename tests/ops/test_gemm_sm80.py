"""moye.ops.gemm_sm80 (the mma.sync GEMM of moye.ops.matmul) on the CPU
backend against float64: out = activation(alpha * a @ b^T + bias) + beta *
residual, every element within a bound of the output's rounding and the
float32 accumulation. Operands inside NaN-padded buffers (a read outside
them poisons the result), outputs NaN-poisoned; shapes the tiles do not
divide. Bad inputs raise MoyeErrors naming the operand. One NVRTC compile
(sm_80, no GPU) of the fully fused kernel."""
import math

import ml_dtypes
import numpy as np
import pytest

from moye.backend.cpu import race_checking
from moye.errors import MoyeError
from moye.ops import gemm_sm80 as G
from moye.ops.epilogue import ACTIVATIONS

rng = np.random.default_rng(80)
SMALL = G.CONFIGS[-1]                       # 64x64 tiles, 4 warps: quick on the CPU
BF16 = ml_dtypes.bfloat16
UNIT_ROUNDOFF = {np.float16: 2.0 ** -11, BF16: 2.0 ** -8, np.float32: 2.0 ** -24}


def padded(shape, dtype, pad=8):
    """Random values in a view of a NaN buffer larger by `pad` in its last mode."""
    buf = np.full(shape[:-1] + (shape[-1] + pad,), np.nan, dtype)
    view = buf[..., :shape[-1]]
    view[...] = rng.standard_normal(shape)
    return view


def operand(rows, K, major, dtype, batch=()):
    """(*batch, rows, K), K-major (row-major), or M/N-major: the transposed view of a
    (*batch, K, rows)."""
    if major == "K":
        return padded(batch + (rows, K), dtype)
    return np.swapaxes(padded(batch + (K, rows), dtype), -1, -2)


def activate(x, activation):
    if activation == "relu":
        return np.maximum(x, 0.0)
    if activation == "gelu":
        return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    if activation == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if activation == "silu":
        return x / (1.0 + np.exp(-x))
    return x


def check(a, b, out, bias=None, residual=None, alpha=1.0, beta=1.0, activation=None):
    """out against float64: within the output's rounding of the result plus
    the float32 rounding of each term (accumulation over K, epilogue)."""
    f = lambda x: np.asarray(x, np.float64)            # noqa: E731
    a, b = f(a), np.swapaxes(f(b), -1, -2)
    pre = alpha * (a @ b) + (0.0 if bias is None else f(bias))
    ref = activate(pre, activation)
    scale = abs(alpha) * (np.abs(a) @ np.abs(b)) + (0.0 if bias is None else np.abs(f(bias)))
    if residual is not None:
        ref = ref + beta * f(residual)
        scale = scale + np.abs(beta * f(residual))
    K = a.shape[-1]
    tol = UNIT_ROUNDOFF[out.dtype.type] * np.abs(ref) + 2 * (K + 8) * 2.0 ** -24 * scale
    err = np.abs(f(out) - ref)
    assert not np.isnan(err).any(), f"{np.isnan(err).sum()} elements not written or NaN"
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert (err <= tol).all(), f"at {worst}: {f(out)[worst]} vs {ref[worst]} (tol {tol[worst]})"


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype)


def run(a, b, out_dtype, config=SMALL, batch=(), **epilogue):
    M, N = a.shape[-2], b.shape[-2]
    out = poisoned(batch + (M, N), out_dtype)
    G.launch(a, b, out, config=config, **epilogue)
    check(a, b, out, **epilogue)
    return out


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("M, N, K", [(72, 40, 56), (130, 136, 200), (64, 64, 64)])
def test_shapes_the_tiles_divide_or_not(M, N, K, dtype):
    run(operand(M, K, "K", dtype), operand(N, K, "K", dtype), dtype)


def test_the_default_tile():
    """TILE (256x128, 8 warps) on a ragged problem; default_config picks it for large ones."""
    run(operand(130, 136, "K", np.float16), operand(136, 136, "K", np.float16), np.float16,
        config=G.TILE)
    assert G.default_config(8192, 8192, 8192) is G.TILE


@pytest.mark.parametrize("config", G.CONFIGS[1:-1],
                         ids=lambda c: f"{c['bM']}x{c['bN']}x{c['bK']}")
def test_every_candidate_config(config):
    M, N, K = 136, 264, 72
    run(operand(M, K, "MN", np.float16), operand(N, K, "K", np.float16), np.float16,
        config=config, bias=padded((N,), np.float32), activation="relu")


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_each_activation_with_bias(activation):
    M, N, K = 72, 40, 56
    run(operand(M, K, "K", np.float16), operand(N, K, "K", np.float16), np.float16,
        bias=padded((N,), np.float16), activation=activation, alpha=0.5)


@pytest.mark.parametrize("out_dtype", [np.float16, np.float32])
def test_bias_residual_alpha_beta(out_dtype):
    M, N, K = 130, 136, 200
    a, b = operand(M, K, "K", np.float16), operand(N, K, "K", np.float16)
    run(a, b, out_dtype, bias=padded((N,), np.float32), residual=padded((M, N), out_dtype),
        alpha=0.25, beta=-1.5, activation="gelu_tanh")


@pytest.mark.parametrize("config", [SMALL, G.CONFIGS[3]], ids=["through_smem", "from_registers"])
@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["fp16", "bf16"])
def test_float32_out(dtype, config):
    """64x64 tiles keep the float32 tile in a pipeline buffer; 128x128x32 ones do not
    (the epilogue writes from the registers)."""
    via_smem = G.make_config(np.dtype(dtype).name if dtype is np.float16 else "BFloat16",
                             out_dtype="Float32", **config)[0][7] is not None
    assert via_smem == (config is SMALL)
    M, N, K = 130, 136, 200
    a, b = operand(M, K, "K", dtype), operand(N, K, "K", dtype)
    run(a, b, np.float32, config=config, residual=padded((M, N), np.float32), beta=0.5,
        bias=padded((N,), dtype), activation="silu")


@pytest.mark.parametrize("shared", ["a", "b", "b_stride_0", "none"])
def test_batches_with_a_shared_operand(shared):
    """Batches in grid z; a 2-D operand, a batch of 1 or a batch stride of 0 is
    shared by every batch, as is the bias; the residual has its own batches."""
    B, M, N, K = 3, 72, 40, 56
    a = operand(M, K, "K", BF16, () if shared == "a" else (B,))
    b = operand(N, K, "MN", BF16, () if shared == "b" else (B,))
    if shared == "b_stride_0":
        b = np.broadcast_to(operand(N, K, "K", BF16), (B, N, K))
    run(a, b, BF16, batch=(B,), bias=padded((N,), np.float32),
        residual=padded((B, M, N), BF16), beta=2.0)


def test_a_shared_residual_and_a_batch_of_one():
    M, N, K = 72, 40, 56
    a, b = operand(M, K, "K", np.float16, (2,)), operand(N, K, "K", np.float16, (1,))
    run(a, b, np.float32, batch=(2,), residual=padded((M, N), np.float32), beta=-1.0)


@pytest.mark.parametrize("a_major, b_major", [("K", "K"), ("MN", "K"), ("K", "MN"),
                                              ("MN", "MN")])
def test_each_operand_layout(a_major, b_major):
    M, N, K = 72, 136, 40
    run(operand(M, K, a_major, np.float16), operand(N, K, b_major, np.float16), np.float16,
        residual=padded((M, N), np.float16), activation="relu")


def test_k_need_not_be_a_multiple_of_8_when_both_are_mn_major():
    run(operand(72, 37, "MN", np.float16), operand(40, 37, "MN", np.float16), np.float16)


@pytest.mark.parametrize("out_dtype, config", [(BF16, SMALL), (np.float32, G.CONFIGS[3])],
                         ids=["through_smem", "from_registers"])
def test_race_checked_fused_batched_run(out_dtype, config):
    M, N, K = 72, 40, 56
    a, b = operand(M, K, "MN", BF16, (2,)), operand(N, K, "K", BF16)
    with race_checking():
        run(a, b, out_dtype, config, batch=(2,), bias=padded((N,), BF16),
            residual=padded((M, N), out_dtype), beta=0.5, activation="gelu")


def test_the_kernel_drops_c_where_beta_is_0():
    """As BLAS: gemm_kernel given C (here NaN) and beta = 0 computes alpha * A @ B^T."""
    M, N, K = 72, 40, 56
    a, b = operand(M, K, "K", np.float16), operand(N, K, "K", np.float16)
    out = poisoned((M, N), np.float16)
    args, threads = G.make_config("Float16", residue=True, **SMALL)
    G.gemm_kernel[G.grid(M, N, **SMALL), threads](a, b, out, out, 1.0, 0.0, *args)
    check(a, b, out)


def test_in_place_residual_and_beta_zero():
    """residual may be out itself; beta = 0 leaves the residual unread (NaN there
    stays out of the result)."""
    M, N, K = 72, 40, 56
    a, b = operand(M, K, "K", np.float16), operand(N, K, "K", np.float16)
    out = padded((M, N), np.float16)
    before = out.copy()
    G.launch(a, b, out, residual=out, beta=-1.0, config=SMALL)
    check(a, b, out, residual=before, beta=-1.0)
    out = poisoned((M, N), np.float16)
    G.launch(a, b, out, residual=out, beta=0.0, config=SMALL)
    check(a, b, out)


def test_default_config_takes_small_tiles_for_small_problems():
    assert G.default_config(100, 100, 64) is SMALL
    assert G.default_config(100, 100, 64, batches=64) is G.CONFIGS[4]
    assert G.default_config(8192, 8192, 8192, smem=99 * 1024) is G.CONFIGS[2]   # sm_86, sm_89
    assert G.device_limits(None) == (G.SMS_SM80, G.SMEM_SM80)
    assert all(G.smem_bytes(c) <= 144 * 1024 for c in G.CONFIGS)


# -- bad inputs -------------------------------------------------------------------------

def h(*shape, dtype=np.float16):
    return np.zeros(shape, dtype)


BAD = {
    "k mismatch": (dict(a=h(64, 32), b=h(48, 40), out=h(64, 48)),
                   r"a is 64x32 and b is 48x40; b must be N x K"),
    "out shape": (dict(a=h(64, 32), b=h(48, 32), out=h(64, 40)),
                  r"out has shape \(64, 40\); expected \(M, N\) = \(64, 48\)"),
    "out not batched": (dict(a=h(2, 64, 32), b=h(48, 32), out=h(64, 48)),
                        r"out has shape \(64, 48\); expected \(batches, M, N\) = \(2, 64, 48\)"),
    "batch counts": (dict(a=h(2, 64, 32), b=h(3, 48, 32), out=h(3, 64, 48)),
                     r"a has 2 batches and another operand 3"),
    "rank": (dict(a=h(64), b=h(48, 32), out=h(64, 48)), r"a has shape \(64,\); it must have 2"),
    "a type": (dict(a=h(64, 32, dtype=np.float64), b=h(48, 32), out=h(64, 48)),
               r"a is Float64; it must be Float16, BFloat16 or Float32 \(as tf32\)"),
    "tf32 b type": (dict(a=h(64, 32, dtype=np.float32), b=h(48, 32), out=h(64, 48)),
                    r"b is Float16; it must be a's type \(Float32\)"),
    "tf32 mn-major": (dict(a=h(64, 32, dtype=np.float32), b=h(32, 48, dtype=np.float32).T,
                           out=h(64, 48, dtype=np.float32)),
                      r"float32 \(tf32\) operands must be K-major.*b is not"),
    "tf32 k extent": (dict(a=h(64, 38, dtype=np.float32), b=h(48, 38, dtype=np.float32),
                           out=h(64, 48, dtype=np.float32)),
                      r"K = 38 must be a multiple of 4 because a is K-major"),
    "b type": (dict(a=h(64, 32), b=h(48, 32, dtype=BF16), out=h(64, 48)),
               r"b is BFloat16; it must be a's type \(Float16\)"),
    "out type": (dict(a=h(64, 32), b=h(48, 32), out=h(64, 48, dtype=BF16)),
                 r"out is BFloat16; it must be a's type \(Float16\) or Float32"),
    "bias type": (dict(a=h(64, 32), b=h(48, 32), out=h(64, 48), bias=h(48, dtype=np.float64)),
                  r"bias is Float64; it must be a's type \(Float16\) or Float32"),
    "residual type": (dict(a=h(64, 32), b=h(48, 32), out=h(64, 48, dtype=np.float32),
                           residual=h(64, 48)),
                      r"residual is Float16; it must be out's type \(Float32\)"),
    "bias shape": (dict(a=h(64, 32), b=h(48, 32), out=h(64, 48), bias=h(64)),
                   r"bias has shape \(64,\); expected \(N,\) = \(48,\)"),
    "residual shape": (dict(a=h(64, 32), b=h(48, 32), out=h(64, 48), residual=h(48, 64)),
                       r"residual has shape \(48, 64\); expected \(M, N\) = \(64, 48\)"),
    "activation": (dict(a=h(64, 32), b=h(48, 32), out=h(64, 48), activation="tanh"),
                   r"activation must be one of None, 'relu'.*got 'tanh'"),
    "k extent": (dict(a=h(64, 36), b=h(48, 36), out=h(64, 48)),
                 r"K = 36 must be a multiple of 8 because a is K-major.*"
                 r"a has shape \(64, 36\) and strides \(36, 1\)"),
    "m extent": (dict(a=h(32, 60).T, b=h(48, 32), out=h(60, 48)),
                 r"M = 60 must be a multiple of 8 because a is M-major"),
    "row stride": (dict(a=h(64, 44)[:, :40], b=h(48, 40), out=h(64, 48)),
                   r"16-byte aligned and its other strides multiples of 8 \(a has shape "
                   r"\(64, 40\) and strides \(44, 1\)\)"),
    "address": (dict(a=h(48 * 32 + 1)[1:].reshape(48, 32), b=h(48, 32), out=h(48, 48)),
                r"its address must be 16-byte aligned"),
    "batch stride": (dict(a=h(2, 64, 32), b=h(2, 1540)[:, :48 * 32].reshape(2, 48, 32),
                          out=h(2, 64, 48)),
                     r"b has shape \(2, 48, 32\) and strides \(1540, 32, 1\)"),
    "no unit stride": (dict(a=h(64, 64)[:, ::2], b=h(48, 32), out=h(64, 48)),
                       r"a must be K-major \(row-major\) or M-major"),
    "out column-major": (dict(a=h(64, 32), b=h(48, 32), out=h(48, 64).T),
                         r"out must be row-major"),
    "k zero": (dict(a=h(64, 0), b=h(48, 0), out=h(64, 48)), r"K = 0"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_inputs_name_the_operand(case):
    kwargs, message = BAD[case]
    with pytest.raises(MoyeError, match=message):
        G.launch(**kwargs, config=SMALL)


def test_bad_config(monkeypatch):
    monkeypatch.setattr(G, "SMEM_SM80", 99 * 1024)          # as on an sm_86 or sm_89
    monkeypatch.setattr(G, "_PLANS", {})
    with pytest.raises(MoyeError, match=r"takes 147456 bytes of shared memory and this device "
                                        r"allows 101376"):
        G.launch(h(64, 32), h(48, 32), h(64, 48), config=G.TILE)
    with pytest.raises(MoyeError, match=r"bM and bN must be multiples of 64"):
        G.launch(h(64, 32), h(48, 32), h(64, 48), config={**SMALL, "bM": 96})
    with pytest.raises(MoyeError, match=r"unknown config keys \['tile'\]"):
        G.launch(h(64, 32), h(48, 32), h(64, 48), config={**SMALL, "tile": 96})


# -- float32 inputs as tf32 (mma.sync m16n8k8) ------------------------------------------

def tf32(x):
    """float32 values as the tensor cores read tf32: the low 13 mantissa bits
    dropped."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("M, N, K, activation", [(72, 40, 56, None), (130, 136, 200, "gelu"),
                                                 (64, 64, 64, "relu")])
def test_tf32_every_element(M, N, K, activation):
    """Against float64 of the inputs as tf32 reads them (the CPU backend's
    mma.sync drops their low 13 bits as the hardware does), so the bound is
    float32 accumulation's; bK 32 (tf32_configs)."""
    a, b = operand(M, K, "K", np.float32), operand(N, K, "K", np.float32)
    bias, residual = rng.standard_normal(N).astype(np.float32), poisoned((M, N), np.float32)
    residual[...] = rng.standard_normal((M, N))
    out = poisoned((M, N), np.float32)
    config = {**SMALL, "bK": 32}
    G.launch(a, b, out, bias=bias, residual=residual, alpha=0.5, activation=activation,
             config=config)
    check(tf32(a), tf32(b), out, bias=bias, residual=residual, alpha=0.5, activation=activation)
    assert G.default_config(M, N, K, ebytes=4)["bK"] == 32


def test_tf32_configs_fit_as_the_16_bit_ones():
    assert [G.smem_bytes(c, 4) for c in G.tf32_configs()] == \
        [G.smem_bytes(c) for c in G.CONFIGS if c["bK"] >= 64]
    assert G.default_config(8192, 8192, 8192, ebytes=4) == {**G.TILE, "bK": 32}


# -- NVRTC, no GPU ---------------------------------------------------------------------

def test_fused_kernel_compiles_for_sm80():
    """bias + gelu + residual into float32, batched, predicated: NVRTC for sm_80."""
    from moye.compiler.frontend import BACKENDS
    args, threads = G.make_config("Float16", "K", "MN", residue=True, d_vector=4,
                                  out_dtype="Float32")
    a, b = h(2, 200, 72), h(2, 72, 136).transpose(0, 2, 1)
    out = h(2, 200, 136, dtype=np.float32)
    kernel = G.gemm_kernel.trace(a, b, out, out, 1.0, 0.5, *args, h(136, dtype=np.float32),
                                 "gelu", block=threads)[0]
    module = BACKENDS["cuda"].compile_only(kernel, (threads, 1, 1), "sm_80")
    assert module.cubin[:4] == b"\x7fELF"


def test_tf32_kernel_compiles_for_sm80():
    """float32 inputs (tf32 mma.sync), the default tile's bK halved, fused."""
    from moye.compiler.frontend import BACKENDS
    args, threads = G.make_config("Float32", "K", "K", **{**G.TILE, "bK": 32}, residue=True,
                                  d_vector=4, out_dtype="Float32")
    f32 = dict(dtype=np.float32)
    a, b, out = h(2, 300, 72, **f32), h(2, 136, 72, **f32), h(2, 300, 136, **f32)
    kernel = G.gemm_kernel.trace(a, b, out, out, 1.0, 0.5, *args, h(136, **f32), "silu",
                                 block=threads)[0]
    source = BACKENDS["cuda"].source(kernel, (threads, 1, 1))
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in source
    module = BACKENDS["cuda"].compile_only(kernel, (threads, 1, 1), "sm_80")
    assert module.cubin[:4] == b"\x7fELF"

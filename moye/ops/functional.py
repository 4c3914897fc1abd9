"""The public ops of moye.ops, one function each.

A NumPy array goes to the op's raw host function (rows.raw: the kernels on
the CPU backend, no autograd). A torch tensor goes to the op's custom op
`torch.ops.moye.<name>` (moye.ops.torch_ops, imported with torch on first
use), so that autograd, torch.compile and CUDA graphs see one operator; its
implementation calls the same raw function (CUDA tensors: the CUDA kernel on
torch's current stream; CPU tensors: the CPU backend).

Each op is `replay.replayed(autograd=True)`: in eager mode, with no gradient
to record, a later call on torch tensors of the same kinds replays the first
one's outputs and launches (moye/ops/replay.py), skipping the checks and
layers between the op and its kernels.
"""
import math

import numpy as np

from ..errors import BoundsError, MoyeTypeError, ShapeError
from . import replay, rows

REDUCTIONS = ("none", "sum", "mean")


@replay.replayed(autograd=True)
def softmax(x, dim=-1):
    """Softmax of `x` along `dim`: float32, float16 or bfloat16 in, the same
    type out, float32 math inside. torch: `torch.softmax(x, dim)`.

        >>> import numpy as np
        >>> y = softmax(np.array([[0.0, 1.0, 2.0]], np.float32))
        >>> np.round(y.astype(float), 4).tolist()
        [[0.09, 0.2447, 0.6652]]
    """
    if rows.uses_torch(x):
        return rows.torch_ops().softmax(x, dim)
    return rows.raw("softmax")(x, dim)


@replay.replayed(autograd=True)
def softmax_backward(y, dy, dim=-1):
    """The gradient of softmax along `dim`, dx = y * (dy - sum(dy * y)), from
    the forward's output `y` and the output's gradient `dy` (same shape and
    type). torch: `torch._softmax_backward_data(dy, y, dim, y.dtype)`.

        >>> import numpy as np
        >>> y = softmax(np.array([[0.0, 1.0, 2.0]], np.float32))
        >>> dx = softmax_backward(y, np.array([[1.0, 0.0, 0.0]], np.float32))
        >>> np.round(dx.astype(float), 4).tolist()
        [[0.0819, -0.022, -0.0599]]
    """
    if rows.uses_torch(y, dy):
        return rows.torch_ops().softmax_backward(y, dy, dim)
    return rows.raw("softmax_backward")(y, dy, dim)


@replay.replayed(autograd=True)
def log_softmax(x, dim=-1):
    """Log-softmax of `x` along `dim`, x - max - log(sum(exp(x - max))), in
    the input's type. torch: `torch.log_softmax(x, dim)`.

        >>> import numpy as np
        >>> y = log_softmax(np.array([[1.0, 2.0, 3.0]], np.float32))
        >>> np.round(y.astype(float), 4).tolist()                    
        [[-2.4076, -1.4076, -0.4076]]
    """
    if rows.uses_torch(x):
        return rows.torch_ops().log_softmax(x, dim)
    return rows.raw("log_softmax")(x, dim)


@replay.replayed(autograd=True)
def log_softmax_backward(y, dy, dim=-1):
    """The gradient of log-softmax along `dim`, dx = dy - exp(y) * sum(dy),
    from the forward's output `y`. torch: `torch._log_softmax_backward_data`.

        >>> import numpy as np
        >>> y = log_softmax(np.array([[1.0, 2.0, 3.0]], np.float32))
        >>> dx = log_softmax_backward(y, np.ones((1, 3), np.float32))
        >>> abs(float(dx.sum())) < 1e-6
        True
    """
    if rows.uses_torch(y, dy):
        return rows.torch_ops().log_softmax_backward(y, dy, dim)
    return rows.raw("log_softmax_backward")(y, dy, dim)


@replay.replayed(autograd=True)
def rms_norm(x, weight, eps=1e-6):
    """RMSNorm over the last dimension, x / sqrt(mean(x^2) + eps) * weight
    (`weight` of shape (N,), or None). torch:
    `torch.nn.functional.rms_norm(x, (N,), weight, eps)`.

        >>> import numpy as np
        >>> x, w = np.array([[1.0, 2.0, 3.0]], np.float32), np.array([1.0, 0.5, 2.0], np.float32)
        >>> np.round(rms_norm(x, w).astype(float), 4).tolist()      
        [[0.4629, 0.4629, 2.7775]]
    """
    return rms_norm_forward(x, weight, eps)[0]


@replay.replayed(autograd=True)
def rms_norm_forward(x, weight, eps=1e-6):
    """(y, rstd): rms_norm and its 1 / sqrt(mean(x^2) + eps) per row (float32,
    float64 for float64 x), which rms_norm_backward takes.

        >>> import numpy as np
        >>> y, rstd = rms_norm_forward(np.array([[3.0, 4.0]], np.float32), None)
        >>> np.round(rstd.astype(float), 4).tolist()
        [0.2828]
    """
    eps = _number(eps, "eps", "rms_norm")
    if rows.uses_torch(x, weight):
        return rows.torch_ops().rms_norm_forward(x, weight, eps)
    return rows.raw("rms_norm_forward")(x, weight, eps)


@replay.replayed(autograd=True)
def rms_norm_backward(dy, x, weight, rstd):
    """The gradients (dx, dweight) of rms_norm from the output's gradient
    `dy`, the input `x`, `weight` and the forward's `rstd` (float32, one per
    row); dweight is None when weight is. torch: the autograd of
    `torch.nn.functional.rms_norm`.

        >>> import numpy as np
        >>> from moye.ops import rows
        >>> x = np.array([[1.0, 2.0, 3.0]], np.float32)
        >>> y, rstd = rows.raw("rms_norm_forward")(x, None, 1e-6)    
        >>> dx, dw = rms_norm_backward(np.ones_like(x), x, None, rstd)
        >>> dw is None                                               
        True
    """
    if rows.uses_torch(dy, x, weight, rstd):
        return rows.torch_ops().rms_norm_backward(dy, x, weight, rstd)
    return rows.raw("rms_norm_backward")(dy, x, weight, rstd)


@replay.replayed(autograd=True)
def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm over the last dimension, (x - mean) / sqrt(var + eps) * weight
    + bias (`weight`, `bias` of shape (N,), or None). torch:
    `torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)`.

        >>> import numpy as np
        >>> x = np.array([[1.0, 2.0, 3.0]], np.float32)
        >>> w, b = np.array([1.0, 0.5, 2.0], np.float32), np.array([0.0, 1.0, 0.0], np.float32)
        >>> np.round(layer_norm(x, w, b).astype(float), 4).tolist() 
        [[-1.2247, 1.0, 2.4495]]
    """
    return layer_norm_forward(x, weight, bias, eps)[0]


@replay.replayed(autograd=True)
def layer_norm_forward(x, weight, bias, eps=1e-5):
    """(y, mean, rstd): layer_norm and its mean and 1 / sqrt(var + eps) per
    row (float32, float64 for float64 x), which layer_norm_backward takes.

        >>> import numpy as np
        >>> y, mean, rstd = layer_norm_forward(np.array([[1.0, 3.0]], np.float32), None, None)
        >>> mean.tolist(), np.round(rstd.astype(float), 3).tolist()
        ([2.0], [1.0])
    """
    eps = _number(eps, "eps", "layer_norm")
    if rows.uses_torch(x, weight, bias):
        return rows.torch_ops().layer_norm_forward(x, weight, bias, eps)
    return rows.raw("layer_norm_forward")(x, weight, bias, eps)


@replay.replayed(autograd=True)
def layer_norm_backward(dy, x, weight, mean, rstd):
    """The gradients (dx, dweight, dbias) of layer_norm from the output's
    gradient `dy`, the input `x`, `weight` and the forward's `mean` and
    `rstd` (float32, one per row); dweight is None when weight is, dbias is
    the sum of dy over the rows. torch: the autograd of
    `torch.nn.functional.layer_norm`.

        >>> import numpy as np
        >>> x = np.array([[1.0, 2.0, 3.0]], np.float32)
        >>> _, mean, rstd = layer_norm_forward(x, None, None)
        >>> dx, dw, db = layer_norm_backward(np.ones_like(x), x, None, mean, rstd)
        >>> bool(np.abs(dx).max() < 1e-5), dw, db.tolist()
        (True, None, [1.0, 1.0, 1.0])
    """
    if rows.uses_torch(dy, x, weight, mean, rstd):
        return rows.torch_ops().layer_norm_backward(dy, x, weight, mean, rstd)
    return rows.raw("layer_norm_backward")(dy, x, weight, mean, rstd)


@replay.replayed(autograd=True)
def cross_entropy(logits, target, ignore_index=-100, reduction="mean"):
    """Cross-entropy of `logits` (..., N: the classes last) against class
    indices `target` (..., int64 or int32), float32: per row ("none"; 0
    where target == ignore_index), summed ("sum"), or averaged over the rows
    not ignored ("mean"; nan if all are). torch:
    `torch.nn.functional.cross_entropy`, whose classes are in dimension 1.

        >>> import numpy as np
        >>> logits = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], np.float32)
        >>> loss = cross_entropy(logits, np.array([2, -100]))         
        >>> round(float(loss), 4)                                   
        0.4076
    """
    if reduction not in REDUCTIONS:
        raise MoyeTypeError(f"cross_entropy: reduction must be 'none', 'sum' or 'mean', got "
                            f"{reduction!r}")
    ignore_index = _integer(ignore_index, "ignore_index", "cross_entropy")
    if rows.uses_torch(logits, target):
        return rows.torch_ops().cross_entropy(logits, target, ignore_index, reduction)
    return rows.raw("cross_entropy")(logits, target, ignore_index, reduction)


@replay.replayed(autograd=True)
def cross_entropy_forward(logits, target, ignore_index=-100):
    """(loss, lse) per row: the unreduced cross_entropy and the log-sum-exp of
    each row of `logits` (float32, float64 for float64 logits), which
    cross_entropy_backward takes.

        >>> import numpy as np
        >>> loss, lse = cross_entropy_forward(np.zeros((1, 4), np.float32), np.array([1]))
        >>> np.round(loss.astype(float), 4).tolist(), np.round(lse.astype(float), 4).tolist()
        ([1.3863], [1.3863])
    """
    ignore_index = _integer(ignore_index, "ignore_index", "cross_entropy")
    if rows.uses_torch(logits, target):
        return rows.torch_ops().cross_entropy_forward(logits, target, ignore_index)
    return rows.raw("cross_entropy_forward")(logits, target, ignore_index)


@replay.replayed(autograd=True)
def cross_entropy_backward(dloss, logits, target, lse, ignore_index=-100):
    """The gradient of the per-row cross-entropy: dlogits = (softmax(logits) -
    onehot(target)) * dloss[:, None], 0 in rows whose target is
    `ignore_index`, from `dloss` (M,) float32 and the forward's `lse`
    (log-sum-exp of each row, float32). torch: the autograd of
    `torch.nn.functional.cross_entropy(..., reduction="none")`.

        >>> import numpy as np
        >>> from moye.ops import rows
        >>> logits, target = np.zeros((1, 2), np.float32), np.array([0])
        >>> _, lse = rows.raw("cross_entropy_forward")(logits, target, -100) 
        >>> d = cross_entropy_backward(np.ones(1, np.float32), logits, target, lse)
        >>> d.tolist()                                                        
        [[-0.5, 0.5]]
    """
    ignore_index = _integer(ignore_index, "ignore_index", "cross_entropy_backward")
    if rows.uses_torch(dloss, logits, target, lse):
        return rows.torch_ops().cross_entropy_backward(dloss, logits, target, lse, ignore_index)
    return rows.raw("cross_entropy_backward")(dloss, logits, target, lse, ignore_index)


def matmul(a, b, bias=None, activation=None, residual=None, alpha=1.0, out=None,
           out_dtype=None, allow_tf32=False):
    """activation(alpha * a @ b + bias) + residual, the epilogue fused into
    the GEMM: a (M, K) or (B, M, K), b (K, N) or (B, K, N) (a 2-D one shared
    by the batches), row- or column-major (transposed views too); float16
    or bfloat16 in, float32 accumulation, the output in a's type or
    `out_dtype` float32; bias (N,), residual of the output's shape;
    activation None, "relu", "gelu", "gelu_tanh" or "silu". torch:
    `act(torch.addmm(bias, a, b, alpha=alpha)) + residual`.

    float32 a and b run on tf32 tensor cores with float32 accumulation, on
    request only: `allow_tf32=True` (torch:
    `torch.backends.cuda.matmul.allow_tf32`), else a MoyeTypeError. tf32
    keeps 10 of float32's 23 mantissa bits (the tensor cores ignore the low
    13), so each product is good to about 2**-10 relative; the output is
    float32. With float16 or bfloat16 inputs allow_tf32 changes nothing.

        >>> import numpy as np
        >>> a, b = np.ones((2, 3), np.float16), np.full((3, 4), 0.5, np.float16)
        >>> matmul(a, b, bias=np.array([0, 1, -2, -3], np.float16), activation="relu").tolist()
        [[1.5, 2.5, 0.0, 0.0], [1.5, 2.5, 0.0, 0.0]]
        >>> x = np.full((1, 2), 1 + 2.0 ** -12, np.float32)     # below tf32's precision
        >>> matmul(x, np.ones((2, 1), np.float32), allow_tf32=True).tolist()
        [[2.0]]
    """
    if out is not None:     # out checked before where it lies is (a meta tensor lies nowhere)
        if rows.uses_torch(a, b, bias, residual, out):
            rows.torch_ops().check_devices("matmul", a=a, b=b, bias=bias, residual=residual,
                                           out=out)
        rows.raw("writable_out")(out)
        if rows.raw("overwrites_operand")(out, a, b, bias, residual):
            # a replayed call would not look at where its out lies: this one runs in full, and
            # the raw call computes the product apart, then copies it
            return _matmul_call(a, b, bias, activation, residual, alpha, out, out_dtype,
                                allow_tf32)
    return _matmul(a, b, bias, activation, residual, alpha, out, out_dtype, allow_tf32)


def _matmul_call(a, b, bias, activation, residual, alpha, out, out_dtype, allow_tf32):
    """matmul's call of the torch op or the raw function (`_matmul`, replayed,
    where out, if any, shares memory with no operand)."""
    alpha = _number(alpha, "alpha", "matmul")
    allow_tf32 = rows.flag(allow_tf32, "allow_tf32", "matmul")
    if rows.uses_torch(a, b, bias, residual, out):
        return rows.torch_ops().matmul(a, b, bias, activation, residual, alpha, out, out_dtype,
                                       allow_tf32)
    return rows.raw("matmul")(a, b, bias, activation, residual, alpha, out, out_dtype,
                              allow_tf32)


_matmul = replay.replayed(_matmul_call, autograd=True)


@replay.replayed(autograd=True)
def linear(x, weight, bias=None, activation=None, allow_tf32=False):
    """activation(x @ weight^T + bias), torch.nn.functional.linear's
    convention: weight (N, K), x (..., K) with any leading dimensions;
    float32 x and weight with `allow_tf32=True` on tf32 tensor cores (see
    matmul). torch: `act(F.linear(x, weight, bias))`.

        >>> import numpy as np
        >>> y = linear(np.ones((2, 5, 3), np.float16), np.ones((4, 3), np.float16))
        >>> y.shape, float(y[0, 0, 0])
        ((2, 5, 4), 3.0)
        >>> linear(np.ones((1, 3), np.float32), np.ones((2, 3), np.float32),
        ...        allow_tf32=True).tolist()
        [[3.0, 3.0]]
    """
    if getattr(weight, "ndim", None) != 2:
        raise ShapeError(f"linear: weight must be (N, K), got shape "
                         f"{tuple(getattr(weight, 'shape', ()))}")
    if getattr(x, "ndim", 0) < 1 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: x has shape {tuple(getattr(x, 'shape', ()))} and weight "
                         f"{tuple(weight.shape)}; x's last dimension must be weight's second")
    lead = tuple(x.shape[:-1])
    y = matmul(x.reshape(math.prod(lead), x.shape[-1]), weight.T, bias=bias,
               activation=activation, allow_tf32=allow_tf32)
    return y.reshape(lead + (weight.shape[0],))


@replay.replayed(autograd=True)
def attention(q, k, v, *, causal=False, scale=None, return_lse=False):
    """softmax(q @ k^T * scale) @ v, FlashAttention's forward pass: q (B,
    Hq, Sq, D), k and v (B, Hk, Sk, D) in SDPA's layout, float16 or
    bfloat16, D one of 64, 96, 128 and 256; Hk dividing Hq (GQA, MQA: query
    head h reads key head h // (Hq // Hk)); any Sq, Sk >= 1. The scores are
    scaled by `scale` (default 1 / sqrt(D)) and, with `causal`, masked
    FlashAttention's way, aligned to the bottom right: query i sees key j
    where j <= i + Sk - Sq (a row that sees no key gives 0, its lse -inf).
    Returns o (q's shape and type), and with `return_lse` also lse, the
    float32 (B, Hq, Sq) natural log-sum-exp of each row's scaled scores.
    torch: `F.scaled_dot_product_attention(q, k, v, is_causal=causal,
    scale=scale, enable_gqa=True)` where Sq == Sk. On torch tensors it is
    the custom op `moye::attention_forward`, with autograd (its backward:
    attention_backward).

        >>> import numpy as np
        >>> q = np.zeros((1, 1, 2, 64), np.float16)
        >>> v = np.arange(128, dtype=np.float16).reshape(1, 1, 2, 64)
        >>> o = attention(q, q, v)           # equal scores: the mean of v's rows
        >>> o[0, 0, :, :3].tolist()
        [[32.0, 33.0, 34.0], [32.0, 33.0, 34.0]]
        >>> o, lse = attention(q, q, v, causal=True, return_lse=True)
        >>> o[0, 0, 0, :3].tolist(), np.round(lse.astype(float), 4).tolist()
        ([0.0, 1.0, 2.0], [[[0.0, 0.6931]]])
    """
    if rows.uses_torch(q, k, v):
        return rows.torch_ops().attention(q, k, v, causal, scale, return_lse)
    return rows.raw("attention")(q, k, v, causal, scale, return_lse)


@replay.replayed(autograd=True)
def attention_backward(do, q, k, v, o, lse, *, causal=False, scale=None, dlse=None):
    """The gradients (dq, dk, dv) of attention(q, k, v, causal=causal,
    scale=scale), from its o and lse (return_lse=True) and their gradients
    do and dlse (None where only o was used): FlashAttention-2's backward,
    dQ and dK, dV in kernels of their own (no atomics: the same bits each
    run). dk and dv of GQA's shared key heads add up their query heads'.

        >>> import numpy as np
        >>> q = np.zeros((1, 1, 2, 64), np.float16)
        >>> v = np.arange(128, dtype=np.float16).reshape(1, 1, 2, 64)
        >>> o, lse = attention(q, q, v, return_lse=True)
        >>> dq, dk, dv = attention_backward(np.ones_like(o), q, q, v, o, lse)
        >>> dv[0, 0, :, 0].tolist()            # each key gets half of each row's gradient
        [1.0, 1.0]
    """
    if rows.uses_torch(do, q, k, v, o, lse, dlse):
        return rows.torch_ops().attention_backward(do, q, k, v, o, lse, causal, scale, dlse)
    return rows.raw("attention_backward")(do, q, k, v, o, lse, causal, scale, dlse)


@replay.replayed(autograd=True)
def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                     causal=False, scale=None, return_lse=False):
    """attention on packed sequences, FlashAttention's varlen layout: q
    (total_q, Hq, D), k and v (total_k, Hk, D) hold the batch's sequences
    one after another, sequence b's rows cu_seqlens_q[b] to
    cu_seqlens_q[b + 1] of q (of k: cu_seqlens_k's), int32 or int64
    vectors of batch + 1 offsets from 0; max_seqlen_q and max_seqlen_k
    bound the lengths (the grid's size). Each sequence attends to its own
    keys alone, as attention does (causal: aligned to the bottom right of
    each). Returns o (q's shape and type), and with `return_lse` also lse,
    float32 (Hq, total_q). The offsets are checked on the host (a CUDA
    tensor's copied, except while a CUDA graph is captured). torch: a
    custom op with autograd, `moye::attention_varlen_forward`.

        >>> import numpy as np
        >>> q = np.zeros((3, 1, 64), np.float16)
        >>> v = np.arange(192, dtype=np.float16).reshape(3, 1, 64)
        >>> cu = np.array([0, 1, 3], np.int32)      # sequences of 1 and 2 tokens
        >>> attention_varlen(q, q, v, cu, cu, 2, 2)[:, 0, 0].tolist()
        [0.0, 96.0, 96.0]
    """
    if rows.uses_torch(q, k, v):
        return rows.torch_ops().attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k,
                                                 max_seqlen_q, max_seqlen_k, causal, scale,
                                                 return_lse)
    return rows.raw("attention_varlen")(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, causal, scale, return_lse)


@replay.replayed(autograd=True)
def attention_varlen_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                              max_seqlen_k, *, causal=False, scale=None, dlse=None):
    """The gradients (dq, dk, dv) of attention_varlen, from its o and lse
    (return_lse=True) and their gradients do and dlse (None where only o
    was used), as attention_backward's."""
    if rows.uses_torch(do, q, k, v, o, lse, dlse):
        return rows.torch_ops().attention_varlen_backward(
            do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
            scale, dlse)
    return rows.raw("attention_varlen_backward")(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                                                 max_seqlen_q, max_seqlen_k, causal, scale, dlse)


def _number(v, what, opname):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise MoyeTypeError(f"{opname}: {what} must be a number, got {type(v).__name__}")
    try:
        return float(v)
    except OverflowError:       # an int past float's range (about 1.8e308)
        raise MoyeTypeError(f"{opname}: {what} must be a number a float holds, got an int of "
                            f"{len(str(abs(v)))} digits") from None


def _integer(v, what, opname):
    """`v` as an int of int64's range (what the kernels and torch's schemas take)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise MoyeTypeError(f"{opname}: {what} must be an int, got {type(v).__name__}")
    if not -2**63 <= int(v) < 2**63:
        raise BoundsError(f"{opname}: {what} {int(v)} is outside int64 [-2**63, 2**63)")
    return int(v)

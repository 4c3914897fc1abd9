"""attention: softmax(q k^T * scale) v, FlashAttention's forward pass.

The raw host function checks q, k and v (SDPA's layout: batch, heads,
seqlen, head_dim), gives the kernels rows they can copy 16 bytes at a time
(a view whose rows are not is copied once, contiguous) and launches, by
device (kernels_for): Hopper's wgmma forward (attention_sm90) for head dims
64, 128 and 256 on compute capability 9.x; else the mma.sync kernels
(attention_sm80, attention_sm80_backward), on CUDA devices and on the CPU
backend for NumPy arrays and CPU tensors. The backward is mma.sync's
everywhere for now.
"""
import math

import numpy as np

from ..errors import MoyeTypeError, ShapeError
from . import attention_sm80, attention_sm80_backward, attention_sm90, replay, rows

IN_TYPES = ("float16", "bfloat16")
COPY_BYTES = 16         # cp.async's vector: a row's address and stride are multiples of it


def attention(q, k, v, causal=False, scale=None, return_lse=False):
    """o, or (o, lse), of attention (see moye.ops.attention)."""
    causal = rows.flag(causal, "causal", "attention")
    o, lse = attention_forward(q, k, v, causal, scale)
    return (o, lse) if rows.flag(return_lse, "return_lse", "attention") else o


def attention_forward(q, k, v, causal=False, scale=None):
    """(o, lse) of attention (the forward of the torch custom op)."""
    opname = "attention"
    causal = rows.flag(causal, "causal", opname)
    B, Hq, Sq, d = check_operands(q, k, v, opname)
    scale = check_scale(scale, d, opname)
    o = rows.empty(q, (B, Hq, Sq, d))
    lse = rows.empty(q, (B, Hq, Sq), "float32")
    kernels_for(q, d).launch(*(copyable(t) for t in (q, k, v)), o, lse, scale, causal)
    return o, lse


def kernels_for(q, d):
    """The forward's kernel module for q's device and head dim d: Hopper's
    wgmma kernel (attention_sm90) on a CUDA device of compute capability
    9.x where it takes d, else the mma.sync one (attention_sm80), which
    the CPU backend runs too."""
    if rows.backend_of(q) == "cuda" and d in attention_sm90.HEAD_DIMS:
        import torch
        if torch.cuda.get_device_capability(q.device)[0] == 9:
            return attention_sm90
    return attention_sm80


def attention_backward(do, q, k, v, o, lse, causal=False, scale=None, dlse=None):
    """(dq, dk, dv) of attention(q, k, v) from its output o and lse (as
    attention returns them) and their gradients do and dlse (None: lse has
    none) (see moye.ops.attention_backward)."""
    opname = "attention_backward"
    causal = rows.flag(causal, "causal", opname)
    B, Hq, Sq, d = check_operands(q, k, v, opname)
    scale = check_scale(scale, d, opname)
    for what, t, dtype in (("o", o, None), ("do", do, None), ("lse", lse, "float32"),
                           ("dlse", dlse, "float32")):
        if t is None and what == "dlse":
            continue
        want = rows.dtype_name(q, "q", opname) if dtype is None else dtype
        if rows.dtype_name(t, what, opname) != want:
            raise MoyeTypeError(f"{opname}: {what} is {rows.dtype_name(t, what, opname)}; it "
                                f"must be {want}")
        if not rows.same_place(q, t):
            raise MoyeTypeError(f"{opname}: {what} and q are not in one place (both NumPy "
                                "arrays, or torch tensors on one device)")
        shape = (B, Hq, Sq) if what in ("lse", "dlse") else (B, Hq, Sq, d)
        if tuple(t.shape) != shape:
            raise ShapeError(f"{opname}: {what} has shape {tuple(t.shape)}; it must be {shape}")
    dq, dk, dv = rows.empty(q, q.shape), rows.empty(k, k.shape), rows.empty(v, v.shape)
    attention_sm80_backward.launch(dq, dk, dv, *(copyable(t) for t in (q, k, v, o, do)), lse,
                                   dlse, scale, causal)
    return dq, dk, dv


def check_operands(q, k, v, opname="attention"):
    """(B, Hq, Sq, D) of q, or a MoyeError naming what is wrong: q, k and v
    4-D arrays of one type of IN_TYPES in one place, k and v of one shape
    (B, Hk, Sk, D), Hk dividing Hq, D one of attention_sm80.HEAD_DIMS.
        >>> check_operands(np.zeros((1, 2, 3, 80), np.float16), None, None)
        Traceback (most recent call last):
        ...
        moye.errors.ShapeError: attention: q has head_dim 80; supported: 64, 96, 128, 256
    """
    types = {what: rows.dtype_name(t, what, opname) for what, t in (("q", q), ("k", k),
                                                                     ("v", v)) if t is not None}
    for what, t in (("q", q), ("k", k), ("v", v)):
        if t is not None and t.ndim != 4:
            raise ShapeError(f"{opname}: {what} must be 4-D (batch, heads, seqlen, head_dim), "
                             f"got shape {tuple(t.shape)}")
    B, Hq, Sq, d = q.shape
    if d not in attention_sm80.HEAD_DIMS:
        raise ShapeError(f"{opname}: q has head_dim {d}; supported: "
                         f"{', '.join(map(str, attention_sm80.HEAD_DIMS))}")
    if types["q"] not in IN_TYPES:
        raise MoyeTypeError(f"{opname}: q is {types['q']}; q, k and v must be float16 or "
                            "bfloat16")
    for what in ("k", "v"):
        if types[what] != types["q"]:
            raise MoyeTypeError(f"{opname}: {what} is {types[what]} but q is {types['q']}; one "
                                "dtype for q, k and v")
        if not rows.same_place(q, k if what == "k" else v):
            raise MoyeTypeError(f"{opname}: {what} and q are not in one place (both NumPy "
                                "arrays, or torch tensors on one device)")
    Hk, Sk = k.shape[1], k.shape[2]
    if k.shape[0] != B or k.shape[3] != d:
        raise ShapeError(f"{opname}: k has shape {tuple(k.shape)}; for q of shape "
                         f"{tuple(q.shape)} it must be ({B}, heads, seqlen, {d})")
    if tuple(v.shape) != tuple(k.shape):
        raise ShapeError(f"{opname}: v has shape {tuple(v.shape)}; it must be k's, "
                         f"{tuple(k.shape)}")
    if Hk == 0 or Hq % Hk:
        raise ShapeError(f"{opname}: q has {Hq} heads and k {Hk}; k's heads must divide q's "
                         "(GQA, MQA)")
    if Sq == 0 or Sk == 0 or B == 0:
        raise ShapeError(f"{opname}: q has shape {tuple(q.shape)} and k {tuple(k.shape)}; the "
                         "batch and each seqlen must be at least 1")
    return B, Hq, Sq, d


def check_scale(scale, d, opname="attention"):
    """The scores' scale: 1 / sqrt(d) for None, else `scale` as a float, a
    MoyeError unless it is a positive finite number.
        >>> check_scale(None, 64), check_scale(2, 64)
        (0.125, 2.0)
    """
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not 0 < float(scale) < math.inf:
        raise MoyeTypeError(f"{opname}: scale must be a positive finite number, got "
                            f"{type(scale).__name__} {scale!r}")
    return float(scale)


def copyable(t):
    """`t`, or a new contiguous copy of it unless its last dimension is
    contiguous and its rows start on 16-byte boundaries (cp.async's)."""
    if isinstance(t, np.ndarray):
        strides, address = t.strides, t.ctypes.data
    else:
        strides, address = tuple(s * t.element_size() for s in t.stride()), t.data_ptr()
    if strides[-1] == t.itemsize and address % COPY_BYTES == 0 and \
            all(s % COPY_BYTES == 0 for s in strides[:-1]):
        return t
    replay.host_work()
    if isinstance(t, np.ndarray):
        return t.copy()
    import torch
    return t.clone(memory_format=torch.contiguous_format)

"""attention: softmax(q k^T * scale) v, FlashAttention's forward pass.

The raw host function checks q, k and v (SDPA's layout: batch, heads,
seqlen, head_dim), gives the kernels rows they can copy 16 bytes at a time
(a view whose rows are not is copied once, contiguous) and launches, by
device (kernels_for): Hopper's wgmma forward (attention_sm90) for head dims
64, 128 and 256 on compute capability 9.x; else the mma.sync kernels
(attention_sm80, attention_sm80_backward), on CUDA devices and on the CPU
backend for NumPy arrays and CPU tensors. The backward likewise: Hopper's
(attention_sm90_backward) at head dims 64, 128 and 256 there, else mma.sync's.
The forward and backward are replayed (replay.py): the custom op calls them
on every training step, and a later call on tensors of the same kinds
redoes only the allocations and launches.
"""
import math

import numpy as np

from ..errors import MoyeTypeError, ShapeError
from . import (attention_sm80, attention_sm80_backward, attention_sm90, attention_sm90_backward,
               replay, rows)

IN_TYPES = ("float16", "bfloat16")
COPY_BYTES = 16         # cp.async's vector: a row's address and stride are multiples of it


def attention(q, k, v, causal=False, scale=None, return_lse=False):
    """o, or (o, lse), of attention (see moye.ops.attention)."""
    causal = rows.flag(causal, "causal", "attention")
    o, lse = attention_forward(q, k, v, causal, scale)
    return (o, lse) if rows.flag(return_lse, "return_lse", "attention") else o


@replay.replayed
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
    if rows.backend_of(q) == "cuda" and d in attention_sm90.HEAD_DIMS and rows.hopper(q):
        return attention_sm90
    return attention_sm80


@replay.replayed
def attention_backward(do, q, k, v, o, lse, causal=False, scale=None, dlse=None):
    """(dq, dk, dv) of attention(q, k, v) from its output o and lse (as
    attention returns them) and their gradients do and dlse (None: lse has
    none) (see moye.ops.attention_backward)."""
    opname = "attention_backward"
    causal = rows.flag(causal, "causal", opname)
    B, Hq, Sq, d = check_operands(q, k, v, opname)
    scale = check_scale(scale, d, opname)
    check_saved(q, o, do, lse, dlse, (B, Hq, Sq, d), (B, Hq, Sq), opname)
    dq, dk, dv = rows.empty(q, q.shape), rows.empty(k, k.shape), rows.empty(v, v.shape)
    backward = attention_sm90_backward if kernels_for(q, d) is attention_sm90 and \
        d in attention_sm90_backward.HEAD_DIMS else attention_sm80_backward
    backward.launch(dq, dk, dv, *(copyable(t) for t in (q, k, v, o, do)), lse, dlse, scale,
                    causal)
    return dq, dk, dv


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     causal=False, scale=None, return_lse=False):
    """o, or (o, lse), of attention on packed sequences (see
    moye.ops.attention_varlen)."""
    o, lse = attention_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                      max_seqlen_k, causal, scale)
    return (o, lse) if rows.flag(return_lse, "return_lse", "attention_varlen") else o


def attention_varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                             causal=False, scale=None):
    """(o, lse) of attention_varlen (the forward of its torch custom op)."""
    opname = "attention_varlen"
    causal = rows.flag(causal, "causal", opname)
    total_q, Hq, d = check_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, opname)
    scale = check_scale(scale, d, opname)
    o = rows.empty(q, q.shape)
    lse = rows.empty(q, (Hq, total_q), "float32")
    if total_q and k.shape[0]:
        attention_sm80.launch(*(heads_first(copyable(t)) for t in (q, k, v)), heads_first(o),
                              lse[None], scale, causal, cu_seqlens_q, cu_seqlens_k, max_seqlen_q)
    elif total_q:                   # no keys at all: every row sees none
        o[...] = 0
        lse[...] = -math.inf
    return o, lse


def attention_varlen_backward(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                              max_seqlen_k, causal=False, scale=None, dlse=None):
    """(dq, dk, dv) of attention_varlen (see moye.ops.attention_varlen_backward)."""
    opname = "attention_varlen_backward"
    causal = rows.flag(causal, "causal", opname)
    total_q, Hq, d = check_packed(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, opname)
    scale = check_scale(scale, d, opname)
    check_saved(q, o, do, lse, dlse, q.shape, (Hq, total_q), opname)
    dq, dk, dv = rows.empty(q, q.shape), rows.empty(k, k.shape), rows.empty(v, v.shape)
    if total_q and k.shape[0]:
        attention_sm80_backward.launch(
            *(heads_first(t) for t in (dq, dk, dv)),
            *(heads_first(copyable(t)) for t in (q, k, v, o, do)), lse[None],
            None if dlse is None else dlse[None], scale, causal, cu_seqlens_q, cu_seqlens_k,
            max_seqlen_q, max_seqlen_k)
    else:
        for t in (dq, dk, dv):
            t[...] = 0
    return dq, dk, dv


def heads_first(t):
    """A packed (total, heads, D) array as the kernels' (1, heads, total, D) view."""
    return t.transpose(1, 0, 2)[None] if isinstance(t, np.ndarray) else t.transpose(0, 1)[None]


def check_packed(q, k, v, cu_q, cu_k, max_q, max_k, opname="attention_varlen"):
    """(total_q, Hq, D) of packed q (total_q, Hq, D), k and v (total_k, Hk,
    D), or a MoyeError naming what is wrong: their types, head dims and
    heads as check_operands asks, and cu_seqlens_q and cu_seqlens_k int32
    or int64 vectors of B + 1 offsets each, from 0 up to the total, where
    max_seqlen_q and max_seqlen_k bound each sequence's length. The offsets
    are read on the host (from a CUDA tensor: a copy) except while a CUDA
    graph is captured.
        >>> x = np.zeros((5, 2, 64), np.float16)
        >>> check_packed(x, x, x, np.array([0, 2, 5], np.int32), np.array([0, 2, 5], np.int32),
        ...              2, 3)
        Traceback (most recent call last):
        ...
        moye.errors.ShapeError: attention_varlen: cu_seqlens_q holds a sequence of 3 rows, past max_seqlen_q = 2
    """
    for what, t in (("q", q), ("k", k), ("v", v)):
        rows.dtype_name(t, what, opname)
        if t.ndim != 3:
            raise ShapeError(f"{opname}: {what} must be 3-D (total_tokens, heads, head_dim), "
                             f"got shape {tuple(t.shape)}")
    check_operands(*(heads_first(t) for t in (q, k, v)), opname, empty_ok=True)
    counts = []
    for what, cu, total, longest, what_max in (
            ("cu_seqlens_q", cu_q, q.shape[0], max_q, "max_seqlen_q"),
            ("cu_seqlens_k", cu_k, k.shape[0], max_k, "max_seqlen_k")):
        longest = seqlen_bound(longest, what_max, opname)
        if rows.is_torch(cu) != rows.is_torch(q) or not (rows.is_torch(cu) or
                                                          isinstance(cu, np.ndarray)):
            kind = "a torch tensor" if rows.is_torch(q) else "a NumPy array"
            raise MoyeTypeError(f"{opname}: {what} must be {kind}, as q is; got "
                                f"{type(cu).__name__}")
        name = str(cu.dtype).removeprefix("torch.")
        if name not in ("int32", "int64") or cu.ndim != 1 or cu.shape[0] < 2:
            raise MoyeTypeError(f"{opname}: {what} must be a 1-D int32 or int64 array of batch + 1 "
                                f"offsets, got {name} of shape {tuple(cu.shape)}")
        if not rows.same_place(q, cu):
            raise MoyeTypeError(f"{opname}: {what} and q are not in one place")
        counts.append(cu.shape[0])
        values = offsets_on_host(cu)
        if values is None:              # being captured: taken as given
            continue
        lengths = np.diff(values)
        if values[0] != 0 or values[-1] != total or (lengths < 0).any():
            raise ShapeError(f"{opname}: {what} must rise from 0 to {total} (the tokens), got "
                             f"{values.tolist()[:8]}{' ...' if len(values) > 8 else ''}")
        if lengths.max() > longest:
            raise ShapeError(f"{opname}: {what} holds a sequence of {int(lengths.max())} rows, "
                             f"past {what_max} = {longest}")
    if counts[0] != counts[1]:
        raise ShapeError(f"{opname}: cu_seqlens_q has {counts[0]} offsets and cu_seqlens_k "
                         f"{counts[1]}; one batch")
    return q.shape[0], q.shape[1], q.shape[2]


def seqlen_bound(n, what, opname="attention_varlen"):
    """A max_seqlen as a Python int, or a MoyeError: an int (a NumPy
    integer too) of at least 0.
        >>> seqlen_bound(np.int64(6), "max_seqlen_q")
        6
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise MoyeTypeError(f"{opname}: {what} must be an int, got {n!r}")
    if n < 0:
        raise ShapeError(f"{opname}: {what} is {n}; a length is at least 0")
    return int(n)


def offsets_on_host(cu):
    """The values of `cu` as a NumPy array (a CUDA tensor's copied, the call
    then replayed in full), or None while a CUDA graph is being captured."""
    if isinstance(cu, np.ndarray):
        return cu
    import torch
    if cu.is_cuda and torch.cuda.is_current_stream_capturing():
        return None
    replay.host_work()
    return cu.cpu().numpy()


def check_saved(q, o, do, lse, dlse, shape, lse_shape, opname):
    """A MoyeError unless o and do are of q's type and `shape`, lse (and
    dlse, unless None) float32 of `lse_shape`, all where q is."""
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
        want_shape = lse_shape if what in ("lse", "dlse") else shape
        if tuple(t.shape) != tuple(want_shape):
            raise ShapeError(f"{opname}: {what} has shape {tuple(t.shape)}; it must be "
                             f"{tuple(want_shape)}")


def check_operands(q, k, v, opname="attention", empty_ok=False):
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
    if Hk == 0 or Hq == 0 or Hq % Hk:
        raise ShapeError(f"{opname}: q has {Hq} heads and k {Hk}; each needs one at least, and "
                         "k's heads must divide q's (GQA, MQA)")
    if (Sq == 0 or Sk == 0 or B == 0) and not empty_ok:
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

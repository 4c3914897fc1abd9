"""The norms' host-side argument checks (rms_norm, layer_norm): the affine
parameters (weight, bias), eps, and the statistics (mean, rstd) that the
forward returns and the backward takes back."""
import numbers

import numpy as np

from ..errors import MoyeTypeError, ShapeError
from . import rows


def same_device(a, b, what, op):
    """A MoyeTypeError unless `a` (the argument `what`) lives where `b` (x)
    does: both NumPy, both CPU tensors, or both CUDA tensors (one device)."""
    if not rows.same_place(a, b):
        kinds = [f"a {t.device} tensor" if rows.is_torch(t) else "a NumPy array"
                 for t in (a, b)]
        raise MoyeTypeError(f"{op}: {what} is {kinds[0]} but x is {kinds[1]}; they must be on "
                            "the same device")


def check_param(p, what, x, name, n, op):
    """`p` (weight or bias) checked against x (dtype `name`, rows of `n`):
    None, or a contiguous (n,) array of x's dtype or float32 on x's device."""
    if p is None:
        return None
    pname = rows.dtype_name(p, what, op)
    if pname not in (name, "float32"):
        allowed = name if name == "float32" else f"{name} or float32"
        raise MoyeTypeError(f"{op}: {what} is {pname} but x is {name}; {what} must be {allowed}")
    if tuple(p.shape) != (n,):
        raise ShapeError(f"{op}: {what} has shape {tuple(p.shape)}; rows of x have {n} "
                         f"elements, so it must have shape ({n},)")
    same_device(p, x, what, op)
    contiguous = p.is_contiguous() if rows.is_torch(p) else p.flags.c_contiguous
    if not contiguous:
        raise ShapeError(f"{op}: {what} must be contiguous; call .contiguous() / "
                         "np.ascontiguousarray first")
    return p


def check_eps(eps, op):
    """eps as a float: a positive, finite real number."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or \
            not (0 < float(eps) < float("inf")):
        raise MoyeTypeError(f"{op}: eps must be a positive finite number, got {eps!r}")
    return float(eps)


def norm_rows(op, x, weight, *dy):
    """The checks every norm's host function starts with: x's dtype, its
    last dimension reduced, a backward's `dy` (one, even None) like x, both
    as (M, N) views, `weight` checked: (name, m, n, x2, dy2, weight), dy2
    None for a forward (no dy given).
        >>> import numpy as np
        >>> norm_rows("rms_norm", np.ones((2, 3, 4), np.float32), None)[:3]
        ('float32', 6, 4)
    """
    name = rows.dtype_name(x, "x", op)
    rows.check_dim(x, -1, "x", op)
    for grad in dy:
        check_like(grad, "dy", x, name, op)
    x2, m, n = rows.as_rows(x, "x", op)
    dy2 = rows.as_rows(dy[0], "dy", op)[0] if dy else None
    return name, m, n, x2, dy2, check_param(weight, "weight", x, name, n, op)


def check_like(a, what, x, name, op):
    """`a` (dy) of x's shape, dtype and device."""
    aname = rows.dtype_name(a, what, op)
    if aname != name:
        raise MoyeTypeError(f"{op}: {what} is {aname} but x is {name}; they must have the "
                            "same dtype")
    if tuple(a.shape) != tuple(x.shape):
        raise ShapeError(f"{op}: {what} has shape {tuple(a.shape)} but x has "
                         f"{tuple(x.shape)}; they must match")
    same_device(a, x, what, op)


def check_stat(s, what, x, name, op):
    """`s` (mean or rstd from the forward): x.shape[:-1], rows.stats_dtype(name)."""
    sname = rows.dtype_name(s, what, op)
    if sname != rows.stats_dtype(name):
        raise MoyeTypeError(f"{op}: {what} is {sname}; for {name} x it must be "
                            f"{rows.stats_dtype(name)}, as the forward returns it")
    if tuple(s.shape) != tuple(x.shape[:-1]):
        raise ShapeError(f"{op}: {what} has shape {tuple(s.shape)} but x has "
                         f"{tuple(x.shape)}; it must have x's shape without the last "
                         f"dimension, {tuple(x.shape[:-1])}")
    same_device(s, x, what, op)
    contiguous = s.is_contiguous() if rows.is_torch(s) else s.flags.c_contiguous
    if not contiguous:
        raise ShapeError(f"{op}: {what} must be contiguous")
    return s.reshape(-1)


def as_scalar(v, name):
    """`v` as a kernel's scalar argument in the math type of `name` data:
    a Float64 (np.float64) for float64, else a Float32 (a Python float)."""
    return np.float64(v) if name == "float64" else float(v)

"""Hostile inputs to moye.ops' rms_norm and layer_norm, forward and
backward: wrong dtypes and shapes of x, weight, bias, eps and the
statistics, rows that are not contiguous or too long."""
import ml_dtypes
import numpy as np
import pytest

from moye import MoyeTypeError, ShapeError
from moye.ops.layer_norm_op import layer_norm, layer_norm_backward
from moye.ops.rms_norm_op import rms_norm, rms_norm_backward

from .hostile import Hostile, check, ids

F = np.ones((3, 4), np.float32)
W = np.ones(4, np.float32)
S = np.ones(3, np.float32)

CASES = [
    Hostile("rms_norm of bools", lambda: rms_norm(np.ones((2, 3), bool), None), MoyeTypeError,
            r"rms_norm: x must be float32, float16, bfloat16 or float64, got bool"),
    Hostile("layer_norm of float8", lambda: layer_norm(np.ones((2, 3), ml_dtypes.float8_e4m3fn),
                                                       None, None),
            MoyeTypeError, r"layer_norm: x must be .* got float8_e4m3fn"),
    Hostile("rms_norm of a 0-d array", lambda: rms_norm(np.array(1.0, np.float32), None),
            ShapeError, r"rms_norm: x is 0-d"),
    Hostile("rms_norm of rows longer than 262144",
            lambda: rms_norm(np.ones((1, 2**18 + 1), np.float16), None),
            ShapeError, r"rows of 262145 elements; at most 262144"),
    Hostile("rms_norm of a Fortran-order array", lambda: rms_norm(np.asfortranarray(F), W),
            ShapeError, r"rms_norm: x must be contiguous"),
    Hostile("rms_norm with a 2-d weight", lambda: rms_norm(F, F), ShapeError,
            r"weight has shape \(3, 4\); rows of x have 4 elements, so it must have shape "
            r"\(4,\)"),
    Hostile("rms_norm with weight a list", lambda: rms_norm(F, [1.0] * 4), MoyeTypeError,
            r"weight must be a NumPy array or a torch tensor, got list"),
    Hostile("rms_norm with an int32 weight", lambda: rms_norm(F, W.astype(np.int32)),
            MoyeTypeError, r"weight must be float32, float16, bfloat16 or float64, got int32"),
    Hostile("rms_norm with a bfloat16 weight on float16 x",
            lambda: rms_norm(F.astype(np.float16), W.astype(ml_dtypes.bfloat16)), MoyeTypeError,
            r"weight is bfloat16 but x is float16; weight must be float16 or float32"),
    Hostile("rms_norm with eps a string", lambda: rms_norm(F, W, "1e-6"), MoyeTypeError,
            r"rms_norm: eps must be a positive finite number, got '1e-6'"),
    Hostile("rms_norm with eps infinite", lambda: rms_norm(F, W, float("inf")), MoyeTypeError,
            r"eps must be a positive finite number, got inf"),
    Hostile("layer_norm with eps negative", lambda: layer_norm(F, W, W, -1e-5), MoyeTypeError,
            r"layer_norm: eps must be a positive finite number, got -1e-05"),
    Hostile("layer_norm with a strided bias", lambda: layer_norm(F, W, np.ones(8, np.float32)[::2]),
            ShapeError, r"layer_norm: bias must be contiguous"),
    Hostile("layer_norm with a float64 bias on float32 x", lambda: layer_norm(F, W, np.ones(4)),
            MoyeTypeError, r"bias is float64 but x is float32"),
    Hostile("rms_norm_backward with rstd a list",
            lambda: rms_norm_backward(F, F, W, [1.0] * 3), MoyeTypeError,
            r"rms_norm_backward: rstd must be a NumPy array or a torch tensor, got list"),
    Hostile("rms_norm_backward with rstd of x's shape", lambda: rms_norm_backward(F, F, W, F),
            ShapeError, r"rstd has shape \(3, 4\) but x has \(3, 4\); it must have x's shape "
            r"without the last dimension, \(3,\)"),
    Hostile("rms_norm_backward with float64 rstd for float32 x",
            lambda: rms_norm_backward(F, F, W, S.astype(np.float64)), MoyeTypeError,
            r"rstd is float64; for float32 x it must be float32"),
    Hostile("rms_norm_backward with strided dy",
            lambda: rms_norm_backward(np.ones((3, 8), np.float32)[:, ::2], F, W, S), ShapeError,
            r"dy must be contiguous"),
    Hostile("layer_norm_backward with mean of another dtype",
            lambda: layer_norm_backward(F, F, W, S.astype(np.float16), S), MoyeTypeError,
            r"layer_norm_backward: mean is float16; for float32 x it must be float32"),
    Hostile("layer_norm_backward with dy of another shape",
            lambda: layer_norm_backward(np.ones((4, 3), np.float32), F, W, S, S), ShapeError,
            r"dy has shape \(4, 3\) but x has \(3, 4\)"),
    Hostile("layer_norm_backward with weight too short",
            lambda: layer_norm_backward(F, F, W[:3], S, S), ShapeError,
            r"weight has shape \(3,\); rows of x have 4 elements"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)

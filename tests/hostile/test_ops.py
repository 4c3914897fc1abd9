"""Hostile inputs to moye.ops: wrong types and dtypes, 0-d arrays, dims out of
range, mismatched gradients, rows that are not contiguous, rows too long."""
import ml_dtypes
import numpy as np
import pytest

from moye import MoyeTypeError, ShapeError
from moye.ops import softmax, softmax_backward

from .hostile import Hostile, check, ids

F = np.ones((3, 4), np.float32)

CASES = [
    Hostile("softmax of bools", lambda: softmax(np.ones((2, 3), bool)), MoyeTypeError,
            r"softmax: x must be float32, float16, bfloat16 or float64, got bool"),
    Hostile("softmax of int8", lambda: softmax(np.ones((2, 3), np.int8)), MoyeTypeError,
            r"got int8"),
    Hostile("softmax of complex64", lambda: softmax(np.ones((2, 3), np.complex64)),
            MoyeTypeError, r"got complex64"),
    Hostile("softmax of float8", lambda: softmax(np.ones((2, 3), ml_dtypes.float8_e4m3fn)),
            MoyeTypeError, r"got float8_e4m3fn"),
    Hostile("softmax of a Python list", lambda: softmax([1.0, 2.0]), MoyeTypeError,
            r"x must be a NumPy array or a torch tensor, got list"),
    Hostile("softmax of a NumPy scalar", lambda: softmax(np.float32(1.0)), MoyeTypeError,
            r"got float32"),
    Hostile("softmax of a 0-d array", lambda: softmax(np.array(1.0, np.float32)), ShapeError,
            r"softmax: x is 0-d"),
    Hostile("softmax with dim as a string", lambda: softmax(F, "last"), MoyeTypeError,
            r"dim must be an int, got str"),
    Hostile("softmax with dim True", lambda: softmax(F, True), MoyeTypeError,
            r"dim must be an int, got bool"),
    Hostile("softmax with dim past the rank", lambda: softmax(F, 5), ShapeError,
            r"dim 5 is out of range for x of 2 dimensions \(expected -2 to 1\)"),
    Hostile("softmax of a Fortran-order array along its last dim",
            lambda: softmax(np.asfortranarray(F)), ShapeError, r"x must be contiguous"),
    Hostile("softmax of strided rows", lambda: softmax(F[:, ::2]), ShapeError,
            r"x must be contiguous"),
    Hostile("softmax of rows longer than 262144", lambda: softmax(np.ones((1, 2**18 + 1),
                                                                          np.float16)),
            ShapeError, r"rows of 262145 elements; at most 262144"),
    Hostile("softmax_backward with dy of another dtype",
            lambda: softmax_backward(F, F.astype(ml_dtypes.bfloat16)), MoyeTypeError,
            r"dy is bfloat16 but y is float32"),
    Hostile("softmax_backward with dy of another shape",
            lambda: softmax_backward(F, np.ones((4, 3), np.float32)), ShapeError,
            r"dy has shape \(4, 3\) but y has \(3, 4\)"),
    Hostile("softmax_backward with dy a list", lambda: softmax_backward(F, [[1.0] * 4] * 3),
            MoyeTypeError, r"dy must be a NumPy array or a torch tensor, got list"),
    Hostile("softmax_backward of 0-d arrays",
            lambda: softmax_backward(np.array(1.0, np.float32), np.array(1.0, np.float32)),
            ShapeError, r"softmax_backward: y is 0-d"),
    Hostile("softmax_backward with dim out of range", lambda: softmax_backward(F, F, -3),
            ShapeError, r"dim -3 is out of range for y"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)

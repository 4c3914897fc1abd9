"""Hostile inputs to moye.ops' matmul and linear, and the torch-only paths of
every op: arguments that are not arrays where an array is checked for its
shape, out= arrays the kernels cannot write element by element (overlapping
or negative strides, a tensor that requires grad), tensors on the meta
device, activations and numbers the custom op's schema or a float cannot
take."""
import numpy as np
import pytest
import torch

from moye import BoundsError, MoyeTypeError, ShapeError
from moye import ops

from .hostile import Hostile, check, ids

H = np.float16
A, B = np.ones((4, 6), H), np.ones((6, 8), H)
TA, TB = torch.ones(4, 6, dtype=torch.half), torch.ones(6, 8, dtype=torch.half)
X, TARGET = np.ones((4, 5), np.float32), np.zeros(4, np.int64)


def meta(*shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def overlapping_out():
    """A writable (4, 8) view whose rows overlap: row i starts 4 elements after row i - 1."""
    return np.lib.stride_tricks.as_strided(np.zeros(40, H), (4, 8), (8, 2))


CASES = [
    Hostile("matmul with bias a list", lambda: ops.matmul(A, B, [1.0] * 8), MoyeTypeError,
            r"matmul: bias must be a NumPy array or a torch tensor, got list"),
    Hostile("matmul with bias a float", lambda: ops.matmul(A, B, 1.0), MoyeTypeError,
            r"matmul: bias must be a NumPy array or a torch tensor, got float"),
    Hostile("matmul with residual a list", lambda: ops.matmul(A, B, residual=[[0.0] * 8] * 4),
            MoyeTypeError, r"matmul: residual must be a NumPy array or a torch tensor, got list"),
    Hostile("matmul with out a list and out_dtype",
            lambda: ops.matmul(A, B, out=[[0.0] * 8] * 4, out_dtype=H), MoyeTypeError,
            r"matmul: out must be a NumPy array or a torch tensor, got list"),
    Hostile("matmul of torch tensors with activation a list",
            lambda: ops.matmul(TA, TB, activation=["relu"]), MoyeTypeError,
            r"matmul: activation must be one of None, 'relu', .* got \['relu'\]"),
    Hostile("linear of torch tensors with activation a function",
            lambda: ops.linear(TA, TB.T, activation=torch.relu), MoyeTypeError,
            r"matmul: activation must be one of None, .* got <built-in method relu"),
    Hostile("matmul with activation a NumPy array of strings",
            lambda: ops.matmul(A, B, activation=np.array(["relu", "silu"])), MoyeTypeError,
            r"matmul: activation must be one of None, .* got array"),
    Hostile("matmul with alpha an int too large for a float", lambda: ops.matmul(A, B, alpha=10**400),
            MoyeTypeError, r"matmul: alpha must be a number a float holds, got an int of 401 "
            r"digits"),
    Hostile("matmul of torch tensors with alpha an int too large for a float",
            lambda: ops.matmul(TA, TB, alpha=-10**400), MoyeTypeError,
            r"matmul: alpha must be a number a float holds"),
    Hostile("matmul into an out whose rows overlap", lambda: ops.matmul(A, B, out=overlapping_out()),
            ShapeError, r"matmul: out has elements that share memory \(shape \(4, 8\), strides "
            r"\(8, 2\) bytes\)"),
    Hostile("matmul into an expanded torch out",
            lambda: ops.matmul(TA, TB, out=torch.zeros(1, 8, dtype=torch.half).expand(4, 8)),
            ShapeError, r"matmul: out has elements that share memory \(shape \(4, 8\), strides "
            r"\(0, 1\) elements\)"),
    Hostile("matmul into an out of negative strides",
            lambda: ops.matmul(A, B, out=np.zeros((4, 8), H)[::-1]), ShapeError,
            r"matmul: out has negative strides \(-16, 2\) bytes"),
    Hostile("matmul into an out that requires grad",
            lambda: ops.matmul(TA, TB, out=torch.zeros(4, 8, dtype=torch.half,
                                                       requires_grad=True)), MoyeTypeError,
            r"matmul: out= takes no tensors that require grad"),
    Hostile("matmul of meta tensors", lambda: ops.matmul(meta(4, 6, dtype=torch.half),
                                                         meta(6, 8, dtype=torch.half)),
            MoyeTypeError, r"matmul: a is on meta; moye takes CPU and CUDA tensors"),
    Hostile("matmul into a meta out",
            lambda: ops.matmul(TA, TB, out=meta(4, 8, dtype=torch.half)), MoyeTypeError,
            r"matmul: out is on meta but a is on cpu"),
    Hostile("softmax of a meta tensor", lambda: ops.softmax(meta(3, 4)), MoyeTypeError,
            r"softmax: x is on meta; moye takes CPU and CUDA tensors"),
    Hostile("rms_norm of a meta tensor", lambda: ops.rms_norm(meta(3, 4), None), MoyeTypeError,
            r"rms_norm_forward: x is on meta"),
    Hostile("cross_entropy of meta tensors",
            lambda: ops.cross_entropy(meta(4, 5), meta(4, dtype=torch.int64)), MoyeTypeError,
            r"cross_entropy: logits is on meta; moye takes CPU and CUDA tensors"),
    Hostile("cross_entropy with ignore_index past int64",
            lambda: ops.cross_entropy(torch.ones(4, 5), torch.zeros(4, dtype=torch.int64),
                                      2**70), BoundsError,
            r"cross_entropy: ignore_index 1180591620717411303424 is outside int64"),
    Hostile("cross_entropy_backward with ignore_index past int64",
            lambda: ops.cross_entropy_backward(np.ones(4, np.float32), X, TARGET,
                                               np.ones(4, np.float32), -2**63 - 1),
            BoundsError, r"cross_entropy_backward: ignore_index -9223372036854775809 is "
            r"outside int64"),
    Hostile("rms_norm with a float16 weight on float32 x",
            lambda: ops.rms_norm(np.ones((3, 4), np.float32), np.ones(4, H)), MoyeTypeError,
            r"rms_norm: weight is float16 but x is float32; weight must be float32$"),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hostile(case):
    check(case)

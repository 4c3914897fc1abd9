"""Hostile inputs to moye.ops' matmul and linear, and the torch-only paths of
every op: arguments that are not arrays where an array is checked for its
shape, out= arrays the kernels cannot write element by element (overlapping
or negative strides, a tensor that requires grad), tensors on the meta
device, activations and numbers the custom op's schema or a float cannot
take."""
import numpy as np
import pytest

from moye import BoundsError, MoyeTypeError, ShapeError
from moye import ops

from .hostile import Hostile, check, ids

torch = pytest.importorskip("torch")
F = torch.nn.functional

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


# -- hostile inputs the ops take: every element against torch in float64 ---------------------

def _rng():
    return np.random.default_rng(7)


def _assert_like_torch(got, want, tol):
    """Every element of `got` within `tol` (relative and absolute) of torch's
    float64 `want`, NaN where it is NaN and infinities of its sign."""
    got = np.asarray(got.float() if isinstance(got, torch.Tensor) else got, np.float64)
    want = want.numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


def _with_non_finite(shape):
    x = _rng().standard_normal(shape).astype(np.float32)
    x[0, 1], x[1, :], x[2, 3], x[3, 0] = np.nan, -np.inf, np.inf, np.inf
    x[3, 2] = -np.inf
    return x


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "rms_norm", "layer_norm",
                                "cross_entropy"])
def test_nan_and_inf_propagate_as_in_torch(poisoned_ops_outputs, op, kind):
    """A NaN, a row of -inf, +inf among finite values: the rows they reach
    are NaN (or inf, -inf) as torch's, the others untouched."""
    x = _with_non_finite((5, 7))
    arg = torch.from_numpy(x) if kind == "torch" else x
    t = torch.from_numpy(x).double()
    target = np.array([1, 0, 3, 2, 6])
    calls = {
        "softmax": (lambda: ops.softmax(arg), lambda: torch.softmax(t, -1)),
        "log_softmax": (lambda: ops.log_softmax(arg), lambda: torch.log_softmax(t, -1)),
        "rms_norm": (lambda: ops.rms_norm(arg, None), lambda: F.rms_norm(t, (7,), None, 1e-6)),
        "layer_norm": (lambda: ops.layer_norm(arg, None, None),
                       lambda: F.layer_norm(t, (7,), None, None, 1e-5)),
        "cross_entropy": (
            lambda: ops.cross_entropy(arg, torch.from_numpy(target) if kind == "torch" else target,
                                      reduction="none"),
            lambda: F.cross_entropy(t, torch.from_numpy(target), reduction="none")),
    }
    got, want = calls[op]
    _assert_like_torch(got(), want(), 1e-5)


def _f16(*shape):
    return _rng().standard_normal(shape).astype(H)


def _reference(a, b, bias=None, residual=None):
    f = lambda v: torch.from_numpy(np.ascontiguousarray(v).astype(np.float64))  # noqa: E731
    y = f(a) @ f(b)
    return y + (0 if bias is None else f(bias)) + (0 if residual is None else f(residual))


A8, B8 = _f16(8, 12), _f16(12, 10)
OPERANDS = {       # name: (a, b, bias, residual): views of every kind, none contiguous
    "transposed a and b": (_f16(12, 8).T, _f16(10, 12).T, None, None),
    "every other column of a": (_f16(8, 24)[:, ::2], B8, None, None),
    "every other row of b": (A8, _f16(24, 10)[::2], None, None),
    "a of negative strides": (A8[::-1, ::-1], B8, None, None),
    "b of negative strides": (A8, B8[::-1], None, None),
    "broadcast a (read-only)": (np.broadcast_to(_f16(12), (8, 12)), B8, None, None),
    "a whose rows overlap": (np.lib.stride_tricks.as_strided(_f16(40), (8, 12), (4, 2)), B8,
                             None, None),
    "broadcast residual, strided bias": (A8, B8, _f16(20)[::2],
                                         np.broadcast_to(_f16(10), (8, 10))),
    "transposed residual": (A8, B8, None, _f16(10, 8).T),
    "odd sizes, K = 1": (_f16(7, 1), _f16(1, 3), _f16(3), None),
}


@pytest.mark.parametrize("name", list(OPERANDS))
def test_operand_views(poisoned_ops_outputs, name):
    a, b, bias, residual = OPERANDS[name]
    y = ops.matmul(a, b, bias=bias, residual=residual, out_dtype="float32")
    _assert_like_torch(y, _reference(a, b, bias, residual), 2e-3)


@pytest.mark.parametrize("view", ["transposed", "every other column", "rows of a 3-d out"])
def test_out_views_get_every_element_and_nothing_else(view):
    a, b = _f16(6, 12), _f16(12, 8)
    base = np.full((8, 16) if view != "rows of a 3-d out" else (2, 6, 8), np.nan, np.float32)
    out = {"transposed": base[:8, :6].T, "every other column": base[:6, ::2],
           "rows of a 3-d out": base[1]}[view]
    assert ops.matmul(a, b, out=out) is out
    _assert_like_torch(out, _reference(a, b), 2e-3)
    assert np.isnan(base).sum() == base.size - out.size      # no element outside out written


@pytest.mark.parametrize("M, K, N", [(0, 5, 3), (4, 0, 3), (4, 5, 0), (0, 0, 0)])
def test_empty_dimensions_like_torch(poisoned_ops_outputs, M, K, N):
    """K = 0: a product of zeros, plus the bias."""
    a, b, bias = _f16(M, K), _f16(K, N), _f16(N)
    _assert_like_torch(ops.matmul(a, b, bias=bias), _reference(a, b, bias), 1e-3)
    y = ops.linear(torch.from_numpy(a), torch.from_numpy(b).T, torch.from_numpy(bias))
    _assert_like_torch(y, _reference(a, b, bias), 1e-3)

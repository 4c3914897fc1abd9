"""The GEMM epilogue that moye.ops.matmul fuses into its kernels, one
accumulator value at a time, in float32:

    out = activation(alpha * acc + bias[col]) + beta * residual[row, col]

`bias` and `residual` are arrays or None (then left out of the kernel);
`activation` is one of ACTIVATIONS, static. The kernels (gemm_sm80,
gemm_sm90) call `epilogue_value` on each of their accumulators with its
coordinates; `activation_grad` is the backward's factor.
"""
import math

import moye

from ..errors import MoyeTypeError
from .row_kernels import LOG2E

ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")
SQRT_HALF = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715           # tanh's approximation of gelu (Hendrycks and Gimpel)


def check_activation(activation, opname):
    """`activation`, or a MoyeTypeError naming the ones there are."""
    if not (activation is None or isinstance(activation, str)) or activation not in ACTIVATIONS:
        raise MoyeTypeError(f"{opname}: activation must be one of "
                            f"{', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    return activation


@moye.func
def activate(x, activation):
    """`activation` (static) of a float32 value: relu, gelu (erf), gelu_tanh,
    silu, or x itself for None. torch: F.relu, F.gelu(approximate="none" /
    "tanh"), F.silu. On the host, numbers:
        >>> activate(-1.0, "relu"), round(activate(1.0, "gelu"), 6), round(activate(1.0, "silu"), 6)
        (0.0, 0.841345, 0.731059)
        >>> round(activate(1.0, "gelu_tanh"), 6), round(activate(-3.0, "gelu_tanh"), 6)
        (0.841192, -0.003637)
    """
    if activation == "relu":
        return moye.maximum(x, 0.0)
    if activation == "gelu":
        return 0.5 * x * (1.0 + moye.erf(x * SQRT_HALF))
    if activation == "gelu_tanh":       # 0.5 x (1 + tanh(u)) = x sigmoid(2u)
        return x * sigmoid(2.0 * SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x))
    if activation == "silu":
        return x * sigmoid(x)
    return x


@moye.func
def sigmoid(z):
    """1 / (1 + e^-z) of a float32 value from the PTX approximations
    ex2.approx and rcp.approx (a few ulp of float32: within 2^-20 relative,
    over the whole range; 0 and 1 at the ends). The epilogue's gelu_tanh
    and silu take it: accurate tanhf and division cost the big GEMMs'
    epilogues several per cent.
        >>> sigmoid(0.0), sigmoid(-1000.0), round(sigmoid(2.0), 6)
        (0.5, 0.0, 0.880797)
    """
    return moye.rcp_approx(1.0 + moye.exp2_approx(-LOG2E * z))


@moye.func
def activation_grad(x, activation):
    """d activation(x) / dx at a float32 value (1 for None; relu's is 0 at
    0, as torch's).
        >>> activation_grad(0.0, "relu"), round(activation_grad(0.0, "gelu"), 6)
        (0.0, 0.5)
    """
    if activation == "relu":
        return moye.ifelse(x > 0.0, 1.0, 0.0)
    if activation == "gelu":
        cdf = 0.5 * (1.0 + moye.erf(x * SQRT_HALF))
        return cdf + x * moye.exp(-0.5 * x * x) * (SQRT_HALF / math.sqrt(math.pi))
    if activation == "gelu_tanh":
        inner = SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)
        t = moye.tanh(inner)
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * \
            (1.0 + 3.0 * GELU_CUBIC * x * x)
    if activation == "silu":
        s = 1.0 / (1.0 + moye.exp(-x))
        return s * (1.0 + x * (1.0 - s))
    return 1.0


@moye.func
def epilogue_value(acc, row, col, alpha, bias, residual, beta, activation):
    """activation(alpha * acc + bias[col]) + beta * residual[row, col] in
    float32, for an accumulator `acc` at (row, col) of the output; `bias`
    (N,) and `residual` (M, N) arrays or None, `alpha` and `beta` numbers.
        >>> import numpy as np
        >>> epilogue_value(2.0, 0, 1, 0.5, np.array([1.0, -3.0]), None, 1.0, "relu")
        0.0
    """
    return epilogue_of(acc, col, alpha, bias, None if residual is None else residual[row, col],
                       beta, activation)


@moye.func
def epilogue_of(acc, col, alpha, bias, residual_value, beta, activation):
    """epilogue_value with the residual's element already read (a kernel
    that loads it early, to hide its latency), or None; `col` is the bias's
    index (a swapped kernel's row: gemm_sm90.kernel_tile).
        >>> float(epilogue_of(2.0, 0, 1.0, None, 0.25, 2.0, None))
        2.5
    """
    v = acc * alpha
    if bias is not None:
        v = v + moye.cast(bias[col], moye.Float32)
    v = activate(v, activation)
    if residual_value is not None:
        v = v + beta * moye.cast(residual_value, moye.Float32)
    return v

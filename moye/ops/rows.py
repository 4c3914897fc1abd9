"""Row-wise ops' shared host side: checking the input, seeing it as M rows of
N contiguous elements, and the launch plan (threads, elements per thread,
which kernel) per (dtype, N, backend), cached.

An op reduces along `dim`. The last dimension of a C-contiguous array is used
in place; any other `dim` is moved last (one copy) and the result moved back.
Non-contiguous rows along the last dimension are refused: make them
contiguous first (`np.ascontiguousarray`, `tensor.contiguous()`).
"""
import functools
import importlib
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..errors import MoyeError, MoyeTypeError, ShapeError

MAX_N = 262_144
# elements one thread keeps in registers in the one-pass kernels (float32 math)
REGISTER_ELEMENTS = 32
MAX_THREADS = 1024
# short rows: one warp per row, this many per block
ROWS_PER_BLOCK = 4
_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16",
           np.dtype(ml_dtypes.bfloat16): "bfloat16"}
_TORCH_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")


def is_torch(x):
    """Whether `x` is a torch tensor (duck typing: torch stays optional)."""
    return type(x).__module__.startswith("torch")


def dtype_name(x, what, op):
    """'float32', 'float16' or 'bfloat16' for `x`, else a MoyeTypeError."""
    if is_torch(x):
        name = str(x.dtype)
        if name in _TORCH_DTYPES:
            return name[len("torch."):]
        name = name[len("torch."):] if name.startswith("torch.") else name
    elif isinstance(x, np.ndarray):
        if x.dtype in _DTYPES:
            return _DTYPES[x.dtype]
        name = str(x.dtype)
    else:
        raise MoyeTypeError(f"{op}: {what} must be a NumPy array or a torch tensor, got "
                            f"{type(x).__name__}")
    raise MoyeTypeError(f"{op}: {what} must be float32, float16 or bfloat16, got {name}")


def check_dim(x, dim, what, op):
    """`dim` as a non-negative axis of `x`."""
    nd = x.ndim if not is_torch(x) else x.dim()
    if nd == 0:
        raise ShapeError(f"{op}: {what} is 0-d; it needs at least one dimension to reduce along")
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise MoyeTypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    if not -nd <= dim < nd:
        raise ShapeError(f"{op}: dim {dim} is out of range for {what} of {nd} dimensions "
                         f"(expected {-nd} to {nd - 1})")
    return int(dim) % nd


def to_last(x, dim):
    """`x` with `dim` moved last (a contiguous copy when dim is not last)."""
    last = (x.dim() if is_torch(x) else x.ndim) - 1
    if dim == last:
        return x
    if is_torch(x):
        return x.movedim(dim, -1).contiguous()
    return np.ascontiguousarray(np.moveaxis(x, dim, -1))


def from_last(y, dim, nd):
    """Undo `to_last`."""
    if dim == nd - 1:
        return y
    return y.movedim(-1, dim) if is_torch(y) else np.moveaxis(y, -1, dim)


def as_rows(x, what, op):
    """`x` (its reduced dimension last) as an (M, N) view, without a copy;
    non-contiguous rows are refused."""
    shape = tuple(x.shape)
    n = shape[-1]
    if n > MAX_N:
        raise ShapeError(f"{op}: {what} has rows of {n} elements; at most {MAX_N} are supported")
    contiguous = x.is_contiguous() if is_torch(x) else x.flags.c_contiguous
    if not contiguous:
        raise ShapeError(f"{op}: {what} must be contiguous (C order) along its rows; got strides "
                         f"{tuple(x.stride()) if is_torch(x) else x.strides}: call "
                         ".contiguous() / np.ascontiguousarray first")
    m = int(np.prod(shape[:-1], dtype=np.int64))
    return x.reshape(m, n), m, n


def empty_like(x):
    if is_torch(x):
        import torch
        return torch.empty_like(x, memory_format=torch.contiguous_format)
    return np.empty_like(x, order="C")


def backend_of(x):
    """'cuda' for a torch CUDA tensor, else 'cpu'."""
    if is_torch(x) and x.device.type == "cuda":
        return "cuda"
    return "cpu"


@dataclass(frozen=True)
class Plan:
    """How one row-wise op runs for one (dtype, N, backend): `threads` per
    block (one block per row), `vec` elements per chunk (16 bytes of the input
    type), `chunks` chunks per thread, `kernel`: "registers" (the row is
    loaded once and kept in registers) or "general" (loops over the row: two
    passes, any N), and `rows` per block: short rows (one warp's worth) take
    one warp each, ROWS_PER_BLOCK of them per block."""
    dtype: str
    n: int
    backend: str
    threads: int
    vec: int
    chunks: int
    kernel: str
    rows: int = 1


_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2}


@functools.lru_cache(maxsize=4096)
def plan(dtype, n, backend, register_elements=REGISTER_ELEMENTS):
    """The Plan for rows of `n` elements of `dtype` on `backend` (cached: the
    same object for the same arguments)."""
    vec = 16 // _SIZES[dtype]
    groups = -(-n // vec)
    threads = min(MAX_THREADS, max(32, -(-groups // 32) * 32))
    chunks = -(-groups // threads)
    if chunks * vec <= register_elements:
        if threads == 32:
            return Plan(dtype, n, backend, 32 * ROWS_PER_BLOCK, vec, chunks, "registers",
                        ROWS_PER_BLOCK)
        return Plan(dtype, n, backend, threads, vec, chunks, "registers")
    return Plan(dtype, n, backend, MAX_THREADS if backend == "cuda" else 256, vec, 1, "general")


# -- dispatch: NumPy arrays to the raw host functions, torch tensors to the custom ops ----------

# Each op's raw host functions (no autograd; NumPy arrays or torch tensors in,
# the same kind out) and the module of moye.ops that holds them.
RAW_MODULES = {
    "softmax": "softmax_op", "softmax_backward": "softmax_op",
    "log_softmax": "log_softmax_op", "log_softmax_backward": "log_softmax_op",
    "rms_norm_forward": "rms_norm_op", "rms_norm_backward": "rms_norm_op",
    "layer_norm_forward": "layer_norm_op", "layer_norm_backward": "layer_norm_op",
    "cross_entropy_forward": "cross_entropy_op", "cross_entropy_backward": "cross_entropy_op",
}


@functools.lru_cache(maxsize=None)
def raw(name):
    """The raw host function `name` of RAW_MODULES, from its module."""
    module = RAW_MODULES[name]
    try:
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)
    except ModuleNotFoundError as e:
        if e.name != f"{__package__}.{module}":
            raise
        raise MoyeError(f"moye.ops.{name}: its kernels (moye/ops/{module}.py) are not in this "
                        "build of moye") from None


def uses_torch(*arrays):
    """Whether any of `arrays` (None ones skipped) is a torch tensor: then the
    op runs as its torch custom op (moye.ops.torch_ops), so that autograd,
    torch.compile and CUDA graphs see it; otherwise the raw function runs."""
    return any(is_torch(a) for a in arrays)


def torch_ops():
    """moye.ops.torch_ops, imported (with torch) on the first torch tensor."""
    from . import torch_ops as module
    return module

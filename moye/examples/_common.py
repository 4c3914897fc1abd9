"""Shared helpers of the examples: device arrays and checking."""
import numpy as np


def torch_cuda():
    """torch, if it can use a CUDA device; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def column_major(torch, shape, dtype, fill="randn"):
    """A CUDA tensor of `shape` laid out column-major (mode 0 contiguous), as
    Julia's arrays in the seeds are: the transposed view of a row-major one."""
    rows, cols = shape
    base = getattr(torch, fill)(cols, rows, device="cuda", dtype=dtype)
    return base.t()


def rel_error(out, ref):
    """‖out − ref‖ / ‖ref‖ in float64."""
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))

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


def check_matmul(name, launch, M, N, K, b_k_major=False, precision="float32", tol=1e-5):
    """Run `launch(A, B, C)` (C = A * B^T, float32; A and C column-major, B
    column-major or, with `b_k_major`, row-major) on the GPU with C poisoned,
    and check every element against float64 (relative error below `tol`)."""
    torch = torch_cuda()
    if torch is None:
        print(f"{name}: no CUDA device; see the CPU backend")
        return
    A = column_major(torch, (M, K), torch.float32)
    B = torch.randn(N, K, device="cuda") if b_k_major else \
        column_major(torch, (N, K), torch.float32)
    C = column_major(torch, (M, N), torch.float32, fill="empty")
    C.fill_(float("nan"))
    launch(A, B, C)
    torch.cuda.synchronize()
    ref = A.double() @ B.double().t()
    err = rel_error(C.cpu().numpy(), ref.cpu().numpy())
    print(f"{name} {M}x{N}x{K} {precision} on {torch.cuda.get_device_name()}: "
          f"relative error {err:.2e}")
    assert err < tol

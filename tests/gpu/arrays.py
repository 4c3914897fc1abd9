"""Device arrays for the GPU tests."""
from moye.examples._common import column_major


def colmajor(torch, rows, cols, fill=None):
    """A random column-major float32 (rows, cols) CUDA tensor, or one filled
    with `fill` (a poison such as NaN)."""
    x = column_major(torch, (rows, cols), torch.float32)
    if fill is not None:
        x.fill_(fill)
    return x

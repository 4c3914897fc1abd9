"""ldmatrix and stmatrix for one warp, from the PTX ISA's words and nothing of
moye's layouts: the CPU backend executes them with it, and tests/atom check
moye's copy layouts against it.

`ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16`: the warp loads
`count` 8x8 matrices of 16-bit elements. Lane i supplies the shared-memory
address of row i % 8 of matrix i // 8 (lanes 0..8*count-1; a row is 8
contiguous elements, 16-byte aligned). Lane l receives one 32-bit register
per matrix: register j holds row l // 4, elements 2*(l % 4) and
2*(l % 4) + 1 of matrix j, the first in the low half. With .trans the
matrix is transposed on the way. stmatrix is the same thing backwards.

Memory is a 1-D NumPy array of 16-bit elements and addresses are element
offsets into it. Registers are an array regs[lane, j, half].
"""
import numpy as np

ROW = 8  # elements in a row of an m8n8 b16 matrix


def lane_elements(count, trans=False):
    """(supplier, col), each of shape (32, count, 2): half h of register j of
    lane l is element col[l, j, h] of the row whose address lane
    supplier[l, j, h] gives.
        >>> supplier, col = lane_elements(1)
        >>> supplier[5, 0], col[5, 0]
        (array([1, 1]), array([2, 3]))
    """
    lane = np.arange(32)[:, None, None]
    j, h = np.arange(count)[None, :, None], np.arange(2)[None, None, :]
    row, col = lane // 4, 2 * (lane % 4) + h
    if trans:
        row, col = col, row
    shape = (32, count, 2)
    return np.broadcast_to(8 * j + row, shape), np.broadcast_to(col, shape)


def check_rows(addrs, count):
    """Raise ValueError unless the lanes that give rows give 16-byte aligned ones."""
    if len(addrs) != 32:
        raise ValueError(f"a warp has 32 lanes, got {len(addrs)} addresses")
    for lane in range(8 * count):
        if int(addrs[lane]) % ROW:
            raise ValueError(f"lane {lane}: row address {int(addrs[lane])} is not 16-byte aligned")


def ldmatrix(smem, addrs, count, trans=False):
    """The registers regs[lane, j, half] a warp holds after ldmatrix.x{count}[.trans]."""
    addrs = np.asarray(addrs, dtype=np.int64)
    check_rows(addrs, count)
    supplier, col = lane_elements(count, trans)
    return smem[addrs[supplier] + col]


def stmatrix(smem, addrs, regs, count, trans=False):
    """Store the warp's registers regs[lane, j, half] with stmatrix.x{count}[.trans]."""
    addrs = np.asarray(addrs, dtype=np.int64)
    check_rows(addrs, count)
    supplier, col = lane_elements(count, trans)
    smem[addrs[supplier] + col] = regs
    return smem

"""ldmatrix and stmatrix for one warp, from the PTX ISA's words and nothing of
moye's layouts, so the two can check each other.

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


def row_addresses(addrs, count):
    """rows[j, r]: the address of row r of matrix j, from the lanes that give them."""
    if len(addrs) != 32:
        raise ValueError(f"a warp has 32 lanes, got {len(addrs)} addresses")
    rows = np.empty((count, 8), dtype=np.int64)
    for lane in range(8 * count):
        a = int(addrs[lane])
        if a % ROW:
            raise ValueError(f"lane {lane}: row address {a} is not 16-byte aligned")
        rows[lane // 8, lane % 8] = a
    return rows


def ldmatrix(smem, addrs, count, trans=False):
    """The registers a warp holds after ldmatrix.x{count}[.trans]."""
    rows = row_addresses(addrs, count)
    regs = np.empty((32, count, 2), dtype=smem.dtype)
    for j in range(count):
        matrix = np.stack([smem[a:a + ROW] for a in rows[j]])
        if trans:
            matrix = matrix.T
        for lane in range(32):
            regs[lane, j] = matrix[lane // 4, 2 * (lane % 4):2 * (lane % 4) + 2]
    return regs


def stmatrix(smem, addrs, regs, count, trans=False):
    """Store the warp's registers regs[lane, j, half] with stmatrix.x{count}[.trans]."""
    rows = row_addresses(addrs, count)
    for j in range(count):
        matrix = np.empty((8, 8), dtype=smem.dtype)
        for lane in range(32):
            matrix[lane // 4, 2 * (lane % 4):2 * (lane % 4) + 2] = regs[lane, j]
        if trans:
            matrix = matrix.T
        for r, a in enumerate(rows[j]):
            smem[a:a + ROW] = matrix[r]
    return smem

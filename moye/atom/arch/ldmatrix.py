"""ldmatrix: a warp loads one, two or four 8x8 matrices of 16-bit elements
from shared memory into registers (sm_75+), optionally transposing them.

The facts, from the PTX ISA (`ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans]
.shared.b16`):

- each row of a matrix is 8 elements = 128 contiguous bits in shared memory;
  lane `i` supplies the address of row `i % 8` of matrix `i // 8`, so x1
  reads the addresses of lanes 0-7, x2 of lanes 0-15, x4 of all 32;
- lane `l` receives one 32-bit register per matrix. Without .trans register
  `j` holds row `l // 4`, elements `2*(l % 4)` and `2*(l % 4) + 1` of matrix
  `j` (the lower-numbered element in the low half); with .trans it holds the
  same positions of the transposed matrix: column `l // 4`, rows
  `2*(l % 4)` and `2*(l % 4) + 1`.

The layouts below map (thread, value) to a bit of the instruction's data,
laid out matrix after matrix, each row-major: element (r, c) of matrix j is
bits `1024*j + 128*r + 16*c ...`. Source: (lane, bit of its row). Destination:
(lane, (bits of a register, registers)) or, transposed, (lane, (bits of an
element, the two elements, registers)). The reference is the destination.

stmatrix (stmatrix.py) is the same instruction run backwards.
"""
from ... import ir
from ...layout import Layout
from ..copy import CopyOp

ROW_BITS = 128          # one row of an 8x8 b16 matrix
MATRIX_BITS = 8 * ROW_BITS


def row_addresses(count):
    """(lane, bit) -> bit: lane i gives row i % 8 of matrix i // 8; the lanes
    past 8*count repeat the first ones (stride 0), as their addresses are
    not read.
        >>> row_addresses(1), row_addresses(4)
        (((8,4),128):((128,0),1), (32,128):(128,1))
    """
    rows = 8 * count
    if rows == 32:
        return Layout((32, ROW_BITS), (ROW_BITS, 1))
    return Layout(((rows, 32 // rows), ROW_BITS), ((ROW_BITS, 0), 1))


def fragments(count):
    """(lane, value) -> bit: register j of lane l holds bits 32*l.. of matrix j.
        >>> fragments(1), fragments(2)
        ((32,32):(32,1), (32,(32,2)):(32,(1,1024)))
    """
    if count == 1:
        return Layout((32, 32), (32, 1))
    return Layout((32, (32, count)), (32, (1, MATRIX_BITS)))


def fragments_transposed(count):
    """(lane, value) -> bit for .trans: lane l = (l % 4, l // 4) holds, in
    register j, elements (2*(l % 4) + h, l // 4) of matrix j, h = 0, 1.
        >>> fragments_transposed(1)
        ((4,8),(16,2)):((256,16),(1,128))
    """
    lane = ((4, 8), (2 * ROW_BITS, 16))
    if count == 1:
        return Layout((lane[0], (16, 2)), (lane[1], (1, ROW_BITS)))
    return Layout((lane[0], (16, 2, count)), (lane[1], (1, ROW_BITS, MATRIX_BITS)))


def ldmatrix_ptx(count, transpose, store=False):
    """The PTX spelling of the instruction.
        >>> ldmatrix_ptx(4, True)
        'ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16'
    """
    return (f"{'stmatrix' if store else 'ldmatrix'}.sync.aligned.m8n8.x{count}"
            f"{'.trans' if transpose else ''}.shared.b16")


def matrix_op_names(op, arch, count, transpose):
    """MoYe's name and CuTe's, which say what a lane gets: x1 is one u32, or
    two u16 when transposed.
        >>> matrix_op_names("LDSM", 75, 2, True)
        ('LDSM_U16x4_T', 'SM75_U16x4_LDSM_T')
    """
    what = f"U16x{2 * count}" if transpose else f"U32x{count}"
    major = "T" if transpose else "N"
    return f"{op}_{what}_{major}", f"SM{arch}_{what}_{op}_{major}"


def _ldsm(count, transpose):
    dst = fragments_transposed(count) if transpose else fragments(count)
    name, cute_name = matrix_op_names("LDSM", 75, count, transpose)
    return CopyOp(name, Layout(32), row_addresses(count), dst, kind="ldsm", bits=32 * count,
                  arch=75, instruction=ir.LdMatrix, count=count, transpose=transpose, address_threads=8 * count,
                  ptx=ldmatrix_ptx(count, transpose), cute_name=cute_name)


LDSM_U32x1_N = _ldsm(1, False)
LDSM_U32x2_N = _ldsm(2, False)
LDSM_U32x4_N = _ldsm(4, False)
LDSM_U16x2_T = _ldsm(1, True)
LDSM_U16x4_T = _ldsm(2, True)
LDSM_U16x8_T = _ldsm(4, True)

LDSM_OPS = (LDSM_U32x1_N, LDSM_U32x2_N, LDSM_U32x4_N, LDSM_U16x2_T, LDSM_U16x4_T, LDSM_U16x8_T)


def export_copy_ops(ops, namespace):
    """Put each op's CuTe alias in `namespace`; return both names of each."""
    names = []
    for op in ops:
        namespace[op.info["cute_name"]] = op
        names += [op.name, op.info["cute_name"]]
    return names


__all__ = export_copy_ops(LDSM_OPS, globals())

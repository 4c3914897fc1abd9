"""stmatrix: a warp stores one, two or four 8x8 matrices of 16-bit elements
from registers to shared memory (sm_90+), optionally transposing them.

The PTX ISA (`stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`)
defines it as ldmatrix run backwards: lane `i` supplies the address of row
`i % 8` of matrix `i // 8`, and lane `l`'s register `j` holds the same two
elements of matrix `j` that ldmatrix would have loaded into it. So the
source is ldmatrix's destination (registers), the destination ldmatrix's
source (rows in shared memory), and the reference is the source.
"""
from ... import ir
from ...layout import Layout
from ..copy import CopyOp
from .ldmatrix import (export_copy_ops, fragments, fragments_transposed, ldmatrix_ptx,
                       matrix_op_names, row_addresses)


def _stsm(count, transpose):
    src = fragments_transposed(count) if transpose else fragments(count)
    name, cute_name = matrix_op_names("STSM", 90, count, transpose)
    return CopyOp(name, Layout(32), src, row_addresses(count), src, kind="stsm", bits=32 * count,
                  arch=90, instruction=ir.StMatrix, count=count, transpose=transpose, address_threads=8 * count,
                  ptx=ldmatrix_ptx(count, transpose, store=True), cute_name=cute_name)


STSM_U32x1_N = _stsm(1, False)
STSM_U32x2_N = _stsm(2, False)
STSM_U32x4_N = _stsm(4, False)
STSM_U16x2_T = _stsm(1, True)
STSM_U16x4_T = _stsm(2, True)
STSM_U16x8_T = _stsm(4, True)

STSM_OPS = (STSM_U32x1_N, STSM_U32x2_N, STSM_U32x4_N, STSM_U16x2_T, STSM_U16x4_T, STSM_U16x8_T)

__all__ = export_copy_ops(STSM_OPS, globals())

"""Ampere's mma.sync ops: f64, tf32, bf16, f16 (m16n8k16), 8-bit and 4-bit
integers (with and without .satfinite) and single-bit popc ops.

Every layout is read off the PTX ISA's "Matrix Fragments for mma.mMnNkK"
formulas, with groupID = lane >> 2 and threadID_in_group = lane % 4: the
thread mode is (threadID_in_group, groupID) of shape (4,8), and a value
mode lists the fragment's elements a0, a1, ... in order. A is (M,K), B is
(N,K) (PTX's K x N matrix B, transposed) and C is (M,N), all indexed
column-major. Shapes where the PTX ISA only allows sm_75 keep
info["min_sm"] == 75.
"""
from ...layout import Layout
from ...types import BFloat16, Float16, Float32, Float64, Int4, Int8, Int32, TFloat32, UInt1, \
    UInt4, UInt8
from .mma_sync import export, mma_sync_op
from .sm75 import (MMAOP_8x8x16_S32S8S8S32_TN, MMAOP_16x8x8_F16F16F16F16_TN,
                   MMAOP_16x8x8_F32F16F16F32_TN, ROWS_8x8, ROWS_8x16, ROWS_16x8)

# -- the fragment layouts ------------------------------------------------------------
# One element per thread: (T32,V1) -> (8,4); thread's group is its row, threadID_in_group its k.
ONE_8x4 = Layout(((4, 8), 1), ((8, 1), 0))
# tf32 m16n8k4 A: rows groupID and groupID+8 at k = threadID_in_group
TF32_A_16x4 = Layout(((4, 8), 2), ((16, 1), 8))
# tf32 m16n8k8: A rows +8 for a1/a3, k +4 for a2/a3; B k +4 for b1
TF32_A_16x8 = Layout(((4, 8), (2, 2)), ((16, 1), (8, 64)))
TF32_B_8x8 = Layout(((4, 8), 2), ((8, 1), 32))
# 16-bit m16n8k16: pairs of k; A rows +8 for a2,a3,a6,a7, k +8 for a4..a7; B k +8 for b2,b3
B16_A_16x16 = Layout(((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128)))
B16_B_8x16 = Layout(((4, 8), (2, 2)), ((16, 1), (8, 64)))
# 8-bit: quads of k
I8_A_16x16 = Layout(((4, 8), (4, 2)), ((64, 1), (16, 8)))
I8_A_16x32 = Layout(((4, 8), (4, 2, 2)), ((64, 1), (16, 8, 256)))
I8_B_8x32 = Layout(((4, 8), (4, 2)), ((32, 1), (8, 128)))
# 4-bit: octets of k
I4_AB_8x32 = Layout(((4, 8), 8), ((64, 1), 8))
I4_A_16x32 = Layout(((4, 8), (8, 2)), ((128, 1), (16, 8)))
I4_A_16x64 = Layout(((4, 8), (8, 2, 2)), ((128, 1), (16, 8, 512)))
I4_B_8x64 = Layout(((4, 8), (8, 2)), ((64, 1), (8, 256)))
# 1-bit: 32 k per register
B1_AB_8x128 = Layout(((4, 8), 32), ((256, 1), 8))
B1_A_16x128 = Layout(((4, 8), (32, 2)), ((512, 1), (16, 8)))
B1_A_16x256 = Layout(((4, 8), (32, 2, 2)), ((512, 1), (16, 8, 2048)))
B1_B_8x256 = Layout(((4, 8), (32, 2)), ((256, 1), (8, 1024)))


def _op(shape, types, a, b, c, min_sm=80, **kw):
    return mma_sync_op(shape, types, a, b, c, arch=80, min_sm=min_sm, **kw)


_F32, _TF32, _BF16, _F16 = Float32, TFloat32, BFloat16, Float16

MMAOP_8x8x4_F64F64F64F64_TN = _op((8, 8, 4), (Float64,) * 4, ONE_8x4, ONE_8x4, ROWS_8x8)
MMAOP_16x8x4_F32TF32TF32F32_TN = _op((16, 8, 4), (_F32, _TF32, _TF32, _F32), TF32_A_16x4,
                                     ONE_8x4, ROWS_16x8)
MMAOP_16x8x8_F32TF32TF32F32_TN = _op((16, 8, 8), (_F32, _TF32, _TF32, _F32), TF32_A_16x8,
                                     TF32_B_8x8, ROWS_16x8)
MMAOP_16x8x16_F32BF16BF16F32_TN = _op((16, 8, 16), (_F32, _BF16, _BF16, _F32), B16_A_16x16,
                                      B16_B_8x16, ROWS_16x8)
MMAOP_16x8x8_F32BF16BF16F32_TN = _op((16, 8, 8), (_F32, _BF16, _BF16, _F32), ROWS_16x8,
                                     ROWS_8x8, ROWS_16x8)
MMAOP_16x8x16_F16F16F16F16_TN = _op((16, 8, 16), (_F16,) * 4, B16_A_16x16, B16_B_8x16, ROWS_16x8)
MMAOP_16x8x16_F32F16F16F32_TN = _op((16, 8, 16), (_F32, _F16, _F16, _F32), B16_A_16x16,
                                    B16_B_8x16, ROWS_16x8)

# (A layout, B layout, C layout, min_sm) of each integer shape, by input bits
_INT_SHAPES = {
    ((8, 8, 16), 8): (ROWS_8x16, ROWS_8x16, ROWS_8x8, 75),
    ((16, 8, 16), 8): (I8_A_16x16, ROWS_8x16, ROWS_16x8, 80),
    ((16, 8, 32), 8): (I8_A_16x32, I8_B_8x32, ROWS_16x8, 80),
    ((8, 8, 32), 4): (I4_AB_8x32, I4_AB_8x32, ROWS_8x8, 75),
    ((16, 8, 32), 4): (I4_A_16x32, I4_AB_8x32, ROWS_16x8, 80),
    ((16, 8, 64), 4): (I4_A_16x64, I4_B_8x64, ROWS_16x8, 80),
}


def _integer_ops(shapes, small_types):
    """Every (A type, B type, saturate) at each shape, in MoYe.jl's order."""
    ops = []
    for shape in shapes:
        a_l, b_l, c_l, min_sm = _INT_SHAPES[shape, small_types[0].bits]
        for ta in small_types:
            for tb in small_types:
                for saturate in (False, True):
                    ops.append(_op(shape, (Int32, ta, tb, Int32), a_l, b_l, c_l, min_sm=min_sm,
                                   saturate=saturate))
    return ops


# The integer ops are named by export() below: MMAOP_16x8x32_S32U8S8S32_TN_SATURATE,
# MMAOP_8x8x32_S32S4S4S32_TN, MMAOP_16x8x256_S32B1B1S32_TN_XORPOPC, ...
# MMAOP_8x8x16_S32S8S8S32_TN is sm75's; every other 8-bit and 4-bit op is here.
_I8_OPS = [op for op in _integer_ops(((8, 8, 16), (16, 8, 16), (16, 8, 32)), (Int8, UInt8))
           if op.name != MMAOP_8x8x16_S32S8S8S32_TN.name]
_I4_OPS = _integer_ops(((8, 8, 32), (16, 8, 32), (16, 8, 64)), (Int4, UInt4))

_B1_OPS = []
for _shape, _a, _b, _c in (((8, 8, 128), B1_AB_8x128, B1_AB_8x128, ROWS_8x8),
                           ((16, 8, 128), B1_A_16x128, B1_AB_8x128, ROWS_16x8),
                           ((16, 8, 256), B1_A_16x256, B1_B_8x256, ROWS_16x8)):
    for _bitop in ("xor", "and"):
        _min_sm = 75 if _shape == (8, 8, 128) and _bitop == "xor" else 80
        _B1_OPS.append(_op(_shape, (Int32, UInt1, UInt1, Int32), _a, _b, _c, min_sm=_min_sm,
                           bitop=_bitop))

SM80_OPS = (MMAOP_8x8x4_F64F64F64F64_TN, MMAOP_16x8x4_F32TF32TF32F32_TN,
            MMAOP_16x8x8_F32TF32TF32F32_TN, MMAOP_16x8x16_F32BF16BF16F32_TN,
            MMAOP_16x8x8_F32BF16BF16F32_TN, MMAOP_16x8x16_F16F16F16F16_TN,
            MMAOP_16x8x16_F32F16F16F32_TN, *_I8_OPS, *_I4_OPS, *_B1_OPS)
__all__ = export(SM80_OPS, globals())

# CuTe names the sm75 ops again under SM80_
SM80_16x8x8_F16F16F16F16_TN = MMAOP_16x8x8_F16F16F16F16_TN
SM80_16x8x8_F32F16F16F32_TN = MMAOP_16x8x8_F32F16F16F32_TN
SM80_8x8x16_S32S8S8S32_TN = MMAOP_8x8x16_S32S8S8S32_TN
__all__ += ["SM80_16x8x8_F16F16F16F16_TN", "SM80_16x8x8_F32F16F16F32_TN",
            "SM80_8x8x16_S32S8S8S32_TN"]
del _shape, _a, _b, _c, _bitop, _min_sm

"""Turing's mma.sync ops as CuTe files them under sm75: 16x8x8 with f16
inputs and 8x8x16 with s8 inputs (MoYe.jl files the F16F16F16F16 one under
sm80). The PTX ISA also allows the other m8n8k16 8-bit ops, m8n8k32 s4/u4
and m8n8k128 .xor.popc on sm_75; they live in sm80.py beside their
siblings, with info["min_sm"] saying 75.

Layouts from the PTX ISA, "Matrix Fragments for mma.m16n8k8" and "for
mma.m8n8k16"; groupID = lane >> 2 and threadID_in_group = lane % 4, so the
thread mode is (threadID_in_group, groupID) with shape (4,8).
"""
from ...layout import Layout
from ...types import Float16, Float32, Int8, Int32
from .mma_sync import export, mma_sync_op

# (T32,V4) -> (M16,K8) for 16-bit A, and (T32,V4) -> (M16,N8) for every
# 16x8 accumulator: row = groupID (+8 for values 2,3), col = 2*threadID_in_group + (i & 1)
ROWS_16x8 = Layout(((4, 8), (2, 2)), ((32, 1), (16, 8)))
# (T32,V2) -> (N8,K8) for 16-bit B, and (T32,V2) -> (M8,N8) for 8x8 accumulators:
# the thread's group is its row (B: its column n), it holds 2 consecutive k
ROWS_8x8 = Layout(((4, 8), 2), ((16, 1), 8))
# (T32,V4) -> (8,16): 8-bit operands of m8n8k16, 4 consecutive k per thread
ROWS_8x16 = Layout(((4, 8), 4), ((32, 1), 8))

MMAOP_16x8x8_F32F16F16F32_TN = mma_sync_op(
    (16, 8, 8), (Float32, Float16, Float16, Float32), ROWS_16x8, ROWS_8x8, ROWS_16x8,
    arch=75, min_sm=75)
MMAOP_16x8x8_F16F16F16F16_TN = mma_sync_op(
    (16, 8, 8), (Float16, Float16, Float16, Float16), ROWS_16x8, ROWS_8x8, ROWS_16x8,
    arch=75, min_sm=75)
MMAOP_8x8x16_S32S8S8S32_TN = mma_sync_op(
    (8, 8, 16), (Int32, Int8, Int8, Int32), ROWS_8x16, ROWS_8x16, ROWS_8x8,
    arch=75, min_sm=75)

SM75_OPS = (MMAOP_16x8x8_F32F16F16F32_TN, MMAOP_16x8x8_F16F16F16F16_TN,
            MMAOP_8x8x16_S32S8S8S32_TN)
__all__ = export(SM75_OPS, globals())

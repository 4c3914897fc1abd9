"""Volta's mma.sync.aligned.m8n8k4 (f16 inputs): 12 ops.

A warp runs four independent 8x8x4 MMAs; each is computed by a quad pair,
lanes 4q..4q+3 (the low group) and 16+4q..16+4q+3 (the high group). An op's
8 logical threads are one quad pair: thread t is lane (t % 4) + 16 * (t // 4),
so logical thread t's rows or columns are t (PTX ISA, "Matrix Fragments for
mma.m8n8k4 with .f16 floating point type": the high group takes the +4 rows
or columns). A TiledMMA of 2x2 atoms covers the warp.

The accumulators: f16 C and D share one arrangement, f32 C and D another.
With f32 D and f16 C (MoYe's F32F16F16F16, which CuTe lacks) C's registers
are arranged unlike D's, so the op's accumulator layout is D's (f32): the
instruction gets a zero C and C is added to D after it (`c_after`).
"""
from ...layout import Layout
from ...types import Float16, Float32
from .mma_sync import export, mma_sync_op

# logical thread (lane % 4, high group) -> lane
QUAD_PAIR = Layout((4, 2), (1, 16))

# (T8,V4) -> (8,4) index. The thread owns a row and reads its 4 values along K
# (A `.row`, B `.col`: K-major) ...
K_MAJOR_8x4 = Layout((8, 4), (1, 8))
# ... or owns a column of K, reading 4 rows (A `.col`, B `.row`): lane % 4 is
# the K index, the value is the M (or N) index, the high group takes +4.
MN_MAJOR_8x4 = Layout(((4, 2), 4), ((8, 4), 1))

# (T8,V8) -> (M8,N8) accumulators. f16: thread t holds row t.
ACC_8x8_F16 = Layout((8, 8), (1, 8))
# f32: row = (lane & 1) + (i & 2) [+4 high], col = (i & 4) + (lane & 2) + (i & 1)
ACC_8x8_F32 = Layout(((2, 2, 2), (2, 2, 2)), ((1, 16, 4), (8, 2, 32)))

_A = {"T": K_MAJOR_8x4, "N": MN_MAJOR_8x4}
_B = {"N": K_MAJOR_8x4, "T": MN_MAJOR_8x4}

_ops = []
for _types in ((Float16, Float16, Float16, Float16), (Float32, Float16, Float16, Float16),
               (Float32, Float16, Float16, Float32)):
    for _majors in ("TN", "NT", "NN", "TT"):
        _acc = ACC_8x8_F16 if _types[0] is Float16 else ACC_8x8_F32
        _ops.append(mma_sync_op((8, 8, 4), _types, _A[_majors[0]], _B[_majors[1]], _acc,
                                thr_id=QUAD_PAIR, majors=_majors, arch=70, min_sm=70,
                                cute=_types[0] is _types[3],
                                c_after=_types[0] is not _types[3]))

SM70_OPS = tuple(_ops)
__all__ = export(SM70_OPS, globals())
del _ops, _types, _majors, _acc

"""Warp-collective instructions: ldmatrix/stmatrix, mma.sync, shfl.sync.

A *register list* is a base in local memory whose element type is the
register type (UInt32 for PTX b32, Float32 for f32, Int32 for s32, Float64
for f64) and a tuple of static indices, one per register, in the order the
PTX instruction lists them. The atoms these instructions implement, with
their thread-value layouts, are in `atom/arch/ldmatrix.py` and
`atom/arch/sm80.py`.
"""
from .instr import Instr, type_of


class LdMatrix(Instr):
    """ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: the warp loads
    `count` 8x8 b16 matrices; src_idx is the start of this lane's row (16
    bytes) in shared memory; dst_regs are `count` b32 registers."""
    op = "ldmatrix"
    operands = ("dst", "dst_regs", "src", "src_idx")
    attributes = {"count": 1, "trans": False}


class StMatrix(Instr):
    """stmatrix: the reverse of ldmatrix, registers to shared memory (sm_90)."""
    op = "stmatrix"
    operands = ("dst", "dst_idx", "src", "src_regs")
    attributes = {"count": 1, "trans": False}


class Mma(Instr):
    """One mma.sync of the warp, `ptx` its full spelling
    (mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32): D = A * B + C on
    register lists."""
    op = "mma"
    operands = ("d", "d_regs", "a", "a_regs", "b", "b_regs", "c", "c_regs")
    attributes = {"ptx": None}


class Shfl(Instr):
    """__shfl_sync / _up / _down / _xor (mode idx, up, down, bfly) of x over
    the full warp."""
    op = "shfl"
    operands = ("x", "lane", "width")
    attributes = {"mode": "idx"}

    def result_type(self):
        return type_of(self.x)

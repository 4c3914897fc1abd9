"""moye.atom.arch: the MMA instructions, by architecture, each with its
thread-value layouts (facts from the PTX ISA) and its PTX spelling.

- sm70: mma.sync m8n8k4 with f16 inputs (quad pairs), 12 ops
- sm75: m16n8k8 f16 and m8n8k16 s8, 3 ops
- sm80: f64, tf32, bf16, f16 m16n8k16, 8-bit, 4-bit and single-bit ops, 60 ops
- sm90: warpgroup wgmma.mma_async, through `wgmma_op` (and a few constants)

`mma_ops_list` maps each mma.sync op's name to its PTX instruction. It holds
MoYe.jl's 51 ops and the 24 4-bit integer ops that MoYe.jl leaves out
(Julia has no 4-bit integers) and CuTe has.
    >>> mma_ops_list["MMAOP_16x8x8_F32TF32TF32F32_TN"]
    'mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32'
    >>> len(mma_ops_list)
    75
"""
from . import sm70, sm75, sm80, sm90, tma
from .sm70 import *  # noqa: F401,F403
from .sm75 import *  # noqa: F401,F403
from .sm80 import *  # noqa: F401,F403
from .sm90 import *  # noqa: F401,F403
from .tma import *  # noqa: F401,F403

mma_ops_list = {op.name: op.ptx for op in sm70.SM70_OPS + sm75.SM75_OPS + sm80.SM80_OPS}

__all__ = ["mma_ops_list"] + sm70.__all__ + sm75.__all__ + sm80.__all__ + sm90.__all__ + tma.__all__

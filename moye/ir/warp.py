"""Warp-collective instructions: ldmatrix/stmatrix, mma.sync, shfl.sync.

A *register list* is a base in local memory whose element type is the
register type (UInt32 for PTX b32, Float32 for f32, Int32 for s32, Float64
for f64) and a tuple of static indices, one per register, in the order the
PTX instruction lists them. The atoms these instructions implement, with
their thread-value layouts, are in `atom/arch/ldmatrix.py`,
`atom/arch/stmatrix.py` and `atom/arch/sm80.py`. Each class's C++ and CPU
rules follow it (`lowering.py` states their contract); the CPU semantics
of the collectives, from the PTX ISA, are `backend/cpu/collectives.py`.
"""
from .instr import Instr, type_of
from .lowering import lowering


def _matrix_ptx(op, s):
    return f"{op}.sync.aligned.m8n8.x{s.count}{'.trans' if s.trans else ''}.shared.b16"


class LdMatrix(Instr):
    """ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: the warp loads
    `count` 8x8 b16 matrices; src_idx is the start of this lane's row (16
    bytes) in shared memory; dst_regs are `count` b32 registers."""
    op = "ldmatrix"
    operands = ("dst", "dst_regs", "src", "src_idx")
    attributes = {"count": 1, "trans": False}


@lowering("cuda", LdMatrix)
def _emit_ldmatrix(w, s, ind, decl):
    regs = w.regs(s.dst, s.dst_regs)
    text = f"{_matrix_ptx('ldmatrix', s)} {w.brace(0, len(regs))}, [%{len(regs)}]"
    w.asm(ind, text, [("r", r) for r in regs], [("r", w.smem_addr(s.src, s.src_idx))])


@lowering("cpu", LdMatrix)
def _run_ldmatrix(b, s, mask):
    b.collectives.ldmatrix(s, mask)


class StMatrix(Instr):
    """stmatrix: the reverse of ldmatrix, registers to shared memory (sm_90)."""
    op = "stmatrix"
    operands = ("dst", "dst_idx", "src", "src_regs")
    attributes = {"count": 1, "trans": False}


@lowering("cuda", StMatrix)
def _emit_stmatrix(w, s, ind, decl):
    regs = w.regs(s.src, s.src_regs)
    text = f"{_matrix_ptx('stmatrix', s)} [%0], {w.brace(1, len(regs))}"
    w.emit(ind, f'asm volatile("{text};\\n" :: "r"({w.smem_addr(s.dst, s.dst_idx)}), '
                + ", ".join(f'"r"({r})' for r in regs) + ' : "memory");')


@lowering("cpu", StMatrix)
def _run_stmatrix(b, s, mask):
    b.collectives.stmatrix(s, mask)


class Mma(Instr):
    """One mma.sync of the warp, `ptx` its full spelling
    (mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32): D = A * B + C on
    register lists."""
    op = "mma"
    operands = ("d", "d_regs", "a", "a_regs", "b", "b_regs", "c", "c_regs")
    attributes = {"ptx": None}


@lowering("cuda", Mma)
def _emit_mma(w, s, ind, decl):
    groups = [(w.reg_constraint(x), w.regs(x, regs))
              for x, regs in ((s.d, s.d_regs), (s.a, s.a_regs), (s.b, s.b_regs),
                              (s.c, s.c_regs))]
    k, parts = 0, []
    for _, regs in groups:
        parts.append(w.brace(k, len(regs)))
        k += len(regs)
    outputs = [(groups[0][0], r) for r in groups[0][1]]
    inputs = [(t, r) for t, regs in groups[1:] for r in regs]
    w.asm(ind, f"{s.ptx} " + ", ".join(parts), outputs, inputs)


@lowering("cpu", Mma)
def _run_mma(b, s, mask):
    b.collectives.mma(s, mask)


class Shfl(Instr):
    """__shfl_sync / _up / _down / _xor (mode idx, up, down, bfly) of x over
    the full warp."""
    op = "shfl"
    operands = ("x", "lane", "width")
    attributes = {"mode": "idx"}

    def result_type(self):
        return type_of(self.x)


_SHFL = {"idx": "__shfl_sync", "up": "__shfl_up_sync", "down": "__shfl_down_sync",
         "bfly": "__shfl_xor_sync"}


@lowering("cuda", Shfl)
def _emit_shfl(w, s, ind, decl):
    w.emit(ind, f"{decl}{_SHFL[s.mode]}(0xffffffffu, {w.operand(s.x)}, {w.operand(s.lane)}, "
                f"{w.operand(s.width)});")


@lowering("cpu", Shfl)
def _run_shfl(b, s, mask):
    b.collectives.shfl(s, mask)

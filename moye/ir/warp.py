"""Warp-collective instructions: ldmatrix/stmatrix, mma.sync, shfl.sync, vote.sync
(ballot, any, all), match.any.sync and __syncwarp.

A *register list* is a base in local memory whose element type is the
register type (UInt32 for PTX b32, Float32 for f32, Int32 for s32, Float64
for f64) and a tuple of static indices, one per register, in the order the
PTX instruction lists them. The atoms these instructions implement, with
their thread-value layouts, are in `atom/arch/ldmatrix.py`,
`atom/arch/stmatrix.py` and `atom/arch/sm80.py`. Each class's C++ and CPU
rules follow it (`lowering.py` states their contract); the CPU semantics
of the collectives, from the PTX ISA, are `backend/cpu/collectives.py`.
"""
import numpy as np

from .. import types as T
from ..errors import KernelRuntimeError
from .instr import Instr, type_of
from .lowering import lowering
from .values import where


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


class Ballot(Instr):
    """vote.sync.ballot.b32 over the full warp (CUDA's __ballot_sync(0xffffffff,
    pred)): a UInt32 with bit i set where lane i's pred (Bool) is true. Lanes
    a partial last warp lacks count as exited: their bits are 0."""
    op = "ballot"
    operands = ("pred",)

    def result_type(self):
        return T.UInt32

    def check(self):
        return _pred_check(self)


@lowering("cuda", Ballot)
def _emit_ballot(w, s, ind, decl):
    w.emit(ind, f"{decl}__ballot_sync(0xffffffffu, {w.operand(s.pred)});")


def _warps(b, s, mask, name):
    """(warp of each lane, lane in its warp, threads per warp) of the block
    batch: warps are 32 consecutive threads of a block (the last may be
    partial), less the threads that ran the kernel's `return` (exited: they
    take no part, as on the GPU); a warp of which only some of the others
    execute `name` is refused (undefined on the GPU, as the full mask
    names them all)."""
    per_block = -(-b.threads // 32)
    warp = b.block_of_lane * per_block + b.thread_of_lane // 32
    lane = (b.thread_of_lane % 32).astype(np.uint32)
    threads = np.bincount(warp, weights=~b.exited, minlength=len(b.block_ids) * per_block
                          ).astype(np.int64)
    active = np.bincount(warp, weights=mask, minlength=len(threads)).astype(np.int64)
    divided = np.nonzero((active > 0) & (active < threads))[0]
    if divided.size:
        w = divided[0]
        first = int(np.nonzero((warp == w) & ~mask)[0][0])
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  {name} needs every thread of its warp, but in warp "
            f"{w % per_block} of block {tuple(int(i) for i in b.block_ids[w // per_block])} "
            f"{threads[w] - active[w]} of its {threads[w]} threads do not execute it (lane "
            f"{int(lane[first])} first: a branch or loop divides the warp)")
    return warp, lane, threads


def _or_per_warp(warp, bits, n):
    votes = np.zeros(n, np.uint32)
    np.bitwise_or.at(votes, warp, bits.astype(np.uint32))
    return votes


@lowering("cpu", Ballot)
def _run_ballot(b, s, mask):
    """Each warp ORs the bits of its lanes."""
    warp, lane, threads = _warps(b, s, mask, "ballot")
    bits = np.where(mask & (b.vec(s.pred) != 0), np.uint32(1) << lane, np.uint32(0))
    b.set_result(s, _or_per_warp(warp, bits, len(threads))[warp], mask)


def _pred_check(s):
    t = type_of(s.pred)
    if t is None and not isinstance(s.pred, int) or t is not None and t is not T.Bool:
        return f"the predicate {s.pred!r} is {t or type(s.pred).__name__}, not Bool"
    return None


class SyncWarp(Instr):
    """__syncwarp() over the full warp (PTX bar.warp.sync 0xffffffff): the
    warp's threads wait for each other, and what each did before comes
    before what the others do after (a warp's threads need not run in
    lock-step: shared memory written by one lane and read by another needs
    it, or a wider barrier)."""
    op = "sync_warp"


@lowering("cuda", SyncWarp)
def _emit_sync_warp(w, s, ind, decl):
    w.emit(ind, "__syncwarp();")


@lowering("cpu", SyncWarp)
def _run_sync_warp(b, s, mask):
    """The lanes run in lock-step here; each whole warp orders its accesses
    for the race check, as a barrier of its own."""
    warp, _, _ = _warps(b, s, mask, "sync_warp")
    if b.race is not None:
        for w in np.unique(warp[mask]):
            lanes = np.nonzero(mask & (warp == w))[0]
            key = ("sync_warp", int(w))
            b.race.release(key, lanes)
            b.race.complete(key)
            b.race.acquire(key, lanes)


class Vote(Instr):
    """vote.sync.{mode}.pred over the full warp (CUDA's __any_sync / __all_sync
    (0xffffffff, pred)): whether pred (Bool) is true in any (mode "any") or
    all ("all") of the warp's lanes. Lanes a partial last warp lacks count
    as exited: they do not take part."""
    op = "vote"
    operands = ("pred",)
    attributes = {"mode": "any"}

    def result_type(self):
        return T.Bool

    def check(self):
        if self.mode not in ("any", "all"):
            return f"vote's mode is any or all, not {self.mode!r}"
        return _pred_check(self)


@lowering("cuda", Vote)
def _emit_vote(w, s, ind, decl):
    w.emit(ind, f"{decl}__{s.mode}_sync(0xffffffffu, {w.operand(s.pred)}) != 0;")


@lowering("cpu", Vote)
def _run_vote(b, s, mask):
    warp, lane, threads = _warps(b, s, mask, f"vote_{s.mode}")
    pred = b.vec(s.pred) != 0
    hits = np.bincount(warp, weights=mask & pred, minlength=len(threads))
    got = hits > 0 if s.mode == "any" else hits == threads
    b.set_result(s, got[warp], mask)


class MatchAny(Instr):
    """match.any.sync.b32/b64 over the full warp (CUDA's __match_any_sync
    (0xffffffff, x)), sm_70: a UInt32 with bit i set where lane i's x equals
    this lane's, bit for bit."""
    op = "match_any"
    operands = ("x",)
    TYPES = (T.Int32, T.UInt32, T.Int64, T.UInt64)

    def result_type(self):
        return T.UInt32

    def check(self):
        t = type_of(self.x)
        if t is not None and t not in self.TYPES:
            return f"match_any takes {', '.join(map(str, self.TYPES))}, not {t}"
        return None


@lowering("cuda", MatchAny)
def _emit_match_any(w, s, ind, decl):
    w.emit(ind, f"{decl}__match_any_sync(0xffffffffu, {w.operand(s.x)});")


@lowering("cpu", MatchAny)
def _run_match_any(b, s, mask):
    """Lanes of one warp with one value form a group; each gets its group's bits."""
    warp, lane, threads = _warps(b, s, mask, "match_any")
    x = b.vec(s.x).astype(np.uint64)
    _, group = np.unique(np.stack([warp.astype(np.uint64), x], axis=1), axis=0,
                         return_inverse=True)
    group = group.ravel()
    bits = np.where(mask, np.uint32(1) << lane, np.uint32(0))
    b.set_result(s, _or_per_warp(group, bits, group.max() + 1)[group], mask)

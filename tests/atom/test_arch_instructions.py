"""From an atom to its instruction: every op of every module of
moye/atom/arch names the IR class it becomes, and that class has a rule in
both backends (so its C++ and its CPU semantics are one lookup away)."""
from pathlib import Path

import pytest

import moye
from moye import ir
from moye.atom.arch import cp_async, ldmatrix, sm70, sm75, sm80, sm90, stmatrix, tma
from moye.atom.copy import CopyOp
from moye.atom.mma import MMAOp

OPS = {
    "cp_async": [cp_async.CPOP_ASYNC_CACHEALWAYS(t) for t in (moye.UInt32, moye.UInt64,
                                                              moye.UInt128)]
    + [cp_async.CPOP_ASYNC_CACHEGLOBAL(moye.UInt128)],
    "ldmatrix": list(ldmatrix.LDSM_OPS),
    "stmatrix": list(stmatrix.STSM_OPS),
    "sm70": list(sm70.SM70_OPS),
    "sm75": list(sm75.SM75_OPS),
    "sm80": list(sm80.SM80_OPS),
    "sm90": list(sm90.SM90_OPS) + [sm90.wgmma_op(64, moye.Float8E4M3, moye.Float8E5M2,
                                                 moye.Float32)],
    "tma": [tma.TMA_LOAD, tma.TMA_STORE, tma.TMA_REDUCE_ADD],
}
EXPECTED = {"cp_async": ir.CpAsync, "ldmatrix": ir.LdMatrix, "stmatrix": ir.StMatrix,
            "sm70": ir.Mma, "sm75": ir.Mma, "sm80": ir.Mma, "sm90": ir.Wgmma,
            "tma": (ir.TmaLoad, ir.TmaStore, ir.TmaReduceAdd)}


def test_every_arch_module_is_covered():
    modules = {p.stem for p in Path(tma.__file__).parent.glob("*.py")}
    assert modules - {"__init__", "copy_ops", "mma_sync"} == set(OPS)


@pytest.mark.parametrize("module", sorted(OPS))
def test_every_op_names_an_instruction_with_both_rules(module):
    ops = OPS[module]
    namespace = vars(globals()[module])
    exported = [namespace[n] for n in namespace.get("__all__", ())]
    ops += [op for op in exported if isinstance(op, (CopyOp, MMAOp, tma.TMAOp))]
    assert ops
    for op in ops:
        cls = op.instruction
        assert cls in ir.INSTRUCTIONS.values(), (op, cls)
        assert cls in (EXPECTED[module] if isinstance(EXPECTED[module], tuple)
                       else (EXPECTED[module],)), (op, cls)
        assert callable(ir.lowering_of("cuda", cls)) and callable(ir.lowering_of("cpu", cls))


def test_from_an_atom_to_its_layouts_and_rules():
    op = ldmatrix.LDSM_U32x4_N
    assert op.instruction is ir.LdMatrix and op.instruction.arch is None
    assert str(op.dst_bits) == str(ldmatrix.fragments(4))
    assert ir.lowering_of("cuda", op.instruction).__module__ == "moye.ir.warp"
    assert sm80.SM80_OPS[0].instruction.op == "mma"
    assert tma.TMA_LOAD.instruction.arch == "sm_90"


def test_a_class_without_a_rule_is_named():
    class Unlowered(ir.Instr):
        """Only for this test: not registered (no op name)."""
    with pytest.raises(moye.KernelError, match="cuda backend has no rule.*Unlowered"):
        ir.lowering_of("cuda", Unlowered)

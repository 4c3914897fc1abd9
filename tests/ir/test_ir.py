"""The typed IR: its instruction classes, the verifier, and that each backend
has a rule for every instruction."""
import numpy as np
import pytest

import moye
from moye import ir
from moye import types as T
from moye.backend.cpu.interpreter import IMPLEMENTATIONS
from moye.backend.cuda.codegen import EMITTERS


def test_every_instruction_has_a_cuda_emitter_and_a_cpu_implementation():
    cuda, cpu = ir.LOWERINGS["cuda"], ir.LOWERINGS["cpu"]
    missing = [(cls.__name__, cls in cuda, cls in cpu) for cls in ir.INSTRUCTIONS.values()
               if cls not in cuda or cls not in cpu]
    assert missing == []
    assert set(cuda) == set(cpu) == set(ir.INSTRUCTIONS.values())
    assert EMITTERS is cuda and IMPLEMENTATIONS is cpu      # the backends' names for them


def test_a_feature_keeps_its_rules_beside_its_classes():
    for cls in ir.INSTRUCTIONS.values():
        feature = cls.__module__
        if feature.rsplit(".", 1)[-1] in ("async_copy", "atomics", "warp", "hopper", "cluster"):
            assert ir.lowering_of("cuda", cls).__module__ == feature, cls
            assert ir.lowering_of("cpu", cls).__module__ == feature, cls
    with pytest.raises(TypeError, match="two cuda lowerings for Ballot"):
        ir.lowering("cuda", ir.Ballot)(lambda w, s, ind, decl: None)


def test_instruction_classes_state_names_purity_and_architecture():
    assert len(ir.INSTRUCTIONS) >= 60
    for op, cls in ir.INSTRUCTIONS.items():
        assert cls.op == op and cls.__doc__, cls
        assert cls.arch in ir.ARCHS
    assert ir.Add.pure and not ir.Store.pure and ir.Wgmma.arch == "sm_90a"
    assert ir.TmaLoad.arch == "sm_90" and ir.CpAsync.arch is None


def test_named_operands_and_the_generic_form_agree():
    p = ir.Value(ir.PtrType(T.Float32, "global"), "p")
    i = ir.Value(T.Int32, "i")
    named = ir.Store(p, i, 2.0, width=1, elem=T.Float32)
    generic = ir.Instr("store", (p, i, 2.0), None, {"width": 1, "elem": T.Float32})
    assert type(generic) is ir.Store
    assert (named.ptr, named.index, named.value, named.elem) == (p, i, 2.0, T.Float32)
    assert generic.args == named.args and generic.attrs == named.attrs
    tma = ir.TmaLoad(1, 2, 3, 4, 5, 10, 20, rank=2, bytes=64)
    assert tma.coords == (10, 20) and tma.rank == 2
    assert ir.CpAsync(1, 2, 3, 4).pred is None and ir.CpAsync(1, 2, 3, 4, 5).pred == 5


def _kernel(body, params=()):
    return ir.Kernel("k", list(params), body)


def test_verifier_refuses_a_value_used_outside_the_loop_that_defines_it():
    n = ir.Value(T.Int32, "n")
    i = ir.Var(T.Int32, "i")
    inner = ir.Value(T.Int32)
    loop = ir.For(i, 0, n, 1, [ir.Add(n, 1, result=inner)])
    after = ir.Mul(inner, 2, result=ir.Value(T.Int32))
    ir.verify(_kernel([loop], [ir.Param("n", T.Int32, n)]))
    with pytest.raises(moye.KernelError, match="not defined"):
        ir.verify(_kernel([loop, after], [ir.Param("n", T.Int32, n)]))


def test_verifier_refuses_use_before_definition_and_wrong_types():
    a, b = ir.Value(T.Int32, "a"), ir.Value(T.Int32)
    with pytest.raises(moye.KernelError, match="not defined"):
        ir.verify(_kernel([ir.Add(b, 1, result=ir.Value(T.Int32)), ir.Neg(a, result=b)],
                          [ir.Param("a", T.Int32, a)]))
    f = ir.Value(T.Float32, "f")
    with pytest.raises(moye.KernelError, match="operand a is Float32, not Int32"):
        ir.verify(_kernel([ir.Add(f, 1, result=ir.Value(T.Int32))], [ir.Param("f", T.Float32, f)]))
    with pytest.raises(moye.KernelError, match="lt gives Bool"):
        ir.verify(_kernel([ir.Lt(a, 1, result=ir.Value(T.Int32))], [ir.Param("a", T.Int32, a)]))
    with pytest.raises(moye.KernelError, match="not a pointer"):
        ir.verify(_kernel([ir.Load(a, 0, width=1, elem=T.Int32, result=ir.Value(T.Int32))],
                          [ir.Param("a", T.Int32, a)]))


def test_verifier_sees_the_while_tests_definitions_in_its_body_only():
    a = ir.Value(T.Int32, "a")
    c = ir.Value(T.Bool)
    use = ir.Value(T.Bool)
    loop = ir.While([ir.Lt(a, 4, result=c)], c, [ir.Not(c, result=use)])
    ir.verify(_kernel([loop], [ir.Param("a", T.Int32, a)]))
    with pytest.raises(moye.KernelError, match="not defined"):
        ir.verify(_kernel([loop, ir.Not(c, result=ir.Value(T.Bool))], [ir.Param("a", T.Int32, a)]))


def test_dead_code_elimination_drops_chains_and_keeps_values_used_in_tuples():
    """A pure instruction goes when nothing reads its result, and then those
    only it read; one read inside a tuple operand keeps it."""
    a = ir.Value(T.Int32, "a")
    p = ir.Value(ir.PtrType(T.Int32, "global"), "p")
    first, second, kept, stored = (ir.Value(T.Int32) for _ in range(4))
    chain = [ir.Add(a, 1, result=first), ir.Mul(first, 2, result=second)]   # read by nothing
    held = ir.Neg(a, result=kept)
    store = ir.Store(p, 0, a, width=1, elem=T.Int32)
    store.args = (p, 0, (a, kept))          # `kept` read only inside a tuple operand
    body = [*chain, held, ir.Add(a, 3, result=stored), ir.Store(p, 1, stored, width=1,
                                                                 elem=T.Int32), store]
    kernel = ir.eliminate_dead_code(_kernel(body, [ir.Param("a", T.Int32, a),
                                                   ir.Param("p", T.Int32, p)]))
    assert [type(s).__name__ for s in kernel.body] == ["Neg", "Add", "Store", "Store"]


def test_every_traced_example_kernel_verifies():
    @moye.kernel
    def scale(y, x, n):
        i = moye.block_idx.x * moye.block_dim.x + moye.thread_idx.x
        acc = 0.0
        for k in moye.range(n):
            acc += x[i]
        if i < n:
            y[i] = acc
    x = np.random.default_rng(0).random(8).astype(np.float32) + 1
    kernel = scale.trace(x.copy(), x, 8, block=8)[0]
    assert ir.verify(kernel) is kernel

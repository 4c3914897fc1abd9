"""The kernel IR: typed, structured, printable, verified.

A kernel (`Kernel`) is a list of parameters and a body. A body is a list of
statements: instructions, with an optional result `Value`, and structured
control flow (`For`, `If`, `While`, and `Jump`: a loop's break or
continue, or the kernel's return). Values are SSA-like temporaries
defined once; mutable state lives in `Var`s (loop-carried and merged
values) and `Array`s (register and shared arrays). Operands are Values,
Vars (read where they appear), Arrays or Python numbers (constants).

The instruction set is code: one class per instruction, grouped by
hardware feature (`arith`, `bits`, `fastmath`, `memory`, `atomics`, `async_copy`, `warp`,
`hopper`, `cluster`), each with named operands, its result type, whether it is pure
and the architecture it needs (instr.py says how). The tracer builds the
IR, `verify` checks it, `printer` prints it, and each backend has one
rule (a C++ emitter, a CPU implementation) per instruction class, in the
registry of `lowering.py`: a feature's rules sit beside its classes, the
core's in the backends. `targets`
holds what each target architecture allows (shared memory, launch limits).

This package sits below the tracer: it imports only `moye.types`,
`moye.errors`, `moye.layout.scalar` and itself.

    >>> from moye import ir
    >>> ir.INSTRUCTIONS["load"] is ir.Load, ir.Wgmma.arch, ir.Add.pure
    (True, 'sm_90a', True)
"""
from . import arith, async_copy, atomics, bits, cluster, fastmath, hopper, memory, warp
from .lowering import LOWERINGS, lowering, lowering_of
from .instr import (ARCHS, INSTRUCTIONS, For, If, Instr, Jump, Kernel, While, children,
                    instruction_class, instructions, operands_of, same_type, shared_bytes,
                    symbol)
from .passes import eliminate_dead_code
from .printer import format_instr, format_kernel
from .values import (TENSOR_MAP, Array, Loc, OpaqueType, Param, PtrType, Value, Var, type_of,
                     where)
from .verify import ARCH_NAME, check_architecture, verify
from . import targets

# every instruction class by its own name: ir.Load, ir.CpAsync, ir.Wgmma, ...
globals().update({cls.__name__: cls for cls in INSTRUCTIONS.values()})
Binary, Compare, Unary = arith.Binary, arith.Compare, arith.Unary


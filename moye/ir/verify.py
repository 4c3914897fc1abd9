"""The verifier: what must hold of a kernel's IR before a backend reads it.

`verify(kernel)` runs after every trace. It checks that each instruction is
one of the instruction set, that its operands have the types it takes and
its result the type its rule gives, and that every Value is defined before
it is used and where it is used: a value defined in a loop's or a branch's
body is not visible after it. A failure is a bug of moye's device library
(or of a hand-built IR), reported with the kernel's source line.

`check_architecture(kernel, arch)` refuses, on both backends, a kernel
whose instructions its target lacks: each class states the architecture it
needs.
"""
import re

from ..errors import KernelError
from .instr import INSTRUCTIONS, For, If, Instr, Jump, While, instructions, same_type
from .values import Value, where

ARCH_NAME = re.compile(r"^sm_(\d+)([af]?)$")     # an NVRTC target: sm_80, sm_90a, sm_100f


def verify(kernel):
    """Raise KernelError if the kernel's IR is not well formed (see the module
    docstring); return the kernel."""
    defined = set()
    for p in kernel.params:
        if p.value is not None:
            defined.add(p.value.id)
    _verify_body(kernel, kernel.body, defined, False)
    return kernel


def _fail(kernel, s, message):
    raise KernelError(f"kernel '{kernel.name}': invalid IR at {where(s.loc)}: {s!r}: {message}")


def _uses(kernel, s, operands, scope):
    for x in operands:
        if isinstance(x, tuple):
            _uses(kernel, s, x, scope)
        elif isinstance(x, Value) and x.id not in scope:
            _fail(kernel, s, f"{x!r} is used where it is not defined (before its definition, "
                             "or outside the loop or branch that defines it)")


def _verify_body(kernel, body, scope, in_loop):
    """Check a body whose enclosing definitions are `scope` (which the body
    extends with its own; a nested body gets a copy), `in_loop` whether a
    For or While encloses it (a Jump needs one)."""
    for s in body:
        if isinstance(s, Instr):
            if INSTRUCTIONS.get(s.op) is not type(s):
                _fail(kernel, s, f"{type(s).__name__} is not an instruction of the set")
            _uses(kernel, s, s.args, scope)
            if s.result is None and _has_result(s):
                _fail(kernel, s, f"{s.op} defines a result, but it has none")
            problem = s.check()
            if problem:
                _fail(kernel, s, problem)
            if s.result is not None:
                want = s.result_type()
                if want is not None and not same_type(want, s.result.type):
                    _fail(kernel, s, f"the result is {s.result.type}, but {s.op} gives {want}")
                if s.result.id in scope:
                    _fail(kernel, s, f"{s.result!r} is defined twice")
                scope.add(s.result.id)
        elif isinstance(s, For):
            _uses(kernel, s, (s.start, s.stop, s.step), scope)
            _verify_body(kernel, s.body, set(scope), True)
        elif isinstance(s, If):
            _uses(kernel, s, (s.cond,), scope)
            _verify_body(kernel, s.then, set(scope), in_loop)
            _verify_body(kernel, s.orelse, set(scope), in_loop)
        elif isinstance(s, While):
            inner = set(scope)          # the test and the body see the test's definitions
            _verify_body(kernel, s.cond_body, inner, False)
            _uses(kernel, s, (s.cond,), inner)
            _verify_body(kernel, s.body, inner, True)
        elif isinstance(s, Jump):
            if s.kind not in ("break", "continue", "return"):
                _fail(kernel, s, "a Jump is a break, a continue or a return")
            if s.kind != "return" and not in_loop:
                _fail(kernel, s, f"a {s.kind} outside any loop")
        else:
            raise KernelError(f"kernel '{kernel.name}': {s!r} is not an IR statement")


def _has_result(s):
    return type(s).result_type is not Instr.result_type


def check_architecture(kernel, arch):
    """Refuse a kernel that uses instructions its target lacks (TMA,
    mbarrier transactions, the async-proxy fences and the cluster
    instructions need sm_90; wgmma and setmaxnreg sm_90a)."""
    name = ARCH_NAME.match(arch)
    number = int(name.group(1)) if name else None
    if number is None or number >= 90:
        if number == 90 and name.group(2) != "a":
            for s in instructions(kernel.body):
                if s.arch == "sm_90a":
                    raise KernelError(f"kernel '{kernel.name}' uses {s.op}{_at(s)}, which "
                                      f"needs the arch-specific target sm_90a, not {arch}")
        return
    for s in instructions(kernel.body):
        if s.arch is not None:
            raise KernelError(f"kernel '{kernel.name}' uses {s.op}{_at(s)}, a Hopper "
                              f"instruction, but compiles for {arch}; it needs sm_90 or later "
                              f"(arch='sm_90a')")


def _at(s):
    return f" ({where(s.loc)})" if s.loc else ""

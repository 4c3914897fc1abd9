"""What IR operands are: values, variables, arrays, parameters, and their types.

A `Value` is a temporary defined once (by an instruction, or as a
parameter); a `Var` is a mutable local (loop-carried and merged values); an
`Array` is a fixed-size array in registers or shared memory. Operands are
these or Python numbers (constants).
"""
from dataclasses import dataclass

from ..types import ElementType


@dataclass(frozen=True)
class PtrType:
    """A pointer to `elem` elements in an address space: global, shared or local."""
    elem: ElementType
    space: str

    def __repr__(self):
        return f"{self.elem}*{self.space}"


@dataclass(frozen=True)
class OpaqueType:
    """A struct of `nbytes` passed to the kernel by value (a TMA tensor map:
    "moye_tensor_map", 128 bytes, 64-byte aligned)."""
    name: str
    nbytes: int
    align: int

    def __repr__(self):
        return self.name


TENSOR_MAP = OpaqueType("moye_tensor_map", 128, 64)


class Value:
    """A temporary defined once by an instruction (or a parameter / special register)."""
    __slots__ = ("id", "type", "hint")
    _next = 0

    def __init__(self, type, hint="v"):
        Value._next += 1
        self.id, self.type, self.hint = Value._next, type, hint

    def __repr__(self):
        return f"%{self.hint}{self.id}"


class Var:
    """A mutable scalar (or pointer) local variable."""
    __slots__ = ("id", "type", "hint")
    _next = 0

    def __init__(self, type, hint="x"):
        Var._next += 1
        self.id, self.type, self.hint = Var._next, type, hint

    def __repr__(self):
        return f"${self.hint}{self.id}"


class Array:
    """A fixed-size array in registers ("local") or shared memory ("shared")."""
    __slots__ = ("id", "elem", "size", "space", "align")
    _next = 0

    def __init__(self, elem, size, space, align=16):
        Array._next += 1
        self.id, self.elem, self.size, self.space, self.align = Array._next, elem, size, space, align

    def __repr__(self):
        return f"@{'rf' if self.space == 'local' else 'smem'}{self.id}[{self.size}]"


@dataclass
class Param:
    """A kernel parameter: a pointer, a scalar, or an opaque byte blob (TMA descriptors)."""
    name: str
    type: object
    value: Value = None
    nbytes: int = 0


@dataclass
class Loc:
    file: str
    line: int
    text: str = ""


def where(loc):
    """`file:line: text` of a statement's source location, as errors name a
    kernel's line ("the kernel" where there is none)."""
    if loc is None:
        return "the kernel"
    return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}: {loc.text}"


def type_of(x):
    """The type of an operand: a Value's or Var's type, a pointer to an
    Array's elements, or None for a Python constant."""
    if isinstance(x, (Value, Var)):
        return x.type
    if isinstance(x, Array):
        return PtrType(x.elem, x.space)
    return None

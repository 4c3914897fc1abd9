"""Variables, memory accesses and pointers, barriers and debugging output.

A memory operand is a base, a pointer Value or an Array, and an element
index in the base's own element type. `width` > 1 accesses that many
consecutive elements as one unsigned vector (`uint_of_bits(elem.bits *
width)`); a register array takes static indices only.
"""
from .. import types as T
from .instr import Instr, is_integer, is_pointer, type_of
from .values import Array, PtrType, Var


class Read(Instr):
    """The current value of a variable."""
    op = "read"
    operands = ("var",)

    def result_type(self):
        return self.var.type

    def check(self):
        return None if isinstance(self.var, Var) else f"reads {self.var!r}, not a variable"


class Write(Instr):
    """`var = x`."""
    op = "write"
    operands = ("var", "x")

    def check(self):
        return None if isinstance(self.var, Var) else f"writes {self.var!r}, not a variable"


class Decl(Instr):
    """Declares `var`, initialized to `init` (None: uninitialized)."""
    op = "decl"
    operands = ("var", "init")

    def check(self):
        return None if isinstance(self.var, Var) else f"declares {self.var!r}, not a variable"


def _memory_check(s):
    if not is_pointer(s.ptr):
        return f"the base {s.ptr!r} is not a pointer or an array"
    if not is_integer(s.index):
        return f"the index {s.index!r} is not an integer"
    return None


class Load(Instr):
    """`ptr[index]`: `width` elements of type `elem`."""
    op = "load"
    operands = ("ptr", "index")
    attributes = {"width": 1, "elem": None}

    def result_type(self):
        return self.elem if self.width == 1 else T.uint_of_bits(self.elem.bits * self.width)

    check = _memory_check


class Store(Instr):
    """`ptr[index] = value`: `width` elements of type `elem`."""
    op = "store"
    operands = ("ptr", "index", "value")
    writes = "ptr"
    attributes = {"width": 1, "elem": None}

    check = _memory_check


class Addr(Instr):
    """A pointer to an array's first element."""
    op = "addr"
    operands = ("array",)
    pure = True

    def result_type(self):
        return PtrType(self.array.elem, self.array.space)

    def check(self):
        return None if isinstance(self.array, Array) else f"{self.array!r} is not an array"


class Offset(Instr):
    """`ptr + k`, in elements."""
    op = "offset"
    operands = ("ptr", "k")
    pure = True

    def result_type(self):
        return type_of(self.ptr)

    def check(self):
        if not isinstance(type_of(self.ptr), PtrType):
            return f"{self.ptr!r} is not a pointer"
        if not is_integer(self.k):
            return f"the offset {self.k!r} is not an integer"
        return None


class Barrier(Instr):
    """__syncthreads: every thread of the block waits for the others."""
    op = "barrier"


class Print(Instr):
    """printf(fmt, xs...) by each executing thread."""
    op = "print"
    operands = ("*xs",)
    attributes = {"fmt": ""}


class Assert(Instr):
    """Python's `assert cond, message` of a run-time Bool: a thread whose
    cond is false stops the kernel, naming the line, the message and
    itself (CUDA: printf, then __trap(); the launch fails)."""
    op = "assert"
    operands = ("cond",)
    attributes = {"message": ""}


class Asm(Instr):
    """A line of inline assembly, `text`, as it is."""
    op = "asm"
    attributes = {"text": ""}


class Comment(Instr):
    """A comment in the generated code."""
    op = "comment"
    attributes = {"text": ""}



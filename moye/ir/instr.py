"""The instruction base class and the structured statements.

Each instruction is a subclass of `Instr` that names its operands and
attributes, says whether it is pure (no side effect: dead-code elimination
drops it when its result is unused, the tracer reuses an equal one), which
architecture it needs, and the type of its result. The classes register
themselves by their IR name (`op`), which is how `Builder.instr("load", ...)`
finds `Load`. An instance keeps its operands in `args` (a tuple, in the
order of `operands`) and its attributes in `attrs`; both are also read by
name:

    >>> from moye.ir import Load, Value, PtrType
    >>> from moye.types import Float32, Int32
    >>> s = Load(Value(PtrType(Float32, "global"), "p"), 3, width=1, elem=Float32)
    >>> s.op, s.index, s.width, s.result_type()
    ('load', 3, 1, Float32)
"""
from dataclasses import dataclass, field

from ..errors import KernelError
from .values import Array, Loc, PtrType, Value, Var, type_of  # noqa: F401

INSTRUCTIONS = {}       # op name -> its class, every instruction of the instruction set
ARCHS = (None, "sm_90", "sm_90a")


class Instr:
    """`result = op(args...)`, attrs its static details; subclass per instruction.

    Class attributes of a subclass:
    - `op`: its name in the printed IR;
    - `operands`: the names of its operands in order; a last name "*rest"
      takes the remaining operands as a tuple, "name?" an optional last one;
    - `attributes`: the names of its static attributes, with their defaults;
    - `pure`: no side effect; `arch`: None (sm_80), "sm_90" or "sm_90a";
    - `writes`: the name of the operand through which it writes memory a
      kernel argument may own (a store's pointer), None if none.

    `Instr(op, args, result, attrs, loc)`, with the op's name, builds the
    instruction of that name (the generic form the tracer uses)."""
    op = None
    operands = ()
    attributes = {}
    pure = False
    arch = None
    writes = None
    __slots__ = ("args", "result", "attrs", "loc")

    def __new__(cls, *operands, **kwargs):
        if cls is Instr:
            if not operands or not isinstance(operands[0], str):
                raise TypeError("Instr(op, args, result, attrs, loc) takes the op's name first")
            cls = instruction_class(operands[0])
        return object.__new__(cls)

    def __init__(self, *operands, result=None, loc=None, **attrs):
        if operands and isinstance(operands[0], str):       # Instr(op, args, result, attrs, loc)
            op, args, result_, attrs_, loc_ = (operands + (None,) * 5)[:5]
            if op != self.op:
                raise TypeError(f"{type(self).__name__} is the instruction {self.op!r}, "
                                f"not {op!r}")
            operands, attrs = tuple(args), {**(attrs_ or {}), **attrs}
            result = result_ if result_ is not None else result
            loc = loc_ if loc_ is not None else loc
        self.args, self.result, self.attrs, self.loc = tuple(operands), result, attrs, loc

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.__dict__.get("op") is None:
            return
        if cls.op in INSTRUCTIONS:
            raise TypeError(f"two instruction classes are named {cls.op!r}: "
                            f"{INSTRUCTIONS[cls.op].__name__} and {cls.__name__}")
        if cls.arch not in ARCHS:
            raise TypeError(f"{cls.__name__}.arch must be one of {ARCHS}, not {cls.arch!r}")
        INSTRUCTIONS[cls.op] = cls
        for k, name in enumerate(cls.operands):
            if name.startswith("*"):
                setattr(cls, name[1:], property(lambda s, k=k: s.args[k:]))
            elif name.endswith("?"):
                setattr(cls, name[:-1],
                        property(lambda s, k=k: s.args[k] if len(s.args) > k else None))
            else:
                setattr(cls, name, property(lambda s, k=k: s.args[k]))
        for name, default in cls.attributes.items():
            setattr(cls, name, property(lambda s, n=name, d=default: s.attrs.get(n, d)))

    def result_type(self):
        """The type of the result this instruction defines, None for none."""
        return None

    def check(self):
        """A sentence saying what is wrong with the operands' types, or None."""
        return None

    def __repr__(self):
        attrs = "".join(f" {k}={v!r}" for k, v in self.attrs.items())
        lhs = f"{self.result!r}: {self.result.type} = " if self.result is not None else ""
        return f"{lhs}{self.op}({', '.join(format_operand(a) for a in self.args)}){attrs}"


def format_operand(x):
    """An operand as the printed IR shows it (a register list as a tuple)."""
    if isinstance(x, tuple):
        return "(" + ", ".join(format_operand(e) for e in x) + ")"
    return repr(x)


def instruction_class(op):
    """The class of the instruction named `op`."""
    try:
        return INSTRUCTIONS[op]
    except KeyError:
        raise KernelError(f"no IR instruction is named {op!r}") from None


# -- structured statements ------------------------------------------------------------
@dataclass
class For:
    var: Var
    start: object
    stop: object
    step: object
    body: list
    unroll: object = None
    loc: Loc = None


@dataclass
class If:
    cond: object
    then: list
    orelse: list
    loc: Loc = None


@dataclass
class While:
    cond_body: list
    cond: object
    body: list
    loc: Loc = None


@dataclass
class Jump:
    """`break` or `continue` (`kind`) of the innermost For or While around
    it: C++'s, where the loop's carried variables were written just before;
    or `return`: the threads that run it end (the kernel's early exit).
        >>> Jump("break")
        Jump(kind='break', loc=None)
    """
    kind: str
    loc: Loc = None


@dataclass
class Kernel:
    name: str
    params: list
    body: list
    arrays: list = field(default_factory=list)
    vars: list = field(default_factory=list)
    dynamic_smem: int = 0
    source_file: str = ""
    array_locs: dict = field(default_factory=dict)


def symbol(name):
    """The C symbol of the kernel `name`: prefixed, so that no kernel name
    (`exp`, `max`, `main`, `double`) meets a C++ keyword or a name CUDA's
    headers declare.
        >>> symbol("copy_kernel")
        'moye_copy_kernel'
    """
    return "moye_" + name


def shared_bytes(kernel):
    """Bytes of shared memory the kernel's arrays take, with their alignment."""
    total = 0
    for a in kernel.arrays:
        if a.space == "shared":
            total = -(-total // a.align) * a.align + a.size * a.elem.bits // 8
    return total


def operands_of(stmt):
    """The operands a statement reads where it stands."""
    if isinstance(stmt, Instr):
        return stmt.args
    if isinstance(stmt, For):
        return (stmt.start, stmt.stop, stmt.step)
    if isinstance(stmt, (If, While)):
        return (stmt.cond,)
    return ()


def children(stmt):
    """The bodies nested in a statement."""
    if isinstance(stmt, For):
        return (stmt.body,)
    if isinstance(stmt, If):
        return (stmt.then, stmt.orelse)
    if isinstance(stmt, While):
        return (stmt.cond_body, stmt.body)
    return ()


def instructions(body):
    """Every Instr of a body, nested ones included, in order."""
    for s in body:
        if isinstance(s, Instr):
            yield s
        for child in children(s):
            yield from instructions(child)


# -- operand type rules, for the instruction classes' checks -----------------------------
def same_type(a, b):
    """Whether types a and b are one type to the hardware (TFloat32 is Float32)."""
    if a is b or a == b:
        return True
    return getattr(a, "bits", None) == getattr(b, "bits", 0) and \
        getattr(a, "kind", None) == getattr(b, "kind", 0)


def is_pointer(x):
    return isinstance(x, Array) or isinstance(type_of(x), PtrType)


def is_integer(x):
    """An integer operand: a Python int or a Value/Var of an integer type."""
    if isinstance(x, (Value, Var)):
        return getattr(x.type, "kind", None) in ("int", "uint", "bool")
    return isinstance(x, int)

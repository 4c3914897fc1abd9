"""The lowering rules: for each backend, one rule per instruction class.

A rule turns one instruction into the backend's terms. The core
instructions (arithmetic, loads and stores, variables, control) have theirs
in the backends, registered when the backend's module loads (with the first
C++ generated, the first kernel compiled for the CPU); a hardware feature's
instructions have theirs beside their classes, in `ir/<feature>.py`, so
that an instruction, its C++ and its CPU semantics are read in one place.
A rule may use only the objects it is given (and NumPy), never import a
backend.

**CUDA** (`backend/cuda/codegen.py`): `emit(w, s, ind, decl)` writes the
C++ of statement `s`, each line at indent `ind`, through the writer `w`;
`decl` is the declaration of its result (`"const float v7 = "`, "" for
none). What a rule may use of `w`:

- `w.emit(ind, text)`: one line;
- `w.operand(x)`: a Value, Var, Array or constant as C++; `w.arg(x, t)`
  the same, a float literal of type `t`; `w.name(x)` the local's name;
- `w.ctype(t)`: the C++ type of an element or pointer type;
- `w.access(base, idx, attrs)`: the lvalue `base[idx]` (a vector of
  `attrs["width"]` elements as one unsigned word);
- `w.smem_addr(base, idx)`: the 32-bit shared-memory address of
  base[idx], for PTX; `w.regs(base, idxs)`: a register list's lvalues;
  `w.reg_constraint(base)`: the asm constraint of its registers ("r", "f",
  "d", "l");
- `w.asm(ind, text, outputs, inputs)`: `asm volatile` with numbered
  operands, each a (constraint, C++) pair; `w.brace(start, n)`:
  "{%start, ...}"; `w.memory_asm(ind, text)`: an operand-less PTX line
  that orders memory (a fence, a commit, a wait).

**CPU** (`backend/cpu/interpreter.py`): `run(b, s, mask)` executes
statement `s` in the lanes of the block batch `b` where the boolean vector
`mask` is true (one lane per thread; lane = block in the batch * threads +
thread). What a rule may use of `b`:

- `b.vec(x)`: an operand as a vector over the lanes; `b.get(x)` as it is
  stored (a pointer stays a pointer);
- `b.index(base, idx, s, mask, width, atomic=False)`: the bounds-checked
  (and, with the race check, recorded) element access of the active lanes,
  as `(kind, buffer, index, rows)`: `buffer[index]` for global memory,
  `buffer[rows, index]` for shared and register arrays; `atomic`: a
  read-modify-write that races only with plain accesses;
- `b.set_result(s, data, mask)`: `s.result` becomes `data` in the active
  lanes, converted to the result's type;
- `b.n`, `b.threads` (per block), `b.block` (its shape), `b.block_of_lane`,
  `b.thread_of_lane`, `b.block_ids`: where each lane is;
- the simulators of the larger features, which follow the PTX ISA:
  `b.copies` (cp.async), `b.warps` (ldmatrix, stmatrix, mma.sync, shfl),
  `b.warpgroups` (wgmma), `b.hopper` (mbarriers, TMA), `b.named` (named
  barriers), `b.cluster` (thread-block clusters);
- errors: `moye.errors.KernelRuntimeError`, located by `ir.where(s.loc)`.

    >>> import moye
    >>> from moye import ir
    >>> ir.lowering_of("cuda", ir.Shfl).__module__, ir.lowering_of("cpu", ir.Shfl).__module__
    ('moye.ir.warp', 'moye.ir.warp')
    >>> from moye.backend.cuda import codegen
    >>> from moye.backend.cpu import interpreter
    >>> ir.lowering_of("cuda", ir.Load).__module__, ir.lowering_of("cpu", ir.Load).__module__
    ('moye.backend.cuda.codegen', 'moye.backend.cpu.interpreter')
"""
from ..errors import KernelError

LOWERINGS = {"cuda": {}, "cpu": {}}     # backend -> {instruction class: its rule}


def lowering(backend, *classes):
    """Register the decorated function as `backend`'s rule for these
    instruction classes; a second rule for a class is refused.
        >>> from moye import ir
        >>> lowering("cpu", ir.Shfl)(lambda b, s, mask: None)
        Traceback (most recent call last):
        ...
        TypeError: two cpu lowerings for Shfl
    """
    try:
        table = LOWERINGS[backend]
    except KeyError:
        raise KernelError(f"no backend named {backend!r}: lowerings are for "
                          f"{', '.join(LOWERINGS)}") from None

    def register(fn):
        for cls in classes:
            if cls in table:
                raise TypeError(f"two {backend} lowerings for {cls.__name__}")
            table[cls] = fn
        return fn
    return register


def lowering_of(backend, cls):
    """`backend`'s rule for the instruction class `cls`."""
    try:
        return LOWERINGS[backend][cls]
    except KeyError:
        raise KernelError(f"the {backend} backend has no rule for the IR instruction "
                          f"{cls.__name__} ({cls.op!r})") from None

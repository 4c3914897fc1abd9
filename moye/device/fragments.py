"""Where an atom's values sit in a thread's partition: per repeat of the
atom, the offsets of its values (atom_instances), and for register
fragments the registers that hold them (register_lists), in the order the
instructions (mma.sync, ldmatrix, stmatrix, wgmma) take them.
"""
from .. import types as T
from ..array import MoYeArray, layout_offsets
from ..compiler.memory import PointerEngine
from ..compiler.tracer import KernelError, Sym, coerce, current, divisor_of
from ..compiler.unrolled import check_register_index
from ..ir import Array, PtrType, type_of
from ..layout import Layout, make_layout, size
from ..layout import inttuple as IT

REGISTER_TYPES = {"b32": T.UInt32, "u32": T.UInt32, "s32": T.Int32, "f32": T.Float32,
                  "f64": T.Float64}


def _values_rest(layout):
    """(mode 0, the other modes grouped as one) of a partition's layout."""
    if IT.rank(layout.shape) == 1:
        return Layout(layout.shape, layout.stride), Layout(1, 0)
    rest = [layout[i] for i in range(1, IT.rank(layout.shape))]
    return layout[0], (rest[0] if len(rest) == 1 else make_layout(*rest))


def atom_instances(array, n, what):
    """Per repeat of an atom of `n` values: the static offsets of its values
    relative to the first, and the first's offset (static or dynamic).
    Through a swizzled layout (outer o offset o inner) a run of n values
    stays a run when the inner layout keeps it contiguous and aligned to n
    and the swizzle leaves the low bits that address it alone."""
    layout = array.layout
    if hasattr(layout, "outer"):
        return _swizzled_instances(array, n, what)
    values, rest = _values_rest(layout)
    v = size(values)
    if not isinstance(v, int) or v % n:
        raise KernelError(f"{what}: mode 0 of the partition {array.layout} holds {v} values, "
                          f"not a multiple of the atom's {n}")
    if not isinstance(size(rest), int):
        raise KernelError(f"{what}: the partition {array.layout} repeats the atom a dynamic "
                          "number of times; tile the array to a static shape first")
    out = []
    at, rest_at = _offset_of(values), _offset_of(rest)
    for r in range(size(rest)):
        r_off = rest_at(r)
        for c in range(v // n):
            first = at(c * n)
            rel = []
            for i in range(n):
                d = at(c * n + i) - first if i else 0
                rel.append(d if isinstance(d, int) else None)
            out.append((rel, array.engine.offset + first + r_off))
    return out


def _offset_of(layout):
    """`layout` as a function of an index; a static one's offsets are listed
    once (layout_offsets remembers them), then indexed."""
    if type(layout) is Layout and layout.is_static():
        return layout_offsets(layout).tolist().__getitem__
    return layout


def _swizzled_instances(array, n, what):
    lay = array.layout
    inner = MoYeArray.view_of(PointerEngine(None, array.engine.dtype, array.engine.space, 0),
                              lay.inner)
    low = 1 << getattr(lay.outer, "base", 0)
    period = getattr(lay.outer, "period", None)
    out = []
    for rel, first in atom_instances(inner, n, what):
        # a static multiple of the swizzle's period passes through it: the
        # instances then share one swizzled (dynamic) offset plus constants
        past = first - first % period if period and isinstance(first, int) else 0
        pre = lay.offset + (first - past)
        if is_run(rel) and n <= low and divisor_of(pre) % n == 0:
            start = lay.outer(pre)
            if isinstance(start, Sym):
                start = Sym(start.value, start.type, min(_pow2(divisor_of(pre)), low))
            out.append((rel, array.engine.offset + start + past))
        else:
            out.append(([None] * len(rel), array.engine.offset + lay.outer(pre) + past))
    return out


def _pow2(n):
    return n & -n if n > 0 else 1 << 30


def is_run(rel):
    return all(d == i for i, d in enumerate(rel))


def register_lists(arr, count, rtype, what, name):
    """Per atom of a register fragment (V, M, K) or (V, M, N), m fastest:
    (base, register indices), `count` registers of type `rtype` each."""
    out = {}
    for j, (rel, first) in enumerate(atom_instances(_v_mn(arr), size(arr, 0), what)):
        base, words = register_list(arr.engine, rel, first, REGISTER_TYPES[rtype],
                                    f"{what} {name}")
        if len(words) != count:
            raise KernelError(f"{what}: {name} gives {len(words)} registers per atom (mode 0 of "
                              f"{arr.layout}); the instruction takes {count}")
        out[j] = (base, words)
    return out


def register_list(engine, rel, first, reg_type, what):
    """The (base, word indices) of values at `first + rel[i]` of a register
    fragment packed into registers of `reg_type`."""
    if engine.space != "local":
        raise KernelError(f"{what}: expected a register fragment, got {engine.space} memory "
                          "(make one with make_fragment_like / make_fragment_A/B/C)")
    q = reg_type.bits // engine.dtype.bits if reg_type.bits >= engine.dtype.bits else 0
    if q == 0 or reg_type.bits % engine.dtype.bits or len(rel) % q:
        raise KernelError(f"{what}: {len(rel)} {engine.dtype} values do not fill whole "
                          f"{reg_type.bits}-bit registers")
    base, at = _recast_base(engine, reg_type), 0
    if not isinstance(first, int):
        # a start from the variables of loops NVRTC unrolls (a k-block's fragment in a
        # `for kb in range(...)` that stays a loop): the registers from a pointer there
        if divisor_of(first) % q:
            raise KernelError(f"{what}: the register fragment's start {first} is not provably "
                              f"a whole {reg_type.bits}-bit register")
        elements = engine.base.size if isinstance(engine.base, Array) else None
        try:
            for last in (first, first + max(d for d in rel if d is not None)):
                check_register_index(last, elements)
        except KernelError as e:
            raise KernelError(f"{what}: {e}") from None
        b = current()
        if isinstance(base, Array):
            base = b.instr("addr", (base,), PtrType(base.elem, base.space))
        base = b.instr("offset", (base, coerce(first // q, T.Int32)), type_of(base))
        first, at = 0, first
    words = []
    for j in range(0, len(rel), q):
        group = rel[j:j + q]
        start = first + group[0] if group[0] is not None else None
        if start is None or any(d != group[0] + i for i, d in enumerate(group)) or start % q:
            raise KernelError(f"{what}: values {j}..{j + q - 1} of the fragment are not one "
                              f"{reg_type.bits}-bit register (offsets {group} from {at or first}); "
                              "build the fragment with make_fragment_A/B/C or make_fragment_like")
        words.append(start // q)
    return base, tuple(words)


def _recast_base(engine, t):
    """The base of `engine` seen as elements of `t`."""
    if engine.dtype is t:
        return engine.base
    return engine.recast(t).base


def gemm_extents(what, d, a, b, c, fragment_maker):
    """(M, N, K) of a gemm over (V, M, K) x (V, N, K) -> (V, M, N) fragments,
    D in registers (made by `fragment_maker`, named in the error)."""
    M, N, K = size(a, 1), size(b, 1), size(a, 2)
    if size(b, 2) != K or size(c, 1) != M or size(c, 2) != N or size(d, 1) != M \
            or size(d, 2) != N:
        raise KernelError(f"{what}: A {IT.fmt(a.shape)}, B {IT.fmt(b.shape)}, C "
                          f"{IT.fmt(c.shape)} do not form (V,M,K) x (V,N,K) -> (V,M,N)")
    if d.engine.space != "local":
        raise KernelError(f"{what}: D must be a register fragment ({fragment_maker}), got "
                          f"{d.engine.space} memory")
    return M, N, K


def _v_mn(arr):
    """The array with modes (V, (M, K)) so atom_instances walks m fastest."""
    lay = arr.layout
    if IT.rank(lay.shape) == 2:
        lay = make_layout(lay[0], lay[1], Layout(1, 0))
    return MoYeArray.view_of(arr.engine, make_layout(lay[0], make_layout(lay[1], lay[2])))

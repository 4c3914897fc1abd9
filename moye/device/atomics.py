"""Atomics on global and shared memory, for kernel bodies: add, min, max,
exchange, compare-and-swap, and, or and xor, each giving the element's
value before, and the fire-and-forget reductions red_add, red_min,
red_max, red_and, red_or and red_xor, which give nothing. The
instructions, with their CUDA and CPU rules, are `ir/atomics.py`.

Each takes an array in global memory (a kernel argument) or shared memory
(`moye.shared_array`) and an index or coordinate through its layout, as
`array[index]` does. Atomics are relaxed and device-scoped (CUDA's
atomicAdd): they order nothing else, so other threads read their results
after a barrier or at the kernel's end. The CPU backend runs one atomic
instruction's threads one after another in thread order, one order the GPU
may take.

A Float16 or BFloat16 array also takes a packed pair, `value` a tuple of
two: the elements at `index` and the next one in memory (an even element of
an aligned array) change in one 32-bit atomic (CUDA's atomicAdd on
__half2 / __nv_bfloat162), and the result is a tuple of two.
"""
import numbers

from .. import ir
from .. import types as T
from ..compiler.memory import PointerEngine, index_operand, register_allocate
from ..compiler.tracer import KernelError, Sym, coerce, current
from ..errors import MoyeTypeError


def _element(fn, array, index, cls, pair):
    """(base, offset, element type) of array[index] for the atomic `cls`."""
    engine = getattr(array, "engine", None)
    if not isinstance(engine, PointerEngine):
        raise KernelError(f"{fn}: array must be an array in global memory (a kernel argument) "
                          f"or shared memory (moye.shared_array), got {array!r}")
    if engine.space not in ("global", "shared"):
        raise KernelError(f"{fn}: array is a register fragment; atomics act on global memory "
                          "(a kernel argument) or shared memory (moye.shared_array), which "
                          "other threads see")
    elem = engine.dtype
    types = cls.PAIRS if pair else cls.TYPES
    if elem not in types:
        what = "packed pairs of " if pair else ""
        hint = "; a pair of halves is a value of two, (a, b)" \
            if not pair and elem in cls.PAIRS else ""
        raise MoyeTypeError(f"{fn}: the array holds {elem}; {fn} takes {what}"
                            f"{', '.join(map(str, types)) or 'no type'}{hint}")
    offset = engine.offset + array.layout(index)
    if pair and isinstance(offset, int) and offset % 2:
        raise KernelError(f"{fn}: a packed pair starts at an even element (4-byte aligned), "
                          f"but index {index!r} is element {offset}")
    return engine.base, index_operand(offset), elem


def _scalar(fn, name, x, elem):
    """`x` as an operand of type `elem`, refusing what would change its value silently."""
    if isinstance(x, numbers.Number) and not isinstance(x, (bool, complex)) and \
            hasattr(x, "item"):
        x = x.item()                                    # a NumPy scalar
    if isinstance(x, Sym):
        if x.type is T.Bool or elem.is_integer and not x.type.is_integer:
            raise MoyeTypeError(f"{fn}: {name} is {x.type}, but the array holds {elem}; "
                                f"cast it with moye.cast({name}, moye.{elem})")
        return coerce(x, elem)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise MoyeTypeError(f"{fn}: {name} must be a number, got {x!r}")
    if elem.is_integer:
        if isinstance(x, float):
            raise MoyeTypeError(f"{fn}: {name} is the float {x!r}, but the array holds {elem}")
        lo, hi = (0, 2 ** elem.bits) if elem.kind == "uint" else \
            (-2 ** (elem.bits - 1), 2 ** (elem.bits - 1))
        if not lo <= x < hi:
            raise MoyeTypeError(f"{fn}: {name} = {x} does not fit in {elem}")
    return coerce(x, elem)


def _pack(fn, name, pair, elem):
    """A pair of numbers as the UInt32 word of two `elem` halves, low one first."""
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise MoyeTypeError(f"{fn}: {name} of a packed pair must be two numbers, got {pair!r}")
    halves = register_allocate(elem, 2)
    for k, x in enumerate(pair):
        v = _scalar(fn, name, x, elem)
        halves.store(k, Sym(v, elem) if isinstance(v, ir.Value) else v)
    return halves.load(0, width=2).value


def _unpack(word, elem):
    halves = register_allocate(elem, 2)
    halves.store(0, Sym(word, T.UInt32), width=2)
    return halves.load(0), halves.load(1)


def _atomic(fn, cls, array, index, *values):
    pair = isinstance(values[-1], (tuple, list))
    base, offset, elem = _element(fn, array, index, cls, pair)
    names = ("compare", "value") if len(values) == 2 else ("value",)
    if pair:
        ops = tuple(_pack(fn, n, v, elem) for n, v in zip(names, values))
        word = current().instr(cls.op, (base, offset) + ops, T.UInt32, elem=elem, width=2)
        return _unpack(word, elem)
    ops = tuple(_scalar(fn, n, v, elem) for n, v in zip(names, values))
    return Sym(current().instr(cls.op, (base, offset) + ops, elem, elem=elem), elem)


def atomic_add(array, index, value):
    """Add `value` to `array[index]` atomically and return the value before.
    CUDA: atomicAdd. Int32, UInt32, Int64, UInt64, Float32, Float64, Float16,
    BFloat16, and packed pairs of Float16 or BFloat16 (`value` a tuple of two).
        >>> import moye
        >>> @moye.kernel
        ... def histogram(counts, keys):
        ...     moye.atomic_add(counts, keys[moye.thread_idx.x], 1)
        >>> counts = np.zeros(3, np.int32)
        >>> histogram[1, 8](counts, np.array([0, 2, 2, 1, 2, 0, 2, 2], np.int32))
        >>> counts
        array([2, 1, 5], dtype=int32)
    """
    return _atomic("atomic_add", ir.AtomicAdd, array, index, value)


def atomic_min(array, index, value):
    """Set `array[index]` to the smaller of it and `value`, atomically, and
    return the value before. CUDA: atomicMin. Int32, UInt32, Int64, UInt64;
    Float32 and Float64 by a compare-and-swap loop, as fminf (a NaN is ignored).
        >>> import moye
        >>> @moye.kernel
        ... def smallest(out, x):
        ...     moye.atomic_min(out, 0, x[moye.thread_idx.x])
        >>> out = np.array([100], np.int32)
        >>> smallest[1, 4](out, np.array([7, -3, 12, 5], np.int32))
        >>> out
        array([-3], dtype=int32)
    """
    return _atomic("atomic_min", ir.AtomicMin, array, index, value)


def atomic_max(array, index, value):
    """Set `array[index]` to the larger of it and `value`, atomically, and
    return the value before. CUDA: atomicMax. Int32, UInt32, Int64, UInt64;
    Float32 and Float64 by a compare-and-swap loop, as fmaxf (a NaN is ignored).
        >>> import moye
        >>> @moye.kernel
        ... def largest(out, x):
        ...     moye.atomic_max(out, 0, x[moye.thread_idx.x])
        >>> out = np.array([-1.0], np.float32)
        >>> largest[1, 4](out, np.array([0.5, 2.5, -7.0, 1.0], np.float32))
        >>> out
        array([2.5], dtype=float32)
    """
    return _atomic("atomic_max", ir.AtomicMax, array, index, value)


def atomic_exch(array, index, value):
    """Store `value` in `array[index]` atomically and return the value before.
    CUDA: atomicExch. Int32, UInt32, Int64, UInt64, Float32, Float64.
        >>> import moye
        >>> @moye.kernel
        ... def take(slot, got):
        ...     t = moye.thread_idx.x
        ...     got[t] = moye.atomic_exch(slot, 0, t + 1)
        >>> slot, got = np.array([0], np.int32), np.zeros(3, np.int32)
        >>> take[1, 3](slot, got)      # threads in order here; any order on a GPU
        >>> slot, got
        (array([3], dtype=int32), array([0, 1, 2], dtype=int32))
    """
    return _atomic("atomic_exch", ir.AtomicExch, array, index, value)


def atomic_and(array, index, value):
    """Keep in `array[index]` only the bits also set in `value`, atomically,
    and return the value before. CUDA: atomicAnd. Int32, UInt32, Int64, UInt64.
        >>> import moye
        >>> @moye.kernel
        ... def clear(flags, drop):
        ...     moye.atomic_and(flags, 0, ~drop[moye.thread_idx.x])
        >>> flags = np.array([0b1111], np.uint32)
        >>> clear[1, 2](flags, np.array([0b0001, 0b0100], np.uint32))
        >>> bin(flags[0])
        '0b1010'
    """
    return _atomic("atomic_and", ir.AtomicAnd, array, index, value)


def atomic_or(array, index, value):
    """Set in `array[index]` the bits set in `value`, atomically, and return
    the value before. CUDA: atomicOr. Int32, UInt32, Int64, UInt64.
        >>> import moye
        >>> @moye.kernel
        ... def seen(bitmap, keys):
        ...     k = keys[moye.thread_idx.x]
        ...     moye.atomic_or(bitmap, k // 32, moye.cast(1, moye.UInt32) << k % 32)
        >>> bitmap = np.zeros(2, np.uint32)
        >>> seen[1, 4](bitmap, np.array([3, 33, 3, 40], np.int32))
        >>> [bin(w) for w in bitmap]
        ['0b1000', '0b100000010']
    """
    return _atomic("atomic_or", ir.AtomicOr, array, index, value)


def atomic_xor(array, index, value):
    """Flip in `array[index]` the bits set in `value`, atomically, and return
    the value before. CUDA: atomicXor. Int32, UInt32, Int64, UInt64.
        >>> import moye
        >>> @moye.kernel
        ... def parity(out, x):
        ...     moye.atomic_xor(out, 0, x[moye.thread_idx.x])
        >>> out = np.zeros(1, np.int64)
        >>> parity[1, 3](out, np.array([0b110, 0b011, 0b001], np.int64))
        >>> out
        array([4])
    """
    return _atomic("atomic_xor", ir.AtomicXor, array, index, value)


def atomic_cas(array, index, compare, value):
    """Store `value` in `array[index]` if it equals `compare`, atomically, and
    return the value before either way. CUDA: atomicCAS. Int32, UInt32,
    Int64, UInt64, Float32, Float64 (floats compare bit for bit).
        >>> import moye
        >>> @moye.kernel
        ... def first(winner):
        ...     moye.atomic_cas(winner, 0, -1, moye.thread_idx.x)
        >>> winner = np.array([-1], np.int32)
        >>> first[1, 32](winner)
        >>> winner                      # thread 0 on the CPU; any one on a GPU
        array([0], dtype=int32)
    """
    return _atomic("atomic_cas", ir.AtomicCas, array, index, compare, value)


def _red(kind):
    fn = f"red_{kind}"

    def red(array, index, value):
        pair = isinstance(value, (tuple, list))
        if kind != "add" and pair:
            raise MoyeTypeError(f"{fn}: packed pairs are for red_add only")
        base, offset, elem = _element(fn, array, index, ir.Red if kind == "add" else
                                      ir.atomics.RED_KINDS[kind], pair)
        operand = _pack(fn, "value", value, elem) if pair else _scalar(fn, "value", value, elem)
        current().instr("red", (base, offset, operand), kind=kind, elem=elem,
                        width=2 if pair else 1)
    red.__name__ = red.__qualname__ = fn
    return red


red_add = _red("add")
red_add.__doc__ = """Add `value` to `array[index]` atomically, returning nothing: the
    thread does not wait for it. PTX: red.add (CUDA: an atomicAdd whose result
    is unused). The types of atomic_add.
        >>> import moye
        >>> @moye.kernel
        ... def total(out, x):
        ...     moye.red_add(out, 0, x[moye.thread_idx.x])
        >>> out = np.array([1.5], np.float64)
        >>> total[1, 4](out, np.array([1.0, 2.0, 3.0, 4.0]))
        >>> out
        array([11.5])
    """
red_min = _red("min")
red_min.__doc__ = """`array[index]` = min(it, `value`) atomically, returning nothing.
    PTX: red.min. The types of atomic_min.
        >>> import moye
        >>> @moye.kernel
        ... def low(out, x):
        ...     moye.red_min(out, 0, x[moye.thread_idx.x])
        >>> out = np.array([9], np.uint32)
        >>> low[1, 3](out, np.array([4, 8, 6], np.uint32))
        >>> out
        array([4], dtype=uint32)
    """
red_max = _red("max")
red_max.__doc__ = """`array[index]` = max(it, `value`) atomically, returning nothing.
    PTX: red.max. The types of atomic_max.
        >>> import moye
        >>> @moye.kernel
        ... def high(out, x):
        ...     moye.red_max(out, 0, x[moye.thread_idx.x])
        >>> out = np.array([0], np.int64)
        >>> high[1, 3](out, np.array([4, 8, 6], np.int64))
        >>> out
        array([8])
    """
red_and = _red("and")
red_and.__doc__ = """`array[index]` &= `value` atomically, returning nothing. PTX:
    red.and. The types of atomic_and.
        >>> import moye
        >>> @moye.kernel
        ... def keep(out, x):
        ...     moye.red_and(out, 0, x[moye.thread_idx.x])
        >>> out = np.array([0b111], np.int32)
        >>> keep[1, 2](out, np.array([0b110, 0b011], np.int32))
        >>> out
        array([2], dtype=int32)
    """
red_or = _red("or")
red_or.__doc__ = """`array[index]` |= `value` atomically, returning nothing. PTX:
    red.or. The types of atomic_or.
        >>> import moye
        >>> @moye.kernel
        ... def any_bits(out, x):
        ...     moye.red_or(out, 0, x[moye.thread_idx.x])
        >>> out = np.zeros(1, np.uint64)
        >>> any_bits[1, 2](out, np.array([1 << 40, 1], np.uint64))
        >>> out == (1 << 40) + 1
        array([ True])
    """
red_xor = _red("xor")
red_xor.__doc__ = """`array[index]` ^= `value` atomically, returning nothing. PTX:
    red.xor. The types of atomic_xor.
        >>> import moye
        >>> @moye.kernel
        ... def flip(out, x):
        ...     moye.red_xor(out, 0, x[moye.thread_idx.x])
        >>> out = np.array([0b101], np.uint32)
        >>> flip[1, 2](out, np.array([0b001, 0b100], np.uint32))
        >>> out
        array([0], dtype=uint32)
    """


def threadfence():
    """Order this thread's writes for the whole device: a thread that sees a
    write of this one made after the fence sees those made before it.
    The pattern: write a result, fence, then take a ticket with
    atomic_add; the thread that takes the last ticket fences and reads
    every result. CUDA: __threadfence() (PTX fence.sc.gpu).
        >>> import moye
        >>> @moye.kernel
        ... def total(out, partial, tickets, x):
        ...     b, t = moye.block_idx.x, moye.thread_idx.x
        ...     if t == 0:
        ...         partial[b] = x[2 * b] + x[2 * b + 1]
        ...         moye.threadfence()
        ...         if moye.atomic_add(tickets, 0, 1) == moye.grid_dim.x - 1:
        ...             moye.threadfence()
        ...             s = 0.0
        ...             for i in range(moye.grid_dim.x):
        ...                 s += partial[i]
        ...             out[0] = s
        >>> out, partial = np.zeros(1, np.float32), np.zeros(4, np.float32)
        >>> total[4, 32](out, partial, np.zeros(1, np.int32), np.arange(8, dtype=np.float32))
        >>> out
        array([28.], dtype=float32)
    """
    current().instr("threadfence", ())


__all__ = ["atomic_add", "atomic_min", "atomic_max", "atomic_exch", "atomic_cas", "atomic_and",
           "atomic_or", "atomic_xor", "red_add", "red_min", "red_max", "red_and", "red_or",
           "red_xor", "threadfence"]

"""Atomic read-modify-write instructions on global and shared memory (add,
min, max, exchange, compare-and-swap, and, or, xor), and the
fire-and-forget reduction `red`. The functions kernels call are in
`device/atomics.py`; each class's C++ and CPU rules follow it
(`lowering.py` states their contract).

Every atomic is relaxed and device-scoped, as CUDA's atomicAdd: it makes
one read-modify-write of one element indivisible and orders nothing else.
`width` 2 is a packed pair of Float16 or BFloat16 elements (f16x2,
bf16x2): the element at `index` and the next one, 4-byte aligned, whose
value and result are one UInt32 word (the element at `index` in its low
half), as a `width` 2 load or store has them.

CUDA has no float atomicMin/atomicMax: for Float32 and Float64 they are a
compare-and-swap loop on the element's bits, with fminf/fmaxf semantics (a
NaN operand is ignored). Compare-and-swap of floats compares their bits.
"""
import numpy as np

from .. import types as T
from ..errors import KernelRuntimeError
from .instr import Instr, is_integer, type_of
from .lowering import lowering
from .values import Array, PtrType, where

_INTS = (T.Int32, T.UInt32, T.Int64, T.UInt64)
_FLOATS = (T.Float32, T.Float64)
_HALVES = (T.Float16, T.BFloat16)


class ReadModifyWrite(Instr):
    """The base of the atomics and red: `ptr[index] = f(ptr[index], value)`
    indivisibly. `TYPES` are the element types it takes one at a time,
    `PAIRS` those it takes as packed pairs."""
    operands = ("ptr", "index", "value")
    attributes = {"elem": None, "width": 1}
    writes = "ptr"
    TYPES = ()
    PAIRS = ()

    def check(self):
        t = type_of(self.ptr)
        if not isinstance(t, PtrType) or t.space not in ("global", "shared"):
            return f"the base {self.ptr!r} is not a pointer to global or shared memory"
        name = type(self).__name__
        if self.width == 1 and self.elem not in self.TYPES:
            return f"{name} takes {', '.join(map(str, self.TYPES))}, not {self.elem}"
        if self.width == 2 and self.elem not in self.PAIRS or self.width not in (1, 2):
            return f"{name} takes no packed {self.width} x {self.elem}"
        want = word_type(self.elem, self.width)
        for operand in self.args[2:]:
            tv = type_of(operand)
            if tv is not None and tv is not want:
                return f"the operand {operand!r} is {tv}, not {want}"
        return None if is_integer(self.index) else f"the index {self.index!r} is not an integer"


def word_type(elem, width):
    """The type of an atomic's value and result: the element's, or an
    unsigned word for a packed pair."""
    return elem if width == 1 else T.uint_of_bits(elem.bits * width)


class Atomic(ReadModifyWrite):
    """An atomic: gives the element's value before."""

    def result_type(self):
        return word_type(self.elem, self.width)


class AtomicAdd(Atomic):
    """atomicAdd(&ptr[index], value): the element's value before."""
    op = "atomic_add"
    TYPES = _INTS + _FLOATS + _HALVES
    PAIRS = _HALVES


class AtomicMin(Atomic):
    """atomicMin(&ptr[index], value): the element's value before."""
    op = "atomic_min"
    TYPES = _INTS + _FLOATS


class AtomicMax(Atomic):
    """atomicMax(&ptr[index], value): the element's value before."""
    op = "atomic_max"
    TYPES = _INTS + _FLOATS


class AtomicExch(Atomic):
    """atomicExch(&ptr[index], value): stores value, gives the value before."""
    op = "atomic_exch"
    TYPES = _INTS + _FLOATS


class AtomicAnd(Atomic):
    """atomicAnd(&ptr[index], value): the bits set in both; the element's value before."""
    op = "atomic_and"
    TYPES = _INTS


class AtomicOr(Atomic):
    """atomicOr(&ptr[index], value): the bits set in either; the element's value before."""
    op = "atomic_or"
    TYPES = _INTS


class AtomicXor(Atomic):
    """atomicXor(&ptr[index], value): the bits set in one; the element's value before."""
    op = "atomic_xor"
    TYPES = _INTS


class AtomicCas(Atomic):
    """atomicCAS(&ptr[index], compare, value): stores value where the element
    equals compare (bit for bit), gives the value before either way."""
    op = "atomic_cas"
    operands = ("ptr", "index", "compare", "value")
    TYPES = _INTS + _FLOATS


class ThreadFence(Instr):
    """__threadfence(): whichever thread of the device sees one of this
    thread's writes after the fence sees its writes before it too (PTX
    fence.sc.gpu)."""
    op = "threadfence"


@lowering("cuda", ThreadFence)
def _emit_threadfence(w, s, ind, decl):
    w.emit(ind, "__threadfence();")


@lowering("cpu", ThreadFence)
def _run_threadfence(b, s, mask):
    """Nothing: the CPU backend makes each write seen at once, in program order."""


class Red(ReadModifyWrite):
    """PTX red.{kind}: the atomic `kind` ("add", "min", "max", "and", "or",
    "xor") without a result, which the memory system may complete later
    (fire and forget)."""
    op = "red"
    attributes = {"kind": "add", "elem": None, "width": 1}
    TYPES = _INTS + _FLOATS + _HALVES
    PAIRS = _HALVES

    def check(self):
        if self.kind not in RED_KINDS:
            return f"red takes the kinds {', '.join(RED_KINDS)}, not {self.kind!r}"
        types = RED_KINDS[self.kind].TYPES
        if self.kind != "add" and (self.width != 1 or self.elem not in types):
            return f"red.{self.kind} takes {', '.join(map(str, types))}, not {self.elem}"
        return super().check()


# red's kinds -> the atomic whose types and rule it takes
RED_KINDS = {"add": AtomicAdd, "min": AtomicMin, "max": AtomicMax, "and": AtomicAnd,
             "or": AtomicOr, "xor": AtomicXor}


# -- CUDA -------------------------------------------------------------------------------
# CUDA's atomic functions take int, unsigned int, unsigned long long, float and
# double (atomicAdd also half and bfloat16, atomicMin/Max also long long); the
# other types go through one of these as the same bits.
_CUDA_FN = {AtomicAdd: "atomicAdd", AtomicMin: "atomicMin", AtomicMax: "atomicMax",
            AtomicExch: "atomicExch", AtomicCas: "atomicCAS", AtomicAnd: "atomicAnd",
            AtomicOr: "atomicOr", AtomicXor: "atomicXor"}
_BITWISE = (AtomicAnd, AtomicOr, AtomicXor)
_BITS = {32: ("unsigned int", "__float_as_uint", "__uint_as_float"),
         64: ("unsigned long long", "__double_as_longlong", "__longlong_as_double")}
_PAIR = {"Float16": "__half2", "BFloat16": "__nv_bfloat162"}


def _as_bits(cls, elem):
    """Whether `cls` runs on `elem` as an unsigned word of its bits."""
    if elem is T.Int64:
        return cls in (AtomicAdd, AtomicExch, AtomicCas) + _BITWISE
    if elem is T.Float64:
        return cls in (AtomicExch, AtomicCas)
    return elem is T.Float32 and cls is AtomicCas


def _cas_loop(w, s, fn, ind, decl):
    """A float min or max as CUDA writes it without a native atomic: swap in
    fn(seen, value) until no other thread changed the element in between."""
    word, to_bits, from_bits = _BITS[s.elem.bits]
    f = {"Float32": fn + "f", "Float64": fn}[s.elem.name]
    w.emit(ind, f"{decl}[&] {{  // atomic {fn[1:]} by compare-and-swap: CUDA has none for "
                f"{w.ctype(s.elem)}")
    w.emit(ind, f"  {word}* word = reinterpret_cast<{word}*>(&{w.operand(s.ptr)}"
                f"[{w.operand(s.index)}]);")
    w.emit(ind, f"  {word} seen, old = *word;")
    w.emit(ind, f"  do {{ seen = old; old = atomicCAS(word, seen, {to_bits}({f}({from_bits}(seen), "
                f"{w.arg(s.value, s.elem)}))); }} while (old != seen);")
    w.emit(ind, f"  return {from_bits}(old);")
    w.emit(ind, "}();")


def _atomic_call(w, s, cls):
    """The C++ call of the atomic `cls` on s's element, as (text, C++ type it gives)."""
    ptr, idx = w.operand(s.ptr), w.operand(s.index)
    values = [w.arg(x, s.elem) for x in s.args[2:]]
    elem = s.elem
    if s.width == 2:
        pair = _PAIR[elem.name]
        values = [f"*reinterpret_cast<const {pair}*>(&{v})" for v in values]
        return (f"{_CUDA_FN[cls]}(reinterpret_cast<{pair}*>(&{ptr}[{idx}]), "
                f"{', '.join(values)})", pair)
    if _as_bits(cls, elem):
        word, to_bits, from_bits = _BITS[elem.bits]
        if elem.is_float:
            values = [f"{to_bits}({v})" for v in values]
        else:
            values = [f"static_cast<{word}>({v})" for v in values]
        call = (f"{_CUDA_FN[cls]}(reinterpret_cast<{word}*>(&{ptr}[{idx}]), "
                f"{', '.join(values)})")
        return (f"{from_bits}({call})", w.ctype(elem)) if elem.is_float else (call, word)
    if elem is T.Int64:         # atomicMin/Max(long long*)
        return (f"{_CUDA_FN[cls]}(reinterpret_cast<long long*>(&{ptr}[{idx}]), "
                f"static_cast<long long>({values[0]}))"), "long long"
    return f"{_CUDA_FN[cls]}(&{ptr}[{idx}], {', '.join(values)})", w.ctype(elem)


@lowering("cuda", AtomicAdd, AtomicMin, AtomicMax, AtomicExch, AtomicCas, *_BITWISE)
def _emit_atomic(w, s, ind, decl):
    cls = type(s)
    if cls in (AtomicMin, AtomicMax) and s.elem.is_float:
        _cas_loop(w, s, "fmin" if cls is AtomicMin else "fmax", ind, decl)
        return
    call, ctype = _atomic_call(w, s, cls)
    if s.width == 2:
        pair = f"{w.name(s.result)}_pair"
        w.emit(ind, f"const {ctype} {pair} = {call};")
        w.emit(ind, f"{decl}*reinterpret_cast<const uint32_t*>(&{pair});")
    elif ctype != w.ctype(s.elem):
        w.emit(ind, f"{decl}static_cast<{w.ctype(s.elem)}>({call});")
    else:
        w.emit(ind, f"{decl}{call};")


# PTX red's types: .add takes u32, s32, u64, f32, f64 and (.noftz) f16x2; min and max
# take u32, s32, u64, s64; and, or and xor b32 and b64. The others (bf16, bf16x2 and
# f16 on sm_80, float min and max) are their atomic with its result unused, which the
# compiler makes a red.
_RED_PTX = {("add", "Int32"): "s32", ("add", "UInt32"): "u32", ("add", "Int64"): "u64",
            ("add", "UInt64"): "u64", ("add", "Float32"): "f32", ("add", "Float64"): "f64",
            ("min", "Int32"): "s32", ("min", "UInt32"): "u32", ("min", "Int64"): "s64",
            ("min", "UInt64"): "u64", ("max", "Int32"): "s32", ("max", "UInt32"): "u32",
            ("max", "Int64"): "s64", ("max", "UInt64"): "u64",
            **{(k, t.name): f"b{t.bits}" for k in ("and", "or", "xor") for t in _INTS}}
_PTX_CONSTRAINT = {"s32": "r", "u32": "r", "s64": "l", "u64": "l", "f32": "f", "f64": "d",
                   "f16x2": "r", "b32": "r", "b64": "l"}
_PTX_CTYPE = {"s32": "int", "u32": "uint32_t", "s64": "int64_t", "u64": "uint64_t",
              "f32": "float", "f64": "double", "f16x2": "uint32_t", "b32": "uint32_t",
              "b64": "uint64_t"}


@lowering("cuda", Red)
def _emit_red(w, s, ind, decl):
    cls = RED_KINDS[s.kind]
    ptx = "f16x2" if s.width == 2 and s.elem is T.Float16 else \
        _RED_PTX.get((s.kind, s.elem.name)) if s.width == 1 else None
    if ptx is None:
        if s.elem.is_float and cls is not AtomicAdd:
            _cas_loop(w, s, "fmin" if cls is AtomicMin else "fmax", ind, "")
        else:
            w.emit(ind, _atomic_call(w, s, cls)[0] + ";  // its result unused: a red")
        return
    if isinstance(s.ptr, Array) or type_of(s.ptr).space == "shared":
        space, addr = "shared", ("r", w.smem_addr(s.ptr, s.index))
    else:
        space, addr = "global", ("l", f"&{w.operand(s.ptr)}[{w.operand(s.index)}]")
    noftz = ".noftz" if ptx == "f16x2" else ""
    value = f"static_cast<{_PTX_CTYPE[ptx]}>({w.arg(s.value, s.elem)})"
    w.emit(ind, f'asm volatile("red.relaxed.gpu.{space}.{s.kind}{noftz}.{ptx} [%0], %1;" :: '
                f'"{addr[0]}"({addr[1]}), "{_PTX_CONSTRAINT[ptx]}"({value}) : "memory");')


# -- CPU --------------------------------------------------------------------------------
def _bits(x):
    """Floats as the unsigned integers of their bits, for comparisons bit for bit."""
    x = np.asarray(x)
    return x.view(np.dtype(f"u{x.dtype.itemsize}")) if x.dtype.kind == "f" or \
        x.dtype.name == "bfloat16" else x


def _combine(cls, elem, old, value, compare=None):
    """The element after the atomic `cls` on `old` with `value` (NumPy arrays)."""
    if cls is AtomicAdd:
        return old + value
    if cls is AtomicMin:
        return np.fmin(old, value) if elem.is_float else np.minimum(old, value)
    if cls is AtomicMax:
        return np.fmax(old, value) if elem.is_float else np.maximum(old, value)
    if cls is AtomicExch:
        return value
    if cls in _BITWISE:
        op = {AtomicAnd: np.bitwise_and, AtomicOr: np.bitwise_or, AtomicXor: np.bitwise_xor}
        return op[cls](old, value)
    return np.where(_bits(old) == _bits(compare), value, old)


def _run(b, s, mask, cls):
    """The active lanes apply the atomic one after another, in lane order
    (one order the GPU may take), each seeing the result of those before it;
    gives the values before, per lane, as (width,) rows."""
    width = s.width
    kind, buf, index, rows = b.index(s.ptr, s.index, s, mask, width, atomic=True)
    if width == 2:
        _check_pair_alignment(b, s, mask, kind, buf, index)

    def elements(x):
        v = b.vec(x)
        if width == 1:
            return v.astype(buf.dtype).reshape(-1, 1)
        return np.ascontiguousarray(v.astype(np.uint32)).view(buf.dtype).reshape(-1, 2)
    values = elements(s.value)
    compare = elements(s.compare) if cls is AtomicCas else None
    old = np.zeros((b.n, width), buf.dtype)
    with np.errstate(all="ignore"):
        for lane in np.nonzero(mask)[0]:
            i = index[lane]
            at = (rows[lane], slice(i, i + width)) if rows is not None else slice(i, i + width)
            old[lane] = buf[at]
            buf[at] = _combine(cls, s.elem, buf[at], values[lane],
                               None if compare is None else compare[lane])
    return old


def _check_pair_alignment(b, s, mask, kind, buf, index):
    """A packed pair is one 4-byte word: on the GPU a misaligned one faults."""
    base = buf.ctypes.data if kind == "global" else 0
    bad = mask & ((base + index * buf.itemsize) % 4 != 0)
    if bad.any():
        lane = int(np.nonzero(bad)[0][0])
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  {s.op} of a packed pair at element {int(index[lane])}, which "
            f"is not 4-byte aligned, by thread {_thread(b, lane)} of block "
            f"{tuple(int(i) for i in b.block_ids[b.block_of_lane[lane]])}: a "
            f"pair of halves starts at an even element of an aligned array")


def _thread(b, lane):
    t, (x, y, _) = int(b.thread_of_lane[lane]), b.block
    return (t % x, t // x % y, t // (x * y))


@lowering("cpu", AtomicAdd, AtomicMin, AtomicMax, AtomicExch, AtomicCas, *_BITWISE)
def _run_atomic(b, s, mask):
    old = _run(b, s, mask, type(s))
    result = old[:, 0] if s.width == 1 else np.ascontiguousarray(old).view(np.uint32)[:, 0]
    b.set_result(s, result, mask)


@lowering("cpu", Red)
def _run_red(b, s, mask):
    _run(b, s, mask, RED_KINDS[s.kind])

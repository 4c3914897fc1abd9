"""IR -> one readable CUDA C++ translation unit.

Each IR value becomes a `const` local, each Var a mutable local, register
arrays are local arrays indexed by constants, vector accesses are aligned
casts, and every statement that starts a new kernel source line is preceded
by a `// file.py:LINE  source` comment.
"""
import math
import os

from ... import ir
from .float16 import PRELUDE as PRELUDE16, needs_float16

PRELUDE = """\
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
"""


def headers(body):
    """What a kernel's C++ `body` needs before it: moye's own 16-bit float
    types where it names one (`float16.PRELUDE`, in place of CUDA's
    cuda_fp16.h and cuda_bf16.h), else nothing."""
    return PRELUDE16 if needs_float16(body) else ""


# CUtensorMap without cuda.h: 128 opaque bytes, 64-byte aligned
TENSOR_MAP_STRUCT = "struct __align__(64) moye_tensor_map { uint64_t opaque[16]; };\n"

_CTYPE = {"Bool": "bool", "Float16": "half", "BFloat16": "__nv_bfloat16", "TFloat32": "float",
          "Float32": "float", "Float64": "double", "Int8": "int8_t", "UInt8": "uint8_t",
          "Int16": "int16_t", "UInt16": "uint16_t", "Int32": "int", "UInt32": "uint32_t",
          "Int64": "int64_t", "UInt64": "uint64_t", "UInt128": "uint4",
          "Float8E4M3": "uint8_t", "Float8E5M2": "uint8_t"}

_CONSTRAINT = {"UInt32": "r", "Int32": "r", "Float32": "f", "Float64": "d", "UInt64": "l"}

_BINOP = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "and": "&", "or": "|",
          "xor": "^", "shl": "<<", "shr": ">>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
          "eq": "==", "ne": "!="}


def ctype(t):
    if isinstance(t, ir.PtrType):
        return ctype(t.elem) + "*"
    try:
        return _CTYPE[t.name]
    except KeyError:
        raise NotImplementedError(f"no CUDA type for {t}") from None


def _vec_type(elem_bits, width):
    bits = elem_bits * width
    return {16: "uint16_t", 32: "uint32_t", 64: "uint64_t", 128: "uint4"}[bits]


class _Writer:
    def __init__(self, kernel):
        self.kernel = kernel
        self.lines = []
        self.names = {}
        self.last_loc = None
        self.defs = None          # id(Value) -> its defining Instr, on first use

    def name(self, x):
        n = self.names.get(id(x))
        if n is None:
            if isinstance(x, ir.Value):
                n = f"{x.hint}{x.id}" if x.hint not in ("v",) else f"v{x.id}"
            elif isinstance(x, ir.Var):
                n = f"{x.hint}_{x.id}"
            elif isinstance(x, ir.Array):
                n = f"{'rf' if x.space == 'local' else 'smem'}{x.id}"
            else:
                raise TypeError(x)
            self.names[id(x)] = n
        return n

    def operand(self, x):
        if isinstance(x, (ir.Value, ir.Var, ir.Array)):
            return self.name(x)
        if isinstance(x, bool):
            return "true" if x else "false"
        if isinstance(x, int):
            if -2**31 <= x < 2**31:
                return str(x)
            return f"{x}ll"
        if isinstance(x, float):
            return self._float_lit(x, None)
        if x is None:
            return ""
        raise TypeError(f"cannot print operand {x!r}")

    def emit(self, ind, text):
        self.lines.append(ind + text)

    def loc(self, stmt, ind):
        loc = getattr(stmt, "loc", None)
        if loc is None:
            return
        key = (loc.file, loc.line)
        if key != self.last_loc:
            self.last_loc = key
            # a trailing backslash would splice the next line into the comment
            text = loc.text.rstrip().rstrip("\\")
            self.emit(ind, f"// {os.path.basename(loc.file)}:{loc.line}  {text}")

    def body(self, stmts, ind):
        for s in stmts:
            self.loc(s, ind)
            if isinstance(s, ir.Instr):
                self.instr(s, ind)
            elif isinstance(s, ir.For):
                v, stop, step = self.name(s.var), self.operand(s.stop), self.operand(s.step)
                if isinstance(s.step, int):         # Python's range: the step's sign picks the test
                    test = f"{v} < {stop}" if s.step > 0 else f"{v} > {stop}"
                else:                               # a step of 0 would never end: trap instead
                    self.emit(ind, f"if ({step} == 0) __trap();  // range() step is 0")
                    test = f"({step} > 0 ? {v} < {stop} : {v} > {stop})"
                if s.unroll == "full":
                    self.emit(ind, "#pragma unroll")
                elif s.unroll is not None:
                    self.emit(ind, f"#pragma unroll {s.unroll}")
                self.emit(ind, f"for ({ctype(s.var.type)} {v} = {self.operand(s.start)}; "
                               f"{test}; {v} += {step}) {{")
                self.body(s.body, ind + "  ")
                self.emit(ind, "}")
            elif isinstance(s, ir.If):
                self.emit(ind, f"if ({self.operand(s.cond)}) {{")
                self.body(s.then, ind + "  ")
                if s.orelse:
                    self.emit(ind, "} else {")
                    self.body(s.orelse, ind + "  ")
                self.emit(ind, "}")
            elif isinstance(s, ir.While):
                self.emit(ind, "while (true) {")
                self.body(s.cond_body, ind + "  ")
                self.emit(ind + "  ", f"if (!({self.operand(s.cond)})) break;")
                self.body(s.body, ind + "  ")
                self.emit(ind, "}")
            elif isinstance(s, ir.Jump):
                self.emit(ind, f"{s.kind};")

    def _float_lit(self, x, t):
        x = float(x)
        # a double only for Float64: a float's max(-inf, x) would otherwise run in FP64
        f = "" if t is not None and t.name == "Float64" else "f"
        if not math.isfinite(x):
            return f"(1.0{f}/0.0{f})" if x > 0 else f"(-1.0{f}/0.0{f})" if x < 0 else \
                f"(0.0{f}/0.0{f})"
        return repr(x) + f

    def arg(self, x, t=None):
        if isinstance(x, float):
            return self._float_lit(x, t)
        return self.operand(x)

    def instr(self, s, ind):
        r = s.result
        rt = r.type if r is not None else None
        decl = "" if r is None else f"{ctype(rt)} const {self.name(r)} = " \
            if isinstance(rt, ir.PtrType) else f"const {ctype(rt)} {self.name(r)} = "
        emit = EMITTERS.get(type(s))
        if emit is None:
            raise NotImplementedError(f"CUDA codegen: no rule for IR op {s.op!r}")
        emit(self, s, ind, decl)

    # -- for the emitters of inline PTX (ir.lowering states this interface) ----------------
    ctype = staticmethod(ctype)

    def regs(self, base, idxs):
        """The C++ lvalues of a register list."""
        b = self.operand(base)
        return [f"{b}[{i}]" for i in idxs]

    @staticmethod
    def reg_constraint(base):
        """The asm constraint of the registers of `base` ("r", "f", "d", "l")."""
        t = base.elem if isinstance(base, ir.Array) else base.type.elem
        return _CONSTRAINT[t.name]

    def smem_addr(self, base, idx):
        """The 32-bit shared address of base[idx], written as the base's address
        plus idx's summands in bytes (`a + b` -> 2a + 2b for halves): in unsigned
        arithmetic the compiler may regroup them, so the loop-invariant terms (a
        thread's swizzled offset) are added once, outside the loop, and a stage
        offset becomes an operand of the addressing mode."""
        elem = base.elem if isinstance(base, ir.Array) else base.type.elem
        if elem.bits % 8:
            return (f"static_cast<uint32_t>(__cvta_generic_to_shared(&{self.operand(base)}"
                    f"[{self.operand(idx)}]))")
        size, const, text = elem.bits // 8, 0, []
        for t in self._sum_terms(idx):
            if isinstance(t, int):
                const += t
            else:
                text.append(f" + static_cast<uint32_t>({self.operand(t)}) * {size}u")
        if const * size % 2**32:
            text.append(f" + {const * size % 2**32}u")
        return (f"(static_cast<uint32_t>(__cvta_generic_to_shared({self.operand(base)}))"
                f"{''.join(text)})")

    def _sum_terms(self, x, limit=8):
        """The summands of x through the Int32 adds that define it (at most `limit`)."""
        if self.defs is None:
            self.defs = {id(s.result): s for s in ir.instructions(self.kernel.body)
                         if s.result is not None}
        terms, todo = [], [x]
        while todo:
            t = todo.pop()
            d = self.defs.get(id(t)) if isinstance(t, ir.Value) else None
            # a Var operand is read where it appears, so it may have changed since t was defined
            if isinstance(d, ir.Add) and getattr(d.result.type, "name", "") == "Int32" \
                    and not any(isinstance(a, ir.Var) for a in d.args) \
                    and len(terms) + len(todo) + 2 <= limit:
                todo.extend(reversed(d.args))
            else:
                terms.append(t)
        return terms

    def asm(self, ind, text, outputs, inputs):
        """asm volatile with numbered operands: outputs then inputs, each a
        (constraint, C++) pair."""
        out = ", ".join(f'"={c}"({x})' for c, x in outputs)
        inp = ", ".join(f'"{c}"({x})' for c, x in inputs)
        self.emit(ind, f'asm volatile("{text};\\n" : {out} : {inp});')

    @staticmethod
    def brace(start, count):
        """PTX's vector of numbered operands: {%start, %start+1, ...}."""
        return "{" + ", ".join(f"%{start + i}" for i in range(count)) + "}"

    def memory_asm(self, ind, text):
        """An operand-less PTX line that orders memory (a fence, a commit, a wait)."""
        self.emit(ind, f'asm volatile("{text};\\n" ::: "memory");')

    def access(self, base, idx, attrs, rt=None):
        """The lvalue base[idx]; `attrs["width"]` > 1 elements as one word."""
        width = attrs.get("width", 1)
        b, i = self.operand(base), self.operand(idx)
        if width == 1:
            return f"{b}[{i}]"
        vt = _vec_type(attrs["elem"].bits, width)
        return f"*reinterpret_cast<{vt}*>(&{b}[{i}])"


def generate(kernel, block_threads=None):
    """The CUDA C++ source of an IR kernel."""
    w = _Writer(kernel)
    params = []
    for p in kernel.params:
        if isinstance(p.type, ir.PtrType):
            params.append(f"{ctype(p.type)} __restrict__ {w.name(p.value)}")
        elif p.nbytes:
            params.append(f"const __grid_constant__ {p.type} {w.name(p.value)}")
        else:
            params.append(f"{ctype(p.type)} {w.name(p.value)}")
    # setmaxnreg needs a register cap at entry: one block per multiprocessor
    one = ", 1" if any(isinstance(s, ir.SetMaxNReg) for s in ir.instructions(kernel.body)) \
        else ""
    bounds = f"__launch_bounds__({block_threads}{one}) " if block_threads else ""
    w.lines.append(PRELUDE)
    if any(isinstance(p.type, ir.OpaqueType) for p in kernel.params):
        w.lines.append(TENSOR_MAP_STRUCT)
    w.lines.append(f'extern "C" __global__ void {bounds}{ir.symbol(kernel.name)}(' + ", ".join(params) + ") {")
    ind = "  "
    dyn = [a for a in kernel.arrays if a.space == "shared" and kernel.dynamic_smem]
    if dyn:
        w.emit(ind, "extern __shared__ __align__(1024) unsigned char moye_dynamic_smem[];")
    offset = 0
    for a in kernel.arrays:
        if a.space == "shared":
            if dyn:
                offset = -(-offset // a.align) * a.align
                w.emit(ind, f"{ctype(a.elem)}* {w.name(a)} = reinterpret_cast<{ctype(a.elem)}*>"
                            f"(moye_dynamic_smem + {offset});")
                offset += a.size * a.elem.bits // 8
            else:
                w.emit(ind, f"__shared__ __align__({a.align}) {ctype(a.elem)} {w.name(a)}"
                            f"[{a.size}];")
        else:
            w.emit(ind, f"__align__(16) {ctype(a.elem)} {w.name(a)}[{a.size}];")
    w.body(kernel.body, ind)
    w.lines.append("}")
    source = "\n".join(w.lines) + "\n"
    return headers(source) + source


# -- the emitters, one per instruction class ----------------------------------------------
EMITTERS = ir.LOWERINGS["cuda"]     # ir instruction class -> emit(writer, instr, indent, decl)


def emits(*classes):
    """Register the decorated function as the C++ emitter of these IR
    instruction classes (`ir.lowering("cuda", ...)`, whose docstring states
    the contract and what an emitter may use of the writer)."""
    return ir.lowering("cuda", *classes)


@emits(ir.Add, ir.Sub, ir.Mul, ir.Div, ir.Mod, ir.And, ir.Or, ir.Xor, ir.Shl, ir.Shr)
def _emit_binary(w, s, ind, decl):
    t = s.result.type
    w.emit(ind, f"{decl}{w.arg(s.a, t)} {_BINOP[s.op]} {w.arg(s.b, t)};")


@emits(ir.Lt, ir.Le, ir.Gt, ir.Ge, ir.Eq, ir.Ne)
def _emit_compare(w, s, ind, decl):
    w.emit(ind, f"{decl}{w.arg(s.a)} {_BINOP[s.op]} {w.arg(s.b)};")


@emits(ir.Neg)
def _emit_neg(w, s, ind, decl):
    w.emit(ind, f"{decl}-{w.operand(s.x)};")


@emits(ir.Not)
def _emit_not(w, s, ind, decl):
    w.emit(ind, f"{decl}!{w.operand(s.x)};")


@emits(ir.Abs)
def _emit_abs(w, s, ind, decl):
    w.emit(ind, f"{decl}abs({w.operand(s.x)});")


@emits(ir.Min, ir.Max)
def _emit_minmax(w, s, ind, decl):
    t = s.result.type

    def operand(x):     # an int literal in the result's type: max(int64_t, int) is ambiguous
        if isinstance(x, int) and not isinstance(x, bool) and t.name != "Int32":
            return f"static_cast<{ctype(t)}>({x})"
        return w.arg(x, t)
    w.emit(ind, f"{decl}{s.op}({operand(s.a)}, {operand(s.b)});")


@emits(ir.Select)
def _emit_select(w, s, ind, decl):
    t = s.result.type
    w.emit(ind, f"{decl}{w.operand(s.cond)} ? {w.arg(s.a, t)} : {w.arg(s.b, t)};")


# a float32 or float64 to an integer narrower than 32 bits: C++ leaves a value out of the
# integer's range undefined (NVVM wraps it), so it goes through the 32-bit conversion, which
# truncates and saturates (cvt.rzi), and is clamped to the type's range
_NARROW_INTEGERS = {"Int8": (-128, 127), "Int16": (-32768, 32767), "UInt8": (0, 255),
                    "UInt16": (0, 65535)}


@emits(ir.Cast)
def _emit_cast(w, s, ind, decl):
    to, source = s.result.type, ir.type_of(s.x)
    if s.ptr:
        w.emit(ind, f"{decl}reinterpret_cast<{ctype(to)}>({w.operand(s.x)});")
    elif to.name in _NARROW_INTEGERS and (source.name in ("Float32", "TFloat32", "Float64")
                                          if source is not None else isinstance(s.x, float)):
        lo, hi = _NARROW_INTEGERS[to.name]
        wide = "double" if source is not None and source.name == "Float64" else "float"
        x = w.arg(s.x, source)
        if lo < 0:
            value = f"max({lo}, min({hi}, __{wide}2int_rz({x})))"
        else:
            value = f"min({hi}u, __{wide}2uint_rz({x}))"
        w.emit(ind, f"{decl}static_cast<{ctype(to)}>({value});")
    else:
        # a number cast to a float type is a literal of that type (0.1f would round a Float64)
        w.emit(ind, f"{decl}static_cast<{ctype(to)}>({w.arg(s.x, to if to.is_float else None)});")


@emits(ir.Call)
def _emit_call(w, s, ind, decl):
    rt = s.result.type
    name = ir.arith.MATH[s.fn][1 if rt.name == "Float64" else 0]
    w.emit(ind, f"{decl}{name}({', '.join(w.arg(x, rt) for x in s.xs)});")


@emits(ir.Special)
def _emit_special(w, s, ind, decl):
    w.emit(ind, f"{decl}{s.name};")


@emits(ir.Read)
def _emit_read(w, s, ind, decl):
    w.emit(ind, f"{decl}{w.name(s.var)};")


@emits(ir.Write)
def _emit_write(w, s, ind, decl):
    w.emit(ind, f"{w.name(s.var)} = {w.arg(s.x, s.var.type)};")


@emits(ir.Decl)
def _emit_decl(w, s, ind, decl):
    init = f" = {w.arg(s.init, s.var.type)}" if s.init is not None else ""
    w.emit(ind, f"{ctype(s.var.type)} {w.name(s.var)}{init};")


@emits(ir.Addr)
def _emit_addr(w, s, ind, decl):
    w.emit(ind, f"{decl}&{w.name(s.array)}[0];")


@emits(ir.Offset)
def _emit_offset(w, s, ind, decl):
    w.emit(ind, f"{decl}{w.operand(s.ptr)} + {w.operand(s.k)};")


@emits(ir.Load)
def _emit_load(w, s, ind, decl):
    w.emit(ind, f"{decl}{w.access(s.ptr, s.index, s.attrs, s.result.type)};")


@emits(ir.Store)
def _emit_store(w, s, ind, decl):
    w.emit(ind, f"{w.access(s.ptr, s.index, s.attrs, None)} = "
                f"{w.arg(s.value, s.elem if s.width == 1 else None)};")


@emits(ir.Barrier)
def _emit_barrier(w, s, ind, decl):
    w.emit(ind, "__syncthreads();")


def _c_string(text):
    """`text` as the inside of a C string literal."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@emits(ir.Print)
def _emit_print(w, s, ind, decl):
    fmt = _c_string(s.fmt)
    args = "".join(", " + w.operand(x) for x in s.xs)
    w.emit(ind, f'printf("{fmt}"{args});')


@emits(ir.Assert)
def _emit_assert(w, s, ind, decl):
    text = f"{ir.where(s.loc)}: assertion failed" + (f": {s.message}" if s.message else "")
    text = _c_string(text).replace("%", "%%")          # printf's format: % as itself
    w.emit(ind, f"if (!({w.operand(s.cond)})) {{")
    w.emit(ind, f'  printf("{text} (thread (%d, %d, %d) of block (%d, %d, %d))\\n", '
                "threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z);")
    w.emit(ind, "  __trap();")
    w.emit(ind, "}")


@emits(ir.Asm)
def _emit_asm(w, s, ind, decl):
    w.emit(ind, s.text)


@emits(ir.Comment)
def _emit_comment(w, s, ind, decl):
    w.emit(ind, "// " + s.text)

"""The kernel IR: small, typed, structured, printable.

A kernel is a list of parameters and a body. A body is a list of
statements; statements are instructions (`Instr`, with an optional result
`Value`) and structured control flow (`For`, `If`, `While`). Values are
SSA-like temporaries defined once; mutable state lives in `Var`s (loop
carried and merged values) and `Array`s (register and shared arrays).
Operands are Values, Vars (read where they appear) or Python numbers
(constants).

Both backends consume this IR: backend/cuda prints it as C++,
backend/cpu interprets it with NumPy.
"""
from dataclasses import dataclass, field

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


@dataclass
class Instr:
    """`result = op(args...)`; attrs hold static details (e.g. the vector width)."""
    op: str
    args: tuple
    result: Value = None
    attrs: dict = field(default_factory=dict)
    loc: Loc = None


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


# Instruction set (op: meaning). Arithmetic follows C on the operand types.
#   add sub mul div mod neg  and or xor shl shr not  lt le gt ge eq ne  min max abs
#   select(c, a, b)  cast(x) [attrs: to]  call(args) [attrs: fn]   math functions
#   special [attrs: name]    threadIdx.x, blockIdx.y, ...
#   read(var)  write(var, x)  decl(var, init)
#   load(ptr, idx) [attrs: width]  store(ptr, idx, x) [attrs: width]   ptr: Value or Array
#   aload(array, idx) astore(array, idx, x)   register/shared arrays, idx static for local
#   addr(array)  pointer to an array's first element
#   offset(ptr, k)   pointer arithmetic in elements
#   barrier   print [attrs: fmt]   asm [attrs: text, outputs, inputs]   comment [attrs: text]
#
# Asynchronous copies and warp-collective instructions. A memory operand is
# a base (pointer Value or Array) and an element index in the base's own
# element type, as for load/store. A *register list* is a base in local
# memory whose element type is the register type (UInt32 for PTX b32,
# Float32 for f32, Int32 for s32, Float64 for f64) and a tuple of static
# indices, one per register, in the order the PTX instruction lists them.
#   cp_async(dst, dst_idx, src, src_idx[, pred]) [attrs: bytes, cache]
#       one thread copies `bytes` (4, 8, 16) from global src to shared dst,
#       asynchronously; cache is "ca" or "cg". With pred (Bool) false the
#       destination is zero-filled and the source not read.
#   cp_async_commit()               close this thread's group of pending cp.async
#   cp_async_wait() [attrs: n]      wait until at most n committed groups are pending
#                                   (n None: wait for all, committed or not)
#   ldmatrix(dst, dst_regs, src, src_idx) [attrs: count, trans]
#       the warp loads `count` 8x8 b16 matrices; src_idx is the start of this
#       lane's row (16 bytes) in shared memory; dst_regs `count` b32 registers
#   stmatrix(dst, dst_idx, src, src_regs) [attrs: count, trans]   the reverse (sm_90)
#   mma(d, d_regs, a, a_regs, b, b_regs, c, c_regs) [attrs: ptx]
#       one mma.sync of the warp, `ptx` its full spelling
#       (mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32)
#   shfl(x, lane, width) [attrs: mode] -> x's type   mode: idx, up, down, bfly
#       (__shfl_sync / _up / _down / _xor over the full warp)
#
# Hopper (kernel/hopper.py). An mbarrier is a UInt64 element (bar, bar_idx) of
# a shared array; count, tx bytes and phase are Int32 operands.
#   mbarrier_init(bar, bar_idx, count)          mbarrier.init: expect `count` arrivals
#   mbarrier_arrive(bar, bar_idx)               mbarrier.arrive, one per executing thread
#   mbarrier_arrive_expect_tx(bar, bar_idx, tx) mbarrier.arrive.expect_tx: tx more bytes, arrive
#   mbarrier_try_wait(bar, bar_idx, phase) -> Bool   mbarrier.try_wait.parity: whether the
#                                               phase of parity `phase` has completed
#   mbarrier_wait(bar, bar_idx, phase)          try_wait.parity in a loop until it has
#   fence_proxy_async()                         fence.proxy.async.shared::cta
#   fence_barrier_init()                        fence.mbarrier_init.release.cluster
#   tma_load(dst, dst_idx, bar, bar_idx, tmap, c0, ..., c{rank-1}) [attrs: rank, bytes]
#       cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes:
#       the box at coordinates c (elements, the tensor map's dimension order) into shared
#       memory, completing `bytes` on the mbarrier; tmap a TENSOR_MAP parameter
#   tma_store(tmap, src, src_idx, c0, ..., c{rank-1}) [attrs: rank, bytes]
#       cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group: the reverse
#   tma_store_commit()              cp.async.bulk.commit_group
#   tma_store_wait() [attrs: n]     cp.async.bulk.wait_group.read n: shared memory of all
#                                   but the newest n committed groups read
#   wgmma(d, d_regs, a, a_idx, b, b_idx) [attrs: ptx, a_desc, b_desc, trans_a, trans_b]
#       wgmma.mma_async (ptx: the spelling): D (the registers d_regs of d, in place) +=
#       A * B^T, A and B read by 64-bit descriptors: the shared address of a[a_idx]
#       (b[b_idx]) >> 4 in bits 0-13, OR the attr's other bits (LBO, SBO, swizzle).
#       a_desc None: A from registers (RS), a the register array and a_idx its register
#       indices; trans_a / trans_b 1 for an MN-major tile (16-bit types only)
#   wgmma_fence() / wgmma_commit()  wgmma.fence / wgmma.commit_group (.sync.aligned)
#   wgmma_wait() [attrs: n]         wgmma.wait_group.sync.aligned n
#   wgmma_fence_operand(d, d_regs)  an empty asm that reads and writes the registers, so the
#                                   compiler keeps their accesses on their side of it
#   named_barrier(id, threads)          bar.sync id, threads: wait until `threads` threads
#                                       (whole warps) arrived at hardware barrier `id`
#   named_barrier_arrive(id, threads)   bar.arrive id, threads: count this warp, don't wait
#   setmaxnreg() [attrs: n, inc]        setmaxnreg.{inc,dec}.sync.aligned.u32 n (sm_90a;
#                                       the warpgroup's register limit)
#
# Thread-block clusters (kernel/cluster.py). A block's rank in its cluster (`cta`) is an
# Int32, x fastest; a multicast mask is a UInt16 with bit r for the block of rank r.
#   cluster_special() [attrs: name] -> Int32   a cluster special register, defined at the
#       top like `special`: clusterid.{x,y,z} (the cluster in the grid), nclusterid.*
#       (clusters in the grid), cluster_ctaid.* (the block in its cluster), cluster_nctaid.*
#       (blocks per cluster), cluster_ctarank, cluster_nctarank
#   cluster_arrive() [attrs: relaxed]   barrier.cluster.arrive.release.aligned (relaxed:
#                                       .relaxed instead of .release, orders no memory)
#   cluster_wait()                      barrier.cluster.wait.acquire.aligned: every thread of
#                                       the cluster has arrived
#   mbarrier_arrive_cluster(bar, bar_idx, cta)   mapa.shared::cluster, then
#       mbarrier.arrive.shared::cluster (release, CTA scope): one arrival, per executing thread,
#       on the mbarrier at bar's offset in the cluster's block of rank cta
#   tma_load_multicast(dst, dst_idx, bar, bar_idx, tmap, mask, c0, ..., c{rank-1})
#       [attrs: rank, bytes]   tma_load with .multicast::cluster: the box lands at dst's
#       offset in each block of the mask and completes `bytes` on the mbarrier at bar's
#       offset in each (PTX advises sm_90a for performance; sm_90 assembles it)
SM90_OPS = frozenset("mbarrier_arrive_expect_tx mbarrier_try_wait mbarrier_wait fence_proxy_async "
                     "fence_barrier_init tma_load tma_store tma_store_commit tma_store_wait "
                     "wgmma wgmma_fence wgmma_commit wgmma_wait setmaxnreg "
                     "cluster_special cluster_arrive cluster_wait mbarrier_arrive_cluster "
                     "tma_load_multicast".split())
SM90A_OPS = frozenset("wgmma wgmma_fence wgmma_commit wgmma_wait setmaxnreg".split())  # and sm_90
PURE_OPS = frozenset("add sub mul div mod neg and or xor shl shr not lt le gt ge eq ne min max "
                     "abs select cast call special cluster_special offset addr".split())


def format_kernel(kernel):
    """The IR as readable text."""
    lines = [f"kernel {kernel.name}(" + ", ".join(f"{p.name}: {p.type}" for p in kernel.params)
             + ")"]
    for a in kernel.arrays:
        lines.append(f"  array {a!r}: {a.elem} {a.space}")
    _format_body(kernel.body, lines, "  ")
    return "\n".join(lines)


def _fmt(x):
    if isinstance(x, tuple):
        return "(" + ", ".join(_fmt(e) for e in x) + ")"
    return repr(x)


def _format_body(body, lines, ind):
    for s in body:
        if isinstance(s, Instr):
            attrs = "".join(f" {k}={v!r}" for k, v in s.attrs.items())
            lhs = f"{s.result!r}: {s.result.type} = " if s.result is not None else ""
            lines.append(f"{ind}{lhs}{s.op}({', '.join(_fmt(a) for a in s.args)}){attrs}")
        elif isinstance(s, For):
            unroll = f" unroll={s.unroll}" if s.unroll is not None else ""
            lines.append(f"{ind}for {s.var!r} in range({_fmt(s.start)}, {_fmt(s.stop)}, "
                         f"{_fmt(s.step)}){unroll}:")
            _format_body(s.body, lines, ind + "  ")
        elif isinstance(s, If):
            lines.append(f"{ind}if {_fmt(s.cond)}:")
            _format_body(s.then, lines, ind + "  ")
            if s.orelse:
                lines.append(f"{ind}else:")
                _format_body(s.orelse, lines, ind + "  ")
        elif isinstance(s, While):
            lines.append(f"{ind}while:")
            _format_body(s.cond_body, lines, ind + "    ")
            lines.append(f"{ind}  test {_fmt(s.cond)}")
            _format_body(s.body, lines, ind + "  ")


def _operands(stmt):
    if isinstance(stmt, Instr):
        return stmt.args
    if isinstance(stmt, For):
        return (stmt.start, stmt.stop, stmt.step)
    if isinstance(stmt, If):
        return (stmt.cond,)
    if isinstance(stmt, While):
        return (stmt.cond,)
    return ()


def _children(stmt):
    if isinstance(stmt, For):
        return (stmt.body,)
    if isinstance(stmt, If):
        return (stmt.then, stmt.orelse)
    if isinstance(stmt, While):
        return (stmt.cond_body, stmt.body)
    return ()


def eliminate_dead_code(kernel):
    """Drop pure instructions whose results are never used (in place)."""
    while True:
        used = set()

        def count(body):
            for s in body:
                for a in _operands(s):
                    if isinstance(a, Value):
                        used.add(a.id)
                for child in _children(s):
                    count(child)
        count(kernel.body)
        removed = [False]

        def sweep(body):
            keep = []
            for s in body:
                if isinstance(s, Instr) and s.op in PURE_OPS and s.result is not None \
                        and s.result.id not in used:
                    removed[0] = True
                    continue
                for child in _children(s):
                    child[:] = sweep(child)
                keep.append(s)
            return keep
        kernel.body[:] = sweep(kernel.body)
        if not removed[0]:
            return kernel


def instructions(body):
    """Every Instr of a body, nested ones included, in order."""
    for s in body:
        if isinstance(s, Instr):
            yield s
        for child in _children(s):
            yield from instructions(child)

"""Hopper (sm_90): mbarriers, async-proxy fences, TMA, wgmma, warp specialization.

An mbarrier is a UInt64 element (bar, bar_idx) of a shared array; count, tx
bytes and phase are Int32 operands. The device library's side is
`device/hopper.py` and `device/wgmma.py`; the atoms `atom/arch/tma.py` and
`atom/arch/sm90.py`. Each class's C++ and CPU rules follow it
(`lowering.py` states their contract); the CPU semantics, from the PTX
ISA, are `backend/cpu/tma.py` (mbarriers, TMA), `wgmma.py` and
`named_barrier.py`.
"""
from .. import types as T
from .instr import Instr
from .lowering import lowering


def memory_asm_with(w, ind, text, inputs):
    """asm volatile `text` reading the (constraint, C++) `inputs`, ordering memory."""
    w.emit(ind, f'asm volatile("{text};\\n" :: ' + ", ".join(f'"{c}"({x})' for c, x in inputs)
                + ' : "memory");')


def _nothing(b, s, mask):
    """The CPU rule of an instruction with nothing to do there."""


class MbarrierInit(Instr):
    """mbarrier.init: expect `count` arrivals."""
    op = "mbarrier_init"
    operands = ("bar", "bar_idx", "count")


@lowering("cuda", MbarrierInit)
def _emit_mbarrier_init(w, s, ind, decl):
    w.emit(ind, f'asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\\n" :: '
                f'"r"({w.smem_addr(s.bar, s.bar_idx)}), "r"({w.operand(s.count)}) : "memory");')


@lowering("cpu", MbarrierInit)
def _run_mbarrier_init(b, s, mask):
    b.hopper.init(s, mask)


class MbarrierArrive(Instr):
    """mbarrier.arrive, one per executing thread."""
    op = "mbarrier_arrive"
    operands = ("bar", "bar_idx")


@lowering("cuda", MbarrierArrive)
def _emit_mbarrier_arrive(w, s, ind, decl):
    w.emit(ind, 'asm volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }\\n" '
                f':: "r"({w.smem_addr(s.bar, s.bar_idx)}) : "memory");')


@lowering("cpu", MbarrierArrive)
def _run_mbarrier_arrive(b, s, mask):
    b.hopper.arrive(s, mask)


class MbarrierArriveExpectTx(Instr):
    """mbarrier.arrive.expect_tx: `tx` more bytes to come, and arrive."""
    op = "mbarrier_arrive_expect_tx"
    operands = ("bar", "bar_idx", "tx")
    arch = "sm_90"


@lowering("cuda", MbarrierArriveExpectTx)
def _emit_mbarrier_arrive_expect_tx(w, s, ind, decl):
    w.emit(ind, 'asm volatile("{ .reg .b64 st; mbarrier.arrive.expect_tx.shared::cta.b64 st, '
                f'[%0], %1; }}\\n" :: "r"({w.smem_addr(s.bar, s.bar_idx)}), '
                f'"r"({w.operand(s.tx)}) : "memory");')


@lowering("cpu", MbarrierArriveExpectTx)
def _run_mbarrier_arrive_expect_tx(b, s, mask):
    b.hopper.arrive(s, mask, tx=True)


_TRY_WAIT = ("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
             "selp.u32 %0, 1, 0, p; }\\n")


class MbarrierTryWait(Instr):
    """mbarrier.try_wait.parity: whether the phase of parity `phase` has completed."""
    op = "mbarrier_try_wait"
    operands = ("bar", "bar_idx", "phase")
    arch = "sm_90"

    def result_type(self):
        return T.Bool


@lowering("cuda", MbarrierTryWait)
def _emit_mbarrier_try_wait(w, s, ind, decl):
    done = w.name(s.result) + "_u"
    w.emit(ind, f"uint32_t {done};")
    w.emit(ind, f'asm volatile("{_TRY_WAIT}" : "=r"({done}) : '
                f'"r"({w.smem_addr(s.bar, s.bar_idx)}), "r"({w.operand(s.phase)}) : "memory");')
    w.emit(ind, f"{decl}{done} != 0;")


@lowering("cpu", MbarrierTryWait)
def _run_mbarrier_try_wait(b, s, mask):
    b.set_result(s, b.hopper.try_wait(s, mask), mask)


class MbarrierWait(Instr):
    """try_wait.parity in a loop until the phase of parity `phase` has completed."""
    op = "mbarrier_wait"
    operands = ("bar", "bar_idx", "phase")
    arch = "sm_90"


@lowering("cuda", MbarrierWait)
def _emit_mbarrier_wait(w, s, ind, decl):
    w.emit(ind, "{")
    w.emit(ind + "  ", f"const uint32_t bar = {w.smem_addr(s.bar, s.bar_idx)};")
    w.emit(ind + "  ", "uint32_t done;")
    w.emit(ind + "  ", f'do {{ asm volatile("{_TRY_WAIT}" : "=r"(done) : "r"(bar), '
                       f'"r"({w.operand(s.phase)}) : "memory"); }} while (!done);')
    w.emit(ind, "}")


@lowering("cpu", MbarrierWait)
def _run_mbarrier_wait(b, s, mask):
    b.hopper.wait(s, mask)


class FenceProxyAsync(Instr):
    """fence.proxy.async.shared::cta."""
    op = "fence_proxy_async"
    arch = "sm_90"


@lowering("cuda", FenceProxyAsync)
def _emit_fence_proxy_async(w, s, ind, decl):
    w.memory_asm(ind, "fence.proxy.async.shared::cta")


@lowering("cpu", FenceProxyAsync)
def _run_fence_proxy_async(b, s, mask):
    b.hopper.fence_proxy_async(s, mask)


class FenceBarrierInit(Instr):
    """fence.mbarrier_init.release.cluster."""
    op = "fence_barrier_init"
    arch = "sm_90"


@lowering("cuda", FenceBarrierInit)
def _emit_fence_barrier_init(w, s, ind, decl):
    w.memory_asm(ind, "fence.mbarrier_init.release.cluster")


# an mbarrier is initialized, for every block of the batch, when mbarrier_init runs
lowering("cpu", FenceBarrierInit)(_nothing)


def tensor_map(w, x):
    """A TENSOR_MAP parameter's address, as PTX takes it."""
    return f"reinterpret_cast<uint64_t>(&{w.operand(x)})"


class TmaLoad(Instr):
    """cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes:
    the box at coordinates `coords` (elements, the tensor map's dimension
    order) into shared memory, completing `bytes` on the mbarrier; tmap a
    TENSOR_MAP parameter."""
    op = "tma_load"
    operands = ("dst", "dst_idx", "bar", "bar_idx", "tmap", "*coords")
    attributes = {"rank": 1, "bytes": 0}
    arch = "sm_90"


@lowering("cuda", TmaLoad)
def _emit_tma_load(w, s, ind, decl):
    r = s.rank
    text = (f"cp.async.bulk.tensor.{r}d.shared::cluster.global.mbarrier::complete_tx::bytes "
            f"[%0], [%1, {w.brace(3, r)}], [%2]")
    memory_asm_with(w, ind, text, [("r", w.smem_addr(s.dst, s.dst_idx)),
                                   ("l", tensor_map(w, s.tmap)),
                                   ("r", w.smem_addr(s.bar, s.bar_idx))]
                    + [("r", w.operand(c)) for c in s.coords])


@lowering("cpu", TmaLoad)
def _run_tma_load(b, s, mask):
    b.hopper.load(s, mask)


class TmaPrefetchDescriptor(Instr):
    """prefetch.tensormap: bring the tensor map of `tmap` (a TENSOR_MAP
    parameter) into the cache ahead of its first copy."""
    op = "tma_prefetch_descriptor"
    operands = ("tmap",)
    arch = "sm_90"


@lowering("cuda", TmaPrefetchDescriptor)
def _emit_tma_prefetch_descriptor(w, s, ind, decl):
    memory_asm_with(w, ind, "prefetch.tensormap [%0]", [("l", tensor_map(w, s.tmap))])


lowering("cpu", TmaPrefetchDescriptor)(_nothing)      # a cache hint: no effect on values


class TmaStore(Instr):
    """cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group: the reverse."""
    op = "tma_store"
    ptx = "cp.async.bulk.tensor.{r}d.global.shared::cta.bulk_group"     # {r}: the rank
    operands = ("tmap", "src", "src_idx", "*coords")
    writes = "tmap"
    attributes = {"rank": 1, "bytes": 0}
    arch = "sm_90"


class TmaReduceAdd(TmaStore):
    """cp.reduce.async.bulk.tensor.{rank}d.global.shared::cta.add.tile.bulk_group:
    a TMA store that adds the shared tile to the global one, each element
    atomically (the global tile's other writers may add too)."""
    op = "tma_reduce_add"
    ptx = "cp.reduce.async.bulk.tensor.{r}d.global.shared::cta.add.tile.bulk_group"


@lowering("cuda", TmaStore, TmaReduceAdd)
def _emit_tma_store(w, s, ind, decl):
    r = s.rank
    text = f"{s.ptx.format(r=r)} [%0, {w.brace(2, r)}], [%1]"
    memory_asm_with(w, ind, text, [("l", tensor_map(w, s.tmap)),
                                   ("r", w.smem_addr(s.src, s.src_idx))]
                    + [("r", w.operand(c)) for c in s.coords])


@lowering("cpu", TmaStore)
def _run_tma_store(b, s, mask):
    b.hopper.store(s, mask)


@lowering("cpu", TmaReduceAdd)
def _run_tma_reduce_add(b, s, mask):
    b.hopper.store(s, mask, add=True)


class TmaStoreCommit(Instr):
    """cp.async.bulk.commit_group."""
    op = "tma_store_commit"
    arch = "sm_90"


@lowering("cuda", TmaStoreCommit)
def _emit_tma_store_commit(w, s, ind, decl):
    w.memory_asm(ind, "cp.async.bulk.commit_group")


@lowering("cpu", TmaStoreCommit)
def _run_tma_store_commit(b, s, mask):
    b.hopper.commit(mask)


class TmaStoreWait(Instr):
    """cp.async.bulk.wait_group.read n: shared memory of all but the newest n
    committed groups read."""
    op = "tma_store_wait"
    attributes = {"n": 0}
    arch = "sm_90"


@lowering("cuda", TmaStoreWait)
def _emit_tma_store_wait(w, s, ind, decl):
    w.memory_asm(ind, f"cp.async.bulk.wait_group.read {int(s.n)}")


@lowering("cpu", TmaStoreWait)
def _run_tma_store_wait(b, s, mask):
    b.hopper.store_wait(s, mask)


class Wgmma(Instr):
    """wgmma.mma_async (ptx: the spelling): D (the registers d_regs of d, in
    place) += A * B^T, A and B read by 64-bit descriptors: the shared address
    of a[a_idx] (b[b_idx]) >> 4 in bits 0-13, OR the attr's other bits (LBO,
    SBO, swizzle). a_desc None: A from registers (RS), a the register array
    and a_idx its register indices; trans_a / trans_b 1 for an MN-major tile
    (16-bit types only)."""
    op = "wgmma"
    operands = ("d", "d_regs", "a", "a_idx", "b", "b_idx")
    attributes = {"ptx": None, "a_desc": None, "b_desc": None, "trans_a": 0, "trans_b": 0}
    arch = "sm_90a"


@lowering("cuda", Wgmma)
def _emit_wgmma(w, s, ind, decl):
    regs = w.regs(s.d, s.d_regs)
    c, n = w.reg_constraint(s.d), len(regs)
    rs = s.a_desc is None
    a_regs = w.regs(s.a, s.a_idx) if rs else []
    descs = []
    for name, base, idx, bits in (("da", s.a, s.a_idx, s.a_desc), ("db", s.b, s.b_idx, s.b_desc)):
        if bits is not None:
            descs.append(f"const uint64_t {name} = {bits:#x}ull | static_cast<uint64_t>"
                         f"(({w.smem_addr(base, idx)} & 0x3FFFFu) >> 4);")
    # after d: A (4 b32 registers, or a descriptor), B's descriptor, scale-d (a predicate:
    # 1, accumulate), imm-scale-a, imm-scale-b (1), and for 16-bit inputs the transpose
    # immediates: imm-trans-a (SS only) and imm-trans-b (1 for MN-major)
    trans = ""
    if s.ptx.endswith(("f16.f16", "bf16.bf16")):
        trans = (f", {int(s.trans_a)}" if not rs else "") + f", {int(s.trans_b)}"
    a_text = w.brace(n, len(a_regs)) if rs else f"%{n}"
    na = len(a_regs) if rs else 1
    text = (f"{{ .reg .pred p; setp.ne.b32 p, %{n + na + 1}, 0; {s.ptx} {w.brace(0, n)}, "
            f"{a_text}, %{n + na}, p, 1, 1{trans}; }}")
    inputs = [f'"{w.reg_constraint(s.a)}"({r})' for r in a_regs] if rs else ['"l"(da)']
    inputs += ['"l"(db)', '"r"(1)']
    w.emit(ind, "{")
    for line in descs:
        w.emit(ind + "  ", line)
    w.emit(ind + "  ", f'asm volatile("{text}\\n" : ' + ", ".join(f'"+{c}"({r})' for r in regs)
           + " : " + ", ".join(inputs) + ' : "memory");')
    w.emit(ind, "}")


@lowering("cpu", Wgmma)
def _run_wgmma(b, s, mask):
    b.warpgroups.wgmma(s, mask)


class WgmmaFence(Instr):
    """wgmma.fence.sync.aligned."""
    op = "wgmma_fence"
    arch = "sm_90a"


@lowering("cuda", WgmmaFence)
def _emit_wgmma_fence(w, s, ind, decl):
    w.memory_asm(ind, "wgmma.fence.sync.aligned")


class WgmmaCommit(Instr):
    """wgmma.commit_group.sync.aligned."""
    op = "wgmma_commit"
    arch = "sm_90a"


@lowering("cuda", WgmmaCommit)
def _emit_wgmma_commit(w, s, ind, decl):
    w.memory_asm(ind, "wgmma.commit_group.sync.aligned")


class WgmmaWait(Instr):
    """wgmma.wait_group.sync.aligned n."""
    op = "wgmma_wait"
    attributes = {"n": 0}
    arch = "sm_90a"


@lowering("cuda", WgmmaWait)
def _emit_wgmma_wait(w, s, ind, decl):
    w.memory_asm(ind, f"wgmma.wait_group.sync.aligned {int(s.n)}")


class WgmmaFenceOperand(Instr):
    """An empty asm that reads and writes the registers, so the compiler keeps
    their accesses on their side of it."""
    op = "wgmma_fence_operand"
    operands = ("d", "d_regs")


@lowering("cuda", WgmmaFenceOperand)
def _emit_wgmma_fence_operand(w, s, ind, decl):
    d, dw = s.d, s.d_regs
    c = w.reg_constraint(d)
    if len(dw) > 2 and all(isinstance(i, int) for i in dw) and \
            all(b - a == dw[1] - dw[0] for a, b in zip(dw, dw[1:])):
        # a run of registers: one loop, unrolled by NVRTC, instead of a line each
        base, first, step = w.operand(d), dw[0], dw[1] - dw[0]
        w.emit(ind, "#pragma unroll")
        w.emit(ind, f"for (int r = 0; r < {len(dw)}; ++r) "
                    f'asm volatile("" : "+{c}"({base}[{first} + r * {step}]) :: "memory");')
        return
    for r in w.regs(d, dw):
        w.emit(ind, f'asm volatile("" : "+{c}"({r}) :: "memory");')


# a wgmma completes when issued on the CPU (backend/cpu/wgmma.py): nothing to fence or wait for
lowering("cpu", WgmmaFence, WgmmaCommit, WgmmaWait, WgmmaFenceOperand)(_nothing)


class NamedBarrier(Instr):
    """bar.sync id, threads: wait until `threads` threads (whole warps)
    arrived at hardware barrier `id`."""
    op = "named_barrier"
    operands = ("id", "threads")


class NamedBarrierArrive(Instr):
    """bar.arrive id, threads: count this warp, don't wait."""
    op = "named_barrier_arrive"
    operands = ("id", "threads")


@lowering("cuda", NamedBarrier, NamedBarrierArrive)
def _emit_named_barrier(w, s, ind, decl):
    op = "arrive" if isinstance(s, NamedBarrierArrive) else "sync"
    w.emit(ind, f'asm volatile("bar.{op} %0, %1;\\n" :: "r"({w.operand(s.id)}), '
                f'"r"({w.operand(s.threads)}) : "memory");')


@lowering("cpu", NamedBarrier)
def _run_named_barrier(b, s, mask):
    b.named.sync(s, mask)


@lowering("cpu", NamedBarrierArrive)
def _run_named_barrier_arrive(b, s, mask):
    b.named.arrive(s, mask)


class SetMaxNReg(Instr):
    """setmaxnreg.{inc,dec}.sync.aligned.u32 n: the warpgroup's register limit."""
    op = "setmaxnreg"
    attributes = {"n": 0, "inc": True}
    arch = "sm_90a"


@lowering("cuda", SetMaxNReg)
def _emit_setmaxnreg(w, s, ind, decl):
    w.memory_asm(ind, f"setmaxnreg.{'inc' if s.inc else 'dec'}.sync.aligned.u32 {int(s.n)}")


lowering("cpu", SetMaxNReg)(_nothing)       # registers are not a limit on the CPU

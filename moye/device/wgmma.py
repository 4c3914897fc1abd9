"""Hopper's warpgroup MMA in kernels: gemm with a wgmma TiledMMA, and the
builtins that order its asynchronous work.

`gemm(tiled_mma, D, A, B, D)` takes a thread's partitions: A (SS) and B
are shared-memory tiles, (V, M, K) and (V, N, K) with V one instruction's
(64, k) or (N, k) tile, in a layout a matrix descriptor can express, K- or
MN-major as the op says (see moye.atom.arch.sm90: gmma_smem_layout); with
an RS op A is a register fragment (partition_fragment_A), four b32
registers per instruction. D is the register fragment of
partition_fragment_C, holding each thread's accumulators in PTX order. It
emits wgmma.fence, one wgmma.mma_async per (m, n, k) with descriptors made
from each tile's shared address and the fields derived from its layout
(D += A * B^T: the accumulator is read and written in place), and
wgmma.commit_group. Read D only after wgmma_wait(0); clear it before the
first gemm. The warpgroup's 128 threads all execute it.

IR: wgmma(d, d_regs, a, a_idx, b, b_idx) with attrs ptx, a_desc, b_desc
(the descriptors' bits but the address), trans_a, trans_b (the transpose
immediates: 1 for an MN-major operand); for RS a_desc is None and a_idx the
tuple of A's registers in a (like d_regs).
"""
from .. import types as T
from ..atom.arch.sm90 import descriptor_bits, gmma_descriptor
from ..layout import size
from ..layout.swizzle import ComposedLayout
from ..errors import MoyeError
from .fragments import gemm_extents, register_lists
from ..compiler.tracer import KernelError, coerce, divisor_of, current


def wgmma_fence():
    """Order this warpgroup's register and shared-memory accesses before the
    wgmma that follow (wgmma.fence.sync.aligned; CuTe: warpgroup_arrive).
    gemm emits one itself. sm_90a."""
    current().instr("wgmma_fence", ())


def wgmma_commit():
    """Close the group of this warpgroup's issued wgmma
    (wgmma.commit_group.sync.aligned; CuTe: warpgroup_commit_batch). gemm
    emits one itself. sm_90a."""
    current().instr("wgmma_commit", ())


def wgmma_wait(n=0):
    """Wait until all but the newest `n` committed wgmma groups have completed
    (wgmma.wait_group.sync.aligned n; CuTe: warpgroup_wait<N>); their
    accumulators may then be read and their shared tiles overwritten. On the
    CPU backend a wgmma completes when issued, so this waits for nothing.
    sm_90a."""
    if not isinstance(n, int) or n < 0:
        raise KernelError(f"wgmma_wait: n must be a static int >= 0, got {n!r}")
    b = current()
    b.instr("wgmma_wait", (), n=n)
    _fence_accumulators(b)


def wgmma_fence_operand(fragment):
    """Keep the compiler from moving this warpgroup's accesses to a register
    fragment of 32-bit values (an accumulator) across this point: an empty
    asm that reads and writes each of its registers (CuTe:
    warpgroup_fence_operand). gemm fences the accumulators it issued
    before; fence one that a later gemm accumulates into, once cleared, so
    that the clearing is not sunk behind the wgmma issued between. Nothing
    on the CPU backend.
        acc2[i] = 0.0 for each i; moye.wgmma_fence_operand(acc2)
        gemm(mma, acc1, tA, tB, acc1); gemm(mma, acc2, tA2, tB2, acc2)"""
    e = getattr(fragment, "engine", None)
    if e is None or e.space != "local" or e.dtype.bits != 32:
        raise KernelError(f"wgmma_fence_operand: the fragment must be a register fragment of "
                          f"32-bit values, got {fragment!r}")
    words = tuple(sorted({fragment.layout(i) for i in range(size(fragment))}))
    if not all(isinstance(w, int) for w in words):
        raise KernelError(f"wgmma_fence_operand: the fragment's layout {fragment.layout} "
                          "is not static")
    current().instr("wgmma_fence_operand", (e.base, words))


def _fence_accumulators(b):
    """Keep the compiler from moving accesses to the accumulators of this
    kernel's wgmma across the wait (CuTe: warpgroup_fence_operand)."""
    for base, words in getattr(b, "wgmma_accumulators", {}).values():
        b.instr("wgmma_fence_operand", (base, words))


def _descriptors(arr, rows, k, dtype, what, name, major):
    """Per (row block, k block) of a shared (V, R, K) partition: (base, start
    index, descriptor bits)."""
    e = arr.engine
    if e.space != "shared":
        raise KernelError(f"{what}: {name} must be a shared-memory tile (the wgmma op reads it "
                          f"by descriptor), got {e.space} memory"
                          + (" (for A in registers use an RS op: wgmma_op(..., a_source='RS'))"
                             if name == "A" else ""))
    if e.dtype.bits != dtype.bits:
        raise KernelError(f"{what}: {name} holds {e.dtype}, the op multiplies {dtype}")
    lay = arr.layout
    outer, offset, inner = (lay.outer, lay.offset, lay.inner) if isinstance(lay, ComposedLayout) \
        else (None, 0, lay)
    if not isinstance(offset, int):
        raise KernelError(f"{what}: {name}'s layout {lay} has a dynamic offset inside its "
                          "swizzle; index the stages of a ring by the array, not its layout")
    out = {}
    for r in range(size(inner, 1)):
        for kk in range(size(inner, 2)):
            at = offset + inner[1](r) + inner[2](kk)
            tile = ComposedLayout(outer, at, inner[0]) if outer is not None else inner[0]
            try:
                start, lbo, sbo, width = gmma_descriptor(tile, dtype, rows, k, what, major)
            except MoyeError as err:
                raise KernelError(f"{str(err)} ({name}, block ({r},{kk}))") from None
            if outer is None:
                start += at
            period = 8 * width if width > 16 else 16
            ebytes = dtype.bits // 8
            if e.align % period or (divisor_of(e.offset) * ebytes) % period:
                raise KernelError(
                    f"{what}: {name} must start {period}-byte aligned in shared memory (its "
                    f"swizzle's period; make it with moye.shared_array(dtype, layout, "
                    f"align={max(period, 128)})); its array is {e.align}-byte aligned, offset "
                    f"{e.offset!r} elements")
            idx = e.offset + start
            out[r, kk] = (e.base, coerce(idx, T.Int32) if not isinstance(idx, int) else idx,
                          descriptor_bits(lbo, sbo, width))
    return out


def wgmma_atom(atom, d, a, b, c):
    """gemm with a wgmma atom: D (V, M, N) += A (V, M, K) * B (V, N, K)^T."""
    op = atom.op
    what = f"gemm({op})"
    M, N, K = gemm_extents(what, d, a, b, c, "partition_fragment_C")
    if c.engine.base is not d.engine.base or repr(c.layout) != repr(d.layout) or \
            repr(c.engine.offset) != repr(d.engine.offset):
        raise KernelError(f"{what}: wgmma accumulates into D in place; call "
                          "gemm(mma, D, A, B, D) (clear D first to start from zero)")
    _, n, k = op.shape_mnk
    info = op.info
    if info["a_source"] == "RS":
        if a.engine.space != "local":
            raise KernelError(f"{what}: the op takes A from registers (RS); A must be a register "
                              f"fragment (thr.partition_fragment_A(sA), then copy sA into it), "
                              f"got {a.engine.space} memory with layout {a.layout}")
        if a.engine.dtype.bits != atom.a_type.bits:
            raise KernelError(f"{what}: A holds {a.engine.dtype}, the op multiplies "
                              f"{atom.a_type}")
        if size(a, 0) != size(op.a_layout, 1):
            raise KernelError(f"{what}: A's fragment {a.layout} holds {size(a, 0)} values per "
                              f"instruction; the op's A layout {op.a_layout} gives each thread "
                              f"{size(op.a_layout, 1)} (make it with partition_fragment_A)")
        a_regs = register_lists(a, *info["registers"]["a"], what, "A")
        a_desc = {(m, kk): (a_regs[m + M * kk][0], a_regs[m + M * kk][1], None)
                  for m in range(M) for kk in range(K)}
    else:
        a_desc = _descriptors(a, 64, k, atom.a_type, what, "A", info["a_major"])
    b_desc = _descriptors(b, n, k, atom.b_type, what, "B", info["b_major"])
    d_regs = register_lists(d, *info["registers"]["d"], what, "D")
    trans = {"trans_a": int(info["a_major"] == "MN"), "trans_b": int(info["b_major"] == "MN")}
    bld = current()
    accs = bld.__dict__.setdefault("wgmma_accumulators", {})
    for base, words in d_regs.values():
        accs[(id(base), words)] = (base, words)
    _fence_accumulators(bld)
    if info["a_source"] == "RS":
        # A's registers are written before the fence (the ISA asks it), not sunk past it
        for base, words in a_regs.values():
            bld.instr("wgmma_fence_operand", (base, words))
    bld.instr("wgmma_fence", ())
    for kk in range(K):
        for m in range(M):
            for nn in range(N):
                da, dw = d_regs[m + M * nn]
                aa, ai, ahi = a_desc[m, kk]
                ba, bi, bhi = b_desc[nn, kk]
                bld.instr("wgmma", (da, dw, aa, ai, ba, bi), ptx=op.ptx, a_desc=ahi, b_desc=bhi,
                          **trans)
    bld.instr("wgmma_commit", ())


__all__ = ["wgmma_fence", "wgmma_commit", "wgmma_wait", "wgmma_fence_operand"]

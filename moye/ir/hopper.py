"""Hopper (sm_90): mbarriers, async-proxy fences, TMA, wgmma, warp specialization.

An mbarrier is a UInt64 element (bar, bar_idx) of a shared array; count, tx
bytes and phase are Int32 operands. The device library's side is
`device/hopper.py` and `device/wgmma.py`; the atoms `atom/arch/tma.py` and
`atom/arch/sm90.py`.
"""
from .. import types as T
from .instr import Instr


class MbarrierInit(Instr):
    """mbarrier.init: expect `count` arrivals."""
    op = "mbarrier_init"
    operands = ("bar", "bar_idx", "count")


class MbarrierArrive(Instr):
    """mbarrier.arrive, one per executing thread."""
    op = "mbarrier_arrive"
    operands = ("bar", "bar_idx")


class MbarrierArriveExpectTx(Instr):
    """mbarrier.arrive.expect_tx: `tx` more bytes to come, and arrive."""
    op = "mbarrier_arrive_expect_tx"
    operands = ("bar", "bar_idx", "tx")
    arch = "sm_90"


class MbarrierTryWait(Instr):
    """mbarrier.try_wait.parity: whether the phase of parity `phase` has completed."""
    op = "mbarrier_try_wait"
    operands = ("bar", "bar_idx", "phase")
    arch = "sm_90"

    def result_type(self):
        return T.Bool


class MbarrierWait(Instr):
    """try_wait.parity in a loop until the phase of parity `phase` has completed."""
    op = "mbarrier_wait"
    operands = ("bar", "bar_idx", "phase")
    arch = "sm_90"


class FenceProxyAsync(Instr):
    """fence.proxy.async.shared::cta."""
    op = "fence_proxy_async"
    arch = "sm_90"


class FenceBarrierInit(Instr):
    """fence.mbarrier_init.release.cluster."""
    op = "fence_barrier_init"
    arch = "sm_90"


class TmaLoad(Instr):
    """cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes:
    the box at coordinates `coords` (elements, the tensor map's dimension
    order) into shared memory, completing `bytes` on the mbarrier; tmap a
    TENSOR_MAP parameter."""
    op = "tma_load"
    operands = ("dst", "dst_idx", "bar", "bar_idx", "tmap", "*coords")
    attributes = {"rank": 1, "bytes": 0}
    arch = "sm_90"


class TmaStore(Instr):
    """cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group: the reverse."""
    op = "tma_store"
    operands = ("tmap", "src", "src_idx", "*coords")
    writes = "tmap"
    attributes = {"rank": 1, "bytes": 0}
    arch = "sm_90"


class TmaStoreCommit(Instr):
    """cp.async.bulk.commit_group."""
    op = "tma_store_commit"
    arch = "sm_90"


class TmaStoreWait(Instr):
    """cp.async.bulk.wait_group.read n: shared memory of all but the newest n
    committed groups read."""
    op = "tma_store_wait"
    attributes = {"n": 0}
    arch = "sm_90"


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


class WgmmaFence(Instr):
    """wgmma.fence.sync.aligned."""
    op = "wgmma_fence"
    arch = "sm_90a"


class WgmmaCommit(Instr):
    """wgmma.commit_group.sync.aligned."""
    op = "wgmma_commit"
    arch = "sm_90a"


class WgmmaWait(Instr):
    """wgmma.wait_group.sync.aligned n."""
    op = "wgmma_wait"
    attributes = {"n": 0}
    arch = "sm_90a"


class WgmmaFenceOperand(Instr):
    """An empty asm that reads and writes the registers, so the compiler keeps
    their accesses on their side of it."""
    op = "wgmma_fence_operand"
    operands = ("d", "d_regs")


class NamedBarrier(Instr):
    """bar.sync id, threads: wait until `threads` threads (whole warps)
    arrived at hardware barrier `id`."""
    op = "named_barrier"
    operands = ("id", "threads")


class NamedBarrierArrive(Instr):
    """bar.arrive id, threads: count this warp, don't wait."""
    op = "named_barrier_arrive"
    operands = ("id", "threads")


class SetMaxNReg(Instr):
    """setmaxnreg.{inc,dec}.sync.aligned.u32 n: the warpgroup's register limit."""
    op = "setmaxnreg"
    attributes = {"n": 0, "inc": True}
    arch = "sm_90a"

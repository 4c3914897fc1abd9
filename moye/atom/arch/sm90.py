"""Hopper's warpgroup MMA, wgmma.mma_async: D (64 x N) += A (64 x K) * B,
computed by the 128 threads of a warpgroup, B always from shared memory and
A from shared memory ("SS") or registers ("RS").

`wgmma_op(n, a_type, b_type, c_type, ...)` gives the op for any valid N
(8 to 256 in steps of 8); the common ones are named constants too.

Thread-value layouts, as CuTe's GMMA traits describe them:
- C/D: warp w of the warpgroup owns rows 16w..16w+15, laid out like
  mma.m16n8's accumulator and repeated every 8 columns (PTX ISA, "Matrix
  Fragments for wgmma.mma_async.m64nNk16", Figure "register fragment layout
  for accumulator matrix D"):
  row = 16w + groupID (+8 for values 2,3 of each 4), col = 8*(i/4) + 2*threadID_in_group + (i&1).
- A from registers: warp w owns rows 16w..16w+15 with mma.m16n8k16's (16-bit)
  or mma.m16n8k8's (tf32) A fragment.
- A or B in shared memory: not distributed over threads; every thread
  "holds" the whole (64,K) or (N,K) tile (thread stride 0), as CuTe says.
  Its shared-memory layout (K- or MN-major, swizzle) is the tile's business.
"""
from ...errors import MoyeError
from ...layout import Layout
from ...types import BFloat16, Float16, Float32, TFloat32, as_element_type
from ..mma import MMAOp
from .mma_sync import ptx_type, type_letters

WARPGROUP = Layout(128)


def acc_layout_64xN(n):
    """(T128, V n/2) -> (64, N) index of the wgmma accumulator. CuTe: CLayout_64xN.
        >>> acc_layout_64xN(16)
        ((4,8,4),(2,2,2)):((128,1,16),(64,8,512))
    """
    return Layout(((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512)))


# (T128, V8) -> (64,16): 16-bit A in registers. CuTe: ALayout_64x16
A_REGS_64x16 = Layout(((4, 8, 4), (2, 2, 2)), ((128, 1, 16), (64, 8, 512)))
# (T128, V4) -> (64,8): tf32 A in registers. CuTe: ALayout_64x8
A_REGS_64x8 = Layout(((4, 8, 4), (2, 2)), ((64, 1, 16), (8, 256)))


def smem_tile(rows, k):
    """(T128, (rows,K)) -> index: an operand read from shared memory, which
    every thread sees whole. CuTe: ABLayout.
        >>> smem_tile(64, 16)
        (128,(64,16)):(0,(1,64))
    """
    return Layout((128, (rows, k)), (0, (1, rows)))


# (A = B type, C = D type) -> K of the instruction
_COMBOS = {("Float16", "Float16"): 16, ("Float16", "Float32"): 16,
           ("BFloat16", "Float32"): 16, ("TFloat32", "Float32"): 8}
_CACHE = {}


def wgmma_op(n, a_type, b_type, c_type, a_source="SS", a_major="K", b_major="K"):
    """The wgmma.mma_async op D(64,n) = A(64,K) * B(n,K)^T + D with f16, bf16
    (K=16) or tf32 (K=8) inputs; A from shared memory ("SS") or registers
    ("RS"); A and B K-major or MN-major (MN only for 16-bit types, and A from
    registers is always K-major). CuTe: SM90_64xNxK_..._SS / _RS.
        >>> op = wgmma_op(128, Float16, Float16, Float32)
        >>> op, op.ptx
        (MMAOP_64x128x16_F32F16F16F32_SS_TN, 'wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16')
    """
    a_type, b_type, c_type = (as_element_type(t) for t in (a_type, b_type, c_type))
    key = (n, a_type.name, b_type.name, c_type.name, a_source, a_major, b_major)
    op = _CACHE.get(key)
    if op is None:
        op = _CACHE[key] = _make_wgmma(n, a_type, b_type, c_type, a_source, a_major, b_major)
    return op


def _make_wgmma(n, a_type, b_type, c_type, a_source, a_major, b_major):
    k = _COMBOS.get((a_type.name, c_type.name)) if a_type is b_type else None
    if k is None:
        raise MoyeError(f"wgmma_op: no wgmma multiplies {a_type} by {b_type} into {c_type}; valid "
                        "(A, B, C): (Float16, Float16, Float16 or Float32), "
                        "(BFloat16, BFloat16, Float32), (TFloat32, TFloat32, Float32)")
    if not (isinstance(n, int) and 8 <= n <= 256 and n % 8 == 0):
        raise MoyeError(f"wgmma_op: n = {n!r}; wgmma's N is a multiple of 8 from 8 to 256")
    if a_source not in ("SS", "RS"):
        raise MoyeError(f"wgmma_op: a_source = {a_source!r}; use 'SS' (A in shared memory) or "
                        "'RS' (A in registers)")
    for what, major in (("a_major", a_major), ("b_major", b_major)):
        if major not in ("K", "MN"):
            raise MoyeError(f"wgmma_op: {what} = {major!r}; use 'K' or 'MN'")
    if k == 8 and (a_major, b_major) != ("K", "K"):
        raise MoyeError("wgmma_op: tf32 operands must be K-major (a_major = b_major = 'K')")
    if a_source == "RS" and a_major != "K":
        raise MoyeError("wgmma_op: A from registers is K-major; a_major must be 'K'")

    types = (c_type, a_type, b_type, c_type)
    majors = ("T" if a_major == "K" else "N") + ("N" if b_major == "K" else "T")
    name = f"MMAOP_64x{n}x{k}_{type_letters(types)}_{a_source}_{majors}"
    cute_name = f"SM90_64x{n}x{k}_{type_letters(types[:3], cute=True)}_{a_source}" + \
        ("_TN" if k == 8 else "")
    ptx = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{ptx_type(c_type)}.{ptx_type(a_type)}." \
          f"{ptx_type(b_type)}"
    if a_source == "RS":
        a_layout, a_regs = (A_REGS_64x16 if k == 16 else A_REGS_64x8), (4, "b32")
    else:
        a_layout, a_regs = smem_tile(64, k), (1, "b64")
    d_regs = (n // 2, "f32") if c_type is Float32 else (n // 4, "b32")
    return MMAOp(name, (64, n, k), WARPGROUP, a_layout, smem_tile(n, k), acc_layout_64xN(n), types,
                 arch=90, ptx=ptx, kind="wgmma", a_source=a_source, a_major=a_major,
                 b_major=b_major, registers={"a": a_regs, "b": (1, "b64"), "c": d_regs,
                                             "d": d_regs},
                 min_sm=90, cute_name=cute_name)


def _named_ops():
    ops = []
    for n in (64, 128, 256):
        for a, c in ((Float16, Float32), (Float16, Float16), (BFloat16, Float32),
                     (TFloat32, Float32)):
            for source in ("SS", "RS"):
                ops.append(wgmma_op(n, a, a, c, source))
    return tuple(ops)


SM90_OPS = _named_ops()
globals().update({op.name: op for op in SM90_OPS})
__all__ = ["wgmma_op"] + [op.name for op in SM90_OPS]

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

In shared memory wgmma reads a tile through a 64-bit matrix descriptor (PTX
ISA, "Matrix Descriptor Format"): start address >> 4 (bits 0-13), leading
dimension byte offset >> 4 (16-29), stride dimension byte offset >> 4
(32-45), swizzle mode (62-63: 0 none, 1 128B, 2 64B, 3 32B). The ISA's
canonical K-major layouts are made of 8-row "core matrices" of 16-byte
rows: without swizzle a core matrix is 128 contiguous bytes, LBO steps
along K and SBO along the rows; with a W-byte swizzle the
8 rows are W bytes apart (K contiguous within them), SBO steps 8 rows, and
the address bits [4, 4+b) are XORed with [7, 7+b) (b = log2(W/16)).
`gmma_smem_layout` makes such layouts (CuTe: GMMA::Layout_K_SW128_Atom
tiled to a shape); `gmma_descriptor` derives a descriptor's fields from a
layout, or says why none can express it.
"""
import numpy as np

from ...errors import MoyeError
from ...layout import Layout, composition, size
from ...layout.swizzle import ComposedLayout, Swizzle
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


# descriptor swizzle mode (bits 62-63) by swizzle width in bytes; 16 is "no swizzle"
SWIZZLE_MODE = {16: 0, 128: 1, 64: 2, 32: 3}


def gmma_smem_layout(dtype, major, swizzle, shape):
    """A (rows, k) shared-memory layout that wgmma reads with a descriptor:
    K-major, swizzled by 128, 64 or 32 bytes or not at all (swizzle 0).
    CuTe: tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, shape) (and _SW64,
    _SW32, _INTER).
        >>> gmma_smem_layout(Float16, "K", 128, (64, 64))
        Sw<3,3,3> o 0 o ((8,8),(64,1)):((64,512),(1,4096))
    """
    t = as_element_type(dtype)
    ebytes = t.bits // 8
    if major != "K":
        raise MoyeError(f"gmma_smem_layout: major = {major!r}; only K-major ('K') tiles are "
                        "supported so far")
    width = 16 if swizzle in (0, None) else swizzle
    if width not in SWIZZLE_MODE or t.bits not in (16, 32):
        raise MoyeError(f"gmma_smem_layout: swizzle = {swizzle!r} bytes for {t}; use 0, 32, 64 "
                        "or 128 with a 16- or 32-bit type")
    rows, k = shape
    cols = width // ebytes
    if rows % 8 or k % cols:
        raise MoyeError(f"gmma_smem_layout: shape {shape}: rows must be a multiple of 8 and k of "
                        f"{cols} ({width} bytes of {t})")
    layout = Layout(((8, rows // 8), (cols, k // cols)), ((cols, 8 * cols), (1, rows * cols)))
    if width == 16:
        return layout
    return composition(Swizzle(width.bit_length() - 5, 4 - (ebytes.bit_length() - 1), 3), layout)


def gmma_descriptor(layout, dtype, rows, k, what="wgmma"):
    """(start, LBO, SBO, swizzle width) of the descriptor that reads the K-major
    (rows, k) operand tile whose value v = row + rows * kk lies at `layout(v)`
    (the first rows * k values of a larger layout: its first k columns)
    (a Layout, or a Swizzle composed with one): `start` the element offset of
    (0, 0) before the swizzle, the offsets in bytes, width 16 for no swizzle.
        >>> gmma_descriptor(gmma_smem_layout(Float16, "K", 128, (64, 64)), Float16, 64, 16)
        (0, 16, 1024, 128)
        >>> gmma_descriptor(gmma_smem_layout(Float16, "K", 0, (64, 16)), Float16, 64, 16)
        (0, 1024, 128, 16)
    """
    ebytes = as_element_type(dtype).bits // 8
    outer = None
    if isinstance(layout, ComposedLayout):
        outer, offset, inner = layout.outer, layout.offset, layout.inner
    else:
        offset, inner = 0, layout
    width = 16
    if outer is not None:
        bits = getattr(outer, "bits", None)
        if not (isinstance(outer, Swizzle) and bits in (0, 1, 2, 3) and
                (bits == 0 or (outer.base == 4 - (ebytes.bit_length() - 1) and outer.shift == 3))):
            raise MoyeError(f"{what}: the shared-memory tile {layout} is swizzled by {outer}; a "
                            "wgmma descriptor swizzles 32, 64 or 128 bytes (Swizzle(b, "
                            f"{4 - (ebytes.bit_length() - 1)}, 3) for {dtype}); make the tile "
                            "with gmma_smem_layout")
        width = 16 << bits if bits else 16
    if not isinstance(offset, int) or not isinstance(size(inner), int) or size(inner) < rows * k:
        raise MoyeError(f"{what}: the tile {layout} is not a static ({rows},{k}) tile")
    pre = np.array([inner(v) for v in range(rows * k)], np.int64).reshape(k, rows).T
    start = int(pre[0, 0]) + offset
    got = (pre - pre[0, 0]) * ebytes
    r, kb = np.arange(rows)[:, None], np.arange(k)[None, :] * ebytes
    sbo = int(got[8, 0]) if rows > 8 else 8 * width
    lbo = (int(got[0, 16 // ebytes]) if k * ebytes > 16 else 16) if width == 16 else 16
    want = (r % 8) * width + (r // 8) * sbo + kb % 16 + (kb // 16) * (lbo if width == 16 else 16)
    if not np.array_equal(got, want) or (start * ebytes) % 16 or \
            any(x % 16 or not 0 < x < 1 << 18 for x in (lbo, sbo)):
        swz = f"a {width}-byte swizzle" if width > 16 else "no swizzle"
        raise MoyeError(f"{what}: no wgmma descriptor reads the ({rows},{k}) tile {layout} of "
                        f"{dtype}: with {swz} it must be K-major in 8-row core matrices, rows "
                        f"{width} bytes apart, 16-byte aligned; make it with "
                        f"gmma_smem_layout({dtype}, 'K', {width if width > 16 else 0}, shape)")
    return start, lbo, sbo, width


def descriptor_bits(lbo, sbo, width):
    """The descriptor's bits other than the start address."""
    return ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (SWIZZLE_MODE[width] << 62)


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
__all__ = ["wgmma_op", "gmma_smem_layout", "gmma_descriptor"] + [op.name for op in SM90_OPS]

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
- A from registers: warp w owns rows 16w..16w+15 with mma.m16n8k16's (16-bit),
  mma.m16n8k8's (tf32) or mma.m16n8k32's (8-bit) A fragment: 4 b32 registers.
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
MN-major tiles (16-bit types only; the instruction's transpose immediate
says so) are made of core matrices of 8 k-rows of 16 contiguous bytes of
M (or N): without swizzle a core matrix is 128 contiguous bytes, SBO steps
along M/N and LBO along K (8 k-rows); with a W-byte swizzle each k-row holds
W contiguous bytes of M/N, the 8 k-rows are W bytes apart, LBO steps W bytes
of M/N and SBO 8 k-rows (CuTe: make_gmma_desc<Major::MN>).
`gmma_smem_layout` makes such layouts (CuTe: GMMA::Layout_K_SW128_Atom,
Layout_MN_SW128_Atom, ... tiled to a shape); `gmma_descriptor` derives a
descriptor's fields from a layout, or says why none can express it.
"""
import numpy as np

from ... import ir
from ...errors import MoyeError
from ...layout import Layout, composition, size
from ...layout.inttuple import flatten_to_tuple
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
# (T128, V16) -> (64,32): 8-bit (e4m3, e5m2) A in registers. CuTe: ALayout_64x32
A_REGS_64x32 = Layout(((4, 8, 4), (4, 2, 2)), ((256, 1, 16), (64, 8, 1024)))
A_REGS = {16: A_REGS_64x16, 8: A_REGS_64x8, 32: A_REGS_64x32}


def smem_tile(rows, k):
    """(T128, (rows,K)) -> index: an operand read from shared memory, which
    every thread sees whole. CuTe: ABLayout.
        >>> smem_tile(64, 16)
        (128,(64,16)):(0,(1,64))
    """
    return Layout((128, (rows, k)), (0, (1, rows)))


# (A = B type, C = D type) -> K of the instruction; fp8 A and B may differ
_COMBOS = {("Float16", "Float16"): 16, ("Float16", "Float32"): 16,
           ("BFloat16", "Float32"): 16, ("TFloat32", "Float32"): 8}
_FP8 = ("Float8E4M3", "Float8E5M2")
_COMBOS.update({(a, c): 32 for a in _FP8 for c in ("Float16", "Float32")})
# fp8 spellings (PTX, MoYe's op names, CuTe's); mma_sync's table has the others
_FP8_SPELLING = {"Float8E4M3": ("e4m3", "E4M3", "E4M3"), "Float8E5M2": ("e5m2", "E5M2", "E5M2")}


def _ptx_type(t):
    return _FP8_SPELLING[t.name][0] if t.name in _FP8_SPELLING else ptx_type(t)


def _letters(types, cute=False):
    return "".join(_FP8_SPELLING[t.name][2 if cute else 1] if t.name in _FP8_SPELLING
                   else type_letters((t,), cute) for t in types)
_CACHE = {}


def wgmma_op(n, a_type, b_type, c_type, a_source="SS", a_major="K", b_major="K"):
    """The wgmma.mma_async op D(64,n) = A(64,K) * B(n,K)^T + D with f16, bf16
    (K=16), tf32 (K=8) or fp8 e4m3/e5m2 (K=32) inputs; A from shared memory
    ("SS") or registers ("RS"); A and B K-major or MN-major (MN only for
    16-bit types, and A from registers is always K-major).
    CuTe: SM90_64xNxK_..._SS / _RS.
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
    same = a_type is b_type or (a_type.name in _FP8 and b_type.name in _FP8)
    k = _COMBOS.get((a_type.name, c_type.name)) if same else None
    if k is None:
        raise MoyeError(f"wgmma_op: no wgmma multiplies {a_type} by {b_type} into {c_type}; valid "
                        "(A, B, C): (Float16, Float16, Float16 or Float32), "
                        "(BFloat16, BFloat16, Float32), (TFloat32, TFloat32, Float32), "
                        "(Float8E4M3 or Float8E5M2, Float8E4M3 or Float8E5M2, Float16 or Float32)")
    if not (isinstance(n, int) and 8 <= n <= 256 and n % 8 == 0):
        raise MoyeError(f"wgmma_op: n = {n!r}; wgmma's N is a multiple of 8 from 8 to 256")
    if a_source not in ("SS", "RS"):
        raise MoyeError(f"wgmma_op: a_source = {a_source!r}; use 'SS' (A in shared memory) or "
                        "'RS' (A in registers)")
    for what, major in (("a_major", a_major), ("b_major", b_major)):
        if major not in ("K", "MN"):
            raise MoyeError(f"wgmma_op: {what} = {major!r}; use 'K' or 'MN'")
    if k != 16 and (a_major, b_major) != ("K", "K"):
        raise MoyeError(f"wgmma_op: {a_type} and {b_type} operands must be K-major (a_major = "
                        f"b_major = 'K', got {a_major!r}, {b_major!r}); only 16-bit types may "
                        "be MN-major")
    if a_source == "RS" and a_major != "K":
        raise MoyeError("wgmma_op: A from registers is K-major; a_major must be 'K'")

    types = (c_type, a_type, b_type, c_type)
    majors = ("T" if a_major == "K" else "N") + ("N" if b_major == "K" else "T")
    name = f"MMAOP_64x{n}x{k}_{_letters(types)}_{a_source}_{majors}"
    cute_name = f"SM90_64x{n}x{k}_{_letters(types[:3], cute=True)}_{a_source}" + \
        ("_TN" if k != 16 else "")
    ptx = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{_ptx_type(c_type)}.{_ptx_type(a_type)}." \
          f"{_ptx_type(b_type)}"
    if a_source == "RS":
        a_layout, a_regs = A_REGS[k], (4, "b32")
    else:
        a_layout, a_regs = smem_tile(64, k), (1, "b64")
    d_regs = (n // 2, "f32") if c_type is Float32 else (n // 4, "b32")
    return MMAOp(name, (64, n, k), WARPGROUP, a_layout, smem_tile(n, k), acc_layout_64xN(n), types,
                 arch=90, ptx=ptx, instruction=ir.Wgmma, kind="wgmma", a_source=a_source, a_major=a_major,
                 b_major=b_major, registers={"a": a_regs, "b": (1, "b64"), "c": d_regs,
                                             "d": d_regs},
                 min_sm=90, cute_name=cute_name)


# descriptor swizzle mode (bits 62-63) by swizzle width in bytes; 16 is "no swizzle"
SWIZZLE_MODE = {16: 0, 128: 1, 64: 2, 32: 3}


def gmma_smem_layout(dtype, major, swizzle, shape):
    """A (rows, k) shared-memory layout that wgmma reads with a descriptor:
    K-major ("K") or MN-major ("MN"), swizzled by 128, 64 or 32 bytes or not
    at all (swizzle 0). CuTe: tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{},
    shape) (and _SW64, _SW32, _INTER; Layout_MN_... for "MN").
        >>> gmma_smem_layout(Float16, "K", 128, (64, 64))
        Sw<3,3,3> o 0 o ((8,8),(64,1)):((64,512),(1,4096))
        >>> gmma_smem_layout(Float16, "MN", 128, (128, 32))
        Sw<3,3,3> o 0 o ((64,2),(8,4)):((1,512),(64,1024))
    """
    t = as_element_type(dtype)
    ebytes = t.bits // 8
    if major not in ("K", "MN"):
        raise MoyeError(f"gmma_smem_layout: major = {major!r}; use 'K' (K contiguous) or 'MN' "
                        "(M or N contiguous)")
    width = 16 if swizzle in (0, None) else swizzle
    if width not in SWIZZLE_MODE or t.bits not in (8, 16, 32):
        raise MoyeError(f"gmma_smem_layout: swizzle = {swizzle!r} bytes for {t}; use 0, 32, 64 "
                        "or 128 with an 8-, 16- or 32-bit type")
    rows, k = shape
    cols = width // ebytes
    if major == "K":
        if rows % 8 or k % cols:
            raise MoyeError(f"gmma_smem_layout: shape {shape}: rows must be a multiple of 8 and "
                            f"k of {cols} ({width} bytes of {t})")
        layout = Layout(((8, rows // 8), (cols, k // cols)), ((cols, 8 * cols), (1, rows * cols)))
    else:
        if rows % cols or k % 8:
            raise MoyeError(f"gmma_smem_layout: MN-major shape {shape}: rows must be a multiple "
                            f"of {cols} ({width} bytes of {t}) and k of 8")
        layout = Layout(((cols, rows // cols), (8, k // 8)), ((1, 8 * cols), (cols, rows * 8)))
    if width == 16:
        return layout
    return composition(Swizzle(width.bit_length() - 5, 4 - (ebytes.bit_length() - 1), 3), layout)


def _canonical(rows, k, ebytes, width, lbo, sbo, major):
    """The byte offsets (rows, k) of the PTX ISA's canonical layout (before the
    swizzle) that a descriptor with these fields reads."""
    r, kk = np.arange(rows)[:, None], np.arange(k)[None, :]
    if major == "K":
        kb = kk * ebytes
        return (r % 8) * width + (r // 8) * sbo + kb % 16 + \
            (kb // 16) * (lbo if width == 16 else 16)
    rb = r * ebytes
    if width == 16:
        return rb % 16 + (rb // 16) * sbo + (kk % 8) * 16 + (kk // 8) * lbo
    return rb % width + (rb // width) * lbo + (kk % 8) * width + (kk // 8) * sbo


def _offsets(layout, n):
    """`layout(v)` for v < n (at most its size), as an int64 array: one
    NumPy pass per mode for a layout of ints, not n evaluations."""
    shape, stride = flatten_to_tuple(layout.shape), flatten_to_tuple(layout.stride)
    if not all(type(x) is int for x in shape + stride):
        return np.array([layout(v) for v in range(n)], np.int64)
    v, out, step = np.arange(n, dtype=np.int64), np.zeros(n, np.int64), 1
    for s, d in zip(shape, stride):
        out += (v // step % s) * d
        step *= s
    return out


def gmma_descriptor(layout, dtype, rows, k, what="wgmma", major="K"):
    """(start, LBO, SBO, swizzle width) of the descriptor that reads the
    (rows, k) operand tile, K- or MN-major, whose value v = row + rows * kk
    lies at `layout(v)` (the first rows * k values of a larger layout: its
    first k columns) (a Layout, or a Swizzle composed with one): `start` the
    element offset of (0, 0) before the swizzle, the offsets in bytes, width
    16 for no swizzle.
        >>> gmma_descriptor(gmma_smem_layout(Float16, "K", 128, (64, 64)), Float16, 64, 16)
        (0, 16, 1024, 128)
        >>> gmma_descriptor(gmma_smem_layout(Float16, "K", 0, (64, 16)), Float16, 64, 16)
        (0, 1024, 128, 16)
        >>> gmma_descriptor(gmma_smem_layout(Float16, "MN", 0, (64, 16)), Float16, 64, 16,
        ...                 major="MN")
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
    pre = _offsets(inner, rows * k).reshape(k, rows).T
    start = int(pre[0, 0]) + offset
    got = (pre - pre[0, 0]) * ebytes
    if major == "K":
        # unused fields: SBO when there is one 8-row group, LBO with a swizzle
        sbo = int(got[8, 0]) if rows > 8 else 8 * width
        lbo = (int(got[0, 16 // ebytes]) if k * ebytes > 16 else 16) if width == 16 else 16
        shape = f"K-major in 8-row core matrices, rows {width} bytes apart"
    else:
        # the step along M/N (SBO without swizzle, LBO with one) is unused in one chunk
        mn_step = int(got[width // ebytes, 0]) if rows * ebytes > width else 8 * width
        k_step = int(got[0, 8]) if k > 8 else 8 * width
        lbo, sbo = (k_step, mn_step) if width == 16 else (mn_step, k_step)
        shape = f"MN-major, {width} contiguous bytes of M/N in each of 8 k-rows {width} bytes apart"
    want = _canonical(rows, k, ebytes, width, lbo, sbo, major)
    if not np.array_equal(got, want) or (start * ebytes) % 16 or \
            any(x % 16 or not 0 < x < 1 << 18 for x in (lbo, sbo)):
        swz = f"a {width}-byte swizzle" if width > 16 else "no swizzle"
        raise MoyeError(f"{what}: no wgmma descriptor reads the {major}-major ({rows},{k}) tile "
                        f"{layout} of {dtype}: with {swz} it must be {shape}, 16-byte aligned; "
                        f"make it with gmma_smem_layout({dtype}, '{major}', "
                        f"{width if width > 16 else 0}, shape)")
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

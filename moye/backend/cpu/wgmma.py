"""wgmma.mma_async on the CPU backend, from the PTX ISA.

A warpgroup (128 consecutive threads, starting at a multiple of 128) issues
it, all of its threads active. Each operand tile in shared memory is read
through its 64-bit matrix descriptor, decoded here as the ISA defines it
("Matrix Descriptor Format", "Shared Memory Matrix Layout"): start address
= bits 0-13 << 4, leading byte offset (LBO) = bits 16-29 << 4, stride byte
offset (SBO) = bits 32-45 << 4, swizzle = bits 62-63 (0 none, 1 128B, 2 64B,
3 32B). The K-major element (row, k) lies at

    start + (row % 8) * R + (row // 8) * SBO + kb % 16 + (kb // 16) * L

with kb = k * element bytes, R = 16 and L = LBO without swizzle, R = the
swizzle's width W and L = 16 with one. An MN-major tile (the instruction's
transpose immediate is 1; 16-bit types only) is made of k-rows of M/N
bytes: the element (mn, k), mb = mn * element bytes, lies at

    start + mb % 16 + (mb // 16) * SBO + (k % 8) * 16 + (k // 8) * LBO

without swizzle, and with a W-byte swizzle at

    start + mb % W + (mb // W) * LBO + (k % 8) * W + (k // 8) * SBO.

A W-byte swizzle then XORs address bits [4, 4+b) with [7, 7+b),
b = log2(W / 16). Addresses are byte offsets in the shared array, whose
start the tracer has checked is aligned to the swizzle's period. The
accumulators are the registers of the ISA's D fragment figure, and A from
registers ("RS") its A fragment figure (ptx_fragments._wgmma; for 8-bit
types, e4m3 and e5m2, mma.m16n8k32's A fragment per warp, below).

wgmma is asynchronous on the GPU; here its result is written when it is
issued, so wgmma_fence, wgmma_commit and wgmma_wait have nothing to do.
"""
import ml_dtypes
import numpy as np

from . import ptx_fragments as ptx
from .collectives import read_registers, write_registers
from .errors import KernelRuntimeError, where

WARPGROUP = 128
SWIZZLE_WIDTH = {0: 16, 1: 128, 2: 64, 3: 32}
FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _bits(ptx_type):
    return 8 if ptx_type in FP8 else ptx.BITS[ptx_type]


def _unpack(raw, ptx_type):
    """The elements held in bytes raw[..., byte] (fp8: one a byte)."""
    if ptx_type in FP8:
        return np.ascontiguousarray(raw, dtype=np.uint8).view(FP8[ptx_type])
    return ptx.unpack(raw, ptx_type)


def a_fragment(f, threads):
    """(row, col) in the 64 x K tile of each element of each thread's A
    registers: the ISA's figures; for 8-bit A (k = 32) warp w owns rows
    16w..16w+15 with mma.m16n8k32's A fragment (a0..a15, four a register)."""
    if f["shape"][2] != 32:
        return ptx.fragment(f["spelling"], "a", threads)
    threads = np.asarray(threads)[:, None]
    warp, lane = threads // 32, threads % 32
    g, t, i = lane >> 2, lane % 4, np.arange(16)[None, :]
    return np.broadcast_arrays(16 * warp + g + 8 * ((i >> 2) & 1), 4 * t + (i & 3) + 16 * (i >> 3))


def decode(desc):
    """(start byte, LBO, SBO, swizzle width) of a matrix descriptor."""
    desc = int(desc)
    field = lambda lo, bits: (desc >> lo) & ((1 << bits) - 1)   # noqa: E731
    return field(0, 14) << 4, field(16, 14) << 4, field(32, 14) << 4, \
        SWIZZLE_WIDTH[field(62, 2)]


def tile_bytes(desc, rows, k, ebytes, mn_major=False):
    """The byte address (rows, k, ebytes) of each byte of the K-major (or
    MN-major) tile."""
    start, lbo, sbo, width = decode(desc)
    r = np.arange(rows)[:, None, None]
    kk = np.arange(k)[None, :, None]
    if not mn_major:
        kb = kk * ebytes
        lead = lbo if width == 16 else 16
        addr = start + (r % 8) * width + (r // 8) * sbo + kb % 16 + (kb // 16) * lead
    elif width == 16:
        mb = r * ebytes
        addr = start + mb % 16 + (mb // 16) * sbo + (kk % 8) * 16 + (kk // 8) * lbo
    else:
        mb = r * ebytes
        addr = start + mb % width + (mb // width) * lbo + (kk % 8) * width + (kk // 8) * sbo
    addr = addr + np.arange(ebytes)
    bits = (width // 16).bit_length() - 1
    if bits:
        addr = addr ^ (((addr >> 7) & ((1 << bits) - 1)) << 4)
    return addr


class Warpgroups:
    """wgmma for one block batch, as its IR rule calls it: `b.warpgroups.wgmma(s, mask)`."""

    def __init__(self, block):
        self.block = block

    def wgmma(self, s, mask):
        wgmma(self.block, s, mask)


def warpgroups(b, s, mask):
    """The lanes (groups, 128) of the whole warpgroups executing `s`."""
    if b.threads % WARPGROUP:
        raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op} is a warpgroup instruction, but a "
                                 f"block of {b.block} has {b.threads} threads, not a multiple "
                                 "of 128")
    m = mask.reshape(-1, WARPGROUP)
    partial = m.any(axis=1) & ~m.all(axis=1)
    if partial.any():
        g = int(np.nonzero(partial)[0][0])
        raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op} needs all 128 threads of the "
                                 f"warpgroup, but in block {b._bid(g * WARPGROUP)} only "
                                 f"{int(m[g].sum())} execute it (a branch divides the warpgroup)")
    return np.nonzero(m.all(axis=1))[0][:, None] * WARPGROUP + np.arange(WARPGROUP)


def _operand(b, s, base, idx, bits, lanes, rows, k, ptx_type, name, mn_major):
    """The (groups, rows, k) tile an operand's descriptor reads."""
    kind, buf, arr, off, aname = b._target(base)
    if kind != "shared":
        raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op}: {name} is read from shared "
                                 f"memory, not from the {aname}")
    byte = (off + b.vec(idx).astype(np.int64)) * buf.itemsize
    byte = byte[lanes]
    if (byte != byte[:, :1]).any():
        raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op}: the threads of a warpgroup give "
                                 f"different {name} descriptors")
    ebytes = _bits(ptx_type) // 8
    raw = buf.view(np.uint8).reshape(buf.shape[0], -1) if buf.ndim == 2 else \
        buf.view(np.uint8)[None]
    tiles = []
    for g in range(len(lanes)):
        desc = int(bits) | ((int(byte[g, 0]) & 0x3FFFF) >> 4)
        addr = tile_bytes(desc, rows, k, ebytes, mn_major)
        if addr.min() < 0 or addr.max() >= raw.shape[-1]:
            raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op}: {name}'s descriptor reads "
                                     f"bytes {addr.min()}..{addr.max()} of the {aname}, which "
                                     f"has {raw.shape[-1]}")
        row = b.block_of_lane[lanes[g, 0]] if buf.ndim == 2 else 0
        tiles.append(_unpack(raw[row][addr], ptx_type).reshape(rows, k))
    return np.stack(tiles)


def _registers_a(b, s, a, aregs, lanes, f):
    """The (groups, 64, k) A tile the warpgroup's threads hold in registers."""
    if len(aregs) != 4:
        raise KernelRuntimeError(f"{where(s.loc)}\n  {s.attrs['ptx']}: A takes 4 registers, "
                                 f"got {len(aregs)}")
    values = _unpack(read_registers(b, s, a, aregs, lanes, "A"), f["atype"])
    rows, cols = a_fragment(f, np.arange(WARPGROUP))
    k = f["shape"][2]
    A = np.zeros((len(lanes), 64 * k), values.dtype)
    A[:, (rows * k + cols).ravel()] = values.reshape(len(lanes), -1)
    return A.reshape(len(lanes), 64, k)


def wgmma(b, s, mask):
    """wgmma.mma_async (attrs ptx, a_desc (None: A from registers), b_desc,
    trans_a, trans_b): D += A * B^T per warpgroup."""
    spelling = s.attrs["ptx"]
    f = dict(ptx.parse(spelling), spelling=spelling)
    lanes = warpgroups(b, s, mask)
    if not len(lanes):
        return
    d, dregs, a, ai, bb, bi = s.args
    _, n, k = f["shape"]
    if s.attrs["a_desc"] is None:
        A = _registers_a(b, s, a, ai, lanes, f)
    else:
        A = _operand(b, s, a, ai, s.attrs["a_desc"], lanes, 64, k, f["atype"], "A",
                     s.attrs.get("trans_a", 0))
    B = _operand(b, s, bb, bi, s.attrs["b_desc"], lanes, n, k, f["btype"], "B",
                 s.attrs.get("trans_b", 0))
    rows, cols = ptx.fragment(spelling, "d", np.arange(WARPGROUP))
    flat = (rows * n + cols).ravel()
    nregs = rows.shape[1] * ptx.BITS[f["dtype"]] // 32
    if len(dregs) != nregs:
        raise KernelRuntimeError(f"{where(s.loc)}\n  {spelling}: D takes {nregs} registers, "
                                 f"got {len(dregs)}")
    values = _unpack(read_registers(b, s, d, dregs, lanes, "D"), f["dtype"])
    C = np.zeros((len(lanes), 64 * n), values.dtype)
    C[:, flat] = values.reshape(len(lanes), -1)
    out = ptx.ptx_mma(spelling, A, np.swapaxes(B, 1, 2), C.reshape(len(lanes), 64, n))
    values = out.reshape(len(lanes), -1)[:, flat].reshape(len(lanes), WARPGROUP, -1)
    write_registers(b, s, d, dregs, lanes, ptx.pack(values, f["dtype"]), "D")

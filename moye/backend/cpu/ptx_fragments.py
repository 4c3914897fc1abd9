"""The PTX ISA's own description of the MMA instructions, written down
independently of moye's layouts: the CPU backend executes mma.sync with it,
and tests/atom check moye's layouts against it.

For each instruction (parsed from its PTX spelling) this gives, for every
thread and every fragment element a0, a1, ... (b0.., c0..), the row and
column of the element in the PTX matrices: A is M x K, B is K x N (so B's
row is k and its column n), C and D are M x N. The formulas are transcribed
from the PTX ISA, section "Matrix multiply-accumulate operation using mma
instruction" ("Matrix Fragments for mma.m8n8k4 with .f16 floating point
type", "... for mma.m16n8k8", ...), and for wgmma from "Register Fragments"
of wgmma.mma_async, whose layouts are given as figures only: warp w of the
warpgroup owns rows 16w..16w+15 with mma.m16n8k16's (or m16n8k8's, for tf32
A) fragment, D repeating every 8 columns. Names follow the ISA: groupID =
%laneid >> 2, threadID_in_group = %laneid % 4.

`unpack` and `pack` read and write the elements held in a thread's
registers, and `ptx_mma` computes D = A * B + C as the ISA defines each
instruction.
"""
import re

import ml_dtypes
import numpy as np

from ...atom.mma import round_inputs
from ...types import TFloat32

LANES = np.arange(32)[:, None]


def parse(ptx):
    """The fields of an mma.sync or wgmma.mma_async spelling."""
    m = re.fullmatch(r"mma\.sync\.aligned\.m(\d+)n(\d+)k(\d+)\.(row|col)\.(row|col)"
                     r"(\.satfinite)?\.(\w+)\.(\w+)\.(\w+)\.(\w+)(?:\.(xor|and)\.popc)?", ptx)
    if m:
        return dict(kind="mma", shape=tuple(int(x) for x in m.group(1, 2, 3)),
                    alayout=m.group(4), blayout=m.group(5), satfinite=bool(m.group(6)),
                    dtype=m.group(7), atype=m.group(8), btype=m.group(9), ctype=m.group(10),
                    bitop=m.group(11))
    m = re.fullmatch(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)\.(\w+)\.(\w+)\.(\w+)", ptx)
    if m:
        return dict(kind="wgmma", shape=(64, int(m.group(1)), int(m.group(2))),
                    dtype=m.group(3), atype=m.group(4), btype=m.group(5), ctype=m.group(3),
                    satfinite=False, bitop=None)
    raise ValueError(f"not an MMA instruction this module knows: {ptx}")


def _vals(n):
    return np.arange(n)[None, :]


# -- mma.sync fragments --------------------------------------------------------------
def _m8n8k4_f16(operand, layout, ctype, lane):
    """mma.m8n8k4 .f16: row/col within the lane's own computation (quad pair)."""
    hi = (lane >= 16).astype(int) * 4
    if operand == "a":
        i = _vals(4)
        if layout == "row":
            return lane % 4 + hi + 0 * i, i + 0 * lane
        return i % 4 + hi, lane % 4 + 0 * i
    if operand == "b":
        i = _vals(4)
        if layout == "row":
            return lane % 4 + 0 * i, i + hi
        return i + 0 * lane, lane % 4 + hi + 0 * i
    i = _vals(8)
    if ctype == "f16":
        return lane % 4 + hi + 0 * i, i + 0 * lane
    x = (lane & 1) + (i & 2)
    return x + hi, (i & 4) + (lane & 2) + (i & 1)


def _acc_16x8(g, t):
    i = _vals(4)
    return g + 8 * (i >= 2), 2 * t + (i & 1)


def _acc_8x8(g, t):
    i = _vals(2)
    return g + 0 * i, 2 * t + i


def _mma_sync(f, operand, lane):
    """(row, col) of each element of `operand` ('a', 'b', 'c' or 'd') for lanes `lane`."""
    g, t = lane >> 2, lane % 4
    m, n, k = f["shape"]
    a = f["atype"]
    if (m, n, k) == (8, 8, 4) and a == "f16":
        layout = f["alayout"] if operand == "a" else f["blayout"]
        if operand == "d":      # C and D each follow their own type (.f16x2 or .f32)
            return _m8n8k4_f16("c", layout, f["dtype"], lane)
        return _m8n8k4_f16(operand, layout, f["ctype"], lane)
    if operand in ("c", "d"):
        return _acc_8x8(g, t) if m == 8 else _acc_16x8(g, t)
    if (m, n, k) == (8, 8, 4):                                       # f64
        return (g, t) if operand == "a" else (t, g)
    if (m, n, k) == (16, 8, 4):                                      # tf32
        if operand == "a":
            i = _vals(2)
            return g + 8 * i, t + 0 * i
        return t, g
    if (m, n, k) == (16, 8, 8):
        if a == "tf32":
            if operand == "a":
                i = _vals(4)
                return g + 8 * (i & 1), t + 4 * (i >= 2)
            i = _vals(2)
            return t + 4 * i, g + 0 * i
        if operand == "a":                                           # f16 / bf16
            i = _vals(4)
            return g + 8 * (i >= 2), 2 * t + (i & 1)
        i = _vals(2)
        return 2 * t + i, g + 0 * i
    if (m, n, k) == (16, 8, 16) and a in ("f16", "bf16"):
        if operand == "a":
            i = _vals(8)
            return g + 8 * np.isin(i, (2, 3, 6, 7)), 2 * t + (i & 1) + 8 * (i >= 4)
        i = _vals(4)
        return 2 * t + (i & 1) + 8 * (i >= 2), g + 0 * i
    if (m, n, k) == (8, 8, 16):                                      # s8 / u8
        i = _vals(4)
        return (g + 0 * i, 4 * t + i) if operand == "a" else (4 * t + i, g + 0 * i)
    if (m, n, k) == (16, 8, 16):                                     # s8 / u8
        if operand == "a":
            i = _vals(8)
            return g + 8 * (i >= 4), 4 * t + (i & 3)
        i = _vals(4)
        return 4 * t + i, g + 0 * i
    if (m, n, k) == (16, 8, 32) and a in ("s4", "u4"):
        if operand == "a":
            i = _vals(16)
            return g + 8 * (i >= 8), 8 * t + (i & 7)
        i = _vals(8)
        return 8 * t + (i & 7), g + 0 * i
    if (m, n, k) == (16, 8, 32):                                     # s8 / u8
        if operand == "a":
            i = _vals(16)
            rows_lo = (i < 4) | ((i >= 8) & (i < 12))
            return g + 8 * ~rows_lo, 4 * t + (i & 3) + 16 * (i >= 8)
        i = _vals(8)
        return 4 * t + (i & 3) + 16 * (i >= 4), g + 0 * i
    if (m, n, k) == (8, 8, 32):                                      # s4 / u4
        i = _vals(8)
        return (g + 0 * i, 8 * t + i) if operand == "a" else (8 * t + i, g + 0 * i)
    if (m, n, k) == (16, 8, 64):                                     # s4 / u4
        if operand == "a":
            i = _vals(32)
            rows_lo = (i < 8) | ((i >= 16) & (i < 24))
            return g + 8 * ~rows_lo, 8 * t + (i & 7) + 32 * (i >= 16)
        i = _vals(16)
        return 8 * t + (i & 7) + 32 * (i >= 8), g + 0 * i
    if (m, n, k) == (8, 8, 128):                                     # b1
        i = _vals(32)
        return (g + 0 * i, 32 * t + i) if operand == "a" else (32 * t + i, g + 0 * i)
    if (m, n, k) == (16, 8, 128):
        if operand == "a":
            i = _vals(64)
            return g + 8 * (i >= 32), 32 * t + (i & 0x1F)
        i = _vals(32)
        return 32 * t + i, g + 0 * i
    if (m, n, k) == (16, 8, 256):
        if operand == "a":
            return m16n8k256_a(g, t, literal=False)
        i = _vals(64)
        return 32 * t + (i & 0x1F) + 128 * (i >= 32), g + 0 * i
    raise ValueError(f"no fragment formula for {f}")


def m16n8k256_a(g, t, literal):
    """mma.m16n8k256 A. The ISA writes col = threadID_in_group * 32 + i for
    i < 64; read literally, elements 32..63 run into the next thread's
    columns (two lanes then hold the same element). The evident meaning, as
    in m16n8k128 and m16n8k64, is (i & 0x1F): literal=False."""
    i = _vals(128)
    rows_lo = (i < 32) | ((i >= 64) & (i < 96))
    low_cols = 32 * t + (i if literal else (i & 0x1F))
    return g + 8 * ~rows_lo, np.where(i < 64, low_cols, 32 * t + (i & 0x1F) + 128)


# -- wgmma fragments -------------------------------------------------------------------
def _wgmma(f, operand, thread):
    warp, lane = thread // 32, thread % 32
    g, t = lane >> 2, lane % 4
    n, k = f["shape"][1], f["shape"][2]
    if operand in ("c", "d"):                                        # accumulator D
        i = _vals(n // 2)
        return 16 * warp + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1)
    if operand == "a" and k == 16:                                   # f16 / bf16 A in registers
        i = _vals(8)
        return 16 * warp + g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)
    if operand == "a" and k == 8:                                    # tf32 A in registers
        i = _vals(4)
        return 16 * warp + g + 8 * (i & 1), t + 4 * (i >> 1)
    raise ValueError("wgmma reads B from shared memory; it has no register fragment")


def fragment(ptx, operand, threads):
    """(row, col) arrays, shape (len(threads), values): where each element of
    each thread's fragment of `operand` ('a', 'b', 'c', 'd') lies in the PTX
    matrix. D is laid out as C except in mma.m8n8k4 .f32.f16.f16.f16, whose
    C is .f16x2 and D .f32. For mma.m8n8k4 .f16 the position is within the
    thread's own computation (see quad_pair)."""
    f = parse(ptx)
    threads = np.asarray(threads)[:, None]
    rows, cols = _wgmma(f, operand, threads) if f["kind"] == "wgmma" else \
        _mma_sync(f, operand, threads)
    return np.broadcast_arrays(rows, cols)


def quad_pair(lane):
    """Which of mma.m8n8k4's four computations lane takes part in: lanes
    0-3 and 16-19 compute the first, 4-7 and 20-23 the second, ..."""
    return (np.asarray(lane) >> 2) & 3


def threads_of(ptx):
    """The threads that execute the instruction: a warp, or a warpgroup."""
    return np.arange(128 if parse(ptx)["kind"] == "wgmma" else 32)


# -- registers -------------------------------------------------------------------------------
BITS = {"f16": 16, "bf16": 16, "tf32": 32, "f32": 32, "f64": 64, "s32": 32, "s8": 8, "u8": 8,
        "s4": 4, "u4": 4, "b1": 1}


def unpack(raw, ptx_type):
    """The elements a thread's registers hold, from their bytes raw[..., byte]
    (little-endian registers, in order): element i lives in register
    i // (32 / bits), from the lowest bits up. TF32 elements are float32
    with the low 13 mantissa bits ignored, as the tensor cores read them.
        >>> unpack(np.array([0x21, 0xF3], np.uint8), "s4")
        array([ 1,  2,  3, -1], dtype=int8)
    """
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    bits = BITS[ptx_type]
    if bits == 1:
        return np.unpackbits(raw, axis=-1, bitorder="little")
    if bits == 4:
        nibbles = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(raw.shape[:-1] + (-1,))
        return ((nibbles ^ 8).astype(np.int8) - 8) if ptx_type == "s4" else nibbles
    if ptx_type == "tf32":
        return round_inputs(raw.view(np.float32), TFloat32).astype(np.float32)
    return raw.view(NUMPY[ptx_type])


def pack(values, ptx_type):
    """The bytes of registers holding `values` (..., elements) of a PTX type
    of 8 bits or more: the inverse of unpack."""
    raw = np.ascontiguousarray(np.asarray(values).astype(NUMPY[ptx_type]))
    return raw.view(np.uint8)


# -- the operation itself -------------------------------------------------------------------
NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32, "f32": np.float32,
         "f64": np.float64, "s32": np.int32, "s8": np.int8, "u8": np.uint8,
         "s4": ml_dtypes.int4, "u4": ml_dtypes.uint4, "b1": ml_dtypes.uint1}


def ptx_mma(ptx, a, b, c):
    """D = A * B + C for A (..., M, K), B (..., K, N), C (..., M, N) as the
    PTX ISA defines the instruction: single-bit ops add popc(row of A
    xor/and column of B); integer ops accumulate in s32, wrapping or
    (.satfinite) clamping to [MIN_INT32, MAX_INT32]; floating-point ops
    multiply exactly and round once to .dtype (the ISA leaves order and
    rounding to the hardware). Operands must hold values of their PTX types
    (tf32: low 13 bits zero)."""
    f = parse(ptx)
    c = np.asarray(c)
    if f["bitop"]:
        a, b = np.asarray(a).astype(np.int64), np.asarray(b).astype(np.int64)
        a, b = a[..., :, :, None], b[..., None, :, :]
        bits = (a ^ b) if f["bitop"] == "xor" else (a & b)
        return _to_s32(bits.sum(axis=-2) + c.astype(np.int64), saturate=False)
    if f["dtype"] == "s32":
        acc = np.asarray(a).astype(np.int64) @ np.asarray(b).astype(np.int64) + \
            c.astype(np.int64)
        return _to_s32(acc, f["satfinite"])
    acc = np.asarray(a).astype(np.float64) @ np.asarray(b).astype(np.float64) + \
        c.astype(np.float64)
    return acc.astype(NUMPY[f["dtype"]])


def _to_s32(acc, saturate):
    if saturate:
        return np.clip(acc, -2**31, 2**31 - 1).astype(np.int32)
    return ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)

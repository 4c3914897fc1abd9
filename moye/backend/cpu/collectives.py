"""Warp-collective instructions on the CPU backend, from their PTX ISA
definitions: ldmatrix, stmatrix, mma.sync and shfl.sync.

A warp is 32 consecutive linear thread ids of a block; all lanes of a
warp that executes one of these must be active (the instructions are
.aligned: a warp divided by a branch or loop is an error here, undefined
behaviour on the GPU). Each runs for all the active warps of the batch at
once, as NumPy arrays of shape (warps, 32, ...). Register operands are
lists of 32-bit (f64: 64-bit) registers in a local array (see moye/ir/warp.py).
"""
from functools import lru_cache

import numpy as np

from . import ptx_fragments as ptx
from .errors import KernelRuntimeError, where
from .ptx_ldmatrix import lane_elements

WARP = 32


def _why(exited):
    """Why lanes are inactive, given which of them ran the kernel's `return`."""
    if exited.all():
        return ("they returned: what the instruction reads of a returned lane is undefined on "
                "the GPU; end those threads after it")
    return "a branch or loop divides the warp" + (", or they returned" if exited.any() else "")


def warps(b, s, mask):
    """The lanes (warps, 32) of the whole warps executing `s`."""
    if b.threads % WARP:
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  {s.op} is a warp-wide instruction, but a block of "
            f"{b.block} has {b.threads} threads, not a whole number of warps")
    m = mask.reshape(-1, WARP)
    full = m.all(axis=1)
    partial = m.any(axis=1) & ~full
    if partial.any():
        w = int(np.nonzero(partial)[0][0])
        off = list(np.nonzero(~m[w])[0])
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  {s.op} needs all 32 lanes of the warp, but in warp "
            f"{(w * WARP % b.threads) // WARP} of block {b._bid(w * WARP)} lanes "
            f"{_ranges(off)} are inactive ({_why(b.exited[w * WARP + np.array(off)])})")
    return np.nonzero(full)[0][:, None] * WARP + np.arange(WARP)


def _ranges(lanes):
    out, start = [], None
    for i, x in enumerate(lanes):
        if start is None:
            start = x
        if i + 1 == len(lanes) or lanes[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


class Collectives:
    """The warp collectives of one block batch, as their IR rules call them:
    `b.collectives.ldmatrix(s, mask)`."""

    def __init__(self, block):
        self.block = block

    def ldmatrix(self, s, mask):
        ldmatrix(self.block, s, mask)

    def stmatrix(self, s, mask):
        stmatrix(self.block, s, mask)

    def mma(self, s, mask):
        mma(self.block, s, mask)

    def shfl(self, s, mask):
        shfl(self.block, s, mask)


# -- registers --------------------------------------------------------------------------------
def _registers(b, s, base, regs, lanes, nbytes, what):
    """(buffer, rows, indices) of the register list `regs` of `base` for `lanes`."""
    kind, buf, arr, off, name = b._target(base)
    if kind != "local" or buf.itemsize != nbytes:
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  {s.op} {what}: expected {8 * nbytes}-bit registers in a "
            f"register array, got {buf.dtype} elements of a {name}")
    index = off[lanes][..., None] + np.asarray(regs, dtype=np.int64)
    bad = (index < 0) | (index >= buf.shape[-1])
    if bad.any():
        w, lane, r = (int(x[0]) for x in np.nonzero(bad))
        b.out_of_bounds(s, f"{s.op} {what}", name, lanes[w, lane], index[w, lane, r],
                        "1 register", buf.shape[-1])
    return buf, lanes[..., None], index


def read_registers(b, s, base, regs, lanes, what, nbytes=4):
    """The bytes (warps, 32, bytes) of each lane's registers, in order."""
    buf, rows, index = _registers(b, s, base, regs, lanes, nbytes, what)
    words = np.ascontiguousarray(buf[rows, index])
    return words.view(np.uint8)


def write_registers(b, s, base, regs, lanes, raw, what, nbytes=4):
    """Set each lane's registers from their bytes (warps, 32, bytes)."""
    buf, rows, index = _registers(b, s, base, regs, lanes, nbytes, what)
    buf[rows, index] = np.ascontiguousarray(raw).view(buf.dtype)


# -- ldmatrix / stmatrix ------------------------------------------------------------------------
def _matrix_rows(b, s, base, idx, lanes, count, write):
    """(16-bit view of shared memory, its rows, the element each lane's row
    starts at): lanes 0..8*count-1 give the rows, 16-byte aligned."""
    kind, buf, arr, off, name = b._target(base)
    if kind != "shared":
        raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op} reads rows of shared memory, not "
                                 f"of the {name}")
    giving = lanes[:, :8 * count]
    byte = ((off + b.vec(idx).astype(np.int64)) * buf.itemsize)[giving]
    total = buf.shape[-1] * buf.itemsize
    bad = (byte < 0) | (byte + 16 > total)
    if bad.any():
        w, lane = (int(x[0]) for x in np.nonzero(bad))
        b.out_of_bounds(s, s.op, name, giving[w, lane], byte[w, lane] // buf.itemsize,
                        "a 16-byte row", buf.shape[-1])
    bad = byte % 16 != 0
    if bad.any():
        w, lane = (int(x[0]) for x in np.nonzero(bad))
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  {s.op}: lane {lane} gives row address byte {byte[w, lane]} of "
            f"{name} (element {byte[w, lane] // buf.itemsize}), not 16-byte aligned, in thread "
            f"{b._tid(giving[w, lane])} of block {b._bid(giving[w, lane])}")
    rows = b.block_of_lane[lanes[:, 0]]
    if b.race is not None:
        flat = giving.ravel()
        b.race.access(s, arr, flat, b.block_of_lane[flat], byte.ravel(), 16, buf.itemsize,
                      write, prefetch=True)
    start = np.zeros(lanes.shape, np.int64)
    start[:, :8 * count] = byte // 2
    return buf.view(np.uint16), rows, start


def _matrix_elements(s, start):
    """(warps, 32, count, 2) element indices: half h of register j of each lane."""
    supplier, col = lane_elements(s.attrs["count"], s.attrs["trans"])
    return start[:, supplier] + col


def ldmatrix(b, s, mask):
    """ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16."""
    dst, regs, src, idx = s.args
    lanes = warps(b, s, mask)
    if not len(lanes):
        return
    count = s.attrs["count"]
    _check_count(s, regs, count)
    smem, rows, start = _matrix_rows(b, s, src, idx, lanes, count, write=False)
    halves = np.ascontiguousarray(smem[rows[:, None, None, None], _matrix_elements(s, start)])
    write_registers(b, s, dst, regs, lanes, halves.view(np.uint8).reshape(lanes.shape + (-1,)),
                    "destination")


def stmatrix(b, s, mask):
    """stmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16."""
    dst, idx, src, regs = s.args
    lanes = warps(b, s, mask)
    if not len(lanes):
        return
    count = s.attrs["count"]
    _check_count(s, regs, count)
    raw = read_registers(b, s, src, regs, lanes, "source")
    smem, rows, start = _matrix_rows(b, s, dst, idx, lanes, count, write=True)
    halves = raw.view(np.uint16).reshape(lanes.shape + (count, 2))
    smem[rows[:, None, None, None], _matrix_elements(s, start)] = halves


def _check_count(s, regs, count):
    if len(regs) != count:
        raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op}.x{count} takes {count} registers, "
                                 f"got {len(regs)}")


# -- mma.sync -----------------------------------------------------------------------------------
class _MmaPlan:
    """How one mma.sync spelling's fragments sit in its matrices: for each
    operand, its PTX type, registers, and each lane's elements' flat
    positions in (quad pair, rows, cols); mma.m8n8k4 .f16 computes one
    product per quad pair, all others one per warp."""

    def __init__(self, spelling):
        f = ptx.parse(spelling)
        if f["kind"] != "mma":
            raise ValueError(f"not an mma.sync instruction: {spelling}")
        m, n, k = f["shape"]
        lanes = np.arange(WARP)
        pairs = f["shape"] == (8, 8, 4) and f["atype"] == "f16"
        self.groups = 4 if pairs else 1
        group = ptx.quad_pair(lanes) if pairs else np.zeros(WARP, np.int64)
        self.shape = {"a": (m, k), "b": (k, n), "c": (m, n), "d": (m, n)}
        self.type = {"a": f["atype"], "b": f["btype"], "c": f["ctype"], "d": f["dtype"]}
        self.flat, self.registers = {}, {}
        for op, (r, c) in self.shape.items():
            rows, cols = ptx.fragment(spelling, op, lanes)
            self.flat[op] = (group[:, None] * r + rows) * c + cols
            reg_bits = 64 if self.type[op] == "f64" else 32
            self.registers[op] = (rows.shape[1] * ptx.BITS[self.type[op]] // reg_bits,
                                  reg_bits // 8)


@lru_cache(maxsize=None)
def _mma_plan(spelling):
    return _MmaPlan(spelling)


def mma(b, s, mask):
    """mma.sync.aligned (attrs ptx: the full spelling): D = A * B + C per warp."""
    spelling = s.attrs["ptx"]
    try:
        plan = _mma_plan(spelling)
    except ValueError as e:
        raise KernelRuntimeError(f"{where(s.loc)}\n  {e}") from None
    lanes = warps(b, s, mask)
    if not len(lanes):
        return
    d, dregs, *sources = s.args
    mats = {}
    for op, (base, regs) in zip("abc", zip(sources[::2], sources[1::2])):
        count, nbytes = plan.registers[op]
        if len(regs) != count:
            raise KernelRuntimeError(f"{where(s.loc)}\n  {spelling}: {op.upper()} takes "
                                     f"{count} registers, got {len(regs)}")
        values = ptx.unpack(read_registers(b, s, base, regs, lanes, op.upper(), nbytes),
                            plan.type[op])
        mat = np.zeros((len(lanes), plan.groups * plan.shape[op][0] * plan.shape[op][1]),
                       values.dtype)
        mat[:, plan.flat[op].ravel()] = values.reshape(len(lanes), -1)
        mats[op] = mat.reshape((len(lanes), plan.groups) + plan.shape[op])
    out = ptx.ptx_mma(spelling, mats["a"], mats["b"], mats["c"])
    count, nbytes = plan.registers["d"]
    if len(dregs) != count:
        raise KernelRuntimeError(f"{where(s.loc)}\n  {spelling}: D takes {count} registers, "
                                 f"got {len(dregs)}")
    values = out.reshape(len(lanes), -1)[:, plan.flat["d"]]
    write_registers(b, s, d, dregs, lanes, ptx.pack(values, plan.type["d"]), "D", nbytes)


# -- shfl.sync ----------------------------------------------------------------------------------
def shfl(b, s, mask):
    """shfl.sync.{idx,up,down,bfly} over the full warp, as CUDA's __shfl_*_sync
    call it: the clamp is 31 (up: 0) and the segment mask 32 - width.

    The lanes a partial last warp lacks (a block of 48 threads) count as
    exited, as for vote.sync: the others shuffle among themselves, and a
    lane whose source lane does not exist reads an undefined value on the
    GPU; here it reads a poison (NaN, or 0x5A bytes for integers), so a
    kernel that uses it shows wrong results rather than right ones by luck."""
    x, src, width = (b.vec(a) for a in s.args)
    lanes, exists = _shfl_warps(b, s, mask)
    out = x.copy()
    if len(lanes):
        w = width.astype(np.int64)[lanes]
        bad = ((w < 1) | (w > WARP) | (w & (w - 1) != 0)) & exists
        if bad.any():
            i = np.nonzero(bad.ravel())[0][0]
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  shfl width {w.ravel()[i]} (thread "
                f"{b._tid(lanes.ravel()[i])}) must be a power of 2 from 1 to 32")
        w = np.where(exists, w, WARP)
        mode = s.attrs["mode"]
        lane = np.arange(WARP)
        bval = src.astype(np.int64)[lanes] & 31
        segmask = (WARP - w) & 31
        clamp = 0 if mode == "up" else 31
        max_lane = (lane & segmask) | (clamp & ~segmask)
        if mode == "up":
            j = lane - bval
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bval
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bval
            ok = j <= max_lane
        else:
            j = (lane & segmask) | (bval & ~segmask)
            ok = j <= max_lane
        j = np.where(ok, j, lane)
        got = x[np.take_along_axis(lanes, j, axis=1)]
        gone = exists & ~np.take_along_axis(exists, j, axis=1)
        if gone.any():
            got = np.where(gone, _poison(got.dtype), got)
        out[lanes[exists]] = got[exists]
    b.masked_set(s.result, out, mask, s.result.type.numpy)


def _poison(dtype):
    if dtype.kind == "f":
        return np.array(np.nan, dtype)
    return np.frombuffer(b"\x5a" * dtype.itemsize, dtype)[0]


def _shfl_warps(b, s, mask):
    """(lanes, exists), each (warps, 32): the lanes of the warps executing
    `s`, a partial last warp's missing lanes marked not existing (their index
    is the warp's first lane, a stand-in); an error if a branch or loop
    divides a warp."""
    if b.threads % WARP == 0:
        lanes = warps(b, s, mask)
        return lanes, np.ones(lanes.shape, bool)
    per_block = -(-b.threads // WARP)
    nblocks = len(mask) // b.threads
    thread = np.arange(per_block * WARP)
    exists = np.tile(thread < b.threads, (nblocks, 1)).reshape(-1, WARP)
    index = (np.arange(nblocks)[:, None] * b.threads + np.minimum(thread, b.threads - 1))
    index = index.reshape(-1, WARP)
    index = np.where(exists, index, index[:, :1])
    active = mask[index] & exists
    full = (active == exists).all(axis=1)
    partial = active.any(axis=1) & ~full
    if partial.any():
        w = int(np.nonzero(partial)[0][0])
        off = list(np.nonzero(exists[w] & ~active[w])[0])
        raise KernelRuntimeError(
            f"{where(s.loc)}\n  {s.op} needs every lane of the warp, but in warp "
            f"{w % per_block} of block {b._bid(int(index[w, 0]))} lanes {_ranges(off)} are "
            f"inactive ({_why(b.exited[index[w, off]])})")
    run = full & active.any(axis=1)
    return index[run], exists[run]

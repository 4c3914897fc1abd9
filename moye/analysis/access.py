"""How a tiled copy touches memory, from its layouts alone.

A warp executes a copy instruction (one atom's values per thread) as one
*request*. This module follows each request of each warp over one copy of
`src_layout` to `dst_layout` and counts what the memory system serves:

- **global memory**: the 32-byte sectors and 128-byte lines the request
  touches, against the fewest that could hold the bytes it asks for. Equal
  counts mean the request is coalesced.
- **shared memory**: 32 banks of 4-byte words; one *wavefront* serves at
  most one word per bank (threads reading the same word share it). Accesses
  wider than 4 bytes are split into phases as the hardware does: 8 bytes per
  thread in two half-warp phases, 16 bytes in four quarter-warp phases.
  A request costs the sum over its phases of the largest number of distinct
  words that fall in one bank; more than the ideal means bank conflicts.

ldmatrix and stmatrix read or write 16-byte rows whose addresses only the
first 8 x count lanes give, so only those lanes count on the shared side.
Addresses assume an array that starts 128-byte aligned; offsets of swizzled
(ComposedLayout) and padded layouts are taken exactly as the layout gives
them.
"""
from dataclasses import dataclass, field

import numpy as np

from ..errors import MoyeError, MoyeTypeError
from ..layout import ComposedLayout, Layout, size
from ..layout import inttuple as T
from ..tiled.copy import TiledCopy
from ..types import as_element_type

WARP = 32
SECTOR, LINE = 32, 128         # bytes, global memory
BANKS, WORD = 32, 4            # shared memory
_PHASE_LANES = {8: 16, 16: 8}  # access width -> lanes served per phase (else the whole warp)
_SPACES = ("global", "shared", "register")
# (src, dst) spaces when the caller names none
_DEFAULT_SPACES = {"cp_async": ("global", "shared"), "ldsm": ("shared", "register"),
                   "stsm": ("register", "shared")}


@dataclass(frozen=True)
class Request:
    """One warp-wide instruction: its warp, its index among the thread's
    instructions, and what it costs (sectors and lines, or wavefronts)."""
    warp: int
    instruction: int
    cost: int
    ideal: int
    lines: int = 0
    ideal_lines: int = 0


@dataclass(frozen=True)
class SideReport:
    """The figures of one side (src or dst) of a copy."""
    side: str
    space: str
    layout: object
    access_bytes: int = 0                  # bytes one thread moves per instruction
    requests: tuple = field(default=(), repr=False)

    @property
    def num_requests(self):
        return len(self.requests)

    def _total(self, name):
        return sum(getattr(r, name) for r in self.requests)

    def _per_request(self, name):
        return self._total(name) / len(self.requests) if self.requests else 0.0

    # global memory
    @property
    def sectors(self):
        return self._total("cost") if self.space == "global" else 0

    @property
    def ideal_sectors(self):
        return self._total("ideal") if self.space == "global" else 0

    @property
    def lines(self):
        return self._total("lines")

    @property
    def ideal_lines(self):
        return self._total("ideal_lines")

    @property
    def sectors_per_request(self):
        return self._per_request("cost") if self.space == "global" else 0.0

    @property
    def ideal_sectors_per_request(self):
        return self._per_request("ideal") if self.space == "global" else 0.0

    @property
    def lines_per_request(self):
        return self._per_request("lines")

    # shared memory
    @property
    def wavefronts(self):
        return self._total("cost") if self.space == "shared" else 0

    @property
    def ideal_wavefronts(self):
        return self._total("ideal") if self.space == "shared" else 0

    @property
    def wavefronts_per_request(self):
        return self._per_request("cost") if self.space == "shared" else 0.0

    @property
    def ideal_wavefronts_per_request(self):
        return self._per_request("ideal") if self.space == "shared" else 0.0

    @property
    def conflict_ways(self):
        """The worst request's wavefronts over its ideal (1 when conflict-free)."""
        return max((r.cost // r.ideal for r in self.requests), default=1) \
            if self.space == "shared" else 1

    # either
    @property
    def efficiency(self):
        """Ideal over actual sectors (global) or wavefronts (shared): 1.0 is best."""
        total = self._total("cost")
        return self._total("ideal") / total if total else 1.0

    @property
    def optimal(self):
        """Coalesced (global) or free of bank conflicts (shared)."""
        return all(r.cost == r.ideal for r in self.requests)

    def __str__(self):
        head = f"{self.side}: {self.space}"
        if self.space == "register":
            return head
        n = self.num_requests
        head += (f" {self.layout}, {self.access_bytes} B per thread per instruction, "
                 f"{n} request{'s' * (n != 1)}")
        if self.space == "global":
            verdict = "coalesced" if self.optimal else \
                f"uncoalesced: {self.efficiency:.0%} of the fetched bytes are used"
            return (f"{head}\n  {self.sectors_per_request:g} sectors/request "
                    f"(ideal {self.ideal_sectors_per_request:g}), {self.lines_per_request:g} "
                    f"lines/request (ideal {self._per_request('ideal_lines'):g}): {verdict}")
        verdict = "no bank conflicts" if self.optimal else \
            f"{self.conflict_ways}-way bank conflicts"
        return (f"{head}\n  {self.wavefronts_per_request:g} wavefronts/request "
                f"(ideal {self.ideal_wavefronts_per_request:g}): {verdict}")


@dataclass(frozen=True)
class AccessReport:
    """What one copy of src to dst by a tiled copy costs, side by side."""
    op: object
    dtype: object
    num_threads: int
    src: SideReport
    dst: SideReport

    def __str__(self):
        warps = -(-self.num_threads // WARP)
        lines = [f"{self.op} on {self.dtype}, {self.num_threads} threads "
                 f"({warps} warp{'s' * (warps > 1)})"]
        for side in (self.src, self.dst):
            lines += ["  " + line for line in str(side).splitlines()]
        return "\n".join(lines)


def analyze(tiled_copy, src_layout, dst_layout, dtype=None, *, src_space=None, dst_space=None):
    """The memory traffic of `tiled_copy` copying `src_layout` to `dst_layout`
    (layouts or arrays; None for registers): an AccessReport. Spaces default
    from the op (cp.async: global to shared; ldmatrix: shared to registers;
    stmatrix: registers to shared; others: global to shared).
        >>> tc = make_tiled_copy(CopyAtom(UniversalCopy(UInt128), Float32),
        ...                      Layout((32, 8)), Layout((4, 1)))
        >>> print(analyze(tc, Layout((128, 8)), None).src)
        src: global (128,8):(1,128), 16 B per thread per instruction, 8 requests
          16 sectors/request (ideal 16), 4 lines/request (ideal 4): coalesced
    """
    if not isinstance(tiled_copy, TiledCopy):
        raise MoyeTypeError(f"analyze: expected a TiledCopy, got {tiled_copy!r}")
    atom = tiled_copy.atom
    dtype = atom.dtype if dtype is None else as_element_type(dtype)
    defaults = _DEFAULT_SPACES.get(atom.op.kind, ("global", "shared"))
    sides = []
    for side, layout, space, default in (("src", src_layout, src_space, defaults[0]),
                                         ("dst", dst_layout, dst_space, defaults[1])):
        layout = getattr(layout, "layout", layout)          # an array: its layout
        if not (layout is None or isinstance(layout, (Layout, ComposedLayout))):
            raise MoyeTypeError(f"analyze: {side}_layout must be a layout, an array or None "
                                f"(registers), got {type(layout).__name__} {layout!r}")
        space = "register" if layout is None else (space or default)
        if space not in _SPACES:
            raise MoyeError(f"analyze: {side}_space must be one of {_SPACES}, got {space!r}")
        if space == "register":
            sides.append(SideReport(side, space, layout))
        else:
            sides.append(_analyze_side(tiled_copy, side, layout, space, dtype))
    return AccessReport(atom.op, dtype, tiled_copy.num_threads, *sides)


def _analyze_side(tiled_copy, side, layout, space, dtype):
    atom = tiled_copy.atom
    if side == "src":
        frg, num_val = tiled_copy.tidfrg_S(layout), atom.num_val_src
    else:
        frg, num_val = tiled_copy.tidfrg_D(layout), atom.num_val_dst
    threads = size(frg, 0)
    offsets = _offsets(frg).reshape((threads, num_val, -1), order="F")   # (thread, value, instr)
    width_bits = num_val * dtype.bits
    if width_bits % 8:
        raise MoyeError(f"analyze: {atom.op} moves {width_bits} bits per thread, not whole bytes")
    width = width_bits // 8
    if width > 16:
        raise MoyeError(f"analyze: {atom.op} moves {width} bytes per thread per instruction; "
                        f"one access is at most 16")
    _check_vectors(offsets, atom.op, side, layout, dtype, width)
    lanes = WARP
    if atom.op.kind == ("ldsm" if side == "src" else "stsm"):
        lanes = atom.op.info.get("address_threads", WARP)   # the lanes that give row addresses
    starts = offsets[:, 0, :] * dtype.bits // 8             # (thread, instr) -> byte address
    measure = _global_request if space == "global" else _shared_request
    requests = []
    for warp in range(-(-threads // WARP)):
        first = warp * WARP
        active = starts[first:min(first + lanes, threads)]
        for k in range(starts.shape[1]):
            requests.append(Request(warp, k, *measure(active[:, k], width)))
    return SideReport(side, space, layout, width, tuple(requests))


def _check_vectors(offsets, op, side, layout, dtype, width):
    """Each thread's values of one instruction must be contiguous and aligned."""
    num_val = offsets.shape[1]
    expected = offsets[:, :1, :] + np.arange(num_val)[None, :, None]
    bad = np.argwhere((offsets != expected).any(axis=1))
    if len(bad):
        t, k = bad[0]
        raise MoyeError(f"analyze: thread {t}'s {side} values of instruction {k} lie at offsets "
                        f"{offsets[t, :, k].tolist()} of {layout}; {op} copies "
                        f"{num_val} contiguous {dtype} values at once")
    misaligned = np.argwhere(offsets[:, 0, :] * dtype.bits // 8 % width)
    if len(misaligned):
        t, k = misaligned[0]
        raise MoyeError(f"analyze: thread {t}'s {side} access of instruction {k} starts at "
                        f"offset {offsets[t, 0, k]} of {layout}, not aligned to its {width} bytes")


def _global_request(starts, width):
    """(sectors, ideal sectors, lines, ideal lines) of one warp's request."""
    touched = np.unique((starts[:, None] + np.arange(width)[None, :]).ravel())
    sectors = len(np.unique(touched // SECTOR))
    lines = len(np.unique(touched // LINE))
    return sectors, -(-len(touched) // SECTOR), lines, -(-len(touched) // LINE)


def _shared_request(starts, width):
    """(wavefronts, ideal wavefronts) of one warp's request."""
    per_phase = _PHASE_LANES.get(width, WARP)
    words_per_access = max(1, width // WORD)
    wavefronts = ideal = 0
    for phase in range(0, len(starts), per_phase):
        a = starts[phase:phase + per_phase]
        words = np.unique((a[:, None] // WORD + np.arange(words_per_access)[None, :]).ravel())
        wavefronts += np.bincount(words % BANKS, minlength=BANKS).max()
        ideal += -(-len(words) // BANKS)
    return int(wavefronts), int(ideal)


def _offsets(layout):
    """The offsets of `layout` for the 1-D indices 0..size-1, as a NumPy array."""
    if isinstance(layout, ComposedLayout):
        inner = _offsets(layout.inner) + layout.offset
        try:
            out = np.asarray(layout.outer(inner))
            if out.shape == inner.shape:
                return out
        except Exception:  # noqa: BLE001 - an outer function that only takes ints
            pass
        return np.array([layout.outer(int(x)) for x in inner])
    if not isinstance(layout, Layout):
        raise MoyeError(f"analyze: expected a layout, got {layout!r}")
    shape, stride = T.flatten(layout.shape), T.flatten(layout.stride)
    shape = shape if type(shape) is tuple else (shape,)
    stride = stride if type(stride) is tuple else (stride,)
    if not all(type(x) is int for x in shape + stride):
        raise MoyeError(f"analyze: the layout {layout} is not static; give static layouts")
    index = np.arange(size(layout))
    out = np.zeros_like(index)
    for s, d in zip(shape, stride):
        out += (index % s) * d
        index //= s
    return out

"""mbarriers and the bulk tensor copy engine (TMA) on the CPU backend, from
the PTX ISA.

An mbarrier has, per phase, a count of pending arrivals and a transaction
count (bytes expected minus bytes completed); the phase completes when both
reach zero, its parity flips and the arrival count is reset to the one
given at init. mbarrier.try_wait.parity p is true once the phase of parity
p has completed (the current phase's parity differs from p).

A TMA load reads its box from global memory when issued (the tensor map's
arguments say where: dimension 0 contiguous, byte strides for the others,
zeros outside the array) and holds the bytes, placed where the engine
puts them (dense, dimension 0 fastest, swizzled by address). They land in
shared memory, completing their bytes on the mbarrier, when a thread waits
on that mbarrier: a kernel that reads the tile without waiting reads stale
memory, and with race_check it is an error. A TMA store reads its shared
tile when issued and writes the in-bounds part of the box to global
memory; the tile counts as being read until a tma_store_wait retires its
bulk group (writing it before that is an error with race_check, as is a
store reading bytes that threads wrote without fence_proxy_async).

A wait whose phase has not completed (after the pending loads landed)
blocks its context until other contexts complete it (contexts.py); when
none can, the run ends with a deadlock error. A fruitless try_wait lets
the other contexts run once; after many fruitless tries in a row with
nothing else to run, it raises. With race_check, a phase orders the
arrivals and landed loads that completed it before the waits that see it
complete (race.py).
"""
import numpy as np

from .errors import KernelRuntimeError, where

SPIN_LIMIT = 1000           # fruitless try_waits in a row on one mbarrier before giving up


class TensorMap:
    """A tensor map on the CPU: the global array (a 1-D element view from
    its first element) and cuTensorMapEncodeTiled's arguments."""

    def __init__(self, buf, args, name):
        self.buf, self.args, self.name = buf, args, name
        e = args.element_bytes
        self.strides = (1,) + tuple(s // e for s in args.global_strides)
        box = args.box_dim
        # element d-coordinates of the box, dimension 0 fastest; dense smem byte offsets
        grids = np.meshgrid(*[np.arange(n) for n in box], indexing="ij")
        self.box_coords = [g.ravel(order="F") for g in grids]
        self.dense_bytes = np.arange(int(np.prod(box)), dtype=np.int64) * e

    def elements(self, coords):
        """(in-bounds mask, global element index) of each box element at `coords`."""
        inside = np.ones(len(self.dense_bytes), bool)
        index = np.zeros(len(self.dense_bytes), np.int64)
        for d, c in enumerate(coords):
            g = self.box_coords[d] + int(c)
            inside &= (g >= 0) & (g < self.args.global_dim[d])
            index += g * self.strides[d]
        return inside, np.where(inside, index, 0)

    def smem_bytes(self, start):
        """The shared-memory byte of each byte of the box, the box starting at
        byte `start` of its array (whose alignment is the swizzle's period)."""
        e = self.args.element_bytes
        addr = start + self.dense_bytes[:, None] + np.arange(e)
        bits = self.args.swizzle_bits
        if bits:
            mask = ((1 << bits) - 1) << 7
            addr = addr ^ ((addr & mask) >> 3)
        return addr


class PendingLoad:
    """A TMA load on its way: the mbarrier it completes, where its bytes go."""
    __slots__ = ("bar", "arr", "dst", "row", "bytes", "data", "lane", "loc")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)


class Hopper:
    """The mbarrier and TMA state of a batch of blocks."""

    def __init__(self, block):
        self.block = block
        self.bars = {}              # (array id, row, index) -> [count, pending, tx, phase]
        self.loads = []             # TMA loads not landed
        self.stores = []            # TMA stores whose shared memory is being read
        self.committed = np.zeros(block.n, np.int64)
        self.spins = {}

    def fence_proxy_async(self, s, mask):
        """fence.proxy.async: for the race check, the active lanes' generic
        writes to shared memory are visible to their later async copies."""
        if self.block.race is not None:
            self.block.race.fence_proxy_async(np.nonzero(mask)[0])

    # -- mbarriers ---------------------------------------------------------------------
    def _bars(self, s, mask, at=0):
        """(keys, lanes) of the mbarrier operand of `s` for the active lanes."""
        b = self.block
        kind, buf, arr, off, name = b._target(s.args[at])
        if kind != "shared" or buf.dtype.itemsize != 8:
            raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op}: an mbarrier is a 64-bit word "
                                     f"of shared memory, not of the {name}")
        lanes = np.nonzero(mask)[0]
        index = (off + b.vec(s.args[at + 1]).astype(np.int64))[lanes]
        bad = (index < 0) | (index >= buf.shape[-1])
        if bad.any():
            i = int(np.nonzero(bad)[0][0])
            b.out_of_bounds(s, s.op, name, lanes[i], index[i], "1 mbarrier", buf.shape[-1])
        rows = b.block_of_lane[lanes]
        return [(arr.id, int(r), int(i)) for r, i in zip(rows, index)], lanes

    def _state(self, s, key, lane):
        st = self.bars.get(key)
        if st is None:
            b = self.block
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  {s.op} by thread {b._tid(lane)} of block {b._bid(lane)} on "
                f"mbarrier {key[2]} before mbarrier_init (and a sync_threads after it)")
        return st

    def init(self, s, mask):
        keys, lanes = self._bars(s, mask)
        count = self.block.vec(s.args[2]).astype(np.int64)
        for key, lane in zip(keys, lanes):
            c = int(count[lane])
            self.bars[key] = [c, c, 0, 0]
            self.spins.pop(key, None)
            if self.block.race is not None:
                self.block.race.forget(key)

    def arrive(self, s, mask, tx=False):
        keys, lanes = self._bars(s, mask)
        nbytes = self.block.vec(s.args[2]).astype(np.int64) if tx else None
        race = self.block.race
        for key, lane in zip(keys, lanes):
            st = self._state(s, key, lane)
            if race is not None:
                race.release(key, [lane])
            if tx:
                st[2] += int(nbytes[lane])
            st[1] -= 1
            if st[1] < 0:
                b = self.block
                raise KernelRuntimeError(
                    f"{where(s.loc)}\n  thread {b._tid(lane)} of block {b._bid(lane)} arrives "
                    f"on mbarrier {key[2]} whose phase already has all its {st[0]} arrivals")
            self._complete(key, st)

    def _complete(self, key, st):
        self.spins.pop(key, None)
        if st[1] == 0 and st[2] == 0:
            st[1], st[3] = st[0], st[3] ^ 1
            if self.block.race is not None:
                self.block.race.complete(key)

    def _land(self, keys):
        """Land the pending TMA loads on these mbarriers."""
        keys = set(keys)
        keep = []
        for ld in self.loads:
            if ld.bar not in keys:
                keep.append(ld)
                continue
            ld.dst[ld.row, ld.bytes] = ld.data
            if self.block.race is not None:
                self.block.race.async_land(ld.arr, ld.row, ld.bytes, ld.bar)
            st = self.bars[ld.bar]
            st[2] -= ld.data.size
            self._complete(ld.bar, st)
        self.loads = keep

    def _done(self, s, mask):
        keys, lanes = self._bars(s, mask)
        phase = self.block.vec(s.args[2]).astype(np.int64)[lanes] & 1
        for key, lane in zip(keys, lanes):
            self._state(s, key, lane)
        return keys, lanes, phase, self._check(keys, phase)

    def _check(self, keys, phase):
        """Whether the phase of parity `phase` of each mbarrier has completed,
        after landing the loads pending on them."""
        self._land(keys)
        return np.array([self.bars[k][3] != p for k, p in zip(keys, phase)], bool)

    def _acquire(self, keys, lanes, done):
        race = self.block.race
        if race is not None:
            for key, lane, ok in zip(keys, lanes, done):
                if ok:
                    race.acquire(key, [lane])

    def try_wait(self, s, mask):
        keys, lanes, phase, done = self._done(s, mask)
        if not done.all() and self.block.sched.yield_():
            done = self._check(keys, phase)     # others ran meanwhile
        self._acquire(keys, lanes, done)
        out = np.zeros(self.block.n, bool)
        out[lanes] = done
        for key, lane, ok in zip(keys, lanes, done):
            if ok:
                continue
            n = self.spins[key] = self.spins.get(key, 0) + 1
            if n > SPIN_LIMIT:
                raise KernelRuntimeError(
                    f"{where(s.loc)}\n  deadlock: {self._waiting(key, lane)}, after "
                    f"{SPIN_LIMIT} fruitless mbarrier_try_wait{self.block.sched.others()}")
        return out

    def wait(self, s, mask):
        keys, lanes, phase, done = self._done(s, mask)
        if not done.all():
            def ready():
                nonlocal done
                done = self._check(keys, phase)
                return done.all()

            def what():
                i = int(np.nonzero(~done)[0][0])
                return self._waiting(keys[i], lanes[i])

            self.block.sched.block_until(ready, s.loc, what)
        self._acquire(keys, lanes, done)

    def _waiting(self, key, lane):
        """What `lane` waiting on mbarrier `key` waits for, as a sentence."""
        count, pending, tx, phase = self.bars[key]
        b = self.block
        parts = []
        if pending:
            parts.append(f"{pending} of its {count} arrivals missing")
        if tx:
            parts.append(f"{tx} transaction bytes expected that no pending TMA load brings")
        return (f"thread {b._tid(lane)} of block {b._bid(lane)} waits for phase {phase} of "
                f"mbarrier {key[2]}, which can never complete: "
                f"{', '.join(parts) or 'nothing pending'}")

    # -- TMA -------------------------------------------------------------------------------
    def _tile(self, s, base_at, idx_at, lane, tmap):
        """(buffer bytes, array, row, byte positions) of the shared tile for `lane`."""
        b = self.block
        kind, buf, arr, off, name = b._target(s.args[base_at])
        if kind != "shared":
            raise KernelRuntimeError(f"{where(s.loc)}\n  {s.op}: the tile must be in shared "
                                     f"memory, not the {name}")
        start = int((off + b.vec(s.args[idx_at]).astype(np.int64))[lane]) * buf.itemsize
        pos = tmap.smem_bytes(start)
        raw = buf.view(np.uint8)
        if start < 0 or pos.max() >= raw.shape[-1]:
            b.out_of_bounds(s, s.op, name, lane, start // buf.itemsize,
                            f"{tmap.args.box_bytes} bytes", buf.shape[-1], buf.itemsize)
        return raw, arr, int(b.block_of_lane[lane]), pos

    def _coords(self, s, first, lane):
        return [int(self.block.vec(c).astype(np.int64)[lane]) for c in s.args[first:]]

    def load(self, s, mask):
        """tma_load(dst, dst_idx, bar, bar_idx, tmap, c...)"""
        b = self.block
        tmap = b.get(s.args[4])
        keys, lanes = self._bars(s, mask, 2)
        for key, lane in zip(keys, lanes):
            self._state(s, key, lane)
            raw, arr, row, pos = self._tile(s, 0, 1, lane, tmap)
            inside, index = tmap.elements(self._coords(s, 5, lane))
            src = tmap.buf.view(np.uint8).reshape(-1, tmap.args.element_bytes)
            data = np.zeros(pos.shape, np.uint8)
            data[inside] = src[index[inside]]
            if b.race is not None:
                b.race.async_issue_bytes(s, arr, lane, row, pos.ravel(), tmap.args.element_bytes)
            self.loads.append(PendingLoad(bar=key, arr=arr, dst=raw, row=row, bytes=pos, data=data,
                                    lane=lane, loc=s.loc))

    def store(self, s, mask, add=False):
        """tma_store(tmap, src, src_idx, c...); with `add`, tma_reduce_add's
        (the tile added to the global elements)."""
        b = self.block
        tmap = b.get(s.args[0])
        for lane in np.nonzero(mask)[0]:
            raw, arr, row, pos = self._tile(s, 1, 2, lane, tmap)
            if b.race is not None:
                b.race.bulk_read(s, arr, lane, row, pos.ravel(), tmap.args.element_bytes)
            data = raw[row][pos]
            inside, index = tmap.elements(self._coords(s, 3, lane))
            if add:
                values = np.ascontiguousarray(data[inside]).view(tmap.buf.dtype).ravel()
                np.add.at(tmap.buf, index[inside], values)
            else:
                dst = tmap.buf.view(np.uint8).reshape(-1, tmap.args.element_bytes)
                dst[index[inside]] = data[inside]
            self.stores.append((lane, self.committed[lane], arr, row, pos.ravel()))

    def commit(self, mask):
        self.committed[mask] += 1

    def store_wait(self, s, mask):
        limit = np.where(mask, self.committed - int(s.attrs["n"]), -1)
        keep = []
        for st in self.stores:
            lane, group, arr, row, pos = st
            if group < limit[lane]:
                if self.block.race is not None:
                    self.block.race.bulk_retire(arr, row, pos)
            else:
                keep.append(st)
        self.stores = keep

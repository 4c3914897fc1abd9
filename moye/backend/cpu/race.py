"""The CPU backend's race check (`run_kernel(race_check=True)`).

Shared memory is shadowed byte by byte: the last write to each byte since
the last barrier and a read after it (thread, its clock then, line). An
access by another thread that conflicts with one of them (a write after
a read or a write, a read after a write) is a race unless the two are
ordered. A sync_threads orders everything (it forgets the shadow); finer
orders come from vector clocks: each thread has a clock per thread, an
arrival on an mbarrier or a named barrier (or a TMA load landing on an
mbarrier) adds the arriving thread's clocks to the barrier's current
phase, and a thread that sees the phase complete (mbarrier_wait, a true
mbarrier_try_wait, bar.sync) takes them in. A producer/consumer pipeline
is then race-free exactly when its waits order it: a consumer reading a
stage without waiting on its full barrier reads a TMA load's bytes
unordered (or before they landed), a producer refilling a stage its
consumers have not released through the empty barrier writes over reads
it is not ordered after. (A read is remembered per byte as one thread: a
later read by a thread not ordered after it keeps the first, so a race
with the second can be missed, never invented.)

Bytes that a cp.async has been issued to write, but that no cp.async.wait
has yet retired, are marked too: any access to them, by any thread, is an
error, since the copy may land before or after it. So are bytes a TMA
load will write until they land (at an mbarrier wait), and bytes a TMA
store is reading until a tma_store_wait (writing them is an error). A TMA
store reading bytes that a thread wrote with ordinary stores and did not
then fence with fence_proxy_async is an error too: the async proxy may not
see them.

Atomics (atomic_add, red, ...) are atomic: two threads' atomics on one
address race with nothing, but an atomic and a plain load or store of
another thread that nothing orders do. Two atomics per byte are
remembered (the first unordered one and the last by another thread), so
that a plain access races with one of them whenever another thread's
atomic came before it unordered. An atomic reads too: on shared memory
nothing wrote, it is an error as a load is.

A read (a load, ldmatrix, a TMA store's) of shared memory that nothing
wrote in this launch (a store, stmatrix, a cp.async or a TMA load that has
landed) is an error: shared memory starts uninitialized on the GPU.
ldmatrix is the exception: CuTe's mainloops (examples/gemm.py) prefetch
registers one k-block ahead, past the last tile, into registers the MMA
never uses.
"""
import numpy as np

from .errors import KernelRuntimeError, where


class _Shadow:
    """Per byte of one shared array (rows, bytes): the last write and a read
    since the last barrier (lane, clock, line; lane -1 for none), and the
    pending asynchronous accesses."""

    def __init__(self, shape):
        def lanes():
            return np.full(shape, -1, np.int64)

        def zeros():
            return np.zeros(shape, np.int64)
        self.w_lane, self.w_clock, self.w_loc = lanes(), zeros(), zeros()
        self.r_lane, self.r_clock, self.r_loc = lanes(), zeros(), zeros()
        self.a_lane, self.a_clock, self.a_loc = lanes(), zeros(), zeros()       # atomics
        self.a2_lane, self.a2_clock, self.a2_loc = lanes(), zeros(), zeros()
        self.async_lane, self.async_clock, self.async_loc = lanes(), zeros(), zeros()
        self.bulk_lane, self.bulk_loc = lanes(), zeros()       # a TMA store reading it
        self.dirty_lane, self.dirty_loc = lanes(), zeros()     # not fenced for the async proxy
        self.written = np.zeros(shape, bool)    # by any write of this launch (kept at barriers)


class RaceCheck:
    """The shadow of a batch of blocks' shared memory."""

    def __init__(self, block):
        self.block = block
        self.shadows = {}       # array id -> _Shadow
        self.locs, self.loc_index = [None], {}
        self.tma_locs = set()       # loc indices of TMA loads (for the messages)
        self.vc = None              # (lanes, lanes) clocks, made at the first arrival
        self.pending = {}           # barrier key -> clocks arrived in its current phase
        self.done = {}              # barrier key -> clocks of its completed phases

    def _shadow(self, arr):
        sh = self.shadows.get(arr.id)
        if sh is None:
            buf = self.block.env[arr.id][1]
            sh = self.shadows[arr.id] = _Shadow((buf.shape[0], buf.nbytes // buf.shape[0]))
        return sh

    def _loc(self, loc):
        i = self.loc_index.get(id(loc))
        if i is None:
            i = self.loc_index[id(loc)] = len(self.locs)
            self.locs.append(loc)
        return i

    def barrier(self, block_only=False):
        """A barrier of every thread of the batch: everything before is
        ordered before everything after (the shadow forgets). With
        `block_only` (sync_threads) in a batch of several blocks (a cluster),
        it orders each block's threads only, through the vector clocks: an
        access by another block (through distributed shared memory) stays
        unordered with them until a cluster barrier."""
        b = self.block
        if block_only and len(b.block_ids) > 1:
            vc = self._clocks()
            for row in range(len(b.block_ids)):
                lanes = np.nonzero(b.block_of_lane == row)[0]
                vc[lanes] = vc[lanes].max(axis=0)
                vc[lanes, lanes] += 1
            return
        for sh in self.shadows.values():
            sh.w_lane.fill(-1)
            sh.r_lane.fill(-1)
            sh.a_lane.fill(-1)
            sh.a2_lane.fill(-1)

    # -- vector clocks ------------------------------------------------------------------
    def _clocks(self):
        if self.vc is None:
            self.vc = np.eye(self.block.n, dtype=np.int64)
        return self.vc

    def _clock(self, lanes):
        """The own clock of each of `lanes`."""
        if self.vc is None:
            return np.ones(np.shape(lanes), np.int64)
        return self.vc[lanes, lanes]

    def _ordered(self, lanes, before, clock):
        """Whether each access by `lanes` comes after the access by `before`
        (a lane) at its `clock`."""
        if self.vc is None:
            return np.zeros(np.shape(lanes), bool)
        return self.vc[lanes, np.maximum(before, 0)] >= clock

    def _phase(self, key):
        p = self.pending.get(key)
        if p is None:
            p = self.pending[key] = np.zeros(self.block.n, np.int64)
        return p

    def release(self, key, lanes):
        """`lanes` arrive on barrier `key`: what they did comes before its phase."""
        vc = self._clocks()
        p = self._phase(key)
        np.maximum(p, vc[lanes].max(axis=0), out=p)
        vc[lanes, lanes] += 1

    def complete(self, key):
        """Barrier `key` completed its phase."""
        p = self.pending.pop(key, None)
        if p is not None:
            d = self.done.get(key)
            self.done[key] = p if d is None else np.maximum(d, p)

    def acquire(self, key, lanes):
        """`lanes` saw barrier `key` complete a phase: they come after it."""
        d = self.done.get(key)
        if d is not None:
            vc = self._clocks()
            vc[lanes] = np.maximum(vc[lanes], d)

    def forget(self, key):
        """Barrier `key` was initialized again."""
        self.pending.pop(key, None)
        self.done.pop(key, None)

    @staticmethod
    def _bytes(lanes, rows, start, nbytes):
        k = np.arange(nbytes)
        return (np.repeat(lanes, nbytes), np.repeat(rows, nbytes),
                (np.asarray(start)[:, None] + k).ravel())

    def access(self, s, arr, lanes, rows, start, nbytes, itemsize, write, prefetch=False,
               atomic=False):
        """Check and record an access by `lanes` to bytes start..start+nbytes of
        `arr` in block rows `rows`; a `prefetch` read may read bytes not yet
        written (see _not_uninitialized); an `atomic` one reads and writes."""
        lane, row, byte = self._bytes(lanes, rows, start, nbytes)
        sh = self._shadow(arr)
        self._not_pending(s, sh, lane, row, byte, itemsize, write or atomic)
        if not write and not prefetch:
            self._not_uninitialized(s, arr, sh, lane, row, byte, itemsize)
        self._conflicts(s, sh, lane, row, byte, itemsize, write, atomic)
        loc = self._loc(s.loc)
        clock = self._clock(lane)
        if atomic:
            self._not_bulk_read(s, sh, lane, row, byte, itemsize)
            self._record_atomic(sh, lane, row, byte, clock, loc)
            sh.dirty_lane[row, byte], sh.dirty_loc[row, byte] = lane, loc
        elif write:
            self._not_bulk_read(s, sh, lane, row, byte, itemsize)
            sh.w_lane[row, byte], sh.w_clock[row, byte], sh.w_loc[row, byte] = lane, clock, loc
            sh.r_lane[row, byte] = -1
            sh.a_lane[row, byte] = sh.a2_lane[row, byte] = -1
            sh.dirty_lane[row, byte], sh.dirty_loc[row, byte] = lane, loc
            sh.written[row, byte] = True
        else:
            prev = sh.r_lane[row, byte]
            keep = (prev >= 0) & (prev != lane) & ~self._ordered(lane, prev,
                                                                  sh.r_clock[row, byte])
            r, b = row[~keep], byte[~keep]
            sh.r_lane[r, b], sh.r_clock[r, b], sh.r_loc[r, b] = lane[~keep], clock[~keep], loc

    def _record_atomic(self, sh, lane, row, byte, clock, loc):
        """Remember an atomic in the first slot where it is the first (or
        comes after it), else in the second: the last by another thread.
        Byte by byte in order, as one instruction's lanes run in lane order."""
        for k in range(len(lane)):
            r, b, ln = row[k], byte[k], lane[k:k + 1]
            first = sh.a_lane[r, b]
            if first < 0 or first == ln[0] or self._ordered(ln, first, sh.a_clock[r, b])[0]:
                sh.a_lane[r, b], sh.a_clock[r, b], sh.a_loc[r, b] = ln[0], clock[k], loc
            else:
                sh.a2_lane[r, b], sh.a2_clock[r, b], sh.a2_loc[r, b] = ln[0], clock[k], loc

    def async_issue(self, s, arr, lanes, rows, start, nbytes, itemsize):
        """A cp.async will write these bytes: a write that is pending until retired."""
        lane, row, byte = self._bytes(lanes, rows, start, nbytes)
        sh = self._shadow(arr)
        self._not_pending(s, sh, lane, row, byte, itemsize, True)
        self._conflicts(s, sh, lane, row, byte, itemsize, True)
        sh.async_lane[row, byte], sh.async_loc[row, byte] = lane, self._loc(s.loc)

    def async_retire(self, arr, lanes, rows, start, nbytes, loc):
        """The copies landed: a write by the issuing threads at the cp.async's line."""
        lane, row, byte = self._bytes(lanes, rows, start, nbytes)
        sh = self._shadow(arr)
        sh.async_lane[row, byte] = -1
        sh.written[row, byte] = True
        sh.w_lane[row, byte], sh.w_clock[row, byte] = lane, self._clock(lane)
        sh.w_loc[row, byte] = self._loc(loc)
        sh.r_lane[row, byte] = -1

    # -- TMA --------------------------------------------------------------------------
    def async_issue_bytes(self, s, arr, lane, row, byte, itemsize):
        """A TMA load by `lane` will write these bytes of block row `row`."""
        n = len(byte)
        lanes, rows = np.full(n, lane, np.int64), np.full(n, row, np.int64)
        sh = self._shadow(arr)
        self._not_pending(s, sh, lanes, rows, byte, itemsize, True)
        self._not_bulk_read(s, sh, lanes, rows, byte, itemsize)
        self._conflicts(s, sh, lanes, rows, byte, itemsize, True)
        loc = self._loc(s.loc)
        self.tma_locs.add(loc)
        sh.async_lane[row, byte], sh.async_loc[row, byte] = lane, loc
        sh.async_clock[row, byte] = self._clock(lane)

    def async_land(self, arr, row, byte, bar):
        """The TMA load landed on mbarrier `bar`: a write by the issuing thread
        (at its clock when it issued it) that the phase orders before its waits."""
        sh = self._shadow(arr)
        byte = np.ravel(byte)
        lane, clock = sh.async_lane[row, byte], sh.async_clock[row, byte]
        if lane.size and lane[0] >= 0:
            self._clocks()
            p = self._phase(bar)
            p[lane[0]] = max(p[lane[0]], clock.max())
        sh.w_lane[row, byte], sh.w_clock[row, byte] = lane, clock
        sh.w_loc[row, byte] = sh.async_loc[row, byte]
        sh.r_lane[row, byte] = -1
        sh.async_lane[row, byte] = -1
        sh.dirty_lane[row, byte] = -1
        sh.written[row, byte] = True

    def bulk_read(self, s, arr, lane, row, byte, itemsize):
        """A TMA store by `lane` reads these bytes until a tma_store_wait retires it."""
        n = len(byte)
        lanes, rows = np.full(n, lane, np.int64), np.full(n, row, np.int64)
        sh = self._shadow(arr)
        self._not_pending(s, sh, lanes, rows, byte, itemsize, False)
        self._not_uninitialized(s, arr, sh, lanes, rows, byte, itemsize)
        self._conflicts(s, sh, lanes, rows, byte, itemsize, False)
        hit = np.nonzero(sh.dirty_lane[row, byte] >= 0)[0]
        if hit.size:
            i = byte[hit[0]]
            b = self.block
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  the TMA store by thread {b._tid(lane)} of block "
                f"{b._bid(lane)} reads shared memory (element {i // itemsize}) that thread "
                f"{b._tid(sh.dirty_lane[row, i])} wrote at "
                f"{where(self.locs[sh.dirty_loc[row, i]])} with ordinary stores: the writer "
                "must call fence_proxy_async() before the "
                "barrier, or the copy engine may not see them")
        sh.bulk_lane[row, byte], sh.bulk_loc[row, byte] = lane, self._loc(s.loc)

    def bulk_retire(self, arr, row, byte):
        self._shadow(arr).bulk_lane[row, byte] = -1

    def fence_proxy_async(self, lanes):
        """fence.proxy.async by `lanes`: their writes are visible to the async proxy."""
        for sh in self.shadows.values():
            hit = np.isin(sh.dirty_lane, lanes)
            sh.dirty_lane[hit] = -1

    def _not_bulk_read(self, s, sh, lane, row, byte, itemsize):
        hit = np.nonzero(sh.bulk_lane[row, byte] >= 0)[0]
        if hit.size:
            i = hit[0]
            b = self.block
            blane = sh.bulk_lane[row[i], byte[i]]
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  thread {b._tid(lane[i])} of block {b._bid(lane[i])} writes "
                f"shared memory (element {byte[i] // itemsize}) that a TMA store by thread "
                f"{b._tid(blane)} at {where(self.locs[sh.bulk_loc[row[i], byte[i]]])} may still "
                "be reading: tma_store_wait first (and sync_threads when another thread "
                "issued it)")

    def _not_uninitialized(self, s, arr, sh, lane, row, byte, itemsize):
        """A read of shared memory that nothing (a store, a cp.async, a TMA load,
        stmatrix) wrote in this launch reads garbage on the GPU: an error."""
        hit = np.nonzero(~sh.written[row, byte])[0]
        if hit.size:
            i = hit[0]
            b = self.block
            loc = b.kernel.array_locs.get(arr.id) if arr is not None else None
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  thread {b._tid(lane[i])} of block {b._bid(lane[i])} reads "
                f"element {byte[i] // itemsize} of the shared array at {where(loc)}, which no "
                "thread wrote in this launch (shared memory starts uninitialized)")

    def _not_pending(self, s, sh, lane, row, byte, itemsize, write):
        hit = np.nonzero(sh.async_lane[row, byte] >= 0)[0]
        if hit.size:
            i = hit[0]
            b = self.block
            plane = sh.async_lane[row[i], byte[i]]
            loc_index = sh.async_loc[row[i], byte[i]]
            ploc = self.locs[loc_index]
            what, fix = ("a TMA load", "wait on its mbarrier first (mbarrier_wait)") \
                if loc_index in self.tma_locs else \
                ("a cp.async", "retire the copy with cp_async_wait first (and sync_threads "
                               "when another thread issued it)")
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  thread {b._tid(lane[i])} of block {b._bid(lane[i])} "
                f"{'writes' if write else 'reads'} shared memory (element "
                f"{byte[i] // itemsize}) that {what} by thread {b._tid(plane)} at "
                f"{where(ploc)} has not finished writing: {fix}")

    def _conflicts(self, s, sh, lane, row, byte, itemsize, write, atomic=False):
        earlier = [("write", sh.w_lane, sh.w_clock, sh.w_loc)]
        if write or atomic:
            earlier.append(("read", sh.r_lane, sh.r_clock, sh.r_loc))
        if not atomic:                  # atomics race with plain accesses only
            earlier += [("atomic", sh.a_lane, sh.a_clock, sh.a_loc),
                        ("atomic", sh.a2_lane, sh.a2_clock, sh.a2_loc)]
        for kind, lanes, clocks, locs in earlier:
            plane, pclock = lanes[row, byte], clocks[row, byte]
            bad = (plane >= 0) & (plane != lane)
            if bad.any():
                bad &= ~self._ordered(lane, plane, pclock)
            if bad.any():
                i = np.nonzero(bad)[0][0]
                prev = (plane[i], kind, self.locs[locs[row[i], byte[i]]])
                now = "atomic" if atomic else "write" if write else "read"
                self._report(s, prev, lane[i], byte[i] // itemsize, now)
        if write and len(lane) > 1:              # two threads writing in one instruction
            key = row * sh.w_lane.shape[1] + byte
            order = np.lexsort((lane, key))
            same = (key[order][1:] == key[order][:-1]) & (lane[order][1:] != lane[order][:-1])
            if same.any():
                i, j = order[np.nonzero(same)[0][0]], order[np.nonzero(same)[0][0] + 1]
                self._report(s, (lane[i], "write", s.loc), lane[j], byte[j] // itemsize,
                             "write")

    def _report(self, s, prev, lane, element, now):
        """A race between the earlier access `prev` (lane, kind, loc) and a
        `now` access ("read", "write", "atomic") by `lane`."""
        plane, before, ploc = prev
        b = self.block
        kind = f"{now}-after-{before}"
        raise KernelRuntimeError(
            f"shared-memory race ({kind}) on element {element} between thread "
            f"{b._tid(plane)} at {where(ploc)} and thread {b._tid(lane)} at {where(s.loc)}, "
            f"block {b._bid(lane)}, with no barrier between them")

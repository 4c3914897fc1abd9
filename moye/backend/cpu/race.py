"""The CPU backend's race check (`run_kernel(race_check=True)`).

Shared memory is shadowed byte by byte: which thread last wrote each byte
since the last barrier, or first read it, and at which line. An access by
another thread that conflicts with it (a write after a read or a write, a
read after a write) is a race: between two barriers the GPU gives the two
no order. Bytes that a cp.async has been issued to write, but that no
cp.async.wait has yet retired, are marked too: any access to them, by any
thread, is an error, since the copy may land before or after it. So are
bytes a TMA load will write until they land (at an mbarrier wait, which
orders them for every thread), and bytes a TMA store is reading until a
tma_store_wait (writing them is an error). A TMA store reading bytes that
a thread wrote with ordinary stores and did not then fence with
fence_proxy_async is an error too: the async proxy may not see them.
"""
import numpy as np

from .errors import KernelRuntimeError, where

NONE, READ, WRITE = 0, 1, 2


class _Shadow:
    """Per byte of one shared array (rows, bytes): the access since the last
    barrier (kind, thread, line) and the pending cp.async write (thread, line)."""

    def __init__(self, shape):
        self.kind = np.zeros(shape, np.int8)
        self.lane, self.loc = np.full(shape, -1, np.int64), np.zeros(shape, np.int64)
        self.async_lane = np.full(shape, -1, np.int64)
        self.async_loc = np.zeros(shape, np.int64)
        self.bulk_lane = np.full(shape, -1, np.int64)      # a TMA store reading it
        self.bulk_loc = np.zeros(shape, np.int64)
        self.dirty_lane = np.full(shape, -1, np.int64)     # written, not fenced for the async proxy
        self.dirty_loc = np.zeros(shape, np.int64)


class RaceCheck:
    """The shadow of a batch of blocks' shared memory."""

    def __init__(self, block):
        self.block = block
        self.shadows = {}       # array id -> _Shadow
        self.locs, self.loc_index = [None], {}
        self.tma_locs = set()       # loc indices of TMA loads (for the messages)

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

    def barrier(self):
        for sh in self.shadows.values():
            sh.kind.fill(NONE)

    @staticmethod
    def _bytes(lanes, rows, start, nbytes):
        k = np.arange(nbytes)
        return (np.repeat(lanes, nbytes), np.repeat(rows, nbytes),
                (np.asarray(start)[:, None] + k).ravel())

    def access(self, s, arr, lanes, rows, start, nbytes, itemsize, write):
        """Check and record an access by `lanes` to bytes start..start+nbytes of
        `arr` in block rows `rows`."""
        lane, row, byte = self._bytes(lanes, rows, start, nbytes)
        sh = self._shadow(arr)
        self._not_pending(s, sh, lane, row, byte, itemsize, write)
        self._conflicts(s, sh, lane, row, byte, itemsize, write)
        loc = self._loc(s.loc)
        if write:
            self._not_bulk_read(s, sh, lane, row, byte, itemsize)
            sh.kind[row, byte], sh.lane[row, byte], sh.loc[row, byte] = WRITE, lane, loc
            sh.dirty_lane[row, byte], sh.dirty_loc[row, byte] = lane, loc
        else:
            fresh = sh.kind[row, byte] == NONE
            r, b = row[fresh], byte[fresh]
            sh.kind[r, b], sh.lane[r, b], sh.loc[r, b] = READ, lane[fresh], loc

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
        sh.kind[row, byte], sh.lane[row, byte], sh.loc[row, byte] = WRITE, lane, self._loc(loc)

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

    def async_land(self, arr, row, byte):
        """The TMA load landed, ordered by the mbarrier for the threads that wait."""
        sh = self._shadow(arr)
        sh.async_lane[row, byte] = -1
        sh.kind[row, byte] = NONE
        sh.dirty_lane[row, byte] = -1

    def bulk_read(self, s, arr, lane, row, byte, itemsize):
        """A TMA store by `lane` reads these bytes until a tma_store_wait retires it."""
        n = len(byte)
        lanes, rows = np.full(n, lane, np.int64), np.full(n, row, np.int64)
        sh = self._shadow(arr)
        self._not_pending(s, sh, lanes, rows, byte, itemsize, False)
        self._conflicts(s, sh, lanes, rows, byte, itemsize, False)
        hit = np.nonzero(sh.dirty_lane[row, byte] >= 0)[0]
        if hit.size:
            i = byte[hit[0]]
            b = self.block
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  the TMA store by thread {b._tid(lane)} of block "
                f"{b._bid(lane)} reads shared memory (element {i // itemsize}) that thread "
                f"{b._tid(sh.dirty_lane[row, i])} wrote at "
                f"{where(self.locs[sh.dirty_loc[row, i]])} with ordinary stores: the writer must call fence_proxy_async() before the "
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

    def _conflicts(self, s, sh, lane, row, byte, itemsize, write):
        kind, plane = sh.kind[row, byte], sh.lane[row, byte]
        bad = (kind != NONE) & (plane != lane) & (write | (kind == WRITE))
        if bad.any():
            i = np.nonzero(bad)[0][0]
            prev = (plane[i], kind[i] == WRITE, self.locs[sh.loc[row[i], byte[i]]])
            self._report(s, prev, lane[i], byte[i] // itemsize, write)
        if write and len(lane) > 1:              # two threads writing in one instruction
            key = row * sh.kind.shape[1] + byte
            order = np.lexsort((lane, key))
            same = (key[order][1:] == key[order][:-1]) & (lane[order][1:] != lane[order][:-1])
            if same.any():
                i, j = order[np.nonzero(same)[0][0]], order[np.nonzero(same)[0][0] + 1]
                self._report(s, (lane[i], True, s.loc), lane[j], byte[j] // itemsize, True)

    def _report(self, s, prev, lane, element, write):
        plane, pwrite, ploc = prev
        b = self.block
        kind = ("write-after-write" if write and pwrite else
                "read-after-write" if pwrite else "write-after-read")
        raise KernelRuntimeError(
            f"shared-memory race ({kind}) on element {element} between thread "
            f"{b._tid(plane)} at {where(ploc)} and thread {b._tid(lane)} at {where(s.loc)}, "
            f"block {b._bid(lane)}, with no barrier between them")

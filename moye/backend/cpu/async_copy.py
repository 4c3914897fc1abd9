"""cp.async on the CPU backend: PTX cp.async, cp.async.commit_group,
cp.async.wait_group and cp.async.wait_all, with the GPU's ordering.

Each thread has a queue of groups of pending copies. cp.async reads its
global source when issued (nothing when its predicate is false: the
destination is then zero-filled) and holds the bytes; the shared
destination is written only when a wait retires the copy's group, so a
kernel that forgets to wait reads stale shared memory, as it may on a GPU.
wait_group n retires, for the threads that execute it, every committed
group but the newest n; wait_all commits the open group and retires
everything. Copies still pending when the kernel ends are dropped: they
could only have written shared memory, which ends with the block. With
race_check, touching shared memory that a pending copy will write is an
error (race.py).
"""
import numpy as np

from .errors import KernelRuntimeError, where


class _Copies:
    """The copies of one cp.async instruction not yet retired, one entry per thread."""
    __slots__ = ("lane", "group", "arr", "dst", "row", "byte", "data", "loc")

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)

    def take(self, sel):
        """The entries `sel` (a boolean mask), as a new _Copies."""
        return _Copies(lane=self.lane[sel], group=self.group[sel], arr=self.arr, dst=self.dst,
                       row=self.row[sel], byte=self.byte[sel], data=self.data[sel], loc=self.loc)


def _bytes(buf):
    """The bytes of a buffer (1-D global, or one row per block / thread)."""
    return buf.view(np.uint8)


class AsyncCopies:
    """The cp.async state of a batch of blocks: each thread's committed group
    count, and the pending copies in the order they were issued."""

    def __init__(self, block):
        self.block = block
        self.committed = np.zeros(block.n, np.int64)
        self.pending = []

    def issue(self, s, mask):
        """cp.async(dst, dst_idx, src, src_idx[, pred]) [bytes, cache]."""
        b = self.block
        nbytes = s.attrs["bytes"]
        lanes = np.nonzero(mask)[0]
        pred = np.ones(len(lanes), bool) if len(s.args) < 5 else \
            b.vec(s.args[4]).astype(bool)[lanes]
        kind, buf, arr, off, name = b._target(s.args[0])
        if kind != "shared":
            raise KernelRuntimeError(f"{where(s.loc)}\n  cp.async writes shared memory, not the "
                                     f"{name}")
        dst = _bytes(buf)
        dbyte = (off + b.vec(s.args[1]).astype(np.int64))[lanes] * buf.itemsize
        self._check(s, "destination", name, lanes, dbyte, nbytes, dst.shape[-1], buf.itemsize)
        data = np.zeros((len(lanes), nbytes), np.uint8)
        read = lanes[pred]
        if read.size:
            skind, sbuf, _, soff, sname = b._target(s.args[2])
            if skind != "global":
                raise KernelRuntimeError(f"{where(s.loc)}\n  cp.async reads global memory, not "
                                         f"the {sname}")
            src = _bytes(sbuf)
            sbyte = (soff + b.vec(s.args[3]).astype(np.int64))[read] * sbuf.itemsize
            self._check(s, "source", sname, read, sbyte, nbytes, src.shape[-1], sbuf.itemsize)
            data[pred] = src[sbyte[:, None] + np.arange(nbytes)]
        rows = b.block_of_lane[lanes]
        if b.race is not None:
            b.race.async_issue(s, arr, lanes, rows, dbyte, nbytes, buf.itemsize)
        self.pending.append(_Copies(lane=lanes, group=self.committed[lanes], arr=arr, dst=dst,
                                    row=rows, byte=dbyte, data=data, loc=s.loc))

    def _check(self, s, side, name, lanes, byte, nbytes, total, itemsize):
        bad = (byte < 0) | (byte + nbytes > total)
        if bad.any():
            lane = lanes[np.nonzero(bad)[0][0]]
            i = np.nonzero(lanes == lane)[0][0]
            self.block.out_of_bounds(s, f"cp.async {side}", name, lane, byte[i] // itemsize,
                                     f"{nbytes} bytes", total // itemsize, itemsize)
        bad = byte % nbytes != 0
        if bad.any():
            i = np.nonzero(bad)[0][0]
            b = self.block
            raise KernelRuntimeError(
                f"{where(s.loc)}\n  misaligned cp.async {side} in {name} (element "
                f"{byte[i] // itemsize}, byte {byte[i]}; a {nbytes}-byte copy must be "
                f"{nbytes}-byte aligned) by thread {b._tid(lanes[i])} of block "
                f"{b._bid(lanes[i])}")

    def commit(self, mask):
        """cp.async.commit_group: close each thread's open group."""
        self.committed[mask] += 1

    def wait(self, s, mask):
        """cp.async.wait_group n, or wait_all when n is None."""
        n = s.attrs.get("n")
        if n is None:
            limit = np.where(mask, np.iinfo(np.int64).max, -1)
            self.commit(mask)
        else:
            limit = np.where(mask, self.committed - int(n), -1)
        keep = []
        for p in self.pending:
            done = p.group < limit[p.lane]
            if done.any():
                self._retire(p.take(done))
            if not done.all():
                keep.append(p.take(~done))
        self.pending = keep

    def _retire(self, p):
        nbytes = p.data.shape[1]
        p.dst[p.row[:, None], p.byte[:, None] + np.arange(nbytes)] = p.data
        if self.block.race is not None:
            self.block.race.async_retire(p.arr, p.lane, p.row, p.byte, nbytes, p.loc)

"""Named barriers (bar.sync / bar.arrive id, threads) on the CPU backend,
from the PTX ISA.

Each block has 16 hardware barriers. A barrier counts the threads that
arrived in its current generation, a whole warp at a time (32 per warp
with an active lane, as the GPU counts); when the count reaches the
`threads` operand, the generation completes and its count starts again.
bar.sync arrives and waits for the generation its warps completed or
joined; bar.arrive only arrives. A wait blocks its context (contexts.py)
until other contexts bring the missing threads. With race_check a
generation orders every arrival before the waits it releases.
"""
import numpy as np


class NamedBarriers:
    """The hardware barriers of a batch of blocks."""

    def __init__(self, block):
        self.block = block
        self.count = {}         # (row, id) -> threads arrived in the current generation
        self.gen = {}           # (row, id) -> generations completed

    def _arrive(self, s, mask):
        """Count the warps of `mask` at their block's barrier; {(row, id):
        (the generation the last of them is in, its thread count, lanes)}."""
        b = self.block
        lanes = np.nonzero(mask)[0]
        rows = b.block_of_lane[lanes]
        ids = b.vec(s.args[0]).astype(np.int64)[lanes]
        threads = b.vec(s.args[1]).astype(np.int64)[lanes]
        warps = b.thread_of_lane[lanes] // 32
        keys = rows * 16 + ids
        out = {}
        for k in np.unique(keys):
            sel = keys == k
            key = (int(rows[sel][0]), int(ids[sel][0]))
            n = int(threads[sel][0])
            if b.race is not None:
                b.race.release(("named",) + key, lanes[sel])
            count = self.count.get(key, 0) + 32 * len(np.unique(warps[sel]))
            gen = self.gen.get(key, 0)
            while count >= n:
                count, gen = count - n, gen + 1
                if b.race is not None:
                    b.race.complete(("named",) + key)
            self.count[key], self.gen[key] = count, gen
            out[key] = (gen + 1 if count else gen, n, lanes[sel])
        return out

    def arrive(self, s, mask):
        """bar.arrive id, threads"""
        self._arrive(s, mask)

    def sync(self, s, mask):
        """bar.sync id, threads"""
        b = self.block
        targets = self._arrive(s, mask)

        def ready():
            return all(self.gen[k] >= t for k, (t, n, lanes) in targets.items())

        def what():
            k, (t, n, lanes) = next((k, v) for k, v in targets.items() if self.gen[k] < v[0])
            m = np.zeros(b.n, bool)
            m[lanes] = True
            return (f"{b.sched._lanes(m)} wait at named barrier {k[1]} for {n} threads, of "
                    f"which {self.count[k]} have arrived")

        if not ready():
            b.sched.block_until(ready, s.loc, what)
        if b.race is not None:
            for k, (t, n, lanes) in targets.items():
                b.race.acquire(("named",) + k, lanes)

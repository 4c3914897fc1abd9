"""A producer/consumer pipeline over a ring of shared-memory stages, made of
mbarriers (CuTe: PipelineTmaAsync).

Each stage has a `full` barrier, completed by the producer's TMA bytes, and
an `empty` barrier, completed when every consumer has released the stage.
Both sides walk the ring with a (stage, phase) pair that they keep in plain
variables, so that it can be carried through dynamic loops:

    pipe = moye.TmaPipeline(STAGES, consumers=8)   # 8 arrivals free a stage
    if moye.thread_idx.x == 0:
        pipe.init()                                # before a sync_threads
    moye.sync_threads()
    stage, phase = 0, 0
    if producer:                                   # one thread
        for k in range(k_tiles):
            bar = pipe.producer_acquire(stage, phase, load_a.bytes)
            moye.tma_load(load_a, sA[:, :, stage], (m0, k * bK), bar)
            stage, phase = pipe.advance(stage, phase)
    else:
        for k in range(k_tiles):
            pipe.consumer_wait(stage, phase)
            ...                                    # read sA[:, :, stage]
            pipe.consumer_release(stage)           # `consumers` arrivals in all
            stage, phase = pipe.advance(stage, phase)
"""
from .builtins import ifelse
from .hopper import (fence_barrier_init, mbarrier_arrive, mbarrier_arrive_expect_tx,
                     mbarrier_array, mbarrier_init, mbarrier_wait)
from ..compiler.tracer import KernelError


class TmaPipeline:
    """`stages` full/empty mbarrier pairs in shared memory; a stage is free
    again after `consumers` arrivals on its empty barrier from each of the
    `peers` blocks of the cluster whose TMA loads multicast into it (peers=1:
    this block alone; with peers=c, the ranks 0..c-1, each releasing the
    stage in every one of them)."""

    def __init__(self, stages, consumers, peers=1):
        if not isinstance(stages, int) or stages < 1:
            raise KernelError(f"TmaPipeline: stages must be a static int >= 1, got {stages!r}")
        if not isinstance(peers, int) or not 1 <= peers <= 16:
            raise KernelError(f"TmaPipeline: peers must be a static int in 1..16, got {peers!r}")
        self.stages, self.consumers, self.peers = stages, consumers, peers
        self.full = mbarrier_array(stages)
        self.empty = mbarrier_array(stages)

    def init(self):
        """Initialize the barriers (one thread, before a sync_threads)."""
        for s in range(self.stages):
            mbarrier_init(self.full[s], 1)
            mbarrier_init(self.empty[s], self.consumers * self.peers)
        fence_barrier_init()

    def producer_acquire(self, stage, phase, nbytes):
        """Wait until `stage` is free, announce the `nbytes` its loads will
        bring, and return the barrier they complete on (the one producer
        thread calls it). The first pass over the ring does not wait."""
        mbarrier_wait(self.empty[stage], phase ^ 1)
        mbarrier_arrive_expect_tx(self.full[stage], nbytes)
        return self.full[stage]

    def consumer_wait(self, stage, phase):
        """Wait until the loads into `stage` have landed."""
        mbarrier_wait(self.full[stage], phase)

    def consumer_release(self, stage):
        """This thread is done reading `stage` (one of `consumers` arrivals),
        in every peer block (which multicast into it)."""
        if self.peers == 1:
            mbarrier_arrive(self.empty[stage])
        else:
            for rank in range(self.peers):
                mbarrier_arrive(self.empty[stage], cta=rank)

    def advance(self, stage, phase):
        """The next (stage, phase): the phase flips when the ring wraps."""
        stage = stage + 1
        wrap = stage == self.stages                 # static when stage is (ifelse folds it)
        return ifelse(wrap, 0, stage), ifelse(wrap, phase ^ 1, phase)


__all__ = ["TmaPipeline"]

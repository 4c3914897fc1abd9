"""Execution contexts: the two sides of a divergent `if` making progress
together on the CPU backend.

A context is a set of lanes running one piece of the kernel in lock-step.
The batch starts as one context (the root, in the caller's thread). When a
dynamic `if` has active lanes on both sides, the context runs the
then-side and leaves the else-side *pending*; if the then-side finishes
without blocking, the context runs the else-side itself, as plain
lock-step execution would (so ordinary kernels pay nothing). If it blocks
(an mbarrier wait whose phase has not completed, a named barrier or a
sync_threads that other threads have not reached), the scheduler looks
for another context that can run: a blocked one whose condition now
holds, or a pending side, which then starts as a context of its own. The
join after the `if` waits until that side has finished. A kernel whose
named barriers take run-time ids starts as one context a warp (or a
warpgroup, where it has wgmma) instead (`apart`), each with its own values.

Each started context runs in a Python thread used strictly as a
coroutine: a baton (one semaphore per context) lets exactly one run at a
time, and it changes hands only when the holder blocks, yields (a
fruitless mbarrier_try_wait) or finishes, always to the first runnable
context after it in creation order; so a run is deterministic. When no
context can run, the holder raises a deadlock error naming, per blocked
context, the source line it waits at and what it waits for; an error in
any context ends all of them and is raised by run_kernel.
"""
import threading

import numpy as np

from .errors import KernelRuntimeError, where


class _Abort(BaseException):
    """Unwinds a context's thread when the run ends with an error elsewhere."""


class Context:
    """Lanes running one side of the kernel: `body` under `mask` (None for the
    root, which runs in the caller's thread)."""
    __slots__ = ("body", "mask", "env", "thread", "sem", "ready", "what", "loc", "done",
                 "joining", "at_sync", "released", "sync_mask", "left")

    def __init__(self, body=None, mask=None, env=None):
        self.body, self.mask = body, mask
        self.env = env              # its values (the block's env while it runs)
        self.thread = None
        self.sem = threading.Semaphore(0)
        self.ready = None           # while blocked: whether it may go on
        self.what = None            # while blocked: what it waits for (a sentence)
        self.loc = None             # while blocked: the statement it waits at
        self.done = False
        self.joining = False        # blocked at the end of an `if`, for its other side
        self.at_sync = False        # blocked at sync_threads
        self.released = False
        self.sync_mask = None       # at sync_threads: its lanes there
        self.left = None            # when done: its lanes that left a loop (_Block.run)


def _always():
    return True


def joined(a, b):
    """Two results of _Block.run (the lanes that left by break or continue) as one."""
    if not a or not b:
        return a or b
    return {k: a.get(k, False) | b.get(k, False) for k in a.keys() | b.keys()}


class Scheduler:
    """The contexts of a batch of blocks and the baton they pass."""

    def __init__(self, block):
        self.block = block
        self.root = Context(env=block.env)
        self.root.thread = threading.current_thread()
        self.contexts = [self.root]     # started or pending, in creation order
        self.current = self.root
        self.error = None
        self.aborted = False

    @property
    def concurrent(self):
        """Whether another context than the running one is live."""
        return len(self.contexts) > 1

    # -- the two sides of an `if` --------------------------------------------------------
    def fork(self, s, then_mask, else_mask):
        """Run the If `s` whose sides both have active lanes; return the
        lanes that left the loop around it (as _Block.run)."""
        side = Context(s.orelse, else_mask, self.current.env)     # the values before the `if`
        self.contexts.append(side)
        left = self.block.run(s.then, then_mask)
        if side.thread is None:             # never needed on its own: run it here
            self.contexts.remove(side)
            return joined(left, self.block.run(s.orelse, else_mask))
        if not side.done:
            me = self.current
            me.joining = True
            self.block_until(lambda: side.done, s.loc, lambda: (
                f"{self._lanes(then_mask)} wait at the end of this `if` for its other side "
                f"({self._lanes(else_mask)})"))
            me.joining = False
        return joined(left, side.left)

    def apart(self, body, masks):
        """Run `body` under each of `masks` as a context of its own, the first
        in this one, and return once all are done: the warps of a kernel
        whose named barriers take run-time ids (each may wait at its own
        while the others go on, as warps do on the GPU). Each keeps its own
        values (they run the same statements at their own pace); arrays,
        shared memory and the barriers stay the block's."""
        sides = [Context(body, m, dict(self.block.env)) for m in masks[1:]]
        self.contexts.extend(sides)
        self.block.run(body, masks[0])
        me = self.current
        me.joining = True
        self.block_until(lambda: all(side.done for side in sides), None, lambda: (
            f"{self._lanes(masks[0])} wait at the kernel's end for the other warps"))
        me.joining = False

    def _main(self, ctx):
        ctx.sem.acquire()
        if self.aborted:
            return
        try:
            ctx.left = self.block.run(ctx.body, ctx.mask)
            ctx.done = True
            self.contexts.remove(ctx)
            nxt = self._next(None)
            if nxt is None:
                raise self.deadlock()
            self._switch(nxt)
            self._wake(nxt)
        except _Abort:
            pass
        except BaseException as e:          # noqa: B902 (raised again by run_kernel)
            self._fail(e)

    def _switch(self, ctx):
        """The baton passes to `ctx`: it runs next, on its own values."""
        self.current = ctx
        self.block.env = ctx.env

    def _wake(self, ctx):
        if ctx.thread is None:
            ctx.thread = threading.Thread(target=self._main, args=(ctx,), daemon=True,
                                          name="moye-cpu-context")
            ctx.thread.start()
        ctx.sem.release()

    # -- blocking ----------------------------------------------------------------------------
    def block_until(self, ready, loc, what):
        """Let other contexts run until `ready()` holds (the caller found it
        false); `what()` says what this context waits for, for a deadlock."""
        me = self.current
        me.ready, me.loc, me.what = ready, loc, what
        try:
            while not ready():
                nxt = self._next(me)
                if nxt is None:
                    raise self.deadlock(first=me)
                self._hand(me, nxt)
        finally:
            me.ready = me.loc = me.what = None

    def yield_(self):
        """Let the other runnable contexts run once (a fruitless try_wait);
        whether any did."""
        if not self.concurrent:
            return False
        me = self.current
        nxt = self._next(me)
        if nxt is None:
            return False
        me.ready = _always
        try:
            self._hand(me, nxt)
        finally:
            me.ready = None
        return True

    def _hand(self, me, nxt):
        self._switch(nxt)
        self._wake(nxt)
        me.sem.acquire()
        if self.aborted:
            if me is self.root:
                self._join_threads()
                raise self.error
            raise _Abort()

    def _next(self, me):
        """The first runnable context after `me` in creation order, `me` excluded
        (from the first with `me` None)."""
        ctxs = self.contexts
        start = ctxs.index(me) + 1 if me is not None else 0
        for c in ctxs[start:] + ctxs[:start]:
            if c is me:
                continue
            if c.thread is None:            # a pending side: start it
                return c
            if c.ready is not None and c.ready():
                return c
        return None

    # -- the end of a run ------------------------------------------------------------------
    def _fail(self, error):
        self.error, self.aborted = error, True
        for c in self.contexts:
            c.sem.release()

    def close(self):
        """End every context's thread (after an error in the root)."""
        if len(self.contexts) > 1 and not self.aborted:
            self.aborted = True
            self.error = self.error or KernelRuntimeError("the kernel run ended")
            for c in self.contexts:
                if c is not self.root:
                    c.sem.release()
            self._join_threads()

    def _join_threads(self):
        for c in list(self.contexts):
            if c.thread is not None and c is not self.root:
                c.thread.join(timeout=5)

    # -- sync_threads -----------------------------------------------------------------------
    def sync_threads(self, s, mask):
        """bar.sync 0 with every thread of the block. With one live context,
        the lanes of `mask` must be every lane (lock-step). Otherwise wait
        until every other context has started (a pending side of an `if`
        runs until it reaches a barrier or ends) and every live one is at a
        sync_threads or waiting for an `if`'s other side; then the lanes at
        sync_threads must be every lane.

        The rule, from PTX's bar.sync: a barrier over the whole block
        completes when every thread of the block that has not exited (run
        the kernel's `return`) has arrived, and as often as the others. A
        thread that takes another path (the side of an `if` without the
        barrier, fewer trips of a loop around it) hangs or corrupts the
        block on the GPU (bar.sync is .aligned); here it raises
        KernelRuntimeError naming the line and the threads that arrived and
        those that did not."""
        race = self.block.race
        if not self.concurrent:
            if not self._whole_blocks(mask | self.block.exited):
                raise self._partial_sync(s, mask)
            if race is not None:
                race.barrier(block_only=True)
            return
        me = self.current
        me.at_sync, me.released, me.sync_mask = True, False, mask

        def complete():
            if me.released:
                return True
            if any(c.thread is None for c in self.contexts):
                return False                # a pending side: start it
            live = self.contexts
            if not all(c.at_sync or c.joining for c in live):
                return False
            arrived = self.block.exited.copy()
            for c in live:
                if c.at_sync:
                    arrived |= c.sync_mask
            if not self._whole_blocks(arrived):
                raise self._partial_sync(s, arrived)
            for c in live:
                if c.at_sync:
                    c.at_sync, c.released = False, True
            if race is not None:
                race.barrier(block_only=True)
            return True

        if not complete():
            self.block_until(complete, s.loc, lambda: (
                f"{self._lanes(mask)} wait at sync_threads, which "
                + ", ".join(self._lanes(c.mask) + " (at " + where(c.loc) + ")"
                            for c in self.contexts if c.ready is not None and c is not me
                            and not c.at_sync and not c.joining)
                + " have not reached"))
        me.at_sync = me.released = False

    def _whole_blocks(self, arrived):
        """Whether each block of the batch has all its threads in `arrived`
        or none: a block none of whose threads is here (it left a loop
        around the barrier after fewer trips than another block: a
        grid-stride loop) reaches no barrier of the others."""
        per_block = arrived.reshape(-1, self.block.threads)
        return bool((per_block.all(1) | ~per_block.any(1)).all())

    def _partial_sync(self, s, arrived):
        """The error of a sync_threads that the lanes not in `arrived` (nor
        exited) do not reach."""
        b = self.block
        done = arrived | b.exited
        per_block = done.reshape(-1, b.threads)
        partial = per_block.any(1) & ~per_block.all(1)
        first = int(np.nonzero(np.repeat(partial, b.threads) & ~done)[0][0])
        mine = b.block_of_lane == b.block_of_lane[first]        # that lane's block only
        came, ended = int((arrived & mine).sum()), int((b.exited & mine).sum())
        return KernelRuntimeError(
            f"{where(s.loc)}\n  sync_threads is not reached by every thread of block "
            f"{b._bid(first)}: {came} of its {b.threads} threads arrived"
            + (f" ({self._lanes(arrived & mine)})" if came else "")
            + (f", {ended} had returned" if ended else "")
            + f", {self._lanes(~done & mine)} did not (a barrier over the block must be "
            "reached by all its threads that have not returned, as many times each)")

    # -- messages -------------------------------------------------------------------------
    def _lanes(self, mask):
        """`thread (t) of block (b)` for the first lane of `mask`, with how many more."""
        b = self.block
        lanes = np.nonzero(mask)[0] if mask is not None else np.arange(b.n)
        if lanes.size == 0:
            return "no thread"
        first = int(lanes[0])
        more = f" and {lanes.size - 1} more" if lanes.size > 1 else ""
        return f"thread {b._tid(first)} of block {b._bid(first)}{more}"

    def deadlock(self, first=None):
        """The error of a run where no context can go on."""
        blocked = [c for c in self.contexts if c.what is not None]
        blocked.sort(key=lambda c: (c is not first, c.joining))
        if not blocked:
            return KernelRuntimeError("the kernel\n  deadlock: no thread can go on")
        head, rest = blocked[0], blocked[1:]
        lines = [f"{where(head.loc)}\n  deadlock: {head.what()}"]
        lines += [f"  and at {where(c.loc)}: {c.what()}" for c in rest]
        return KernelRuntimeError("\n".join(lines))

    def others(self):
        """What the blocked contexts other than the running one wait for (lines
        to add to an error)."""
        return "".join(f"\n  and at {where(c.loc)}: {c.what()}"
                       for c in self.contexts if c.ready is not None and c.what is not None
                       and c is not self.current)

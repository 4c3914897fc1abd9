"""Trace-time checks of a dynamic thread index against the block: a tiled
copy, a tiled MMA or a thread layout of N threads, sliced in a kernel
launched with a block of another size, silently leaves work undone (a block
of fewer threads) or repeats it out of place (more threads, all slicing it).

The rule, for `get_slice(tiled, i)` and `parallelize(a, thr_layout, i)` with
a dynamic `i`:
- the block has fewer threads than N (or `i` is `thread_idx.x` and the
  block's x extent is below N): always an error;
- `i` is `thread_idx.x` itself, the block's x extent is above N, and no
  kernel `if` guards the slice: an error. Kernels that give the extra
  threads other work slice by a derived index (`tid - 128`, `tid % 128`,
  warp specialization) or under a guard, and pass.
"""
import math

from ..array.threads import on_dynamic_thread_index
from .tracer import KernelError, tracing, current


@on_dynamic_thread_index
def check_against_block(what, thr_idx, num_threads):
    if not tracing() or type(num_threads) is not int:
        return
    builder = current()
    block = getattr(builder, "block", None)
    if block is None:
        return
    threads = math.prod(block)
    raw = builder.specials.get("threadIdx.x") is thr_idx
    have = block[0] if raw else threads
    if have < num_threads:
        whose = f"thread_idx.x runs over {block[0]}" if raw else f"the block has {threads} threads"
        raise KernelError(f"{what} has {num_threads} threads but {whose} (block {block}): "
                          f"the work of threads {have}..{num_threads - 1} would be left undone; "
                          f"launch with {num_threads} threads or build it for {have}")
    if raw and block[0] > num_threads and not builder.dynamic_ifs:
        raise KernelError(f"{what} has {num_threads} threads but is sliced by thread_idx.x, "
                          f"which runs over {block[0]} (block {block}): threads "
                          f"{num_threads}..{block[0] - 1} would take slices outside it; launch "
                          f"with {num_threads} threads, or guard the slice with "
                          f"`if moye.thread_idx.x < {num_threads}:`")
